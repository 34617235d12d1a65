"""Empty tensors in plans: 0-byte buffers, copies and views of nothing, and kernels whose launch size has a 0 dimension
(no work: never dispatched, so no kernel sees the pointer of a 0-byte buffer)."""

from __future__ import annotations

import pytest
from support.plan import RecordingProgram, copy_op, dev, f32, mock_kernel, prepared, var_plan  # noqa: F401 - dev is a fixture

from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import BufferAllocationError, PlanError
from svod_min.plan.execution_plan import ExecutionPlanBuilder, PreparedBufferView, RuntimeVar


def test_zero_byte_buffers_copies_and_views_build_and_run(dev: CpuDevice) -> None:
    whole = f32(dev, [1.0, 2.0])
    b = ExecutionPlanBuilder(dev)
    base = b.add_buffer(1, whole)
    tail = b.add_buffer(2, whole.view(8, 0))  # the 0 bytes just past the data: still inside the base
    src = b.add_buffer(3, dev.allocate([2, 0], "float32"))
    dst = b.add_buffer(4, dev.allocate([0], "float32"))
    b.declare_input(src)
    b.add_op(PreparedBufferView(id=1, buffer_indices=[tail, base], byte_offset=8, byte_size=0))
    b.add_op(copy_op(2, dst, src))
    b.set_output_buffers([dst, base])
    plan = b.build()
    plan.execute()
    assert plan.buffer_at(dst).nbytes == 0 and plan.buffer_at(dst).tolist() == []
    assert plan.buffer_at(base).tolist() == [1.0, 2.0]


def test_a_view_of_nothing_past_its_base_is_still_refused(dev: CpuDevice) -> None:
    whole = f32(dev, [1.0, 2.0])
    b = ExecutionPlanBuilder(dev)
    base = b.add_buffer(1, whole)
    tail = b.add_buffer(2, whole.view(8, 0))
    b.add_op(PreparedBufferView(id=1, buffer_indices=[tail, base], byte_offset=12, byte_size=0))
    b.set_output_buffer(base)
    with pytest.raises(PlanError, match="view is bytes"):
        b.build()


def test_launch_size_zero_is_no_work_and_nothing_is_dispatched(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = var_plan(dev, prog, var="n", lo=0, hi=10, val=0, global_size=("n", 1, 1))
    plan.execute()
    assert prog.count == 0
    assert len(plan.execute_profiled()) == 1 and prog.count == 0  # profiled: the op is listed, not run
    plan.execute_with_vars({"n": 3})
    assert prog.calls == [([3], (3, 1, 1), None)]
    plan.execute_with_vars({"n": 0})  # back to no work: the bound launch is dropped, not dispatched
    assert prog.count == 1
    plan.execute_with_vars({"n": 2})
    assert prog.calls[-1] == ([2], (2, 1, 1), None)


def test_a_kernel_with_no_work_skips_its_extent_checks_only_when_they_hold(dev: CpuDevice) -> None:
    """No work is not a licence to declare more than the buffers hold: extents are checked first."""
    prog = RecordingProgram()
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(1, dev.allocate([0], "float32"))
    kernel = mock_kernel(prog, var_names=["n"], global_size=("n", 1, 1))
    b.add_kernel(
        prepared(1, kernel, [out], vals=[0], runtime_vars=[RuntimeVar("n", 0, 4)], extents={0: "n + 1"}),
    )
    b.set_output_buffer(out)
    with pytest.raises(BufferAllocationError, match="needs 1 elements"):
        b.build()
    assert prog.count == 0
