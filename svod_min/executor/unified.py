"""Explicit multi-device scheduling: the unified executor, its transfers and the process-wide instance.

The counterpart of svod's ``executor`` module. :class:`ExecutionPlan` does not
need it (a plan orders its own ops); it is for callers that schedule work across
devices by hand. The parts live in their own modules and are re-exported here:

* :mod:`svod_min.executor.device_context` — :class:`TimelineSignal` and
  :class:`DeviceContext` (one device's in-order timeline; CUDA values complete
  through events recorded on the stream).
* :mod:`svod_min.executor.graph` — :class:`ExecutionGraph`,
  :class:`ExecutionNode`, :class:`KernelBufferAccess`, :class:`SyncStrategy`.

:meth:`UnifiedExecutor.execute_kernel` returns once ``fn`` queued its work
(complete on return on the host). :meth:`UnifiedExecutor.execute_transfer`
moves bytes with :func:`svod_min.devices.transfer.copy_buffer`: a memmove between
host buffers, otherwise the device buffer's own ``copyin``/``copyout_into``
(CPU -> CUDA through pinned staging, CUDA -> same CUDA as an async D2D with
memmove semantics, CUDA:i -> CUDA:j peer or staged by the driver). With a CUDA
destination the copy is queued on its stream and completed by an event.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, NoReturn, Optional, Sequence

from ..devices.registry import DEVICE_FACTORIES, DeviceRegistry
from ..devices.spec import DeviceSpec, SpecLike, as_spec
from ..devices.transfer import copy_buffer
from ..error import BufferAllocationError, ExecutionError, SvodError
from .device_context import U64_MAX, DeviceContext, TimelineSignal, check_timeout
from .graph import ExecutionGraph, ExecutionNode, KernelBufferAccess, SyncStrategy, sync_strategy


class UnifiedExecutor:
    """Device contexts plus kernel/transfer execution on their timelines (asynchronous on CUDA).

    Thread-safe: the context table has a lock, each timeline has its own.
    """

    def __init__(self, registry: Optional[DeviceRegistry] = None) -> None:
        self.registry = DEVICE_FACTORIES if registry is None else registry
        self._lock = threading.Lock()
        self._contexts: Dict[DeviceSpec, DeviceContext] = {}

    def __repr__(self) -> str:
        return "<UnifiedExecutor devices=%s>" % [str(d) for d in self.devices()]

    # --- devices ---

    def add_device(self, spec: SpecLike) -> DeviceContext:
        """Create ``spec``'s device through the registry and its context (idempotent)."""
        parsed = as_spec(spec)
        existing = self.context(parsed)
        if existing is not None:
            return existing
        handle = self.registry.device(parsed)  # outside our lock: building may be slow
        with self._lock:
            return self._contexts.setdefault(parsed, DeviceContext(parsed, handle))

    def context(self, spec: SpecLike) -> Optional[DeviceContext]:
        """The context of ``spec``, or None if it was never added."""
        parsed = as_spec(spec)
        with self._lock:
            return self._contexts.get(parsed)

    def devices(self) -> List[DeviceSpec]:
        """Added devices, in the order they were added."""
        with self._lock:
            return list(self._contexts)

    @staticmethod
    def sync_strategy(src: SpecLike, dst: SpecLike) -> SyncStrategy:
        """NONE for the same device, PEER_TO_PEER for the same kind, else HOST_STAGED."""
        return sync_strategy(as_spec(src), as_spec(dst))

    @staticmethod
    def single_device_check(buffers: Sequence[Any]) -> Optional[DeviceSpec]:
        """The one device every buffer lives on, or None (mixed, unknown or no buffers)."""
        specs = {_buffer_spec(b) for b in buffers}
        if len(specs) != 1:
            return None
        return specs.pop()

    # --- execution ---

    def execute_kernel(self, device: SpecLike, fn: Callable[[], Any]) -> int:
        """Run ``fn()`` now on ``device``'s timeline; returns its timeline value.

        On the host the value is complete on return. On a CUDA device ``fn``
        only queues work on the device's stream: an event is recorded after it
        and the value completes when the event does (:meth:`DeviceContext.wait_for`).

        The device is added on first use. If ``fn`` raises, the value is still
        signalled (so waiters wake) but recorded as failed, waiters get
        :class:`ExecutionError`, and the error propagates here (wrapped in
        ``ExecutionError`` unless it already is an svod_min error).
        """
        if not callable(fn):  # refused before a value is reserved (and recorded as failed)
            raise ExecutionError("execute_kernel needs a callable, got %s" % type(fn).__name__)
        ctx = self.add_device(device)
        value = ctx.next_timeline()
        try:
            fn()
            if ctx.event_backed:
                ctx.record_event(value)
        except BaseException as exc:
            ctx.signal_failure(value, exc)
            _reraise(exc, "kernel on %s (timeline value %d) failed" % (ctx.device, value))
        if not ctx.event_backed:
            ctx.signal_completion(value)
        return value

    def execute_transfer(
        self,
        src: Any,
        dst: Any,
        src_device: SpecLike,
        dst_device: SpecLike,
        *,
        timeout: Optional[float] = None,
    ) -> int:
        """Copy ``src`` into ``dst`` (same ``nbytes``); returns the value on ``dst_device``'s timeline.

        Cross-device copies first wait (up to ``timeout``) for everything
        already reserved on the source device. The bytes move with
        :func:`copy_buffer`; to a CUDA destination the copy is queued on its
        stream and its value completes by an event (see :func:`_transfer`).
        """
        timeout = check_timeout(timeout)
        for what, buf in (("source", src), ("destination", dst)):
            if not isinstance(getattr(buf, "nbytes", None), int):
                raise ExecutionError("transfer %s must be a device buffer, got %s" % (what, type(buf).__name__))
        if src.nbytes != dst.nbytes:
            raise BufferAllocationError(
                "transfer size mismatch: source has %d bytes, destination %d bytes" % (src.nbytes, dst.nbytes)
            )
        src_ctx, dst_ctx = self.add_device(src_device), self.add_device(dst_device)
        _check_homes(src, dst, src_ctx, dst_ctx)  # a device pointer must never reach a host memmove
        return _transfer(src, dst, src_ctx, dst_ctx, timeout)

    def synchronize_all(self, timeout: Optional[float] = None) -> None:
        """Wait for every value reserved so far on every device (``timeout`` is the total)."""
        timeout = check_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            contexts = list(self._contexts.values())
        for ctx in contexts:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ctx.wait_for(ctx.last_reserved, left)
            if ctx.device_handle is not None:
                ctx.device_handle.synchronize()


def _reraise(exc: BaseException, what: str) -> NoReturn:
    # KeyboardInterrupt & co. and our own errors pass through untouched.
    if isinstance(exc, SvodError) or not isinstance(exc, Exception):
        raise exc
    raise ExecutionError("%s: %s: %s" % (what, type(exc).__name__, exc)) from exc


def _buffer_spec(buffer: Any) -> Optional[DeviceSpec]:
    dev = getattr(buffer, "device", None)
    if isinstance(dev, DeviceSpec):
        return dev
    if isinstance(dev, str):
        return as_spec(dev)
    spec = getattr(dev, "spec", None)
    return spec if isinstance(spec, DeviceSpec) else None


def _transfer(src: Any, dst: Any, src_ctx: DeviceContext, dst_ctx: DeviceContext, timeout: Optional[float]) -> int:
    """Copy on ``dst_ctx``'s timeline: complete on return on the host, by an event on a CUDA destination.

    :func:`copy_buffer` moves the bytes: a memmove between host buffers, else the device
    buffer's own copy (D2D on the stream, peer or staged by the driver, pinned H2D; a host
    destination returns once its bytes landed).

    Across devices the source's reserved values are first waited for on the host (its events
    synchronized). A stream wait (cuStreamWaitEvent) would spare that host wait only in the
    CUDA -> CUDA case, and there ``copy_from_peer`` synchronizes the source's stream itself
    before copying (the source stream may reuse the buffer once it returns), so it would buy
    nothing yet; the host wait also reports a failed source value before a byte moves.
    Same-device copies need no wait: one timeline is in order.
    """
    pending = src_ctx.last_reserved  # read before reserving: same-device would wait on itself
    value = dst_ctx.next_timeline()
    try:
        if src_ctx is not dst_ctx:
            src_ctx.wait_for(pending, timeout)
        if src.nbytes:
            copy_buffer(dst, src)
        if dst_ctx.event_backed:
            dst_ctx.record_event(value)
        else:
            dst_ctx.device_handle.synchronize()  # the copy must have landed before we signal
    except BaseException as exc:
        dst_ctx.signal_failure(value, exc)
        _reraise(exc, "transfer %s -> %s (timeline value %d) failed" % (src_ctx.device, dst_ctx.device, value))
    if not dst_ctx.event_backed:
        dst_ctx.signal_completion(value)  # a host destination: the bytes have landed
    return value


def _check_homes(src: Any, dst: Any, src_ctx: DeviceContext, dst_ctx: DeviceContext) -> None:
    """Each buffer must live on the device it is named with (a buffer of unknown home: trusted)."""
    for ctx, buf, what in ((src_ctx, src, "source"), (dst_ctx, dst, "destination")):
        spec = _buffer_spec(buf)
        if spec is not None and spec != ctx.device:
            raise ExecutionError("transfer %s buffer lives on %s, not on %s" % (what, spec, ctx.device))


# --- process-wide instance -----------------------------------------------------------

_global: Optional[UnifiedExecutor] = None
_global_lock = threading.Lock()


def global_executor() -> UnifiedExecutor:
    """The process-wide executor over :data:`DEVICE_FACTORIES`, created on first use."""
    global _global
    if _global is None:
        with _global_lock:
            if _global is None:
                _global = UnifiedExecutor()
    return _global


__all__ = [
    "U64_MAX",
    "DeviceContext",
    "ExecutionGraph",
    "ExecutionNode",
    "KernelBufferAccess",
    "SyncStrategy",
    "TimelineSignal",
    "UnifiedExecutor",
    "global_executor",
]
