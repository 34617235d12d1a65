"""Machine-code oracle for batch units: a piece cut from a unit against compile_c's object (pyelftools).

Two objects are equivalent when they define the same functions and data (name, binding, type, size) with
the same bytes, and each relocation inside them sits at the same offset, has the same type and reaches
the same thing. "The same thing" is a named symbol plus offset, or, for a reference into a section or to
a local ``.L`` label (the unit puts each function and datum in a section of its own, compile_c puts them
together), the named symbol covering the target, or the constant a constant-pool reference reads: pools
are shared by the whole unit, so their offsets differ while the constants must not.
"""

from __future__ import annotations

import io
from typing import Dict, List, Tuple

from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

# x86-64 relocations whose addend is (target - end of the field): PC32, PLT32, GOTPCREL, GOTPCRELX, REX_GOTPCRELX.
_PC_RELATIVE = {2: 4, 4: 4, 9: 4, 41: 4, 42: 4}
Entity = Tuple[str, str, str, int, bytes, Tuple[tuple, ...]]


def _covering(elf: ELFFile, symbols: list, shndx: int, target: int) -> tuple:
    for sym in symbols:
        if sym["st_shndx"] == shndx and sym.name and sym["st_info"]["type"] in ("STT_FUNC", "STT_OBJECT"):
            if sym["st_value"] <= target < sym["st_value"] + max(sym["st_size"], 1):
                return ("in", sym.name, target - sym["st_value"])
    return ("section-offset", elf.get_section(shndx).name.split(".")[1], target)


def _reached(elf: ELFFile, symbols: list, rel) -> tuple:
    sym = symbols[rel["r_info_sym"]]
    # clang names each constant-pool entry (.LCPI<function>_<n>): its number depends on the unit
    if sym["st_info"]["type"] != "STT_SECTION" and not sym.name.startswith(".L"):
        return ("symbol", sym.name, rel["r_addend"])
    section = elf.get_section(sym["st_shndx"])
    bias = _PC_RELATIVE.get(rel["r_info_type"], 0) if elf["e_machine"] == "EM_X86_64" else 0
    target = sym["st_value"] + rel["r_addend"] + bias
    data = section.data()
    if section["sh_flags"] & SH_FLAGS.SHF_MERGE and section["sh_flags"] & SH_FLAGS.SHF_STRINGS:
        return ("string", data[target : data.index(b"\0", target)])
    if section["sh_flags"] & SH_FLAGS.SHF_MERGE:
        size = max(section["sh_entsize"], 1)
        start = -(-target // size) * size  # an instruction's trailing immediate shifts the addend below the entry
        return ("constant", data[start : start + size])
    return _covering(elf, symbols, sym["st_shndx"], target)


def entities(obj: bytes) -> Dict[str, Entity]:
    """Name -> (binding, type, section kind, size, bytes, relocations) of every function and datum defined."""
    elf = ELFFile(io.BytesIO(obj))
    symtab = elf.get_section_by_name(".symtab")
    symbols = list(symtab.iter_symbols())
    relocs: Dict[int, List] = {}
    for section in elf.iter_sections():
        if isinstance(section, RelocationSection):
            relocs.setdefault(section["sh_info"], []).extend(section.iter_relocations())
    out: Dict[str, Entity] = {}
    for sym in symbols:
        kind = sym["st_info"]["type"]
        if kind not in ("STT_FUNC", "STT_OBJECT") or not isinstance(sym["st_shndx"], int):
            continue
        section = elf.get_section(sym["st_shndx"])
        lo, hi = sym["st_value"], sym["st_value"] + sym["st_size"]
        body = b"" if section["sh_type"] == "SHT_NOBITS" else section.data()[lo:hi]
        inside = sorted(
            (rel["r_offset"] - lo, rel["r_info_type"], _reached(elf, symbols, rel))
            for rel in relocs.get(sym["st_shndx"], [])
            if lo <= rel["r_offset"] < hi
        )
        kind_of_section = section.name.split(".")[1]  # text, rodata, data, bss
        out[sym.name] = (sym["st_info"]["bind"], kind, kind_of_section, sym["st_size"], body, tuple(inside))
    return out


def _same_target(a: tuple, b: tuple) -> bool:
    # gcc may keep a 4-byte constant as the head of a 16-byte one another source of the unit uses
    # whole: the machine code is the same, so it reads the same leading bytes.
    if a[0] == b[0] == "constant":
        size = min(len(a[1]), len(b[1]))
        return a[1][:size] == b[1][:size]
    return a == b


def _same_relocations(ours: tuple, theirs: tuple) -> bool:
    return len(ours) == len(theirs) and all(a[:2] == b[:2] and _same_target(a[2], b[2]) for a, b in zip(ours, theirs))


def _function_places(obj: bytes) -> Dict[str, Tuple[int, int]]:
    """Name -> (section index, offset) of every function defined in ``obj``."""
    symtab = ELFFile(io.BytesIO(obj)).get_section_by_name(".symtab")
    return {
        sym.name: (sym["st_shndx"], sym["st_value"])
        for sym in symtab.iter_symbols()
        if sym["st_info"]["type"] == "STT_FUNC" and isinstance(sym["st_shndx"], int)
    }


def _local_calls_resolved(name: str, ours: Entity, theirs: Entity, places: Dict[str, Tuple[int, int]]) -> Entity:
    """``ours`` with each x86-64 call to a function of the same object that compile_c's assembler resolved in
    place (both in one section there, so no relocation; each in its own section in a unit, so one) taken as
    the displacement compile_c's bytes hold, where that displacement reaches the same function and offset."""
    body, kept = bytearray(ours[4]), []
    resolved_at = {r[0] for r in theirs[5]}
    for offset, rtype, reached in ours[5]:
        callee = reached[1] if reached[0] == "in" else None
        if rtype in (2, 4) and callee in places and name in places and offset not in resolved_at:
            (caller_section, caller_at), (callee_section, callee_at) = places[name], places[callee]
            displacement = int.from_bytes(theirs[4][offset : offset + 4], "little", signed=True)
            if caller_section == callee_section and caller_at + offset + 4 + displacement == callee_at + reached[2]:
                body[offset : offset + 4] = theirs[4][offset : offset + 4]
                continue
        kept.append((offset, rtype, reached))
    return ours[:4] + (bytes(body), tuple(kept))


def differences(piece: bytes, alone: bytes) -> List[str]:
    """What differs between a unit's piece and the object compile_c built from the same source (empty: none)."""
    ours, theirs = entities(piece), entities(alone)
    if ELFFile(io.BytesIO(piece))["e_machine"] == "EM_X86_64":
        places = _function_places(alone)
        ours = {n: _local_calls_resolved(n, e, theirs[n], places) if n in theirs else e for n, e in ours.items()}
    out = [
        "%s: only in the %s object" % (n, "piece's" if n in ours else "alone") for n in sorted(set(ours) ^ set(theirs))
    ]
    for name in sorted(set(ours) & set(theirs)):
        fields = ("binding", "type", "section", "size", "bytes")
        differ = [f for f, a, b in zip(fields, ours[name], theirs[name]) if a != b]
        if not _same_relocations(ours[name][5], theirs[name][5]):
            differ.append("relocations")
        if differ:
            out.append("%s: %s differ" % (name, ", ".join(differ)))
    return out


__all__ = ["differences", "entities"]
