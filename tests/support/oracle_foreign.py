"""Decoding relocated fields on riscv64, ppc64le and loongarch64, for test_linker_oracle_foreign.py.

The recipe is support.oracle's (our image vs ld.lld's, every input section at
the same address, every external at the same address, relaxation off), with a
comparison that needs less decoding: given the same S, A and P, a relocation
reached directly must produce the very same bits in both images, so its field
is compared byte for byte. Only the relocations whose target each side places
itself are decoded into the final address they reach, independently in each
image, and compared:

* GOT loads (riscv64 ``GOT_HI20`` through its ``PCREL_LO12`` partners,
  loongarch64 ``GOT_PC_HI20/LO12``, ppc64le ``GOT16*``): the slot's contents;
* calls to externals (our stubs vs lld's direct branches): the stub's target;
* ppc64le TOC-relative fields (``TOC16*``, ``GOT16*``): the address they form
  with that image's ``.TOC.``, and every ``REL16_HA/LO`` pair of a global
  entry must compute that image's ``.TOC.``.

Only pyelftools reads the ELF files (through support.oracle), never svod_min.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from elftools.elf.elffile import ELFFile

from support import oracle as osup

# --- type numbers (psABI), by name ----------------------------------------------------------

RV = {
    "32": 1,
    "64": 2,
    "BRANCH": 16,
    "JAL": 17,
    "CALL": 18,
    "CALL_PLT": 19,
    "GOT_HI20": 20,
    "PCREL_HI20": 23,
    "PCREL_LO12_I": 24,
    "PCREL_LO12_S": 25,
    "HI20": 26,
    "LO12_I": 27,
    "LO12_S": 28,
    "ADD8": 33,
    "ADD16": 34,
    "ADD32": 35,
    "ADD64": 36,
    "SUB8": 37,
    "SUB16": 38,
    "SUB32": 39,
    "SUB64": 40,
    "ALIGN": 43,
    "RVC_BRANCH": 44,
    "RVC_JUMP": 45,
    "RELAX": 51,
    "SUB6": 52,
    "SET6": 53,
    "SET8": 54,
    "SET16": 55,
    "SET32": 56,
    "32_PCREL": 57,
}
PPC = {
    "ADDR32": 1,
    "ADDR16": 3,
    "ADDR16_LO": 4,
    "ADDR16_HI": 5,
    "ADDR16_HA": 6,
    "REL24": 10,
    "REL14": 11,
    "REL14_BRTAKEN": 12,
    "REL14_BRNTAKEN": 13,
    "PLT16_LO": 29,
    "PLT16_HI": 30,
    "PLT16_HA": 31,
    "PLT16_LO_DS": 60,
    "GOT16": 14,
    "GOT16_LO": 15,
    "GOT16_HI": 16,
    "GOT16_HA": 17,
    "REL32": 26,
    "ADDR64": 38,
    "ADDR16_HIGHER": 39,
    "ADDR16_HIGHERA": 40,
    "ADDR16_HIGHEST": 41,
    "ADDR16_HIGHESTA": 42,
    "REL64": 44,
    "TOC16": 47,
    "TOC16_LO": 48,
    "TOC16_HI": 49,
    "TOC16_HA": 50,
    "TOC": 51,
    "ADDR16_DS": 56,
    "ADDR16_LO_DS": 57,
    "GOT16_DS": 58,
    "GOT16_LO_DS": 59,
    "TOC16_DS": 63,
    "TOC16_LO_DS": 64,
    "ADDR16_HIGH": 110,
    "ADDR16_HIGHA": 111,
    "REL16": 249,
    "REL16_LO": 250,
    "REL16_HI": 251,
    "REL16_HA": 252,
}
LA = {
    "32": 1,
    "64": 2,
    "ADD8": 47,
    "ADD16": 48,
    "ADD24": 49,
    "ADD32": 50,
    "ADD64": 51,
    "SUB8": 52,
    "SUB16": 53,
    "SUB24": 54,
    "SUB32": 55,
    "SUB64": 56,
    "B16": 64,
    "B21": 65,
    "B26": 66,
    "ABS_HI20": 67,
    "ABS_LO12": 68,
    "ABS64_LO20": 69,
    "ABS64_HI12": 70,
    "PCALA_HI20": 71,
    "PCALA_LO12": 72,
    "GOT_PC_HI20": 75,
    "GOT_PC_LO12": 76,
    "32_PCREL": 99,
    "RELAX": 100,
    "ALIGN": 102,
    "PCREL20_S2": 103,
    "ADD6": 105,
    "SUB6": 106,
    "64_PCREL": 109,
    "CALL36": 110,
}
PREFIX = {"riscv64": ("R_RISCV_", RV), "ppc64le": ("R_PPC64_", PPC), "loongarch64": ("R_LARCH_", LA)}
HINTS = {
    "riscv64": {0, RV["ALIGN"], RV["RELAX"]},
    "ppc64le": {0, 109, 118, 119, 120},
    "loongarch64": {0, LA["RELAX"], LA["ALIGN"]},
}


def type_name(arch: str, rtype: int) -> str:
    prefix, table = PREFIX[arch]
    for name, number in table.items():
        if number == rtype:
            return prefix + name
    return "type %d" % rtype


def field_width(arch: str, rtype: int) -> int:
    name = type_name(arch, rtype).split("_", 2)[-1]
    if name in ("64", "ADD64", "SUB64", "ADDR64", "REL64", "TOC", "64_PCREL", "CALL", "CALL_PLT", "CALL36"):
        return 8
    if name in ("ADD8", "SUB8", "SET8", "SET6", "SUB6", "ADD6"):
        return 1
    if name in ("ADD16", "SUB16", "SET16", "RVC_BRANCH", "RVC_JUMP") or (arch == "ppc64le" and "16" in name):
        return 2
    if name in ("ADD24", "SUB24"):
        return 3
    return 4


def _sext(value: int, bits: int) -> int:
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


RV_STUB_HEAD = 0x00000317  # auipc t1, 0
LA_STUB_HEAD = 0x1C000014  # pcaddu12i $t8, 0
PPC_NOP, PPC_TOC_RESTORE = 0x60000000, 0xE8410018


@dataclass
class FieldResult:
    reloc: osup.Reloc
    how: str  # "bytes" or what was decoded
    ours: Optional[Tuple[int, ...]]
    theirs: Optional[Tuple[int, ...]]
    ok: bool
    note: str = ""

    def describe(self, arch: str) -> str:
        r = self.reloc
        show = lambda v: "-" if v is None else ",".join("0x%x" % x for x in v)  # noqa: E731
        return "%s %s+0x%x against %s%+d (%s): ours=%s lld=%s %s" % (
            type_name(arch, r.type),
            r.section,
            r.offset,
            r.sym,
            r.addend,
            self.how,
            show(self.ours),
            show(self.theirs),
            self.note,
        )


@dataclass
class Comparison:
    arch: str
    results: List[FieldResult] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)

    def failures(self) -> List[str]:
        return [r.describe(self.arch) for r in self.results if not r.ok] + self.problems


class Decoder:
    """Final targets of the indirect fields of ``info`` in one image."""

    def __init__(
        self,
        info: osup.ObjectInfo,
        mem: osup.Memory,
        sec_addr: Dict[str, int],
        toc: int,
        sym_at: Dict[int, Tuple[str, int]],
    ) -> None:
        self.info, self.mem, self.sec_addr, self.toc, self.sym_at = info, mem, sec_addr, toc, sym_at
        self.ranges = [(sec_addr[n], sec_addr[n] + size) for n, (size, _nb, _x) in info.sections.items()]

    def at(self, r: osup.Reloc) -> int:
        return self.sec_addr[r.section] + r.offset

    def in_object(self, addr: int) -> bool:
        return any(lo <= addr < hi for lo, hi in self.ranges)

    def u32(self, addr: int) -> int:
        value = self.mem.u32(addr)
        if value is None:
            raise osup.DecodeError("%s: nothing at 0x%x" % (self.mem.name, addr))
        return value

    def u64(self, addr: int) -> int:
        value = self.mem.u64(addr)
        if value is None:
            raise osup.DecodeError("%s: no GOT slot at 0x%x" % (self.mem.name, addr))
        return value

    def label(self, r: osup.Reloc) -> int:
        """Address of the symbol a riscv64 PCREL_LO12 names (its auipc's label; GNU as names them all ".L0 ")."""
        sec, value = self.sym_at[r.sym_index]
        return self.sec_addr[sec] + value + r.addend

    # -- riscv64 --

    def rv_lo12(self, r: osup.Reloc) -> Tuple[int, bool]:
        """(address formed by the auipc at the label and this low part, whether the HI20 is a GOT load)."""
        hi_addr = self.label(r)
        hi = next(
            (q for q in self.info.relocs if q.type in (RV["PCREL_HI20"], RV["GOT_HI20"]) and self.at(q) == hi_addr),
            None,
        )
        if hi is None:
            raise osup.DecodeError("no HI20 at the label of a PCREL_LO12")
        insn = self.u32(self.at(r))
        lo = (
            _sext(insn >> 20, 12)
            if r.type == RV["PCREL_LO12_I"]
            else _sext(((insn >> 25) << 5) | ((insn >> 7) & 31), 12)
        )
        return hi_addr + _sext(self.u32(hi_addr) & 0xFFFFF000, 32) + lo, hi.type == RV["GOT_HI20"]

    def rv_call(self, r: osup.Reloc) -> int:
        p = self.at(r)
        target = p + _sext(self.u32(p) & 0xFFFFF000, 32) + _sext(self.u32(p + 4) >> 20, 12)
        if not self.in_object(target) and self.mem.u32(target) == RV_STUB_HEAD:
            return self.u64(target + 16)  # our stub: auipc t1,0; ld t1,16(t1); jr t1; nop; .quad
        return target

    # -- loongarch64 --

    def la_target(self, r: osup.Reloc) -> int:
        p = self.at(r)
        insn = self.u32(p)
        if r.type == LA["B26"]:
            target = p + (_sext(((insn & 0x3FF) << 16) | ((insn >> 10) & 0xFFFF), 26) << 2)
        else:  # CALL36: pcaddu18i + jirl
            target = p + (_sext(insn >> 5, 20) << 18) + (_sext(self.u32(p + 4) >> 10, 16) << 2)
        if not self.in_object(target) and self.mem.u32(target) == LA_STUB_HEAD:
            return self.u64(target + 16)
        return target

    def la_got(self, r: osup.Reloc) -> int:
        """The slot a GOT_PC_LO12 reaches with its GOT_PC_HI20 partner (same symbol and addend)."""
        his = [
            q
            for q in self.info.relocs
            if q.type == LA["GOT_PC_HI20"]
            and q.section == r.section
            and q.sym_index == r.sym_index
            and q.addend == r.addend
            and q.offset < r.offset
        ]
        if not his:
            raise osup.DecodeError("GOT_PC_LO12 without a GOT_PC_HI20 before it")
        hi = max(his, key=lambda q: q.offset)
        page = (self.at(hi) & ~0xFFF) + (_sext(self.u32(self.at(hi)) >> 5, 20) << 12)
        insn = self.u32(self.at(r))
        addr = page + _sext(insn >> 10, 12)
        if insn & 0xFFC00000 == 0x02C00000:  # addi.d: lld relaxed the GOT load to the address itself
            return addr
        return self.u64(addr)  # ld.d from the slot

    # -- ppc64le --

    def half(self, r: osup.Reloc) -> int:
        raw = self.mem.read(self.at(r), 2)
        if raw is None:
            raise osup.DecodeError("%s: no field at 0x%x" % (self.mem.name, self.at(r)))
        value = int.from_bytes(raw, "little")
        return value & ~3 if type_name("ppc64le", r.type).endswith("_DS") else value

    def ppc_toc_address(self, r: osup.Reloc) -> int:
        """The address a TOC16/GOT16 field forms with .TOC. (HA with its LO partner, or alone)."""
        name = type_name("ppc64le", r.type)
        if name.endswith(("_LO", "_LO_DS")):
            ha_type = PPC[name[len("R_PPC64_") :].split("_")[0] + "_HA"]  # TOC16_HA, GOT16_HA or PLT16_HA
            has = [
                q
                for q in self.info.relocs
                if q.type == ha_type
                and q.section == r.section
                and q.sym_index == r.sym_index
                and q.addend == r.addend
                and q.offset < r.offset
            ]
            if not has:
                raise osup.DecodeError("%s without an _HA partner before it" % name)
            ha = max(has, key=lambda q: q.offset)
            return self.toc + (_sext(self.half(ha), 16) << 16) + _sext(self.half(r), 16)
        return self.toc + _sext(self.half(r), 16)

    def ppc_hi_ok(self, r: osup.Reloc) -> bool:
        """A TOC16_HI/GOT16_HI field holds the high half of (target - .TOC.) in this image."""
        if type_name("ppc64le", r.type).startswith("R_PPC64_TOC16"):
            sec, value = self.sym_at[r.sym_index]
            target = self.sec_addr[sec] + value + r.addend
        else:  # the slot, as another GOT16 field of the same symbol reaches it
            other = next(
                (
                    q
                    for q in self.info.relocs
                    if q.sym_index == r.sym_index
                    and q.addend == r.addend
                    and q.type in (PPC["GOT16"], PPC["GOT16_DS"], PPC["GOT16_LO"], PPC["GOT16_LO_DS"])
                ),
                None,
            )
            if other is None:
                raise osup.DecodeError("GOT16_HI without another GOT16 field for the same symbol")
            target = self.ppc_toc_address(other)
        return self.half(r) == ((target - self.toc) >> 16) & 0xFFFF

    def ppc_branch(self, r: osup.Reloc) -> int:
        p = self.at(r)
        target = p + _sext(self.u32(p) & 0x03FFFFFC, 26)
        if not self.in_object(target):
            words = [self.mem.u32(target + 4 * k) for k in range(8)]
            if words[0] == 0xF8410018 and None not in words:  # our stub: std r2 ... lis/ori/sldi/oris/ori
                return (
                    ((words[1] & 0xFFFF) << 48)
                    | ((words[2] & 0xFFFF) << 32)
                    | ((words[4] & 0xFFFF) << 16)
                    | (words[5] & 0xFFFF)
                )
        return target

    def ppc_entry_toc(self, r: osup.Reloc) -> Optional[int]:
        """.TOC. as computed by a global entry's REL16_HA (at r) + REL16_LO (the next instruction)."""
        lo = next(
            (
                q
                for q in self.info.relocs
                if q.type == PPC["REL16_LO"] and q.section == r.section and q.offset == r.offset + 4 and q.sym == r.sym
            ),
            None,
        )
        if lo is None:
            return None
        entry = self.at(r) - r.addend
        return entry + (_sext(self.half(r), 16) << 16) + _sext(self.half(lo), 16)


# --- comparison ---------------------------------------------------------------------------------


def _entry_toc(dec: Decoder) -> Optional[int]:
    for r in dec.info.relocs:
        if r.type == PPC["REL16_HA"] and r.sym == ".TOC.":
            toc = dec.ppc_entry_toc(r)
            if toc is not None:
                return toc
    return None


def _indirect(arch: str, dec: Decoder, r: osup.Reloc) -> Optional[Tuple[str, Tuple[int, ...]]]:
    """(how, final targets) for a field each side resolves its own way; None for a byte-compared field."""
    if arch == "riscv64":
        if r.type in (RV["CALL"], RV["CALL_PLT"]) and r.external:
            return "call target", (dec.rv_call(r),)
        if r.type in (RV["PCREL_LO12_I"], RV["PCREL_LO12_S"]):
            addr, via_got = dec.rv_lo12(r)
            return ("GOT slot contents", (dec.u64(addr),)) if via_got else None
        if r.type == RV["GOT_HI20"]:
            return "via its PCREL_LO12 partners", ()
    elif arch == "loongarch64":
        if r.type in (LA["B26"], LA["CALL36"]) and r.external:
            return "call target", (dec.la_target(r),)
        if r.type == LA["GOT_PC_LO12"]:
            return "GOT slot contents", (dec.la_got(r),)
        if r.type == LA["GOT_PC_HI20"]:
            return "via its GOT_PC_LO12 partners", ()
    else:
        name = type_name(arch, r.type)[len("R_PPC64_") :]
        if r.type == PPC["REL24"] and r.external:
            return "call target", (dec.ppc_branch(r),)
        if name in ("TOC16_HA", "GOT16_HA", "PLT16_HA"):
            return "via its _LO partners", ()
        if name in ("TOC16_HI", "GOT16_HI"):
            return "high half of the offset from the image's .TOC.", (int(dec.ppc_hi_ok(r)),)
        if name.startswith(("TOC16", "GOT16", "PLT16")):
            addr = dec.ppc_toc_address(r)
            if name.startswith("TOC16"):
                return "TOC-relative address", (addr,)
            return "GOT/PLT slot contents", (dec.u64(addr),)
        if r.type in (PPC["REL16_HA"], PPC["REL16_LO"]) and r.sym == ".TOC.":
            toc = dec.ppc_entry_toc(r) if r.type == PPC["REL16_HA"] else dec.toc
            return "global entry's .TOC. is the image's", (int(toc == dec.toc),)
        if r.type == PPC["TOC"]:
            return ".TOC. value is the image's", (int(dec.u64(dec.at(r)) == dec.toc),)
    return None


def _mask(arch: str, r: osup.Reloc) -> Tuple[int, int]:
    width = field_width(arch, r.type)
    if arch == "ppc64le" and r.type == PPC["REL24"] and r.external:
        width = 8  # the nop after the bl becomes the TOC restore in our image
    return r.offset, r.offset + width


def symbol_sections(obj: bytes) -> Dict[int, Tuple[str, int]]:
    """symbol index -> (its section's name, its value), for symbols defined in a section."""
    elf = ELFFile(io.BytesIO(obj))
    names = [sec.name for sec in elf.iter_sections()]
    symtab = elf.get_section_by_name(".symtab")
    return {
        i: (names[s["st_shndx"]], s["st_value"])
        for i, s in enumerate(symtab.iter_symbols())
        if isinstance(s["st_shndx"], int) and 0 < s["st_shndx"] < len(names)
    }


def compare(
    info: osup.ObjectInfo,
    obj: bytes,
    sec_addr: Dict[str, int],
    ours: osup.Memory,
    theirs: osup.Memory,
    theirs_symbols: Dict[str, int],
    ours_symbols: Dict[str, int],
) -> Comparison:
    arch = info.arch
    sym_at = symbol_sections(obj)
    decs = [Decoder(info, mem, sec_addr, 0, sym_at) for mem in (ours, theirs)]
    if arch == "ppc64le":
        for dec in decs:
            dec.toc = _entry_toc(dec) or 0
    out = Comparison(arch)
    masks: Dict[str, List[Tuple[int, int]]] = {}
    for r in info.relocs:
        if r.type in HINTS[arch]:
            continue
        masks.setdefault(r.section, []).append(_mask(arch, r))
        try:
            got = [_indirect(arch, dec, r) for dec in decs]
        except osup.DecodeError as exc:
            out.results.append(FieldResult(r, "decode", None, None, False, str(exc)))
            continue
        if got[0] is None or got[1] is None:
            lo, hi = _mask(arch, r) if arch != "ppc64le" else (r.offset, r.offset + field_width(arch, r.type))
            a, b = (m.read(sec_addr[r.section] + lo, hi - lo) for m in (ours, theirs))
            ok = a is not None and a == b
            out.results.append(FieldResult(r, "bytes", tuple(a or b""), tuple(b or b""), ok))
        else:
            out.results.append(FieldResult(r, got[0][0], got[0][1], got[1][1], got[0][1] == got[1][1]))
        if arch == "ppc64le" and r.type == PPC["REL24"] and r.external:
            after = ours.u32(sec_addr[r.section] + r.offset + 4)
            if after != PPC_TOC_RESTORE:
                out.problems.append(
                    "ours: no TOC restore after the call at %s+0x%x (0x%08x)" % (r.section, r.offset, after or 0)
                )
    for name, (section, value) in sorted(info.defined.items()):
        want = sec_addr[section] + value
        if not name.startswith(".L") and (theirs_symbols.get(name) != want or ours_symbols.get(name) != want):
            out.problems.append(
                "%s: ours 0x%x, lld 0x%x, expected 0x%x"
                % (name, ours_symbols.get(name) or 0, theirs_symbols.get(name) or 0, want)
            )
    for name, (size, nobits, _x) in info.sections.items():
        if nobits:
            continue
        keep = bytearray(b"\x01") * size
        for lo, hi in masks.get(name, []):
            keep[max(lo, 0) : min(hi, size)] = bytes(max(0, min(hi, size) - max(lo, 0)))
        for label, mem in (("ours", ours), ("lld", theirs)):
            img = mem.read(sec_addr[name], size)
            if img is None:
                out.problems.append("%s: section %s missing" % (label, name))
                continue
            bad = [k for k in range(size) if keep[k] and img[k] != info.contents[name][k]]
            if bad:
                out.problems.append(
                    "%s: %d byte(s) outside relocated fields changed in %s, first at +0x%x"
                    % (label, len(bad), name, bad[0])
                )
    return out
