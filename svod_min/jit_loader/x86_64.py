"""x86_64 relocations (System V psABI, small code model, PIC).

Supported: 64, PC32, PLT32, PC64, GOTPCREL, GOTPCRELX (41), REX_GOTPCRELX (42).
GOT-relative types go through a GOT built inside the image; external calls go
through 16-byte stubs (``jmp *0(%rip); .quad target``) inside the image, so
every 32-bit displacement stays within the image and always fits.
"""

from __future__ import annotations

import struct

from .arch import CALL, DIRECT, GOT, Arch, RelocSpec, check_signed
from .elf import EM_X86_64

_I32 = struct.Struct("<i")
_Q = struct.Struct("<Q")
_MASK64 = (1 << 64) - 1


def _abs64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _Q.pack_into(image, off, (s + a) & _MASK64)


def _pc32(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _I32.pack_into(image, off, check_signed(s + a - p, 32, "PC-relative displacement"))


def _pc64(image: bytearray, off: int, s: int, a: int, p: int) -> None:
    _Q.pack_into(image, off, (s + a - p) & _MASK64)


def _write_stub(image: bytearray, off: int, target: int) -> None:
    # jmp *0(%rip) ; .quad target ; 2 bytes of int3 padding
    image[off : off + 16] = b"\xff\x25\x00\x00\x00\x00" + _Q.pack(target & _MASK64) + b"\xcc\xcc"


_RELOCS = {
    1: RelocSpec("R_X86_64_64", 8, DIRECT, _abs64),
    2: RelocSpec("R_X86_64_PC32", 4, DIRECT, _pc32, base_free=True),
    4: RelocSpec("R_X86_64_PLT32", 4, CALL, _pc32, base_free=True),
    9: RelocSpec("R_X86_64_GOTPCREL", 4, GOT, _pc32, base_free=True),
    24: RelocSpec("R_X86_64_PC64", 8, DIRECT, _pc64, base_free=True),
    41: RelocSpec("R_X86_64_GOTPCRELX", 4, GOT, _pc32, base_free=True),
    42: RelocSpec("R_X86_64_REX_GOTPCRELX", 4, GOT, _pc32, base_free=True),
}

_NON_PIC = "absolute 32-bit address (non-PIC code); compile with -fPIC"
_TLS = "thread-local storage is not supported in kernels"
_LARGE = "large code model is not supported; use the default small model with -fPIC"

_REFUSED = {
    3: ("R_X86_64_GOT32", _NON_PIC),
    5: ("R_X86_64_COPY", "dynamic relocation in a relocatable object"),
    6: ("R_X86_64_GLOB_DAT", "dynamic relocation in a relocatable object"),
    7: ("R_X86_64_JUMP_SLOT", "dynamic relocation in a relocatable object"),
    8: ("R_X86_64_RELATIVE", "dynamic relocation in a relocatable object"),
    10: ("R_X86_64_32", _NON_PIC),
    11: ("R_X86_64_32S", _NON_PIC),
    12: ("R_X86_64_16", _NON_PIC),
    13: ("R_X86_64_PC16", "16-bit fields are not supported"),
    14: ("R_X86_64_8", _NON_PIC),
    15: ("R_X86_64_PC8", "8-bit fields are not supported"),
    16: ("R_X86_64_DTPMOD64", _TLS),
    17: ("R_X86_64_DTPOFF64", _TLS),
    18: ("R_X86_64_TPOFF64", _TLS),
    19: ("R_X86_64_TLSGD", _TLS),
    20: ("R_X86_64_TLSLD", _TLS),
    21: ("R_X86_64_DTPOFF32", _TLS),
    22: ("R_X86_64_GOTTPOFF", _TLS),
    23: ("R_X86_64_TPOFF32", _TLS),
    25: ("R_X86_64_GOTOFF64", _LARGE),
    26: ("R_X86_64_GOTPC32", "GOT-base-relative addressing is not supported"),
    27: ("R_X86_64_GOT64", _LARGE),
    28: ("R_X86_64_GOTPCREL64", _LARGE),
    29: ("R_X86_64_GOTPC64", _LARGE),
    30: ("R_X86_64_GOTPLT64", _LARGE),
    31: ("R_X86_64_PLTOFF64", _LARGE),
    32: ("R_X86_64_SIZE32", "symbol-size relocations are not supported"),
    33: ("R_X86_64_SIZE64", "symbol-size relocations are not supported"),
    34: ("R_X86_64_GOTPC32_TLSDESC", _TLS),
    35: ("R_X86_64_TLSDESC_CALL", _TLS),
    36: ("R_X86_64_TLSDESC", _TLS),
    37: ("R_X86_64_IRELATIVE", "IFUNC relocations are not supported"),
}

X86_64 = Arch(
    name="x86_64",
    machine=EM_X86_64,
    relocs=_RELOCS,
    refused={k: v[0] for k, v in _REFUSED.items()},
    refuse_reason={k: v[1] for k, v in _REFUSED.items()},
    stub_size=16,
    write_stub=_write_stub,
    addend_on_target=False,
    none_types=frozenset({0}),
)
