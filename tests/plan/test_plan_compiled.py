"""Plans of real compiled kernels: chains, core_id kernels, views of one arena, plans on two threads."""

from __future__ import annotations

from typing import Any, List

import pytest
from conftest import needs_cc
from support.plan import dev, f32, i32, mock_kernel, prepared, run_threads  # noqa: F401 - dev is a fixture

from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import VariableBoundsError
from svod_min.plan.execution_plan import ExecutionPlan, ExecutionPlanBuilder, PreparedBufferView, RuntimeVar

CHAIN_SRC = """
void scale2(float* restrict out, const float* restrict in, const int n) {
    for (int i = 0; i < n; i++) out[i] = in[i] * 2.0f;
}
void add1(float* restrict out, const float* restrict in, const int n) {
    for (int i = 0; i < n; i++) out[i] = in[i] + 1.0f;
}
void slices(int* restrict out, const int core_id) {
    for (int j = 0; j < 4; j++) out[core_id * 4 + j] = core_id * 100 + j;
}
"""


@pytest.fixture(scope="module")
def programs(dev: CpuDevice) -> Any:
    from svod_min.error import CompilerNotFoundError

    try:
        obj = dev.compile_object(CHAIN_SRC)
    except CompilerNotFoundError as exc:  # pragma: no cover - depends on the host
        pytest.skip("no C compiler: %s" % exc)
    return {
        "scale2": dev.load(obj, "scale2", buf_count=2, var_names=["n"]),
        "add1": dev.load(obj, "add1", buf_count=2, var_names=["n"]),
        "slices": dev.load(obj, "slices", buf_count=1, var_names=["core_id"]),
    }


def _real(program: Any, *, nbufs: int, var_names: List[str], safe: bool = True, global_size: Any = (1, 1, 1)) -> Any:
    return mock_kernel(
        program,
        nbufs=nbufs,
        var_names=var_names,
        host_parallel_safe=safe,
        global_size=global_size,
        entry_point=program.entry_point,
    )


@needs_cc
def test_real_two_kernel_chain(dev: CpuDevice, programs: Any) -> None:
    b = ExecutionPlanBuilder(dev)
    a = b.add_buffer(1, f32(dev, [1.0, 2.0, 3.0, 4.0]))
    mid = b.add_buffer(2, f32(dev, [0.0] * 4))
    out = b.add_buffer(3, f32(dev, [0.0] * 4))
    nvar = [RuntimeVar("n", 1, 4)]
    b.add_kernel(
        prepared(
            1,
            _real(programs["scale2"], nbufs=2, var_names=["n"]),
            [mid, a],
            vals=[4],
            extents={0: "n", 1: "n"},
            runtime_vars=nvar,
        )
    )
    b.add_kernel(
        prepared(
            2,
            _real(programs["add1"], nbufs=2, var_names=["n"]),
            [out, mid],
            vals=[4],
            deps=[1],
            extents={0: "n", 1: "n"},
            runtime_vars=nvar,
        )
    )
    b.set_output_buffer(out)
    plan = b.build()
    plan.execute()
    assert plan.output_buffer().tolist() == [3.0, 5.0, 7.0, 9.0]
    plan.buffer(1).copyin([10.0, 20.0, 30.0, 40.0])
    plan.execute_with_vars({"n": 2})  # only the first two elements are recomputed
    assert plan.output_buffer().tolist() == [21.0, 41.0, 7.0, 9.0]
    with pytest.raises(VariableBoundsError):
        plan.execute_with_vars({"n": 5})
    profiles = plan.execute_profiled()
    assert [p.name for p in profiles] == ["scale2", "add1"]


@needs_cc
def test_real_core_id_kernel_in_plan(dev: CpuDevice, programs: Any) -> None:
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(1, i32(dev, [-1] * 16))
    b.add_kernel(
        prepared(
            1,
            _real(programs["slices"], nbufs=1, var_names=["core_id"], global_size=("4", 1, 1)),
            [out],
            vals=[0],
            runtime_vars=[RuntimeVar("core_id", 0, 3)],
        )
    )
    b.set_output_buffer(out)
    plan = b.build()
    plan.execute_with_vars({"core_id": 3})  # ignored: the dispatcher sets it per invocation
    assert plan.output_buffer().tolist() == [c * 100 + j for c in range(4) for j in range(4)]


@needs_cc
def test_real_plan_with_views_of_one_arena(dev: CpuDevice, programs: Any) -> None:
    arena = f32(dev, [0.0] * 16)
    b = ExecutionPlanBuilder(dev)
    base = b.add_buffer(1, arena)
    views = [b.add_buffer(10 + n, arena.view(16 * n, 16)) for n in range(4)]
    for n, v in enumerate(views):
        b.add_op(PreparedBufferView(id=100 + n, buffer_indices=[v, base], byte_offset=16 * n, byte_size=16))
    s2, a1 = programs["scale2"], programs["add1"]
    b.add_kernel(prepared(1, _real(s2, nbufs=2, var_names=["n"]), [views[1], views[0]], vals=[4], deps=[100, 101]))
    # independent of op 1 and on disjoint bytes: may run alongside it
    b.add_kernel(prepared(2, _real(a1, nbufs=2, var_names=["n"]), [views[3], views[0]], vals=[4], deps=[100, 103]))
    b.add_kernel(prepared(3, _real(a1, nbufs=2, var_names=["n"]), [views[2], views[1]], vals=[4], deps=[1, 102]))
    b.set_output_buffers([base])
    plan = b.build()
    for round_ in range(3):
        plan.buffer(10).copyin([1.0 + round_, 2.0, 3.0, 4.0])
        plan.execute()
        x = [1.0 + round_, 2.0, 3.0, 4.0]
        assert plan.output_buffer().tolist() == x + [2 * v for v in x] + [2 * v + 1 for v in x] + [v + 1 for v in x]


@needs_cc
def test_real_plans_on_two_threads(dev: CpuDevice, programs: Any) -> None:
    def make(name: str) -> ExecutionPlan:
        b = ExecutionPlanBuilder(dev)
        out = b.add_buffer(1, f32(dev, [0.0] * 64))
        src = b.add_buffer(2, f32(dev, [0.0] * 64))
        b.add_kernel(prepared(1, _real(programs[name], nbufs=2, var_names=["n"]), [out, src], vals=[64]))
        b.set_output_buffer(out)
        return b.build()

    def loop(plan: ExecutionPlan, fn: Any) -> Any:
        def run() -> None:
            for k in range(200):
                data = [float(k + i) for i in range(64)]
                plan.buffer(2).copyin(data)
                plan.execute()
                assert plan.output_buffer().tolist() == [fn(v) for v in data]

        return run

    assert run_threads([loop(make("scale2"), lambda v: 2 * v), loop(make("add1"), lambda v: v + 1)]) == []
