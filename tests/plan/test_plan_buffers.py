"""A plan's buffers after building: output regions, replicas sharing weights, release (svod's
``release_intermediate_buffers`` / ``release_all_buffers``)."""

from __future__ import annotations

from typing import Any, List

import pytest
from support.plan import RecordingProgram, copy_op, dev, f32, mock_kernel, prepared, var_plan  # noqa: F401 - dev is a fixture

from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import BufferAllocationError, ExecutionError, PlanError
from svod_min.plan.execution_plan import ExecutionPlan, ExecutionPlanBuilder, PreparedBufferView


def test_copy_output_region_to_buffer(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(1, dev.allocate(8).copyin(bytes(range(8))))
    dst = b.add_buffer(2, dev.allocate(8).copyin(bytes([9] * 8)))
    b.set_output_buffer(out)
    plan = b.build()
    destination = plan.buffer_at(dst)
    plan.copy_output_region_to_buffer(0, destination, 2, 3, 3)
    assert destination.tolist() == [9, 9, 3, 4, 5, 9, 9, 9]
    with pytest.raises(PlanError, match="output position 1 out of range"):
        plan.copy_output_region_to_buffer(1, destination, 0, 0, 1)
    with pytest.raises(BufferAllocationError, match="destination"):
        plan.copy_output_region_to_buffer(0, destination, 6, 0, 3)
    with pytest.raises(BufferAllocationError, match="source"):
        plan.copy_output_region_to_buffer(0, destination, 0, 7, 2)
    assert destination.tolist() == [9, 9, 3, 4, 5, 9, 9, 9]


def _add_action(buffers: Any, vals: Any) -> None:
    out, x, w = buffers
    out.copyin([a + c for a, c in zip(x.tolist(), w.tolist())])


def _replicable_plan(dev: CpuDevice) -> ExecutionPlan:
    """out = (x + w) copied through an arena view; w is read-only (a weight), x a declared input."""
    arena = f32(dev, [0.0] * 8)
    b = ExecutionPlanBuilder(dev)
    x = b.add_buffer(1, f32(dev, [1.0, 2.0, 3.0, 4.0]))
    w = b.add_buffer(2, f32(dev, [10.0, 20.0, 30.0, 40.0]))
    a = b.add_buffer(3, arena)
    mid = b.add_buffer(4, arena.view(16, 16))
    out = b.add_buffer(5, f32(dev, [0.0] * 4))
    b.declare_input(x)
    b.add_op(PreparedBufferView(id=1, buffer_indices=[mid, a], byte_offset=16, byte_size=16))
    b.add_kernel(prepared(2, mock_kernel(RecordingProgram(_add_action), nbufs=3), [mid, x, w], deps=[1]))
    b.add_op(copy_op(3, out, mid, deps=[2]))
    b.set_output_buffer(out)
    return b.build()


def test_replicate_shares_weights_and_owns_written_buffers(dev: CpuDevice) -> None:
    plan = _replicable_plan(dev)
    plan.execute()
    assert plan.output_buffer().tolist() == [11.0, 22.0, 33.0, 44.0]
    rep = plan.replicate()
    assert rep is not plan and rep.op_levels == plan.op_levels
    assert rep.buffer(2).address == plan.buffer(2).address, "weights are shared"
    for ast_id in (3, 4, 5):  # written: fresh memory
        assert rep.buffer(ast_id).address != plan.buffer(ast_id).address
    assert rep.buffer(4).storage is rep.buffer(3).storage, "views are re-derived from the new storage"
    assert rep.buffer(4).offset == 16
    assert rep.buffer(5).tolist() == [0.0] * 4, "written buffers start zeroed"
    assert rep.buffer(1).address != plan.buffer(1).address
    assert rep.buffer(1).tolist() == [1.0, 2.0, 3.0, 4.0], "declared inputs are snapshotted"
    assert rep.kernels()[0] is plan.kernels()[0]

    rep.buffer(1).copyin([0.0, 0.0, 0.0, 1.0])
    rep.execute()
    assert rep.output_buffer().tolist() == [10.0, 20.0, 30.0, 41.0]
    assert plan.output_buffer().tolist() == [11.0, 22.0, 33.0, 44.0], "the original is untouched"
    assert plan.buffer(1).tolist() == [1.0, 2.0, 3.0, 4.0]
    plan.execute()
    assert plan.output_buffer().tolist() == [11.0, 22.0, 33.0, 44.0]


def test_replicate_keeps_its_own_variables(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, hi=100)
    rep = plan.replicate()
    rep.execute_with_vars({"N": 9})
    plan.execute()
    assert [c[0] for c in prog.calls] == [[9], [1]]
    assert plan.prepared_kernels()[0].vals == [1] and rep.prepared_kernels()[0].vals == [9]


def test_release_intermediate_buffers(dev: CpuDevice) -> None:
    plan = _replicable_plan(dev)
    plan.execute()
    removed: List[int] = []
    plan.release_intermediate_buffers(removed.append)
    assert sorted(removed) == [2, 3, 4], "everything but the declared input (1) and the output (5)"
    assert plan.output_buffer().tolist() == [11.0, 22.0, 33.0, 44.0]
    assert plan.buffer(1) is not None and plan.buffer(3) is None
    with pytest.raises(ExecutionError, match="released"):
        plan.execute()
    with pytest.raises(ExecutionError, match="released"):
        plan.execute_with_vars({})
    with pytest.raises(ExecutionError, match="released"):
        plan.replicate()


def _aliased_builder(dev: CpuDevice) -> ExecutionPlanBuilder:
    """Output buffer 1 (also named 4) <- temporary 2 (also named 3)."""
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(1, f32(dev, [0.0]))
    tmp = b.add_buffer(2, f32(dev, [0.0]))
    b.map_buffer(3, tmp)
    b.map_buffer(4, out)
    b.add_op(copy_op(1, out, tmp))
    b.set_output_buffer(out)
    return b


def test_release_intermediate_buffers_calls_remove_fn_for_aliases(dev: CpuDevice) -> None:
    b = _aliased_builder(dev)
    plan = b.build()
    removed: List[int] = []
    plan.release_intermediate_buffers(removed.append)
    assert sorted(removed) == [2, 3]
    plan2 = b.build()
    plan2.release_intermediate_buffers()  # remove_fn is optional
    with pytest.raises(ExecutionError):
        plan2.execute()


def test_release_all_buffers_drops_outputs_and_inputs_too(dev: CpuDevice) -> None:
    """svod's release_all_buffers: every buffer name goes to remove_fn, outputs and inputs included."""
    plan = _replicable_plan(dev)
    plan.execute()
    removed: List[int] = []
    plan.release_all_buffers(removed.append)
    assert sorted(removed) == [1, 2, 3, 4, 5]
    assert plan.output_buffer() is None and plan.output_buffers() == [None] and plan.buffer(1) is None
    with pytest.raises(ExecutionError, match=r"released \(release_all_buffers\)"):
        plan.execute()
    with pytest.raises(ExecutionError, match="released"):
        plan.replicate()


def test_release_all_buffers_calls_remove_fn_for_aliases(dev: CpuDevice) -> None:
    b = _aliased_builder(dev)
    removed: List[int] = []
    b.build().release_all_buffers(removed.append)
    assert sorted(removed) == [1, 2, 3, 4]
    plan = b.build()
    plan.release_all_buffers()  # remove_fn is optional
    with pytest.raises(ExecutionError, match="released"):
        plan.execute_with_vars({})
