"""ppc64le relocations (64-bit ELF V2 ABI, medium and small code models).

Supported: ADDR64/ADDR32, REL64/REL32, REL24 and REL14 (branches), REL16 and
REL16_LO/HI/HA (a global entry point computing ``.TOC.``), TOC (the TOC base
as 64 bits), TOC16 and TOC16_LO/HI/HA/DS/LO_DS (``S + A - .TOC.``), GOT16 and
GOT16_LO/HI/HA/DS/LO_DS (a GOT slot inside the image, relative to the TOC),
the absolute ADDR16 family (non-PIC, range-checked), and gcc's ``-fno-plt`` inline
call sequences (PLT16_HA/HI/LO/LO_DS against a GOT slot; PLTSEQ and PLTCALL are markers).

The layout puts the GOT at the end of the read-only segment and the TOC base
(``.TOC.``) where the writable data begins, so small-model (16-bit) offsets
reach the whole GOT and the first 32 KiB of ``.toc``/``.data``. A direct call
enters the callee at its local entry point (from ``st_other``), which skips the
TOC set-up since caller and callee share a TOC. A call to an external goes
through a 32-byte stub inside the image that saves r2 in the ABI's TOC save slot
and jumps with r12 holding the target (the global entry expects it); the ``nop``
after the ``bl`` becomes ``ld r2, 24(r1)``, restoring the TOC on return, and a
call without that ``nop`` is refused as linkers refuse it.
"""

from __future__ import annotations

import struct

from ..error import UnsupportedRelocationError
from .arch import CALL, DIRECT, GOT, TOC_BASE, Arch, FieldOverflow, RelocSpec, check_aligned, check_signed
from .elf import EM_PPC64

_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_MASK64 = (1 << 64) - 1

NOP = 0x60000000
LD_R2_24_R1 = 0xE8410018  # ld r2, 24(r1): the TOC restore after a call through a stub
_STD_R2_24_R1 = 0xF8410018


def _signed64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


# Halfword selectors: (name, function of the value, bits checked or 0).
def _lo(x: int) -> int:
    return x & 0xFFFF


def _hi(x: int) -> int:
    return (x >> 16) & 0xFFFF


def _ha(x: int) -> int:
    return ((x + 0x8000) >> 16) & 0xFFFF


def _half(pick: object, check_bits: int, ds: bool, what: str) -> object:
    """A 16-bit field: a D (or DS, low 2 bits kept) immediate picked from the value."""

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        value = _signed64(s + a - p)
        if check_bits:
            check_signed(value, check_bits, what)
        if ds:
            check_aligned(value, 4, what + " (DS form)")
        half = pick(value)  # type: ignore[operator]
        old = _U16.unpack_from(image, off)[0]
        _U16.pack_into(image, off, (old & 3) | (half & 0xFFFC) if ds else half)

    return apply


def _abs_half(pick: object, check_bits: int, ds: bool) -> object:
    inner = _half(pick, check_bits, ds, "absolute address")

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        inner(image, off, s, a, 0)  # type: ignore[operator]

    return apply


def _addr64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    struct.pack_into("<Q", image, off, (s + a) & _MASK64)


def _addr32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    value = _signed64(s + a)
    if not -(1 << 31) <= value < (1 << 32):
        raise FieldOverflow(value, "absolute address does not fit in 32 bits")
    _U32.pack_into(image, off, value & 0xFFFFFFFF)


def _rel64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    struct.pack_into("<Q", image, off, (s + a - p) & _MASK64)


def _rel32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _U32.pack_into(image, off, check_signed(_signed64(s + a - p), 32, "PC-relative offset") & 0xFFFFFFFF)


def _toc64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    # R_PPC64_TOC: the TOC base itself (p is the TOC base for this spec; S is unused).
    struct.pack_into("<Q", image, off, (p + a) & _MASK64)


def _branch(bits: int, mask: int) -> object:
    """I-form (bl, 24 bits) or B-form (bc, 14 bits) word offset; AA and LK bits kept."""

    def apply(image: bytearray, off: int, s: int, a: int, p: int) -> None:
        delta = check_signed(check_aligned(_signed64(s + a - p), 4, "branch offset"), bits, "branch offset")
        insn = _U32.unpack_from(image, off)[0]
        _U32.pack_into(image, off, (insn & ~mask & 0xFFFFFFFF) | (delta & mask))

    return apply


def local_entry_offset(other: int) -> int:
    """Bytes from a function's global to its local entry point (ELFv2 st_other bits 5-7)."""
    return ((1 << ((other >> 5) & 7)) >> 2) << 2


def _after_stub_call(template: bytearray, off: int, where: str) -> None:
    insn = _U32.unpack_from(template, off)[0]
    if not insn & 1:  # "b" (no link): a tail call that cannot restore r2
        raise UnsupportedRelocationError(
            "R_PPC64_REL24 at %s: a tail call (b) to an external function cannot restore the TOC; "
            "linkers refuse it too" % where
        )
    if off + 8 > len(template) or _U32.unpack_from(template, off + 4)[0] != NOP:
        raise UnsupportedRelocationError(
            "R_PPC64_REL24 at %s: the call to an external function has no nop after it for the TOC restore" % where
        )
    _U32.pack_into(template, off + 4, LD_R2_24_R1)


def _write_stub(image: bytearray, off: int, target: int) -> None:
    # std r2,24(r1); lis r12,T@highest; ori r12,r12,T@higher; sldi r12,r12,32;
    # oris r12,r12,T@h; ori r12,r12,T@l; mtctr r12; bctr
    t = target & _MASK64
    words = (
        _STD_R2_24_R1,
        0x3D800000 | (t >> 48),
        0x618C0000 | ((t >> 32) & 0xFFFF),
        0x798C07C6,
        0x658C0000 | ((t >> 16) & 0xFFFF),
        0x618C0000 | (t & 0xFFFF),
        0x7D8903A6,
        0x4E800420,
    )
    image[off : off + 32] = struct.pack("<8I", *words)


def _ident(x: int) -> int:
    return x & 0xFFFF


def _higher(x: int) -> int:
    return (x >> 32) & 0xFFFF


def _highera(x: int) -> int:
    return ((x + 0x8000) >> 32) & 0xFFFF


def _highest(x: int) -> int:
    return (x >> 48) & 0xFFFF


def _highesta(x: int) -> int:
    return ((x + 0x8000) >> 48) & 0xFFFF


_RELOCS = {
    1: RelocSpec("R_PPC64_ADDR32", 4, DIRECT, _addr32),
    3: RelocSpec("R_PPC64_ADDR16", 2, DIRECT, _abs_half(_ident, 16, False)),
    4: RelocSpec("R_PPC64_ADDR16_LO", 2, DIRECT, _abs_half(_lo, 0, False)),
    5: RelocSpec("R_PPC64_ADDR16_HI", 2, DIRECT, _abs_half(_hi, 32, False)),
    6: RelocSpec("R_PPC64_ADDR16_HA", 2, DIRECT, _abs_half(_ha, 32, False)),
    10: RelocSpec("R_PPC64_REL24", 4, CALL, _branch(26, 0x03FFFFFC)),
    11: RelocSpec("R_PPC64_REL14", 4, DIRECT, _branch(16, 0xFFFC)),
    12: RelocSpec("R_PPC64_REL14_BRTAKEN", 4, DIRECT, _branch(16, 0xFFFC)),
    13: RelocSpec("R_PPC64_REL14_BRNTAKEN", 4, DIRECT, _branch(16, 0xFFFC)),
    14: RelocSpec("R_PPC64_GOT16", 2, GOT, _half(_ident, 16, False, "GOT offset from the TOC"), anchor=TOC_BASE),
    15: RelocSpec("R_PPC64_GOT16_LO", 2, GOT, _half(_lo, 0, False, "GOT offset"), anchor=TOC_BASE),
    16: RelocSpec("R_PPC64_GOT16_HI", 2, GOT, _half(_hi, 32, False, "GOT offset from the TOC"), anchor=TOC_BASE),
    17: RelocSpec("R_PPC64_GOT16_HA", 2, GOT, _half(_ha, 32, False, "GOT offset from the TOC"), anchor=TOC_BASE),
    26: RelocSpec("R_PPC64_REL32", 4, DIRECT, _rel32),
    38: RelocSpec("R_PPC64_ADDR64", 8, DIRECT, _addr64),
    39: RelocSpec("R_PPC64_ADDR16_HIGHER", 2, DIRECT, _abs_half(_higher, 0, False)),
    40: RelocSpec("R_PPC64_ADDR16_HIGHERA", 2, DIRECT, _abs_half(_highera, 0, False)),
    41: RelocSpec("R_PPC64_ADDR16_HIGHEST", 2, DIRECT, _abs_half(_highest, 0, False)),
    42: RelocSpec("R_PPC64_ADDR16_HIGHESTA", 2, DIRECT, _abs_half(_highesta, 0, False)),
    110: RelocSpec("R_PPC64_ADDR16_HIGH", 2, DIRECT, _abs_half(_hi, 0, False)),
    111: RelocSpec("R_PPC64_ADDR16_HIGHA", 2, DIRECT, _abs_half(_ha, 0, False)),
    44: RelocSpec("R_PPC64_REL64", 8, DIRECT, _rel64),
    47: RelocSpec("R_PPC64_TOC16", 2, DIRECT, _half(_ident, 16, False, "offset from the TOC"), anchor=TOC_BASE),
    48: RelocSpec("R_PPC64_TOC16_LO", 2, DIRECT, _half(_lo, 0, False, "offset from the TOC"), anchor=TOC_BASE),
    49: RelocSpec("R_PPC64_TOC16_HI", 2, DIRECT, _half(_hi, 32, False, "offset from the TOC"), anchor=TOC_BASE),
    50: RelocSpec("R_PPC64_TOC16_HA", 2, DIRECT, _half(_ha, 32, False, "offset from the TOC"), anchor=TOC_BASE),
    51: RelocSpec("R_PPC64_TOC", 8, DIRECT, _toc64, anchor=TOC_BASE),
    56: RelocSpec("R_PPC64_ADDR16_DS", 2, DIRECT, _abs_half(_ident, 16, True)),
    57: RelocSpec("R_PPC64_ADDR16_LO_DS", 2, DIRECT, _abs_half(_lo, 0, True)),
    58: RelocSpec("R_PPC64_GOT16_DS", 2, GOT, _half(_ident, 16, True, "GOT offset from the TOC"), anchor=TOC_BASE),
    59: RelocSpec("R_PPC64_GOT16_LO_DS", 2, GOT, _half(_lo, 0, True, "GOT offset"), anchor=TOC_BASE),
    63: RelocSpec("R_PPC64_TOC16_DS", 2, DIRECT, _half(_ident, 16, True, "offset from the TOC"), anchor=TOC_BASE),
    64: RelocSpec("R_PPC64_TOC16_LO_DS", 2, DIRECT, _half(_lo, 0, True, "offset from the TOC"), anchor=TOC_BASE),
    # gcc -fno-plt (the compiler driver's default flags) calls through inline PLT sequences: the slot is a GOT slot.
    29: RelocSpec("R_PPC64_PLT16_LO", 2, GOT, _half(_lo, 0, False, "PLT slot offset"), anchor=TOC_BASE),
    30: RelocSpec("R_PPC64_PLT16_HI", 2, GOT, _half(_hi, 32, False, "PLT slot offset from the TOC"), anchor=TOC_BASE),
    31: RelocSpec("R_PPC64_PLT16_HA", 2, GOT, _half(_ha, 32, False, "PLT slot offset from the TOC"), anchor=TOC_BASE),
    60: RelocSpec("R_PPC64_PLT16_LO_DS", 2, GOT, _half(_lo, 0, True, "PLT slot offset"), anchor=TOC_BASE),
    249: RelocSpec("R_PPC64_REL16", 2, DIRECT, _half(_ident, 16, False, "PC-relative offset")),
    250: RelocSpec("R_PPC64_REL16_LO", 2, DIRECT, _half(_lo, 0, False, "PC-relative offset")),
    251: RelocSpec("R_PPC64_REL16_HI", 2, DIRECT, _half(_hi, 32, False, "PC-relative offset")),
    252: RelocSpec("R_PPC64_REL16_HA", 2, DIRECT, _half(_ha, 32, False, "PC-relative offset")),
}

_TLS = "thread-local storage is not supported in kernels"
_DYN = "dynamic relocation in a relocatable object"
_PLT = "POWER10 inline PLT sequences are not supported; build for power8/power9 (-mcpu=power9)"
_P10 = "POWER10 PC-relative code is not supported; build for power8/power9 (-mcpu=power9)"
_REFUSED = {
    2: ("R_PPC64_ADDR24", "absolute branches are not supported"),
    7: ("R_PPC64_ADDR14", "absolute branches are not supported"),
    8: ("R_PPC64_ADDR14_BRTAKEN", "absolute branches are not supported"),
    9: ("R_PPC64_ADDR14_BRNTAKEN", "absolute branches are not supported"),
    19: ("R_PPC64_COPY", _DYN),
    20: ("R_PPC64_GLOB_DAT", _DYN),
    21: ("R_PPC64_JMP_SLOT", _DYN),
    22: ("R_PPC64_RELATIVE", _DYN),
    37: ("R_PPC64_ADDR30", "absolute branches are not supported"),
    116: ("R_PPC64_REL24_NOTOC", _P10),
    117: ("R_PPC64_ADDR64_LOCAL", "local-entry addresses in data are not supported"),
    121: ("R_PPC64_PLTSEQ_NOTOC", _PLT),
    122: ("R_PPC64_PLTCALL_NOTOC", _PLT),
    132: ("R_PPC64_PCREL34", _P10),
    133: ("R_PPC64_GOT_PCREL34", _P10),
    247: ("R_PPC64_JMP_IREL", "IFUNC relocations are not supported"),
    248: ("R_PPC64_IRELATIVE", "IFUNC relocations are not supported"),
}
_REFUSED.update({t: ("R_PPC64_TLS(%d)" % t, _TLS) for t in list(range(67, 109)) + list(range(112, 116))})
_REFUSED.update({t: ("R_PPC64_TLS(%d)" % t, _TLS) for t in range(124, 132)})
_REFUSED.update({t: ("R_PPC64_TLS(%d)" % t, _TLS) for t in range(134, 137)})

PPC64LE = Arch(
    name="ppc64le",
    machine=EM_PPC64,
    relocs=_RELOCS,
    refused={k: v[0] for k, v in _REFUSED.items()},
    refuse_reason={k: v[1] for k, v in _REFUSED.items()},
    stub_size=32,
    write_stub=_write_stub,
    addend_on_target=True,
    # NONE; TOCSAVE, ENTRY, PLTSEQ and PLTCALL mark instructions (the inline PLT sequence saves and
    # restores r2 and sets r12 itself), nothing to patch.
    none_types=frozenset({0, 109, 118, 119, 120}),
    page_size=65536,  # ppc64el Linux kernels usually use 64 KiB pages
    toc_symbol=".TOC.",
    local_entry=local_entry_offset,
    after_stub_call=_after_stub_call,
)
