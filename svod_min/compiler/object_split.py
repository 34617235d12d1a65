"""Cut the object of a batch unit (gcc or clang) into one relocatable object per source.

A unit (see :mod:`.batch_unit`) is compiled with ``-ffunction-sections
-fdata-sections`` into one object: assembling once per source cost ~3-6 ms
of process start-up each, as much as compiling the kernel. Every
name a source defines carries that source's suffix (``name__svuN__``), so
each section of the unit object belongs to the one source whose suffix its
defined symbols (or its own name) carry. A source's object is its own
sections, copies of the shared constant pools (``SHF_MERGE`` sections without
relocations: gcc's hold only local labels, clang's may also hold small
``static const`` tables of several sources, each keeping only its own
source's names) its relocations reach, a symbol table with the suffix
removed, and its relocations, unchanged but for the symbol indices.

Anything else — a section no single source owns, a relocation into another
source's section, a symbol of another source, section groups, REL
relocations, non-allocated sections other than ``.note.GNU-stack`` — makes
:func:`split_object` return None, and the caller takes a slower path
(gcc: the assembly-level cut). It never guesses.
"""

from __future__ import annotations

from typing import Dict, List, NamedTuple, Optional, Sequence, Set

from ..jit_loader.elf import (
    EHDR,
    RELA,
    SHDR,
    SHF_INFO_LINK,
    SHF_MERGE,
    SHN_ABS,
    SHN_LORESERVE,
    SHN_UNDEF,
    SHT_NOBITS,
    SHT_NULL,
    SHT_RELA,
    SHT_STRTAB,
    SHT_SYMTAB,
    STB_LOCAL,
    STT_FILE,
    STT_SECTION,
    SYM,
    Section,
    Symbol,
    parse_object,
)
from ..jit_loader.layout import ARCHES

_STACK_NOTE = ".note.GNU-stack"
# Sections the parser reads for us: tables rebuilt for every piece.
_TABLES = (SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NULL)


class _Unit(NamedTuple):
    header: tuple
    data: bytes
    sections: List[Section]
    symbols: List[Symbol]
    relocations: Dict[int, list]
    owners: Dict[int, int]  # section index -> source index
    pools: Set[int]  # shared constant-pool sections
    pool_owners: Dict[int, int]  # symbol index -> its source, for the named symbols inside pools
    defined: Dict[int, List[Symbol]]  # section index -> the symbols defined in it
    undefined: List[Symbol]  # named undefined symbols


def split_object(obj: bytes, suffix: str, indices: Sequence[int]) -> Optional[Dict[int, bytes]]:
    """Source index -> its own object, cut from the unit object ``obj``; None when it cannot be cut.

    ``suffix`` is the per-source name suffix with one ``%d`` (batch_unit.SUFFIX).
    """
    try:
        unit = _read_unit(obj, suffix, set(indices))
        if unit is None:
            return None
        out: Dict[int, bytes] = {}
        for index in indices:
            piece = _piece(unit, index, suffix % index)
            if piece is None:
                return None
            out[index] = piece
        return out
    except Exception:  # a malformed or surprising object: the caller's slower path decides
        return None


def _owner(name: str, suffix: str, indices: Set[int]) -> Optional[int]:
    head, sep, tail = suffix.partition("%d")
    at = name.find(head)
    if at < 0 or not sep:
        return None
    end = name.find(tail, at + len(head))
    number = name[at + len(head) : end] if end >= 0 else ""
    return int(number) if number.isdigit() and int(number) in indices else -1


def _read_unit(obj: bytes, suffix: str, indices: Set[int]) -> Optional[_Unit]:
    parsed = parse_object(obj, tuple(ARCHES))
    owners: Dict[int, int] = {}
    pools: Set[int] = set()
    pool_owners: Dict[int, int] = {}
    defined: Dict[int, List[Symbol]] = {}
    for sym in parsed.symbols[1:]:
        defined.setdefault(sym.shndx, []).append(sym)
    for sec in parsed.sections:
        if sec.type in _TABLES or sec.name == _STACK_NOTE or (sec.is_alloc and sec.size == 0):
            continue
        if not sec.is_alloc:
            return None  # debug info, groups, notes...: not cut here
        named = _owner(sec.name, suffix, indices)
        found = {_owner(s.name, suffix, indices) for s in defined.get(sec.index, ()) if s.type != STT_SECTION}
        found.discard(None)
        if named is not None:
            found.add(named)
        if len(found) == 1 and -1 not in found:
            owners[sec.index] = found.pop()
        elif named is None and -1 not in found and sec.flags & SHF_MERGE and sec.index not in parsed.relocations:
            pools.add(sec.index)
            for sym in defined.get(sec.index, ()):
                owner = _owner(sym.name, suffix, indices)
                if owner is not None:
                    pool_owners[sym.index] = owner
        else:
            return None
    undefined = [s for s in defined.get(SHN_UNDEF, ()) if s.name]
    if any(_owner(s.name, suffix, indices) is not None for s in undefined):
        return None  # another source's name, left undefined: it would not resolve
    if any(s.type != STT_FILE for s in defined.get(SHN_ABS, ())):  # absolute values other than the file name
        return None
    header = EHDR.unpack_from(obj, 0)
    return _Unit(
        header, obj, parsed.sections, parsed.symbols, parsed.relocations, owners, pools, pool_owners, defined, undefined
    )


def _piece(unit: _Unit, index: int, own_suffix: str) -> Optional[bytes]:
    own = [i for i, o in unit.owners.items() if o == index]
    if not own:
        return None
    keep = set(own)
    for i in own:
        for rel in unit.relocations.get(i, []):
            sym = unit.symbols[rel.sym]
            if sym.shndx == SHN_UNDEF or sym.shndx >= SHN_LORESERVE:
                continue
            if sym.shndx in unit.pools and unit.pool_owners.get(rel.sym, index) == index:
                keep.add(sym.shndx)
            elif unit.owners.get(sym.shndx) != index:
                return None  # reaches into another source's section
    return _write(unit, sorted(keep), index, own_suffix)


def _write(unit: _Unit, keep: List[int], index: int, own_suffix: str) -> bytes:
    """A relocatable object of sections ``keep`` of the unit, their symbols and relocations."""
    sections = unit.sections
    new_index = {old: new for new, old in enumerate(keep, start=1)}
    stack_note = next((s for s in sections if s.name == _STACK_NOTE), None)

    needed = {rel.sym for i in keep for rel in unit.relocations.get(i, [])}
    # Of a shared pool's symbols (clang labels every constant of the unit) only those this piece uses:
    # all of them in every piece would make a batch quadratic.
    placed = [s for i in keep for s in unit.defined.get(i, ()) if i not in unit.pools or s.index in needed]
    externals = [s for s in unit.undefined if s.index in needed]  # only the names this piece uses
    ordered = [s for s in placed if s.bind == STB_LOCAL] + [s for s in placed + externals if s.bind != STB_LOCAL]
    locals_count = sum(1 for s in placed if s.bind == STB_LOCAL)
    sym_index = {s.index: i for i, s in enumerate(ordered, start=1)}
    sym_index[0] = 0

    strtab = _Strings()
    symtab = bytearray(SYM.size)  # the null symbol
    for s in ordered:
        shndx = new_index.get(s.shndx, s.shndx if s.shndx >= SHN_LORESERVE else SHN_UNDEF)
        name = strtab.add(s.name.replace(own_suffix, "")) if s.name else 0
        symtab += SYM.pack(name, (s.bind << 4) | s.type, s.other, shndx, s.value, s.size)

    shstr = _Strings()
    headers: List[bytes] = [bytes(SHDR.size)]
    body = bytearray()
    offset = EHDR.size

    def place(blob: bytes, align: int) -> int:
        nonlocal offset
        pad = (-offset) % max(align, 1)
        body.extend(bytes(pad))
        start = offset + pad
        body.extend(blob)
        offset = start + len(blob)
        return start

    for old in keep:
        sec = sections[old]
        blob = b"" if sec.type == SHT_NOBITS else unit.data[sec.offset : sec.offset + sec.size]
        at = place(blob, sec.align)
        headers.append(
            SHDR.pack(
                shstr.add(sec.name.replace(own_suffix, "")),
                sec.type,
                sec.flags,
                0,
                at,
                sec.size,
                0,
                0,
                sec.align,
                sec.entsize,
            )
        )
    symtab_index = len(keep) + 1 + sum(1 for old in keep if unit.relocations.get(old))
    if stack_note is not None:
        symtab_index += 1
    for old in keep:
        relocs = unit.relocations.get(old)
        if not relocs:
            continue
        blob = b"".join(RELA.pack(r.offset, (sym_index[r.sym] << 32) | r.type, r.addend) for r in relocs)
        at = place(blob, 8)
        headers.append(
            SHDR.pack(
                shstr.add(".rela" + sections[old].name.replace(own_suffix, "")),
                SHT_RELA,
                SHF_INFO_LINK,
                0,
                at,
                len(blob),
                symtab_index,
                new_index[old],
                8,
                RELA.size,
            )
        )
    if stack_note is not None:
        headers.append(SHDR.pack(shstr.add(_STACK_NOTE), stack_note.type, 0, 0, offset, 0, 0, 0, 1, 0))
    at = place(bytes(symtab), 8)
    headers.append(
        SHDR.pack(
            shstr.add(".symtab"), SHT_SYMTAB, 0, 0, at, len(symtab), symtab_index + 1, locals_count + 1, 8, SYM.size
        )
    )
    at = place(strtab.blob(), 1)
    headers.append(SHDR.pack(shstr.add(".strtab"), SHT_STRTAB, 0, 0, at, len(strtab.blob()), 0, 0, 1, 0))
    names_at = shstr.add(".shstrtab")
    at = place(shstr.blob(), 1)
    headers.append(SHDR.pack(names_at, SHT_STRTAB, 0, 0, at, len(shstr.blob()), 0, 0, 1, 0))
    shoff = place(b"".join(headers), 8)
    h = unit.header
    elf_header = EHDR.pack(
        h[0], h[1], h[2], h[3], 0, 0, shoff, h[7], EHDR.size, 0, 0, SHDR.size, len(headers), len(headers) - 1
    )
    return elf_header + bytes(body)


class _Strings:
    """A string table under construction (offset 0 is the empty name)."""

    def __init__(self) -> None:
        self._data = bytearray(b"\0")
        self._seen: Dict[str, int] = {"": 0}

    def add(self, name: str) -> int:
        found = self._seen.get(name)
        if found is None:
            found = self._seen[name] = len(self._data)
            self._data += name.encode() + b"\0"
        return found

    def blob(self) -> bytes:
        return bytes(self._data)


__all__ = ["split_object"]
