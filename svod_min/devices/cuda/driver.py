"""The CUDA driver API binding: C types, one declarative prototype table, lazy binding, one checked call.

Only ``libcuda.so.1`` (the driver library every NVIDIA driver installs) is
needed: no CUDA Python package, no toolkit. Each :class:`Prototype` of
:data:`DRIVER_API` gives cuda.h's name (what callers use), the result type
(``CUresult``), the argument types and the exported symbols, newest first
(``cuMemAlloc`` is ``cuMemAlloc_v2``). A name is resolved to the newest symbol
the library exports and typed the first time it is called, so a driver that
lacks a newer entry point still serves every older one.

:meth:`CudaLibrary.call` is the one checked call path: a non-zero
``CUresult`` becomes :class:`CudaError` carrying the code, the function name,
``cuGetErrorName`` and ``cuGetErrorString``. :meth:`CudaLibrary.call_raw`
returns the code unchecked; only destructors use it (they must ignore
``CUDA_ERROR_DEINITIALIZED`` at interpreter shutdown).

Handles (``CUcontext``, ``CUmodule``, ``CUfunction``, ``CUstream``,
``CUevent``, ``CUgraph``, ``CUgraphExec``, ``CUgraphNode``) are ``c_void_p``;
device pointers (``CUdeviceptr``) are ``c_uint64``; ``CUdevice`` is ``c_int``.

Also here, because every object the driver hands out needs them: the fork
guard (a per-thread "context is current" record that a fork invalidates) and
the shutdown-safe finalizers that release driver resources. (Explicit frees,
unloads and closes bump :data:`svod_min.devices.base.RELEASE_EPOCH`.)
"""

from __future__ import annotations

import ctypes
import os
import threading
import weakref
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from ...error import CudaError, CudaSymbolError
from .enums import CU_MEMORYTYPE_DEVICE

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
        ("gridDimX", _uint),
        ("gridDimY", _uint),
        ("gridDimZ", _uint),
        ("blockDimX", _uint),
        ("blockDimY", _uint),
        ("blockDimZ", _uint),
        ("sharedMemBytes", _uint),
        ("kernelParams", _P(_vp)),
        ("extra", _P(_vp)),
        ("kern", _vp),
        ("ctx", _vp),
    ]


class CUDA_MEMCPY3D(ctypes.Structure):
    """``CUDA_MEMCPY3D`` (cuda.h): a graph memcpy node's parameters; svod_min fills only 1-D D2D copies."""

    _fields_ = [
        ("srcXInBytes", _size),
        ("srcY", _size),
        ("srcZ", _size),
        ("srcLOD", _size),
        ("srcMemoryType", _int),
        ("srcHost", _vp),
        ("srcDevice", CUdeviceptr),
        ("srcArray", _vp),
        ("reserved0", _vp),
        ("srcPitch", _size),
        ("srcHeight", _size),
        ("dstXInBytes", _size),
        ("dstY", _size),
        ("dstZ", _size),
        ("dstLOD", _size),
        ("dstMemoryType", _int),
        ("dstHost", _vp),
        ("dstDevice", CUdeviceptr),
        ("dstArray", _vp),
        ("reserved1", _vp),
        ("dstPitch", _size),
        ("dstHeight", _size),
        ("WidthInBytes", _size),
        ("Height", _size),
        ("Depth", _size),
    ]


#: The most rows a graph copy node is split into; a copy that needs more stays an eager copy.
MAX_COPY_ROWS = 65535


def copy_rows(nbytes: int, max_pitch: int) -> Optional[Tuple[int, int]]:
    """``(width, rows)`` covering ``nbytes`` with rows no wider than ``max_pitch`` (the device's
    CU_DEVICE_ATTRIBUTE_MAX_PITCH): one row when it fits, else the widest power-of-two row dividing
    ``nbytes``; None when that takes more than :data:`MAX_COPY_ROWS` rows."""
    if nbytes <= max_pitch:
        return nbytes, 1
    width = 1 << (min(max_pitch, nbytes & -nbytes).bit_length() - 1)  # a power of two: divides nbytes
    rows = nbytes // width
    return (width, rows) if rows <= MAX_COPY_ROWS else None


def memcpy_1d(dst: int, src: int, nbytes: int, max_pitch: int = 2**31 - 1) -> Optional[CUDA_MEMCPY3D]:
    """Parameters of a device-to-device copy of ``nbytes`` as rows of at most ``max_pitch`` bytes, back to
    back (pitch = width), or None when :func:`copy_rows` finds no such rows."""
    shape = copy_rows(nbytes, max_pitch)
    if shape is None:
        return None
    p = CUDA_MEMCPY3D()
    p.srcMemoryType = p.dstMemoryType = CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.dstDevice = src, dst
    p.srcPitch = p.dstPitch = p.WidthInBytes = shape[0]
    p.srcHeight = p.dstHeight = p.Height = shape[1]
    p.Depth = 1
    return p


# --- the prototype table ---------------------------------------------------------------------------


class Prototype(NamedTuple):
    """One driver entry point: cuda.h's name, its result and argument types, and the exported symbols that
    implement it, newest first (cuda.h's ``#define cuMemAlloc cuMemAlloc_v2`` since CUDA 3.2; a driver
    that lacks the newest symbol is served by the next)."""

    name: str
    restype: Any
    argtypes: Tuple[Any, ...]
    symbols: Tuple[str, ...]


def _api(name: str, argtypes: Tuple[Any, ...], *symbols: str) -> Prototype:
    return Prototype(name, CUresult, argtypes, symbols or (name,))


#: Every entry point svod_min binds, by cuda.h's name; callers use these names.
DRIVER_API: Tuple[Prototype, ...] = (
    # errors
    _api("cuGetErrorName", (CUresult, _P(_cp))),
    _api("cuGetErrorString", (CUresult, _P(_cp))),
    # init and devices
    _api("cuInit", (_uint,)),
    _api("cuDriverGetVersion", (_P(_int),)),
    _api("cuDeviceGetCount", (_P(_int),)),
    _api("cuDeviceGet", (_P(CUdevice), _int)),
    _api("cuDeviceGetName", (_cp, _int, CUdevice)),
    _api("cuDeviceComputeCapability", (_P(_int), _P(_int), CUdevice)),
    _api("cuDeviceGetAttribute", (_P(_int), _int, CUdevice)),
    _api("cuDeviceTotalMem", (_P(_size), CUdevice), "cuDeviceTotalMem_v2"),
    _api("cuDeviceCanAccessPeer", (_P(_int), CUdevice, CUdevice)),
    # contexts
    _api("cuDevicePrimaryCtxRetain", (_P(HANDLE), CUdevice)),
    _api("cuDevicePrimaryCtxRelease", (CUdevice,), "cuDevicePrimaryCtxRelease_v2"),
    _api("cuCtxSetCurrent", (HANDLE,)),
    _api("cuCtxGetCurrent", (_P(HANDLE),)),
    _api("cuCtxPushCurrent", (HANDLE,), "cuCtxPushCurrent_v2"),
    _api("cuCtxPopCurrent", (_P(HANDLE),), "cuCtxPopCurrent_v2"),
    _api("cuCtxSynchronize", ()),
    _api("cuCtxEnablePeerAccess", (HANDLE, _uint)),
    # memory
    _api("cuMemGetInfo", (_P(_size), _P(_size)), "cuMemGetInfo_v2"),
    _api("cuMemAlloc", (_P(CUdeviceptr), _size), "cuMemAlloc_v2"),
    _api("cuMemFree", (CUdeviceptr,), "cuMemFree_v2"),
    _api("cuMemHostAlloc", (_P(_vp), _size, _uint)),
    _api("cuMemFreeHost", (_vp,)),
    _api("cuMemsetD8Async", (CUdeviceptr, ctypes.c_ubyte, _size, HANDLE)),
    _api("cuMemcpyHtoD", (CUdeviceptr, _vp, _size), "cuMemcpyHtoD_v2"),
    _api("cuMemcpyDtoH", (_vp, CUdeviceptr, _size), "cuMemcpyDtoH_v2"),
    _api("cuMemcpyDtoD", (CUdeviceptr, CUdeviceptr, _size), "cuMemcpyDtoD_v2"),
    _api("cuMemcpyHtoDAsync", (CUdeviceptr, _vp, _size, HANDLE), "cuMemcpyHtoDAsync_v2"),
    _api("cuMemcpyDtoHAsync", (_vp, CUdeviceptr, _size, HANDLE), "cuMemcpyDtoHAsync_v2"),
    _api("cuMemcpyDtoDAsync", (CUdeviceptr, CUdeviceptr, _size, HANDLE), "cuMemcpyDtoDAsync_v2"),
    _api("cuMemcpyPeerAsync", (CUdeviceptr, HANDLE, CUdeviceptr, HANDLE, _size, HANDLE)),
    # streams and events
    _api("cuStreamCreate", (_P(HANDLE), _uint)),
    _api("cuStreamSynchronize", (HANDLE,)),
    _api("cuStreamDestroy", (HANDLE,), "cuStreamDestroy_v2"),
    _api("cuStreamWaitEvent", (HANDLE, HANDLE, _uint)),
    _api("cuEventCreate", (_P(HANDLE), _uint)),
    _api("cuEventRecord", (HANDLE, HANDLE)),
    _api("cuEventQuery", (HANDLE,)),
    _api("cuEventSynchronize", (HANDLE,)),
    _api(
        "cuEventElapsedTime", (_P(ctypes.c_float), HANDLE, HANDLE), "cuEventElapsedTime_v2", "cuEventElapsedTime"
    ),  # the v2 is what cuda.h calls since 12.8; v1 for older drivers
    _api("cuEventDestroy", (HANDLE,), "cuEventDestroy_v2"),
    # modules and launches
    _api("cuModuleLoadDataEx", (_P(HANDLE), _vp, _uint, _P(_int), _P(_vp))),
    _api("cuModuleGetFunction", (_P(HANDLE), HANDLE, _cp)),
    _api("cuModuleUnload", (HANDLE,)),
    _api("cuFuncGetAttribute", (_P(_int), _int, HANDLE)),
    _api("cuFuncSetAttribute", (HANDLE, _int, _int)),
    _api("cuLaunchKernel", (HANDLE, _uint, _uint, _uint, _uint, _uint, _uint, _uint, HANDLE, _P(_vp), _P(_vp))),
    # graphs
    _api("cuStreamBeginCapture", (HANDLE, _int), "cuStreamBeginCapture_v2"),
    _api("cuStreamEndCapture", (HANDLE, _P(HANDLE))),
    _api("cuGraphCreate", (_P(HANDLE), _uint)),
    _api(
        "cuGraphAddKernelNode",
        (_P(HANDLE), HANDLE, _P(HANDLE), _size, _P(CUDA_KERNEL_NODE_PARAMS)),
        "cuGraphAddKernelNode_v2",
        "cuGraphAddKernelNode",
    ),  # v1 for pre-12 drivers (the struct's v1 prefix)
    _api("cuGraphAddMemcpyNode", (_P(HANDLE), HANDLE, _P(HANDLE), _size, _P(CUDA_MEMCPY3D), HANDLE)),
    _api("cuGraphInstantiateWithFlags", (_P(HANDLE), HANDLE, _u64)),
    _api("cuGraphLaunch", (HANDLE, HANDLE)),
    _api(
        "cuGraphExecKernelNodeSetParams",
        (HANDLE, HANDLE, _P(CUDA_KERNEL_NODE_PARAMS)),
        "cuGraphExecKernelNodeSetParams_v2",
        "cuGraphExecKernelNodeSetParams",
    ),
    _api("cuGraphExecDestroy", (HANDLE,)),
    _api("cuGraphDestroy", (HANDLE,)),
)

#: ``(exported symbol, argtypes)`` for every symbol the binding may bind (tests/devices/cuda/test_cuda_abi.py checks
#: each against cuda.h's declaration).
PROTOTYPES: Tuple[Tuple[str, Tuple[Any, ...]], ...] = tuple((sym, p.argtypes) for p in DRIVER_API for sym in p.symbols)


def _lookup_table() -> Dict[str, Prototype]:
    """cuda.h's names, plus each exported symbol for callers that name one (tools, tests): that symbol only."""
    table = {p.name: p for p in DRIVER_API}
    for p in DRIVER_API:
        for symbol in p.symbols:
            table.setdefault(symbol, p._replace(name=symbol, symbols=(symbol,)))
    return table


_TABLE = _lookup_table()


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
        """The first of ``names`` the library exports (a probe; the table's own versions resolve by themselves)."""
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
        if fn is None:
            fn = self._untyped[name] = self._resolve(name)  # a racing first call just builds an equal one
        return fn

    def _bind(self, name: str) -> Callable[..., int]:
        with self._lock:
            fn = self._fns.get(name)
            if fn is None:
                fn = self._resolve(name)
                fn.argtypes = list(_TABLE[name].argtypes)
                self._fns[name] = fn
        return fn

    def _resolve(self, name: str) -> Callable[..., int]:
        """A fresh ctypes function (typing it never affects other users) for the newest exported symbol of ``name``."""
        proto = _TABLE.get(name)
        if proto is None:
            raise CudaSymbolError("%s is not in svod_min's CUDA prototype table" % name)
        for symbol in proto.symbols:
            try:
                fn = self._dll[symbol]
            except AttributeError:
                continue
            fn.restype = proto.restype
            return fn
        raise CudaSymbolError("%s does not export %s (driver too old?)" % (self.path, " or ".join(proto.symbols)))

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


# --- fork guard and per-thread context ------------------------------------------------------------

FORK_EPOCH = [0]  # bumped in every forked child: per-thread "context is current" flags go stale
thread_state = threading.local()


def _after_fork_in_child() -> None:
    FORK_EPOCH[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --- shutdown-safe release -------------------------------------------------------------------------


def release_quietly(driver: Any, alive: Optional[List[bool]], context: Optional[int], name: str, *args: Any) -> None:
    """Free a driver resource from a finalizer: never raises, skips forked children, ignores DEINITIALIZED.

    The owning context is pushed around the call and popped after, so the
    thread the garbage collector happens to run in keeps its current context.
    ``alive`` is the owning device's flag: after ``CudaDevice.close()`` its
    context (and everything in it) is gone, and a later primary context may
    reuse the same handles and addresses, so nothing is freed twice.
    """
    try:
        if os.getpid() != driver.pid or (alive is not None and not alive[0]):
            return
        lib = driver.lib
        pushed = context is not None and lib.call_raw("cuCtxPushCurrent", context) == 0
        try:
            lib.call_raw(name, *args)
        finally:
            if pushed:
                lib.call_raw("cuCtxPopCurrent", ctypes.byref(HANDLE()))
    except Exception:  # interpreter shutdown, module globals gone, a dead context: nothing to do
        pass


def finalize(owner: Any, driver: Any, context: Optional[int], name: str, *args: Any) -> weakref.finalize:
    fin = weakref.finalize(owner, release_quietly, driver, None, context, name, *args)
    fin.atexit = False  # at exit the driver tears contexts down itself
    return fin


def device_finalize(owner: Any, device: Any, name: str, *args: Any) -> weakref.finalize:
    """A finalizer for a resource in ``device``'s context: a no-op once the device was closed."""
    fin = weakref.finalize(owner, release_quietly, device.driver, device.alive, device.context_value, name, *args)
    fin.atexit = False
    return fin
