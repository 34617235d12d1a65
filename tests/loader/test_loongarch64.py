"""loongarch64 relocations: branches, CALL36, page pairs, absolute forms, ranges, refusals.

Execution under qemu and the comparison with ld.lld are in tests/foreign/ and
test_linker_oracle_foreign.py; here each encoder is decoded back independently
(instruction layouts from the LoongArch reference manual).
"""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("elftools")

from support.foreign_unit import apply, compile_for, relocations, resolver, sext, u32, with_type  # noqa: E402

from svod_min.error import FieldOverflow, LoaderError, UnsupportedRelocationError  # noqa: E402
from svod_min.jit_loader import relocate  # noqa: E402

P = 0x10000
BL, BEQ, BEQZ = 0x54000000, 0x58000000, 0x40000000


def _offs26(insn: int) -> int:
    return sext(((insn & 0x3FF) << 16) | ((insn >> 10) & 0xFFFF), 26) << 2


def _offs21(insn: int) -> int:
    return sext(((insn & 0x1F) << 16) | ((insn >> 10) & 0xFFFF), 21) << 2


def _offs16(insn: int) -> int:
    return sext((insn >> 10) & 0xFFFF, 16) << 2


@pytest.mark.parametrize(
    "name, template, decode, bits",
    [
        ("R_LARCH_B26", BL, _offs26, 28),
        ("R_LARCH_B21", BEQZ | 4, _offs21, 23),
        ("R_LARCH_B16", BEQ | 0x85, _offs16, 18),
    ],
)
def test_branches_decode_and_stop_at_their_range(name: str, template: int, decode, bits: int) -> None:
    limit = 1 << (bits - 1)
    for delta in (4, -4, limit - 4, -limit, 0x1230):
        out = u32(apply("loongarch64", name, struct.pack("<I", template), P + delta, p=P))
        assert decode(out) == delta and out & 0xFC000000 == template & 0xFC000000
        if name != "R_LARCH_B26":
            assert out & 0x3FF == template & 0x3FF if name == "R_LARCH_B16" else out & 0x3E0 == template & 0x3E0
    for bad in (limit, -limit - 4, 2):
        with pytest.raises(FieldOverflow):
            apply("loongarch64", name, struct.pack("<I", template), P + bad, p=P)


@pytest.mark.parametrize("delta", [0, 4, -4, 0x1FFFC, 0x20000, -0x20000, 0x123456788, -0x2000000000, 0x1FFFFDFFFC])
def test_call36_pair_reaches_its_target(delta: int) -> None:
    out = apply("loongarch64", "R_LARCH_CALL36", struct.pack("<II", 0x1E000001, 0x4C000021), P + delta, p=P)
    hi, lo = u32(out), u32(out, 4)
    assert (sext(hi >> 5, 20) << 18) + (sext(lo >> 10, 16) << 2) == delta
    assert hi & 0x1F == 1 and lo & 0x3FF == 0x21  # registers kept


def test_call36_past_its_range_is_refused() -> None:
    with pytest.raises(FieldOverflow):
        apply("loongarch64", "R_LARCH_CALL36", bytes(8), P + 0x1FFFFE0000, p=P)


@pytest.mark.parametrize("target", [0x12345678, 0x12345FFF, 0x12345800, 0x40000ABC])
def test_page_pair_reaches_the_address(target: int) -> None:
    hi = u32(apply("loongarch64", "R_LARCH_PCALA_HI20", struct.pack("<I", 0x1A000004), target, p=0x40001234))
    lo = u32(apply("loongarch64", "R_LARCH_PCALA_LO12", struct.pack("<I", 0x02C00084), target, p=0x40001238))
    assert (0x40001234 & ~0xFFF) + (sext(hi >> 5, 20) << 12) + sext(lo >> 10, 12) == target


def test_absolute_fields_rebuild_the_address() -> None:
    value = 0xFEDCBA9876543210
    hi12 = u32(apply("loongarch64", "R_LARCH_ABS64_HI12", bytes(4), value))
    lo20 = u32(apply("loongarch64", "R_LARCH_ABS64_LO20", bytes(4), value))
    assert (hi12 >> 10) & 0xFFF == 0xFED and (lo20 >> 5) & 0xFFFFF == 0xCBA98  # lu52i.d / lu32i.d
    with pytest.raises(FieldOverflow):
        apply("loongarch64", "R_LARCH_ABS_HI20", bytes(4), value)  # lu12i.w + ori alone reach 2 GiB
    low = 0x7654321F
    hi = u32(apply("loongarch64", "R_LARCH_ABS_HI20", bytes(4), low))
    lo = u32(apply("loongarch64", "R_LARCH_ABS_LO12", bytes(4), low))
    assert (sext(hi >> 5, 20) << 12) | ((lo >> 10) & 0xFFF) == low


SRC = (
    "static int tab[64]; extern int ext; float expf(float);\n"
    "int *addr(int i) { return &tab[i & 63]; } int get_ext(void) { return ext; } "
    "float call(float x) { return expf(x); }\n"
)


def test_relocated_object_reaches_its_data_and_stub() -> None:
    obj = compile_for("loongarch64", SRC, "-O2", "-fPIC")
    img = relocate(obj, 0x40000000, resolver({"expf": 0x7F0012345670, "ext": 0x7F00000000F0}))
    text = img.sections[".text"] - img.base
    relocs = relocations(obj)
    hi = next(r for r in relocs if r[3] == 71)  # PCALA_HI20 -> tab
    lo = next(r for r in relocs if r[3] == 72 and r[2] > hi[2])
    page = ((img.base + text + hi[2]) & ~0xFFF) + (sext(u32(img.image, text + hi[2]) >> 5, 20) << 12)
    assert page + sext(u32(img.image, text + lo[2]) >> 10, 12) == img.symbols["tab"]
    call = next(r for r in relocs if r[3] in (66, 110))  # B26 or CALL36 -> expf, through a stub
    insn = u32(img.image, text + call[2])
    off = (
        _offs26(insn)
        if call[3] == 66
        else (sext(insn >> 5, 20) << 18) + (sext(u32(img.image, text + call[2] + 4) >> 10, 16) << 2)
    )
    stub = text + call[2] + off
    assert struct.unpack_from("<Q", img.image, stub + 16)[0] == 0x7F0012345670


def test_images_are_16k_aligned_and_bases_must_be_too() -> None:
    obj = compile_for("loongarch64", SRC, "-O2", "-fPIC")
    img = relocate(obj, 0x40000000, resolver())
    assert all(seg.offset % 16384 == 0 for seg in img.segments) and img.size % 16384 == 0
    with pytest.raises(LoaderError, match="not page-aligned"):
        relocate(obj, 0x40001000, resolver())


def test_refusals_name_the_type() -> None:
    with pytest.raises(UnsupportedRelocationError, match="thread-local"):
        relocate(
            compile_for("loongarch64", "__thread int t; int f(void) { return ++t; }\n", "-O2", "-fPIC"),
            0x40000000,
            resolver(),
        )
    obj = compile_for("loongarch64", SRC, "-O2", "-fPIC")
    entry = relocations(obj)[0]
    with pytest.raises(UnsupportedRelocationError, match="R_LARCH_SOP\\(30\\) \\(type 30\\) at .*stack-based"):
        relocate(with_type(obj, entry[0], 30), 0x40000000, resolver())
    with pytest.raises(
        UnsupportedRelocationError,
        match="unknown loongarch64 relocation type 200 at %s\\+0x%x" % (entry[1].replace(".", "\\."), entry[2]),
    ):
        relocate(with_type(obj, entry[0], 200), 0x40000000, resolver())
