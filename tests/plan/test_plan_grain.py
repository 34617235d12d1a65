"""Tiny kernels on the calling thread (svod_min.plan.grain): measured split, results unchanged."""

from __future__ import annotations

import concurrent.futures
from typing import Any, Dict

import pytest
from conftest import needs_cc

from svod_min.devices.cpu.device import CpuDevice
from svod_min.plan import grain as plan_grain
from svod_min.plan.grain import MEASURED_REPLAYS, GrainSplit, pool_grain_ns

N = 16


def plan_doc(k: int) -> Dict[str, Any]:
    """``k`` independent kernels o_j = x + j + 0.5 over N floats."""
    lines = []
    for j in range(k):
        lines.append(
            "void add_%d(float* restrict o, const float* restrict a) "
            "{ for (int i = 0; i < %d; i++) o[i] = a[i] + %.1ff; }" % (j, N, j + 0.5)
        )
    source = "\n".join(lines)
    buffers: Dict[str, Any] = {"x": {"dtype": "float32", "shape": [N], "init": "arange"}}
    kernels, ops = {}, []
    for j in range(k):
        buffers["o%d" % j] = {"dtype": "float32", "shape": [N], "output": True}
        kernels["add_%d" % j] = {"source": source, "buffers": 2}
        ops.append({"kernel": "add_%d" % j, "buffers": ["o%d" % j, "x"]})
    return {"svod_plan": 1, "buffers": buffers, "kernels": kernels, "ops": ops}


class CountingPool:
    """A real pool that counts hand-offs."""

    def __init__(self, pool: concurrent.futures.ThreadPoolExecutor) -> None:
        self.pool, self.submitted = pool, 0

    def submit(self, fn, *args):  # type: ignore[no-untyped-def]
        self.submitted += 1
        return self.pool.submit(fn, *args)


def check(loaded: Any, k: int) -> None:
    for j in range(k):
        assert loaded.buffers["o%d" % j].tolist() == [float(i) + j + 0.5 for i in range(N)], j


def test_split_keeps_the_best_time_and_compares_with_the_grain(monkeypatch: pytest.MonkeyPatch) -> None:
    split = GrainSplit(3)
    monkeypatch.setattr(plan_grain, "pool_grain_ns", lambda pool: 1000)
    for ns in ([500, 5000, 900], [400, 4000, 1200]):
        assert split.measuring
        for i, t in enumerate(ns):
            split.record(i, t)
        split.replay_done(object())
    assert not split.measuring and split.best_ns == [400, 4000, 900]
    assert split.inline == [True, False, True]


def test_pool_grain_is_measured_once_per_pool() -> None:
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as real:
        pool = CountingPool(real)
        grain = pool_grain_ns(pool)
        assert grain > 0 and pool.submitted > 1
        before = pool.submitted
        assert pool_grain_ns(pool) == grain and pool.submitted == before


@needs_cc
def test_tiny_kernels_stop_waking_the_pool_and_stay_right(monkeypatch: pytest.MonkeyPatch) -> None:
    from svod_min.planfile.load import load_plan

    device = CpuDevice(threads=2)
    counting = CountingPool(device.pool)
    monkeypatch.setattr(device, "host_pool", lambda: counting)
    monkeypatch.setattr(plan_grain, "pool_grain_ns", lambda pool: 10**9)  # every op is "tiny"
    k = 40
    loaded = load_plan(plan_doc(k), device=device)
    loaded.plan.set_native_replay(False)
    for _ in range(MEASURED_REPLAYS):
        loaded.plan.execute()
    check(loaded, k)
    counting.submitted = 0
    for _ in range(5):
        for j in range(k):  # stale outputs would hide an op that did not run
            loaded.buffers["o%d" % j].copyin(bytes(4 * N))
        loaded.plan.execute()
        check(loaded, k)
    assert counting.submitted == 0
    device.close()


@needs_cc
def test_kernels_above_the_grain_still_go_to_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    from svod_min.planfile.load import load_plan

    device = CpuDevice(threads=2)
    counting = CountingPool(device.pool)
    monkeypatch.setattr(device, "host_pool", lambda: counting)
    monkeypatch.setattr(plan_grain, "pool_grain_ns", lambda pool: 50_000)
    heavy = (2, 4)
    record = GrainSplit.record  # measured times made up, so that no machine load can flip the split
    monkeypatch.setattr(
        GrainSplit, "record", lambda self, index, ns: record(self, index, 10**6 if index in heavy else 1)
    )
    k = 6
    loaded = load_plan(plan_doc(k), device=device)
    loaded.plan.set_native_replay(False)
    for _ in range(MEASURED_REPLAYS):
        loaded.plan.execute()
    counting.submitted = 0
    for j in range(k):
        loaded.buffers["o%d" % j].copyin(bytes(4 * N))
    loaded.plan.execute()
    check(loaded, k)
    assert counting.submitted == 1  # two heavy kernels: one handed to the pool, one on this thread; no tiny one
    device.close()
