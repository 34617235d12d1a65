"""A validating reader for 64-bit little-endian relocatable ELF objects.

Only what the relocator needs is parsed: the header, the section table, the
symbol table and RELA sections. Everything is read with precompiled
``struct`` formats and every offset is bounds-checked before use, so a
malformed object gives :class:`ElfFormatError`, never an IndexError or a
read of the wrong bytes.

Why not pyelftools here: constructing ``elftools.elf.elffile.ELFFile`` alone
costs several times the whole cold-load budget (figures: docs/ARCHITECTURE.md).
pyelftools remains the independent cross-check in the tests and the
source of names in diagnostics (:func:`describe_machine`).
"""

from __future__ import annotations

import operator
import struct
from dataclasses import dataclass, field
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from ..error import ElfFormatError, UnsupportedRelocationError

# --- constants we rely on (System V gABI) -----------------------------------

ET_REL = 1
EM_X86_64 = 62
EM_AARCH64 = 183
EM_PPC64 = 21
EM_RISCV = 243
EM_LOONGARCH = 258

SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 0, 1, 2, 3, 4
SHT_NOBITS, SHT_REL = 8, 9
SHT_SYMTAB_SHNDX = 18

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR, SHF_TLS = 0x1, 0x2, 0x4, 0x400
SHF_MERGE, SHF_INFO_LINK = 0x10, 0x40

SHN_UNDEF, SHN_ABS, SHN_COMMON, SHN_XINDEX = 0, 0xFFF1, 0xFFF2, 0xFFFF
SHN_LORESERVE = 0xFF00

STB_LOCAL, STB_GLOBAL, STB_WEAK = 0, 1, 2
STT_NOTYPE, STT_OBJECT, STT_FUNC, STT_SECTION, STT_FILE, STT_TLS = 0, 1, 2, 3, 4, 6
STT_GNU_IFUNC = 10
SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY = 14, 15, 16

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_RELA = struct.Struct("<QQq")
#: The record formats, for code that writes objects (compiler/object_split.py).
EHDR, SHDR, SYM, RELA = _EHDR, _SHDR, _SYM, _RELA
# Tuples straight from their fields (a NamedTuple's own __new__ is a Python call per row): a cold
# load builds a few dozen rows, and this is most of what parsing costs.
_new = tuple.__new__
#: Largest section alignment we honour (the image base is page-aligned).
MAX_ALIGN = 4096
# A section header as a Section's fields after (index, name): sh_addr (0 in a relocatable object,
# and unused) is skipped, so a row is (index, name) + the unpacked header minus its sh_name.
_SHDR_ROW = struct.Struct("<IIQ8xQQIIQQ")
#: The alignments a section may have (0 and 1 both mean none).
_ALIGNMENTS = frozenset([0] + [1 << k for k in range(MAX_ALIGN.bit_length())])

_ET_NAMES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC (executable)", 3: "ET_DYN (shared object)", 4: "ET_CORE"}


class Section(NamedTuple):
    """One section header (tuples: a cold load makes a dozen of these, and tuples cost least)."""

    index: int
    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int

    @property
    def is_alloc(self) -> bool:
        """SHF_ALLOC, and not an SHT_NULL header (inactive whatever its other fields say, gABI)."""
        return bool(self.flags & SHF_ALLOC) and self.type != SHT_NULL

    @property
    def is_nobits(self) -> bool:
        return self.type == SHT_NOBITS


class Symbol(NamedTuple):
    """One symbol table entry (``other`` is st_other: visibility, and ppc64le's local entry point in bits 5-7)."""

    index: int
    name: str
    bind: int
    type: int
    shndx: int
    value: int
    size: int
    other: int = 0


class Relocation(NamedTuple):
    """One RELA entry: patch the target section at ``offset`` using symbol ``sym``."""

    offset: int
    type: int
    sym: int
    addend: int


@dataclass
class ElfObject:
    data: bytes
    machine: int
    sections: List[Section]
    symbols: List[Symbol] = field(default_factory=list)
    # target section index -> its relocations
    relocations: Dict[int, List[Relocation]] = field(default_factory=dict)


def describe_machine(machine: int) -> str:
    """A readable name for an e_machine value (pyelftools' table, loaded only on error)."""
    try:
        from elftools.elf.enums import ENUM_E_MACHINE
    except ImportError:  # pragma: no cover - pyelftools is a declared dependency
        return "EM %d" % machine
    for name, value in ENUM_E_MACHINE.items():
        if value == machine:
            return "%s (%d)" % (name, machine)
    return "EM %d" % machine


def _fail(msg: str) -> ElfFormatError:
    return ElfFormatError("malformed ELF object: " + msg)


def _names(data: bytes, table: Section, offsets: Sequence[int], what: str) -> List[str]:
    """The NUL-terminated strings at ``offsets`` in string table ``table`` (offset 0 is the empty name)."""
    strings = data[table.offset : table.offset + table.size]
    if strings[:1] == b"\0" and strings.isascii():  # the usual table: one character per byte, "" at 0
        text = strings.decode("ascii")
        try:
            return [text[offset : text.index("\0", offset)] for offset in offsets]
        except ValueError:
            pass  # an offset past the table or an unterminated name: the loop below says which
    out = []
    for offset in offsets:
        if not offset:
            out.append("")
            continue
        end = strings.find(b"\0", offset)
        if end < 0:
            if offset >= table.size:
                raise _fail(
                    "%s name offset %d is outside %s (%d bytes)"
                    % (what, offset, table.name or "string table", table.size)
                )
            raise _fail("%s name at offset %d is not NUL-terminated" % (what, offset))
        out.append(strings[offset:end].decode("utf-8", errors="replace"))
    return out


def _read_header(data: bytes, supported: Tuple[int, ...]) -> tuple:
    if len(data) < _EHDR.size:
        raise _fail("truncated: %d bytes, the ELF header alone needs %d" % (len(data), _EHDR.size))
    fields = _EHDR.unpack_from(data, 0)
    ident = fields[0]
    if ident[:4] != b"\x7fELF":
        raise ElfFormatError("not an ELF object: bad magic %r" % ident[:4])
    if ident[4] != 2:
        raise ElfFormatError("unsupported ELF class %d: only 64-bit (ELFCLASS64) objects are loaded" % ident[4])
    if ident[5] != 1:
        raise ElfFormatError("unsupported data encoding %d: only little-endian objects are loaded" % ident[5])
    e_type, machine = fields[1], fields[2]
    if e_type != ET_REL:
        raise ElfFormatError(
            "not a relocatable object: e_type is %s; compile with -c" % _ET_NAMES.get(e_type, str(e_type))
        )
    if machine not in supported:
        raise ElfFormatError(
            "unsupported machine %s: this loader handles x86_64, aarch64, riscv64, ppc64le and loongarch64"
            % describe_machine(machine)
        )
    return fields


def _section_table(data: bytes, shoff: int, shentsize: int, shnum: int, shstrndx: int) -> List[Section]:
    if shoff == 0:
        raise _fail("no section header table")
    if shentsize != _SHDR.size:
        raise _fail("e_shentsize is %d, expected %d" % (shentsize, _SHDR.size))
    if shnum == 0:  # extended numbering: the real count is in section 0
        if shoff + _SHDR.size > len(data):
            raise _fail("section header table at %d is past the end (%d bytes)" % (shoff, len(data)))
        shnum = _SHDR.unpack_from(data, shoff)[5]
    if shoff + shnum * _SHDR.size > len(data):
        raise _fail(
            "section header table (%d entries at offset %d) runs past the end of the %d-byte object"
            % (shnum, shoff, len(data))
        )
    raw = list(_SHDR_ROW.iter_unpack(data[shoff : shoff + shnum * _SHDR.size]))
    if shstrndx == SHN_XINDEX:
        if not raw:
            raise _fail("extended section name table index, but no section headers")
        shstrndx = raw[0][5]
    if not 0 < shstrndx < shnum:
        raise _fail("section name table index %d out of range (%d sections)" % (shstrndx, shnum))
    names = raw[shstrndx]  # (name, type, flags, offset, size, link, info, addralign, entsize)
    length = len(data)
    if names[1] != SHT_STRTAB:
        raise _fail("section name table (index %d) is not a string table" % shstrndx)
    if names[4] == 0 or names[3] + names[4] > length:
        raise _fail("section name table (index %d) is empty or past the end of the object" % shstrndx)
    columns = list(zip(*raw))  # one tuple per header field, built in C
    labels = _names(data, _new(Section, (shstrndx, "") + names[1:]), columns[0], "section")
    sections = [_new(Section, (i, labels[i]) + r[1:]) for i, r in enumerate(raw)]
    if max(map(operator.add, columns[3], columns[4])) > length or not _ALIGNMENTS.issuperset(columns[7]):
        for sec in sections:  # the slow path names what is wrong (or passes NOBITS and unloaded sections)
            _check_section_bounds(sec, length)
    return sections


def _check_section_bounds(sec: Section, length: int) -> None:
    if sec.type not in (SHT_NOBITS, SHT_NULL) and sec.offset + sec.size > length:
        raise _fail(
            "section %d: offset %d + size %d is past the end of the %d-byte object"
            % (sec.index, sec.offset, sec.size, length)
        )
    if sec.align > 1 and sec.align & (sec.align - 1):
        raise _fail("section %d: alignment %d is not a power of two" % (sec.index, sec.align))
    if sec.flags & SHF_ALLOC and sec.align > MAX_ALIGN:
        raise _fail("section %d: alignment %d exceeds the supported %d" % (sec.index, sec.align, MAX_ALIGN))


def _symbols(data: bytes, sections: List[Section]) -> Tuple[Optional[int], List[Symbol]]:
    tables = [s for s in sections if s.type == SHT_SYMTAB]
    if not tables:
        return None, []
    if len(tables) > 1:
        raise _fail("more than one symbol table")
    symtab = tables[0]
    if symtab.entsize != _SYM.size or symtab.size % _SYM.size:
        raise _fail(
            "symbol table entry size %d / size %d is not a multiple of %d" % (symtab.entsize, symtab.size, _SYM.size)
        )
    if not 0 < symtab.link < len(sections) or sections[symtab.link].type != SHT_STRTAB:
        raise _fail("symbol table's string table index %d is invalid" % symtab.link)
    strtab = sections[symtab.link]
    nsec = len(sections)
    entries = list(_SYM.iter_unpack(data[symtab.offset : symtab.offset + symtab.size]))
    if not entries:
        return symtab.index, []
    columns = list(zip(*entries))  # (name, info, other, shndx, value, size) columns, built in C
    labels = _names(data, strtab, columns[0], "symbol")
    unusual = set(columns[3]).difference((SHN_ABS, SHN_COMMON))  # section indices beyond the ordinary
    if max(unusual, default=0) >= nsec and any(
        nsec <= shndx < SHN_LORESERVE or shndx == SHN_XINDEX for shndx in unusual
    ):
        for i, e in enumerate(entries):  # name the first bad one
            shndx = e[3]
            if shndx >= nsec and shndx < SHN_LORESERVE or shndx == SHN_XINDEX:
                if shndx == SHN_XINDEX:
                    raise UnsupportedRelocationError(
                        "symbol %d uses extended section indices (SHN_XINDEX), not supported" % i
                    )
                raise _fail("symbol %d refers to section %d of %d" % (i, shndx, nsec))
    # (name, info, other, shndx, value, size) -> Symbol(index, name, bind, type, shndx, value, size, other)
    return symtab.index, [
        _new(Symbol, (i, labels[i], e[1] >> 4, e[1] & 0xF, e[3], e[4], e[5], e[2])) for i, e in enumerate(entries)
    ]


def _relocations(data: bytes, obj: ElfObject, symtab_index: Optional[int]) -> None:
    nsec, nsym = len(obj.sections), len(obj.symbols)
    for sec in obj.sections:
        if sec.type == SHT_REL:
            target = obj.sections[sec.info] if sec.info < nsec else None
            if target is not None and target.is_alloc:
                raise UnsupportedRelocationError(
                    "section %s uses REL (implicit addend) relocations; only RELA is supported" % sec.name
                )
            continue
        if sec.type != SHT_RELA:
            continue
        if not 0 < sec.info < nsec:
            raise _fail("relocation section %s targets section %d of %d" % (sec.name, sec.info, nsec))
        target = obj.sections[sec.info]
        if not target.is_alloc:
            continue  # debug info etc.: never loaded, never patched
        if sec.link != symtab_index:
            raise _fail("relocation section %s does not use the symbol table" % sec.name)
        if sec.entsize not in (0, _RELA.size) or sec.size % _RELA.size:
            raise _fail("relocation section %s has entry size %d / size %d" % (sec.name, sec.entsize, sec.size))
        entries = list(_RELA.iter_unpack(data[sec.offset : sec.offset + sec.size]))
        if not entries:
            continue
        places, infos, _addends = zip(*entries)
        if max(infos) >> 32 >= nsym or max(places) >= target.size:
            _refuse_relocation(sec, target, entries, nsym)
        # (offset, info, addend) -> Relocation(offset, type, sym, addend)
        obj.relocations.setdefault(target.index, []).extend(
            [_new(Relocation, (e[0], e[1] & 0xFFFFFFFF, e[1] >> 32, e[2])) for e in entries]
        )


def _refuse_relocation(sec: Section, target: Section, entries: List[tuple], nsym: int) -> None:
    """Name the first relocation of ``sec`` that refers past the symbol table or past its section."""
    for r_offset, r_info, _addend in entries:
        if r_info >> 32 >= nsym:
            raise _fail("relocation in %s refers to symbol %d of %d" % (sec.name, r_info >> 32, nsym))
        if r_offset >= target.size:
            raise _fail(
                "relocation in %s at offset %d is outside %s (%d bytes)"
                % (sec.name, r_offset, target.name, target.size)
            )


def parse_object(data: bytes, supported_machines: Tuple[int, ...] = (EM_X86_64, EM_AARCH64)) -> ElfObject:
    """Parse and validate ``data``; raises ElfFormatError (or another LoaderError)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ElfFormatError("expected ELF object bytes, got %s" % type(data).__name__)
    data = bytes(data)
    fields = _read_header(data, supported_machines)
    shoff, shentsize, shnum, shstrndx = fields[6], fields[11], fields[12], fields[13]
    sections = _section_table(data, shoff, shentsize, shnum, shstrndx)
    obj = ElfObject(data, fields[2], sections)
    symtab_index, obj.symbols = _symbols(data, sections)
    _relocations(data, obj, symtab_index)
    return obj
