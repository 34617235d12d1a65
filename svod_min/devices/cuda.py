"""The CUDA device: the NVIDIA driver API through ctypes, nothing else.

Layers, bottom up (see docs/cuda.md):

* :mod:`.cuda_api` - everything that needs no GPU: the prototype table,
  lazy binding of ``libcuda.so.1`` and the one checked call path
  (:class:`CudaError`); PTX ISA versions per driver
  (:func:`select_ptx_version`), :func:`validate_ptx`,
  :func:`rewrite_ptx_version`, kernel argument blobs
  (:func:`pack_kernel_args`), launch dimensions (:func:`launch_dims`),
  offline assembly (:func:`ptxas_check`) and NVRTC (:func:`compile_cuda`).
  All of it is re-exported here.
* :class:`CudaDriver` (:func:`load_driver`): ``cuInit``, discovery, the fork
  guard; :class:`CudaDevice`, :class:`CudaBuffer`, :class:`CudaProgram`,
  :class:`CudaGraph` mirror the CPU device's surface.
* :func:`register_cuda` and :func:`info_lines` for the registry and the CLI.

Launch semantics are svod's: ``global_size`` counts **blocks** (it is the
grid), ``local_size`` is the block; kernel arguments are one blob of 8-byte
device pointers followed by 4-byte int32 scalars, packed once per bound
launch and patched in place on replay.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
import weakref
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ..device_spec import DeviceSpec
from ..dtypes import DType, DTypeLike, dtype as to_dtype, pack_values, unpack_values
from ..error import (
    BufferAllocationError,
    ExecutionError,
    ForkedChildError,
    FreedBufferError,
    InvalidDeviceError,
    NotSupportedError,
    ReleasedError,
    UnsupportedDeviceError,
)
from . import common, cuda_api as api
from .graph_segments import graph_segments
from .cuda_api import (  # re-exported: svod_min.devices.cuda is the public module
    DEFAULT_LIMITS,
    HANDLE,
    KernelVariableError,
    NVRTC_MISSING,
    PTX_FOR_CUDA,
    PTX_MIN_FOR_TARGET,
    ArgBlob,
    ArgSlot,
    ArgumentRangeError,
    CudaError,
    CudaLibrary,
    CudaSymbolError,
    Dims3,
    LaunchConfigError,
    LaunchLimits,
    Nvrtc,
    PtxError,
    PtxInfo,
    _as_int,
    _blank_comments,
    _ENTRY_RE,
    arch_name,
    check_entry_params,
    check_ptx_version,
    check_shared_bytes,
    compile_cuda,
    driver_version_tuple,
    find_nvrtc,
    find_ptxas,
    format_version,
    int32_arg,
    launch_dims,
    load_nvrtc,
    pack_kernel_args,
    parse_arch,
    plan_dims,
    ptx_entry_params,
    ptx_version_of,
    ptxas_check,
    rewrite_ptx_version,
    select_ptx_version,
    validate_ptx,
)

# Importing this module must stay cheap (the device registry imports it to
# probe for a driver): the CPU device, subprocess & co. are imported on use.

DEFAULT_LIBRARY = "libcuda.so.1"
_LIBRARY_ENV = "SVOD_CUDA_LIBRARY"  # another path for the driver library (tests, odd installs)
_DISABLE_ENV = "SVOD_CUDA"  # "0": never load the driver
NO_DRIVER_REASON = "no NVIDIA driver (libcuda.so.1) on this machine"


def _cpu() -> Any:
    """svod_min.devices.cpu (buffer helpers, CpuBuffer), imported on first use."""
    from . import cpu

    return cpu


# --- errors ---------------------------------------------------------------------------------------





# Bumped by every explicit free / unload / close: a bound launch or graph re-checks its buffers and module
# before the next launch only when it changed, so the replay hot path pays one comparison.
_RELEASES = [0]
_releases_lock = threading.Lock()


def _released_something() -> None:
    with _releases_lock:
        _RELEASES[0] += 1


# --- fork guard and per-thread context ------------------------------------------------------------

_FORK_EPOCH = [0]  # bumped in every forked child: per-thread "context is current" flags go stale
_tls = threading.local()


def _after_fork_in_child() -> None:
    _FORK_EPOCH[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# --- the driver -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class CudaDeviceInfo:
    """Static facts about one GPU (no context needed to read them)."""

    ordinal: int
    name: str
    compute_capability: Tuple[int, int]
    total_memory: int
    multiprocessors: int
    limits: LaunchLimits

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability


class CudaDriver:
    """An initialised driver library: version, devices, and the process that may use it."""

    def __init__(self, lib: CudaLibrary) -> None:
        self.lib = lib
        self.path = lib.path
        lib.call("cuInit", 0)
        self.pid = os.getpid()
        self.version = _out_int(lib, "cuDriverGetVersion")
        self.device_count = _out_int(lib, "cuDeviceGetCount")
        self._devices: Dict[int, "CudaDevice"] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "<CudaDriver %s %s devices=%d>" % (self.path, self.version_string, self.device_count)

    @property
    def version_string(self) -> str:
        return format_version(driver_version_tuple(self.version))

    @property
    def max_ptx_version(self) -> str:
        return select_ptx_version(self.version)

    def check_process(self) -> None:
        """Raise :class:`ForkedChildError` when called in a child forked after ``cuInit``."""
        if os.getpid() != self.pid:
            raise ForkedChildError(
                "CUDA was initialised in process %d; it cannot be used in a forked child (use spawn)" % self.pid
            )

    def _check_ordinal(self, ordinal: int) -> None:
        if not isinstance(ordinal, int) or not 0 <= ordinal < self.device_count:
            raise InvalidDeviceError(
                "CUDA:%s does not exist: the driver reports %d device(s)" % (ordinal, self.device_count)
            )

    def device_info(self, ordinal: int) -> CudaDeviceInfo:
        """Name, compute capability, memory and limits of GPU ``ordinal``."""
        self.check_process()
        self._check_ordinal(ordinal)
        handle = self.device_handle(ordinal)
        name = ctypes.create_string_buffer(256)
        self.lib.call("cuDeviceGetName", name, 256, handle)
        memory = ctypes.c_size_t()
        self.lib.call("cuDeviceTotalMem_v2", ctypes.byref(memory), handle)
        attr = partial(self.attribute, handle)
        limits = LaunchLimits(
            attr(api.ATTR_MAX_THREADS_PER_BLOCK),
            (attr(api.ATTR_MAX_BLOCK_DIM_X), attr(api.ATTR_MAX_BLOCK_DIM_Y), attr(api.ATTR_MAX_BLOCK_DIM_Z)),
            (attr(api.ATTR_MAX_GRID_DIM_X), attr(api.ATTR_MAX_GRID_DIM_Y), attr(api.ATTR_MAX_GRID_DIM_Z)),
            attr(api.ATTR_MAX_SHARED_MEMORY_PER_BLOCK),
            self._optional_attribute(handle, api.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        )
        capability = (attr(api.ATTR_COMPUTE_CAPABILITY_MAJOR), attr(api.ATTR_COMPUTE_CAPABILITY_MINOR))
        text = name.value.decode("utf-8", "replace")
        return CudaDeviceInfo(ordinal, text, capability, memory.value, attr(api.ATTR_MULTIPROCESSOR_COUNT), limits)

    def device_handle(self, ordinal: int) -> int:
        handle = api.CUdevice()
        self.lib.call("cuDeviceGet", ctypes.byref(handle), ordinal)
        return handle.value

    def attribute(self, handle: int, attribute: int) -> int:
        value = ctypes.c_int()
        self.lib.call("cuDeviceGetAttribute", ctypes.byref(value), attribute, handle)
        return value.value

    def _optional_attribute(self, handle: int, attribute: int) -> int:
        """An attribute older drivers may not know: 0 when they refuse it."""
        try:
            return self.attribute(handle, attribute)
        except CudaError:
            return 0

    def _forget(self, device: "CudaDevice") -> None:
        """Drop a closed device from the cache, so :meth:`device` makes a new one."""
        with self._lock:
            if self._devices.get(device.ordinal) is device:
                del self._devices[device.ordinal]

    def device(self, ordinal: int = 0) -> "CudaDevice":
        """The process-wide :class:`CudaDevice` for GPU ``ordinal`` (created on first use, again after its close())."""
        self.check_process()
        self._check_ordinal(ordinal)
        with self._lock:
            dev = self._devices.get(ordinal)
            if dev is None:
                dev = self._devices[ordinal] = CudaDevice(self, ordinal)
            return dev


def _out_int(lib: CudaLibrary, name: str) -> int:
    value = ctypes.c_int()
    lib.call(name, ctypes.byref(value))
    return value.value


_drivers: Dict[str, Optional[CudaDriver]] = {}
_reasons: Dict[str, str] = {}
_drivers_lock = threading.Lock()


def _library_path(path: Optional[str]) -> str:
    return path or os.environ.get(_LIBRARY_ENV, "").strip() or DEFAULT_LIBRARY


def load_driver(path: Optional[str] = None) -> Optional[CudaDriver]:
    """The initialised driver (cached per library path), or None; never raises.

    ``path`` (default ``$SVOD_CUDA_LIBRARY`` or ``libcuda.so.1``) lets tests
    load a stand-in library. When None is returned,
    :func:`driver_unavailable_reason` says why. ``SVOD_CUDA=0`` disables CUDA.
    """
    key = _library_path(path)
    if os.environ.get(_DISABLE_ENV, "").strip() == "0":
        with _drivers_lock:
            _reasons[key] = "CUDA disabled by %s=0" % _DISABLE_ENV
        return None
    with _drivers_lock:
        if key in _drivers:
            return _drivers[key]
        driver, reason = _open_driver(key)
        _drivers[key] = driver
        if reason:
            _reasons[key] = reason
        return driver


def _open_driver(path: str) -> Tuple[Optional[CudaDriver], str]:
    try:
        lib = CudaLibrary(path)
    except OSError as exc:
        return None, "cannot load %s (no NVIDIA driver?): %s" % (path, exc)
    try:
        return CudaDriver(lib), ""
    except CudaError as exc:
        return None, "%s loaded, but %s" % (path, exc)
    except Exception as exc:  # a broken stand-in library must not take the import down
        return None, "%s loaded, but initialising it failed: %s: %s" % (path, type(exc).__name__, exc)


def driver_unavailable_reason(path: Optional[str] = None) -> Optional[str]:
    """Why :func:`load_driver` returned None (or the last registration problem); None when it did not."""
    key = _library_path(path)
    with _drivers_lock:
        return _reasons.get(key)


def reset_driver_cache() -> None:
    """Forget loaded drivers and reasons (tests; devices already handed out stay usable)."""
    with _drivers_lock:
        _drivers.clear()
        _reasons.clear()


# --- shutdown-safe release -------------------------------------------------------------------------


def _release(driver: CudaDriver, alive: Optional[List[bool]], context: Optional[int], name: str, *args: Any) -> None:
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
        pushed = context is not None and lib.call_raw("cuCtxPushCurrent_v2", context) == 0
        try:
            lib.call_raw(name, *args)
        finally:
            if pushed:
                lib.call_raw("cuCtxPopCurrent_v2", ctypes.byref(HANDLE()))
    except Exception:  # interpreter shutdown, module globals gone, a dead context: nothing to do
        pass


def _finalize(owner: Any, driver: CudaDriver, context: Optional[int], name: str, *args: Any) -> weakref.finalize:
    fin = weakref.finalize(owner, _release, driver, None, context, name, *args)
    fin.atexit = False  # at exit the driver tears contexts down itself
    return fin


def _device_finalize(owner: Any, device: "CudaDevice", name: str, *args: Any) -> weakref.finalize:
    """A finalizer for a resource in ``device``'s context: a no-op once the device was closed."""
    fin = weakref.finalize(owner, _release, device.driver, device._alive, device.context_value, name, *args)
    fin.atexit = False
    return fin


# --- device memory --------------------------------------------------------------------------------


class CudaStorage:
    """One ``cuMemAlloc`` allocation; every view shares it; freed when the last reference goes."""

    def __init__(self, device: "CudaDevice", nbytes: int) -> None:
        self.device = device
        self.capacity = max(nbytes, 1)
        ptr = api.CUdeviceptr()
        device.activate()
        try:
            device.lib.call("cuMemAlloc_v2", ctypes.byref(ptr), self.capacity)
        except CudaError as exc:
            raise BufferAllocationError("cannot allocate %d bytes on %s: %s" % (nbytes, device.spec, exc)) from exc
        self.address: int = ptr.value
        self.freed = False
        self._finalizer = _device_finalize(self, device, "cuMemFree_v2", self.address)

    def __repr__(self) -> str:
        return "<CudaStorage %s 0x%x+%d%s>" % (self.device.spec, self.address, self.capacity, " freed" if self.freed else "")

    def free(self) -> None:
        """Free now; buffers over this storage are refused afterwards (:class:`FreedBufferError`)."""
        self.freed = True
        _released_something()
        self._finalizer()

    def check_live(self, what: str = "buffer") -> None:
        """Raise :class:`FreedBufferError` (or :class:`ReleasedError` for a closed device) instead of using freed memory."""
        if self.freed:
            raise FreedBufferError("%s at 0x%x on %s was freed (CudaStorage.free()); it cannot be used any more"
                                   % (what, self.address, self.device.spec))  # fmt: skip
        self.device.check_open()


def _overlap(a: "CudaBuffer", b: "CudaBuffer") -> bool:
    """Whether two views share bytes of one allocation."""
    return a.storage is b.storage and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes


class CudaBuffer:
    """A typed window ``[offset, offset + nbytes)`` of a :class:`CudaStorage`; ``address`` is a device pointer."""

    __slots__ = ("storage", "offset", "nbytes", "dtype", "shape", "device", "address", "__weakref__")
    on_host = False  # device interface slot: ``address`` is a device pointer, never memmoved

    def __init__(self, storage: CudaStorage, offset: int, nbytes: int, dt: DType, shape: Tuple[int, ...]) -> None:
        self.storage, self.offset, self.nbytes, self.dtype, self.shape = storage, offset, nbytes, dt, shape
        self.device: "CudaDevice" = storage.device
        self.address: int = storage.address + offset

    def __len__(self) -> int:
        return self.nbytes // self.dtype.itemsize

    def __repr__(self) -> str:
        return "<CudaBuffer %s %s%s %d B @0x%x>" % (self.device.spec, self.dtype.name, list(self.shape), self.nbytes, self.address)

    @property
    def size(self) -> int:
        return len(self)

    def byte_range(self) -> Tuple[int, int]:
        """``(start, end)`` byte offsets inside :attr:`storage`, for hazard checks."""
        return self.offset, self.offset + self.nbytes

    def view(self, byte_offset: int, nbytes: int, dtype: Optional[DTypeLike] = None, shape: Optional[Sequence[int]] = None) -> "CudaBuffer":
        """A buffer sharing this storage, ``nbytes`` long at ``byte_offset`` into this one."""
        self.storage.check_live()
        dt = self.dtype if dtype is None else to_dtype(dtype)
        byte_offset, nbytes = common.check_index(byte_offset, "view offset"), common.check_index(nbytes, "view size")
        if byte_offset + nbytes > self.nbytes:
            raise BufferAllocationError(
                "view [%d, %d) is out of range for a %d-byte buffer" % (byte_offset, byte_offset + nbytes, self.nbytes)
            )
        return CudaBuffer(self.storage, self.offset + byte_offset, nbytes, dt, common.shape_for(nbytes, dt, shape))

    # --- data movement ---

    def copyin(self, data: Any) -> "CudaBuffer":
        """Overwrite the whole buffer from host data (bytes-like, numpy, list, CpuBuffer) or another CudaBuffer."""
        self.storage.check_live("copyin destination")
        if isinstance(data, CudaBuffer):
            data.storage.check_live("copyin source")
            _check_same_size(data.nbytes, self.nbytes, "copyin")
            if data.device is self.device:
                self.device.copy(self, data)
            else:
                self.device.copy_from_peer(self, data)
            return self
        address, nbytes, keep = _host_source(data, self.dtype)
        _check_same_size(nbytes, self.nbytes, "copyin")
        if nbytes:
            self.device.memcpy_htod(self.address, address, nbytes)
        del keep
        return self

    def copyout(self) -> bytes:
        """The buffer's bytes (synchronous: waits for earlier work on the device's stream)."""
        out = bytearray(self.nbytes)
        self.copyout_into(out)
        return bytes(out)

    def copyout_into(self, dst: Any) -> Any:
        """Copy into a writable host buffer of the same size (bytearray, numpy array, CpuBuffer); returns ``dst``."""
        self.storage.check_live("copyout source")
        address, nbytes, keep = _host_destination(dst)
        _check_same_size(nbytes, self.nbytes, "copyout")
        if nbytes:
            self.device.memcpy_dtoh(address, self.address, nbytes)
        del keep
        return dst

    def numpy(self) -> Any:
        """A host numpy copy of the buffer (GPU memory cannot be viewed from the host)."""
        np = common.numpy_module()
        if np is None:
            raise NotSupportedError("numpy is not installed; use copyout() or tolist()")
        if self.dtype.numpy_name is None:
            raise NotSupportedError("%s has no numpy dtype; use view(..., dtype='uint16') for its raw bits" % self.dtype.name)
        out = np.empty(self.shape, dtype=self.dtype.numpy_name)
        return self.copyout_into(out)

    def tolist(self) -> Any:
        """Nested Python lists (or a scalar for shape ``()``); needs no numpy."""
        return common.nest(unpack_values(self.dtype, self.copyout()), self.shape)


def _check_same_size(got: int, want: int, what: str) -> None:
    if got != want:
        raise BufferAllocationError("%s size mismatch: got %d bytes, buffer holds %d bytes" % (what, got, want))


def _bytes_address(raw: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p).value or 0


def _host_source(data: Any, dt: DType) -> Tuple[int, int, Any]:
    """(host address, nbytes, object to keep alive) for copyin's source."""
    cpu = _cpu()
    if isinstance(data, cpu.CpuBuffer):
        return data.address, data.nbytes, data
    np = common.numpy_module()
    if np is not None and isinstance(data, np.ndarray):
        if data.dtype.itemsize != dt.itemsize:
            raise BufferAllocationError(
                "array dtype %s (%d bytes/element) does not match buffer dtype %s (%d bytes/element)"
                % (data.dtype, data.dtype.itemsize, dt.name, dt.itemsize)
            )
        arr = np.ascontiguousarray(data)
        return int(arr.ctypes.data), arr.nbytes, arr
    if isinstance(data, (list, tuple)):
        raw = pack_values(dt, data)
        return _bytes_address(raw), len(raw), raw
    if isinstance(data, bytes):
        return _bytes_address(data), len(data), data
    try:
        view = memoryview(data)
    except TypeError:
        raise BufferAllocationError("cannot copy %s into a buffer" % type(data).__name__) from None
    if view.readonly or not view.c_contiguous:
        raw = view.tobytes()
        return _bytes_address(raw), len(raw), raw
    flat = view.cast("B")
    if not flat.nbytes:
        return 0, 0, None
    anchor = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return ctypes.addressof(anchor), flat.nbytes, (anchor, flat)


def _host_destination(dst: Any) -> Tuple[int, int, Any]:
    cpu = _cpu()
    if isinstance(dst, cpu.CpuBuffer):
        return dst.address, dst.nbytes, dst
    np = common.numpy_module()
    if np is not None and isinstance(dst, np.ndarray):
        if not (dst.flags.c_contiguous and dst.flags.writeable):
            raise BufferAllocationError("copyout needs a C-contiguous, writable numpy array")
        return int(dst.ctypes.data), dst.nbytes, dst
    try:
        view = memoryview(dst)
    except TypeError:
        raise BufferAllocationError("cannot copy a buffer into %s" % type(dst).__name__) from None
    if view.readonly or not view.c_contiguous:
        raise BufferAllocationError("copyout needs a writable, contiguous destination")
    flat = view.cast("B")
    if not flat.nbytes:
        return 0, 0, None
    anchor = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return ctypes.addressof(anchor), flat.nbytes, (anchor, flat)


# --- events and pinned staging --------------------------------------------------------------------


class CudaEvent:
    """A reusable ``CUevent`` (``timing=False`` gives a cheaper sync-only event)."""

    def __init__(self, device: "CudaDevice", timing: bool = True) -> None:
        self.device = device
        handle = HANDLE()
        device.activate()
        device.lib.call("cuEventCreate", ctypes.byref(handle), api.CU_EVENT_DEFAULT if timing else api.CU_EVENT_DISABLE_TIMING)
        self.handle = handle
        self.recorded = False
        self._finalizer = _device_finalize(self, device, "cuEventDestroy_v2", handle.value)

    def record(self, stream: Optional[HANDLE] = None) -> None:
        self.device.check_open()  # a forked child or a closed device gets a clear error, not a stale handle
        self.device.lib.call("cuEventRecord", self.handle, self.device.stream if stream is None else stream)
        self.recorded = True

    def synchronize(self) -> None:
        self.device.check_open()
        if self.recorded:
            self.device.lib.call("cuEventSynchronize", self.handle)

    def query(self) -> bool:
        """Whether the work captured by the last :meth:`record` finished; never blocks (True if never recorded).

        ``CUDA_ERROR_NOT_READY`` is the driver's "not yet", not an error;
        any other non-zero result raises :class:`CudaError`.
        """
        self.device.check_open()
        if not self.recorded:
            return True
        code = self.device.lib.call_raw("cuEventQuery", self.handle)
        if code == api.CUDA_ERROR_NOT_READY:
            return False
        if code:
            raise self.device.lib.error("cuEventQuery", code)
        return True

    def elapsed_since(self, start: "CudaEvent") -> float:
        """Seconds of device time between ``start`` and this event (both recorded, this one completed)."""
        self.device.check_open()
        ms = ctypes.c_float()
        lib = self.device.lib
        lib.call(lib.first_exported("cuEventElapsedTime_v2", "cuEventElapsedTime"), ctypes.byref(ms), start.handle, self.handle)
        return ms.value / 1e3


class _PinnedBlock:
    """One page-locked host block with a sync-only event marking its last DMA."""

    def __init__(self, device: "CudaDevice", nbytes: int) -> None:
        ptr = ctypes.c_void_p()
        device.activate()
        device.lib.call("cuMemHostAlloc", ctypes.byref(ptr), nbytes, api.CU_MEMHOSTALLOC_PORTABLE)
        self.address: int = ptr.value or 0
        self.nbytes = nbytes
        self.event = CudaEvent(device, timing=False)
        self._finalizer = _device_finalize(self, device, "cuMemFreeHost", self.address)

    def wait(self) -> None:
        self.event.synchronize()


_COPY_THREADS_ENV = "SVOD_CUDA_COPY_THREADS"
_SPLIT_MIN = 1 << 20  # smaller host copies are not worth a thread hand-off


class StagingPool:
    """Two pinned blocks per device used in turn, so host memcpy and DMA overlap on large copies.

    Device -> host copies of at most ``direct_max`` bytes skip staging (the
    driver's pageable path returns once the bytes landed). One copy uses the
    pool at a time. With ``threads`` > 1 (``SVOD_CUDA_COPY_THREADS``) the host
    side of each chunk is split across that many threads: one core's memcpy
    can be slower than the GPU's DMA (ctypes.memmove releases the GIL).
    """

    def __init__(self, device: "CudaDevice", chunk: int = 8 << 20, direct_max: int = 256 << 10,
                 threads: Optional[int] = None) -> None:  # fmt: skip
        self.device, self.chunk, self.direct_max = device, chunk, direct_max
        self.threads = _copy_threads() if threads is None else max(1, int(threads))
        self._blocks: List[_PinnedBlock] = []
        self._workers: Any = None
        self.lock = threading.Lock()

    def memmove(self, dst: int, src: int, nbytes: int) -> None:
        """Host memcpy of one chunk, split across ``threads`` when it is large enough."""
        parts = min(self.threads, max(1, nbytes // _SPLIT_MIN))
        if parts == 1:
            ctypes.memmove(dst, src, nbytes)
            return
        if self._workers is None:
            from concurrent.futures import ThreadPoolExecutor

            self._workers = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="svod-copy")
        step = -(-nbytes // parts)
        pieces = [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]
        futures = [self._workers.submit(ctypes.memmove, dst + off, src + off, size) for off, size in pieces[1:]]
        ctypes.memmove(dst, src, pieces[0][1])  # this thread takes the first piece
        for fut in futures:
            fut.result()

    def blocks(self) -> List[_PinnedBlock]:
        if not self._blocks:
            self._blocks = [_PinnedBlock(self.device, self.chunk) for _ in range(2)]
        return self._blocks

    def release(self) -> None:
        with self.lock:
            for block in self._blocks:
                block.wait()
            self._blocks = []
            if self._workers is not None:
                self._workers.shutdown(wait=False)
                self._workers = None


def _copy_threads() -> int:
    raw = os.environ.get(_COPY_THREADS_ENV, "").strip()
    try:
        return max(1, int(raw)) if raw else 1
    except ValueError:
        raise InvalidDeviceError("%s=%r: expected an integer >= 1" % (_COPY_THREADS_ENV, raw)) from None


def _chunks(nbytes: int, chunk: int) -> List[Tuple[int, int]]:
    return [(off, min(chunk, nbytes - off)) for off in range(0, nbytes, chunk)]


# --- the device -----------------------------------------------------------------------------------


class CudaDevice:
    """One GPU: its primary context, one stream, memory, modules, and launch limits."""

    threads = 1  # device interface slot: one host thread drives the stream

    def __init__(self, driver: CudaDriver, ordinal: int) -> None:
        self.driver, self.lib, self.ordinal = driver, driver.lib, ordinal
        self.closed = False
        self._alive = [True]  # shared with the finalizers of everything made on this device (see _release)
        self.spec = DeviceSpec("CUDA", ordinal)
        self.info = driver.device_info(ordinal)
        self.limits = self.info.limits
        self.handle = driver.device_handle(ordinal)
        context = HANDLE()
        self.lib.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), self.handle)
        self.context = context
        self.context_value: int = context.value or 0
        self._ctx_finalizer = _finalize(self, driver, None, "cuDevicePrimaryCtxRelease_v2", self.handle)
        self.activate()
        stream = HANDLE()
        self.lib.call("cuStreamCreate", ctypes.byref(stream), api.CU_STREAM_NON_BLOCKING)
        self.stream = stream
        self._stream_finalizer = _finalize(self, driver, self.context_value, "cuStreamDestroy_v2", stream.value)
        self.staging = StagingPool(self)
        self._modules: Dict[str, "CudaModule"] = {}
        self._modules_lock = threading.Lock()
        self._timers: List[Tuple[CudaEvent, CudaEvent]] = []
        self._timers_lock = threading.Lock()
        self._peers: Dict[int, bool] = {}

    def __repr__(self) -> str:
        return "<CudaDevice %s %s %s>" % (self.spec, self.info.name, self.arch)

    @property
    def name(self) -> str:
        return str(self.spec)

    @property
    def arch(self) -> str:
        return self.info.arch

    # --- context ---

    def activate(self, force: bool = False) -> None:
        """Make the primary context current in this thread (a no-op after the first time per thread).

        svod_min remembers per thread which device it made current; code
        that switches contexts behind its back (another CUDA library in the
        same thread) should call ``activate(force=True)`` afterwards.
        """
        if self.closed:
            self.check_open()
        if force or getattr(_tls, "device", None) is not self or getattr(_tls, "epoch", -1) != _FORK_EPOCH[0]:
            self._make_current()

    def check_open(self) -> None:
        """Raise :class:`ReleasedError` after :meth:`close`, :class:`ForkedChildError` in a forked child."""
        if self.closed:
            raise ReleasedError("%s was closed (CudaDevice.close()); get a new one with driver.device(%d)"
                                % (self.spec, self.ordinal))  # fmt: skip
        self.driver.check_process()

    def _make_current(self) -> None:
        self.driver.check_process()
        self.lib.call("cuCtxSetCurrent", self.context)
        _tls.device, _tls.epoch = self, _FORK_EPOCH[0]

    graph = property(lambda self: CudaGraphSlot(self))  # device interface slot: CUDA graphs

    def host_pool(self) -> None:  # device interface slot: launches are queued, no host pool
        return None

    def synchronize(self) -> None:
        """Wait for everything queued on the device's stream."""
        self.activate()
        self.lib.call("cuStreamSynchronize", self.stream)

    def memory_info(self) -> Tuple[int, int]:
        """``(free, total)`` bytes of device memory."""
        self.activate()
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.lib.call("cuMemGetInfo_v2", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    # --- memory ---

    def allocate(self, nbytes_or_shape: Union[int, Sequence[int]], dtype: DTypeLike = "uint8") -> CudaBuffer:
        """A zero-filled device buffer: ``int`` = size in bytes, a sequence = shape."""
        dt = to_dtype(dtype)
        if isinstance(nbytes_or_shape, (list, tuple)):
            shape = tuple(common.check_index(d, "shape dimension") for d in nbytes_or_shape)
            nbytes = common.product(shape) * dt.itemsize
        else:
            nbytes = common.check_index(nbytes_or_shape, "buffer size")
            shape = common.shape_for(nbytes, dt, None)
        storage = CudaStorage(self, nbytes)
        self.lib.call("cuMemsetD8Async", storage.address, 0, storage.capacity, self.stream)
        return CudaBuffer(storage, 0, nbytes, dt, shape)

    def memcpy_htod(self, dst: int, src: int, nbytes: int) -> None:
        """Host -> device on the stream; the host source may be reused as soon as this returns.

        Always staged: the source is memmoved into a pinned block (so its
        lifetime ends here by construction) and the DMA from that block is
        asynchronous; the block is reused once its event says the DMA is done.
        """
        if nbytes <= 0:
            return
        self.activate()
        pool = self.staging
        with pool.lock:
            blocks = pool.blocks()
            for i, (off, size) in enumerate(_chunks(nbytes, pool.chunk)):
                block = blocks[i & 1]
                block.wait()  # its previous DMA must be done before we overwrite it
                pool.memmove(block.address, src + off, size)
                self.lib.call("cuMemcpyHtoDAsync_v2", dst + off, block.address, size, self.stream)
                block.event.record(self.stream)

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int) -> None:
        """Device -> host, after everything earlier on the stream; returns when the bytes are in ``dst``."""
        if nbytes <= 0:
            return
        self.activate()
        pool = self.staging
        if nbytes <= pool.direct_max:  # pageable destination: returns once the copy completed
            self.lib.call("cuMemcpyDtoHAsync_v2", dst, src, nbytes, self.stream)
            self.lib.call("cuStreamSynchronize", self.stream)
            return
        with pool.lock:
            blocks, pieces = pool.blocks(), _chunks(nbytes, pool.chunk)
            self._dtoh_issue(blocks[0], src, pieces[0])
            for i, (off, size) in enumerate(pieces):
                if i + 1 < len(pieces):
                    self._dtoh_issue(blocks[(i + 1) & 1], src, pieces[i + 1])
                blocks[i & 1].wait()
                pool.memmove(dst + off, blocks[i & 1].address, size)

    def _dtoh_issue(self, block: _PinnedBlock, src: int, piece: Tuple[int, int]) -> None:
        off, size = piece
        self.lib.call("cuMemcpyDtoHAsync_v2", block.address, src + off, size, self.stream)
        block.event.record(self.stream)

    def graph_copy(self, dst: Any, src: Any) -> Optional["GraphCopy"]:
        """``dst <- src`` as a CUDA graph node, or None when it is not a plain copy on this GPU.

        Overlapping ranges of one allocation are left to the caller (a memcpy
        node, like ``cuMemcpy``, is undefined there).
        """
        if not (isinstance(dst, CudaBuffer) and isinstance(src, CudaBuffer)) or dst.device is not self or src.device is not self:
            return None
        if _overlap(dst, src):
            return None
        return GraphCopy(self, dst, src) if src.nbytes else None

    def copy(self, dst: CudaBuffer, src: CudaBuffer) -> None:
        """Device -> device on this GPU (queued on the stream), with memmove semantics for overlapping views."""
        self._check_own(dst, "destination")
        self._check_own(src, "source")
        _check_same_size(src.nbytes, dst.nbytes, "copy")
        if not src.nbytes:
            return
        self.activate()
        if _overlap(dst, src):
            self._staged_copy(dst, src)
            return
        self.lib.call("cuMemcpyDtoDAsync_v2", dst.address, src.address, src.nbytes, self.stream)

    def _check_own(self, buf: Any, what: str) -> None:
        if not isinstance(buf, CudaBuffer):
            raise ExecutionError("copy %s is %s, not a CUDA buffer" % (what, type(buf).__name__))
        buf.storage.check_live("copy %s" % what)
        if buf.device is not self:
            raise ExecutionError("copy %s lives on %s, not on %s (use copy_from_peer)" % (what, buf.device.spec, self.spec))

    def _staged_copy(self, dst: CudaBuffer, src: CudaBuffer) -> None:
        """Overlapping views of one allocation: cuMemcpy is undefined there, so go through a temporary."""
        tmp = CudaStorage(self, src.nbytes)
        self.lib.call("cuMemcpyDtoDAsync_v2", tmp.address, src.address, src.nbytes, self.stream)
        self.lib.call("cuMemcpyDtoDAsync_v2", dst.address, tmp.address, src.nbytes, self.stream)
        self.lib.call("cuStreamSynchronize", self.stream)  # the temporary must outlive both copies
        tmp._finalizer()  # not free(): nothing else can hold it, so no release epoch bump

    def enable_peer_access(self, other: "CudaDevice") -> bool:
        """Let this context read ``other``'s memory directly; False where the pair cannot (staged copies then)."""
        self.check_open()
        other.check_open()
        key = other.ordinal
        if key not in self._peers:
            self._peers[key] = self._try_enable_peer(other)
        return self._peers[key]

    def _try_enable_peer(self, other: "CudaDevice") -> bool:
        can = ctypes.c_int()
        self.lib.call("cuDeviceCanAccessPeer", ctypes.byref(can), self.handle, other.handle)
        if not can.value:
            return False
        self.activate()
        try:
            self.lib.call("cuCtxEnablePeerAccess", other.context, 0)
        except CudaError as exc:
            return exc.code == api.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        return True

    def copy_from_peer(self, dst: CudaBuffer, src: Any) -> None:
        """Copy ``src`` (a buffer on another GPU, or host data) into ``dst`` on this GPU."""
        if not isinstance(src, CudaBuffer):
            dst.copyin(src)
            return
        _check_same_size(src.nbytes, dst.nbytes, "copy")
        if src.device is self:
            self.copy(dst, src)
            return
        src.device.synchronize()  # its writes must have landed
        self.enable_peer_access(src.device)
        self.activate()
        self.lib.call(
            "cuMemcpyPeerAsync", dst.address, self.context, src.address, src.device.context, src.nbytes, self.stream
        )  # the driver stages through the host when the pair has no peer access
        self.lib.call("cuStreamSynchronize", self.stream)  # src's stream may reuse src as soon as we return

    # --- code ---

    def module(self, image: Union[str, bytes], *, name: str = "module") -> "CudaModule":
        """Load (once per distinct image) a PTX text or CUBIN image."""
        raw = image.encode("utf-8") if isinstance(image, str) else bytes(image)
        key = hashlib.sha256(raw).hexdigest()
        self.check_open()
        with self._modules_lock:
            mod = self._modules.get(key)
            if mod is None:
                mod = self._modules[key] = CudaModule(self, raw, name=name)
                mod._cache_key = key
            return mod

    def _forget_module(self, module: "CudaModule") -> None:
        """Drop an unloaded module from the cache, so the same image loads afresh."""
        with self._modules_lock:
            if self._modules.get(module._cache_key or "") is module:
                del self._modules[module._cache_key or ""]

    def prepare_ptx(self, ptx: Union[str, bytes], entry: Optional[str] = None, *, lower_version: bool = False) -> str:
        """Validate ``ptx`` for this GPU and driver; with ``lower_version`` rewrite a too-new ``.version``."""
        if isinstance(ptx, (bytes, bytearray)):
            text = bytes(ptx).decode("utf-8", "replace")  # a stray byte (in a comment) is for the checks to judge
        elif isinstance(ptx, str):
            text = ptx
        else:
            raise PtxError("PTX must be str or bytes, got %s" % type(ptx).__name__)
        info = validate_ptx(text, self.arch, entry=entry)
        try:
            check_ptx_version(info.version, self.driver.version)
        except PtxError:
            if not lower_version:
                raise
            text = rewrite_ptx_version(text, self.driver.max_ptx_version)
        return text

    def _explain_lowering(self, exc: CudaError, original: Union[str, bytes], loaded: str) -> CudaError:
        """A module that failed after its ``.version`` was lowered: say so (the likely cause) and what to do."""
        before = validate_ptx(original).version
        after = validate_ptx(loaded).version
        if before == after:
            return exc
        hint = ("PTX ISA %s was lowered to %s, the most this driver (CUDA %s) accepts, and the driver's JIT "
                "refused it: compile with an NVRTC no newer than CUDA %s, or update the driver") % (
            format_version(before), format_version(after), self.driver.version_string, self.driver.version_string)
        err = exc.with_log(exc.log)
        err.args = ("%s\n%s" % (hint, exc.args[0]),)
        return err

    def load_ptx(
        self,
        ptx: Union[str, bytes],
        entry: str,
        buf_count: int,
        var_names: Sequence[str] = (),
        *,
        local_size: Optional[Sequence[int]] = None,
        grid: Optional[Sequence[Any]] = None,
        shared_bytes: int = 0,
        name: Optional[str] = None,
        lower_version: bool = False,
    ) -> "CudaProgram":
        """Validate, load (``cuModuleLoadDataEx``, JIT log in errors) and wrap kernel ``entry``.

        ``local_size`` is the default block and ``grid`` the default grid
        (ints or size expressions over ``var_names``), used when a launch
        gives none.
        """
        text = self.prepare_ptx(ptx, entry, lower_version=lower_version)
        check_entry_params(text, entry, buf_count, len(var_names))
        _check_grid(grid, tuple(var_names), name or entry)  # before loading: bad launch defaults load nothing
        _check_block(local_size, self.limits, name or entry)
        try:
            mod = self.module(text, name=name or entry)
        except CudaError as exc:
            raise self._explain_lowering(exc, ptx, text) from None
        return CudaProgram(
            mod, entry, buf_count=buf_count, var_names=var_names, local_size=local_size, grid=grid,
            shared_bytes=shared_bytes, name=name,
        )  # fmt: skip

    def load_cubin(self, cubin: bytes, entry: str, buf_count: int, var_names: Sequence[str] = (), **kwargs: Any) -> "CudaProgram":
        """Wrap ``entry`` of a CUBIN image (no PTX checks: the driver validates the binary)."""
        mod = self.module(bytes(cubin), name=kwargs.pop("name", None) or entry)
        return CudaProgram(mod, entry, buf_count=buf_count, var_names=var_names, **kwargs)

    def compile_cuda(self, source: str, entry: str, buf_count: int, var_names: Sequence[str] = (), *, options: Sequence[str] = (), **kwargs: Any) -> "CudaProgram":
        """CUDA C -> PTX via NVRTC (for this GPU's arch) -> :meth:`load_ptx` (``.version`` lowered if needed)."""
        ptx = compile_cuda(source, self.arch, options=options, name=entry + ".cu")
        return self.load_ptx(ptx, entry, buf_count, var_names, lower_version=True, **kwargs)

    def library_kernel(self, name: str, **params: Any) -> "CudaProgram":
        """A kernel of the shipped PTX library (``svod_min.kernels.cuda_kernels()``), grid and block included."""
        sig = find_cuda_sig(name, **params)
        return self.load_signature(sig)

    def load_signature(self, sig: Any) -> "CudaProgram":
        """Load a :class:`svod_min.kernels.CudaKernelSig`'s PTX module and wrap its entry."""
        from ..kernels import ptx_path

        with open(ptx_path(sig.module), "r", encoding="utf-8") as fh:
            text = fh.read()
        program = self.load_ptx(
            text, sig.entry, len(sig.buffers), sig.var_names, local_size=sig.block, grid=sig.grid,
            shared_bytes=0, name="%s%s" % (sig.name, dict(sig.params)),
        )  # fmt: skip
        program.signature = sig  # bind() then checks buffer dtypes and sizes against it
        return program

    # --- timing ---

    def timer(self) -> Tuple[CudaEvent, CudaEvent]:
        """A (start, end) timing-event pair from the device's pool; give it back with :meth:`release_timer`."""
        with self._timers_lock:
            if self._timers:
                return self._timers.pop()
        return CudaEvent(self), CudaEvent(self)

    def release_timer(self, pair: Tuple[CudaEvent, CudaEvent]) -> None:
        with self._timers_lock:
            self._timers.append(pair)

    def close(self) -> None:
        """Release the stream and the primary context now; afterwards this device and everything made on it
        (buffers, programs, events, graphs) raise :class:`ReleasedError`, and ``driver.device(n)`` gives a new one.

        Objects still alive are not freed one by one: the context they lived in is released (a later
        primary context may reuse their handles, so their finalizers do nothing).
        """
        if self.closed:
            return
        if os.getpid() == self.driver.pid:  # let queued work finish before its stream goes
            self.lib.call_raw("cuCtxSetCurrent", self.context)
            self.lib.call_raw("cuStreamSynchronize", self.stream)
        self.staging.release()
        with self._timers_lock:
            self._timers = []  # their events are destroyed now, while the context lives
        with self._modules_lock:
            self._modules.clear()
        self.driver._forget(self)
        self.closed = True
        self._alive[0] = False
        _released_something()
        self._stream_finalizer()
        self._ctx_finalizer()
        if getattr(_tls, "device", None) is self:
            _tls.device = None


def find_cuda_sig(name: str, **params: Any) -> Any:
    """The :class:`CudaKernelSig` named ``name`` whose params match ``params`` (dtype defaults to float32)."""
    from ..kernels import cuda_kernels

    want = dict(params)
    if "dtype" in want:  # aliases as on the CPU ("f32", "half", ...)
        want["dtype"] = to_dtype(want["dtype"]).name
    sigs = cuda_kernels()
    candidates = [s for s in sigs if s.name == name]
    if not candidates:
        names = sorted({s.name for s in sigs})
        raise NotSupportedError("library kernel %r has no CUDA form (CUDA library kernels: %s)" % (name, ", ".join(names)))
    for sig in candidates:
        have = dict(sig.params)
        if all(have.get(k) == v for k, v in want.items()) and ("dtype" in want or have.get("dtype") == "float32"):
            return sig
    options = sorted(str(dict(s.params)) for s in candidates)
    raise NotSupportedError("no CUDA library kernel %s%s; available: %s" % (name, want, ", ".join(options)))


# --- modules and programs -------------------------------------------------------------------------

_LOG_BYTES = 16 << 10


class CudaModule:
    """A loaded ``CUmodule`` (PTX JIT-compiled by the driver, or a CUBIN)."""

    def __init__(self, device: CudaDevice, image: bytes, *, name: str = "module") -> None:
        self.device, self.name = device, name
        self.kind = "cubin" if image.startswith(b"\x7fELF") else "fatbin" if image.startswith(b"\x50\xed\x55\xba") else "ptx"
        self.info_log = ""
        self.text = image.decode("utf-8", "replace") if self.kind == "ptx" else ""
        self.handle = self._load(image + (b"\0" if self.kind == "ptx" else b""))
        self._functions: Dict[str, HANDLE] = {}
        self.unloaded = False
        self._cache_key: Optional[str] = None  # set by CudaDevice.module
        # Dynamic shared bytes each entry is opted in to: the attribute belongs to the CUfunction, which every
        # CudaProgram over this (cached) module shares, so it is tracked here and only ever raised.
        self._shared_optin: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._finalizer = _device_finalize(self, device, "cuModuleUnload", self.handle.value)

    def _load(self, image: bytes) -> HANDLE:
        errors, infos = ctypes.create_string_buffer(_LOG_BYTES), ctypes.create_string_buffer(_LOG_BYTES)
        options = (ctypes.c_int * 5)(
            api.CU_JIT_ERROR_LOG_BUFFER, api.CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            api.CU_JIT_INFO_LOG_BUFFER, api.CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, api.CU_JIT_LOG_VERBOSE,
        )  # fmt: skip
        values = (ctypes.c_void_p * 5)(ctypes.addressof(errors), _LOG_BYTES, ctypes.addressof(infos), _LOG_BYTES, 1)
        handle, data = HANDLE(), ctypes.create_string_buffer(image, len(image))
        self.device.activate()
        try:
            self.device.lib.call("cuModuleLoadDataEx", ctypes.byref(handle), data, 5, options, values)
        except CudaError as exc:
            log = "\n".join(t for t in (_log_text(errors), _log_text(infos)) if t)
            what = "loading %s module %r on %s (%s, driver %s)" % (
                self.kind.upper(), self.name, self.device.spec, self.device.arch, self.device.driver.version_string)
            raise exc.with_log(log, what) from None
        self.info_log = _log_text(infos)
        return handle

    def function(self, entry: str) -> HANDLE:
        """The ``CUfunction`` for ``entry`` (looked up once)."""
        self.check_loaded()
        fn = self._functions.get(entry)
        if fn is None:
            fn = HANDLE()
            self.device.activate()
            try:
                self.device.lib.call("cuModuleGetFunction", ctypes.byref(fn), self.handle, entry.encode())
            except CudaError as exc:
                entries = ", ".join(_ENTRY_RE.findall(_blank_comments(self.text))) or "?"
                raise exc.with_log("", "kernel %r not in module %r (entries: %s)" % (entry, self.name, entries)) from None
            self._functions[entry] = fn
        return fn

    def check_loaded(self) -> None:
        """Raise :class:`ReleasedError` after :meth:`unload` (or the device's close())."""
        if self.unloaded:
            raise ReleasedError("module %r on %s was unloaded (CudaModule.unload()); load it again"
                                % (self.name, self.device.spec))  # fmt: skip
        self.device.check_open()

    def allow_dynamic_shared(self, entry: str, function: HANDLE, number: int, default: int) -> None:
        """Opt ``entry`` in to ``number`` dynamic shared bytes unless it already allows that many (``default``
        without opting in); never lowers what another program over the same function opted in to."""
        with self._lock:
            if number <= self._shared_optin.get(entry, default):
                return
            self.device.activate()
            self.device.lib.call("cuFuncSetAttribute", function, api.FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, number)
            self._shared_optin[entry] = number

    def unload(self) -> None:
        """Unload now; its programs (and launches bound from them) raise :class:`ReleasedError` afterwards."""
        if self.unloaded:
            return
        self.unloaded = True
        _released_something()
        self.device._forget_module(self)
        self._finalizer()


def _log_text(buf: Any) -> str:
    return buf.value.decode("utf-8", "replace").strip()


def _check_aligned(kernel: str, which: Any, buf: "CudaBuffer", align: int) -> None:
    """Refuse a buffer whose start is not a multiple of its element size: a GPU load from it faults with
    CUDA_ERROR_MISALIGNED_ADDRESS, a sticky error that leaves the context unusable for the rest of the process."""
    if buf.address % align:
        raise ExecutionError(
            "%s: buffer %r starts %d bytes into its allocation, not a multiple of its %d-byte elements; "
            "a GPU would fault on it (misaligned address), so it is not launched" % (kernel, which, buf.offset, align)
        )


def _as_sequence(value: Any, what: str, owner: str) -> List[Any]:
    """``value`` (a list, tuple or other sized iterable, not a string) as a list; ExecutionError otherwise."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise ExecutionError("%s: %s must be a sequence, got %s %r" % (owner, what, type(value).__name__, value))
    try:
        return list(value)
    except TypeError:  # e.g. a 0-d numpy array
        raise ExecutionError("%s: %s must be a sequence, got %s %r" % (owner, what, type(value).__name__, value)) from None


_GRID_CALLS = {"ceildiv": (2, 2), "min": (2, None), "max": (2, None)}  # name -> (min, max) argument count


def _check_grid(grid: Any, var_names: Sequence[str], owner: str) -> Optional[Tuple[Any, ...]]:
    """A program's default grid, checked at load: 1 to 3 entries, each a positive int or a size expression
    over ``var_names`` (known variables and calls with the right arity, no division by a literal 0)."""
    if grid is None:
        return None
    items = api.dims_items(grid, "grid")
    if not 1 <= len(items) <= 3:
        raise LaunchConfigError("%s: grid must have 1 to 3 dimensions, got %r" % (owner, grid))
    out: List[Any] = []
    for axis, item in enumerate(items):
        if isinstance(item, str):
            _check_grid_expr(item, axis, var_names, owner)
            out.append(item)
            continue
        try:
            number = _as_int(item, "grid[%d]" % axis)
        except ArgumentRangeError as exc:
            raise LaunchConfigError("%s: %s (an int or a size expression)" % (owner, exc)) from None
        if number < 1:
            raise LaunchConfigError("%s: grid[%d]=%d: every launch dimension must be a positive integer" % (owner, axis, number))
        out.append(number)
    return tuple(out)


def _check_grid_expr(text: str, axis: int, var_names: Sequence[str], owner: str) -> None:
    import ast

    from ..error import SvodError
    from ..kernels.sig import compile_expr

    where = "%s: grid[%d]=%r" % (owner, axis, text)
    try:
        compile_expr(text)  # syntax and the allowed node types
    except SvodError as exc:
        raise LaunchConfigError("%s: %s" % (where, exc)) from None
    for node in ast.walk(ast.parse(text, mode="eval")):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            low, high = _GRID_CALLS[node.func.id]
            if len(node.args) < low or (high is not None and len(node.args) > high):
                raise LaunchConfigError("%s: %s() takes %s arguments, got %d"
                                        % (where, node.func.id, low if low == high else "%d or more" % low, len(node.args)))  # fmt: skip
        elif isinstance(node, ast.Name) and node.id not in _GRID_CALLS and node.id not in var_names:
            raise LaunchConfigError("%s: unknown variable %r (variables: %s)" % (where, node.id, list(var_names)))
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mod))
              and isinstance(node.right, ast.Constant) and node.right.value == 0):  # fmt: skip
            raise LaunchConfigError("%s: division by zero" % where)


def _check_block(local_size: Any, limits: LaunchLimits, owner: str) -> Optional[Dims3]:
    """A program's default block, checked at load against the kernel's limits."""
    if local_size is None:
        return None
    try:
        return launch_dims(1, local_size, limits)[1]
    except LaunchConfigError as exc:
        raise LaunchConfigError("%s: %s" % (owner, exc)) from None


class CudaProgram:
    """A kernel entry point with svod's calling convention on one GPU.

    No ``address`` attribute on purpose: ExecutionPlan's native (CPU) replay
    keys on it. ``core_id_index`` is accepted and ignored (CPU-only concept).
    """

    #: svod's GPU convention: a launch's global_size is the grid, counted in blocks (ExecutionPlan keys on it).
    grid_in_blocks = True
    native_address = None  # device interface slot: no C entry for the host's native runner
    closed = False  # device interface slot: each launch checks its module itself (check_live)
    #: A library kernel's CudaKernelSig: buffers are checked against it before any launch.
    signature: Any = None

    def __init__(
        self,
        module: CudaModule,
        entry_point: str,
        *,
        buf_count: int,
        var_names: Sequence[str] = (),
        local_size: Optional[Sequence[int]] = None,
        grid: Optional[Sequence[Any]] = None,
        shared_bytes: int = 0,
        name: Optional[str] = None,
    ) -> None:
        if not isinstance(buf_count, int) or buf_count < 0:
            raise ExecutionError("buf_count must be a non-negative int, got %r" % (buf_count,))
        self.module, self.device = module, module.device
        self.entry_point, self.name = entry_point, name or entry_point
        self.buf_count, self.var_names = buf_count, tuple(var_names)
        self.grid = _check_grid(grid, self.var_names, self.name)
        self.function = module.function(entry_point)
        self.max_threads = self._func_attribute(api.FUNC_ATTR_MAX_THREADS_PER_BLOCK)
        self.limits = self.device.limits.with_threads(self.max_threads)
        self.local_size = _check_block(local_size, self.limits, self.name)
        self.static_shared = self._func_attribute(api.FUNC_ATTR_SHARED_SIZE_BYTES)
        self._dynamic_shared_max = self.limits.max_shared_bytes - self.static_shared  # without opting in
        self.shared_bytes = self._shared(shared_bytes)

    def __repr__(self) -> str:
        return "<CudaProgram %s on %s bufs=%d vars=%s>" % (self.name, self.device.spec, self.buf_count, list(self.var_names))

    def _shared(self, shared_bytes: Any) -> int:
        """Validated dynamic shared bytes; above the default 48 KiB block the kernel's function opts in."""
        number = check_shared_bytes(shared_bytes, self.limits, self.static_shared)
        if number > self._dynamic_shared_max:
            self.module.allow_dynamic_shared(self.entry_point, self.function, number, self._dynamic_shared_max)
        return number

    def _func_attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        try:
            self.device.lib.call("cuFuncGetAttribute", ctypes.byref(value), attribute, self.function)
        except (CudaError, CudaSymbolError):
            return 0
        return value.value

    # --- argument preparation ---

    def _pointers(self, buffers: Sequence[Any]) -> List[int]:
        buffers = _as_sequence(buffers, "buffers", self.name)
        if len(buffers) != self.buf_count:
            raise ExecutionError("%s takes %d buffers, got %d" % (self.name, self.buf_count, len(buffers)))
        return [self._pointer(i, b) for i, b in enumerate(buffers)]

    def _pointer(self, index: int, buf: Any) -> int:
        if type(buf) is int:
            return buf
        if isinstance(buf, CudaBuffer):
            buf.storage.check_live("%s: buffer %d" % (self.name, index))
            if buf.device is not self.device:
                raise ExecutionError("%s: buffer %d lives on %s, the kernel on %s" % (self.name, index, buf.device.spec, self.device.spec))
            _check_aligned(self.name, index, buf, buf.dtype.itemsize)
            return buf.address
        where = getattr(getattr(buf, "device", None), "spec", None) or type(buf).__name__
        raise ExecutionError("%s: buffer %d is not a CUDA buffer (%s); copy it to %s first" % (self.name, index, where, self.device.spec))

    def _check_against_signature(self, buffers: Sequence[Any], vals: Sequence[Any]) -> None:
        """A library kernel never runs on a buffer of the wrong dtype or too few elements (raw pointers: unchecked)."""
        from ..kernels.sig import compile_expr

        sig = self.signature
        env = {name: _as_int(v, "variable") for name, v in zip(self.var_names, vals)}
        for var in sig.vars:
            if env[var.name] < var.min:
                raise KernelVariableError("%s: %s=%d is below its minimum %d" % (self.name, var.name, env[var.name], var.min))
        for arg, buf in zip(sig.buffers, buffers):
            if not isinstance(buf, CudaBuffer):
                continue
            if buf.dtype.name != arg.dtype and buf.dtype.name != "uint8":  # uint8: raw bytes, size checked below
                raise ExecutionError("%s: buffer %r is %s, the kernel takes %s" % (self.name, arg.name, buf.dtype.name, arg.dtype))
            if to_dtype(arg.dtype).itemsize > buf.dtype.itemsize:  # raw bytes: _pointer checked only 1-byte alignment
                _check_aligned(self.name, arg.name, buf, to_dtype(arg.dtype).itemsize)
            count = compile_expr(arg.count)(env) if arg.count is not None else 0
            need = count * to_dtype(arg.dtype).itemsize
            if buf.nbytes < need:
                raise BufferAllocationError("%s: buffer %r holds %d bytes, it needs %s = %d elements (%d bytes): refusing to launch"
                                            % (self.name, arg.name, buf.nbytes, arg.count, count, need))  # fmt: skip

    def _check_vals(self, vals: Sequence[Any]) -> List[Any]:
        vals = _as_sequence(vals, "vals (the variables %s)" % list(self.var_names), self.name)
        if len(vals) != len(self.var_names):
            raise ExecutionError(
                "%s takes %d variables %s, got %d values" % (self.name, len(self.var_names), list(self.var_names), len(vals))
            )
        return vals

    def _int_vals(self, vals: Sequence[Any]) -> List[int]:
        """``vals`` as int32 numbers (ArgumentRangeError names the variable), checked before the signature."""
        return [int32_arg(v, name) for name, v in zip(self.var_names, vals)]

    def check_usable(self) -> None:
        """Raise :class:`ReleasedError` once the module was unloaded or the device closed."""
        self.module.check_loaded()

    def default_grid(self, vals: Sequence[Any]) -> Dims3:
        """The grid from the program's grid expressions (or 1 block); a dimension <= 0 is a LaunchConfigError."""
        if self.grid is None:
            return (1, 1, 1)
        env = dict(zip(self.var_names, (_as_int(v, "variable") for v in vals)))
        return tuple(self._grid_dim(axis, d, env) for axis, d in enumerate(self.grid))  # type: ignore[return-value]

    def _grid_dim(self, axis: int, dim: Any, env: Dict[str, int]) -> int:
        from ..error import SvodError
        from ..kernels.sig import eval_dim

        try:
            value = eval_dim(dim, env)
        except (ArithmeticError, TypeError, ValueError, SvodError) as exc:
            raise LaunchConfigError("%s: grid[%d]=%r with %s: %s" % (self.name, axis, dim, env, exc)) from None
        if value <= 0:  # no library kernel does this at valid sizes (their grids say max(1, ...) themselves)
            raise LaunchConfigError("%s: grid[%d]=%r is %d blocks with %s; a launch needs at least 1"
                                    % (self.name, axis, dim, value, env))  # fmt: skip
        return value

    def dims(self, vals: Sequence[Any], global_size: Any = None, local_size: Any = None) -> Tuple[Dims3, Dims3]:
        """(grid, block) for a launch: explicit sizes win over the program's defaults."""
        gs = global_size if global_size is not None else self.default_grid(vals)
        ls = local_size if local_size is not None else self.local_size
        return launch_dims(gs, ls, self.limits)

    # --- dispatch ---

    def bind(
        self,
        buffers: Sequence[Any],
        vals: Sequence[Any] = (),
        *,
        global_size: Any = None,
        local_size: Any = None,
        shared_bytes: Optional[int] = None,
        core_id_index: Optional[int] = None,
    ) -> "BoundLaunch":
        """Validate and pack once; the returned callable launches (patch it for replay)."""
        self.check_usable()
        ints = self._int_vals(self._check_vals(vals))  # int32 first: 2**31 is an ArgumentRangeError, not a size problem
        pointers = self._pointers(buffers)
        buffers = list(buffers)
        if self.signature is not None:
            self._check_against_signature(buffers, ints)
        blob = ArgBlob(pointers, ints)
        grid, block = self.dims(ints, global_size, local_size)
        shared = self.shared_bytes if shared_bytes is None else self._shared(shared_bytes)
        return BoundLaunch(self, blob, grid, block, shared, buffers, auto_grid=global_size is None and self.grid is not None)

    def execute(self, buffers: Sequence[Any], vals: Sequence[Any] = (), **kwargs: Any) -> None:
        """Launch once on the device's stream (asynchronous: copyout / synchronize wait)."""
        self.bind(buffers, vals, **kwargs)()

    def execute_timed(self, buffers: Sequence[Any], vals: Sequence[Any] = (), **kwargs: Any) -> float:
        """Launch once; returns device seconds measured with reusable CUDA events."""
        return self.bind(buffers, vals, **kwargs).timed()


class BoundLaunch:
    """A packed launch: call it to launch; ``set_*`` patch the blob in place between calls.

    Every ``set_*`` runs the checks :meth:`CudaProgram.bind` runs (int32 range, the library kernel's
    signature, the buffer's device, alignment and liveness) before patching anything; a refused patch
    leaves the launch as it was. When the grid came from the program's own expressions (no explicit
    ``global_size`` at bind and no :meth:`set_dims` since), new variables recompute it.
    """

    graphable = True  # device interface slot: a node of CudaGraph

    def __init__(self, program: CudaProgram, blob: ArgBlob, grid: Dims3, block: Dims3, shared: int, keep: List[Any],
                 *, auto_grid: bool = False) -> None:  # fmt: skip
        self.program, self.blob, self.shared = program, blob, shared
        self.device = program.device
        self._keep = keep  # buffers stay alive while the launch may run
        self._auto_grid = auto_grid
        self._checked = _RELEASES[0]  # release epoch at the last liveness check
        self._dims_version = 0
        self._graphs: List[Any] = []  # weak references to the CudaGraphs holding this launch
        self.grid, self.block = grid, block  # validated by CudaProgram.bind
        self._pack_call()
        blob.on_change = _weak_touch(self)

    def _touch(self) -> None:
        """Tell the graphs holding this launch that it changed (they re-upload it on their next launch)."""
        alive = []
        for ref in self._graphs:
            graph = ref()
            if graph is not None:
                graph._dirty.add(self)
                alive.append(ref)
        self._graphs = alive

    def __repr__(self) -> str:
        return "<BoundLaunch %s grid=%s block=%s>" % (self.program.name, self.grid, self.block)

    @property
    def version(self) -> int:
        """Changes whenever arguments or dims are patched (graphs re-upload changed nodes only)."""
        return self.blob.version + self._dims_version

    def set_dims(self, grid: Any, block: Any = None) -> None:
        """New grid (and block), validated against the kernel's limits; the grid stays explicit from now on."""
        self.grid, self.block = launch_dims(grid, self.block if block is None else block, self.program.limits)
        self._auto_grid = False
        self._pack_call()

    def _pack_call(self) -> None:
        """The 11 cuLaunchKernel arguments as ctypes objects, so the untyped entry point can take them as is."""
        u = ctypes.c_uint
        self._launch = self.device.lib.untyped("cuLaunchKernel")
        self._cargs = (
            self.program.function, u(self.grid[0]), u(self.grid[1]), u(self.grid[2]),
            u(self.block[0]), u(self.block[1]), u(self.block[2]), u(self.shared),
            self.device.stream, None, self.blob.extra,
        )  # fmt: skip
        self._dims_version += 1
        self._touch()

    # --- patching ---

    def _check_patch(self, buffers: Sequence[Any], ints: List[int]) -> Optional[Dims3]:
        """bind()'s checks for the patched arguments; the recomputed grid when it follows the variables."""
        program = self.program
        program.check_usable()
        if program.signature is not None:
            program._check_against_signature(buffers, ints)
        if not self._auto_grid:
            return None
        return launch_dims(program.default_grid(ints), self.block, program.limits)[0]

    def _regrid(self, grid: Optional[Dims3]) -> None:
        if grid is not None and grid != self.grid:
            self.grid = grid
            self._pack_call()

    def _index(self, index: Any, count: int, what: str) -> int:
        number = _as_int(index, "%s index" % what) if type(index) is not int else index
        if not 0 <= number < count:
            raise ExecutionError("%s: %s index %d is out of range: the kernel takes %d %ss"
                                 % (self.program.name, what, number, count, what))  # fmt: skip
        return number

    def set_vals(self, vals: Sequence[Any]) -> None:
        """Patch every variable (checked like bind(), all or nothing)."""
        program = self.program
        ints = program._int_vals(program._check_vals(vals))
        grid = self._check_patch(self._keep, ints)
        for j, value in enumerate(ints):
            self.blob.set_int(j, value, program.var_names[j])
        self._regrid(grid)

    def set_val(self, index: int, value: Any) -> None:
        """Patch variable ``index`` (checked like bind())."""
        index = self._index(index, self.blob.nint, "variable")
        ints = self.blob.ints()
        ints[index] = int32_arg(value, self.program.var_names[index])
        grid = self._check_patch(self._keep, ints)
        self.blob.set_int(index, ints[index], self.program.var_names[index])
        self._regrid(grid)

    def set_buffer(self, index: int, buf: Any) -> None:
        """Point buffer ``index`` at ``buf`` (checked like bind())."""
        index = self._index(index, self.blob.nptr, "buffer")
        pointer = self.program._pointer(index, buf)
        buffers = list(self._keep)
        buffers[index] = buf
        self._check_patch(buffers, self.blob.ints())
        self.blob.set_ptr(index, pointer)
        self._keep[index] = buf

    # --- launching ---

    def check_live(self) -> None:
        """Refuse a launch whose module was unloaded, device closed or buffers freed since it was checked."""
        self.program.check_usable()
        for index, buf in enumerate(self._keep):
            if isinstance(buf, CudaBuffer):
                buf.storage.check_live("%s: buffer %d" % (self.program.name, index))
        self._checked = _RELEASES[0]

    def __call__(self) -> None:
        if self._checked != _RELEASES[0]:  # something was freed or closed since: one comparison otherwise
            self.check_live()
        self.device.activate()
        code = self._launch(*self._cargs)  # every argument is a ctypes object (see _pack_call)
        if code:
            raise self.device.lib.error("cuLaunchKernel", code)

    def timed(self) -> float:
        """Launch once between two reusable events; device seconds."""
        if self._checked != _RELEASES[0]:
            self.check_live()
        pair = self.device.timer()
        try:
            self.device.activate()
            pair[0].record()
            code = self._launch(*self._cargs)
            if code:
                raise self.device.lib.error("cuLaunchKernel", code)
            pair[1].record()
            pair[1].synchronize()
            return pair[1].elapsed_since(pair[0])
        finally:
            self.device.release_timer(pair)

    def node_params(self) -> api.CUDA_KERNEL_NODE_PARAMS:
        """This launch as a graph kernel node (``kernelParams`` pointing into the blob)."""
        p = api.CUDA_KERNEL_NODE_PARAMS()
        p.func = self.program.function.value
        p.gridDimX, p.gridDimY, p.gridDimZ = self.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = self.block
        p.sharedMemBytes = self.shared
        p.kernelParams = ctypes.cast(self.blob.kernel_params, ctypes.POINTER(ctypes.c_void_p))
        return p


# --- graphs ---------------------------------------------------------------------------------------


def _weak_touch(bound: BoundLaunch) -> Callable[[], None]:
    """``bound._touch`` without a strong reference: the blob must not keep its launch (and buffers) alive."""
    ref = weakref.ref(bound)

    def touch() -> None:
        target = ref()
        if target is not None:
            target._touch()

    return touch


class GraphCopy:
    """A device-to-device copy as a CUDA graph node (``cuGraphAddMemcpyNode``); never patched."""

    def __init__(self, device: "CudaDevice", dst: CudaBuffer, src: CudaBuffer) -> None:
        _check_same_size(src.nbytes, dst.nbytes, "copy")
        self.device, self.dst, self.src = device, dst, src  # the buffers stay alive with the graph

    def __repr__(self) -> str:
        return "<GraphCopy %d B on %s>" % (self.src.nbytes, self.device.spec)

    def memcpy_params(self) -> api.CUDA_MEMCPY3D:
        return api.memcpy_1d(self.dst.address, self.src.address, self.src.nbytes)


class CudaGraph:
    """Kernel launches (and device copies) as one CUDA graph: built once, replayed with one ``cuGraphLaunch``.

    Nodes run in list order (a chain) unless ``dependencies[i]`` lists the
    earlier node indices node ``i`` waits for. A node is a :class:`BoundLaunch`
    or a :class:`GraphCopy`. On :meth:`launch`, only nodes whose
    :class:`BoundLaunch` was patched since the last launch are re-uploaded
    (``cuGraphExecKernelNodeSetParams``): a patch puts its launch in the
    graph's dirty set, so an unpatched replay costs no per-node Python work.
    """

    def __init__(self, launches: Sequence[BoundLaunch], dependencies: Optional[Sequence[Sequence[int]]] = None) -> None:
        launches = _as_sequence(launches, "launches", "CudaGraph")
        if not launches:
            raise ExecutionError("a CUDA graph needs at least one launch")
        for i, member in enumerate(launches):
            if not isinstance(member, (BoundLaunch, GraphCopy)):
                raise ExecutionError("graph node %d is %s, not a BoundLaunch or GraphCopy" % (i, type(member).__name__))
        self.device = launches[0].device
        if any(b.device is not self.device for b in launches):
            raise ExecutionError("every launch of a CUDA graph must be on the same device")
        deps = _graph_dependencies(dependencies, len(launches))
        self.launches = launches
        self.closed = False
        self._checked = -1  # release epoch at the last liveness check of the members (-1: never)
        self._check_members()
        lib, dev = self.device.lib, self.device
        self._add = lib.first_exported("cuGraphAddKernelNode_v2", "cuGraphAddKernelNode")
        self._set = lib.first_exported("cuGraphExecKernelNodeSetParams_v2", "cuGraphExecKernelNodeSetParams")
        dev.activate()
        graph = HANDLE()
        lib.call("cuGraphCreate", ctypes.byref(graph), 0)
        self.graph = graph
        self._graph_fin = _device_finalize(self, dev, "cuGraphDestroy", graph.value)
        self.nodes = self._add_nodes(deps)
        exe = HANDLE()
        lib.call("cuGraphInstantiateWithFlags", ctypes.byref(exe), graph, 0)
        self.exec = exe
        self._exec_fin = _device_finalize(self, dev, "cuGraphExecDestroy", exe.value)
        self._dirty: set = set()  # launches patched since the last launch (filled by BoundLaunch._touch)
        self._where: Dict[int, List[int]] = {}  # id(launch) -> its node indices
        for i, member in enumerate(self.launches):
            if isinstance(member, BoundLaunch):
                if id(member) not in self._where:
                    member._graphs.append(weakref.ref(self))
                self._where.setdefault(id(member), []).append(i)
        self._graph_launch = lib.untyped("cuGraphLaunch")
        self.patched = 0  # nodes re-uploaded so far (for tests and benchmarks)

    def _add_nodes(self, dependencies: List[List[int]]) -> List[HANDLE]:
        nodes: List[HANDLE] = []
        for i, bound in enumerate(self.launches):
            deps = dependencies[i]
            node, dep_array = HANDLE(), api.handle_array([nodes[d] for d in deps])
            if isinstance(bound, GraphCopy):
                params = bound.memcpy_params()
                self.device.lib.call("cuGraphAddMemcpyNode", ctypes.byref(node), self.graph, dep_array, len(deps),
                                     ctypes.byref(params), self.device.context)  # fmt: skip
            else:
                params = bound.node_params()
                self.device.lib.call(self._add, ctypes.byref(node), self.graph, dep_array, len(deps), ctypes.byref(params))
            nodes.append(node)
        return nodes

    def _check_members(self) -> None:
        """Refuse members whose module was unloaded, device closed or buffers freed (checked again after any release)."""
        if self.closed:
            raise ReleasedError("this CUDA graph was closed (CudaGraph.close()); build a new one")
        for member in self.launches:
            if isinstance(member, BoundLaunch):
                member.check_live()
            else:
                member.dst.storage.check_live("graph copy destination")
                member.src.storage.check_live("graph copy source")
        self._checked = _RELEASES[0]

    def launch(self) -> None:
        """Re-upload patched nodes, then replay the whole graph on the device's stream."""
        if self._checked != _RELEASES[0]:  # something was freed or closed since the last check
            self._check_members()
        self.device.activate()
        while self._dirty:
            bound = self._dirty.pop()
            params = bound.node_params()
            try:
                for i in self._where[id(bound)]:
                    self.device.lib.call(self._set, self.exec, self.nodes[i], ctypes.byref(params))
                    self.patched += 1
            except BaseException:
                self._dirty.add(bound)  # still stale: the next launch tries again
                raise
        code = self._graph_launch(self.exec, self.device.stream)  # both prebuilt ctypes handles
        if code:
            raise self.device.lib.error("cuGraphLaunch", code)

    __call__ = launch

    def close(self) -> None:
        """Destroy the graph now; a later :meth:`launch` raises :class:`ReleasedError`."""
        if self.closed:
            return
        self.closed = True
        _released_something()
        self._exec_fin()
        self._graph_fin()


class CudaGraphSlot:
    """CudaDevice's graph slot (devices.base.GraphRuntime): memcpy nodes, and runs packed into CudaGraphs."""

    def __init__(self, device: CudaDevice) -> None:
        self.device = device

    def copy_node(self, dst: Any, src: Any) -> Optional[GraphCopy]:
        return self.device.graph_copy(dst, src)

    def build(self, groups: Sequence[Sequence[int]], nodes: Mapping[int, Any]) -> List[Any]:
        return graph_segments(groups, nodes, CudaGraph)


def _graph_dependencies(dependencies: Any, count: int) -> List[List[int]]:
    """Each node's earlier nodes it waits for: a chain by default; otherwise one list of indices per node."""
    if dependencies is None:
        return [[i - 1] if i else [] for i in range(count)]
    lists = _as_sequence(dependencies, "dependencies", "CudaGraph")
    if len(lists) != count:
        raise ExecutionError("CudaGraph: dependencies has %d entries for %d nodes (one list per node)" % (len(lists), count))
    out = []
    for i, deps in enumerate(lists):
        deps = _as_sequence(deps, "dependencies[%d]" % i, "CudaGraph")
        if any(type(d) is not int or not 0 <= d < i for d in deps):
            raise ExecutionError("graph node %d may only depend on earlier nodes, got %s" % (i, deps))
        out.append(deps)
    return out


# --- registry and CLI -----------------------------------------------------------------------------


def _cuda_factory(driver: CudaDriver, spec: DeviceSpec) -> CudaDevice:
    if spec.index >= driver.device_count:
        raise UnsupportedDeviceError(
            "device %s does not exist: the NVIDIA driver reports %d GPU(s) (CUDA:0 .. CUDA:%d)"
            % (spec, driver.device_count, driver.device_count - 1)
        )
    return driver.device(spec.index)


def register_cuda(registry: Any, path: Optional[str] = None) -> bool:
    """Register the CUDA factory (``CUDA``, ``CUDA:N``, ``GPU:N``) when the driver loads with >= 1 GPU.

    Never raises (it runs at import time); returns whether it registered.
    """
    try:
        driver = load_driver(path)
        if driver is None:
            return False
        if driver.device_count < 1:
            with _drivers_lock:
                _reasons[_library_path(path)] = "%s loaded (driver %s) but reports no CUDA device" % (driver.path, driver.version_string)
            return False
        registry.register_factory("CUDA", partial(_cuda_factory, driver))
        return True
    except Exception as exc:  # noqa: B902 - import-time hook
        with _drivers_lock:
            _reasons[_library_path(path)] = "CUDA registration failed: %s: %s" % (type(exc).__name__, exc)
        return False


def info_lines(path: Optional[str] = None) -> List[str]:
    """Lines for ``python -m svod_min info``: GPUs, driver version, NVRTC. Never raises."""
    try:
        lines = _driver_lines(path)
    except Exception as exc:  # noqa: B902
        lines = ["cuda: error while probing: %s: %s" % (type(exc).__name__, exc)]
    try:
        lines.append(_nvrtc_line(path))
    except Exception as exc:  # noqa: B902
        lines.append("nvrtc: error while probing: %s: %s" % (type(exc).__name__, exc))
    return lines


def _nvrtc_line(driver_path: Optional[str]) -> str:
    """Where NVRTC is, its CUDA version, and whether its PTX must be lowered for this driver."""
    path = find_nvrtc()
    if not path:
        return "nvrtc: not found (optional: the kernel library ships PTX)"
    try:
        version = api.load_nvrtc().version
    except NotSupportedError as exc:
        return "nvrtc: %s cannot be used: %s" % (path, exc)
    line = "nvrtc: %s, CUDA %s" % (path, format_version(version))
    driver = load_driver(driver_path)
    if driver is not None and version > driver_version_tuple(driver.version):
        line += " (newer than the driver, CUDA %s: its PTX is lowered to ISA %s on load)" % (
            driver.version_string, driver.max_ptx_version)
    return line


def _driver_lines(path: Optional[str]) -> List[str]:
    driver = load_driver(path)
    if driver is None:
        return ["cuda: not available (%s)" % (driver_unavailable_reason(path) or NO_DRIVER_REASON)]
    lines = ["cuda: driver %s via %s, PTX ISA up to %s, %d device(s)" % (
        driver.version_string, driver.path, driver.max_ptx_version, driver.device_count)]
    for ordinal in range(driver.device_count):
        info = driver.device_info(ordinal)
        lines.append("cuda: CUDA:%d %s, %s, %.1f GiB, %d SMs" % (
            ordinal, info.name, info.arch, info.total_memory / 2**30, info.multiprocessors))
    return lines


__all__ = [
    "ArgBlob",
    "ArgSlot",
    "ArgumentRangeError",
    "BoundLaunch",
    "CudaBuffer",
    "CudaDevice",
    "CudaDeviceInfo",
    "CudaDriver",
    "CudaError",
    "CudaEvent",
    "CudaGraph",
    "CudaLibrary",
    "CudaModule",
    "CudaProgram",
    "GraphCopy",
    "CudaStorage",
    "CudaSymbolError",
    "DEFAULT_LIMITS",
    "ForkedChildError",
    "FreedBufferError",
    "KernelVariableError",
    "LaunchConfigError",
    "LaunchLimits",
    "NO_DRIVER_REASON",
    "NVRTC_MISSING",
    "Nvrtc",
    "PTX_FOR_CUDA",
    "PTX_MIN_FOR_TARGET",
    "PtxError",
    "PtxInfo",
    "ReleasedError",
    "StagingPool",
    "arch_name",
    "check_entry_params",
    "check_ptx_version",
    "check_shared_bytes",
    "compile_cuda",
    "driver_unavailable_reason",
    "driver_version_tuple",
    "find_cuda_sig",
    "find_nvrtc",
    "find_ptxas",
    "format_version",
    "info_lines",
    "launch_dims",
    "load_driver",
    "load_nvrtc",
    "pack_kernel_args",
    "parse_arch",
    "plan_dims",
    "ptx_entry_params",
    "ptx_version_of",
    "ptxas_check",
    "register_cuda",
    "reset_driver_cache",
    "rewrite_ptx_version",
    "select_ptx_version",
    "validate_ptx",
]
