"""Compiler-runtime helpers no system library exports, shipped prebuilt with the package, and the
per-machine values kernels read (:data:`TUNABLE_NAMES`).

clang 14 lowers ``__fp16`` conversions on x86-64 without F16C (the baseline target) to calls of
compiler-rt's ``__gnu_h2f_ieee`` and ``__gnu_f2h_ieee``; glibc, libm and libgcc_s define neither,
so such an object (tinygrad's half kernels) would not load. :data:`HELPERS_C` defines them
(IEEE binary16, round to nearest even, NaN kept quiet); codegen compiles it into each
architecture's ``runtime.o`` beside the native replay runner, and :func:`helper_address` maps that
object once and answers for these names only after the host libraries had no answer.

``svod_int8_isa`` (weak in the int8 GEMM, onnx/kernels/templates/qgemm.c.j2, and the 8-bit table lookup,
lookup8.c.j2) says which VNNI forms and whether AVX512-VBMI this CPU runs, from ``/proc/cpuinfo``'s flags
(:func:`int8_isa`); ``SVOD_INT8_VNNI=0`` makes it 0, the portable paths.

``svod_stream_bytes`` (weak in the kernels' prelude) is the output size from which elementwise
kernels write with streaming stores on x86-64: half the last-level cache (an add's two inputs and
its output then no longer fit in it, so keeping the output in cache buys nothing),
``SVOD_STREAM_BYTES`` to set it, 16 MiB when the cache size is unknown. Kernels
read it at every call, so :func:`set_stream_bytes` applies at once.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Callable, FrozenSet, List, Optional

from .. import resources
from ..config import env_flag, env_int
from .arch import host_arch, read_cpu_flags

#: Functions of the prebuilt runtime object.
RUNTIME_NAMES = frozenset({"__gnu_h2f_ieee", "__gnu_f2h_ieee"})
#: Variables svod_min defines per process for the kernels it loads.
TUNABLE_NAMES = frozenset({"svod_stream_bytes", "svod_int8_isa"})
#: Every undefined name a kernel may use besides the host libraries'.
HELPER_NAMES = RUNTIME_NAMES | TUNABLE_NAMES
STREAM_BYTES_ENV = "SVOD_STREAM_BYTES"
#: Off: the int8 GEMM (onnx/kernels/templates/qgemm.c.j2) takes its portable C path on every CPU.
INT8_VNNI_ENV = "SVOD_INT8_VNNI"
#: svod_int8_isa's bits and the /proc/cpuinfo flags each needs: AVX512-VNNI on zmm, AVX-VNNI on ymm (the int8
#: GEMM), AVX512-VBMI's byte permutes (the 8-bit table lookup, templates/lookup8.c.j2).
INT8_ISA_BITS = (
    (1, ("avx512_vnni", "avx512bw", "avx512vl", "avx512f")),
    (2, ("avx_vnni", "avx2")),
    (4, ("avx512vbmi", "avx512bw", "avx512f")),
)
DEFAULT_STREAM_BYTES = 16 << 20
#: Where Linux lists cpu0's caches (index0, index1...: type, size, level).
CACHE_DIR = "/sys/devices/system/cpu/cpu0/cache"
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
    """Address of helper ``name`` (in the runtime object, or a tunable); 0 when ``name`` is no helper
    or no runtime object ships."""
    if name == "svod_int8_isa":
        return ctypes.addressof(_int8_isa())
    if name in TUNABLE_NAMES:
        return ctypes.addressof(_stream_bytes())
    if name not in RUNTIME_NAMES:
        return 0
    runtime = loaded_runtime(load)
    return runtime.address(name) if runtime is not None else 0


_stream_limit: Optional[ctypes.c_int64] = None
_stream_lock = threading.Lock()  # not _lock: resolving runtime.o's own symbols happens under that one


def _stream_bytes() -> ctypes.c_int64:
    global _stream_limit
    with _stream_lock:
        if _stream_limit is None:
            _stream_limit = ctypes.c_int64(env_int(STREAM_BYTES_ENV, default_stream_bytes(), minimum=0))
        return _stream_limit


_int8_isa_value: Optional[ctypes.c_int64] = None


def _int8_isa() -> ctypes.c_int64:
    global _int8_isa_value
    with _stream_lock:
        if _int8_isa_value is None:
            _int8_isa_value = ctypes.c_int64(int8_isa())
        return _int8_isa_value


def set_int8_isa(bits: int) -> int:
    """Set svod_int8_isa for the kernels of this process (tests force each path with it; a bit the CPU lacks makes
    the int8 GEMM fault); returns the value it had."""
    value = _int8_isa()
    old = int(value.value)
    value.value = int(bits)
    return old


def int8_isa(flags: Optional[FrozenSet[str]] = None) -> int:
    """svod_int8_isa for this host (or for ``flags``): the bits of INT8_ISA_BITS whose /proc/cpuinfo flags it
    has, 0 on other architectures, where the flags cannot be read, or with SVOD_INT8_VNNI off."""
    if not env_flag(INT8_VNNI_ENV, True):
        return 0
    if flags is None:
        if host_arch() != "x86_64":
            return 0
        flags = read_cpu_flags() or frozenset()
    return sum(bit for bit, need in INT8_ISA_BITS if all(f in flags for f in need))


def default_stream_bytes() -> int:
    """Half this machine's last-level cache (sysfs), or 16 MiB when it cannot be read."""
    sizes = [_cache_bytes(os.path.join(CACHE_DIR, d)) for d in _listed(CACHE_DIR) if d.startswith("index")]
    largest = max([s for s in sizes if s], default=0)
    return largest // 2 if largest else DEFAULT_STREAM_BYTES


def _listed(directory: str) -> List[str]:
    """The names in ``directory`` (none when it cannot be read); a listing, not glob: glob and fnmatch cost
    a start ~1 ms for this one pattern."""
    try:
        return os.listdir(directory)
    except OSError:
        return []


def _cache_bytes(index_dir: str) -> int:
    try:
        with open(os.path.join(index_dir, "type")) as fh:
            if fh.read().strip() not in ("Unified", "Data"):
                return 0
        with open(os.path.join(index_dir, "size")) as fh:
            text = fh.read().strip().upper()
    except OSError:
        return 0
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    digits = text.rstrip("KMG")
    return int(digits) * scale if digits.isdigit() else 0


def stream_bytes() -> int:
    """The output size (bytes) from which elementwise kernels use streaming stores in this process."""
    return _stream_bytes().value


def set_stream_bytes(nbytes: int) -> None:
    """Change the streaming threshold for every kernel of this process (they read it at each call)."""
    if nbytes < 0:
        raise ValueError("the streaming threshold must be >= 0 bytes, got %d" % nbytes)
    _stream_bytes().value = nbytes


def _runtime_bytes() -> Optional[bytes]:
    try:
        return resources.read_bytes(RUNTIME_OBJECT % host_arch())
    except OSError:
        return None


__all__ = [
    "HELPERS_C",
    "HELPER_NAMES",
    "INT8_ISA_BITS",
    "INT8_VNNI_ENV",
    "RUNTIME_NAMES",
    "RUNTIME_OBJECT",
    "STREAM_BYTES_ENV",
    "TUNABLE_NAMES",
    "default_stream_bytes",
    "helper_address",
    "int8_isa",
    "loaded_runtime",
    "set_int8_isa",
    "set_stream_bytes",
    "stream_bytes",
]
