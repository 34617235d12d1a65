"""One device's timeline: values reserved in order, completed in order, on the host or by device events.

* :class:`TimelineSignal` is a real condition-variable timeline: a u64 that
  only grows, and threads block in :meth:`TimelineSignal.wait` until it
  reaches a value.
* :class:`DeviceContext` reserves timeline values and completes them **in
  order**: if op 2 finishes before op 1 the signal stays at 0 until op 1 is
  done, so reaching ``v`` always means every op ``<= v`` finished. A failed op still advances the
  timeline, so waiters never hang, but it is recorded and :meth:`DeviceContext.wait_for`
  raises :class:`ExecutionError` instead of reporting success.
* On a device that queues its work (CUDA) a value completes through an event
  recorded on the device's stream: :meth:`DeviceContext.wait_for`
  synchronizes the events (or polls them when given a timeout) and
  :attr:`DeviceContext.current_value` queries them without blocking. Events
  come from a small per-device pool and go back to it when their value
  retires; at most ``_MAX_PENDING_EVENTS`` values are in flight per device.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from ..devices.spec import DeviceSpec, as_spec
from ..error import ExecutionError

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
        value, timeout = _check_u64(value), check_timeout(timeout)
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


def check_timeout(timeout: Optional[float]) -> Optional[float]:
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
            pool.record(event)
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
        return self._require_events().query(event)

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
            self._require_events().synchronize(event)
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
        timeout = check_timeout(timeout)
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
    """Sync-only events of one device, reused: a retired value gives its event back (an event makes
    its device current itself: waiters and pollers run on threads that never launched on it)."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._free: List[Any] = []
        self._lock = threading.Lock()

    def acquire(self) -> Any:
        with self._lock:
            if self._free:
                return self._free.pop()
        return self._make()

    def record(self, event: Any) -> None:
        """Mark the current end of the device's queue."""
        event.record()

    def query(self, event: Any) -> bool:
        """Whether the queue reached the event; never blocks."""
        return bool(event.query())

    def synchronize(self, event: Any) -> None:
        """Block until the queue reached the event."""
        event.synchronize()

    def release(self, event: Any) -> None:
        # Never destroyed here: another thread may still be polling it (reuse is harmless, see _retire).
        with self._lock:
            self._free.append(event)


def _event_pool_for(handle: Any) -> Optional[_EventPool]:
    """An event pool when ``handle`` queues its work (a CUDA device), else None (work completes on the host).

    Events come from the device's ``new_event(timing=False)`` (sync-only: cheaper to record); a
    device that does not queue its work (``queues_work`` False) needs none.
    """
    if handle is None or not handle.queues_work:
        return None
    return _EventPool(lambda: handle.new_event(timing=False))


__all__ = ["U64_MAX", "DeviceContext", "TimelineSignal", "check_timeout"]
