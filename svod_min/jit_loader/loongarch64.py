"""loongarch64 relocations (LoongArch ELF psABI v2, normal and medium code models).

Supported: 32, 64, 32_PCREL, 64_PCREL, B16, B21, B26 and CALL36 (external
targets through 24-byte stubs ``pcaddu12i $t8,0; ld.d $t8,$t8,16;
jirl $zero,$t8,0; nop; .quad target`` inside the image), PCALA_HI20/LO12 and
GOT_PC_HI20/LO12 (page-relative, like AArch64's ADRP; GOT inside the image),
PCREL20_S2, ABS_HI20/LO12 and ABS64_LO20/HI12 (absolute, range-checked), and
the label-difference types ADD6/8/16/24/32/64 and SUB6/8/16/24/32/64. RELAX
and ALIGN are relaxation hints: no code moves, the assembler's padding stays.
The stack-based relocations of binutils before 2.40 are refused by name.
"""

from __future__ import annotations

import struct

from .arch import CALL, DIRECT, GOT, Arch, FieldOverflow, RelocSpec, check_aligned, check_signed
from .elf import EM_LOONGARCH

_U32 = struct.Struct("<I")
_MASK64 = (1 << 64) - 1


def _patch(image: bytearray, off: int, clear: int, bits: int) -> None:
    insn = _U32.unpack_from(image, off)[0]
    _U32.pack_into(image, off, (insn & ~clear & 0xFFFFFFFF) | bits)


def _signed64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


_SI20 = 0xFFFFF << 5  # lu12i.w / pcalau12i / pcaddu12i / pcaddu18i / lu32i.d / pcaddi
_SI12 = 0xFFF << 10  # addi.d / ld.* / st.* / ori / lu52i.d
_OFFS16 = 0xFFFF << 10


def _abs64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    struct.pack_into("<Q", image, off, (s + a) & _MASK64)


def _abs32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    value = _signed64(s + a)
    if not -(1 << 31) <= value < (1 << 32):
        raise FieldOverflow(value, "absolute address does not fit in 32 bits")
    _U32.pack_into(image, off, value & 0xFFFFFFFF)


def _pcrel32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _U32.pack_into(image, off, check_signed(_signed64(s + a - p), 32, "PC-relative offset") & 0xFFFFFFFF)


def _pcrel64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    struct.pack_into("<Q", image, off, (s + a - p) & _MASK64)


def _arith(width: int, sign: int) -> object:
    """ADDn / SUBn: add or subtract S + A to the field in place (label differences)."""
    mask = (1 << (8 * width)) - 1

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        old = int.from_bytes(image[off : off + width], "little")
        image[off : off + width] = ((old + sign * (s + a)) & mask).to_bytes(width, "little")

    return apply


def _six(sign: int) -> object:
    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        old = image[off]
        image[off] = (old & 0xC0) | (((old & 0x3F) + sign * (s + a)) & 0x3F)

    return apply


def _branch(bits: int) -> object:
    """B16 (beq...: offs16 at 10), B21 (beqz: + offs[20:16] at 0), B26 (b/bl: + offs[25:16] at 0)."""

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        delta = check_aligned(_signed64(s + a - p), 4, "branch offset")
        words = check_signed(delta >> 2, bits, "branch offset") & ((1 << bits) - 1)
        low, high = words & 0xFFFF, words >> 16
        _patch(image, off, _OFFS16 | ((1 << (bits - 16)) - 1), (low << 10) | high)

    return apply


def _page_hi20(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    """pcalau12i: the 4 KiB page of S + A (rounded as its LO12 partner sign-extends) from P's page."""
    target = _signed64(s + a)
    delta = ((target + 0x800) & ~0xFFF) - (p & ~0xFFF)
    hi = check_signed(delta >> 12, 20, "page offset")
    _patch(image, off, _SI20, (hi & 0xFFFFF) << 5)


def _lo12(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _patch(image, off, _SI12, ((s + a) & 0xFFF) << 10)


def _pcrel20_s2(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    delta = check_aligned(_signed64(s + a - p), 4, "pcaddi offset")
    _patch(image, off, _SI20, (check_signed(delta >> 2, 20, "pcaddi offset") & 0xFFFFF) << 5)


def _call36(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    """pcaddu18i + jirl (8 bytes): a 38-bit signed, 4-byte aligned offset."""
    delta = check_aligned(_signed64(s + a - p), 4, "call offset")
    hi = check_signed((delta + 0x20000) >> 18, 20, "call offset")
    lo = (delta - (hi << 18)) >> 2
    _patch(image, off, _SI20, (hi & 0xFFFFF) << 5)
    _patch(image, off + 4, _OFFS16, (lo & 0xFFFF) << 10)


def _abs_hi20(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    value = _signed64(s + a)
    check_signed(value, 32, "absolute address (lu12i.w + ori; load below 2 GiB or compile with -fPIC)")
    _patch(image, off, _SI20, ((value >> 12) & 0xFFFFF) << 5)


def _abs64_lo20(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _patch(image, off, _SI20, (((s + a) >> 32) & 0xFFFFF) << 5)


def _abs64_hi12(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _patch(image, off, _SI12, (((s + a) >> 52) & 0xFFF) << 10)


def _write_stub(image: bytearray, off: int, target: int) -> None:
    # pcaddu12i $t8, 0 ; ld.d $t8, $t8, 16 ; jirl $zero, $t8, 0 ; nop ; .quad target
    image[off : off + 24] = struct.pack("<IIIIQ", 0x1C000014, 0x28C04294, 0x4C000280, 0x03400000, target & _MASK64)


_RELOCS = {
    1: RelocSpec("R_LARCH_32", 4, DIRECT, _abs32),
    2: RelocSpec("R_LARCH_64", 8, DIRECT, _abs64),
    47: RelocSpec("R_LARCH_ADD8", 1, DIRECT, _arith(1, 1)),
    48: RelocSpec("R_LARCH_ADD16", 2, DIRECT, _arith(2, 1)),
    49: RelocSpec("R_LARCH_ADD24", 3, DIRECT, _arith(3, 1)),
    50: RelocSpec("R_LARCH_ADD32", 4, DIRECT, _arith(4, 1)),
    51: RelocSpec("R_LARCH_ADD64", 8, DIRECT, _arith(8, 1)),
    52: RelocSpec("R_LARCH_SUB8", 1, DIRECT, _arith(1, -1)),
    53: RelocSpec("R_LARCH_SUB16", 2, DIRECT, _arith(2, -1)),
    54: RelocSpec("R_LARCH_SUB24", 3, DIRECT, _arith(3, -1)),
    55: RelocSpec("R_LARCH_SUB32", 4, DIRECT, _arith(4, -1)),
    56: RelocSpec("R_LARCH_SUB64", 8, DIRECT, _arith(8, -1)),
    64: RelocSpec("R_LARCH_B16", 4, DIRECT, _branch(16)),
    65: RelocSpec("R_LARCH_B21", 4, DIRECT, _branch(21)),
    66: RelocSpec("R_LARCH_B26", 4, CALL, _branch(26)),
    67: RelocSpec("R_LARCH_ABS_HI20", 4, DIRECT, _abs_hi20),
    68: RelocSpec("R_LARCH_ABS_LO12", 4, DIRECT, _lo12),
    69: RelocSpec("R_LARCH_ABS64_LO20", 4, DIRECT, _abs64_lo20),
    70: RelocSpec("R_LARCH_ABS64_HI12", 4, DIRECT, _abs64_hi12),
    71: RelocSpec("R_LARCH_PCALA_HI20", 4, DIRECT, _page_hi20),
    72: RelocSpec("R_LARCH_PCALA_LO12", 4, DIRECT, _lo12),
    75: RelocSpec("R_LARCH_GOT_PC_HI20", 4, GOT, _page_hi20),
    76: RelocSpec("R_LARCH_GOT_PC_LO12", 4, GOT, _lo12),
    99: RelocSpec("R_LARCH_32_PCREL", 4, DIRECT, _pcrel32),
    103: RelocSpec("R_LARCH_PCREL20_S2", 4, DIRECT, _pcrel20_s2),
    105: RelocSpec("R_LARCH_ADD6", 1, DIRECT, _six(1)),
    106: RelocSpec("R_LARCH_SUB6", 1, DIRECT, _six(-1)),
    109: RelocSpec("R_LARCH_64_PCREL", 8, DIRECT, _pcrel64),
    110: RelocSpec("R_LARCH_CALL36", 8, CALL, _call36),
}

_TLS = "thread-local storage is not supported in kernels"
_DYN = "dynamic relocation in a relocatable object"
_LARGE = "the extreme code model is not supported; use the normal or medium model"
_SOP = "stack-based relocations (binutils before 2.40) are not supported; rebuild with a newer assembler"
_REFUSED = {
    3: ("R_LARCH_RELATIVE", _DYN),
    4: ("R_LARCH_COPY", _DYN),
    5: ("R_LARCH_JUMP_SLOT", _DYN),
    12: ("R_LARCH_IRELATIVE", "IFUNC relocations are not supported"),
    20: ("R_LARCH_MARK_LA", _SOP),
    21: ("R_LARCH_MARK_PCREL", _SOP),
    73: ("R_LARCH_PCALA64_LO20", _LARGE),
    74: ("R_LARCH_PCALA64_HI12", _LARGE),
    77: ("R_LARCH_GOT64_PC_LO20", _LARGE),
    78: ("R_LARCH_GOT64_PC_HI12", _LARGE),
    79: ("R_LARCH_GOT_HI20", "absolute GOT addressing (non-PIC) is not supported; compile with -fPIC"),
    80: ("R_LARCH_GOT_LO12", "absolute GOT addressing (non-PIC) is not supported; compile with -fPIC"),
    81: ("R_LARCH_GOT64_LO20", _LARGE),
    82: ("R_LARCH_GOT64_HI12", _LARGE),
    107: ("R_LARCH_ADD_ULEB128", "ULEB128 label differences are not supported"),
    108: ("R_LARCH_SUB_ULEB128", "ULEB128 label differences are not supported"),
}
_REFUSED.update({t: ("R_LARCH_SOP(%d)" % t, _SOP) for t in range(22, 47)})
_REFUSED.update(
    {t: ("R_LARCH_TLS(%d)" % t, _TLS) for t in list(range(6, 12)) + list(range(83, 99)) + list(range(111, 127))}
)

LOONGARCH64 = Arch(
    name="loongarch64",
    machine=EM_LOONGARCH,
    relocs=_RELOCS,
    refused={k: v[0] for k, v in _REFUSED.items()},
    refuse_reason={k: v[1] for k, v in _REFUSED.items()},
    stub_size=24,
    write_stub=_write_stub,
    addend_on_target=True,
    none_types=frozenset({0, 100, 102}),  # NONE, RELAX, ALIGN
    page_size=16384,  # LoongArch Linux (and qemu-loongarch64) use 16 KiB pages
)
