"""ppc64le relocations: the ELFv2 TOC, local entry points, call stubs and the TOC restore, ranges, refusals.

Execution under qemu and the comparison with ld.lld are in tests/foreign/ and
test_linker_oracle_foreign.py; here each piece is decoded back independently.
"""

from __future__ import annotations

import struct
from io import BytesIO

import pytest

pytest.importorskip("elftools")

from elftools.elf.elffile import ELFFile  # noqa: E402
from support.foreign_unit import apply, compile_for, relocations, resolver, sext, u32, with_type  # noqa: E402

from svod_min.error import FieldOverflow, UnsupportedRelocationError  # noqa: E402
from svod_min.jit_loader import relocate  # noqa: E402
from svod_min.jit_loader.ppc64le import LD_R2_24_R1, NOP, local_entry_offset  # noqa: E402

BASE = 0x40000000
BL = 0x48000001


@pytest.mark.parametrize("delta", [4, -4, 0x1FFFFFC, -0x2000000, 0x123450])
def test_rel24_decodes_and_keeps_the_link_bit(delta: int) -> None:
    out = u32(apply("ppc64le", "R_PPC64_REL24", struct.pack("<I", BL), 0x1000 + delta))
    assert sext(out & 0x03FFFFFC, 26) == delta and out & 0xFC000003 == BL & 0xFC000003


@pytest.mark.parametrize("delta", [0x2000000, -0x2000004, 2])
def test_rel24_out_of_range_or_misaligned_is_refused(delta: int) -> None:
    with pytest.raises(FieldOverflow):
        apply("ppc64le", "R_PPC64_REL24", struct.pack("<I", BL), 0x1000 + delta)


def test_halfword_forms() -> None:
    value = 0x12348765
    half = lambda name, v, keep=0: struct.unpack("<H", apply("ppc64le", name, struct.pack("<H", keep), v, p=0))[0]  # noqa: E731
    assert half("R_PPC64_ADDR16_LO", value) == 0x8765
    assert half("R_PPC64_ADDR16_HI", value) == 0x1234
    assert half("R_PPC64_ADDR16_HA", value) == 0x1235  # the low half is negative as a signed immediate
    assert half("R_PPC64_ADDR16_LO_DS", 0x1238, keep=2) == 0x1238 | 2  # DS keeps the low two bits
    with pytest.raises(FieldOverflow):
        half("R_PPC64_ADDR16_LO_DS", 0x1236)  # not a multiple of 4
    with pytest.raises(FieldOverflow):
        half("R_PPC64_ADDR16", 0x8000)  # 16 signed bits


def test_local_entry_offsets() -> None:
    assert [local_entry_offset(v << 5) for v in range(7)] == [0, 0, 4, 8, 16, 32, 64]


def _symbols(obj: bytes) -> dict:
    return {s.name: s for s in ELFFile(BytesIO(obj)).get_section_by_name(".symtab").iter_symbols()}


CALLS = r"""
float expf(float);
int g = 5;
__attribute__((noinline)) static int helper(int x) { return x * 3 + g; }
int call_local(int x) { return helper(x) + 1; }
float call_ext(float x) { return expf(x) + 1.0f; }
"""


def test_local_call_enters_after_the_toc_setup_and_external_call_restores_r2() -> None:
    obj = compile_for("ppc64le", CALLS, "-O2", "-fPIC")
    img = relocate(obj, BASE, resolver({"expf": 0x7F0012345670}))
    text = img.sections[".text"]
    entry_bytes = local_entry_offset(_symbols(obj)["helper"]["st_other"]["local"] << 5)
    assert entry_bytes == 8, "helper uses the TOC, so it has a two-instruction global entry"
    calls = [r for r in relocations(obj) if r[3] == 10]
    targets = {}
    for _e, _s, off, _t in calls:
        insn = u32(img.image, text - img.base + off)
        targets[off] = text + off + sext(insn & 0x03FFFFFC, 26)
    local = [off for off, t in targets.items() if t == img.symbols["helper"] + 8]
    external = [off for off, t in targets.items() if t != img.symbols["helper"] + 8]
    assert local and external
    for off in external:
        stub = targets[off] - img.base
        words = struct.unpack_from("<8I", img.image, stub)
        assert words[0] == 0xF8410018  # std r2, 24(r1)
        assert (
            (words[1] & 0xFFFF) << 48 | (words[2] & 0xFFFF) << 32 | (words[4] & 0xFFFF) << 16 | (words[5] & 0xFFFF)
        ) == 0x7F0012345670
        assert u32(img.image, text - img.base + off + 4) == LD_R2_24_R1  # the nop became the TOC restore
    for off in local:  # a call that keeps the TOC has nothing to restore
        assert u32(img.image, text - img.base + off + 4) != LD_R2_24_R1


def test_global_entry_and_toc16_pairs_reach_the_symbol() -> None:
    obj = compile_for("ppc64le", "static int tab[64]; int *addr(int i) { return &tab[i & 63]; }\n", "-O2", "-fPIC")
    img = relocate(obj, BASE, resolver())
    text = img.sections[".text"] - img.base
    fn = img.symbols["addr"] - img.base
    addis, addi = u32(img.image, fn), u32(img.image, fn + 4)  # addis r2,r12,.TOC.-addr@ha ; addi r2,r2,...@l
    toc = img.base + fn + (sext(addis, 16) << 16) + sext(addi, 16)
    relocs = relocations(obj)
    ha = next(r for r in relocs if r[3] == 50)  # TOC16_HA
    lo = next(r for r in relocs if r[3] == 48)  # TOC16_LO
    address = toc + (sext(u32(img.image, text + ha[2]), 16) << 16) + sext(u32(img.image, text + lo[2]), 16)
    assert address == img.symbols["tab"]


def test_external_call_without_a_nop_is_refused() -> None:
    obj = bytearray(compile_for("ppc64le", CALLS, "-O2", "-fPIC"))
    text = ELFFile(BytesIO(bytes(obj))).get_section_by_name(".text")
    offs = [r[2] for r in relocations(bytes(obj)) if r[3] == 10]
    for off in offs:  # every call's nop becomes "ori 1,1,0": no place for the TOC restore
        if struct.unpack_from("<I", obj, text["sh_offset"] + off + 4)[0] == NOP:
            struct.pack_into("<I", obj, text["sh_offset"] + off + 4, 0x60210000)
    with pytest.raises(UnsupportedRelocationError, match="R_PPC64_REL24 at .text\\+0x[0-9a-f]+: .*no nop"):
        relocate(bytes(obj), BASE, resolver())


def test_tls_is_refused_and_unknown_types_are_named() -> None:
    with pytest.raises(UnsupportedRelocationError, match="thread-local"):
        relocate(
            compile_for("ppc64le", "__thread int t; int f(void) { return ++t; }\n", "-O2", "-fPIC"), BASE, resolver()
        )
    obj = compile_for("ppc64le", CALLS, "-O2", "-fPIC")
    entry = relocations(obj)[0]
    with pytest.raises(
        UnsupportedRelocationError,
        match="unknown ppc64le relocation type 200 at %s\\+0x%x" % (entry[1].replace(".", "\\."), entry[2]),
    ):
        relocate(with_type(obj, entry[0], 200), BASE, resolver())
