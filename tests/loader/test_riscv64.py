"""riscv64 relocations: encoders decoded back independently, range checks, pairing, refusals.

Execution under qemu and the comparison with ld.lld are in tests/foreign/ and
test_linker_oracle_foreign.py; here each encoder is checked against a decoder
written from the ISA manual's immediate layouts, at and past the edges of its range.
"""

from __future__ import annotations

import struct

import pytest

pytest.importorskip("elftools")

from support.foreign_unit import apply, compile_for, relocations, resolver, sext, u32, with_type  # noqa: E402

from svod_min.error import ElfFormatError, FieldOverflow, RelocationRangeError, UnsupportedRelocationError  # noqa: E402
from svod_min.jit_loader import relocate  # noqa: E402

NOP32 = struct.pack("<I", 0x00000013)
P = 0x1000


def _b_imm(insn: int) -> int:
    return sext(
        ((insn >> 31) << 12) | (((insn >> 7) & 1) << 11) | (((insn >> 25) & 0x3F) << 5) | (((insn >> 8) & 0xF) << 1), 13
    )


def _j_imm(insn: int) -> int:
    return sext(
        ((insn >> 31) << 20)
        | (((insn >> 12) & 0xFF) << 12)
        | (((insn >> 20) & 1) << 11)
        | (((insn >> 21) & 0x3FF) << 1),
        21,
    )


def _cb_imm(h: int) -> int:
    return sext(
        (((h >> 12) & 1) << 8)
        | (((h >> 5) & 3) << 6)
        | (((h >> 2) & 1) << 5)
        | (((h >> 10) & 3) << 3)
        | (((h >> 3) & 3) << 1),
        9,
    )


def _cj_imm(h: int) -> int:
    bits = {12: 11, 11: 4, 10: 9, 9: 8, 8: 10, 7: 6, 6: 7, 5: 3, 4: 2, 3: 1, 2: 5}
    return sext(sum(((h >> src) & 1) << dst for src, dst in bits.items()), 12)


@pytest.mark.parametrize("delta", [0, 4, -4, 0x7FE, 0x800, -0x800, 0x12345678, -0x7FFFF800, 0x7FFFF7FC])
def test_call_pair_reaches_its_target(delta: int) -> None:
    out = apply("riscv64", "R_RISCV_CALL_PLT", struct.pack("<II", 0x00000097, 0x000080E7), P + delta)
    hi, lo = u32(out), u32(out, 4)
    assert sext(hi & 0xFFFFF000, 32) + sext(lo >> 20, 12) == delta
    assert hi & 0xFFF == 0x097 and lo & 0xFFFFF == 0x080E7  # opcode and registers kept


@pytest.mark.parametrize("delta", [0x7FFFF800, -0x80000801])
def test_call_past_2_gib_is_refused(delta: int) -> None:
    with pytest.raises(FieldOverflow):
        apply("riscv64", "R_RISCV_CALL", bytes(8), P + delta)


@pytest.mark.parametrize(
    "name, decode, limit, template",
    [
        ("R_RISCV_BRANCH", _b_imm, 1 << 12, 0x00B50063),  # beq a0, a1
        ("R_RISCV_JAL", _j_imm, 1 << 20, 0x000000EF),  # jal ra
    ],
)
def test_branches_decode_and_stop_at_their_range(name: str, decode, limit: int, template: int) -> None:
    for delta in (2, -2, limit - 2, -limit, 0x222):
        out = u32(apply("riscv64", name, struct.pack("<I", template), P + delta))
        assert decode(out) == delta and out & 0x7F == template & 0x7F
    for bad in (limit, -limit - 2, 3):
        with pytest.raises(FieldOverflow):
            apply("riscv64", name, struct.pack("<I", template), P + bad)


@pytest.mark.parametrize(
    "name, decode, limit, template",
    [
        ("R_RISCV_RVC_BRANCH", _cb_imm, 1 << 8, 0xC101),  # c.beqz s0
        ("R_RISCV_RVC_JUMP", _cj_imm, 1 << 11, 0xA001),  # c.j
    ],
)
def test_compressed_branches(name: str, decode, limit: int, template: int) -> None:
    for delta in (2, -2, limit - 2, -limit, 0x56):
        out = struct.unpack("<H", apply("riscv64", name, struct.pack("<H", template), P + delta))[0]
        assert decode(out) == delta and out & 0xE003 == template & 0xE003
    with pytest.raises(FieldOverflow):
        apply("riscv64", name, struct.pack("<H", template), P + limit)


def test_label_differences_add_and_subtract_in_place() -> None:
    assert apply("riscv64", "R_RISCV_ADD32", struct.pack("<I", 5), 0x40) == struct.pack("<I", 0x45)
    assert apply("riscv64", "R_RISCV_SUB16", struct.pack("<H", 0x45), 0x40) == struct.pack("<H", 5)
    assert apply("riscv64", "R_RISCV_SUB6", bytes([0xC7]), 2) == bytes([0xC5])  # top two bits kept
    assert apply("riscv64", "R_RISCV_SET6", bytes([0xC0]), 0x3F) == bytes([0xFF])


SRC = "static int g[8]; extern int ext; int *addr_g(int i) { return &g[i & 7]; } int get_ext(void) { return ext; }\n"


def test_pcrel_lo12_takes_its_value_through_the_label() -> None:
    obj = compile_for("riscv64", SRC, "-O2", "-fPIC")
    img = relocate(obj, 0x40000000, resolver({"ext": 0x7F0000001230}))
    relocs = relocations(obj)
    got_hi = [r for r in relocs if r[3] == 20]  # GOT_HI20: ext through the GOT
    pc_hi = [r for r in relocs if r[3] == 23]  # PCREL_HI20: g
    assert got_hi and pc_hi
    text = img.sections[".text"]
    for entry_off, _sec, off, _t in pc_hi:
        auipc = u32(img.image, text - img.base + off)
        lo = next(r for r in relocs if r[3] in (24, 25) and r[2] > off)
        lo_insn = u32(img.image, text - img.base + lo[2])
        target = text + off + sext(auipc & 0xFFFFF000, 32) + sext(lo_insn >> 20, 12)
        assert target == img.symbols["g"]


def test_pcrel_lo12_without_a_hi20_at_its_label_is_an_error() -> None:
    obj = compile_for("riscv64", SRC, "-O2", "-fPIC")
    entry = next(r for r in relocations(obj) if r[3] == 23)
    with pytest.raises(
        ElfFormatError, match="PCREL_LO12_I at .text\\+0x[0-9a-f]+ names .* not the label of a PCREL_HI20"
    ):
        relocate(with_type(obj, entry[0], 17), 0x40000000, resolver())  # the HI20 became a JAL


def test_absolute_hi20_needs_an_image_below_2_gib() -> None:
    obj = compile_for("riscv64", "int g; int *addr(void) { return &g; }\n", "-O2", "-fno-pic", "-mcmodel=medlow")
    assert any(r[3] == 26 for r in relocations(obj)), "expected R_RISCV_HI20 from -mcmodel=medlow"
    relocate(obj, 0x40000000, resolver())
    with pytest.raises(RelocationRangeError, match="R_RISCV_HI20 .*absolute address"):
        relocate(obj, 0x7F0000000000, resolver())


def test_tls_is_refused_by_name() -> None:
    obj = compile_for("riscv64", "__thread int t; int f(void) { return ++t; }\n", "-O2", "-fPIC")
    with pytest.raises(UnsupportedRelocationError, match="thread-local"):
        relocate(obj, 0x40000000, resolver())


def test_unknown_type_names_type_section_and_offset() -> None:
    obj = compile_for("riscv64", SRC, "-O2", "-fPIC")
    entry = relocations(obj)[0]
    with pytest.raises(
        UnsupportedRelocationError,
        match="unknown riscv64 relocation type 200 at %s\\+0x%x" % (entry[1].replace(".", "\\."), entry[2]),
    ):
        relocate(with_type(obj, entry[0], 200), 0x40000000, resolver())
