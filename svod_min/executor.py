"""Explicit multi-device scheduling: timelines, dependency levels, transfers.

svod's ``executor`` module, made honest. :class:`ExecutionPlan` does not need
it (a plan orders its own ops); it is for callers that schedule work across
devices by hand.

* :class:`TimelineSignal` is a real condition-variable timeline: a u64 that
  only grows, and threads block in :meth:`TimelineSignal.wait` until it
  reaches a value.
* :class:`DeviceContext` reserves timeline values and completes them **in
  order**: if op 2 finishes before op 1 the signal stays at 0 until op 1 is
  done, so reaching ``v`` always means every op ``<= v`` finished (svod stores
  the value of whichever op finished last). A failed op still advances the
  timeline, so waiters never hang, but it is recorded and :meth:`wait_for`
  raises :class:`ExecutionError` instead of reporting success.
* On a CUDA device (a handle with a driver ``lib`` and a ``stream``; this
  module never imports the CUDA one) a value completes through a CUDA event
  recorded on the device's stream: :meth:`UnifiedExecutor.execute_kernel`
  returns once ``fn`` queued its work, :meth:`DeviceContext.wait_for`
  synchronizes the events (or polls them when given a timeout) and
  :attr:`DeviceContext.current_value` queries them without blocking. Events
  come from a small per-device pool and go back to it when their value
  retires; at most ``_MAX_PENDING_EVENTS`` values are in flight per device.
* :meth:`UnifiedExecutor.execute_transfer` with a CUDA side queues the copy on
  the stream: CPU -> CUDA through ``copyin`` (pinned staging, async DMA),
  CUDA -> CPU through ``copyout_into``, CUDA -> same CUDA as an async D2D, and
  CUDA:i -> CUDA:j through ``copy_from_peer``. Host-only transfers are
  unchanged: memmove, the device's ``copy``, or bytes through the host.
* :meth:`ExecutionGraph.compute_parallel_groups` returns deterministic Kahn
  levels (sorted by id) and is idempotent; svod iterates a HashMap and
  appends to its order on every call.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Hashable, Iterable, List, NoReturn, Optional, Sequence, Set, Tuple

from .device_registry import DEVICE_FACTORIES, DeviceRegistry, DeviceSpec, SpecLike, as_spec
from .error import BufferAllocationError, ExecutionError, PlanError, SvodError
from .execution_plan import copy_buffer
from .ordering import kahn_levels, ranges_overlap

U64_MAX = 2**64 - 1


# --- timeline signal ---------------------------------------------------------


class TimelineSignal:
    """A monotonically increasing u64 that threads can block on.

    :meth:`signal` with a value lower than (or equal to) the current one is
    ignored rather than an error: completions may be reported out of order by
    racing threads, and a timeline must never go backwards.
    """

    def __init__(self, value: int = 0, name: str = "") -> None:
        self._cond = threading.Condition(threading.Lock())
        self._value = _check_u64(value)
        self.name = name

    def __repr__(self) -> str:
        return "<TimelineSignal %s value=%d>" % (self.name or "?", self._value)

    @property
    def value(self) -> int:
        """The current value (a plain int read is atomic under the GIL)."""
        return self._value

    def signal(self, value: int) -> None:
        """Raise the value to ``value`` and wake waiters; lower values are ignored."""
        value = _check_u64(value)
        with self._cond:
            if value > self._value:
                self._value = value
                self._cond.notify_all()

    def wait(self, value: int, timeout: Optional[float] = None) -> bool:
        """Block until the value is ``>= value``; False if ``timeout`` seconds pass first."""
        value, timeout = _check_u64(value), _check_timeout(timeout)
        with self._cond:
            return self._cond.wait_for(lambda: self._value >= value, timeout)

    def wait_or_raise(self, value: int, timeout: Optional[float] = None) -> None:
        """Like :meth:`wait`, but a timeout raises :class:`ExecutionError` naming the values."""
        if not self.wait(value, timeout):
            raise _timeout_error(self, value, timeout)


def _timeout_error(signal: TimelineSignal, value: int, timeout: Optional[float]) -> ExecutionError:
    return ExecutionError(
        "timed out after %gs waiting for %s timeline value %d (current value %d)"
        % (timeout or 0.0, signal.name or "device", value, signal.value)
    )


def _check_timeout(timeout: Optional[float]) -> Optional[float]:
    """Seconds or None; inf is None, a negative (a deadline already past) is 0.

    nan would never expire, and a string or a bool fails deep inside a wait.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout):
        raise ExecutionError("timeout must be seconds (a number) or None, got %r" % (timeout,))
    return None if timeout == math.inf else max(0.0, float(timeout))


def _check_u64(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= U64_MAX:
        raise ExecutionError("timeline value must be an int in [0, 2**64), got %r" % (value,))
    return value


# --- device context ----------------------------------------------------------


@dataclass(eq=False)
class DeviceContext:
    """One device's timeline: values are reserved in order and completed in order."""

    device: DeviceSpec
    device_handle: Any = None
    signal: TimelineSignal = field(default_factory=TimelineSignal)
    _timeline: int = field(default=0, init=False, repr=False)  # last reserved value
    _lock: Any = field(default_factory=threading.Lock, init=False, repr=False)
    _done: Set[int] = field(default_factory=set, init=False, repr=False)  # completed ahead of order
    _failures: Dict[int, BaseException] = field(default_factory=dict, init=False, repr=False)
    _pending: Dict[int, Any] = field(default_factory=dict, init=False, repr=False)  # value -> recorded event
    _events: Optional["_EventPool"] = field(default=None, init=False, repr=False)
    _changed: Any = field(default=None, init=False, repr=False)  # condition on _lock: completions, records

    def __post_init__(self) -> None:
        self.device = as_spec(self.device)
        if not self.signal.name:
            self.signal.name = str(self.device)
        self._timeline = self.signal.value  # a pre-signalled timeline starts from its value
        self._changed = threading.Condition(self._lock)
        self._events = _event_pool_for(self.device_handle)

    @property
    def event_backed(self) -> bool:
        """True when values complete through device events (a CUDA device), not on the host."""
        return self._events is not None

    @property
    def current_value(self) -> int:
        """The highest value such that every op up to it has completed (events are queried, never waited on)."""
        if self._events is not None:
            self.poll()
        return self.signal.value

    @property
    def last_reserved(self) -> int:
        """The most recently reserved value (0 when nothing was ever reserved)."""
        with self._lock:
            return self._timeline

    @property
    def failures(self) -> Dict[int, BaseException]:
        """Failed timeline values -> their exception (a copy)."""
        with self._lock:
            return dict(self._failures)

    def next_timeline(self) -> int:
        """Reserve and return the next timeline value."""
        with self._lock:
            if self._timeline >= U64_MAX:
                raise ExecutionError("%s timeline exhausted" % self.device)
            self._timeline += 1
            return self._timeline

    def signal_completion(self, value: int) -> None:
        """Mark ``value`` done; the signal advances over every contiguous completed value."""
        self._complete(value, None)

    def signal_failure(self, value: int, error: BaseException) -> None:
        """Mark ``value`` done *and failed*: waiters wake up, then :meth:`wait_for` raises."""
        if not isinstance(error, BaseException):  # wait_for chains it: "raise ... from error"
            raise ExecutionError("signal_failure needs an exception, got %s" % type(error).__name__)
        self._complete(value, error)

    def _complete(self, value: int, error: Optional[BaseException]) -> None:
        _check_u64(value)
        with self._lock:
            self._complete_locked(value, error)

    def _complete_locked(self, value: int, error: Optional[BaseException]) -> None:
        if not 0 < value <= self._timeline:
            raise ExecutionError(
                "%s: cannot complete timeline value %r (reserved values are 1..%d)" % (self.device, value, self._timeline)
            )
        if error is not None:
            self._failures.setdefault(value, error)  # recorded before anyone can wake
        self._done.add(value)
        upto = self.signal.value
        while upto + 1 in self._done:
            upto += 1
            self._done.discard(upto)
        # Signalled under our lock so racing completions cannot publish out of order.
        self.signal.signal(upto)
        self._changed.notify_all()

    # --- event-backed completion (CUDA) ---

    def record_event(self, value: int) -> None:
        """Complete ``value`` once the device's stream reaches this point; returns without waiting.

        Records a pooled event on the stream. If recording fails the event goes
        back to the pool and the error propagates; the caller marks ``value``
        failed, as for any op.
        """
        pool = self._require_events()
        self._make_room()
        event = pool.acquire()
        try:
            self.device_handle.activate()
            event.record()
        except BaseException:
            pool.release(event)
            raise
        with self._lock:
            if value in self._pending or value in self._done or not self.signal.value < value <= self._timeline:
                pool.release(event)
                raise ExecutionError("%s: timeline value %r is not an open reserved value" % (self.device, value))
            self._pending[value] = event
            self._changed.notify_all()

    def poll(self) -> int:
        """Retire values whose events completed, in order, without blocking; returns :attr:`signal`'s value."""
        if self._events is not None:
            for value, event in self._pending_upto(U64_MAX):
                try:
                    ready = self._query(event)
                except Exception as exc:  # a device fault: the value fails, waiters do not hang
                    self._retire(value, event, exc)
                    continue
                if not ready:  # one stream: later events cannot be done either
                    break
                self._retire(value, event, None)
        return self.signal.value

    def _require_events(self) -> "_EventPool":
        if self._events is None:
            raise ExecutionError("%s has no device events (not a CUDA device)" % self.device)
        return self._events

    def _pending_upto(self, value: int) -> List[Tuple[int, Any]]:
        with self._lock:
            return sorted((v, e) for v, e in self._pending.items() if v <= value)

    def _query(self, event: Any) -> bool:
        self.device_handle.activate()
        return bool(event.query())

    def _retire(self, value: int, event: Any, error: Optional[BaseException]) -> None:
        """Complete ``value`` and give its event back, unless another thread already did."""
        with self._lock:
            if self._pending.get(value) is not event:
                return
            del self._pending[value]
            self._complete_locked(value, error)
        self._require_events().release(event)

    def _make_room(self) -> None:
        """Retire finished values; if too many are still in flight, wait for the oldest (bounds the pool)."""
        self.poll()
        while True:
            with self._lock:
                if len(self._pending) < _MAX_PENDING_EVENTS:
                    return
                oldest = min(self._pending)
                event = self._pending[oldest]
            self._sync_event(oldest, event)

    def _sync_event(self, value: int, event: Any) -> None:
        try:
            self.device_handle.activate()
            event.synchronize()
        except Exception as exc:
            self._retire(value, event, exc)
            return
        self._retire(value, event, None)

    def _wait_events(self, value: int, timeout: Optional[float]) -> None:
        """wait_for on an event-backed timeline: sync events (or poll them until ``timeout``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = _POLL_MIN
        while self.poll() < value:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise _timeout_error(self.signal, value, timeout)
            blocker = self._pending_upto(value)[:1]
            if not blocker:
                self._wait_host(value, left)  # a value <= target is still being issued on the host
            elif left is None:
                self._sync_event(*blocker[0])
            else:  # cuEventSynchronize has no timeout: poll with short, growing sleeps
                time.sleep(min(delay, left))
                delay = min(delay * 2, _POLL_MAX)

    def _wait_host(self, value: int, left: Optional[float]) -> None:
        with self._changed:
            if self.signal.value < value and not any(v <= value for v in self._pending):
                # Woken by a record or a completion; the slice only guards a signal raised behind our back.
                self._changed.wait(_HOST_SLICE if left is None else min(left, _HOST_SLICE))

    def wait_for(self, value: int, timeout: Optional[float] = None) -> None:
        """Block until every op ``<= value`` finished; raise if one failed or on timeout.

        Waiting for a value nobody reserved is refused: it could never be
        reached by the ops known so far, so it would be a silent hang.
        """
        timeout = _check_timeout(timeout)
        if _check_u64(value) == 0:
            return
        if value > self.last_reserved:
            raise ExecutionError(
                "%s: timeline value %d was never reserved (last reserved %d)" % (self.device, value, self.last_reserved)
            )
        if self._events is not None:
            self._wait_events(value, timeout)
        else:
            self.signal.wait_or_raise(value, timeout)
        self._raise_failure(value)

    def _raise_failure(self, value: int) -> None:
        with self._lock:
            failed = sorted(v for v in self._failures if v <= value)
            if not failed:
                return
            first = self._failures[failed[0]]
        raise ExecutionError(
            "%s: waited for timeline value %d but value(s) %s failed: %s: %s"
            % (self.device, value, failed, type(first).__name__, first)
        ) from first

    def clear_failures(self) -> Dict[int, BaseException]:
        """Acknowledge recorded failures (later waits succeed again); returns them."""
        with self._lock:
            cleared, self._failures = self._failures, {}
        return cleared


# --- device events ---------------------------------------------------------------

_MAX_PENDING_EVENTS = 32  # in-flight values per device before recording waits for the oldest
_POLL_MIN, _POLL_MAX = 50e-6, 2e-3  # seconds between cuEventQuery polls when a wait has a timeout
_HOST_SLICE = 0.1  # longest sleep while a value is still being issued on the host


class _EventPool:
    """Sync-only events of one device, reused: a retired value gives its event back."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._free: List[Any] = []
        self._lock = threading.Lock()

    def acquire(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._make()

    def release(self, event: Any) -> None:
        # Never destroyed here: another thread may still be polling it (reuse is harmless, see _retire).
        with self._lock:
            self._free.append(event)


def _event_pool_for(handle: Any) -> Optional[_EventPool]:
    """An event pool when ``handle`` queues its work (a CUDA device), else None (work completes on the host).

    TODO(base.py): the device interface has no slot saying "work is queued, completion is seen
    through events", and ``Device.new_event()`` makes timing events without ``query()``. Until
    it has both, this is the one place that probes a device (a driver ``lib`` and a ``stream``)
    and imports the CUDA event class (only once such a device exists, i.e. CUDA is loaded).
    """
    lib = getattr(handle, "lib", None)
    if getattr(handle, "stream", None) is None or not callable(getattr(lib, "call", None)):
        return None
    from .devices.cuda import CudaEvent  # TODO(base.py): handle.new_event(sync_only=True)

    return _EventPool(lambda: CudaEvent(handle, timing=False))


# --- sync strategy -------------------------------------------------------------


class SyncStrategy(enum.Enum):
    """How a transfer between two devices is synchronised."""

    NONE = "none"  # same device: one in-order timeline
    PEER_TO_PEER = "peer_to_peer"  # same kind, another index (CUDA:0 -> CUDA:1)
    HOST_STAGED = "host_staged"  # different kinds: through host memory
    CPU_MEDIATED = "host_staged"  # noqa: PIE796 -- svod's name, deliberately an alias of HOST_STAGED


def _sync_strategy(src: DeviceSpec, dst: DeviceSpec) -> SyncStrategy:
    if src == dst:
        return SyncStrategy.NONE
    if src.kind == dst.kind:
        return SyncStrategy.PEER_TO_PEER
    return SyncStrategy.HOST_STAGED


# --- execution graph -------------------------------------------------------------


_HOST_MEMORY = "host memory"  # the key of numpy arrays: overlap is decided by their addresses


def _same_key(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return (a == b) is True  # numpy's == is elementwise: never "the same buffer"
    except Exception:
        return False


@dataclass(frozen=True)
class KernelBufferAccess:
    """One buffer a node touches. ``byte_range`` (start, end) narrows the hazard to a region."""

    buffer: Hashable
    is_write: bool = False
    byte_range: Optional[Tuple[int, int]] = None

    @classmethod
    def of(cls, buffer: Any, is_write: bool = False) -> "KernelBufferAccess":
        """Access to a device buffer, keyed by its storage so views of one arena conflict.

        A device buffer (:class:`svod_min.devices.base.Buffer`: ``storage``, ``offset``,
        ``nbytes``) gives its window of the storage; a numpy array its host addresses; anything
        else is its own key over its whole extent.
        """
        storage = getattr(buffer, "storage", None)  # a device Buffer, or an opaque key (svod takes ids)
        if storage is not None:
            return cls(storage, is_write, (buffer.offset, buffer.offset + buffer.nbytes))
        iface = getattr(buffer, "__array_interface__", None)
        if iface is not None:  # numpy: host memory, by address
            start = iface["data"][0]
            return cls(_HOST_MEMORY, is_write, (start, start + int(buffer.nbytes)))
        return cls(buffer, is_write)

    def conflicts(self, other: "KernelBufferAccess") -> bool:
        """RAW, WAR or WAW on overlapping bytes of the same buffer."""
        if not (self.is_write or other.is_write) or not _same_key(self.buffer, other.buffer):
            return False
        if self.byte_range is None or other.byte_range is None:
            return True
        return ranges_overlap(self.byte_range[0], self.byte_range[1], other.byte_range[0], other.byte_range[1])


@dataclass
class ExecutionNode:
    """One op of an :class:`ExecutionGraph`; ``predecessors`` are node ids."""

    id: int
    device: DeviceSpec
    inputs: List[Any] = field(default_factory=list)
    outputs: List[Any] = field(default_factory=list)
    predecessors: List[int] = field(default_factory=list)
    is_transfer: bool = False
    buffer_access: List[KernelBufferAccess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.device = as_spec(self.device)
        if isinstance(self.id, bool) or not isinstance(self.id, int):  # ids are sorted into levels
            raise PlanError("node id must be an int, got %r" % (self.id,))
        for name in ("inputs", "outputs", "predecessors", "buffer_access"):
            if not isinstance(getattr(self, name), list):
                raise PlanError("node %d: %s must be a list, got %s" % (self.id, name, type(getattr(self, name)).__name__))
        if not all(isinstance(a, KernelBufferAccess) for a in self.buffer_access):
            raise PlanError("node %d: buffer_access holds KernelBufferAccess items (KernelBufferAccess.of(buf))" % self.id)


class ExecutionGraph:
    """Nodes with explicit dependencies; levels are computed on demand, never cached."""

    def __init__(self, nodes: Iterable[ExecutionNode] = ()) -> None:
        self._nodes: Dict[int, ExecutionNode] = {}  # insertion order matters for hazards
        for node in nodes:
            self.add_node(node)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def nodes(self) -> List[ExecutionNode]:
        """Nodes in insertion order."""
        return list(self._nodes.values())

    def node(self, node_id: int) -> ExecutionNode:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise PlanError("unknown node id %r" % (node_id,)) from None

    def add_node(self, node: ExecutionNode) -> int:
        """Add ``node``; a duplicate id is a :class:`PlanError`. Returns its id."""
        if not isinstance(node, ExecutionNode):
            raise PlanError("graph nodes must be ExecutionNode, got %s" % type(node).__name__)
        if node.id in self._nodes:
            raise PlanError("duplicate node id %d" % node.id)
        self._nodes[node.id] = node
        return node.id

    def add_dependency(self, node_id: int, predecessor: int) -> None:
        """Make ``node_id`` wait for ``predecessor`` (no-op if already present)."""
        node = self.node(node_id)
        if predecessor not in node.predecessors:
            node.predecessors.append(predecessor)

    def add_dependencies_from_access(self) -> List[Tuple[int, int]]:
        """Add an edge for every RAW/WAR/WAW hazard, in insertion order.

        A node depends on every earlier node whose access conflicts with one
        of its own (overlapping byte ranges when both give one). Returns the
        ``(predecessor, node)`` edges that were new; calling again adds none.
        """
        added: List[Tuple[int, int]] = []
        order = self.nodes
        for i, node in enumerate(order):
            for earlier in order[:i]:
                if earlier.id not in node.predecessors and _hazard(earlier, node):
                    node.predecessors.append(earlier.id)
                    added.append((earlier.id, node.id))
        return added

    def compute_parallel_groups(self) -> List[List[int]]:
        """Kahn levels: each group's nodes depend only on earlier groups; ids sorted.

        An unknown predecessor or a cycle is a :class:`PlanError`; the cycle
        message lists every node that could not be scheduled.
        """
        ids = sorted(self._nodes)  # levels list indices in order: sorted indices are sorted ids
        _order, levels = kahn_levels(self._predecessor_indices(ids), ids)
        return [[ids[i] for i in level] for level in levels]

    def topological_order(self) -> List[int]:
        """The groups flattened: a deterministic valid execution order."""
        return [n for group in self.compute_parallel_groups() for n in group]

    def _predecessor_indices(self, ids: List[int]) -> List[List[int]]:
        """Each node's predecessors as positions in ``ids`` (duplicates dropped: they would double-count)."""
        for node in self._nodes.values():
            for pred in node.predecessors:
                if pred not in self._nodes:
                    raise PlanError("node %d depends on unknown node id %r" % (node.id, pred))
        index = {node_id: i for i, node_id in enumerate(ids)}
        return [sorted({index[p] for p in self._nodes[node_id].predecessors}) for node_id in ids]


def _hazard(earlier: ExecutionNode, later: ExecutionNode) -> bool:
    return any(a.conflicts(b) for a in earlier.buffer_access for b in later.buffer_access)


# --- unified executor ------------------------------------------------------------


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
        return _sync_strategy(as_spec(src), as_spec(dst))

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
        already reserved on the source device. With a CUDA side the copy is
        queued on its stream (see :func:`_stream_transfer`).
        """
        timeout = _check_timeout(timeout)
        for what, buf in (("source", src), ("destination", dst)):
            if not isinstance(getattr(buf, "nbytes", None), int):
                raise ExecutionError("transfer %s must be a device buffer, got %s" % (what, type(buf).__name__))
        if src.nbytes != dst.nbytes:
            raise BufferAllocationError(
                "transfer size mismatch: source has %d bytes, destination %d bytes" % (src.nbytes, dst.nbytes)
            )
        src_ctx, dst_ctx = self.add_device(src_device), self.add_device(dst_device)
        _check_homes(src, dst, src_ctx, dst_ctx)  # a device pointer must never reach a host memmove
        if src_ctx.event_backed or dst_ctx.event_backed:
            return _stream_transfer(src, dst, src_ctx, dst_ctx, timeout)
        strategy = _sync_strategy(src_ctx.device, dst_ctx.device)
        pending = src_ctx.last_reserved  # read before reserving: same-device would wait on itself
        value = dst_ctx.next_timeline()
        try:
            if strategy is not SyncStrategy.NONE:
                src_ctx.wait_for(pending, timeout)
            copy_buffer(dst, src)  # host bytes by memmove; a device buffer copies itself (peer, staged)
            dst_ctx.device_handle.synchronize()  # the copy must have landed before we signal
        except BaseException as exc:
            dst_ctx.signal_failure(value, exc)
            _reraise(exc, "transfer %s -> %s (timeline value %d) failed" % (src_ctx.device, dst_ctx.device, value))
        dst_ctx.signal_completion(value)
        return value

    def synchronize_all(self, timeout: Optional[float] = None) -> None:
        """Wait for every value reserved so far on every device (``timeout`` is the total)."""
        timeout = _check_timeout(timeout)
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


def _stream_transfer(src: Any, dst: Any, src_ctx: DeviceContext, dst_ctx: DeviceContext, timeout: Optional[float]) -> int:
    """A transfer with a CUDA side: queued on the stream, completed by an event on a CUDA destination.

    Across devices the source's reserved values are first waited for on the
    host (its events synchronized). A stream wait (cuStreamWaitEvent) would
    spare that host wait only in the CUDA -> CUDA case, and there
    ``copy_from_peer`` synchronizes the source's stream itself before copying
    (the source stream may reuse the buffer once it returns), so it would buy
    nothing yet; the host wait also reports a failed source value before a
    byte moves. Same-device copies need no wait: one stream is in order.
    """
    pending = src_ctx.last_reserved  # read before reserving: same-device would wait on itself
    value = dst_ctx.next_timeline()
    try:
        if src_ctx is not dst_ctx:
            src_ctx.wait_for(pending, timeout)
        if src.nbytes:
            copy_buffer(dst, src)  # on the stream: D2D, peer, pinned H2D; a host destination waits for its bytes
        if dst_ctx.event_backed:
            dst_ctx.record_event(value)
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
        if spec is not None and spec != ctx.device and not (spec.kind == ctx.device.kind == "CPU"):
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
