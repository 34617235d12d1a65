"""riscv64 relocations (RISC-V ELF psABI, medlow/medany code models, PIC or not).

Supported: 32, 64, 32_PCREL, BRANCH, JAL, RVC_BRANCH, RVC_JUMP, CALL/CALL_PLT
(``auipc``+``jalr``; external targets through 24-byte stubs
``auipc t1,0; ld t1,16(t1); jr t1; nop; .quad target`` inside the image),
PCREL_HI20 and GOT_HI20 (GOT inside the image) with their PCREL_LO12_I/S
partners, which name the ``auipc``'s label and take S, A and P from it, the
absolute HI20/LO12_I/LO12_S (non-PIC medlow: the image must lie below 2 GiB,
else a range error), and the label-difference types ADD8..64, SUB6..64,
SET6..32. ALIGN and RELAX are linker-relaxation hints: this loader moves no
code, so the assembler's padding stays, valid if less well aligned.
"""

from __future__ import annotations

import struct

from .arch import CALL, DIRECT, GOT, HI20_LABEL, Arch, FieldOverflow, RelocSpec, check_aligned, check_signed
from .elf import EM_RISCV

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_MASK64 = (1 << 64) - 1


def _patch32(image: bytearray, off: int, clear: int, bits: int) -> None:
    insn = _U32.unpack_from(image, off)[0]
    _U32.pack_into(image, off, (insn & ~clear & 0xFFFFFFFF) | bits)


def _patch16(image: bytearray, off: int, clear: int, bits: int) -> None:
    insn = _U16.unpack_from(image, off)[0]
    _U16.pack_into(image, off, (insn & ~clear & 0xFFFF) | bits)


def _bit(value: int, hi: int, lo: int) -> int:
    return (value >> lo) & ((1 << (hi - lo + 1)) - 1)


def _hi_lo(delta: int, what: str) -> tuple:
    """Split a 32-bit value for auipc/lui + a signed 12-bit immediate."""
    hi = check_signed((delta + 0x800) >> 12, 20, what)
    return hi & 0xFFFFF, delta - (hi << 12)


def _i_imm(lo: int) -> int:
    return (lo & 0xFFF) << 20


def _s_imm(lo: int) -> int:
    return (_bit(lo, 11, 5) << 25) | (_bit(lo, 4, 0) << 7)


_I_MASK = 0xFFF << 20
_S_MASK = (0x7F << 25) | (0x1F << 7)
_U_MASK = 0xFFFFF000


# -- data --------------------------------------------------------------------


def _abs64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    struct.pack_into("<Q", image, off, (s + a) & _MASK64)


def _abs32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    value = s + a
    if not -(1 << 31) <= value < (1 << 32):
        raise FieldOverflow(value, "absolute address does not fit in 32 bits")
    _U32.pack_into(image, off, value & 0xFFFFFFFF)


def _pcrel32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _U32.pack_into(image, off, check_signed(s + a - p, 32, "PC-relative offset") & 0xFFFFFFFF)


def _arith(width: int, sign: int) -> object:
    """ADDn / SUBn: add or subtract S + A to the field in place (label differences)."""
    fmt = {1: "<B", 2: "<H", 4: "<I", 8: "<Q"}[width]
    mask = (1 << (8 * width)) - 1

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        old = struct.unpack_from(fmt, image, off)[0]
        struct.pack_into(fmt, image, off, (old + sign * (s + a)) & mask)

    return apply


def _set(width: int) -> object:
    fmt = {1: "<B", 2: "<H", 4: "<I"}[width]

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        struct.pack_into(fmt, image, off, (s + a) & ((1 << (8 * width)) - 1))

    return apply


def _six(sign: int) -> object:
    """SET6 / SUB6: the low 6 bits of a byte (DWARF call frame instructions)."""

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        old = image[off]
        value = (s + a) if sign == 0 else (old & 0x3F) - (s + a)
        image[off] = (old & 0xC0) | (value & 0x3F)

    return apply


# -- instructions ------------------------------------------------------------


def _branch(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    """B-type: 13-bit signed, even."""
    d = check_signed(check_aligned(s + a - p, 2, "branch offset"), 13, "branch offset")
    bits = (_bit(d, 12, 12) << 31) | (_bit(d, 10, 5) << 25) | (_bit(d, 4, 1) << 8) | (_bit(d, 11, 11) << 7)
    _patch32(image, off, 0xFE000F80, bits)


def _jal(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    """J-type: 21-bit signed, even."""
    d = check_signed(check_aligned(s + a - p, 2, "jump offset"), 21, "jump offset")
    bits = (_bit(d, 20, 20) << 31) | (_bit(d, 10, 1) << 21) | (_bit(d, 11, 11) << 20) | (_bit(d, 19, 12) << 12)
    _patch32(image, off, 0xFFFFF000, bits)


def _rvc_branch(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    """c.beqz / c.bnez: 9-bit signed, even."""
    d = check_signed(check_aligned(s + a - p, 2, "compressed branch offset"), 9, "compressed branch offset")
    bits = (
        (_bit(d, 8, 8) << 12)
        | (_bit(d, 4, 3) << 10)
        | (_bit(d, 7, 6) << 5)
        | (_bit(d, 2, 1) << 3)
        | (_bit(d, 5, 5) << 2)
    )
    _patch16(image, off, 0x1C7C, bits)


def _rvc_jump(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    """c.j: 12-bit signed, even."""
    d = check_signed(check_aligned(s + a - p, 2, "compressed jump offset"), 12, "compressed jump offset")
    bits = (
        (_bit(d, 11, 11) << 12)
        | (_bit(d, 4, 4) << 11)
        | (_bit(d, 9, 8) << 9)
        | (_bit(d, 10, 10) << 8)
        | (_bit(d, 6, 6) << 7)
        | (_bit(d, 7, 7) << 6)
        | (_bit(d, 3, 1) << 3)
        | (_bit(d, 5, 5) << 2)
    )
    _patch16(image, off, 0x1FFC, bits)


def _call(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    """auipc + jalr pair (8 bytes)."""
    hi, lo = _hi_lo(s + a - p, "call offset")
    _patch32(image, off, _U_MASK, hi << 12)
    _patch32(image, off + 4, _I_MASK, _i_imm(lo))


def _pcrel_hi20(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    hi, _lo = _hi_lo(s + a - p, "PC-relative offset")
    _patch32(image, off, _U_MASK, hi << 12)


def _pcrel_lo12(store: bool) -> object:
    """S, A and P are the HI20's (the layout resolves the label), so the low part matches it."""

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        _hi, lo = _hi_lo(s + a - p, "PC-relative offset")
        _patch32(image, off, _S_MASK if store else _I_MASK, _s_imm(lo) if store else _i_imm(lo))

    return apply


def _abs_hi20(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    hi, _lo = _hi_lo(_abs_32(s + a), "absolute address (non-PIC code: load below 2 GiB or compile with -fPIC)")
    _patch32(image, off, _U_MASK, hi << 12)


def _abs_lo12(store: bool) -> object:
    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        lo = _abs_32(s + a) - (((_abs_32(s + a) + 0x800) >> 12) << 12)
        _patch32(image, off, _S_MASK if store else _I_MASK, _s_imm(lo) if store else _i_imm(lo))

    return apply


def _abs_32(value: int) -> int:
    """lui sign-extends: an absolute address is reachable only in [-2 GiB, 2 GiB)."""
    return check_signed(value if value < (1 << 63) else value - (1 << 64), 32, "absolute address")


def _write_stub(image: bytearray, off: int, target: int) -> None:
    # auipc t1, 0 ; ld t1, 16(t1) ; jalr x0, 0(t1) ; nop ; .quad target
    image[off : off + 24] = struct.pack("<IIIIQ", 0x00000317, 0x01033303, 0x00030067, 0x00000013, target & _MASK64)


_RELOCS = {
    1: RelocSpec("R_RISCV_32", 4, DIRECT, _abs32),
    2: RelocSpec("R_RISCV_64", 8, DIRECT, _abs64),
    16: RelocSpec("R_RISCV_BRANCH", 4, DIRECT, _branch),
    17: RelocSpec("R_RISCV_JAL", 4, DIRECT, _jal),
    18: RelocSpec("R_RISCV_CALL", 8, CALL, _call),
    19: RelocSpec("R_RISCV_CALL_PLT", 8, CALL, _call),
    20: RelocSpec("R_RISCV_GOT_HI20", 4, GOT, _pcrel_hi20, is_hi20=True),
    23: RelocSpec("R_RISCV_PCREL_HI20", 4, DIRECT, _pcrel_hi20, is_hi20=True),
    24: RelocSpec("R_RISCV_PCREL_LO12_I", 4, DIRECT, _pcrel_lo12(False), anchor=HI20_LABEL),
    25: RelocSpec("R_RISCV_PCREL_LO12_S", 4, DIRECT, _pcrel_lo12(True), anchor=HI20_LABEL),
    26: RelocSpec("R_RISCV_HI20", 4, DIRECT, _abs_hi20),
    27: RelocSpec("R_RISCV_LO12_I", 4, DIRECT, _abs_lo12(False)),
    28: RelocSpec("R_RISCV_LO12_S", 4, DIRECT, _abs_lo12(True)),
    33: RelocSpec("R_RISCV_ADD8", 1, DIRECT, _arith(1, 1)),
    34: RelocSpec("R_RISCV_ADD16", 2, DIRECT, _arith(2, 1)),
    35: RelocSpec("R_RISCV_ADD32", 4, DIRECT, _arith(4, 1)),
    36: RelocSpec("R_RISCV_ADD64", 8, DIRECT, _arith(8, 1)),
    37: RelocSpec("R_RISCV_SUB8", 1, DIRECT, _arith(1, -1)),
    38: RelocSpec("R_RISCV_SUB16", 2, DIRECT, _arith(2, -1)),
    39: RelocSpec("R_RISCV_SUB32", 4, DIRECT, _arith(4, -1)),
    40: RelocSpec("R_RISCV_SUB64", 8, DIRECT, _arith(8, -1)),
    44: RelocSpec("R_RISCV_RVC_BRANCH", 2, DIRECT, _rvc_branch),
    45: RelocSpec("R_RISCV_RVC_JUMP", 2, DIRECT, _rvc_jump),
    52: RelocSpec("R_RISCV_SUB6", 1, DIRECT, _six(-1)),
    53: RelocSpec("R_RISCV_SET6", 1, DIRECT, _six(0)),
    54: RelocSpec("R_RISCV_SET8", 1, DIRECT, _set(1)),
    55: RelocSpec("R_RISCV_SET16", 2, DIRECT, _set(2)),
    56: RelocSpec("R_RISCV_SET32", 4, DIRECT, _set(4)),
    57: RelocSpec("R_RISCV_32_PCREL", 4, DIRECT, _pcrel32),
}

_TLS = "thread-local storage is not supported in kernels"
_DYN = "dynamic relocation in a relocatable object"
_REFUSED = {
    3: ("R_RISCV_RELATIVE", _DYN),
    4: ("R_RISCV_COPY", _DYN),
    5: ("R_RISCV_JUMP_SLOT", _DYN),
    46: ("R_RISCV_RVC_LUI", "compressed absolute addressing (non-PIC) is not supported; compile with -fPIC"),
    47: ("R_RISCV_GPREL_I", "gp-relative addressing needs a linker-set gp; not supported"),
    48: ("R_RISCV_GPREL_S", "gp-relative addressing needs a linker-set gp; not supported"),
    58: ("R_RISCV_IRELATIVE", "IFUNC relocations are not supported"),
    59: ("R_RISCV_PLT32", "32-bit PLT offsets are not supported"),
    60: ("R_RISCV_SET_ULEB128", "ULEB128 label differences are not supported"),
    61: ("R_RISCV_SUB_ULEB128", "ULEB128 label differences are not supported"),
}
_REFUSED.update({t: ("R_RISCV_TLS(%d)" % t, _TLS) for t in (6, 7, 8, 9, 10, 11, 21, 22, 29, 30, 31, 32, 49, 50)})

RISCV64 = Arch(
    name="riscv64",
    machine=EM_RISCV,
    relocs=_RELOCS,
    refused={k: v[0] for k, v in _REFUSED.items()},
    refuse_reason={k: v[1] for k, v in _REFUSED.items()},
    stub_size=24,
    write_stub=_write_stub,
    addend_on_target=True,
    none_types=frozenset({0, 43, 51}),  # NONE, ALIGN, RELAX
)
