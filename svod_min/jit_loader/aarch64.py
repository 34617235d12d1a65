"""AArch64 relocations (ELF for the Arm 64-bit Architecture, small model).

Supported: ABS64/32, PREL64/32, CALL26/JUMP26 (external targets through
16-byte veneers ``ldr x16, #8; br x16; .quad target`` inside the image),
ADR_PREL_PG_HI21(_NC), ADR_PREL_LO21, ADD_ABS_LO12_NC,
LDST8/16/32/64/128_ABS_LO12_NC, ADR_GOT_PAGE + LD64_GOT_LO12_NC (GOT inside
the image), LD_PREL_LO19, CONDBR19, TSTBR14 and MOVW_UABS_G0..G3.
"""

from __future__ import annotations

import struct

from .arch import CALL, DIRECT, GOT, Arch, FieldOverflow, RelocSpec, check_signed, check_unsigned_or_signed
from .elf import EM_AARCH64

_U32 = struct.Struct("<I")
_Q = struct.Struct("<Q")
_MASK64 = (1 << 64) - 1


def _patch(image: bytearray, off: int, clear: int, bits: int) -> None:
    insn = _U32.unpack_from(image, off)[0]
    _U32.pack_into(image, off, (insn & ~clear & 0xFFFFFFFF) | bits)


def _page(x: int) -> int:
    return x & ~0xFFF


def _abs64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _Q.pack_into(image, off, (s + a) & _MASK64)


def _abs32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _U32.pack_into(image, off, check_unsigned_or_signed(s + a, 32, "absolute address"))


def _prel64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _Q.pack_into(image, off, (s + a - p) & _MASK64)


def _prel32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _U32.pack_into(image, off, check_signed(s + a - p, 32, "PC-relative offset") & 0xFFFFFFFF)


def _branch(bits: int, shift: int) -> object:
    """B/BL (26 bits at 0), B.cond/CBZ/LDR literal (19 bits at 5), TBZ (14 bits at 5)."""
    mask = ((1 << bits) - 1) << shift

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        delta = s + a - p
        if delta & 3:
            raise FieldOverflow(delta, "branch offset %d is not a multiple of 4" % delta)
        imm = check_signed(delta >> 2, bits, "branch offset") & ((1 << bits) - 1)
        _patch(image, off, mask, imm << shift)

    return apply


def _adr_imm(imm: int) -> int:
    # ADR/ADRP split their 21-bit immediate: immlo in bits 29-30, immhi in 5-23.
    return ((imm & 3) << 29) | (((imm >> 2) & 0x7FFFF) << 5)


_ADR_MASK = (3 << 29) | (0x7FFFF << 5)


def _adrp(check: bool) -> object:
    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        delta = (_page(s + a) - _page(p)) >> 12
        if check:
            delta = check_signed(delta, 21, "page offset")
        _patch(image, off, _ADR_MASK, _adr_imm(delta & 0x1FFFFF))

    return apply


def _adr(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    delta = check_signed(s + a - p, 21, "ADR offset")
    _patch(image, off, _ADR_MASK, _adr_imm(delta & 0x1FFFFF))


def _lo12(shift: int) -> object:
    """ADD (shift 0) and LDR/STR of 1 << shift bytes: imm12 in bits 10-21, scaled."""

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        low = (s + a) & 0xFFF
        if low & ((1 << shift) - 1):
            raise FieldOverflow(low, "address low bits 0x%x are not %d-byte aligned" % (low, 1 << shift))
        _patch(image, off, 0xFFF << 10, (low >> shift) << 10)

    return apply


def _movw(group: int, check: bool) -> object:
    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        value = (s + a) & _MASK64
        if check and value >> (16 * (group + 1)):
            raise FieldOverflow(value, "address does not fit MOVW group %d" % group)
        _patch(image, off, 0xFFFF << 5, ((value >> (16 * group)) & 0xFFFF) << 5)

    return apply


def _write_veneer(image: bytearray, off: int, target: int) -> None:
    # ldr x16, #8 ; br x16 ; .quad target
    image[off : off + 16] = _U32.pack(0x58000050) + _U32.pack(0xD61F0200) + _Q.pack(target & _MASK64)


_RELOCS = {
    257: RelocSpec("R_AARCH64_ABS64", 8, DIRECT, _abs64),
    258: RelocSpec("R_AARCH64_ABS32", 4, DIRECT, _abs32),
    260: RelocSpec("R_AARCH64_PREL64", 8, DIRECT, _prel64, base_free=True),
    261: RelocSpec("R_AARCH64_PREL32", 4, DIRECT, _prel32, base_free=True),
    263: RelocSpec("R_AARCH64_MOVW_UABS_G0", 4, DIRECT, _movw(0, True)),
    264: RelocSpec("R_AARCH64_MOVW_UABS_G0_NC", 4, DIRECT, _movw(0, False)),
    265: RelocSpec("R_AARCH64_MOVW_UABS_G1", 4, DIRECT, _movw(1, True)),
    266: RelocSpec("R_AARCH64_MOVW_UABS_G1_NC", 4, DIRECT, _movw(1, False)),
    267: RelocSpec("R_AARCH64_MOVW_UABS_G2", 4, DIRECT, _movw(2, True)),
    268: RelocSpec("R_AARCH64_MOVW_UABS_G2_NC", 4, DIRECT, _movw(2, False)),
    269: RelocSpec("R_AARCH64_MOVW_UABS_G3", 4, DIRECT, _movw(3, False)),
    273: RelocSpec("R_AARCH64_LD_PREL_LO19", 4, DIRECT, _branch(19, 5), base_free=True),
    274: RelocSpec("R_AARCH64_ADR_PREL_LO21", 4, DIRECT, _adr, base_free=True),
    275: RelocSpec("R_AARCH64_ADR_PREL_PG_HI21", 4, DIRECT, _adrp(True), base_free=True),
    276: RelocSpec("R_AARCH64_ADR_PREL_PG_HI21_NC", 4, DIRECT, _adrp(False), base_free=True),
    277: RelocSpec("R_AARCH64_ADD_ABS_LO12_NC", 4, DIRECT, _lo12(0), base_free=True),
    278: RelocSpec("R_AARCH64_LDST8_ABS_LO12_NC", 4, DIRECT, _lo12(0), base_free=True),
    279: RelocSpec("R_AARCH64_TSTBR14", 4, DIRECT, _branch(14, 5), base_free=True),
    280: RelocSpec("R_AARCH64_CONDBR19", 4, DIRECT, _branch(19, 5), base_free=True),
    282: RelocSpec("R_AARCH64_JUMP26", 4, CALL, _branch(26, 0), base_free=True),
    283: RelocSpec("R_AARCH64_CALL26", 4, CALL, _branch(26, 0), base_free=True),
    284: RelocSpec("R_AARCH64_LDST16_ABS_LO12_NC", 4, DIRECT, _lo12(1), base_free=True),
    285: RelocSpec("R_AARCH64_LDST32_ABS_LO12_NC", 4, DIRECT, _lo12(2), base_free=True),
    286: RelocSpec("R_AARCH64_LDST64_ABS_LO12_NC", 4, DIRECT, _lo12(3), base_free=True),
    299: RelocSpec("R_AARCH64_LDST128_ABS_LO12_NC", 4, DIRECT, _lo12(4), base_free=True),
    311: RelocSpec("R_AARCH64_ADR_GOT_PAGE", 4, GOT, _adrp(True), base_free=True),
    312: RelocSpec("R_AARCH64_LD64_GOT_LO12_NC", 4, GOT, _lo12(3), base_free=True),
}

_TLS = "thread-local storage is not supported in kernels"
_REFUSED = {
    259: ("R_AARCH64_ABS16", "16-bit fields are not supported"),
    262: ("R_AARCH64_PREL16", "16-bit fields are not supported"),
    270: ("R_AARCH64_MOVW_SABS_G0", "signed MOVW relocations are not supported"),
    271: ("R_AARCH64_MOVW_SABS_G1", "signed MOVW relocations are not supported"),
    272: ("R_AARCH64_MOVW_SABS_G2", "signed MOVW relocations are not supported"),
    309: ("R_AARCH64_GOT_LD_PREL19", "tiny code model GOT loads are not supported"),
    1024: ("R_AARCH64_COPY", "dynamic relocation in a relocatable object"),
    1025: ("R_AARCH64_GLOB_DAT", "dynamic relocation in a relocatable object"),
    1026: ("R_AARCH64_JUMP_SLOT", "dynamic relocation in a relocatable object"),
    1027: ("R_AARCH64_RELATIVE", "dynamic relocation in a relocatable object"),
    1032: ("R_AARCH64_IRELATIVE", "IFUNC relocations are not supported"),
}
_REFUSED.update({t: ("R_AARCH64_TLS(%d)" % t, _TLS) for t in range(512, 574)})

AARCH64 = Arch(
    name="aarch64",
    machine=EM_AARCH64,
    relocs=_RELOCS,
    refused={k: v[0] for k, v in _REFUSED.items()},
    refuse_reason={k: v[1] for k, v in _REFUSED.items()},
    stub_size=16,
    write_stub=_write_veneer,
    addend_on_target=True,
    none_types=frozenset({0, 256}),
)
