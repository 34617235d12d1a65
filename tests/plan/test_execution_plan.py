"""ExecutionPlan: svod's peer tests (reference §4) ported, plus svod_min's own guarantees.

Ported tests keep svod's names. Where svod_min deliberately differs (it
rejects bad indices and unknown custom functions at ``build()``, svod at
run time), the test docstring says so.
"""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest

from conftest import needs_cc
from support.plan import (
    ActiveTracker,
    RecordingProgram,
    copy_action,
    copy_op,
    f32,
    i32,
    mock_kernel,
    prepared,
)
from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import BufferAllocationError, ExecutionError, NotSupportedError, PlanError, PlanPoisonedError, VariableBoundsError
from svod_min.plan.execution_plan import ExecutionPlan, ExecutionPlanBuilder, PreparedBufferView, PreparedCopy, PreparedCustomFunction, RuntimeVar, kahn_levels, register_custom_function, run_custom_function
from svod_min.profiler import KernelProfile

SLEEP = 0.03  # the 30 ms of morok's host-parallelism mocks


@pytest.fixture(scope="module")
def dev() -> CpuDevice:
    return CpuDevice(threads=4)


def _builder(dev: CpuDevice) -> ExecutionPlanBuilder:
    return ExecutionPlanBuilder(dev)


def _custom(op_id: int, kind: str, buffers: List[int], **kw: Any) -> PreparedCustomFunction:
    return PreparedCustomFunction(id=op_id, kind=kind, buffer_indices=buffers, **kw)


# --- plan building -----------------------------------------------------------------------------


def test_builder_basic(dev: CpuDevice) -> None:
    plan = _builder(dev).build()
    assert isinstance(plan, ExecutionPlan)
    assert plan.prepared_kernels() == [] and plan.kernels() == []
    assert plan.buffers() == [] and plan.num_outputs == 0
    assert plan.device is dev
    assert plan.op_order == [] and plan.op_levels == []
    plan.execute()  # an empty plan runs and does nothing
    assert plan.execute_profiled() == []


def test_builder_basic_with_one_kernel(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    b = _builder(dev)
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
    plan = _builder(dev).build()
    assert plan.output_buffer() is None
    assert plan.output_buffer_at(0) is None
    assert plan.output_buffer_at(7) is None
    with pytest.raises(PlanError):
        plan.output_buffer_idx()


def test_builder_map_buffer_alias(dev: CpuDevice) -> None:
    b = _builder(dev)
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
    b = _builder(dev)
    b.add_buffer(10, f32(dev, [0.0] * 8))
    with pytest.raises(PlanError, match="output buffers must be set explicitly"):
        b.build()
    b.add_op(copy_op(1, 0, 0))
    with pytest.raises(PlanError, match="output buffers must be set explicitly"):
        b.build()
    b.set_output_buffers([0])
    b.build()


def test_builder_rejects_invalid_compiled_output_index(dev: CpuDevice) -> None:
    b = _builder(dev)
    a = b.add_buffer(700, f32(dev, [0.0] * 4))
    c = b.add_buffer(701, f32(dev, [0.0] * 4))
    b.add_kernel(prepared(77, mock_kernel(RecordingProgram(), nbufs=2), [a, c], output_indices=[2]))
    b.set_output_buffer(a)
    with pytest.raises(PlanError, match="output index out of range"):
        b.build()


def test_builder_rejects_kernel_without_outputs_and_wrong_val_count(dev: CpuDevice) -> None:
    b = _builder(dev)
    a = b.add_buffer(1, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(RecordingProgram()), [a], output_indices=[]))
    b.set_output_buffer(a)
    with pytest.raises(PlanError, match="no output indices"):
        b.build()
    b = _builder(dev)
    a = b.add_buffer(1, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(RecordingProgram(), var_names=["n", "m"]), [a], vals=[1]))
    b.set_output_buffer(a)
    with pytest.raises(PlanError, match="1 values for variables"):
        b.build()


def test_build_compiled_program_invalid_buffer_indices_errors(dev: CpuDevice) -> None:
    b = _builder(dev)
    dst = b.add_buffer(860, f32(dev, [0.0] * 4))
    b.add_kernel(prepared(861, mock_kernel(RecordingProgram(), nbufs=2), [dst, dst + 1]))
    b.set_output_buffer(dst)
    with pytest.raises(PlanError, match="buffer index out of range"):
        b.build()


def test_build_rejects_output_index_beyond_buffers(dev: CpuDevice) -> None:
    b = _builder(dev)
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
    b = _builder(dev)
    _copy_plan_buffers(dev, b, 2)
    b.add_op(copy_op(10, 0, 1, deps=[999]))
    with pytest.raises(PlanError, match="unknown op id"):
        b.build()


def test_execute_mixed_ops_cycle_errors(dev: CpuDevice) -> None:
    b = _builder(dev)
    _copy_plan_buffers(dev, b, 2)
    b.add_op(copy_op(1, 0, 1, deps=[2]))
    b.add_op(copy_op(2, 1, 0, deps=[1]))
    with pytest.raises(PlanError, match=r"cycle detected.*blocked_ids=\[1, 2\]"):
        b.build()


def test_cycle_through_instance_dependency_with_duplicate_ids(dev: CpuDevice) -> None:
    """With repeated ids, op 1's id dependency binds to op 0; op 0's instance dependency closes the loop."""
    b = _builder(dev)
    _copy_plan_buffers(dev, b, 4)
    b.add_op_with_instance_dependencies(copy_op(7, 0, 1), [1])
    b.add_op(copy_op(7, 2, 3, deps=[7]))
    b.add_op(copy_op(8, 3, 2))
    with pytest.raises(PlanError, match=r"cycle detected.*blocked_ids=\[7\]"):
        b.build()


def test_execute_mixed_ops_allows_duplicate_ids_in_expanded_schedule_order(dev: CpuDevice) -> None:
    b = _builder(dev)
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
    b = _builder(dev)
    _copy_plan_buffers(dev, b, 4)
    b.add_op(copy_op(1, 0, 1, deps=[9]))
    b.add_op(copy_op(1, 2, 3))
    b.add_op(copy_op(9, 3, 2))
    with pytest.raises(PlanError, match="only defined later"):
        b.build()


def test_compute_execution_levels_duplicate_ids_is_deterministic(dev: CpuDevice) -> None:
    b = _builder(dev)
    _copy_plan_buffers(dev, b, 6)
    b.add_op(copy_op(42, 0, 1))
    b.add_op(copy_op(9, 2, 3, deps=[42]))
    b.add_op(copy_op(42, 4, 5, deps=[9]))
    for _ in range(3):  # same answer every time
        plan = b.build()
        assert plan.op_order == [0, 1, 2]
        assert plan.op_levels == [[0], [1], [2]]


def test_instance_dependencies_target_exact_duplicate_id_instance(dev: CpuDevice) -> None:
    b = _builder(dev)
    _copy_plan_buffers(dev, b, 8)
    b.add_op(copy_op(42, 0, 1))
    b.add_op(copy_op(9, 2, 3))
    b.add_op(copy_op(42, 4, 5, deps=[9]))
    b.add_op_with_instance_dependencies(copy_op(77, 6, 7), [0])
    plan = b.build()
    assert plan.op_levels == [[0, 1], [2, 3]]
    assert plan.op_order == [0, 1, 2, 3]


def test_instance_dependencies_reject_unknown_op_index(dev: CpuDevice) -> None:
    b = _builder(dev)
    _copy_plan_buffers(dev, b, 2)
    b.add_op_with_instance_dependencies(copy_op(42, 0, 1), [1])
    with pytest.raises(PlanError, match="unknown op index"):
        b.build()


def test_instance_dependencies_reject_self(dev: CpuDevice) -> None:
    b = _builder(dev)
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
    b = _builder(dev)
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


# --- op execution ---------------------------------------------------------------------------------


def test_execute_buffer_copy_op(dev: CpuDevice) -> None:
    b = _builder(dev)
    dst = b.add_buffer(1, f32(dev, [0.0] * 4))
    src = b.add_buffer(2, f32(dev, [1.0, 2.0, 3.0, 4.0]))
    b.add_op(copy_op(99, dst, src))
    b.set_output_buffer(dst)
    plan = b.build()
    plan.execute()
    assert plan.output_buffer().tolist() == [1.0, 2.0, 3.0, 4.0]


def test_copy_size_mismatch_rejected(dev: CpuDevice) -> None:
    b = _builder(dev)
    dst = b.add_buffer(1, f32(dev, [0.0] * 4))
    src = b.add_buffer(2, f32(dev, [1.0] * 3))
    b.add_op(copy_op(99, dst, src))
    b.set_output_buffer(dst)
    with pytest.raises(PlanError, match="copy size mismatch"):
        b.build()
    b = _builder(dev)
    dst = b.add_buffer(1, f32(dev, [0.0] * 4))
    b.add_op(PreparedCopy(id=1, buffer_indices=[dst]))
    b.set_output_buffer(dst)
    with pytest.raises(PlanError, match="two buffer indices"):
        b.build()


def test_execute_buffer_view_op(dev: CpuDevice) -> None:
    base = f32(dev, [float(v) for v in range(8)])
    view = base.view(2 * 4, 4 * 4)
    b = _builder(dev)
    out = b.add_buffer(100, view)
    base_idx = b.add_buffer(101, base)
    b.add_op(PreparedBufferView(id=1, buffer_indices=[out, base_idx], byte_offset=8, byte_size=16))
    b.set_output_buffer(out)
    plan = b.build()
    plan.execute()
    assert plan.output_buffer().tolist() == [2.0, 3.0, 4.0, 5.0]


@pytest.mark.parametrize(
    "offset, size, message",
    [(4, 16, "op says"), (8, 12, "op says")],
)
def test_view_op_must_match_its_buffer(dev: CpuDevice, offset: int, size: int, message: str) -> None:
    base = f32(dev, [0.0] * 8)
    b = _builder(dev)
    out = b.add_buffer(100, base.view(8, 16))
    base_idx = b.add_buffer(101, base)
    b.add_op(PreparedBufferView(id=1, buffer_indices=[out, base_idx], byte_offset=offset, byte_size=size))
    b.set_output_buffer(out)
    with pytest.raises(PlanError, match=message):
        b.build()


def test_view_op_needs_shared_storage(dev: CpuDevice) -> None:
    b = _builder(dev)
    out = b.add_buffer(100, f32(dev, [0.0] * 4))
    base_idx = b.add_buffer(101, f32(dev, [0.0] * 8))
    b.add_op(PreparedBufferView(id=1, buffer_indices=[out, base_idx], byte_offset=0, byte_size=16))
    b.set_output_buffer(out)
    with pytest.raises(PlanError, match="do not share storage"):
        b.build()


def test_execute_mixed_ops_compiled_copy_view_in_order(dev: CpuDevice) -> None:
    prog = RecordingProgram(copy_action())
    copy_dst = f32(dev, [0.0] * 4)
    b = _builder(dev)
    src = b.add_buffer(10, f32(dev, [1.0, 2.0, 3.0, 4.0]))
    mid = b.add_buffer(11, f32(dev, [0.0] * 4))
    cdst = b.add_buffer(12, copy_dst)
    out = b.add_buffer(13, copy_dst.view(4, 12))
    b.add_kernel(prepared(1, mock_kernel(prog, nbufs=2), [mid, src]))
    b.add_op(copy_op(2, cdst, mid, deps=[1]))
    b.add_op(PreparedBufferView(id=3, buffer_indices=[out, cdst], byte_offset=4, byte_size=12, dependencies=[2]))
    b.set_output_buffer(out)
    plan = b.build()
    assert plan.op_levels == [[0], [1], [2]]
    plan.execute()
    assert prog.count == 1
    assert plan.output_buffer().tolist() == [2.0, 3.0, 4.0]


def test_execute_mixed_ops_respects_dependencies_not_insertion_order(dev: CpuDevice) -> None:
    """The kernel is inserted first but depends on the copy (a later-inserted, uniquely named op)."""
    prog = RecordingProgram(copy_action())
    b = _builder(dev)
    src = b.add_buffer(300, f32(dev, [9.0, 8.0, 7.0, 6.0]))
    mid = b.add_buffer(301, f32(dev, [0.0] * 4))
    out = b.add_buffer(302, f32(dev, [0.0] * 4))
    b.add_kernel(prepared(3, mock_kernel(prog, nbufs=2), [out, mid], deps=[2]))
    b.add_op(copy_op(2, mid, src))
    b.set_output_buffer(out)
    plan = b.build()
    assert plan.op_order == [1, 0]
    plan.execute()
    assert prog.count == 1
    assert plan.output_buffer().tolist() == [9.0, 8.0, 7.0, 6.0]


def test_execute_copy_invalid_indices_errors(dev: CpuDevice) -> None:
    """svod builds this plan and fails in ``execute``; svod_min refuses it at ``build()``."""
    b = _builder(dev)
    dst = b.add_buffer(600, f32(dev, [0.0] * 4))
    b.add_op(copy_op(55, dst, dst + 1))
    b.set_output_buffer(dst)
    with pytest.raises(PlanError, match="out of range"):
        b.build()


def test_execute_custom_function_invalid_indices_errors(dev: CpuDevice) -> None:
    """svod fails in ``execute``; svod_min checks indices at ``build()`` (before the kind)."""
    b = _builder(dev)
    dst = b.add_buffer(880, f32(dev, [0.0] * 4))
    b.add_op(_custom(881, "EncDec", [dst, dst + 1]))
    b.set_output_buffer(dst)
    with pytest.raises(PlanError, match="buffer index out of range"):
        b.build()


def test_execute_custom_function_op_returns_unsupported(dev: CpuDevice) -> None:
    """An unregistered custom-function kind.

    svod builds the plan, fails the first ``execute`` with
    ``Unsupported{kind: "EncDec", reason: "...attrs=1..."}`` and then reports
    ``PlanPoisoned``. svod_min knows at build time that nothing can run the op,
    so ``build()`` raises NotSupportedError with the same kind and attrs count;
    the poisoning half is covered by ``test_custom_function_failure_poisons_plan``.
    """
    b = _builder(dev)
    dst = b.add_buffer(201, f32(dev, [0.0] * 4))
    src = b.add_buffer(202, f32(dev, [0.0] * 4))
    b.add_op(_custom(200, "EncDec", [dst, src], attrs={"n": 3}))
    b.set_output_buffer(dst)
    with pytest.raises(NotSupportedError) as info:
        b.build()
    assert "EncDec" in str(info.value) and "attrs=1" in str(info.value)
    assert type(info.value) is NotSupportedError  # not a PlanError: the plan is well formed, the kind unknown
    # The run-time path (svod's) says the same.
    with pytest.raises(NotSupportedError, match=r"EncDec.*attrs=1"):
        run_custom_function(_custom(200, "EncDec", [0], attrs={"n": 3}), [], {})


def test_custom_function_failure_poisons_plan(dev: CpuDevice) -> None:
    calls: List[int] = []

    def boom(buffers: List[Any], vars: Any, attrs: Any) -> None:
        calls.append(1)
        raise RuntimeError("encoder exploded")

    register_custom_function("test_boom", boom)
    prog = RecordingProgram()
    b = _builder(dev)
    out = b.add_buffer(1, f32(dev, [0.0] * 4))
    b.add_kernel(prepared(1, mock_kernel(prog, var_names=["n"]), [out], vals=[1],
                          runtime_vars=[RuntimeVar("n", 1, 9)]))
    b.add_op(_custom(2, "test_boom", [out], dependencies=[1]))
    b.set_output_buffer(out)
    plan = b.build()
    with pytest.raises(ExecutionError, match="encoder exploded") as info:
        plan.execute()
    assert not isinstance(info.value, PlanPoisonedError)
    assert plan.poisoned and "poisoned" in repr(plan)
    with pytest.raises(PlanPoisonedError, match="encoder exploded"):
        plan.execute()
    with pytest.raises(PlanPoisonedError):
        plan.execute_profiled()
    with pytest.raises(PlanPoisonedError):
        plan.execute_with_vars({"n": 2})
    with pytest.raises(PlanPoisonedError):
        plan.replicate()
    assert calls == [1] and prog.count == 1


def test_kernel_svod_error_poisons_plan(dev: CpuDevice) -> None:
    def fail(buffers: Any, vals: Any) -> None:
        raise ExecutionError("device lost")

    b = _builder(dev)
    out = b.add_buffer(1, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(RecordingProgram(fail)), [out]))
    b.set_output_buffer(out)
    plan = b.build()
    with pytest.raises(ExecutionError, match="device lost"):
        plan.execute()
    with pytest.raises(PlanPoisonedError, match="device lost"):
        plan.execute()


def test_custom_function_receives_buffers_vars_and_attrs(dev: CpuDevice) -> None:
    seen: List[Any] = []

    def fill(buffers: List[Any], vars: Any, attrs: Any) -> None:
        seen.append((dict(vars), dict(attrs), len(buffers)))
        for buf in buffers:
            if hasattr(buf, "ravel"):
                buf.ravel()[:] = attrs["value"] + vars["k"]
            else:  # no numpy: the plan hands over its own buffers
                buf.copyin([float(attrs["value"] + vars["k"])] * len(buf))

    register_custom_function("test_fill", fill)
    b = _builder(dev)
    x = b.add_buffer(1, f32(dev, [0.0] * 3))
    y = b.add_buffer(2, f32(dev, [0.0] * 2))
    b.add_op(_custom(5, "test_fill", [x, y], attrs={"value": 4}, fixedvars={"k": 1}))
    b.set_output_buffers([x, y])
    plan = b.build()
    plan.execute()
    assert [o.tolist() for o in plan.output_buffers()] == [[5.0] * 3, [5.0] * 2]
    assert seen == [({"k": 1}, {"value": 4}, 2)]


def test_execution_plan_runs_host_allreduce_numerically(dev: CpuDevice) -> None:
    b = _builder(dev)
    out = b.add_buffer(301, f32(dev, [0.0, 0.0]))
    s0 = b.add_buffer(302, f32(dev, [4.0, 7.0]))
    s1 = b.add_buffer(303, f32(dev, [11.0, 7.0]))
    b.add_op(_custom(300, "allreduce", [out, s0, s1]))
    b.set_output_buffer(out)
    plan = b.build()
    plan.execute()
    assert plan.output_buffer().tolist() == [15.0, 14.0]
    assert [buf.tolist() for buf in plan.buffers()] == [[15.0, 14.0]] * 3  # every buffer holds the sum


def test_host_allreduce_of_two_int_buffers(dev: CpuDevice) -> None:
    b = _builder(dev)
    x = b.add_buffer(1, i32(dev, [1, 2, 3]))
    y = b.add_buffer(2, i32(dev, [10, 20, 30]))
    b.add_op(_custom(1, "allreduce", [x, y]))
    b.set_output_buffers([x, y])
    plan = b.build()
    plan.execute()
    assert [buf.tolist() for buf in plan.output_buffers()] == [[11, 22, 33], [11, 22, 33]]


def test_host_allreduce_rejects_unequal_lengths(dev: CpuDevice) -> None:
    b = _builder(dev)
    x = b.add_buffer(1, f32(dev, [1.0, 2.0]))
    y = b.add_buffer(2, f32(dev, [1.0]))
    b.add_op(_custom(1, "allreduce", [x, y]))
    b.set_output_buffer(x)
    plan = b.build()
    with pytest.raises(ExecutionError, match="equal length"):
        plan.execute()
    assert plan.poisoned


def test_execute_profiled_returns_one_profile_per_op(dev: CpuDevice) -> None:
    register_custom_function("test_noop", lambda buffers, vars, attrs: None)
    prog = RecordingProgram(copy_action())
    arena = f32(dev, [1.0] * 8)
    b = _builder(dev)
    a = b.add_buffer(1, arena)
    v = b.add_buffer(2, arena.view(16, 16))
    o = b.add_buffer(3, f32(dev, [0.0] * 4))
    k = prepared(1, mock_kernel(prog, nbufs=2, var_names=["n"]), [o, v], vals=[4])
    k.flops, k.bytes_moved = "2*n", 32
    b.add_op(PreparedBufferView(id=0, buffer_indices=[v, a], byte_offset=16, byte_size=16))
    b.add_kernel(k)
    b.add_op(copy_op(2, v, o, deps=[1]))
    b.add_op(_custom(3, "test_noop", [o], dependencies=[2]))
    b.set_output_buffer(o)
    plan = b.build()
    profiles = plan.execute_profiled()
    assert all(isinstance(p, KernelProfile) for p in profiles)
    assert [p.kind for p in profiles] == ["view", "kernel", "copy", "custom"]
    assert [p.op_index for p in profiles] == plan.op_order
    kernel = profiles[1]
    assert (kernel.name, kernel.flops, kernel.bytes_moved, kernel.num_buffers) == ("k", 8, 32, 2)
    assert profiles[2].bytes_moved == 32 and profiles[3].name == "custom:test_noop"
    assert all(p.elapsed >= 0 and p.end_ns >= p.start_ns for p in profiles)
    assert prog.count == 1


# --- variables -------------------------------------------------------------------------------------


def _var_plan(dev: CpuDevice, prog: Any, *, var: str = "N", lo: int = 1, hi: int = 8, val: int = 1,
              global_size: Any = (1, 1, 1), fixed: Any = None) -> ExecutionPlan:
    b = _builder(dev)
    dst = b.add_buffer(8500, f32(dev, [0.0] * 4))
    b.add_kernel(prepared(8500, mock_kernel(prog, var_names=[var], global_size=global_size), [dst], vals=[val],
                          fixedvars=fixed, runtime_vars=[RuntimeVar(var, lo, hi)]))
    b.set_output_buffer(dst)
    return b.build()


def test_execute_with_vars_does_not_override_fixedvars(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog, val=7, hi=100, fixed={"N": 7})
    plan.execute_with_vars({"N": 42})
    assert plan.prepared_kernels()[0].vals == [7]
    assert prog.count == 1 and prog.calls[0][0] == [7]


def test_execute_with_vars_updates_non_fixed_vars(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog, val=1, hi=100)
    plan.execute_with_vars({"N": 42})
    assert plan.prepared_kernels()[0].vals == [42]
    assert prog.count == 1 and prog.calls[0][0] == [42]
    plan.execute()  # the new value sticks
    assert prog.calls[1][0] == [42]


def test_execute_with_vars_updates_symbolic_global_size_without_recompile(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog, global_size=("N", 1, 1))
    kernel = plan.kernels()[0]
    plan.execute_with_vars({"N": 5})
    assert prog.count == 1
    assert prog.last_global_size == (5, 1, 1)
    assert prog.calls[0][0] == [5]
    assert plan.kernels()[0] is kernel  # same compiled kernel


def test_execute_with_vars_rejects_out_of_bounds_launch_var_before_dispatch(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog, lo=1, hi=4, global_size=("N", 1, 1))
    with pytest.raises(VariableBoundsError, match="outside bounds") as info:
        plan.execute_with_vars({"N": 5})
    assert "N=5 is outside bounds [1, 4]" in str(info.value)
    assert prog.count == 0, "nothing may dispatch after a bounds failure"
    assert not plan.poisoned and plan.prepared_kernels()[0].vals == [1]
    plan.execute_with_vars({"N": 4})
    assert prog.count == 1 and prog.last_global_size == (4, 1, 1)


def test_execute_with_vars_profiled_updates_symbolic_global_size(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog, global_size=("N", 1, 1))
    profiles = plan.execute_with_vars_profiled({"N": 6})
    assert len(profiles) == 1
    assert prog.count == 1 and prog.last_global_size == (6, 1, 1)


def test_execute_with_vars_profiled_updates_non_fixed_vars(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog, hi=100)
    profiles = plan.execute_with_vars_profiled({"N": 42})
    assert len(profiles) == 1 and profiles[0].kind == "kernel"
    assert plan.prepared_kernels()[0].vals == [42]
    assert prog.count == 1


def test_execute_with_vars_does_not_override_core_id_runtime_var(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog, var="core_id", lo=0, hi=3, val=0)
    plan.execute_with_vars({"core_id": 2})
    assert prog.count == 1
    assert prog.calls[0][0] == [0], "core_id is set by the dispatcher, never by the caller"
    assert plan.prepared_kernels()[0].vals == [0]


def test_execute_with_vars_unknown_variable(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog)
    with pytest.raises(PlanError, match="'M'") as info:
        plan.execute_with_vars({"M": 3})
    assert not isinstance(info.value, VariableBoundsError)
    assert prog.count == 0 and not plan.poisoned


@pytest.mark.parametrize("value", [5.0, "5", True, None])
def test_execute_with_vars_non_int_value(dev: CpuDevice, value: Any) -> None:
    prog = RecordingProgram()
    plan = _var_plan(dev, prog)
    with pytest.raises(VariableBoundsError, match="must be an int"):
        plan.execute_with_vars({"N": value})
    assert prog.count == 0 and plan.prepared_kernels()[0].vals == [1]


def test_execute_with_vars_checks_every_variable_before_patching(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    b = _builder(dev)
    out = b.add_buffer(1, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(prog, var_names=["N", "M"]), [out], vals=[1, 1],
                          runtime_vars=[RuntimeVar("N", 1, 8), RuntimeVar("M", 1, 8)]))
    b.set_output_buffer(out)
    plan = b.build()
    with pytest.raises(VariableBoundsError, match="M=99"):
        plan.execute_with_vars({"N": 3, "M": 99})
    assert plan.prepared_kernels()[0].vals == [1, 1] and prog.count == 0
    plan.execute_with_vars({"N": 3, "M": 4})
    assert prog.calls == [([3, 4], None, None)]


def test_runtime_var_bounds_intersect_across_ops(dev: CpuDevice) -> None:
    p1, p2 = RecordingProgram(), RecordingProgram()
    b = _builder(dev)
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
    plan = _var_plan(dev, prog, var="n", lo=1, hi=1 << 20, val=1000, global_size=("(n+255)//256", "max(1, n//512)", 1))
    plan.execute()
    assert prog.last_global_size == (4, 1, 1)
    plan.execute_with_vars({"n": 257})
    assert prog.last_global_size == (2, 1, 1)
    plan.execute_with_vars({"n": 1024})
    assert prog.last_global_size == (4, 2, 1)
    plan.execute_with_vars({"n": 100})
    assert prog.last_global_size is None  # a single invocation is dispatched without a launch size


def test_launch_size_not_positive_is_rejected_before_dispatch(dev: CpuDevice) -> None:
    prog = RecordingProgram()
    with pytest.raises(PlanError, match="must be positive"):
        _var_plan(dev, prog, var="n", lo=0, hi=10, val=3, global_size=("n-5", 1, 1))
    plan = _var_plan(dev, prog, var="n", lo=0, hi=10, val=7, global_size=("n-5", 1, 1))
    with pytest.raises(PlanError, match="launch size 'n-5' = 0 must be positive"):
        plan.execute_with_vars({"n": 5})
    assert prog.count == 0 and not plan.poisoned
    assert plan.prepared_kernels()[0].vals == [7]
    plan.execute()
    assert prog.calls == [([7], (2, 1, 1), None)]


def test_launch_expression_with_unknown_variable_rejected_at_build(dev: CpuDevice) -> None:
    with pytest.raises(PlanError, match="unknown variable 'm'"):
        _var_plan(dev, RecordingProgram(), var="n", global_size=("m", 1, 1))


def test_kernel_extent_larger_than_buffer_is_rejected(dev: CpuDevice) -> None:
    prog = RecordingProgram()

    def build(n: int) -> ExecutionPlan:
        b = _builder(dev)
        out = b.add_buffer(1, f32(dev, [0.0] * 4))
        b.add_kernel(prepared(1, mock_kernel(prog, var_names=["n"]), [out], vals=[n], extents={0: "n"},
                              runtime_vars=[RuntimeVar("n", 1, 64)]))
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


# --- host parallelism ------------------------------------------------------------------------------------


def _parallel_plan(dev: CpuDevice, buffers: List[Any], *, safe: bool = True, between: Any = None,
                   global_size: Any = (1, 1, 1), extra_reads: Any = None) -> ActiveTracker:
    """One sleeping kernel per buffer, all independent; returns the tracker after one run."""
    tracker = ActiveTracker()
    b = _builder(dev)
    idx = [b.add_buffer(10 + n, buf) for n, buf in enumerate(buffers)]
    shared = b.add_buffer(99, extra_reads) if extra_reads is not None else None
    for n, i in enumerate(idx):
        if between is not None and n == 1:
            b.add_op(between(i))
        prog = RecordingProgram(sleep=SLEEP, tracker=tracker)
        kern = mock_kernel(prog, nbufs=1 if shared is None else 2, host_parallel_safe=safe, global_size=global_size,
                           var_names=["core_id"] if global_size[0] != 1 else ())
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
    tracker = _parallel_plan(dev, buffers, between=lambda i: _custom(50, "test_barrier", []))
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

    b = _builder(dev)
    x = b.add_buffer(1, f32(dev, [0.0]))
    y = b.add_buffer(2, f32(dev, [0.0]))
    b.add_kernel(prepared(1, mock_kernel(RecordingProgram(fail), host_parallel_safe=True), [x]))
    b.add_kernel(prepared(2, mock_kernel(RecordingProgram(slow_ok), host_parallel_safe=True), [y]))
    b.set_output_buffers([x, y])
    plan = b.build()
    with pytest.raises(ExecutionError, match="bad kernel"):
        plan.execute()
    assert finished == [1] and plan.poisoned


# --- svod extras: output regions, replicate, release ----------------------------------------------------


def test_copy_output_region_to_buffer(dev: CpuDevice) -> None:
    b = _builder(dev)
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
    b = _builder(dev)
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
    plan = _var_plan(dev, prog, hi=100)
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
    b = _builder(dev)
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


# --- concurrency ---------------------------------------------------------------------------------------------


def _run_threads(targets: List[Any]) -> List[BaseException]:
    errors: List[BaseException] = []

    def wrap(fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: B902 - reported by the test
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return errors


def test_two_plans_on_two_threads(dev: CpuDevice) -> None:
    def make(scale: float) -> Any:
        def act(buffers: Any, vals: Any) -> None:
            out, src = buffers
            time.sleep(0)
            out.copyin([v * scale + vals[0] for v in src.tolist()])

        prog = RecordingProgram(act)
        b = _builder(dev)
        out = b.add_buffer(1, f32(dev, [0.0] * 4))
        src = b.add_buffer(2, f32(dev, [1.0, 2.0, 3.0, 4.0]))
        b.add_kernel(prepared(1, mock_kernel(prog, nbufs=2, var_names=["k"]), [out, src], vals=[0],
                              runtime_vars=[RuntimeVar("k", 0, 1000)]))
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

    assert _run_threads([loop(p1, 2.0), loop(p2, -1.0)]) == []
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

    b = _builder(dev)
    counter = b.add_buffer(1, i32(dev, [0]))
    stamp = b.add_buffer(2, i32(dev, [0]))
    prog = RecordingProgram(rmw, tracker=tracker)
    b.add_kernel(prepared(1, mock_kernel(prog, nbufs=2, outs=(0, 1), var_names=["t"]), [counter, stamp],
                          output_indices=[0, 1], vals=[0], runtime_vars=[RuntimeVar("t", 0, 3)]))
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

    assert _run_threads([worker(t) for t in range(4)]) == []
    assert problems == []
    assert tracker.max_active == 1
    assert plan.buffer(1).tolist() == [800]
    assert prog.count == 800 and not plan.poisoned


# --- real kernels ----------------------------------------------------------------------------------------------

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
    return mock_kernel(program, nbufs=nbufs, var_names=var_names, host_parallel_safe=safe,
                       global_size=global_size, entry_point=program.entry_point)


@needs_cc
def test_real_two_kernel_chain(dev: CpuDevice, programs: Any) -> None:
    b = _builder(dev)
    a = b.add_buffer(1, f32(dev, [1.0, 2.0, 3.0, 4.0]))
    mid = b.add_buffer(2, f32(dev, [0.0] * 4))
    out = b.add_buffer(3, f32(dev, [0.0] * 4))
    nvar = [RuntimeVar("n", 1, 4)]
    b.add_kernel(prepared(1, _real(programs["scale2"], nbufs=2, var_names=["n"]), [mid, a], vals=[4],
                          extents={0: "n", 1: "n"}, runtime_vars=nvar))
    b.add_kernel(prepared(2, _real(programs["add1"], nbufs=2, var_names=["n"]), [out, mid], vals=[4], deps=[1],
                          extents={0: "n", 1: "n"}, runtime_vars=nvar))
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
    b = _builder(dev)
    out = b.add_buffer(1, i32(dev, [-1] * 16))
    b.add_kernel(prepared(1, _real(programs["slices"], nbufs=1, var_names=["core_id"], global_size=("4", 1, 1)),
                          [out], vals=[0], runtime_vars=[RuntimeVar("core_id", 0, 3)]))
    b.set_output_buffer(out)
    plan = b.build()
    plan.execute_with_vars({"core_id": 3})  # ignored: the dispatcher sets it per invocation
    assert plan.output_buffer().tolist() == [c * 100 + j for c in range(4) for j in range(4)]


@needs_cc
def test_real_plan_with_views_of_one_arena(dev: CpuDevice, programs: Any) -> None:
    arena = f32(dev, [0.0] * 16)
    b = _builder(dev)
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
        b = _builder(dev)
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

    assert _run_threads([loop(make("scale2"), lambda v: 2 * v), loop(make("add1"), lambda v: v + 1)]) == []
