"""Host parallelism: the ops of a level overlap on the device's pool unless their byte ranges
conflict, a barrier sits between them, or they are not safe to overlap; errors wait for the rest."""

from __future__ import annotations

import time
from typing import Any, List

import pytest
from support.plan import SLEEP, ActiveTracker, RecordingProgram, custom_op, dev, f32, mock_kernel, prepared  # noqa: F401 - dev is a fixture

from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import ExecutionError
from svod_min.plan.execution_plan import ExecutionPlanBuilder, register_custom_function


def _parallel_plan(
    dev: CpuDevice,
    buffers: List[Any],
    *,
    safe: bool = True,
    between: Any = None,
    global_size: Any = (1, 1, 1),
    extra_reads: Any = None,
) -> ActiveTracker:
    """One sleeping kernel per buffer, all independent; returns the tracker after one run."""
    tracker = ActiveTracker()
    b = ExecutionPlanBuilder(dev)
    idx = [b.add_buffer(10 + n, buf) for n, buf in enumerate(buffers)]
    shared = b.add_buffer(99, extra_reads) if extra_reads is not None else None
    for n, i in enumerate(idx):
        if between is not None and n == 1:
            b.add_op(between(i))
        prog = RecordingProgram(sleep=SLEEP, tracker=tracker)
        kern = mock_kernel(
            prog,
            nbufs=1 if shared is None else 2,
            host_parallel_safe=safe,
            global_size=global_size,
            var_names=["core_id"] if global_size[0] != 1 else (),
        )
        bufs = [i] if shared is None else [i, shared]
        b.add_kernel(prepared(100 + n, kern, bufs, vals=[0] if global_size[0] != 1 else []))
    b.set_output_buffers(idx)
    plan = b.build()
    plan.execute()
    return tracker


def test_host_parallel_safe_ops_overlap(dev: CpuDevice) -> None:
    assert dev.threads >= 2
    tracker = _parallel_plan(dev, [f32(dev, [0.0] * 4) for _ in range(3)])
    assert tracker.max_active >= 2


def test_ops_reading_one_buffer_overlap(dev: CpuDevice) -> None:
    tracker = _parallel_plan(dev, [f32(dev, [0.0] * 4) for _ in range(2)], extra_reads=f32(dev, [1.0]))
    assert tracker.max_active >= 2


def test_overlapping_views_of_one_storage_do_not_overlap(dev: CpuDevice) -> None:
    arena = f32(dev, [0.0] * 16)
    tracker = _parallel_plan(dev, [arena.view(0, 32), arena.view(16, 32)])
    assert tracker.max_active == 1


def test_disjoint_views_of_one_storage_overlap(dev: CpuDevice) -> None:
    arena = f32(dev, [0.0] * 16)
    tracker = _parallel_plan(dev, [arena.view(0, 32), arena.view(32, 32)])
    assert tracker.max_active >= 2


def test_unsafe_ops_run_serially(dev: CpuDevice) -> None:
    tracker = _parallel_plan(dev, [f32(dev, [0.0] * 4) for _ in range(3)], safe=False)
    assert tracker.max_active == 1


def test_threaded_cpu_kernels_run_serially(dev: CpuDevice) -> None:
    tracker = _parallel_plan(dev, [f32(dev, [0.0] * 4) for _ in range(2)], global_size=(2, 1, 1))
    assert tracker.max_active == 1


def test_safe_ops_across_a_barrier_run_serially(dev: CpuDevice) -> None:
    order: List[str] = []
    register_custom_function("test_barrier", lambda buffers, vars, attrs: order.append("barrier"))
    buffers = [f32(dev, [0.0] * 4) for _ in range(2)]
    tracker = _parallel_plan(dev, buffers, between=lambda i: custom_op(50, "test_barrier", []))
    assert tracker.max_active == 1
    assert order == ["barrier"]


def test_single_thread_device_runs_serially() -> None:
    one = CpuDevice(threads=1)
    tracker = _parallel_plan(one, [f32(one, [0.0] * 4) for _ in range(3)])
    assert tracker.max_active == 1


def test_parallel_group_errors_are_raised_after_all_ops_finish(dev: CpuDevice) -> None:
    finished: List[int] = []

    def slow_ok(buffers: Any, vals: Any) -> None:
        time.sleep(SLEEP)
        finished.append(1)

    def fail(buffers: Any, vals: Any) -> None:
        raise ValueError("bad kernel")

    b = ExecutionPlanBuilder(dev)
    x = b.add_buffer(1, f32(dev, [0.0]))
    y = b.add_buffer(2, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(RecordingProgram(fail), host_parallel_safe=True), [x]))
    b.add_kernel(prepared(2, mock_kernel(RecordingProgram(slow_ok), host_parallel_safe=True), [y]))
    b.set_output_buffers([x, y])
    plan = b.build()
    with pytest.raises(ExecutionError, match="bad kernel"):
        plan.execute()
    assert finished == [1] and plan.poisoned
