"""Kernel benchmarking: warm-up, timed runs, statistics, clock warm-up, round robin.

svod's benchmark module - :class:`BenchmarkConfig`, :class:`BenchmarkResult`,
:func:`benchmark_kernel`, :func:`warm_clock`, :func:`round_robin_min`,
:func:`warmup_thread_pool` - with the same semantics, plus what svod lacks:
median, standard deviation and maximum over the runs, and a cache flush sized
from this machine's last-level cache instead of a fixed 16 MiB.

All times are seconds (floats). Nothing here asserts on timings: callers
compare results, tests drive the logic with fake clocks and programs.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import glob
import inspect
import logging
import math
import mmap
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..error import CompilationError, ConfigError, DeviceError, ExecutionError, LoaderError

log = logging.getLogger("svod_min.perf.benchmark")

#: Default clock warm-up (svod's ``CLOCK_WARMUP``): a device idling at a low
#: clock needs about a second of load before a timing means anything.
CLOCK_WARMUP_S = 1.5
#: Dispatches per plateau check in :func:`warm_clock`.
WARM_WINDOW = 8
#: The least a clock warm-up runs, so a cold device's first flat window does not end it.
WARM_FLOOR_S = 0.050
#: A window whose minimum is no longer 5% below the previous one is a plateau.
PLATEAU_RATIO = 0.95
#: Cache-flush buffer bounds; the size is twice the last-level cache within them.
FLUSH_MIN_BYTES = 32 << 20
FLUSH_MAX_BYTES = 256 << 20
CACHE_LINE = 64

_now = time.perf_counter  # module attribute so tests can substitute a fake clock


# --- configuration and result ---------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # True is not a run count


@dataclass
class BenchmarkConfig:
    """How :func:`benchmark_kernel` measures (svod's defaults: min of 3, no warm-up).

    ``early_stop``: stop once the best run so far is slower than this many
    seconds (a tuner's candidate already worse than the best). ``clear_l2``:
    flush the caches before every timed run but the first. ``warmup_budget``:
    seconds of :func:`warm_clock` before the counted warm-ups;
    ``clock_warmup`` asks for the default :data:`CLOCK_WARMUP_S` when no
    budget is given.
    """

    warmup_runs: int = 0
    timing_runs: int = 3
    take_minimum: bool = True
    early_stop: Optional[float] = None
    clear_l2: bool = False
    warmup_budget: Optional[float] = None
    clock_warmup: bool = False

    def __post_init__(self) -> None:
        for name, least in (("warmup_runs", 0), ("timing_runs", 1)):
            value = getattr(self, name)
            if not _is_int(value) or value < least:
                raise ConfigError("%s must be an int >= %d, got %r" % (name, least, value))
        for name in ("early_stop", "warmup_budget"):
            value = getattr(self, name)
            if value is not None and not (
                isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
            ):
                raise ConfigError("%s must be seconds >= 0 or None, got %r" % (name, value))  # nan fails >= 0

    @property
    def clock_budget(self) -> Optional[float]:
        """Seconds of clock warm-up to run first, or None for none."""
        if self.warmup_budget is not None:
            return float(self.warmup_budget)
        return CLOCK_WARMUP_S if self.clock_warmup else None


@dataclass
class BenchmarkResult:
    """Every timed run in seconds, and statistics over them (0.0 when there are none)."""

    runs: List[float] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.runs)

    @property
    def min(self) -> float:
        return min(self.runs) if self.runs else 0.0

    @property
    def max(self) -> float:
        return max(self.runs) if self.runs else 0.0

    @property
    def mean(self) -> float:
        return math.fsum(self.runs) / len(self.runs) if self.runs else 0.0

    @property
    def median(self) -> float:
        return float(statistics.median(self.runs)) if self.runs else 0.0

    @property
    def stdev(self) -> float:
        """Sample standard deviation (n - 1); 0.0 for fewer than two runs."""
        return statistics.stdev(self.runs) if len(self.runs) > 1 else 0.0

    def timing(self, take_minimum: bool = True) -> float:
        """The minimum (``take_minimum``) or the mean, as svod's ``timing``."""
        return self.min if take_minimum else self.mean

    def summary(self) -> Dict[str, float]:
        """All statistics by name, in seconds (``runs`` is the count)."""
        return {
            "runs": float(len(self.runs)),
            "min": self.min,
            "median": self.median,
            "mean": self.mean,
            "stdev": self.stdev,
            "max": self.max,
        }


# --- clock warm-up and round robin ----------------------------------------------


def _attempt(fn: Callable[[], Optional[float]]) -> Optional[float]:
    """``fn()``'s time, or None when it fails (returns None or raises)."""
    try:
        return fn()
    except Exception as exc:  # a failing candidate is data, not a crash
        log.debug("benchmark run failed: %s", exc)
        return None


def warm_clock(
    fn: Callable[[], Optional[float]],
    budget_s: float = CLOCK_WARMUP_S,
    *,
    clock: Optional[Callable[[], float]] = None,
) -> int:
    """Run ``fn`` back to back until its time plateaus, it fails, or ``budget_s`` passes.

    ``fn`` returns one run's seconds (None or an exception: failure, which
    stops the warm-up at once). Every :data:`WARM_WINDOW` runs the window's
    minimum is compared with the previous window's: once it is no longer
    5% faster, and at least :data:`WARM_FLOOR_S` has passed, the clock is
    up. Returns how many times ``fn`` was called.
    """
    now = clock or _now
    start = now()
    previous = current = math.inf
    calls = 0
    while now() - start < budget_s:
        calls += 1
        t = _attempt(fn)
        if t is None:
            return calls
        current = min(current, t)
        if calls % WARM_WINDOW == 0:
            if current >= previous * PLATEAU_RATIO and now() - start >= WARM_FLOOR_S:
                return calls
            previous, current = current, math.inf
    return calls


def round_robin_min(candidates: Sequence[Callable[[], Optional[float]]], rounds: int) -> List[Optional[float]]:
    """Each candidate's minimum over ``rounds`` rounds of timing every candidate in turn.

    Interleaving means none is judged at a clock the others were not. A
    candidate that fails (returns None or raises) is dropped for good and
    reports None.
    """
    best: List[Optional[float]] = [None] * len(candidates)
    dead = [False] * len(candidates)
    for _ in range(rounds):
        for i, candidate in enumerate(candidates):
            if dead[i]:
                continue
            t = _attempt(candidate)
            if t is None:
                dead[i], best[i] = True, None
                continue
            previous = best[i]
            best[i] = t if previous is None else min(previous, t)
    return best


# --- cache flush ----------------------------------------------------------------

_FLUSH_SOURCE = """
unsigned long svod_flush(const volatile unsigned char* p, long n, long stride) {
    unsigned long acc = 0;
    for (long i = 0; i < n; i += stride) acc += p[i];
    return acc;
}
"""


def last_level_cache_bytes() -> Optional[int]:
    """Size of this machine's largest CPU cache from sysfs (None when unknown)."""
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as fh:
                text = fh.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes) if sizes else None


def flush_bytes() -> int:
    """Bytes a flush streams through: twice the LLC, within [32 MiB, 256 MiB]."""
    llc = last_level_cache_bytes() or 0
    return max(FLUSH_MIN_BYTES, min(FLUSH_MAX_BYTES, 2 * llc))


class CacheFlusher:
    """Evicts the CPU caches by reading one byte per cache line of a large buffer.

    The read loop is a C kernel compiled and loaded through svod_min; without
    a compiler (or loader) a strided ``memoryview`` copy does the same reads.
    """

    def __init__(self, nbytes: Optional[int] = None) -> None:
        self.nbytes = nbytes or flush_bytes()
        self._mm = mmap.mmap(-1, self.nbytes, flags=mmap.MAP_PRIVATE)
        chunk = b"\x01" * (1 << 20)
        for offset in range(0, self.nbytes, len(chunk)):  # back every page: untouched ones
            self._mm.write(chunk[: self.nbytes - offset])  # all map the one (cached) zero page
        self._anchor = ctypes.c_char.from_buffer(self._mm)
        self._fn: Optional[Callable[..., int]] = None
        self._loaded: Any = None
        self.method = "python"
        self._load_kernel()

    def _load_kernel(self) -> None:
        from ..cache.kernel_cache import compile_cached
        from ..jit_loader import load_object

        try:
            self._loaded = load_object(compile_cached(_FLUSH_SOURCE))
            self._fn = self._loaded.function(
                "svod_flush", ctypes.c_ulong, ctypes.c_void_p, ctypes.c_long, ctypes.c_long
            )
            self.method = "kernel"
        except (CompilationError, LoaderError) as exc:
            log.debug("cache flush falls back to Python: %s", exc)

    def __call__(self) -> int:
        """Read one byte per line; returns their sum (= lines read, every byte is 1)."""
        if self._fn is not None:
            return int(self._fn(ctypes.addressof(self._anchor), self.nbytes, CACHE_LINE))
        view = memoryview(self._mm)
        try:
            return view[::CACHE_LINE].tobytes().count(1)
        finally:
            view.release()


_flusher: Optional[CacheFlusher] = None
_flusher_lock = threading.Lock()


def flush_caches() -> None:
    """Evict L1/L2/LLC (the shared flusher is built on first use)."""
    global _flusher
    if _flusher is None:
        with _flusher_lock:
            if _flusher is None:
                _flusher = CacheFlusher()
    _flusher()


# --- benchmark_kernel -------------------------------------------------------------


def _size_kwargs(
    fn: Callable[..., Any], global_size: Optional[Sequence[int]], local_size: Optional[Sequence[int]]
) -> Dict[str, Any]:
    """Launch-size keywords ``fn`` accepts (a CPU program has no ``local_size``)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    out: Dict[str, Any] = {}
    for name, value in (("global_size", global_size), ("local_size", local_size)):
        if value is not None and (takes_any or name in params):
            out[name] = value
    return out


class _Dispatch:
    """One program with fixed arguments: ``run()`` and ``timed()`` (seconds)."""

    def __init__(self, program: Any, buffers: Sequence[Any], vals: Sequence[int], gs: Any, ls: Any) -> None:
        self.buffers, self.vals = buffers, vals
        self._execute = program.execute
        self._exec_kw = _size_kwargs(self._execute, gs, ls)
        self._timed = getattr(program, "execute_timed", None)
        self._timed_kw = _size_kwargs(self._timed, gs, ls) if self._timed is not None else {}

    def run(self) -> None:
        self._execute(self.buffers, self.vals, **self._exec_kw)

    def wall(self) -> float:
        start = _now()
        self.run()
        return _now() - start

    def timed(self) -> float:
        """The program's own timing when it has one, else the wall clock around ``execute``."""
        if self._timed is None:
            return self.wall()
        start = _now()
        stamped = self._timed(self.buffers, self.vals, **self._timed_kw)
        return float(stamped) if stamped is not None else _now() - start


def benchmark_kernel(
    program: Any,
    buffers: Sequence[Any],
    vals: Sequence[int] = (),
    global_size: Optional[Sequence[int]] = None,
    local_size: Optional[Sequence[int]] = None,
    config: Optional[BenchmarkConfig] = None,
) -> BenchmarkResult:
    """Time ``program`` on ``buffers``/``vals``: clock warm-up, warm-ups, then timed runs.

    ``program`` needs ``execute(buffers, vals, ...)``; ``execute_timed`` is
    used for the timed runs when present (its seconds, or wall time when it
    returns None). Errors of warm-up and timed runs propagate; a failure
    during the clock warm-up only ends the warm-up.
    """
    config = BenchmarkConfig() if config is None else config
    if not isinstance(config, BenchmarkConfig):
        raise ExecutionError("config must be a BenchmarkConfig, got %s" % type(config).__name__)
    if not callable(getattr(program, "execute", None)):
        raise ExecutionError("cannot benchmark %s: it has no execute(buffers, vals, ...)" % type(program).__name__)
    dispatch = _Dispatch(program, buffers, vals, global_size, local_size)
    budget = config.clock_budget
    if budget is not None:
        warm_clock(dispatch.wall, budget)
    for _ in range(config.warmup_runs):
        dispatch.run()
    runs: List[float] = []
    for i in range(config.timing_runs):
        if config.clear_l2 and i > 0:
            flush_caches()
        runs.append(dispatch.timed())
        if config.early_stop is not None and min(runs) > config.early_stop:
            break  # even its best run loses to the threshold
    return BenchmarkResult(runs)


# --- thread pool ------------------------------------------------------------------


def warmup_thread_pool(device: Any = None) -> int:
    """Start every worker of a device's host pool now (default: the default CPU device's pool).

    The first parallel kernel then does not pay for thread creation inside a
    timing. Returns the device's thread count.
    """
    from ..devices.cpu.device import create_cpu_device, ensure_thread_pool

    if device is None:
        ensure_thread_pool()
        return create_cpu_device().threads
    try:  # the Device slots; anything without them is not a device
        threads, pool = device.threads, device.host_pool()
    except AttributeError:
        threads, pool = None, None
    if not _is_int(threads) or threads < 1:
        raise DeviceError(
            "warmup_thread_pool needs a CPU device (threads >= 1 and host_pool()), got %s" % type(device).__name__
        )
    if pool is not None:  # None: one thread, or called on one of the pool's own workers
        _touch_workers(pool, threads)
    return int(threads)


def _touch_workers(pool: Any, n: int) -> None:
    # n tasks that wait for each other force n distinct threads into existence.
    barrier = threading.Barrier(n)

    def wait() -> None:
        try:
            barrier.wait(timeout=2.0)
        except threading.BrokenBarrierError:
            pass  # pool busy (or we are one of its workers): warming is best effort

    concurrent.futures.wait([pool.submit(wait) for _ in range(n)], timeout=5.0)


__all__ = [
    "BenchmarkConfig",
    "BenchmarkResult",
    "CLOCK_WARMUP_S",
    "CacheFlusher",
    "benchmark_kernel",
    "flush_bytes",
    "flush_caches",
    "last_level_cache_bytes",
    "round_robin_min",
    "warm_clock",
    "warmup_thread_pool",
]
