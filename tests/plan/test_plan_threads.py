"""Plans from several threads: each plan is serialised by its lock, separate plans run side by side."""

from __future__ import annotations

import threading
import time
from typing import Any, List

from support.plan import ActiveTracker, RecordingProgram, dev, f32, i32, mock_kernel, prepared, run_threads  # noqa: F401 - dev is a fixture

from svod_min.devices.cpu.device import CpuDevice
from svod_min.plan.execution_plan import ExecutionPlan, ExecutionPlanBuilder, RuntimeVar


def test_two_plans_on_two_threads(dev: CpuDevice) -> None:
    def make(scale: float) -> Any:
        def act(buffers: Any, vals: Any) -> None:
            out, src = buffers
            time.sleep(0)
            out.copyin([v * scale + vals[0] for v in src.tolist()])

        prog = RecordingProgram(act)
        b = ExecutionPlanBuilder(dev)
        out = b.add_buffer(1, f32(dev, [0.0] * 4))
        src = b.add_buffer(2, f32(dev, [1.0, 2.0, 3.0, 4.0]))
        b.add_kernel(
            prepared(
                1,
                mock_kernel(prog, nbufs=2, var_names=["k"]),
                [out, src],
                vals=[0],
                runtime_vars=[RuntimeVar("k", 0, 1000)],
            )
        )
        b.set_output_buffer(out)
        return b.build(), prog

    (p1, prog1), (p2, prog2) = make(2.0), make(-1.0)

    def loop(plan: ExecutionPlan, scale: float) -> Any:
        def run() -> None:
            for k in range(200):
                plan.buffer(2).copyin([float(k)] * 4)
                plan.execute_with_vars({"k": k})
                assert plan.output_buffer().tolist() == [k * scale + k] * 4

        return run

    assert run_threads([loop(p1, 2.0), loop(p2, -1.0)]) == []
    assert prog1.count == prog2.count == 200


def test_one_plan_from_four_threads_is_serialised(dev: CpuDevice) -> None:
    tracker = ActiveTracker()
    expected: dict = {}
    problems: List[str] = []

    def rmw(buffers: Any, vals: Any) -> None:
        counter, stamp = buffers
        mine = expected[threading.get_ident()]
        if vals[0] != mine:
            problems.append("thread expecting t=%d ran with t=%d" % (mine, vals[0]))
        value = counter.tolist()[0]
        time.sleep(0)  # let another thread in, if the plan would allow it
        counter.copyin([value + 1])
        stamp.copyin([vals[0]])

    b = ExecutionPlanBuilder(dev)
    counter = b.add_buffer(1, i32(dev, [0]))
    stamp = b.add_buffer(2, i32(dev, [0]))
    prog = RecordingProgram(rmw, tracker=tracker)
    b.add_kernel(
        prepared(
            1,
            mock_kernel(prog, nbufs=2, outs=(0, 1), var_names=["t"]),
            [counter, stamp],
            output_indices=[0, 1],
            vals=[0],
            runtime_vars=[RuntimeVar("t", 0, 3)],
        )
    )
    b.set_output_buffers([counter, stamp])
    plan = b.build()

    def worker(t: int) -> Any:
        def run() -> None:
            expected[threading.get_ident()] = t
            for n in range(200):
                if n % 2 == 0 and t % 2 == 0:
                    plan.execute_with_vars_profiled({"t": t})
                else:
                    plan.execute_with_vars({"t": t})

        return run

    assert run_threads([worker(t) for t in range(4)]) == []
    assert problems == []
    assert tracker.max_active == 1
    assert plan.buffer(1).tolist() == [800]
    assert prog.count == 800 and not plan.poisoned
