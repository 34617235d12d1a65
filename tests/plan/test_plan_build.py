"""ExecutionPlanBuilder: what build() accepts and refuses, dependencies between ops, Kahn levels.

Tests ported from svod's peer tests (reference §4) keep svod's names.
"""

from __future__ import annotations

from typing import List

import pytest
from support.plan import RecordingProgram, copy_op, dev, f32, mock_kernel, prepared  # noqa: F401 - dev is a fixture

from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import PlanError
from svod_min.plan.execution_plan import ExecutionPlan, ExecutionPlanBuilder, kahn_levels


def test_builder_basic(dev: CpuDevice) -> None:
    plan = ExecutionPlanBuilder(dev).build()
    assert isinstance(plan, ExecutionPlan)
    assert plan.prepared_kernels() == [] and plan.kernels() == []
    assert plan.buffers() == [] and plan.num_outputs == 0
    assert plan.device is dev
    assert plan.op_order == [] and plan.op_levels == []
    plan.execute()  # an empty plan runs and does nothing
    assert plan.execute_profiled() == []


def test_builder_basic_with_one_kernel(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    b = ExecutionPlanBuilder(dev)
    idx = b.add_buffer(5, f32(dev, [0.0] * 4))
    assert b.add_kernel(prepared(1, mock_kernel(prog), [idx])) == 0
    assert b.op_count == 1
    b.set_output_buffer(idx)
    plan = b.build()
    assert plan.num_outputs == 1 and plan.output_buffer_idx() == idx
    assert plan.output_buffer() is plan.buffer(5) is plan.buffer_at(idx)
    assert plan.output_buffers() == [plan.buffer(5)]
    assert plan.buffer(6) is None and plan.buffer_at(3) is None
    assert [k.entry_point for k in plan.kernels()] == ["k"]
    assert "1 ops" in repr(plan) and "ready" in repr(plan)
    plan.execute()
    plan.execute()
    assert prog.count == 2


def test_empty_plan_output_buffer_returns_none(dev: CpuDevice) -> None:
    plan = ExecutionPlanBuilder(dev).build()
    assert plan.output_buffer() is None
    assert plan.output_buffer_at(0) is None
    assert plan.output_buffer_at(7) is None
    with pytest.raises(PlanError):
        plan.output_buffer_idx()


def test_builder_map_buffer_alias(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    idx = b.add_buffer(10, f32(dev, [0.0] * 8))
    b.map_buffer(11, idx)
    b.set_output_buffer(idx)
    plan = b.build()
    assert plan.ast_to_buffer_map == {10: idx, 11: idx}
    assert len(plan.buffers()) == 1
    assert plan.buffer(11) is plan.buffer(10)
    with pytest.raises(PlanError, match="buffer index out of range"):
        b.map_buffer(12, 1)


def test_builder_requires_explicit_output_indices(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    b.add_buffer(10, f32(dev, [0.0] * 8))
    with pytest.raises(PlanError, match="output buffers must be set explicitly"):
        b.build()
    b.add_op(copy_op(1, 0, 0))
    with pytest.raises(PlanError, match="output buffers must be set explicitly"):
        b.build()
    b.set_output_buffers([0])
    b.build()


def test_builder_rejects_invalid_compiled_output_index(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    a = b.add_buffer(700, f32(dev, [0.0] * 4))
    c = b.add_buffer(701, f32(dev, [0.0] * 4))
    b.add_kernel(prepared(77, mock_kernel(RecordingProgram(), nbufs=2), [a, c], output_indices=[2]))
    b.set_output_buffer(a)
    with pytest.raises(PlanError, match="output index out of range"):
        b.build()


def test_builder_rejects_kernel_without_outputs_and_wrong_val_count(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    a = b.add_buffer(1, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(RecordingProgram()), [a], output_indices=[]))
    b.set_output_buffer(a)
    with pytest.raises(PlanError, match="no output indices"):
        b.build()
    b = ExecutionPlanBuilder(dev)
    a = b.add_buffer(1, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(RecordingProgram(), var_names=["n", "m"]), [a], vals=[1]))
    b.set_output_buffer(a)
    with pytest.raises(PlanError, match="1 values for variables"):
        b.build()


def test_build_compiled_program_invalid_buffer_indices_errors(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    dst = b.add_buffer(860, f32(dev, [0.0] * 4))
    b.add_kernel(prepared(861, mock_kernel(RecordingProgram(), nbufs=2), [dst, dst + 1]))
    b.set_output_buffer(dst)
    with pytest.raises(PlanError, match="buffer index out of range"):
        b.build()


def test_build_rejects_output_index_beyond_buffers(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    b.add_buffer(1, f32(dev, [0.0]))
    b.set_output_buffers([0, 3])
    with pytest.raises(PlanError, match="buffer index out of range"):
        b.build()


# --- ordering ------------------------------------------------------------------------------------


def _copy_plan_buffers(dev: CpuDevice, b: ExecutionPlanBuilder, count: int) -> None:
    for n in range(count):
        b.add_buffer(1000 + n, f32(dev, [float(n)] * 4))
    b.set_output_buffer(0)


def test_execute_mixed_ops_missing_dependency_errors(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 2)
    b.add_op(copy_op(10, 0, 1, deps=[999]))
    with pytest.raises(PlanError, match="unknown op id"):
        b.build()


def test_execute_mixed_ops_cycle_errors(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 2)
    b.add_op(copy_op(1, 0, 1, deps=[2]))
    b.add_op(copy_op(2, 1, 0, deps=[1]))
    with pytest.raises(PlanError, match=r"cycle detected.*blocked_ids=\[1, 2\]"):
        b.build()


def test_cycle_through_instance_dependency_with_duplicate_ids(dev: CpuDevice) -> None:
    """With repeated ids, op 1's id dependency binds to op 0; op 0's instance dependency closes the loop."""
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 4)
    b.add_op_with_instance_dependencies(copy_op(7, 0, 1), [1])
    b.add_op(copy_op(7, 2, 3, deps=[7]))
    b.add_op(copy_op(8, 3, 2))
    with pytest.raises(PlanError, match=r"cycle detected.*blocked_ids=\[7\]"):
        b.build()


def test_execute_mixed_ops_allows_duplicate_ids_in_expanded_schedule_order(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    src = b.add_buffer(800, f32(dev, [3.0, 1.0, 4.0, 1.0]))
    mid = b.add_buffer(801, f32(dev, [0.0] * 4))
    out = b.add_buffer(802, f32(dev, [0.0] * 4))
    b.add_op(copy_op(42, mid, src))
    b.add_op(copy_op(42, out, mid, deps=[42]))
    b.set_output_buffer(out)
    plan = b.build()
    assert plan.op_levels == [[0], [1]]
    plan.execute()
    assert plan.output_buffer().tolist() == [3.0, 1.0, 4.0, 1.0]


def test_duplicate_ids_bind_only_to_earlier_ops(dev: CpuDevice) -> None:
    """svod's duplicate-id mode: a dependency on an id that only appears later is rejected."""
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 4)
    b.add_op(copy_op(1, 0, 1, deps=[9]))
    b.add_op(copy_op(1, 2, 3))
    b.add_op(copy_op(9, 3, 2))
    with pytest.raises(PlanError, match="only defined later"):
        b.build()


def test_compute_execution_levels_duplicate_ids_is_deterministic(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 6)
    b.add_op(copy_op(42, 0, 1))
    b.add_op(copy_op(9, 2, 3, deps=[42]))
    b.add_op(copy_op(42, 4, 5, deps=[9]))
    for _ in range(3):  # same answer every time
        plan = b.build()
        assert plan.op_order == [0, 1, 2]
        assert plan.op_levels == [[0], [1], [2]]


def test_instance_dependencies_target_exact_duplicate_id_instance(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 8)
    b.add_op(copy_op(42, 0, 1))
    b.add_op(copy_op(9, 2, 3))
    b.add_op(copy_op(42, 4, 5, deps=[9]))
    b.add_op_with_instance_dependencies(copy_op(77, 6, 7), [0])
    plan = b.build()
    assert plan.op_levels == [[0, 1], [2, 3]]
    assert plan.op_order == [0, 1, 2, 3]


def test_instance_dependencies_reject_unknown_op_index(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 2)
    b.add_op_with_instance_dependencies(copy_op(42, 0, 1), [1])
    with pytest.raises(PlanError, match="unknown op index"):
        b.build()


def test_instance_dependencies_reject_self(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    _copy_plan_buffers(dev, b, 2)
    b.add_op_with_instance_dependencies(copy_op(42, 0, 1), [0])
    with pytest.raises(PlanError, match="depends on itself"):
        b.build()


def test_kahn_levels_direct() -> None:
    order, levels = kahn_levels([[], [], [0], [1], [2, 3]], [10, 11, 12, 13, 14])
    assert order == [0, 1, 2, 3, 4]
    assert levels == [[0, 1], [2, 3], [4]]
    order, levels = kahn_levels([[3], [], [], []], [5, 6, 7, 8])  # lowest index first among ready ops
    assert order == [1, 2, 3, 0] and levels == [[1, 2, 3], [0]]
    with pytest.raises(PlanError, match=r"blocked_ids=\[5, 6\]"):
        kahn_levels([[1], [0], []], [5, 6, 7])


def test_execute_walks_op_levels_in_level_order(dev: CpuDevice) -> None:
    """Four ops, A->C and B->D: every level-0 op must run before every level-1 op."""
    log: List[str] = []
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(900, f32(dev, [0.0]))
    b.set_output_buffer(out)
    for op_id, deps in ((1, []), (2, []), (3, [1]), (4, [2])):
        prog = RecordingProgram(name=str(op_id), log=log)
        b.add_op(prepared(op_id, mock_kernel(prog), [out], deps=deps))
    plan = b.build()
    assert plan.op_levels == [[0, 1], [2, 3]]
    plan.execute()
    assert len(log) == 4
    assert max(log.index("1"), log.index("2")) < min(log.index("3"), log.index("4"))
