"""Which ops of a level are too small to hand to the host pool: measured, not guessed.

Handing an op to the pool costs a worker wake-up and a join, many times
what a tiny kernel takes to run. Declared work says little (many kernels
declare none), so the Python replay path measures instead: during the first
:data:`MEASURED_REPLAYS` replays of a plan each op is timed where it runs
(its group still spread over the pool); after them, ops whose best time is
below the pool's measured round trip (the grain) run on the calling thread
and only the others are handed to the pool.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, List, Optional

#: Replays timed op by op before the split is fixed.
MEASURED_REPLAYS = 2
_ROUND_TRIPS = 15
_lock = threading.Lock()
_grain_ns: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()


def _noop() -> None:
    return None


def pool_grain_ns(pool: Any) -> int:
    """Median nanoseconds to hand a no-op to ``pool`` and get it back (measured once per pool)."""
    with _lock:
        known = _grain_ns.get(pool)
    if known is not None:
        return known
    pool.submit(_noop).result()  # a worker started, as it will be during replays
    trips = []
    for _ in range(_ROUND_TRIPS):
        t0 = time.perf_counter_ns()
        pool.submit(_noop).result()
        trips.append(time.perf_counter_ns() - t0)
    import statistics  # here: measured once per pool, and the module costs ~4 ms of every start

    grain = int(statistics.median(trips))
    with _lock:
        _grain_ns[pool] = grain
    return grain


class GrainSplit:
    """Per op: its best measured time, then whether it runs on the calling thread."""

    def __init__(self, count: int) -> None:
        self.best_ns: List[Optional[int]] = [None] * count
        self.inline: List[bool] = [False] * count
        self.replays = 0

    @property
    def measuring(self) -> bool:
        return self.replays < MEASURED_REPLAYS

    def record(self, index: int, ns: int) -> None:
        best = self.best_ns[index]
        self.best_ns[index] = ns if best is None or ns < best else best

    def replay_done(self, pool: Optional[Any]) -> None:
        """Count a measured replay; after the last one, fix the split against ``pool``'s grain."""
        self.replays += 1
        if self.replays < MEASURED_REPLAYS or pool is None:
            return
        grain = pool_grain_ns(pool)
        self.inline = [best is not None and best < grain for best in self.best_ns]


__all__ = ["MEASURED_REPLAYS", "GrainSplit", "pool_grain_ns"]
