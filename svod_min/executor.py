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
* :meth:`ExecutionGraph.compute_parallel_groups` returns deterministic Kahn
  levels (sorted by id) and is idempotent; svod iterates a HashMap and
  appends to its order on every call.
"""

from __future__ import annotations

import ctypes
import enum
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Hashable, Iterable, List, NoReturn, Optional, Sequence, Set, Tuple

from .device_registry import DEVICE_FACTORIES, DeviceRegistry, DeviceSpec, SpecLike, as_spec
from .error import BufferAllocationError, ExecutionError, PlanError, SvodError

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
        value = _check_u64(value)
        with self._cond:
            return self._cond.wait_for(lambda: self._value >= value, timeout)

    def wait_or_raise(self, value: int, timeout: Optional[float] = None) -> None:
        """Like :meth:`wait`, but a timeout raises :class:`ExecutionError` naming the values."""
        if not self.wait(value, timeout):
            raise ExecutionError(
                "timed out after %gs waiting for %s timeline value %d (current value %d)"
                % (timeout or 0.0, self.name or "device", value, self._value)
            )


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

    def __post_init__(self) -> None:
        self.device = as_spec(self.device)
        if not self.signal.name:
            self.signal.name = str(self.device)
        self._timeline = self.signal.value  # a pre-signalled timeline starts from its value

    @property
    def current_value(self) -> int:
        """The highest value such that every op up to it has completed."""
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
        self._complete(value, error)

    def _complete(self, value: int, error: Optional[BaseException]) -> None:
        with self._lock:
            if not 0 < value <= self._timeline:
                raise ExecutionError(
                    "%s: cannot complete timeline value %r (reserved values are 1..%d)"
                    % (self.device, value, self._timeline)
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

    def wait_for(self, value: int, timeout: Optional[float] = None) -> None:
        """Block until every op ``<= value`` finished; raise if one failed or on timeout.

        Waiting for a value nobody reserved is refused: it could never be
        reached by the ops known so far, so it would be a silent hang.
        """
        if value <= 0:
            return
        if value > self.last_reserved:
            raise ExecutionError(
                "%s: timeline value %d was never reserved (last reserved %d)" % (self.device, value, self.last_reserved)
            )
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


@dataclass(frozen=True)
class KernelBufferAccess:
    """One buffer a node touches. ``byte_range`` (start, end) narrows the hazard to a region."""

    buffer: Hashable
    is_write: bool = False
    byte_range: Optional[Tuple[int, int]] = None

    @classmethod
    def of(cls, buffer: Any, is_write: bool = False) -> "KernelBufferAccess":
        """Access to a device buffer, keyed by its storage so views of one arena conflict.

        Uses ``buffer.storage`` and ``buffer.byte_range()`` when present (CpuBuffer
        has both), else the buffer object itself over its whole extent.
        """
        storage = getattr(buffer, "storage", None)
        span = getattr(buffer, "byte_range", None)
        if storage is None or not callable(span):
            return cls(buffer, is_write)
        return cls(storage, is_write, tuple(span()))

    def conflicts(self, other: "KernelBufferAccess") -> bool:
        """RAW, WAR or WAW on overlapping bytes of the same buffer."""
        if self.buffer != other.buffer or not (self.is_write or other.is_write):
            return False
        if self.byte_range is None or other.byte_range is None:
            return True
        return self.byte_range[0] < other.byte_range[1] and other.byte_range[0] < self.byte_range[1]


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
        indegree, dependents = self._edges()
        ready = sorted(n for n, d in indegree.items() if d == 0)
        groups: List[List[int]] = []
        while ready:
            groups.append(ready)
            released = []
            for n in ready:
                for m in dependents[n]:
                    indegree[m] -= 1
                    if indegree[m] == 0:
                        released.append(m)
            ready = sorted(released)
        blocked = sorted(n for n, d in indegree.items() if d > 0)
        if blocked:
            raise PlanError("cycle detected in execution graph: blocked_ids=%s" % blocked)
        return groups

    def topological_order(self) -> List[int]:
        """The groups flattened: a deterministic valid execution order."""
        return [n for group in self.compute_parallel_groups() for n in group]

    def _edges(self) -> Tuple[Dict[int, int], Dict[int, List[int]]]:
        indegree = {n: 0 for n in self._nodes}
        dependents: Dict[int, List[int]] = {n: [] for n in self._nodes}
        for node in self._nodes.values():
            for pred in set(node.predecessors):  # duplicates would double-count
                if pred not in self._nodes:
                    raise PlanError("node %d depends on unknown node id %r" % (node.id, pred))
                dependents[pred].append(node.id)
                indegree[node.id] += 1
        return indegree, dependents


def _hazard(earlier: ExecutionNode, later: ExecutionNode) -> bool:
    return any(a.conflicts(b) for a in earlier.buffer_access for b in later.buffer_access)


# --- unified executor ------------------------------------------------------------


class UnifiedExecutor:
    """Device contexts plus synchronous kernel/transfer execution on their timelines.

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
        """Run ``fn()`` now on ``device``'s timeline; returns the completed timeline value.

        The device is added on first use. If ``fn`` raises, the value is still
        signalled (so waiters wake) but recorded as failed, waiters get
        :class:`ExecutionError`, and the error propagates here (wrapped in
        ``ExecutionError`` unless it already is an svod_min error).
        """
        ctx = self.add_device(device)
        value = ctx.next_timeline()
        try:
            fn()
        except BaseException as exc:
            ctx.signal_failure(value, exc)
            _reraise(exc, "kernel on %s (timeline value %d) failed" % (ctx.device, value))
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
        already reserved on the source device.
        """
        if src.nbytes != dst.nbytes:
            raise BufferAllocationError(
                "transfer size mismatch: source has %d bytes, destination %d bytes" % (src.nbytes, dst.nbytes)
            )
        src_ctx, dst_ctx = self.add_device(src_device), self.add_device(dst_device)
        strategy = _sync_strategy(src_ctx.device, dst_ctx.device)
        pending = src_ctx.last_reserved  # read before reserving: same-device would wait on itself
        value = dst_ctx.next_timeline()
        try:
            if strategy is SyncStrategy.NONE:
                _copy_direct(src, dst, dst_ctx)
            else:
                src_ctx.wait_for(pending, timeout)
                _copy_cross(src, dst, dst_ctx, strategy)
        except BaseException as exc:
            dst_ctx.signal_failure(value, exc)
            _reraise(exc, "transfer %s -> %s (timeline value %d) failed" % (src_ctx.device, dst_ctx.device, value))
        dst_ctx.signal_completion(value)
        return value

    def synchronize_all(self, timeout: Optional[float] = None) -> None:
        """Wait for every value reserved so far on every device (``timeout`` is the total)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            contexts = list(self._contexts.values())
        for ctx in contexts:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ctx.wait_for(ctx.last_reserved, left)
            _device_sync(ctx.device_handle)


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


def _copy_direct(src: Any, dst: Any, ctx: DeviceContext) -> None:
    """Same device: a memmove on the host (overlap-safe), else the device's copy, else bytes."""
    if not src.nbytes:
        return
    src_addr, dst_addr = getattr(src, "address", None), getattr(dst, "address", None)
    # Only CPU addresses are host pointers; a GPU's ``address`` must never reach memmove.
    if ctx.device.kind == "CPU" and isinstance(src_addr, int) and isinstance(dst_addr, int):
        ctypes.memmove(dst_addr, src_addr, src.nbytes)
        return
    copy = getattr(ctx.device_handle, "copy", None)
    if callable(copy):
        copy(dst, src)
    else:
        dst.copyin(src.copyout())
    _device_sync(ctx.device_handle)


def _copy_cross(src: Any, dst: Any, dst_ctx: DeviceContext, strategy: SyncStrategy) -> None:
    peer = getattr(getattr(dst, "device", None), "copy_from_peer", None)
    if strategy is SyncStrategy.PEER_TO_PEER and callable(peer):
        peer(dst, src)
    else:
        dst.copyin(src.copyout())  # host-staged: device -> host bytes -> device
    _device_sync(dst_ctx.device_handle)  # the copy must have landed before we signal


def _device_sync(handle: Any) -> None:
    sync = getattr(handle, "synchronize", None)
    if callable(sync):
        sync()


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
