"""The part of the CUDA device that needs no GPU: the driver API binding and the pure helpers.

Driver API: one declarative prototype table, lazy binding, one checked call.

Only ``libcuda.so.1`` (the driver library every NVIDIA driver installs) is
needed: no CUDA Python package, no toolkit. Each entry of :data:`PROTOTYPES`
is ``(name, argtypes)``; every function returns ``CUresult`` (an ``int``).
A symbol is resolved and typed the first time it is called, so a driver that
lacks a newer entry point still serves every older one.

:meth:`CudaLibrary.call` is the one checked call path: a non-zero
``CUresult`` becomes :class:`CudaError` carrying the code, the function name,
``cuGetErrorName`` and ``cuGetErrorString``. :meth:`CudaLibrary.call_raw`
returns the code unchecked; only destructors use it (they must ignore
``CUDA_ERROR_DEINITIALIZED`` at interpreter shutdown).

Handles (``CUcontext``, ``CUmodule``, ``CUfunction``, ``CUstream``,
``CUevent``, ``CUgraph``, ``CUgraphExec``, ``CUgraphNode``) are ``c_void_p``;
device pointers (``CUdeviceptr``) are ``c_uint64``; ``CUdevice`` is ``c_int``.

Pure helpers (all re-exported by :mod:`svod_min.devices.cuda`): the PTX ISA
version a driver accepts, svod's PTX rules, argument blobs, launch
dimensions, launch sizes for plans, ptxas and NVRTC.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..error import (
    ArgumentRangeError, CompilationError, CudaError, CudaSymbolError, KernelVariableError, LaunchConfigError,
    NotSupportedError, PtxError,
)

# --- C types -------------------------------------------------------------------------------------

CUresult = ctypes.c_int
CUdevice = ctypes.c_int
CUdeviceptr = ctypes.c_uint64
HANDLE = ctypes.c_void_p  # every opaque CU*_st pointer
_P = ctypes.POINTER
_int, _uint, _u64, _size = ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_size_t
_vp, _cp = ctypes.c_void_p, ctypes.c_char_p


class CUDA_KERNEL_NODE_PARAMS(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2`` (CUDA 12+); its first ten fields are exactly the v1 struct.

    ``kern`` and ``ctx`` stay NULL, so the same struct serves the v1 entry
    points of a pre-12 driver (which read only the leading v1 fields).
    """

    _fields_ = [
        ("func", _vp),
        ("gridDimX", _uint), ("gridDimY", _uint), ("gridDimZ", _uint),
        ("blockDimX", _uint), ("blockDimY", _uint), ("blockDimZ", _uint),
        ("sharedMemBytes", _uint),
        ("kernelParams", _P(_vp)),
        ("extra", _P(_vp)),
        ("kern", _vp),
        ("ctx", _vp),
    ]  # fmt: skip


class CUDA_MEMCPY3D(ctypes.Structure):
    """``CUDA_MEMCPY3D`` (cuda.h): a graph memcpy node's parameters; svod_min fills only 1-D D2D copies."""

    _fields_ = [
        ("srcXInBytes", _size), ("srcY", _size), ("srcZ", _size), ("srcLOD", _size),
        ("srcMemoryType", _int), ("srcHost", _vp), ("srcDevice", CUdeviceptr), ("srcArray", _vp),
        ("reserved0", _vp), ("srcPitch", _size), ("srcHeight", _size),
        ("dstXInBytes", _size), ("dstY", _size), ("dstZ", _size), ("dstLOD", _size),
        ("dstMemoryType", _int), ("dstHost", _vp), ("dstDevice", CUdeviceptr), ("dstArray", _vp),
        ("reserved1", _vp), ("dstPitch", _size), ("dstHeight", _size),
        ("WidthInBytes", _size), ("Height", _size), ("Depth", _size),
    ]  # fmt: skip


def memcpy_1d(dst: int, src: int, nbytes: int) -> CUDA_MEMCPY3D:
    """Parameters of a device-to-device copy of ``nbytes`` (one row, one slice)."""
    p = CUDA_MEMCPY3D()
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.dstDevice = src, dst
    p.srcPitch = p.dstPitch = p.WidthInBytes = nbytes
    p.srcHeight = p.dstHeight = p.Height = p.Depth = 1
    return p


# --- the prototype table ---------------------------------------------------------------------------
#
# (name, argtypes); restype is always CUresult. Names are the exported symbols
# (the `_v2` suffixes are what cuda.h's #defines resolve to since CUDA 3.2/4.0).

PROTOTYPES: Tuple[Tuple[str, Tuple[Any, ...]], ...] = (
    # errors
    ("cuGetErrorName", (CUresult, _P(_cp))),
    ("cuGetErrorString", (CUresult, _P(_cp))),
    # init and devices
    ("cuInit", (_uint,)),
    ("cuDriverGetVersion", (_P(_int),)),
    ("cuDeviceGetCount", (_P(_int),)),
    ("cuDeviceGet", (_P(CUdevice), _int)),
    ("cuDeviceGetName", (_cp, _int, CUdevice)),
    ("cuDeviceComputeCapability", (_P(_int), _P(_int), CUdevice)),
    ("cuDeviceGetAttribute", (_P(_int), _int, CUdevice)),
    ("cuDeviceTotalMem_v2", (_P(_size), CUdevice)),
    ("cuDeviceCanAccessPeer", (_P(_int), CUdevice, CUdevice)),
    # contexts
    ("cuDevicePrimaryCtxRetain", (_P(HANDLE), CUdevice)),
    ("cuDevicePrimaryCtxRelease_v2", (CUdevice,)),
    ("cuCtxSetCurrent", (HANDLE,)),
    ("cuCtxGetCurrent", (_P(HANDLE),)),
    ("cuCtxPushCurrent_v2", (HANDLE,)),
    ("cuCtxPopCurrent_v2", (_P(HANDLE),)),
    ("cuCtxSynchronize", ()),
    ("cuCtxEnablePeerAccess", (HANDLE, _uint)),
    # memory
    ("cuMemGetInfo_v2", (_P(_size), _P(_size))),
    ("cuMemAlloc_v2", (_P(CUdeviceptr), _size)),
    ("cuMemFree_v2", (CUdeviceptr,)),
    ("cuMemHostAlloc", (_P(_vp), _size, _uint)),
    ("cuMemFreeHost", (_vp,)),
    ("cuMemsetD8Async", (CUdeviceptr, ctypes.c_ubyte, _size, HANDLE)),
    ("cuMemcpyHtoD_v2", (CUdeviceptr, _vp, _size)),
    ("cuMemcpyDtoH_v2", (_vp, CUdeviceptr, _size)),
    ("cuMemcpyDtoD_v2", (CUdeviceptr, CUdeviceptr, _size)),
    ("cuMemcpyHtoDAsync_v2", (CUdeviceptr, _vp, _size, HANDLE)),
    ("cuMemcpyDtoHAsync_v2", (_vp, CUdeviceptr, _size, HANDLE)),
    ("cuMemcpyDtoDAsync_v2", (CUdeviceptr, CUdeviceptr, _size, HANDLE)),
    ("cuMemcpyPeerAsync", (CUdeviceptr, HANDLE, CUdeviceptr, HANDLE, _size, HANDLE)),
    # streams and events
    ("cuStreamCreate", (_P(HANDLE), _uint)),
    ("cuStreamSynchronize", (HANDLE,)),
    ("cuStreamDestroy_v2", (HANDLE,)),
    ("cuStreamWaitEvent", (HANDLE, HANDLE, _uint)),
    ("cuEventCreate", (_P(HANDLE), _uint)),
    ("cuEventRecord", (HANDLE, HANDLE)),
    ("cuEventQuery", (HANDLE,)),
    ("cuEventSynchronize", (HANDLE,)),
    ("cuEventElapsedTime_v2", (_P(ctypes.c_float), HANDLE, HANDLE)),  # driver 12.8+: what cuda.h calls today
    ("cuEventElapsedTime", (_P(ctypes.c_float), HANDLE, HANDLE)),  # the v1, for older drivers
    ("cuEventDestroy_v2", (HANDLE,)),
    # modules and launches
    ("cuModuleLoadDataEx", (_P(HANDLE), _vp, _uint, _P(_int), _P(_vp))),
    ("cuModuleGetFunction", (_P(HANDLE), HANDLE, _cp)),
    ("cuModuleUnload", (HANDLE,)),
    ("cuFuncGetAttribute", (_P(_int), _int, HANDLE)),
    ("cuFuncSetAttribute", (HANDLE, _int, _int)),
    ("cuLaunchKernel", (HANDLE, _uint, _uint, _uint, _uint, _uint, _uint, _uint, HANDLE, _P(_vp), _P(_vp))),
    # graphs
    ("cuStreamBeginCapture_v2", (HANDLE, _int)),
    ("cuStreamEndCapture", (HANDLE, _P(HANDLE))),
    ("cuGraphCreate", (_P(HANDLE), _uint)),
    ("cuGraphAddKernelNode_v2", (_P(HANDLE), HANDLE, _P(HANDLE), _size, _P(CUDA_KERNEL_NODE_PARAMS))),
    ("cuGraphAddKernelNode", (_P(HANDLE), HANDLE, _P(HANDLE), _size, _P(CUDA_KERNEL_NODE_PARAMS))),
    ("cuGraphAddMemcpyNode", (_P(HANDLE), HANDLE, _P(HANDLE), _size, _P(CUDA_MEMCPY3D), HANDLE)),
    ("cuGraphInstantiateWithFlags", (_P(HANDLE), HANDLE, _u64)),
    ("cuGraphLaunch", (HANDLE, HANDLE)),
    ("cuGraphExecKernelNodeSetParams_v2", (HANDLE, HANDLE, _P(CUDA_KERNEL_NODE_PARAMS))),
    ("cuGraphExecKernelNodeSetParams", (HANDLE, HANDLE, _P(CUDA_KERNEL_NODE_PARAMS))),
    ("cuGraphExecDestroy", (HANDLE,)),
    ("cuGraphDestroy", (HANDLE,)),
)

_TABLE: Dict[str, Tuple[Any, ...]] = dict(PROTOTYPES)

# --- constants (cuda.h) -----------------------------------------------------------------------------

CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_DEINITIALIZED = 4
CUDA_ERROR_NO_DEVICE = 100
CUDA_ERROR_INVALID_DEVICE = 101
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
CUDA_ERROR_LAUNCH_TIMEOUT = 702
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
CUDA_ERROR_HARDWARE_STACK_ERROR = 714
CUDA_ERROR_ILLEGAL_INSTRUCTION = 715
CUDA_ERROR_MISALIGNED_ADDRESS = 716
CUDA_ERROR_INVALID_ADDRESS_SPACE = 717
CUDA_ERROR_INVALID_PC = 718
CUDA_ERROR_LAUNCH_FAILED = 719
CUDA_ERROR_NOT_SUPPORTED = 801
CUDA_ERROR_UNKNOWN = 999


# CUdevice_attribute
ATTR_MAX_THREADS_PER_BLOCK = 1
ATTR_MAX_BLOCK_DIM_X, ATTR_MAX_BLOCK_DIM_Y, ATTR_MAX_BLOCK_DIM_Z = 2, 3, 4
ATTR_MAX_GRID_DIM_X, ATTR_MAX_GRID_DIM_Y, ATTR_MAX_GRID_DIM_Z = 5, 6, 7
ATTR_MAX_SHARED_MEMORY_PER_BLOCK = 8
ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97  # what a kernel may opt in to (227 KiB on H100)
ATTR_MULTIPROCESSOR_COUNT = 16
ATTR_UNIFIED_ADDRESSING = 41
ATTR_COMPUTE_CAPABILITY_MAJOR = 75
ATTR_COMPUTE_CAPABILITY_MINOR = 76

# CUfunction_attribute
FUNC_ATTR_MAX_THREADS_PER_BLOCK = 0
FUNC_ATTR_SHARED_SIZE_BYTES = 1
FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

# CUjit_option
CU_JIT_INFO_LOG_BUFFER = 3
CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4
CU_JIT_ERROR_LOG_BUFFER = 5
CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6
CU_JIT_LOG_VERBOSE = 12

# flags
CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DEFAULT = 0x0
CU_EVENT_DISABLE_TIMING = 0x2
CU_MEMHOSTALLOC_PORTABLE = 0x1
CU_MEMORYTYPE_DEVICE = 2
CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1

# cuLaunchKernel `extra` markers
CU_LAUNCH_PARAM_END = 0
CU_LAUNCH_PARAM_BUFFER_POINTER = 1
CU_LAUNCH_PARAM_BUFFER_SIZE = 2


# --- errors ---------------------------------------------------------------------------------------




# --- the library ----------------------------------------------------------------------------------


class CudaLibrary:
    """``libcuda`` (or a stand-in with the same ABI) with lazily bound, typed entry points."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._dll = ctypes.CDLL(path)  # OSError when absent: callers turn it into a reason
        self._fns: Dict[str, Callable[..., int]] = {}
        self._untyped: Dict[str, Callable[..., int]] = {}
        self._first: Dict[Tuple[str, ...], str] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "<CudaLibrary %s bound=%d>" % (self.path, len(self._fns))

    def has(self, name: str) -> bool:
        """Whether the library exports ``name`` (binds it as a side effect)."""
        try:
            self.function(name)
        except CudaSymbolError:
            return False
        return True

    def first_exported(self, *names: str) -> str:
        """The first of ``names`` the library exports (newest version first), for entries with a legacy fallback."""
        chosen = self._first.get(names)
        if chosen is not None:
            return chosen
        for name in names:
            if self.has(name):
                self._first[names] = name
                return name
        raise CudaSymbolError("%s exports none of %s (driver too old?)" % (self.path, ", ".join(names)))

    def function(self, name: str) -> Callable[..., int]:
        """The typed ctypes function for ``name`` (resolved on first use)."""
        fn = self._fns.get(name)
        return fn if fn is not None else self._bind(name)

    def untyped(self, name: str) -> Callable[..., int]:
        """``name`` without argtypes, for hot paths whose arguments are all prebuilt ctypes objects.

        ctypes then skips the per-argument conversion (~0.3 µs of an 11-argument
        call). Passing a plain Python int would be converted as a C int, so
        callers must pass ctypes instances (or None for NULL) only. Unchecked:
        the caller tests the returned ``CUresult``.
        """
        fn = self._untyped.get(name)
        if fn is not None:
            return fn
        if name not in _TABLE:
            raise CudaSymbolError("%s is not in svod_min's CUDA prototype table" % name)
        try:
            fn = self._dll[name]  # a fresh _FuncPtr, independent of the typed one
        except AttributeError:
            raise CudaSymbolError("%s does not export %s (driver too old?)" % (self.path, name)) from None
        fn.restype = CUresult
        self._untyped[name] = fn  # a racing first call just builds an equal one
        return fn

    def _bind(self, name: str) -> Callable[..., int]:
        argtypes = _TABLE.get(name)
        if argtypes is None:
            raise CudaSymbolError("%s is not in svod_min's CUDA prototype table" % name)
        with self._lock:
            fn = self._fns.get(name)
            if fn is None:
                try:
                    fn = self._dll[name]  # a fresh _FuncPtr: typing it never affects other users
                except AttributeError:
                    raise CudaSymbolError("%s does not export %s (driver too old?)" % (self.path, name)) from None
                fn.restype = CUresult
                fn.argtypes = list(argtypes)
                self._fns[name] = fn
        return fn

    def call(self, name: str, *args: Any) -> None:
        """Call ``name``; a non-zero ``CUresult`` raises :class:`CudaError` (the one checked path)."""
        fn = self._fns.get(name) or self._bind(name)
        code = fn(*args)
        if code:
            raise self.error(name, code)

    def call_raw(self, name: str, *args: Any) -> int:
        """Call ``name`` and return the ``CUresult`` unchecked (destructors, probes)."""
        fn = self._fns.get(name) or self._bind(name)
        return int(fn(*args))

    def error(self, function: str, code: int) -> CudaError:
        """The :class:`CudaError` for ``code``, named and described by the driver itself."""
        return CudaError(function, int(code), self.error_name(code), self.error_string(code))

    def error_name(self, code: int) -> str:
        return self._describe("cuGetErrorName", code) or "CUDA_ERROR_%d" % code

    def error_string(self, code: int) -> str:
        return self._describe("cuGetErrorString", code) or "unrecognized error code"

    def _describe(self, name: str, code: int) -> Optional[str]:
        text = ctypes.c_char_p()
        try:
            rc = self.call_raw(name, int(code), ctypes.byref(text))
        except (CudaSymbolError, ctypes.ArgumentError):
            return None
        if rc or not text.value:
            return None
        return text.value.decode("utf-8", "replace")


def handle_array(handles: Sequence[Any]) -> Any:
    """A ``CUgraphNode[]``-style C array of handles (None when empty)."""
    if not handles:
        return None
    return (HANDLE * len(handles))(*[getattr(h, "value", h) for h in handles])



# --- errors of the pure helpers --------------------------------------------------------------------







INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
U64_MAX = 2**64 - 1
NVRTC_MISSING = "NVRTC (libnvrtc) not found; ship PTX or install nvidia-cuda-nvrtc==13.0.*"
_PTXAS_ENV = "SVOD_CUDA_PTXAS"  # "0": never run ptxas
_NVRTC_ENV = "SVOD_NVRTC_LIBRARY"


# --- PTX ISA versions per driver -------------------------------------------------------------------
#
# (CUDA release, highest PTX ISA its driver / ptxas accepts), from the "PTX ISA
# release history" table of NVIDIA's PTX ISA manual (mirrored in cuda-python's
# cuda/bindings/utils/_ptx_utils.py). 12.6 added no ISA version; 12.7 never
# shipped a driver but is listed there. CUDA 13.N has so far carried PTX 9.N
# (13.0 -> 9.0, 13.1 -> 9.1, 13.4 -> 9.4), which _max_ptx extrapolates.

PTX_FOR_CUDA: Tuple[Tuple[Tuple[int, int], Tuple[int, int]], ...] = (
    ((9, 0), (6, 0)), ((9, 1), (6, 1)), ((9, 2), (6, 2)),
    ((10, 0), (6, 3)), ((10, 1), (6, 4)), ((10, 2), (6, 5)),
    ((11, 0), (7, 0)), ((11, 1), (7, 1)), ((11, 2), (7, 2)), ((11, 3), (7, 3)), ((11, 4), (7, 4)),
    ((11, 5), (7, 5)), ((11, 6), (7, 6)), ((11, 7), (7, 7)), ((11, 8), (7, 8)),
    ((12, 0), (8, 0)), ((12, 1), (8, 1)), ((12, 2), (8, 2)), ((12, 3), (8, 3)), ((12, 4), (8, 4)),
    ((12, 5), (8, 5)), ((12, 6), (8, 5)), ((12, 7), (8, 6)), ((12, 8), (8, 7)), ((12, 9), (8, 8)),
    ((13, 0), (9, 0)), ((13, 1), (9, 1)),
)  # fmt: skip

# The lowest PTX ISA each target accepts (PTX ISA manual, "Target ISA notes").
PTX_MIN_FOR_TARGET: Dict[str, Tuple[int, int]] = {
    "sm_50": (4, 0), "sm_52": (4, 1), "sm_53": (4, 2), "sm_60": (5, 0), "sm_61": (5, 0), "sm_62": (5, 0),
    "sm_70": (6, 0), "sm_72": (6, 1), "sm_75": (6, 3), "sm_80": (7, 0), "sm_86": (7, 1), "sm_87": (7, 4),
    "sm_89": (7, 8), "sm_90": (7, 8), "sm_90a": (8, 0), "sm_100": (8, 6), "sm_100a": (8, 6),
    "sm_101": (8, 6), "sm_101a": (8, 6), "sm_103": (8, 8), "sm_103a": (8, 8), "sm_110": (9, 0),
    "sm_110a": (9, 0), "sm_120": (8, 7), "sm_120a": (8, 7), "sm_121": (8, 8), "sm_121a": (8, 8),
}  # fmt: skip

Version = Tuple[int, int]


def driver_version_tuple(driver_version: int) -> Version:
    """``cuDriverGetVersion``'s int (``12040``) as ``(12, 4)``."""
    value = _as_int(driver_version, "driver version")
    return value // 1000, (value % 1000) // 10


def format_version(version: Version) -> str:
    return "%d.%d" % version


def _max_ptx(driver_version: int) -> Tuple[Version, bool]:
    """(highest PTX ISA, known exactly) for a driver version."""
    cuda = driver_version_tuple(driver_version)
    if cuda < PTX_FOR_CUDA[0][0]:
        raise PtxError("CUDA driver %s is older than 9.0; svod_min needs a CUDA 11+ driver" % format_version(cuda))
    for release, ptx in reversed(PTX_FOR_CUDA):
        if cuda == release:
            return ptx, True
        if cuda > release:
            if cuda[0] == 13:  # 13.N carries PTX 9.N so far
                return (9, cuda[1]), False
            return ptx, False  # newer than the table: the newest version known to load
    raise AssertionError("unreachable")  # pragma: no cover


def select_ptx_version(driver_version: int) -> str:
    """The highest PTX ``.version`` a driver of ``cuDriverGetVersion`` value ``driver_version`` loads.

    12000 -> "8.0", 12040 -> "8.4", 12080 -> "8.7", 13000 -> "9.0". Drivers
    newer than the table get the highest version known to be safe for them.
    """
    return format_version(_max_ptx(driver_version)[0])


def check_ptx_version(ptx_version: Union[str, Version], driver_version: int) -> None:
    """Raise :class:`PtxError` when a module's ``.version`` is newer than the driver accepts."""
    have = _parse_version(ptx_version) if isinstance(ptx_version, str) else tuple(ptx_version)
    limit, exact = _max_ptx(driver_version)
    cuda = driver_version_tuple(driver_version)
    if have > limit and (exact or cuda[0] <= 13):
        raise PtxError(
            "driver %s accepts PTX up to %s; this module is %s (CUDA_ERROR_UNSUPPORTED_PTX_VERSION). "
            "Update the NVIDIA driver, regenerate the PTX with an older toolkit, or lower its .version with "
            "rewrite_ptx_version(text, %r) when it uses no newer instructions"
            % (format_version(cuda), format_version(limit), format_version(have), format_version(limit))  # type: ignore[arg-type]
        )


# --- PTX text ------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*|/\*.*?\*/', re.S)
_VERSION_RE = re.compile(r"^[ \t]*\.version[ \t]+(\d+)\.(\d+)\b", re.M)
_TARGET_RE = re.compile(r"^[ \t]*\.target[ \t]+([^\n;]*)", re.M)
_ENTRY_RE = re.compile(r"\.entry\s+([A-Za-z_$%][\w$%]*)\s*\(")
_EXTERN_FUNC_RE = re.compile(r"\.extern\s+\.func\b(?:\s*\([^)]*\))?\s*([A-Za-z_$%][\w$%]*)?")
_ADDRESS_RE = re.compile(r"^[ \t]*\.address_size[ \t]+(\d+)", re.M)
_ARCH_RE = re.compile(r"(?:sm_|compute_)?(\d+)([af]?)\Z")
# `.param [.align N] .type [.ptr [.space] [.align N]] name[count]`: the `.ptr` attribute (PTX ISA 2.2+) is
# what LLVM's NVPTX backend emits for kernel pointer parameters.
_PARAM_RE = re.compile(
    r"\.param\s+(?:\.align\s+\d+\s+)?\.([busf])(8|16|32|64)\s+"
    r"(?:\.ptr\s+(?:\.(?:global|shared|const|local)\s+)?(?:\.align\s+\d+\s+)?)?"
    r"[A-Za-z_$%][\w$%]*\s*(?:\[(\d+)\])?"
)


@dataclass(frozen=True)
class PtxInfo:
    """What :func:`validate_ptx` read from a module."""

    version: Version
    target: str
    entries: Tuple[str, ...]
    address_size: int

    @property
    def version_string(self) -> str:
        return format_version(self.version)


def _blank_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces (offsets and newlines kept, strings untouched)."""

    def blank(match: "re.Match[str]") -> str:
        token = match.group(0)
        if token.startswith('"'):
            return token
        return re.sub(r"[^\n]", " ", token)

    return _TOKEN_RE.sub(blank, text)


def _parse_version(text: str) -> Version:
    match = re.match(r"\s*(\d+)\.(\d+)\s*\Z", str(text))
    if not match:
        raise PtxError("a PTX ISA version looks like '8.4', got %r" % (text,))
    return int(match.group(1)), int(match.group(2))


def parse_arch(arch: Any) -> Tuple[int, str]:
    """``"sm_90a"`` / ``"compute_80"`` / ``"80"`` / ``80`` / ``(8, 0)`` -> ``(90, "a")`` / ``(80, "")``."""
    if isinstance(arch, tuple) and len(arch) == 2:
        return int(arch[0]) * 10 + int(arch[1]), ""
    if isinstance(arch, int) and not isinstance(arch, bool):
        return arch, ""
    match = _ARCH_RE.match(str(arch).strip().lower())
    if not match:
        raise PtxError("unknown GPU architecture %r (expected e.g. 'sm_80')" % (arch,))
    return int(match.group(1)), match.group(2)


def arch_name(arch: Any) -> str:
    number, suffix = parse_arch(arch)
    return "sm_%d%s" % (number, suffix)


def _target_runs_on(target: str, arch: Any, exact: bool) -> bool:
    t_num, t_suffix = parse_arch(target)
    a_num, a_suffix = parse_arch(arch)
    if exact:
        return (t_num, t_suffix) == (a_num, a_suffix)
    if t_suffix == "a":  # arch-specific code runs on that exact chip only
        return t_num == a_num
    if t_suffix == "f":  # family code: same major, same or newer minor
        return t_num // 10 == a_num // 10 and t_num <= a_num
    return t_num <= a_num  # plain PTX is JIT-compiled forward to newer GPUs


def validate_ptx(text: str, arch: Any = None, *, entry: Optional[str] = None, exact_target: bool = False) -> PtxInfo:
    """Check svod's PTX rules; returns what was read, raises :class:`PtxError` listing every problem.

    Rules: a ``.version`` directive; a ``.target`` whose architecture runs on
    ``arch`` (equal to it with ``exact_target=True``, svod's strict rule;
    otherwise an older plain target is fine since the driver JITs PTX
    forward); at least one ``.entry name(``; ``entry`` among them when given;
    no ``.extern .func`` (the driver cannot link one); ``.address_size 64``
    when stated (svod passes 8-byte pointers). Comments are ignored.
    """
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str) or not text.strip():
        raise PtxError("PTX module is empty")
    if "\0" in text:
        raise PtxError("PTX text contains a NUL byte (binary data? use load_cubin for CUBIN images)")
    code = _blank_comments(text)
    problems: List[str] = []
    version = _check_version_directive(code, problems)
    target = _check_target(code, arch, exact_target, problems)
    entries = tuple(_ENTRY_RE.findall(code))
    _check_entries(code, entries, entry, problems)
    address = _ADDRESS_RE.search(code)
    address_size = int(address.group(1)) if address else 64
    if address_size != 64:
        problems.append(".address_size is %d; svod passes 64-bit pointers" % address_size)
    if problems:
        raise PtxError("invalid PTX: " + "; ".join(problems))
    return PtxInfo(version, target, entries, address_size)


def _check_version_directive(code: str, problems: List[str]) -> Version:
    found = _VERSION_RE.findall(code)
    if not found:
        problems.append("no .version directive")
        return (0, 0)
    if len(found) > 1:
        problems.append("%d .version directives (one module per text)" % len(found))
    return int(found[0][0]), int(found[0][1])


def _check_target(code: str, arch: Any, exact: bool, problems: List[str]) -> str:
    match = _TARGET_RE.search(code)
    if not match:
        problems.append("no .target directive")
        return ""
    target = match.group(1).split(",")[0].strip()
    try:
        parse_arch(target)
    except PtxError:
        problems.append(".target %r is not an sm_XX architecture" % target)
        return target
    if arch is not None and not _target_runs_on(target, arch, exact):
        rule = "must equal" if exact else "must run on"
        problems.append(".target %s %s the device architecture %s" % (target, rule, arch_name(arch)))
    return target


def _check_entries(code: str, entries: Tuple[str, ...], entry: Optional[str], problems: List[str]) -> None:
    if not entries:
        problems.append("no kernel: expected at least one '.entry name('")
    elif entry is not None and entry not in entries:
        problems.append("entry %r not found (entries: %s)" % (entry, ", ".join(entries)))
    for match in _EXTERN_FUNC_RE.finditer(code):
        name = match.group(1) or "?"
        problems.append(".extern .func %s: the driver cannot link external device functions" % name)


def ptx_version_of(text: str) -> Version:
    """The module's ``.version`` (raises :class:`PtxError` when it has none)."""
    match = _VERSION_RE.search(_blank_comments(text))
    if not match:
        raise PtxError("invalid PTX: no .version directive")
    return int(match.group(1)), int(match.group(2))


def rewrite_ptx_version(text: str, version: Union[str, Version]) -> str:
    """``text`` with its ``.version`` set to ``version`` (to lower it for an older driver).

    Refuses a version below what the module's ``.target`` requires. Whether
    the code itself uses newer instructions is for ptxas / the driver JIT to
    say (:func:`ptxas_check`); the JIT log then names the instruction.
    """
    want = _parse_version(version) if isinstance(version, str) else (int(version[0]), int(version[1]))
    code = _blank_comments(text)
    match = _VERSION_RE.search(code)
    if not match:
        raise PtxError("invalid PTX: no .version directive to rewrite")
    target = _TARGET_RE.search(code)
    if target:
        name = target.group(1).split(",")[0].strip()
        floor = PTX_MIN_FOR_TARGET.get(name)
        if floor is not None and want < floor:
            raise PtxError(".target %s needs PTX >= %s; cannot lower to %s" % (name, format_version(floor), format_version(want)))
    start, end = match.span(1)[0], match.span(2)[1]
    return text[:start] + "%d.%d" % want + text[end:]


def ptx_entry_params(text: str, entry: str) -> List[int]:
    """Byte size of each ``.param`` of kernel ``entry`` in declaration order."""
    code = _blank_comments(text)
    match = re.search(r"\.entry\s+%s\s*\(([^)]*)\)" % re.escape(entry), code)
    if not match:
        raise PtxError("entry %r not found in the PTX module" % entry)
    sizes = []
    for _kind, bits, count in _PARAM_RE.findall(match.group(1)):
        sizes.append(int(bits) // 8 * (int(count) if count else 1))
    return sizes


def check_entry_params(text: str, entry: str, buf_count: int, var_count: int) -> None:
    """Raise :class:`PtxError` unless ``entry`` takes ``buf_count`` 8-byte then ``var_count`` 4-byte params."""
    have = ptx_entry_params(text, entry)
    want = [8] * buf_count + [4] * var_count
    if have != want:
        raise PtxError(
            "kernel %s declares parameters of %s bytes; svod passes %d pointers then %d int32 (%s bytes)"
            % (entry, have, buf_count, var_count, want)
        )


# --- kernel arguments -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgSlot:
    """One argument's place in the blob: ``kind`` is ``"ptr"`` (8 bytes) or ``"i32"`` (4 bytes)."""

    kind: str
    index: int
    offset: int
    size: int


class ArgBlob:
    """One kernel's arguments: 8-byte pointers, then 4-byte int32 scalars, patchable in place.

    ``extra`` is the ``cuLaunchKernel`` ``extra`` array
    (``BUFFER_POINTER, blob, BUFFER_SIZE, &size, END``); ``kernel_params`` the
    ``void*[]`` alternative (pointers into the blob), used for graph nodes.
    ``size`` has no tail padding: the driver wants the exact parameter size.
    Iterating gives ``(buffer, size, layout)``.
    """

    def __init__(self, pointers: Sequence[int], ints: Sequence[int]) -> None:
        self.nptr, self.nint = len(pointers), len(ints)
        self.size = 8 * self.nptr + 4 * self.nint
        self.buffer = (ctypes.c_uint64 * max(1, (self.size + 7) // 8))()  # 8-byte aligned
        self._ptrs = (ctypes.c_uint64 * self.nptr).from_buffer(self.buffer) if self.nptr else None
        self._ints = (ctypes.c_int32 * self.nint).from_buffer(self.buffer, 8 * self.nptr) if self.nint else None
        self.layout = _layout(self.nptr, self.nint)
        self.version = 0  # bumped by every patch (graph nodes re-upload only changed blobs)
        self.on_change: Optional[Callable[[], None]] = None  # told of every patch (a BoundLaunch's graphs)
        base = ctypes.addressof(self.buffer)
        self._size_t = ctypes.c_size_t(self.size)
        self.extra = (ctypes.c_void_p * 5)(
            CU_LAUNCH_PARAM_BUFFER_POINTER, base, CU_LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(self._size_t), CU_LAUNCH_PARAM_END,
        )  # fmt: skip
        self.kernel_params = (ctypes.c_void_p * max(1, len(self.layout)))(*[base + s.offset for s in self.layout])
        for i, value in enumerate(pointers):
            self.set_ptr(i, value)
        for j, value in enumerate(ints):
            self.set_int(j, value)
        self.version = 0

    def __iter__(self) -> Any:
        return iter((self.buffer, self.size, self.layout))

    def __repr__(self) -> str:
        return "<ArgBlob %d ptrs, %d ints, %d bytes>" % (self.nptr, self.nint, self.size)

    def set_ptr(self, index: int, pointer: int) -> None:
        """Patch pointer ``index`` (a device address, 0 <= p < 2**64)."""
        if not 0 <= index < self.nptr:
            raise IndexError("pointer index %d out of range (%d pointers)" % (index, self.nptr))
        value = _as_int(pointer, "pointer argument %d" % index)
        if not 0 <= value <= U64_MAX:
            raise ArgumentRangeError("pointer argument %d=%#x is not a 64-bit address" % (index, value))
        self._ptrs[index] = value  # type: ignore[index]
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def set_int(self, index: int, value: Any, name: Optional[str] = None) -> None:
        """Patch int32 scalar ``index``; values outside int32 raise :class:`ArgumentRangeError`."""
        if not 0 <= index < self.nint:
            raise IndexError("int index %d out of range (%d ints)" % (index, self.nint))
        number = int32_arg(value, name or "int argument %d" % index)
        self._ints[index] = number  # type: ignore[index]
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def pointers(self) -> List[int]:
        return list(self._ptrs) if self._ptrs is not None else []

    def ints(self) -> List[int]:
        return list(self._ints) if self._ints is not None else []

    def tobytes(self) -> bytes:
        """The ``size`` bytes the driver reads."""
        return ctypes.string_at(ctypes.addressof(self.buffer), self.size)


@functools.lru_cache(maxsize=256)
def _layout(nptr: int, nint: int) -> Tuple[ArgSlot, ...]:
    ptrs = tuple(ArgSlot("ptr", i, 8 * i, 8) for i in range(nptr))
    return ptrs + tuple(ArgSlot("i32", j, 8 * nptr + 4 * j, 4) for j in range(nint))


def pack_kernel_args(pointers: Sequence[int], ints: Sequence[Any] = ()) -> ArgBlob:
    """Pack svod kernel arguments: ``(buffer, size, layout) = pack_kernel_args([p0, p1], [n])``."""
    return ArgBlob(list(pointers), list(ints))


def _as_int(value: Any, what: str) -> int:
    if type(value) is int:
        return value
    if isinstance(value, float):
        raise ArgumentRangeError("%s=%r is not an integer" % (what, value))
    try:
        return int(value.__index__())
    except (AttributeError, TypeError):  # TypeError: e.g. a numpy array with more than one element
        raise ArgumentRangeError("%s=%r is not an integer" % (what, value)) from None


def int32_arg(value: Any, label: str) -> int:
    """``value`` as a kernel's int32 scalar; :class:`ArgumentRangeError` names ``label`` otherwise."""
    number = _as_int(value, label)
    if not INT32_MIN <= number <= INT32_MAX:
        raise ArgumentRangeError(
            "variable %s=%d does not fit the kernel's int32 parameter [%d, %d]" % (label, number, INT32_MIN, INT32_MAX)
        )
    return number


# --- launch dimensions ----------------------------------------------------------------------------

Dims3 = Tuple[int, int, int]


@dataclass(frozen=True)
class LaunchLimits:
    """Per-device launch limits (defaults: every NVIDIA GPU since compute capability 3.0)."""

    max_threads_per_block: int = 1024
    max_block: Dims3 = (1024, 1024, 64)
    max_grid: Dims3 = (2**31 - 1, 65535, 65535)
    max_shared_bytes: int = 48 * 1024
    #: Shared bytes per block a kernel may opt in to (cuFuncSetAttribute); 0 means max_shared_bytes.
    max_shared_optin: int = 0

    @property
    def shared_ceiling(self) -> int:
        """The most shared memory (static + dynamic) one block can have, opted in or not."""
        return max(self.max_shared_bytes, self.max_shared_optin)

    def with_threads(self, threads: int) -> "LaunchLimits":
        """The same limits with ``max_threads_per_block`` lowered to ``threads`` (a kernel's own limit)."""
        if threads <= 0 or threads >= self.max_threads_per_block:
            return self
        return LaunchLimits(threads, self.max_block, self.max_grid, self.max_shared_bytes, self.max_shared_optin)


DEFAULT_LIMITS = LaunchLimits()


def _dims3(value: Any, what: str) -> Dims3:
    if value is None:
        return (1, 1, 1)
    if type(value) is tuple and len(value) == 3 and all(type(v) is int and v >= 1 for v in value):
        return value  # the common, already normalised case
    items = dims_items(value, what)
    if not 1 <= len(items) <= 3:
        raise LaunchConfigError("%s must have 1 to 3 dimensions, got %r" % (what, value))
    dims = []
    for axis, item in enumerate(items):
        try:
            number = _as_int(item, "%s[%d]" % (what, axis))
        except ArgumentRangeError as exc:
            raise LaunchConfigError(str(exc)) from None
        if number < 1:
            raise LaunchConfigError("%s[%d]=%d: every launch dimension must be a positive integer" % (what, axis, number))
        dims.append(number)
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def dims_items(value: Any, what: str) -> List[Any]:
    """A launch size as a list: an int is one dimension; any sequence (list, tuple, numpy array) its items."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        return [value]  # a scalar: _as_int says what is wrong with it
    try:
        return list(value)
    except TypeError:  # a 0-d numpy array has __len__ but is a scalar
        return [value]


def launch_dims(global_size: Any, local_size: Any = None, limits: Optional[LaunchLimits] = None) -> Tuple[Dims3, Dims3]:
    """svod launch sizes -> ``(grid, block)``: ``global_size`` counts BLOCKS, ``local_size`` threads per block.

    Missing trailing dimensions are 1; ``local_size=None`` is one thread per
    block. Everything is checked against ``limits`` (the device's) and
    :class:`LaunchConfigError` raised before any launch.
    """
    lim = limits or DEFAULT_LIMITS
    grid, block = _dims3(global_size, "global_size"), _dims3(local_size, "local_size")
    for axis in range(3):
        if grid[axis] > lim.max_grid[axis]:
            raise LaunchConfigError(
                "grid dimension %d is %d blocks; the device allows %d (svod's global_size counts blocks, not threads)"
                % (axis, grid[axis], lim.max_grid[axis])
            )
        if block[axis] > lim.max_block[axis]:
            raise LaunchConfigError(
                "block dimension %d is %d threads; the device allows %d" % (axis, block[axis], lim.max_block[axis])
            )
    threads = block[0] * block[1] * block[2]
    if threads > lim.max_threads_per_block:
        raise LaunchConfigError(
            "block %s has %d threads; at most %d per block are allowed" % (block, threads, lim.max_threads_per_block)
        )
    return grid, block


def check_shared_bytes(shared_bytes: Any, limits: Optional[LaunchLimits] = None, static_bytes: int = 0) -> int:
    """Validate a dynamic shared-memory size: with the kernel's static shared memory it must fit one block.

    Above ``max_shared_bytes`` (48 KiB) the kernel has to opt in
    (:meth:`CudaProgram` does, with ``cuFuncSetAttribute``) up to the
    device's ``max_shared_optin``.
    """
    lim = limits or DEFAULT_LIMITS
    number = _as_int(shared_bytes, "shared_bytes")
    room = lim.shared_ceiling - static_bytes
    if not 0 <= number <= room:
        raise LaunchConfigError("shared_bytes=%d is outside [0, %d] (%d bytes per block, %d of them static in the kernel)"
                                % (number, room, lim.shared_ceiling, static_bytes))  # fmt: skip
    return number


# --- launch sizes for plans -------------------------------------------------------------------------

_PLAN_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


def plan_dims(dims: Sequence[Any]) -> Tuple[Any, ...]:
    """Kernel-library launch sizes -> the plan's size language (:mod:`svod_min.expr`).

    The library writes ``ceildiv(n,256)``; plans know ``+ - * // %``,
    ``min`` and ``max``, so ``ceildiv(a,b)`` becomes ``((a)+(b)-1)//(b)``.
    """
    return tuple(d if isinstance(d, int) else _plan_expr(ast.parse(str(d), mode="eval").body, d) for d in dims)


def _plan_expr(node: ast.AST, text: Any) -> str:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value)
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp) and type(node.op) in _PLAN_OPS:
        return "(%s%s%s)" % (_plan_expr(node.left, text), _PLAN_OPS[type(node.op)], _plan_expr(node.right, text))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return "(-%s)" % _plan_expr(node.operand, text)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        args = [_plan_expr(a, text) for a in node.args]
        if node.func.id == "ceildiv" and len(args) == 2:
            return "((%s+%s-1)//%s)" % (args[0], args[1], args[1])
        if node.func.id in ("min", "max") and len(args) >= 2:
            return "%s(%s)" % (node.func.id, ",".join(args))
    raise PtxError("launch size %r cannot be written as a plan expression" % (text,))


# --- ptxas (offline validation) -------------------------------------------------------------------


def find_ptxas() -> Optional[str]:
    """ptxas from $CUDA_HOME, $CUDA_PATH, /usr/local/cuda or PATH; None when absent or SVOD_CUDA_PTXAS=0."""
    import shutil

    if os.environ.get(_PTXAS_ENV, "").strip() == "0":
        return None
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            path = os.path.join(root, "bin", "ptxas")
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    return shutil.which("ptxas")


def ptxas_check(ptx_text: str, arch: Any, *, ptxas: Optional[str] = None, timeout: float = 300.0) -> bytes:
    """Assemble ``ptx_text`` for ``arch`` with ptxas; returns the CUBIN, raises CompilationError with its log."""
    import subprocess
    import tempfile

    exe = ptxas or find_ptxas()
    if exe is None:
        raise NotSupportedError("ptxas not found (set CUDA_HOME, or put the CUDA toolkit's bin/ on PATH)")
    target = arch_name(arch)
    with tempfile.TemporaryDirectory(prefix="svod-ptxas-") as tmp:
        src, out = os.path.join(tmp, "module.ptx"), os.path.join(tmp, "module.cubin")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write(ptx_text)
        proc = subprocess.run(
            [exe, "-arch=" + target, "-o", out, src], capture_output=True, text=True, timeout=timeout, check=False
        )
        if proc.returncode != 0:
            raise CompilationError(
                "ptxas -arch=%s rejected the PTX (exit %d)" % (target, proc.returncode),
                diagnostics=(proc.stderr + proc.stdout).replace(src, "<ptx>"),
                compiler=exe,
            )
        with open(out, "rb") as fh:
            return fh.read()


# --- NVRTC (optional) -----------------------------------------------------------------------------

_NVRTC_NAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")
_nvrtc_cache: Dict[str, Any] = {}
_nvrtc_lock = threading.Lock()


def _nvrtc_dirs() -> List[str]:
    import glob
    import importlib.util

    dirs = []
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    try:
        spec = importlib.util.find_spec("nvidia")  # pip wheels: nvidia/cu13/lib, nvidia/cuda_nvrtc/lib
    except (ImportError, ValueError):
        spec = None
    for location in list(getattr(spec, "submodule_search_locations", None) or []):
        dirs += sorted(glob.glob(os.path.join(location, "*", "lib")), reverse=True)
    return dirs


def find_nvrtc() -> Optional[str]:
    """Path (or soname) of libnvrtc: $SVOD_NVRTC_LIBRARY, the toolkit, pip's nvidia wheels, the loader path."""
    with _nvrtc_lock:
        if "path" not in _nvrtc_cache:
            _nvrtc_cache["path"] = _search_nvrtc()
        return _nvrtc_cache["path"]


def _search_nvrtc() -> Optional[str]:
    explicit = os.environ.get(_NVRTC_ENV, "").strip()
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for directory in _nvrtc_dirs():
        for name in _NVRTC_NAMES:
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
    try:
        import ctypes.util

        return ctypes.util.find_library("nvrtc")
    except Exception:  # find_library shells out; a probe must never raise
        return None


# nvrtc.h entry points Nvrtc binds, (name, argtypes) like PROTOTYPES. Each returns nvrtcResult (an int,
# NVRTC_SUCCESS = 0) unless NVRTC_RESTYPES names another restype. nvrtcProgram is an opaque pointer (c_void_p).
NVRTC_PROTOTYPES: Tuple[Tuple[str, Tuple[Any, ...]], ...] = (
    ("nvrtcVersion", (_P(_int), _P(_int))),
    ("nvrtcCreateProgram", (_P(_vp), _cp, _cp, _int, _P(_cp), _P(_cp))),
    ("nvrtcCompileProgram", (_vp, _int, _P(_cp))),
    ("nvrtcGetProgramLogSize", (_vp, _P(_size))),
    ("nvrtcGetProgramLog", (_vp, _cp)),
    ("nvrtcGetPTXSize", (_vp, _P(_size))),
    ("nvrtcGetPTX", (_vp, _cp)),
    ("nvrtcDestroyProgram", (_P(_vp),)),
    ("nvrtcGetErrorString", (_int,)),
)
nvrtcResult = ctypes.c_int
NVRTC_RESTYPES: Dict[str, Any] = {"nvrtcGetErrorString": _cp}
NVRTC_SUCCESS = 0


class Nvrtc:
    """A loaded libnvrtc (:data:`NVRTC_PROTOTYPES` bound here; NVRTC returns ``nvrtcResult``, 0 = success)."""

    def __init__(self, path: str) -> None:
        self.path = path
        _preload_nvrtc_builtins(path)
        self._dll = ctypes.CDLL(path)
        for name, argtypes in NVRTC_PROTOTYPES:
            fn = getattr(self._dll, name)
            fn.restype, fn.argtypes = NVRTC_RESTYPES.get(name, nvrtcResult), list(argtypes)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check("nvrtcVersion", self._dll.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        self.version: Version = (major.value, minor.value)

    def check(self, what: str, code: int) -> None:
        if code != NVRTC_SUCCESS:
            text = self._dll.nvrtcGetErrorString(code) or b"unknown"
            raise CompilationError("%s failed: %s (%d)" % (what, text.decode("utf-8", "replace"), code), compiler="nvrtc")

    def compile(self, source: str, options: Sequence[str], name: str) -> str:
        """CUDA C -> PTX text; CompilationError carries NVRTC's log."""
        prog = ctypes.c_void_p()
        lib = self._dll
        self.check("nvrtcCreateProgram", lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None))
        try:
            opts = (ctypes.c_char_p * max(1, len(options)))(*[o.encode() for o in options])
            code = lib.nvrtcCompileProgram(prog, len(options), opts)
            log = self._log(prog)
            if code != NVRTC_SUCCESS:
                raise CompilationError("NVRTC could not compile %s (%d)" % (name, code), diagnostics=log, compiler="nvrtc %d.%d" % self.version)
            size = ctypes.c_size_t()
            self.check("nvrtcGetPTXSize", lib.nvrtcGetPTXSize(prog, ctypes.byref(size)))
            buf = ctypes.create_string_buffer(size.value)
            self.check("nvrtcGetPTX", lib.nvrtcGetPTX(prog, buf))
            return buf.value.decode("utf-8")
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        if self._dll.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) or size.value <= 1:
            return ""
        buf = ctypes.create_string_buffer(size.value)
        self._dll.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode("utf-8", "replace")


def _preload_nvrtc_builtins(path: str) -> None:
    # NVRTC 13.0 loaded by absolute path cannot find libnvrtc-builtins on its own.
    import glob

    directory = os.path.dirname(path)
    if not directory:
        return
    for builtins in sorted(glob.glob(os.path.join(directory, "libnvrtc-builtins.so*")), reverse=True):
        try:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


def load_nvrtc() -> Nvrtc:
    """The process's :class:`Nvrtc`; NotSupportedError when libnvrtc cannot be found or loaded."""
    path = find_nvrtc()
    if path is None:
        raise NotSupportedError(NVRTC_MISSING)
    with _nvrtc_lock:
        lib = _nvrtc_cache.get(path)
        if lib is None:
            try:
                lib = _nvrtc_cache[path] = Nvrtc(path)
            except (OSError, AttributeError) as exc:
                raise NotSupportedError("%s (%s could not be loaded: %s)" % (NVRTC_MISSING, path, exc)) from exc
        return lib


def compile_cuda(source: str, arch: Any = "sm_75", *, options: Sequence[str] = (), name: str = "svod_kernel.cu") -> str:
    """CUDA C -> PTX through NVRTC (``--gpu-architecture=compute_XX``); NotSupportedError without libnvrtc.

    A newer NVRTC writes a newer ``.version`` than an older driver accepts:
    :meth:`CudaDevice.compile_cuda` lowers it to the driver's maximum.
    """
    nvrtc = load_nvrtc()
    number, suffix = parse_arch(arch)
    opts = ["--gpu-architecture=compute_%d%s" % (number, suffix)] + list(options)
    return nvrtc.compile(source, opts, name)


__all__ = [
    "ArgBlob",
    "ArgSlot",
    "ArgumentRangeError",
    "CUDA_KERNEL_NODE_PARAMS",
    "CUDA_MEMCPY3D",
    "CudaError",
    "CudaLibrary",
    "CudaSymbolError",
    "DEFAULT_LIMITS",
    "KernelVariableError",
    "LaunchConfigError",
    "LaunchLimits",
    "NVRTC_MISSING",
    "NVRTC_PROTOTYPES",
    "NVRTC_RESTYPES",
    "NVRTC_SUCCESS",
    "Nvrtc",
    "PROTOTYPES",
    "PTX_FOR_CUDA",
    "PTX_MIN_FOR_TARGET",
    "PtxError",
    "PtxInfo",
    "arch_name",
    "check_entry_params",
    "check_ptx_version",
    "check_shared_bytes",
    "compile_cuda",
    "driver_version_tuple",
    "find_nvrtc",
    "find_ptxas",
    "format_version",
    "dims_items",
    "handle_array",
    "int32_arg",
    "launch_dims",
    "load_nvrtc",
    "pack_kernel_args",
    "parse_arch",
    "plan_dims",
    "ptx_entry_params",
    "ptx_version_of",
    "ptxas_check",
    "rewrite_ptx_version",
    "select_ptx_version",
    "validate_ptx",
]
