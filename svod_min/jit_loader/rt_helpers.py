"""Compiler-runtime helpers no system library exports, shipped prebuilt with the package.

clang 14 lowers ``__fp16`` conversions on x86-64 without F16C (the baseline target) to calls of
compiler-rt's ``__gnu_h2f_ieee`` and ``__gnu_f2h_ieee``; glibc, libm and libgcc_s define neither,
so such an object (tinygrad's half kernels) would not load. :data:`HELPERS_C` defines them
(IEEE binary16, round to nearest even, NaN kept quiet); codegen compiles it into each
architecture's ``runtime.o`` beside the native replay runner, and :func:`helper_address` maps that
object once and answers for these names only after the host libraries had no answer.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from .. import resources
from .arch import host_arch

HELPER_NAMES = frozenset({"__gnu_h2f_ieee", "__gnu_f2h_ieee"})
RUNTIME_OBJECT = "kernels/prebuilt/%s-baseline/runtime.o"

HELPERS_C = r"""
typedef unsigned short svod_u16;
typedef unsigned int svod_u32;

static svod_u32 svod_bits(float f) { svod_u32 u; __builtin_memcpy(&u, &f, 4); return u; }
static float svod_float(svod_u32 u) { float f; __builtin_memcpy(&f, &u, 4); return f; }

/* binary16 -> binary32: exact for every input. */
float __gnu_h2f_ieee(svod_u16 h) {
    svod_u32 sign = (svod_u32)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1fu) return svod_float(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        float f = (float)man * 5.9604644775390625e-08f; /* man * 2^-24, exact */
        return sign ? -f : f;
    }
    return svod_float(sign | ((exp + 112u) << 23) | (man << 13));
}

/* binary32 -> binary16, rounding to nearest even. */
svod_u16 __gnu_f2h_ieee(float f) {
    svod_u32 x = svod_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu, half, rem, shift, m;
    if (ax > 0x7f800000u) return (svod_u16)(sign | 0x7e00u | ((ax >> 13) & 0x1ffu));
    if (ax >= 0x477ff000u) return (svod_u16)(sign | 0x7c00u); /* >= 65520: infinity */
    if (ax >= 0x38800000u) { /* a normal half */
        ax -= 0x38000000u;
        half = ax >> 13;
        rem = ax & 0x1fffu;
    } else if (ax > 0x33000000u) { /* a subnormal half (2^-25 itself is a tie: rounds to 0) */
        m = (ax & 0x7fffffu) | 0x800000u;
        shift = 126u - (ax >> 23);
        half = m >> shift;
        rem = (m << (32u - shift)) >> (32u - shift);
        if (rem > (1u << (shift - 1)) || (rem == (1u << (shift - 1)) && (half & 1u))) half++;
        return (svod_u16)(sign | half);
    } else {
        return (svod_u16)sign;
    }
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
    return (svod_u16)(sign | half);
}
"""

_lock = threading.Lock()
_runtime: Any = None
_tried = False


def loaded_runtime(load: Callable[[bytes], Any]) -> Any:
    """This architecture's prebuilt runtime object, mapped once per process by ``load`` (the loader's
    ``load_object``) and shared by its users (these helpers, the native replay runner); None: none ships."""
    global _runtime, _tried
    with _lock:
        if not _tried:
            _tried = True
            data = _runtime_bytes()
            _runtime = load(data) if data is not None else None
        return _runtime


def helper_address(name: str, load: Callable[[bytes], Any]) -> int:
    """Address of helper ``name`` in the runtime object; 0 when ``name`` is not a helper or no object ships."""
    if name not in HELPER_NAMES:
        return 0
    runtime = loaded_runtime(load)
    return runtime.address(name) if runtime is not None else 0


def _runtime_bytes() -> Optional[bytes]:
    try:
        return resources.read_bytes(RUNTIME_OBJECT % host_arch())
    except OSError:
        return None


__all__ = ["HELPERS_C", "HELPER_NAMES", "RUNTIME_OBJECT", "helper_address", "loaded_runtime"]
