"""The in-process kernel cache: an LRU map ``key -> compiled thing``.

Concurrent misses on one key compile **once** (the others wait for the
leader); a failure is handed to every waiter and not cached. Bounded, so
evicted kernels (and their executable pages) can be freed.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple, TypeVar

from ..error import CacheError

T = TypeVar("T")

_MISSING = object()


class _InFlight:
    """One running compile that other threads can wait on."""

    __slots__ = ("done", "value", "error", "retry", "owner")

    def __init__(self, owner: int) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.retry = False  # leader was interrupted (KeyboardInterrupt...): waiters compile themselves
        self.owner = owner


@dataclass(frozen=True)
class KernelCacheStats:
    """Counters since construction (``clear`` keeps them)."""

    hits: int
    misses: int
    compiles: int
    failures: int
    waits: int  # callers that found the key being compiled and waited for it
    evictions: int
    entries: int


class KernelCache:
    """Thread-safe LRU cache whose misses compile once per key.

    ``max_entries=None`` is unbounded; ``0`` keeps nothing and only
    de-duplicates concurrent compiles.
    """

    def __init__(self, max_entries: Optional[int] = 4096) -> None:
        if max_entries is not None and max_entries < 0:
            raise CacheError("max_entries must be >= 0 or None, got %r" % (max_entries,))
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._inflight: Dict[Hashable, _InFlight] = {}
        self._counts = dict(hits=0, misses=0, compiles=0, failures=0, waits=0, evictions=0)

    def get_or_compile(self, key: Hashable, compile_fn: Callable[[], T]) -> T:
        """The cached value for ``key``, compiling it with ``compile_fn`` on a miss.

        ``compile_fn`` runs outside the lock. Threads that miss while it runs
        wait and receive the same object, or the same exception.
        """
        while True:
            found, flight, leader = self._claim(key)
            if found is not _MISSING:
                return found  # type: ignore[return-value]
            assert flight is not None
            if leader:
                return self._run(key, flight, compile_fn)
            value = self._wait(flight)
            if value is not _MISSING:
                return value  # type: ignore[return-value]

    def _claim(self, key: Hashable) -> Tuple[Any, Optional[_InFlight], bool]:
        with self._lock:
            value = self._entries.get(key, _MISSING)
            if value is not _MISSING:
                self._entries.move_to_end(key)
                self._counts["hits"] += 1
                return value, None, False
            flight = self._inflight.get(key)
            if flight is None:
                flight = self._inflight[key] = _InFlight(threading.get_ident())
                self._counts["misses"] += 1
                return _MISSING, flight, True
            if flight.owner == threading.get_ident():
                # Waiting on ourselves would deadlock.
                raise CacheError("recursive compile of cache key %r" % (key,))
            self._counts["waits"] += 1
            return _MISSING, flight, False

    def _run(self, key: Hashable, flight: _InFlight, compile_fn: Callable[[], T]) -> T:
        try:
            value = compile_fn()
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(key, None)
                self._counts["failures"] += 1
            if isinstance(exc, Exception):
                flight.error = exc
            else:
                flight.retry = True
            flight.done.set()
            raise
        flight.value = value
        with self._lock:
            self._inflight.pop(key, None)
            self._counts["compiles"] += 1
            evicted = self._store(key, value)
        flight.done.set()
        del evicted  # dropped outside the lock: finalisers may be slow or re-enter
        return value

    def _store(self, key: Hashable, value: Any) -> List[Any]:
        """Insert under the lock; returns the evicted values."""
        if self.max_entries == 0:
            return []
        self._entries[key] = value
        self._entries.move_to_end(key)
        evicted: List[Any] = []
        while self.max_entries is not None and len(self._entries) > self.max_entries:
            evicted.append(self._entries.popitem(last=False)[1])
            self._counts["evictions"] += 1
        return evicted

    @staticmethod
    def _wait(flight: _InFlight) -> Any:
        flight.done.wait()
        if flight.error is not None:
            raise flight.error
        return _MISSING if flight.retry else flight.value

    def get(self, key: Hashable, default: Any = None) -> Any:
        """Peek without compiling (does not touch LRU order or stats)."""
        with self._lock:
            return self._entries.get(key, default)

    def discard(self, key: Hashable) -> bool:
        """Drop one entry; True if it was present."""
        with self._lock:
            value = self._entries.pop(key, _MISSING)
        return value is not _MISSING

    def clear(self) -> None:
        """Drop every entry (compiles in flight still deliver to their waiters)."""
        with self._lock:
            old = self._entries
            self._entries = OrderedDict()
        old.clear()  # outside the lock, for the same reason as in _run

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    @property
    def stats(self) -> KernelCacheStats:
        with self._lock:
            return KernelCacheStats(entries=len(self._entries), **self._counts)


#: Process-wide cache of loaded kernels.
GLOBAL_KERNEL_CACHE = KernelCache(max_entries=4096)


def get_or_compile_kernel(key: Hashable, compile_fn: Callable[[], T]) -> T:
    """:meth:`KernelCache.get_or_compile` on :data:`GLOBAL_KERNEL_CACHE`."""
    return GLOBAL_KERNEL_CACHE.get_or_compile(key, compile_fn)


__all__ = ["GLOBAL_KERNEL_CACHE", "KernelCache", "KernelCacheStats", "get_or_compile_kernel"]
