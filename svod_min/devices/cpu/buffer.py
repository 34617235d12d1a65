"""Host memory for the CPU device: page-aligned anonymous mappings and typed windows of them.

A :class:`CpuBuffer` is the device interface's ``Buffer`` with ``on_host`` True: its ``address`` is a
host pointer, so copies between two of them are one memmove.
"""

from __future__ import annotations

import ctypes
import mmap
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Sequence, Tuple

from ...dtypes import DType, DTypeLike, pack_values, unpack_values
from ...dtypes import dtype as to_dtype
from ...error import BufferAllocationError, NotSupportedError
from ..common import (
    check_index,
    dims_of,
    format_fits,
    loaded_numpy,
    nest,
    numpy_bytes,
    numpy_module,
    product,
    shape_for,
)

Shape = Tuple[int, ...]

# --- buffers ---------------------------------------------------------------


#: Mappings from this size up ask for transparent huge pages: a convolution gathers from hundreds of input rows
#: and streams megabytes of weights, and with 4 KiB pages the TLB misses cost more than the arithmetic.
HUGE_PAGE_MIN = 4 << 20


def ask_for_huge_pages(mm: mmap.mmap) -> None:
    """MADV_HUGEPAGE where the platform has it (Linux with THP in "madvise" mode); elsewhere nothing."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None:
        return
    try:
        mm.madvise(advice)
    except OSError:  # THP compiled out, or a kernel that refuses the advice: 4 KiB pages still work
        pass


class CpuStorage:
    """One anonymous private mapping; every view of it shares this object.

    ``address`` comes from a ``c_char`` exported from the mmap. That export
    pins the mapping (``mmap.close()`` would raise while it exists), which is
    what we want: the pages stay valid for as long as any buffer, view or
    numpy array refers to them, and are unmapped by the GC afterwards.
    """

    def __init__(self, nbytes: int) -> None:
        # mmap refuses length 0; a 0-byte buffer still gets a (1-page) mapping.
        self.capacity = max(check_index(nbytes, "storage size"), 1)
        self.mm = mmap.mmap(-1, self.capacity, flags=mmap.MAP_PRIVATE)
        if self.capacity >= HUGE_PAGE_MIN:
            ask_for_huge_pages(self.mm)
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.address: int = ctypes.addressof(self._anchor)

    def __repr__(self) -> str:
        return "<CpuStorage 0x%x+%d>" % (self.address, self.capacity)


@dataclass(eq=False)
class CpuBuffer:
    """A typed window ``[offset, offset + nbytes)`` of a :class:`CpuStorage`."""

    storage: CpuStorage
    offset: int
    nbytes: int
    dtype: DType
    shape: Shape
    device: Optional[Any] = None  # the CpuDevice that allocated it
    address: int = field(init=False)
    #: ``address`` is a host pointer: a plain memmove may read or write it.
    on_host: ClassVar[bool] = True

    def __post_init__(self) -> None:
        # Every buffer, views and hand-built ones alike, is a window its storage really has:
        # extents checks and kernels trust nbytes.
        if not isinstance(self.storage, CpuStorage) or not isinstance(self.dtype, DType):
            raise BufferAllocationError(
                "CpuBuffer takes a CpuStorage and a DType, got %s and %s"
                % (type(self.storage).__name__, type(self.dtype).__name__)
            )
        offset, nbytes = check_index(self.offset, "buffer offset"), check_index(self.nbytes, "buffer size")
        self.shape = dims_of(self.shape)
        if offset + nbytes > self.storage.capacity:
            raise BufferAllocationError(
                "buffer [%d, +%d) is outside its storage (%d bytes)" % (offset, nbytes, self.storage.capacity)
            )
        if product(self.shape) * self.dtype.itemsize != nbytes:
            raise BufferAllocationError(
                "shape %s of %s does not span %d bytes" % (list(self.shape), self.dtype.name, nbytes)
            )
        self.address = self.storage.address + self.offset

    def __len__(self) -> int:
        return self.nbytes // self.dtype.itemsize

    def __repr__(self) -> str:
        return "<CpuBuffer %s%s %d B @0x%x>" % (self.dtype.name, list(self.shape), self.nbytes, self.address)

    @property
    def size(self) -> int:
        """Element count (same as ``len``)."""
        return len(self)

    def byte_range(self) -> Tuple[int, int]:
        """``(start, end)`` byte offsets inside :attr:`storage`, for hazard checks."""
        return self.offset, self.offset + self.nbytes

    def view(
        self,
        byte_offset: int,
        nbytes: int,
        dtype: Optional[DTypeLike] = None,
        shape: Optional[Sequence[int]] = None,
    ) -> "CpuBuffer":
        """A buffer sharing this storage, ``nbytes`` long at ``byte_offset`` into this one."""
        dt = self.dtype if dtype is None else to_dtype(dtype)
        byte_offset, nbytes = check_index(byte_offset, "view offset"), check_index(nbytes, "view size")
        if byte_offset + nbytes > self.nbytes:
            raise BufferAllocationError(
                "view [%d, %d) is out of range for a %d-byte buffer" % (byte_offset, byte_offset + nbytes, self.nbytes)
            )
        return CpuBuffer(self.storage, self.offset + byte_offset, nbytes, dt, shape_for(nbytes, dt, shape), self.device)

    # --- data movement ---

    def copyin(self, data: Any) -> "CpuBuffer":
        """Overwrite the whole buffer from bytes-like data, a numpy array, or a list of numbers."""
        src = self._source_bytes(data)
        if len(src) != self.nbytes:
            raise BufferAllocationError(
                "copyin size mismatch: got %d bytes, buffer holds %d bytes" % (len(src), self.nbytes)
            )
        if self.nbytes:
            self.storage.mm[self.offset : self.offset + self.nbytes] = src
        return self

    def copyout(self) -> bytes:
        """The buffer's bytes (a copy)."""
        return self.storage.mm[self.offset : self.offset + self.nbytes]

    def copyout_into(self, dst: Any) -> Any:
        """Copy the buffer's bytes into ``dst`` (writable, C-contiguous, the same number of bytes); returns it."""
        try:
            view = memoryview(dst)
        except TypeError as exc:
            raise BufferAllocationError(
                "copyout_into needs writable memory, got %s: %s" % (type(dst).__name__, exc)
            ) from None
        if view.readonly or not view.c_contiguous or view.nbytes != self.nbytes:
            raise BufferAllocationError(
                "copyout_into: destination must be writable, C-contiguous and %d bytes; got %s%s, "
                "%d bytes"
                % (
                    self.nbytes,
                    "read-only " if view.readonly else "",
                    "contiguous" if view.c_contiguous else "strided",
                    view.nbytes,
                )
            )
        if self.nbytes:  # through views of the mapping: a slice of the mmap itself would be one more full copy
            with memoryview(self.storage.mm) as whole, whole[self.offset : self.offset + self.nbytes] as part:
                view.cast("B")[:] = part
        return dst

    def numpy(self) -> Any:
        """A zero-copy numpy array over the buffer (writes go straight to the buffer)."""
        np = numpy_module()
        if np is None:
            raise NotSupportedError("numpy is not installed; use copyout() or tolist()")
        if self.dtype.numpy_name is None:
            raise NotSupportedError(
                "%s has no numpy dtype; use view(..., dtype='uint16') for its raw bits" % self.dtype.name
            )
        count = len(self)
        if count == 0:  # frombuffer cannot view zero bytes of a mapping
            return np.zeros(self.shape, dtype=self.dtype.numpy_name)
        flat = np.frombuffer(self.storage.mm, dtype=self.dtype.numpy_name, count=count, offset=self.offset)
        return flat.reshape(self.shape)

    def tolist(self) -> Any:
        """Nested Python lists (or a scalar for shape ``()``); needs no numpy."""
        raw = memoryview(self.storage.mm)[self.offset : self.offset + self.nbytes]
        try:
            flat = unpack_values(self.dtype, raw)
        finally:
            raw.release()  # a live memoryview export would pin the mapping
        return nest(flat, self.shape)

    def _source_bytes(self, data: Any) -> Any:
        np = loaded_numpy()
        if np is not None and isinstance(data, np.ndarray):
            return numpy_bytes(np, data, self.dtype)
        if isinstance(data, (list, tuple)):
            return pack_values(self.dtype, data)
        try:
            view = memoryview(data)
        except TypeError as exc:  # not a buffer
            raise BufferAllocationError("cannot copy %s into a buffer: %s" % (type(data).__name__, exc)) from None
        if not format_fits(view.format, self.dtype):  # typed memory (array.array, numpy): same rule as arrays
            raise BufferAllocationError(
                "memory of format %r does not hold %s elements (pass bytes, or convert first)"
                % (view.format, self.dtype.name)
            )
        if view.nbytes == 0:
            return b""
        try:
            return view.cast("B") if view.c_contiguous else view.tobytes()
        except (TypeError, ValueError) as exc:  # a layout cast() cannot flatten
            raise BufferAllocationError("cannot copy %s into a buffer: %s" % (type(data).__name__, exc)) from None


__all__ = ["CpuBuffer", "CpuStorage", "Shape"]
