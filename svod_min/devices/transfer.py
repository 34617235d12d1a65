"""Copies between buffers of any devices, decided by the device interface's ``on_host`` slot.

Host buffers copy with one memmove; a device buffer on either side goes through its device's
copy path (device pointers must never reach a host memmove).
"""

from __future__ import annotations

import ctypes
from typing import Any, List, Optional, Sequence

from ..error import SvodError


def memmove(dst: int, src: int, nbytes: int) -> None:
    """A host memmove between two addresses (one place, so tests can count host copies)."""
    ctypes.memmove(dst, src, nbytes)


def copy_buffer(dst: Any, src: Any) -> None:
    """Copy all of ``src`` into ``dst`` (same size) on whichever devices they live."""
    if dst.on_host and src.on_host:
        memmove(dst.address, src.address, src.nbytes)
    elif dst.on_host:
        src.copyout_into(dst)
    else:
        dst.copyin(src)


def storage_size(buffers: Sequence[Optional[Any]], storage: Any) -> int:
    """Bytes of ``storage`` that ``buffers`` (None entries skipped) reach into."""
    return max(b.offset + b.nbytes for b in buffers if b is not None and b.storage is storage)


def copy_storage(base: Any, buffers: Sequence[Optional[Any]], buf: Any, total: int) -> None:
    """Snapshot ``buf``'s storage (its first ``total`` bytes) into the fresh buffer ``base``."""
    if buf.on_host:
        memmove(base.address, buf.address - buf.offset, total)
        return
    # Device memory has no host address: copy every listed buffer's bytes of that storage.
    for b in buffers:
        if b is not None and b.storage is buf.storage and b.nbytes:
            copy_buffer(base.view(b.offset, b.nbytes, "uint8"), b.view(0, b.nbytes, "uint8"))


def host_view(buf: Any) -> Any:
    """What host code gets for a host buffer: a numpy view when numpy is there, else the buffer."""
    try:
        return buf.numpy()
    except SvodError:
        return buf


def host_stage(buf: Any) -> Any:
    """A host copy of a device buffer: a numpy array, or (no numpy) a host :class:`CpuBuffer`."""
    try:
        return buf.numpy()
    except SvodError:
        # Only without numpy: host memory's module (~7 ms of imports) stays out of GPU-only plans.
        from .cpu.buffer import CpuBuffer, CpuStorage

        stage = CpuBuffer(CpuStorage(buf.nbytes), 0, buf.nbytes, buf.dtype, tuple(buf.shape))
        buf.copyout_into(stage)
        return stage


def host_views(bufs: Sequence[Any]) -> List[Any]:
    """Host views of ``bufs`` (device buffers staged); :func:`write_back` returns staged ones."""
    return [host_view(b) if b.on_host else host_stage(b) for b in bufs]


def write_back(bufs: Sequence[Any], views: Sequence[Any]) -> None:
    """Copy host stages of device buffers back (host views already are the buffers' memory)."""
    for buf, view in zip(bufs, views):
        if not buf.on_host:
            buf.copyin(view)


__all__ = [
    "copy_buffer",
    "copy_storage",
    "host_stage",
    "host_view",
    "host_views",
    "memmove",
    "storage_size",
    "write_back",
]
