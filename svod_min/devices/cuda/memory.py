"""Device memory: allocations, typed buffer views, host copies, events and the pinned staging pool.

A :class:`CudaStorage` is one ``cuMemAlloc``; a :class:`CudaBuffer` is a typed
window of one, with ``copyin``/``copyout`` from and to host data (bytes-like,
numpy, lists, CPU buffers). The owning device is a ``device.CudaDevice``, typed
``Any`` here because that module imports this one. Host copies go through a :class:`StagingPool` of
two page-locked blocks used in turn, so host memcpy and DMA overlap.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, List, Optional, Sequence, Tuple

from ...dtypes import DType, DTypeLike, pack_values, unpack_values
from ...dtypes import dtype as to_dtype
from ...error import BufferAllocationError, CudaError, FreedBufferError, InvalidDeviceError, NotSupportedError
from .. import common
from ..base import RELEASE_EPOCH
from .driver import HANDLE, CUdeviceptr, device_finalize
from .enums import CU_EVENT_DEFAULT, CU_EVENT_DISABLE_TIMING, CU_MEMHOSTALLOC_PORTABLE, CUDA_ERROR_NOT_READY


class CudaStorage:
    """One ``cuMemAlloc`` allocation; every view shares it; freed when the last reference goes."""

    def __init__(self, device: Any, nbytes: int) -> None:
        self.device = device
        self.capacity = max(nbytes, 1)
        ptr = CUdeviceptr()
        device.activate()
        try:
            device.lib.call("cuMemAlloc", ctypes.byref(ptr), self.capacity)
        except CudaError as exc:
            raise BufferAllocationError("cannot allocate %d bytes on %s: %s" % (nbytes, device.spec, exc)) from exc
        self.address: int = ptr.value
        self.freed = False
        self._finalizer = device_finalize(self, device, "cuMemFree", self.address)

    def __repr__(self) -> str:
        return "<CudaStorage %s 0x%x+%d%s>" % (
            self.device.spec,
            self.address,
            self.capacity,
            " freed" if self.freed else "",
        )

    def free(self) -> None:
        """Free now; buffers over this storage are refused afterwards (:class:`FreedBufferError`)."""
        self.freed = True
        RELEASE_EPOCH.bump()
        self._finalizer()

    def drop(self) -> None:
        """Free now without bumping the release epoch: for a temporary nothing else can hold."""
        self._finalizer()

    def check_live(self, what: str = "buffer") -> None:
        """Raise :class:`FreedBufferError` (or :class:`ReleasedError` for a closed device)
        instead of using freed memory."""
        if self.freed:
            raise FreedBufferError(
                "%s at 0x%x on %s was freed (CudaStorage.free()); it cannot be used any more"
                % (what, self.address, self.device.spec)
            )
        self.device.check_open()


class CudaBuffer:
    """A typed window ``[offset, offset + nbytes)`` of a :class:`CudaStorage`; ``address`` is a device pointer."""

    __slots__ = ("storage", "offset", "nbytes", "dtype", "shape", "device", "address", "__weakref__")
    #: Device memory: ``address`` is a device pointer the host cannot read or write.
    on_host = False

    def __init__(self, storage: CudaStorage, offset: int, nbytes: int, dt: DType, shape: Tuple[int, ...]) -> None:
        self.storage, self.offset, self.nbytes, self.dtype, self.shape = storage, offset, nbytes, dt, shape
        self.device: Any = storage.device
        self.address: int = storage.address + offset

    def __len__(self) -> int:
        return self.nbytes // self.dtype.itemsize

    def __repr__(self) -> str:
        return "<CudaBuffer %s %s%s %d B @0x%x>" % (
            self.device.spec,
            self.dtype.name,
            list(self.shape),
            self.nbytes,
            self.address,
        )

    @property
    def size(self) -> int:
        return len(self)

    def byte_range(self) -> Tuple[int, int]:
        """``(start, end)`` byte offsets inside :attr:`storage`, for hazard checks."""
        return self.offset, self.offset + self.nbytes

    def view(
        self, byte_offset: int, nbytes: int, dtype: Optional[DTypeLike] = None, shape: Optional[Sequence[int]] = None
    ) -> "CudaBuffer":
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
            check_same_size(data.nbytes, self.nbytes, "copyin")
            self.device.copy_from_peer(self, data)  # the one device-to-device dispatch (same GPU: device.copy)
            return self
        address, nbytes, keep = _host_source(data, self.dtype)
        check_same_size(nbytes, self.nbytes, "copyin")
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
        check_same_size(nbytes, self.nbytes, "copyout")
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
            raise NotSupportedError(
                "%s has no numpy dtype; use view(..., dtype='uint16') for its raw bits" % self.dtype.name
            )
        out = np.empty(self.shape, dtype=self.dtype.numpy_name)
        return self.copyout_into(out)

    def tolist(self) -> Any:
        """Nested Python lists (or a scalar for shape ``()``); needs no numpy."""
        return common.nest(unpack_values(self.dtype, self.copyout()), self.shape)


def check_same_size(got: int, want: int, what: str) -> None:
    if got != want:
        raise BufferAllocationError("%s size mismatch: got %d bytes, buffer holds %d bytes" % (what, got, want))


def _bytes_address(raw: bytes) -> int:
    return ctypes.cast(ctypes.c_char_p(raw), ctypes.c_void_p).value or 0


def _is_host_buffer(obj: Any) -> bool:
    """A buffer of host memory (a CPU buffer): devices/base.py's ``on_host`` slot says ``address`` is a host pointer."""
    return getattr(obj, "on_host", False) is True


def _view_address(view: memoryview) -> Tuple[int, int, Any]:
    """(address, nbytes, keep-alive) of a writable, C-contiguous memoryview."""
    flat = view.cast("B")
    if not flat.nbytes:
        return 0, 0, None
    anchor = (ctypes.c_char * flat.nbytes).from_buffer(flat)
    return ctypes.addressof(anchor), flat.nbytes, (anchor, flat)


def _host_source(data: Any, dt: DType) -> Tuple[int, int, Any]:
    """(host address, nbytes, object to keep alive) for copyin's source."""
    if _is_host_buffer(data):
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
    return _view_address(view)


def _host_destination(dst: Any) -> Tuple[int, int, Any]:
    """(host address, nbytes, object to keep alive) for copyout's destination."""
    if _is_host_buffer(dst):
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
    return _view_address(view)


# --- events and pinned staging --------------------------------------------------------------------


class CudaEvent:
    """A reusable ``CUevent`` (``timing=False`` gives a cheaper sync-only event)."""

    def __init__(self, device: Any, timing: bool = True) -> None:
        self.device = device
        handle = HANDLE()
        device.activate()
        device.lib.call("cuEventCreate", ctypes.byref(handle), CU_EVENT_DEFAULT if timing else CU_EVENT_DISABLE_TIMING)
        self.handle = handle
        self.recorded = False
        self._finalizer = device_finalize(self, device, "cuEventDestroy", handle.value)

    # record/synchronize/query make the device current first: waiters and pollers (the executor's
    # timelines) run on threads that never launched on it. A forked child or a closed device gets
    # a clear error there, not a stale handle.

    def record(self, stream: Optional[HANDLE] = None) -> None:
        self.device.activate()
        self.device.lib.call("cuEventRecord", self.handle, self.device.stream if stream is None else stream)
        self.recorded = True

    def synchronize(self) -> None:
        self.device.activate()
        if self.recorded:
            self.device.lib.call("cuEventSynchronize", self.handle)

    def query(self) -> bool:
        """Whether the work captured by the last :meth:`record` finished; never blocks (True if never recorded).

        ``CUDA_ERROR_NOT_READY`` is the driver's "not yet", not an error;
        any other non-zero result raises :class:`CudaError`.
        """
        self.device.activate()
        if not self.recorded:
            return True
        code = self.device.lib.call_raw("cuEventQuery", self.handle)
        if code == CUDA_ERROR_NOT_READY:
            return False
        if code:
            raise self.device.lib.error("cuEventQuery", code)
        return True

    def elapsed_since(self, start: "CudaEvent") -> float:
        """Seconds of device time between ``start`` and this event (both recorded, this one completed)."""
        self.device.activate()  # the driver wants the events' context current, like record and query
        ms = ctypes.c_float()
        lib = self.device.lib
        lib.call("cuEventElapsedTime", ctypes.byref(ms), start.handle, self.handle)
        return ms.value / 1e3


class PinnedBlock:
    """One page-locked host block with a sync-only event marking its last DMA."""

    def __init__(self, device: Any, nbytes: int) -> None:
        ptr = ctypes.c_void_p()
        device.activate()
        device.lib.call("cuMemHostAlloc", ctypes.byref(ptr), nbytes, CU_MEMHOSTALLOC_PORTABLE)
        self.address: int = ptr.value or 0
        self.nbytes = nbytes
        self.event = CudaEvent(device, timing=False)
        self._finalizer = device_finalize(self, device, "cuMemFreeHost", self.address)

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

    def __init__(
        self, device: Any, chunk: int = 8 << 20, direct_max: int = 256 << 10, threads: Optional[int] = None
    ) -> None:
        self.device, self.chunk, self.direct_max = device, chunk, direct_max
        self.threads = _copy_threads() if threads is None else max(1, int(threads))
        self._blocks: List[PinnedBlock] = []
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

    def blocks(self) -> List[PinnedBlock]:
        """The two pinned blocks, each at least :attr:`chunk` bytes (made again, after their last DMA, when
        ``chunk`` grew since: a copy moves whole chunks through them)."""
        if self._blocks and self._blocks[0].nbytes < self.chunk:
            for block in self._blocks:
                block.wait()
            self._blocks = []  # their finalizers free them
        if not self._blocks:
            self._blocks = [PinnedBlock(self.device, self.chunk) for _ in range(2)]
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


def chunks(nbytes: int, chunk: int) -> List[Tuple[int, int]]:
    return [(off, min(chunk, nbytes - off)) for off in range(0, nbytes, chunk)]


# --- the device -----------------------------------------------------------------------------------
