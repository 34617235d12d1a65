"""ExecutionPlan variables: set between runs, checked against their bounds before any dispatch;
launch-size expressions and buffer extents evaluated under them.

Tests ported from svod's peer tests (reference §4) keep svod's names.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.plan import RecordingProgram, dev, f32, mock_kernel, prepared, var_plan  # noqa: F401 - dev is a fixture

from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import BufferAllocationError, PlanError, VariableBoundsError
from svod_min.plan.execution_plan import ExecutionPlan, ExecutionPlanBuilder, RuntimeVar


def test_execute_with_vars_does_not_override_fixedvars(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, val=7, hi=100, fixed={"N": 7})
    plan.execute_with_vars({"N": 42})
    assert plan.prepared_kernels()[0].vals == [7]
    assert prog.count == 1 and prog.calls[0][0] == [7]


def test_execute_with_vars_updates_non_fixed_vars(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, val=1, hi=100)
    plan.execute_with_vars({"N": 42})
    assert plan.prepared_kernels()[0].vals == [42]
    assert prog.count == 1 and prog.calls[0][0] == [42]
    plan.execute()  # the new value sticks
    assert prog.calls[1][0] == [42]


def test_execute_with_vars_updates_symbolic_global_size_without_recompile(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, global_size=("N", 1, 1))
    kernel = plan.kernels()[0]
    plan.execute_with_vars({"N": 5})
    assert prog.count == 1
    assert prog.last_global_size == (5, 1, 1)
    assert prog.calls[0][0] == [5]
    assert plan.kernels()[0] is kernel  # same compiled kernel


def test_execute_with_vars_rejects_out_of_bounds_launch_var_before_dispatch(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, lo=1, hi=4, global_size=("N", 1, 1))
    with pytest.raises(VariableBoundsError, match="outside bounds") as info:
        plan.execute_with_vars({"N": 5})
    assert "N=5 is outside bounds [1, 4]" in str(info.value)
    assert prog.count == 0, "nothing may dispatch after a bounds failure"
    assert not plan.poisoned and plan.prepared_kernels()[0].vals == [1]
    plan.execute_with_vars({"N": 4})
    assert prog.count == 1 and prog.last_global_size == (4, 1, 1)


def test_execute_with_vars_profiled_updates_symbolic_global_size(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, global_size=("N", 1, 1))
    profiles = plan.execute_with_vars_profiled({"N": 6})
    assert len(profiles) == 1
    assert prog.count == 1 and prog.last_global_size == (6, 1, 1)


def test_execute_with_vars_profiled_updates_non_fixed_vars(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, hi=100)
    profiles = plan.execute_with_vars_profiled({"N": 42})
    assert len(profiles) == 1 and profiles[0].kind == "kernel"
    assert plan.prepared_kernels()[0].vals == [42]
    assert prog.count == 1


def test_execute_with_vars_does_not_override_core_id_runtime_var(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, var="core_id", lo=0, hi=3, val=0)
    plan.execute_with_vars({"core_id": 2})
    assert prog.count == 1
    assert prog.calls[0][0] == [0], "core_id is set by the dispatcher, never by the caller"
    assert plan.prepared_kernels()[0].vals == [0]


def test_execute_with_vars_unknown_variable(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog)
    with pytest.raises(PlanError, match="'M'") as info:
        plan.execute_with_vars({"M": 3})
    assert not isinstance(info.value, VariableBoundsError)
    assert prog.count == 0 and not plan.poisoned


@pytest.mark.parametrize("value", [5.0, "5", True, None])
def test_execute_with_vars_non_int_value(dev: CpuDevice, value: Any) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog)
    with pytest.raises(VariableBoundsError, match="must be an int"):
        plan.execute_with_vars({"N": value})
    assert prog.count == 0 and plan.prepared_kernels()[0].vals == [1]


def test_execute_with_vars_checks_every_variable_before_patching(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(1, f32(dev, [0.0]))
    b.add_kernel(
        prepared(
            1,
            mock_kernel(prog, var_names=["N", "M"]),
            [out],
            vals=[1, 1],
            runtime_vars=[RuntimeVar("N", 1, 8), RuntimeVar("M", 1, 8)],
        )
    )
    b.set_output_buffer(out)
    plan = b.build()
    with pytest.raises(VariableBoundsError, match="M=99"):
        plan.execute_with_vars({"N": 3, "M": 99})
    assert plan.prepared_kernels()[0].vals == [1, 1] and prog.count == 0
    plan.execute_with_vars({"N": 3, "M": 4})
    assert prog.calls == [([3, 4], None, None)]


def test_runtime_var_bounds_intersect_across_ops(dev: CpuDevice) -> None:
    p1, p2 = RecordingProgram(), RecordingProgram()
    b = ExecutionPlanBuilder(dev)
    x = b.add_buffer(1, f32(dev, [0.0]))
    y = b.add_buffer(2, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(p1, var_names=["N"]), [x], vals=[2], runtime_vars=[RuntimeVar("N", 1, 8)]))
    b.add_kernel(prepared(2, mock_kernel(p2, var_names=["N"]), [y], vals=[2], runtime_vars=[RuntimeVar("N", 2, 6)]))
    b.set_output_buffers([x, y])
    plan = b.build()
    assert plan.runtime_vars() == {"N": RuntimeVar("N", 2, 6)}
    with pytest.raises(VariableBoundsError, match=r"\[2, 6\]"):
        plan.execute_with_vars({"N": 7})
    assert p1.count == p2.count == 0
    plan.execute_with_vars({"N": 6})
    assert p1.calls[0][0] == p2.calls[0][0] == [6]


# --- launch sizes and extents ------------------------------------------------------------------------


def test_launch_expressions_are_evaluated(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, var="n", lo=1, hi=1 << 20, val=1000, global_size=("(n+255)//256", "max(1, n//512)", 1))
    plan.execute()
    assert prog.last_global_size == (4, 1, 1)
    plan.execute_with_vars({"n": 257})
    assert prog.last_global_size == (2, 1, 1)
    plan.execute_with_vars({"n": 1024})
    assert prog.last_global_size == (4, 2, 1)
    plan.execute_with_vars({"n": 100})
    assert prog.last_global_size is None  # a single invocation is dispatched without a launch size


def test_launch_size_negative_is_rejected_before_dispatch(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    with pytest.raises(PlanError, match="is negative"):
        var_plan(dev, prog, var="n", lo=0, hi=10, val=3, global_size=("n-5", 1, 1))
    plan = var_plan(dev, prog, var="n", lo=0, hi=10, val=7, global_size=("n-5", 1, 1))
    with pytest.raises(PlanError, match="launch size 'n-5' = -1 is negative"):
        plan.execute_with_vars({"n": 4})
    assert prog.count == 0 and not plan.poisoned
    assert plan.prepared_kernels()[0].vals == [7]
    plan.execute()
    assert prog.calls == [([7], (2, 1, 1), None)]


def test_launch_expression_with_unknown_variable_rejected_at_build(dev: CpuDevice) -> None:
    with pytest.raises(PlanError, match="unknown variable 'm'"):
        var_plan(dev, RecordingProgram(), var="n", global_size=("m", 1, 1))


def test_kernel_extent_larger_than_buffer_is_rejected(dev: CpuDevice) -> None:
    prog = RecordingProgram()

    def build(n: int) -> ExecutionPlan:
        b = ExecutionPlanBuilder(dev)
        out = b.add_buffer(1, f32(dev, [0.0] * 4))
        b.add_kernel(
            prepared(
                1,
                mock_kernel(prog, var_names=["n"]),
                [out],
                vals=[n],
                extents={0: "n"},
                runtime_vars=[RuntimeVar("n", 1, 64)],
            )
        )
        b.set_output_buffer(out)
        return b.build()

    with pytest.raises(BufferAllocationError, match="needs 8 elements"):
        build(8)
    plan = build(4)
    with pytest.raises(BufferAllocationError, match="refusing to dispatch"):
        plan.execute_with_vars({"n": 5})
    assert prog.count == 0 and not plan.poisoned
    assert plan.prepared_kernels()[0].vals == [4]
    plan.execute()  # still usable, with the old value
    assert prog.calls == [([4], None, None)]
    plan.execute_with_vars({"n": 3})
    assert prog.calls[-1][0] == [3]
