"""svod_min.perf.benchmark: svod's benchmark tests, ported, plus statistics and the cache flush.

Every timing here comes from a fake program or a fake clock: no assertion
depends on how fast this machine happens to be.
"""

from __future__ import annotations

import random
import statistics
from types import SimpleNamespace
from typing import Any, List, Optional

import pytest
from conftest import needs_cc

from svod_min.error import CompilationError, ConfigError, DeviceError, ExecutionError
from svod_min.perf import benchmark as bm
from svod_min.perf.benchmark import BenchmarkConfig, BenchmarkResult, benchmark_kernel, round_robin_min, warm_clock


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(bm, "_now", fake)
    return fake


class StampedProgram:
    """A program whose own timer reports ``times`` in turn (svod's GPU-stamped kernel)."""

    def __init__(self, times: List[float], clock: Optional[FakeClock] = None, wall: float = 0.005) -> None:
        self.times, self.clock, self.wall = list(times), clock, wall
        self.executes = 0
        self.timed_calls: List[tuple] = []

    def execute(self, buffers, vals=(), *, global_size=None):
        self.executes += 1
        if self.clock is not None:
            self.clock.advance(self.wall)

    def execute_timed(self, buffers, vals=(), *, global_size=None):
        self.execute(buffers, vals, global_size=global_size)
        self.timed_calls.append((tuple(buffers), tuple(vals), global_size))
        return self.times[(len(self.timed_calls) - 1) % len(self.times)]


class WallProgram:
    """No ``execute_timed``: each run takes ``seconds`` of the fake clock."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self.clock, self.seconds, self.calls = clock, seconds, []

    def execute(self, buffers, vals, *, global_size=None, local_size=None):
        self.calls.append((global_size, local_size))
        self.clock.advance(self.seconds)


# --- svod's benchmark tests ----------------------------------------------------------


def test_benchmark_basic() -> None:
    prog = StampedProgram([300e-6, 100e-6, 200e-6])
    result = benchmark_kernel(prog, [], [], config=BenchmarkConfig(warmup_runs=1, timing_runs=3))
    assert len(result.runs) == 3
    assert result.min == 100e-6
    assert result.min <= result.mean
    assert prog.executes == 4  # one warm-up, three timed


def test_benchmark_early_stop() -> None:
    prog = StampedProgram([0.010])
    result = benchmark_kernel(prog, [], [], config=BenchmarkConfig(timing_runs=5, early_stop=100e-6))
    assert len(result.runs) == 1  # the first run already exceeds the threshold


def test_benchmark_early_stop_passes_under_cutoff() -> None:
    cutoff = 0.100
    prog = StampedProgram([50e-6])
    config = BenchmarkConfig(early_stop=cutoff * 3)
    result = benchmark_kernel(prog, [], [], config=config)
    assert len(result.runs) == config.timing_runs == 3
    assert result.min < cutoff


def test_benchmark_early_stop_aborts_over_cutoff() -> None:
    cutoff = 100e-6
    result = benchmark_kernel(StampedProgram([0.010]), [], [], config=BenchmarkConfig(early_stop=cutoff * 3))
    assert len(result.runs) == 1
    assert result.min > cutoff * 3


def test_early_stop_uses_the_best_run_not_the_last() -> None:
    # One slow outlier after a fast run must not disqualify the candidate.
    prog = StampedProgram([10e-6, 0.5, 20e-6, 30e-6])
    result = benchmark_kernel(prog, [], [], config=BenchmarkConfig(timing_runs=4, early_stop=0.001))
    assert result.runs == [10e-6, 0.5, 20e-6, 30e-6]


def test_benchmark_prefers_the_programs_own_timing(clock: FakeClock) -> None:
    prog = StampedProgram([7e-6], clock=clock, wall=0.005)
    result = benchmark_kernel(prog, [], [])
    assert result.runs == [7e-6, 7e-6, 7e-6]


def test_warm_clock_stops_on_failure() -> None:
    calls = []

    def run() -> Optional[float]:
        calls.append(1)
        return 1e-6 if len(calls) < 3 else None

    assert warm_clock(run, 10.0) == 3
    assert len(calls) == 3, "stops at the first failure"


def test_warm_clock_stops_on_an_exception() -> None:
    calls = []

    def run() -> float:
        calls.append(1)
        if len(calls) == 3:
            raise ExecutionError("boom")
        return 1e-6

    warm_clock(run, 10.0)
    assert len(calls) == 3


def _warm(clock: FakeClock, budget: float, times) -> tuple:
    runs = [0]

    def run() -> float:
        runs[0] += 1
        clock.advance(0.001)
        return times(runs[0])

    warm_clock(run, budget, clock=clock)
    return runs[0], clock.t


def test_warm_clock_runs_out_the_budget_while_the_time_falls() -> None:
    runs, elapsed = _warm(FakeClock(), 0.100, lambda n: 0.01 * 0.85 ** (n // 8))
    assert elapsed >= 0.100, "a falling time runs out the budget"
    assert runs == pytest.approx(100, abs=1)


def test_warm_clock_ends_at_a_plateau_within_the_budget() -> None:
    # Cold for the first 32 runs, flat after: released after the floor, once two windows agree.
    runs, elapsed = _warm(FakeClock(), 10.0, lambda n: (300 - 8 * n) * 1e-6 if n <= 32 else 40e-6)
    assert 0.050 <= elapsed < 0.500, elapsed
    assert runs >= 48, "at least the floor's runs and two flat windows: %d" % runs


def test_warm_clock_warm_from_the_start_pays_only_the_floor() -> None:
    runs, elapsed = _warm(FakeClock(), 10.0, lambda n: 40e-6)
    assert 0.050 <= elapsed < 0.300, elapsed
    assert runs == 56  # the first window boundary past the 50 ms floor


def test_warm_clock_zero_budget_runs_nothing() -> None:
    assert warm_clock(lambda: 1.0, 0.0) == 0


def test_round_robin_keeps_each_candidate_minimum_and_drops_failures() -> None:
    calls: List[int] = []

    def candidate(i: int):
        def run() -> float:
            calls.append(i)
            n = len(calls)
            if i == 1:
                raise CompilationError("candidate 1 does not build")
            return (10 - n) * 1e-6 if i == 0 else (20 + n) * 1e-6

        return run

    best = round_robin_min([candidate(0), candidate(1), candidate(2)], 2)
    assert calls == [0, 1, 2, 0, 2], "candidate 1 is not retried after failing"
    assert best == [pytest.approx(6e-6), None, pytest.approx(23e-6)]


def test_round_robin_none_is_a_failure_too() -> None:
    assert round_robin_min([lambda: None, lambda: 2.0], 3) == [None, 2.0]
    assert round_robin_min([], 3) == []


# --- statistics -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 8, 101])
def test_statistics_match_the_statistics_module(n: int) -> None:
    rng = random.Random(n)
    runs = [rng.uniform(1e-6, 1e-3) for _ in range(n)]
    result = BenchmarkResult(runs)
    assert result.min == min(runs) and result.max == max(runs)
    assert result.mean == pytest.approx(statistics.mean(runs), rel=1e-12)
    assert result.median == pytest.approx(statistics.median(runs), rel=1e-12)
    expect_stdev = statistics.stdev(runs) if n > 1 else 0.0
    assert result.stdev == pytest.approx(expect_stdev, rel=1e-9, abs=1e-18)
    assert result.timing(True) == result.min and result.timing(False) == result.mean
    assert result.summary()["runs"] == n and len(result) == n


def test_even_median_averages_the_middle_pair() -> None:
    assert BenchmarkResult([4.0, 1.0, 3.0, 2.0]).median == 2.5


def test_empty_result_is_all_zero() -> None:
    result = BenchmarkResult()
    assert (result.min, result.max, result.mean, result.median, result.stdev) == (0.0,) * 5


# --- configuration and dispatch -------------------------------------------------------------


def test_config_defaults_are_svods() -> None:
    c = BenchmarkConfig()
    assert (c.warmup_runs, c.timing_runs, c.take_minimum, c.early_stop, c.clear_l2, c.warmup_budget) == (
        0,
        3,
        True,
        None,
        False,
        None,
    )
    assert c.clock_budget is None
    assert BenchmarkConfig(clock_warmup=True).clock_budget == bm.CLOCK_WARMUP_S
    assert BenchmarkConfig(warmup_budget=0.2, clock_warmup=True).clock_budget == 0.2


@pytest.mark.parametrize(
    "kwargs", [dict(timing_runs=0), dict(warmup_runs=-1), dict(early_stop=-1.0), dict(warmup_budget="1s")]
)
def test_config_rejects_nonsense(kwargs) -> None:
    with pytest.raises(ConfigError):
        BenchmarkConfig(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(timing_runs=True),
        dict(warmup_runs=False),
        dict(early_stop=float("nan")),
        dict(early_stop=True),
        dict(warmup_budget=float("nan")),
    ],
)
def test_config_refuses_bools_and_nan(kwargs: Any) -> None:
    with pytest.raises(ConfigError, match="must be"):
        BenchmarkConfig(**kwargs)


@pytest.mark.parametrize("device", [object(), SimpleNamespace(threads=2), SimpleNamespace(threads=True, pool=None)])
def test_warmup_thread_pool_refuses_what_is_not_a_cpu_device(device: Any) -> None:
    with pytest.raises(DeviceError, match="warmup_thread_pool needs a CPU device"):
        bm.warmup_thread_pool(device)  # was AttributeError: no attribute 'pool'


def test_wall_time_without_execute_timed(clock: FakeClock) -> None:
    prog = WallProgram(clock, 0.002)
    result = benchmark_kernel(prog, [], [], global_size=(4, 1, 1), local_size=(1, 1, 1))
    assert result.runs == [pytest.approx(0.002)] * 3
    assert prog.calls == [((4, 1, 1), (1, 1, 1))] * 3


def test_sizes_reach_the_program_only_as_accepted() -> None:
    prog = StampedProgram([1e-6])  # takes global_size, not local_size (like CpuProgram)
    benchmark_kernel(prog, ["b0"], [5], global_size=(2, 1, 1), local_size=(8, 1, 1))
    assert prog.timed_calls == [(("b0",), (5,), (2, 1, 1))] * 3


def test_warmup_budget_runs_the_clock_warmup_first(clock: FakeClock) -> None:
    prog = StampedProgram([1e-6], clock=clock, wall=0.001)
    benchmark_kernel(prog, [], [], config=BenchmarkConfig(warmup_budget=10.0, warmup_runs=2))
    assert prog.executes == 56 + 2 + 3  # plateau at the floor, then warm-ups, then timed runs


def test_errors_in_timed_runs_propagate() -> None:
    class Broken:
        def execute(self, buffers, vals):
            raise ExecutionError("kernel exploded")

    with pytest.raises(ExecutionError, match="exploded"):
        benchmark_kernel(Broken(), [], [])


def test_clear_l2_flushes_before_every_run_but_the_first(monkeypatch) -> None:
    events: List[str] = []
    monkeypatch.setattr(bm, "flush_caches", lambda: events.append("flush"))

    class Recording(StampedProgram):
        def execute_timed(self, buffers, vals=(), *, global_size=None):
            events.append("run")
            return super().execute_timed(buffers, vals, global_size=global_size)

    benchmark_kernel(Recording([1e-6]), [], [], config=BenchmarkConfig(timing_runs=3, clear_l2=True))
    assert events == ["run", "flush", "run", "flush", "run"]


# --- cache flush and thread pool ---------------------------------------------------------------


def test_flush_size_covers_the_last_level_cache() -> None:
    llc = bm.last_level_cache_bytes()
    size = bm.flush_bytes()
    assert bm.FLUSH_MIN_BYTES <= size <= bm.FLUSH_MAX_BYTES
    if llc is not None and 2 * llc <= bm.FLUSH_MAX_BYTES:
        assert size >= 2 * llc


@needs_cc
def test_flusher_reads_every_line_with_a_compiled_kernel() -> None:
    flusher = bm.CacheFlusher(1 << 20)
    assert flusher.method == "kernel"
    assert flusher() == (1 << 20) // bm.CACHE_LINE


def test_flusher_falls_back_to_python_without_a_compiler(monkeypatch) -> None:
    from svod_min.cache import kernel_cache

    def no_compiler(*args, **kwargs):
        raise CompilationError("no compiler here")

    monkeypatch.setattr(kernel_cache, "compile_cached", no_compiler)
    flusher = bm.CacheFlusher(1 << 20)
    assert flusher.method == "python"
    assert flusher() == (1 << 20) // bm.CACHE_LINE


def test_warmup_thread_pool_starts_every_worker() -> None:
    from svod_min.devices.cpu.device import CpuDevice

    dev = CpuDevice(threads=3)
    try:
        assert bm.warmup_thread_pool(dev) == 3
        assert len(dev.pool._threads) == 3
    finally:
        dev.pool.shutdown()
    assert bm.warmup_thread_pool() >= 1


@needs_cc
def test_benchmark_a_real_cpu_kernel() -> None:
    from svod_min.devices.cpu.device import CpuDevice

    dev = CpuDevice(threads=2)
    src = (
        "void inc(float* restrict a, int n, int core_id) {\n"
        "  for (int i = core_id * n; i < (core_id + 1) * n; i++) a[i] += 1.0f;\n}\n"
    )
    prog = dev.compile(src, "inc", buf_count=1, var_names=["n", "core_id"])
    buf = dev.allocate([64], "float32")
    config = BenchmarkConfig(warmup_runs=1, timing_runs=4, clear_l2=True)
    try:
        result = benchmark_kernel(prog, [buf], [32, 0], global_size=(2, 1, 1), config=config)
    finally:
        dev.pool.shutdown()
    assert len(result.runs) == 4 and all(t > 0 for t in result.runs)
    assert buf.tolist() == [5.0] * 64  # 1 warm-up + 4 timed runs, both chunks each time


def test_benchmark_kernel_refuses_what_is_not_a_program_or_a_config() -> None:
    from svod_min.error import ExecutionError
    from svod_min.perf.benchmark import benchmark_kernel

    with pytest.raises(ExecutionError, match="cannot benchmark NoneType: it has no execute"):
        benchmark_kernel(None, [], [])
    with pytest.raises(ExecutionError, match="config must be a BenchmarkConfig, got dict"):
        benchmark_kernel(object(), [], [], config={"timing_runs": 1})  # type: ignore[arg-type]
