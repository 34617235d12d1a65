"""Support code for ``test_linker_oracle.py``: a real linker as the oracle for the relocator.

The recipe, per object:

1. ``relocate(obj, base, resolve)`` gives our image and the address of every
   loaded input section.
2. :func:`link_with_lld` links the same object with ``ld.lld`` under a
   generated linker script that puts each input section at exactly that
   address (one output section per input section name) and defines every
   external with ``--defsym``. lld's own GOT, PLT and range-extension thunks
   land elsewhere, which is fine.
3. :class:`Decoder` reads every relocated field back out of an image (ours or
   lld's) and turns it into the *final* address the code or data refers to,
   following indirections independently in each image: GOT slots (also when
   lld relaxed a GOT load to ``lea`` / a direct call / ``adrp+add``), our call
   stubs and veneers, lld's thunks, and ADRP + LO12 pairs.
4. :func:`compare` requires both images to reach the same final target for
   every relocation, byte-identical data fields when both were given the same
   addresses, identical contents outside the relocated fields, and that
   lld put every defined symbol where ``relocate()`` did.

Only pyelftools is used to read ELF here, never svod_min's own parser, so the
oracle does not share code with what it checks.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import SymbolTableSection

SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4

# --- relocation type numbers (raw r_info_type; pyelftools lacks names for 41/42) ---

X86_TYPES: Dict[str, int] = {
    "R_X86_64_64": 1,
    "R_X86_64_PC32": 2,
    "R_X86_64_PLT32": 4,
    "R_X86_64_GOTPCREL": 9,
    "R_X86_64_PC64": 24,
    "R_X86_64_GOTPCRELX": 41,
    "R_X86_64_REX_GOTPCRELX": 42,
}

A64_TYPES: Dict[str, int] = {
    "R_AARCH64_ABS64": 257,
    "R_AARCH64_ABS32": 258,
    "R_AARCH64_PREL64": 260,
    "R_AARCH64_PREL32": 261,
    "R_AARCH64_MOVW_UABS_G0": 263,
    "R_AARCH64_MOVW_UABS_G0_NC": 264,
    "R_AARCH64_MOVW_UABS_G1": 265,
    "R_AARCH64_MOVW_UABS_G1_NC": 266,
    "R_AARCH64_MOVW_UABS_G2": 267,
    "R_AARCH64_MOVW_UABS_G2_NC": 268,
    "R_AARCH64_MOVW_UABS_G3": 269,
    "R_AARCH64_LD_PREL_LO19": 273,
    "R_AARCH64_ADR_PREL_LO21": 274,
    "R_AARCH64_ADR_PREL_PG_HI21": 275,
    "R_AARCH64_ADR_PREL_PG_HI21_NC": 276,
    "R_AARCH64_ADD_ABS_LO12_NC": 277,
    "R_AARCH64_LDST8_ABS_LO12_NC": 278,
    "R_AARCH64_TSTBR14": 279,
    "R_AARCH64_CONDBR19": 280,
    "R_AARCH64_JUMP26": 282,
    "R_AARCH64_CALL26": 283,
    "R_AARCH64_LDST16_ABS_LO12_NC": 284,
    "R_AARCH64_LDST32_ABS_LO12_NC": 285,
    "R_AARCH64_LDST64_ABS_LO12_NC": 286,
    "R_AARCH64_LDST128_ABS_LO12_NC": 299,
    "R_AARCH64_ADR_GOT_PAGE": 311,
    "R_AARCH64_LD64_GOT_LO12_NC": 312,
}

TYPE_NAMES: Dict[Tuple[str, int], str] = {}
TYPE_NAMES.update({("x86_64", v): k for k, v in X86_TYPES.items()})
TYPE_NAMES.update({("aarch64", v): k for k, v in A64_TYPES.items()})

X86_GOT = frozenset({9, 41, 42})
X86_DATA = frozenset({1, 24})  # (PC32 is data only outside code sections)
A64_DATA = frozenset({257, 258, 260, 261})
A64_HI = {275: "page", 276: "page", 311: "got"}
A64_LO12_SCALE = {277: 0, 278: 0, 284: 1, 285: 2, 286: 3, 299: 4, 312: 3}
A64_MOVW_GROUP = {263: 0, 264: 0, 265: 1, 266: 1, 267: 2, 268: 2, 269: 3}


def type_name(arch: str, rtype: int) -> str:
    return TYPE_NAMES.get((arch, rtype), "type %d" % rtype)


def field_width(arch: str, rtype: int) -> int:
    if arch == "x86_64":
        return 8 if rtype in (1, 24) else 4
    return 8 if rtype in (257, 260) else 4


# --- the object, read with pyelftools ------------------------------------------


@dataclass(frozen=True)
class Reloc:
    section: str  # the patched section
    offset: int
    type: int
    sym_index: int
    sym: str  # symbol name, or the section's name for STT_SECTION symbols
    addend: int
    external: bool  # the symbol is undefined in the object


@dataclass
class ObjectInfo:
    arch: str  # "x86_64" | "aarch64"
    sections: Dict[str, Tuple[int, bool, bool]]  # loaded name -> (size, nobits, exec)
    contents: Dict[str, bytes]  # loaded name -> original bytes
    relocs: List[Reloc]
    externals: List[str]  # undefined symbols used by relocations
    defined: Dict[str, Tuple[str, int]]  # uniquely named defined symbol -> (section, value)

    def types(self) -> List[int]:
        return sorted({r.type for r in self.relocs})

    def relocs_of(self, rtype: int) -> List[Reloc]:
        return [r for r in self.relocs if r.type == rtype]


def parse_object(obj: bytes) -> ObjectInfo:
    elf = ELFFile(io.BytesIO(obj))
    machine = elf["e_machine"]
    arch = {
        "EM_X86_64": "x86_64",
        "EM_AARCH64": "aarch64",
        "EM_RISCV": "riscv64",
        "EM_PPC64": "ppc64le",
        "EM_LOONGARCH": "loongarch64",
    }[machine]
    sections: Dict[str, Tuple[int, bool, bool]] = {}
    contents: Dict[str, bytes] = {}
    names: Dict[int, str] = {}
    seen: Dict[str, int] = {}
    for index, sec in enumerate(elf.iter_sections()):
        names[index] = sec.name
        if sec["sh_flags"] & SHF_ALLOC and sec["sh_size"] > 0:
            seen[sec.name] = seen.get(sec.name, 0) + 1
            nobits = sec["sh_type"] == "SHT_NOBITS"
            sections[sec.name] = (sec["sh_size"], nobits, bool(sec["sh_flags"] & SHF_EXECINSTR))
            contents[sec.name] = b"" if nobits else sec.data()
    dup = [n for n, c in seen.items() if c > 1]
    if dup:
        raise ValueError("oracle snippets need unique loaded section names; duplicated: %s" % dup)

    symtab = elf.get_section_by_name(".symtab")
    assert isinstance(symtab, SymbolTableSection)
    symbols = list(symtab.iter_symbols())
    defined: Dict[str, Tuple[str, int]] = {}
    counts: Dict[str, int] = {}
    for s in symbols:
        shndx = s["st_shndx"]
        if not s.name or s["st_info"]["type"] in ("STT_SECTION", "STT_FILE") or not isinstance(shndx, int):
            continue
        counts[s.name] = counts.get(s.name, 0) + 1
        if names.get(shndx) in sections:
            defined[s.name] = (names[shndx], s["st_value"])
    defined = {k: v for k, v in defined.items() if counts[k] == 1}

    relocs: List[Reloc] = []
    externals: List[str] = []
    for sec in elf.iter_sections():
        if not isinstance(sec, RelocationSection):
            continue
        target = names[sec["sh_info"]]
        if target not in sections:
            continue
        if not sec.is_RELA():
            raise ValueError("REL section %s in a loaded section" % sec.name)
        for rel in sec.iter_relocations():
            sym = symbols[rel["r_info_sym"]]
            shndx = sym["st_shndx"]
            external = shndx == "SHN_UNDEF"
            if sym["st_info"]["type"] == "STT_SECTION":
                label = names[shndx]
            else:
                label = sym.name
            if external and label not in externals:
                externals.append(label)
            relocs.append(
                Reloc(target, rel["r_offset"], rel["r_info_type"], rel["r_info_sym"], label, rel["r_addend"], external)
            )
    return ObjectInfo(arch, sections, contents, relocs, externals, defined)


# --- memory images -----------------------------------------------------------------


class Memory:
    """Read-only view of an address space made of (address, bytes) chunks."""

    def __init__(self, chunks: Sequence[Tuple[int, bytes]], name: str) -> None:
        self.chunks = sorted((a, bytes(b)) for a, b in chunks if b)
        self.name = name

    def read(self, addr: int, n: int) -> Optional[bytes]:
        for start, data in self.chunks:
            if start <= addr and addr + n <= start + len(data):
                return data[addr - start : addr - start + n]
        return None

    def _unpack(self, fmt: str, addr: int) -> Optional[int]:
        raw = self.read(addr, struct.calcsize(fmt))
        return None if raw is None else struct.unpack(fmt, raw)[0]

    def u32(self, addr: int) -> Optional[int]:
        return self._unpack("<I", addr)

    def s32(self, addr: int) -> Optional[int]:
        return self._unpack("<i", addr)

    def u64(self, addr: int) -> Optional[int]:
        return self._unpack("<Q", addr)

    def s64(self, addr: int) -> Optional[int]:
        return self._unpack("<q", addr)


@dataclass
class LinkedImage:
    memory: Memory
    symbols: Dict[str, int]
    section_addrs: Dict[str, int]  # output section name -> address
    script: str


def _elf_memory(data: bytes, name: str) -> Tuple[Memory, Dict[str, int], Dict[str, int]]:
    elf = ELFFile(io.BytesIO(data))
    chunks = []
    out_sections = {}
    for sec in elf.iter_sections():
        if sec["sh_flags"] & SHF_ALLOC:
            out_sections[sec.name] = sec["sh_addr"]
            if sec["sh_type"] != "SHT_NOBITS":
                chunks.append((sec["sh_addr"], sec.data()))
    symbols: Dict[str, int] = {}
    counts: Dict[str, int] = {}
    symtab = elf.get_section_by_name(".symtab")
    if isinstance(symtab, SymbolTableSection):
        for s in symtab.iter_symbols():
            if s.name and s["st_info"]["type"] not in ("STT_SECTION", "STT_FILE"):
                counts[s.name] = counts.get(s.name, 0) + 1
                symbols[s.name] = s["st_value"]
    symbols = {k: v for k, v in symbols.items() if counts[k] == 1}
    return Memory(chunks, name), symbols, out_sections


def linker_script(section_addrs: Dict[str, int], got_addr: int) -> str:
    entries = [
        (addr, "  .svod_in%d 0x%x : { *(%s) }" % (i, addr, name))
        for i, (name, addr) in enumerate(sorted(section_addrs.items(), key=lambda kv: kv[1]))
    ]
    # lld's synthetic sections, out of the way (but within +-2 GiB of the code), in address
    # order with the rest (lld assigns file offsets in script order).
    entries.append((got_addr, "  .got 0x%x : { *(.got) }\n  .got.plt : { *(.got.plt) }" % got_addr))
    lines = ["SECTIONS {"] + [line for _addr, line in sorted(entries)] + ["}"]
    return "\n".join(lines) + "\n"


def link_with_lld(
    obj: bytes,
    info: ObjectInfo,
    section_addrs: Dict[str, int],
    externals: Dict[str, int],
    workdir: str,
    tag: str,
    relax: bool = True,
    got_addr: Optional[int] = None,
    lld: Sequence[str] = ("ld.lld",),
    extra: Sequence[str] = (),
) -> LinkedImage:
    """Link ``obj`` statically with every input section at ``section_addrs[name]``."""
    emulation = {
        "x86_64": "elf_x86_64",
        "aarch64": "aarch64linux",
        "riscv64": "elf64lriscv",
        "ppc64le": "elf64lppc",
        "loongarch64": "elf64loongarch",
    }[info.arch]
    if got_addr is None:
        got_addr = min(section_addrs.values()) + 0x01000000
    script = linker_script(section_addrs, got_addr)
    obj_path = os.path.join(workdir, tag + ".o")
    script_path = os.path.join(workdir, tag + ".ld")
    out_path = os.path.join(workdir, tag + ".elf")
    with open(obj_path, "wb") as fh:
        fh.write(obj)
    with open(script_path, "w") as fh:
        fh.write(script)
    cmd = [
        *([lld] if isinstance(lld, str) else lld),
        "-m",
        emulation,
        "-static",
        "-e",
        "0",
        "-z",
        "norelro",
        "-z",
        "max-page-size=4096",
        "--no-dynamic-linker",
        "-T",
        script_path,
        "-o",
        out_path,
    ]
    if not relax:
        cmd.append("--no-relax")
    cmd += list(extra)
    cmd += ["--defsym=%s=0x%x" % (name, addr) for name, addr in sorted(externals.items())]
    cmd.append(obj_path)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise RuntimeError(
            "ld.lld failed (%d): %s\nscript:\n%s\ncommand: %s"
            % (proc.returncode, proc.stderr.strip(), script, " ".join(cmd))
        )
    with open(out_path, "rb") as fh:
        data = fh.read()
    memory, symbols, out_sections = _elf_memory(data, "lld")
    return LinkedImage(memory, symbols, out_sections, script)


# --- decoding relocated fields into final targets ---------------------------------


class DecodeError(Exception):
    pass


def _sext(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


_X86_BINOPS = frozenset({0x03, 0x0B, 0x13, 0x1B, 0x23, 0x2B, 0x33, 0x3B, 0x85})

A64_NOP = 0xD503201F


def _is_adrp(insn: int) -> bool:
    return insn & 0x9F000000 == 0x90000000


def _is_adr(insn: int) -> bool:
    return insn & 0x9F000000 == 0x10000000


def _adr_imm(insn: int) -> int:
    return _sext((((insn >> 5) & 0x7FFFF) << 2) | ((insn >> 29) & 3), 21)


def _is_ldr64_uimm(insn: int) -> bool:
    return insn & 0xFFC00000 == 0xF9400000


def _is_add64_imm(insn: int) -> bool:
    return insn & 0xFF800000 == 0x91000000


def _is_ldr_literal64(insn: int) -> bool:
    return insn & 0xFF000000 == 0x58000000


@dataclass
class Target:
    """What one relocated field refers to in one image."""

    value: Tuple[int, ...]  # final address(es); several for an ADRP shared by LO12s
    path: str  # how it was reached ("stub -> slot", "got", "relaxed lea", ...)


class Decoder:
    """Decode relocated fields of ``info`` in ``mem`` (sections placed at ``sec_addr``)."""

    def __init__(self, info: ObjectInfo, mem: Memory, sec_addr: Dict[str, int]) -> None:
        self.info = info
        self.mem = mem
        self.sec_addr = sec_addr
        self.ranges = [(sec_addr[n], sec_addr[n] + size) for n, (size, _nb, _x) in info.sections.items()]
        self._pairs: Optional[Dict[int, List[int]]] = None  # lo12 index -> [adrp index]

    # -- helpers --

    def addr_of(self, r: Reloc) -> int:
        return self.sec_addr[r.section] + r.offset

    def in_object(self, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi in self.ranges)

    def _need(self, value: Optional[int], what: str, addr: int) -> int:
        if value is None:
            raise DecodeError("%s: cannot read %s at 0x%x" % (self.mem.name, what, addr))
        return value

    def u32(self, addr: int, what: str = "field") -> int:
        return self._need(self.mem.u32(addr), what, addr)

    def s32(self, addr: int, what: str = "field") -> int:
        return self._need(self.mem.s32(addr), what, addr)

    def u64(self, addr: int, what: str = "field") -> int:
        return self._need(self.mem.u64(addr), what, addr)

    def s64(self, addr: int, what: str = "field") -> int:
        return self._need(self.mem.s64(addr), what, addr)

    def decode(self, index: int) -> Target:
        r = self.info.relocs[index]
        if self.info.arch == "x86_64":
            return self._x86(r)
        return self._a64(index, r)

    # -- x86_64 --

    def _x86_follow(self, addr: int, path: str) -> Target:
        """Follow call stubs / PLT entries / jmp thunks that lie outside the object's sections."""
        for _ in range(4):
            head = self.mem.read(addr, 6)
            if self.in_object(addr) or head is None:
                return Target((addr,), path)
            if head[:2] == b"\xff\x25":  # jmp *disp32(%rip)
                slot = addr + 6 + struct.unpack("<i", head[2:6])[0]
                addr = self.u64(slot, "stub slot")
                path += " -> jmp *slot"
            elif head[0] == 0xE9:  # jmp rel32
                addr = addr + 5 + struct.unpack("<i", head[1:5])[0]
                path += " -> jmp"
            else:
                raise DecodeError("%s: unknown code at 0x%x outside the object: %s" % (self.mem.name, addr, head.hex()))
        raise DecodeError("%s: stub chain too long at 0x%x" % (self.mem.name, addr))

    def _x86(self, r: Reloc) -> Target:
        p = self.addr_of(r)
        t = r.type
        if t == 1:
            return Target((self.u64(p),), "abs64")
        if t == 24:
            return Target((p + self.s64(p),), "pc64")
        if t == 2:
            return Target((p + self.s32(p),), "pc32 (S+A)")
        if t == 4:
            return self._x86_follow(p + self.s32(p) - r.addend, "plt32")
        if t in X86_GOT:
            g = p + self.s32(p) - r.addend
            before = self.mem.read(p - 2, 2)
            if before is None:
                raise DecodeError("%s: no opcode bytes before 0x%x" % (self.mem.name, p))
            op, modrm = before[0], before[1]
            if (
                op == 0x8B
                or (op == 0xFF and modrm in (0x15, 0x25))
                or (op in _X86_BINOPS and modrm & 0xC7 == 0x05)
                or (op in (0x80, 0x81, 0x83) and modrm & 0xC7 == 0x05)
            ):  # group-1 op with an immediate: cmp $0, slot
                return Target((self.u64(g, "GOT slot"),), "got load (%02x %02x)" % (op, modrm))
            if op == 0x8D:
                return Target((g,), "relaxed to lea")
            if modrm in (0xE8, 0xE9):
                return Target((g,), "relaxed to direct call/jmp")
            if op in (0x81, 0xF7, 0xC7) and modrm & 0xC0 == 0xC0:
                return Target((self.u32(p),), "relaxed to imm32")
            raise DecodeError(
                "%s: unknown instruction %02x %02x before GOT field at 0x%x" % (self.mem.name, op, modrm, p)
            )
        raise DecodeError("no x86_64 decoder for type %d" % t)

    # -- aarch64 --

    def _a64_follow(self, addr: int, path: str) -> Target:
        """Follow veneers / lld thunks (ldr literal, adrp+add, b) outside the object's sections."""
        regs: Dict[int, int] = {}
        pc = addr
        for _ in range(8):
            if not regs and self.in_object(pc):
                return Target((pc,), path)
            insn = self.mem.u32(pc)
            if insn is None:
                if regs:
                    raise DecodeError("%s: veneer at 0x%x runs off the image" % (self.mem.name, addr))
                return Target((pc,), path)
            if _is_ldr_literal64(insn):
                regs[insn & 31] = self.u64(pc + _sext(insn >> 5, 19) * 4, "veneer literal")
                path += " -> ldr lit"
            elif _is_adrp(insn):
                regs[insn & 31] = (pc & ~0xFFF) + (_adr_imm(insn) << 12)
                path += " -> adrp"
            elif _is_add64_imm(insn):
                imm = (insn >> 10) & 0xFFF
                if insn & (1 << 22):
                    imm <<= 12
                regs[insn & 31] = regs[(insn >> 5) & 31] + imm
                path += " -> add"
            elif insn & 0xFFFFFC1F == 0xD61F0000:  # br xN
                dest = regs[(insn >> 5) & 31]
                return self._a64_follow(dest, path + " -> br")
            elif insn & 0xFC000000 == 0x14000000 and not regs:  # b imm26
                pc = pc + _sext(insn, 26) * 4
                path += " -> b"
                continue
            else:
                raise DecodeError("%s: unknown veneer instruction %08x at 0x%x" % (self.mem.name, insn, pc))
            pc += 4
        raise DecodeError("%s: veneer too long at 0x%x" % (self.mem.name, addr))

    def _orig_insn(self, r: Reloc) -> int:
        return struct.unpack_from("<I", self.info.contents[r.section], r.offset)[0]

    def pairs(self) -> Dict[int, List[int]]:
        """LO12 relocation index -> the ADRP relocation index(es) it pairs with (original bytes)."""
        if self._pairs is not None:
            return self._pairs
        relocs = self.info.relocs
        out: Dict[int, List[int]] = {}
        for i, r in enumerate(relocs):
            if r.type not in A64_LO12_SCALE:
                continue
            want = (311,) if r.type == 312 else (275, 276)
            rn = (self._orig_insn(r) >> 5) & 31
            cands = [
                j
                for j, h in enumerate(relocs)
                if h.type in want
                and h.section == r.section
                and h.sym_index == r.sym_index
                and self._orig_insn(h) & 31 == rn
            ]
            before = [j for j in cands if relocs[j].offset < r.offset]
            if before:
                out[i] = [max(before, key=lambda j: relocs[j].offset)]
            elif cands:
                out[i] = [min(cands, key=lambda j: relocs[j].offset)]
            else:
                out[i] = []
        self._pairs = out
        return out

    def _a64_pair(self, lo_index: int, hi_index: int) -> Tuple[int, str]:
        lo, hi = self.info.relocs[lo_index], self.info.relocs[hi_index]
        p_lo, p_hi = self.addr_of(lo), self.addr_of(hi)
        insn_hi, insn_lo = self.u32(p_hi), self.u32(p_lo)
        if _is_adrp(insn_hi):
            page = (p_hi & ~0xFFF) + (_adr_imm(insn_hi) << 12)
            imm12 = (insn_lo >> 10) & 0xFFF
            if lo.type == 312:
                if _is_ldr64_uimm(insn_lo):
                    slot = page + imm12 * 8
                    return self.u64(slot, "GOT slot"), "adrp+ldr got"
                if _is_add64_imm(insn_lo):
                    return page + imm12, "relaxed to adrp+add"
                raise DecodeError("%s: unknown GOT LO12 instruction %08x at 0x%x" % (self.mem.name, insn_lo, p_lo))
            if lo.type == 277 and insn_lo & (1 << 22):
                imm12 <<= 12
            return page + (imm12 << A64_LO12_SCALE[lo.type]), "adrp+lo12"
        if insn_hi == A64_NOP:  # lld: adrp+add -> nop+adr, adrp+ldr -> nop+ldr literal
            if _is_adr(insn_lo):
                return p_lo + _adr_imm(insn_lo), "relaxed to adr"
            if _is_ldr_literal64(insn_lo):
                return self.u64(p_lo + _sext(insn_lo >> 5, 19) * 4, "GOT slot"), "relaxed to ldr literal"
        raise DecodeError(
            "%s: unknown ADRP-pair instructions %08x/%08x at 0x%x" % (self.mem.name, insn_hi, insn_lo, p_hi)
        )

    def _a64(self, index: int, r: Reloc) -> Target:
        p = self.addr_of(r)
        t = r.type
        if t == 257:
            return Target((self.u64(p),), "abs64")
        if t == 258:
            return Target((self.u32(p),), "abs32")
        if t == 260:
            return Target((p + self.s64(p),), "prel64")
        if t == 261:
            return Target((p + self.s32(p),), "prel32")
        if t in (282, 283):
            insn = self.u32(p)
            return self._a64_follow(p + _sext(insn, 26) * 4, "b/bl")
        if t in (273, 280):  # ldr literal / b.cond / cbz: imm19 at bit 5
            return Target((p + _sext(self.u32(p) >> 5, 19) * 4,), "imm19")
        if t == 279:
            return Target((p + _sext(self.u32(p) >> 5, 14) * 4,), "tbz imm14")
        if t == 274:
            return Target((p + _adr_imm(self.u32(p)),), "adr")
        if t in A64_LO12_SCALE:
            his = self.pairs()[index]
            if not his:
                raise DecodeError("LO12 relocation at %s+0x%x has no ADRP partner" % (r.section, r.offset))
            value, path = self._a64_pair(index, his[0])
            return Target((value,), path)
        if t in A64_HI:
            partners = [i for i, hs in self.pairs().items() if index in hs]
            if partners:
                results = [self._a64_pair(i, index) for i in sorted(partners)]
                return Target(tuple(v for v, _ in results), "; ".join(sorted({w for _, w in results})))
            insn = self.u32(p)
            if not _is_adrp(insn):
                raise DecodeError("%s: lone ADRP field at 0x%x is %08x" % (self.mem.name, p, insn))
            return Target(((p & ~0xFFF) + (_adr_imm(insn) << 12),), "adrp page (no LO12 partner)")
        if t in A64_MOVW_GROUP:
            return Target((self._a64_movw(index),), "movz/movk sequence")
        raise DecodeError("no aarch64 decoder for type %d" % t)

    def _a64_movw(self, index: int) -> int:
        """OR together the MOVW fields of one movz/movk sequence (same symbol, addend, register)."""
        r = self.info.relocs[index]
        rd = self._orig_insn(r) & 31
        group = sorted(
            (
                q
                for q in self.info.relocs
                if q.type in A64_MOVW_GROUP
                and q.section == r.section
                and q.sym_index == r.sym_index
                and q.addend == r.addend
                and self._orig_insn(q) & 31 == rd
                and abs(q.offset - r.offset) <= 12
            ),
            key=lambda q: q.offset,
        )
        value = 0
        for q in group:
            imm16 = (self.u32(self.addr_of(q)) >> 5) & 0xFFFF
            value |= imm16 << (16 * A64_MOVW_GROUP[q.type])
        return value


# --- comparison ----------------------------------------------------------------------


def canonical(value: int, externals: Dict[str, int]) -> Tuple:
    """An address as ("ext", name, offset) when it is an external's (fake) address, else ("at", value)."""
    for name, addr in externals.items():
        if abs(value - addr) < 0x8000:
            return ("ext", name, value - addr)
    return ("at", value)


@dataclass
class RelocResult:
    reloc: Reloc
    ours: Optional[Target]
    theirs: Optional[Target]
    ok: bool
    note: str = ""

    def describe(self, arch: str) -> str:
        r = self.reloc

        def show(t: Optional[Target]) -> str:
            return "undecodable" if t is None else "%s via %s" % (", ".join("0x%x" % v for v in t.value), t.path)

        return "%s %s+0x%x against %s%+d: ours=%s lld=%s%s" % (
            type_name(arch, r.type),
            r.section,
            r.offset,
            r.sym,
            r.addend,
            show(self.ours),
            show(self.theirs),
            (" [" + self.note + "]") if self.note else "",
        )


@dataclass
class Comparison:
    arch: str
    results: List[RelocResult]
    problems: List[str] = field(default_factory=list)  # non-relocation mismatches

    def failures(self, rtype: Optional[int] = None) -> List[str]:
        out = [x.describe(self.arch) for x in self.results if not x.ok and (rtype is None or x.reloc.type == rtype)]
        if rtype is None:
            out += self.problems
        return out


def _is_data_field(info: ObjectInfo, r: Reloc) -> bool:
    if info.arch == "x86_64":
        return r.type in X86_DATA or (r.type == 2 and not info.sections[r.section][2])
    return r.type in A64_DATA


def compare(
    info: ObjectInfo,
    ours: Memory,
    ours_symbols: Dict[str, int],
    sec_addr: Dict[str, int],
    ours_ext: Dict[str, int],
    theirs: LinkedImage,
    theirs_ext: Dict[str, int],
) -> Comparison:
    """Compare our relocated image with lld's, relocation by relocation."""
    d_ours = Decoder(info, ours, sec_addr)
    d_theirs = Decoder(info, theirs.memory, sec_addr)
    results: List[RelocResult] = []
    masked: Dict[str, List[Tuple[int, int]]] = {}
    for i, r in enumerate(info.relocs):
        got: List[Optional[Target]] = []
        errors = []
        for dec in (d_ours, d_theirs):
            try:
                got.append(dec.decode(i))
            except DecodeError as exc:
                got.append(None)
                errors.append(str(exc))
        a, b = got
        ok = (
            a is not None
            and b is not None
            and ([canonical(v, ours_ext) for v in a.value] == [canonical(v, theirs_ext) for v in b.value])
        )
        note = "; ".join(errors)
        if ok and _is_data_field(info, r):
            same_inputs = not r.external or ours_ext.get(r.sym) == theirs_ext.get(r.sym)
            w = field_width(info.arch, r.type)
            p = d_ours.addr_of(r)
            if same_inputs and ours.read(p, w) != theirs.memory.read(p, w):
                ok = False
                note = "data field bytes differ: ours %s, lld %s" % (
                    (ours.read(p, w) or b"").hex(),
                    (theirs.memory.read(p, w) or b"").hex(),
                )
        results.append(RelocResult(r, a, b, ok, note))
        lo, hi = r.offset, r.offset + field_width(info.arch, r.type)
        if info.arch == "x86_64" and r.type in X86_GOT:
            lo, hi = lo - 3, hi + 1  # lld rewrites opcode/REX bytes and may append a nop
        masked.setdefault(r.section, []).append((lo, hi))

    problems: List[str] = []
    # lld must have put every input section (hence every defined symbol) where relocate() did.
    for name, (sec, value) in sorted(info.defined.items()):
        if name.startswith(".L"):
            continue  # assembler-local labels: lld drops them from its symbol table
        want = sec_addr[sec] + value
        if ours_symbols.get(name) != want:
            problems.append(
                "relocate() reports %s at %s, expected 0x%x" % (name, hex(ours_symbols.get(name) or 0), want)
            )
        if theirs.symbols.get(name) != want:
            problems.append("lld put %s at %s, relocate() at 0x%x" % (name, hex(theirs.symbols.get(name) or 0), want))
    # Outside the relocated fields, the bytes must be untouched in both images.
    for name, (size, nobits, _x) in info.sections.items():
        if nobits:
            continue
        start = sec_addr[name]
        mine, other, orig = ours.read(start, size), theirs.memory.read(start, size), info.contents[name]
        if mine is None or other is None:
            problems.append(
                "section %s (0x%x bytes at 0x%x) missing from %s"
                % (name, size, start, "our image" if mine is None else "lld's output")
            )
            continue
        keep = bytearray(b"\x01") * size
        for lo, hi in masked.get(name, []):
            for k in range(max(lo, 0), min(hi, size)):
                keep[k] = 0
        for label, img in (("ours", mine), ("lld", other)):
            bad = [k for k in range(size) if keep[k] and img[k] != orig[k]]
            if bad:
                problems.append(
                    "%s: %d byte(s) outside relocated fields changed in %s, first at +0x%x"
                    % (label, len(bad), name, bad[0])
                )
    return Comparison(info.arch, results, problems)
