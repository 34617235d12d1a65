"""ExecutionPlan misuse found by an adversarial review (2026-11-24): each case once crashed, hung,
gave a silent wrong answer or leaked a raw exception. Real compiled kernels, so a wrong size would
really write out of bounds (a canary after the buffer shows it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from typing import Any, Dict, List

import pytest
from conftest import needs_cc

from svod_min.cache.kernel_cache import CachedKernel
from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import ExecutionError, PlanError, PlanPoisonedError
from svod_min.plan import native_replay
from svod_min.plan.execution_plan import (
    ExecutionPlanBuilder,
    PreparedCustomFunction,
    PreparedKernel,
    RuntimeVar,
    register_custom_function,
)

FILL = "void k(float* o, int n) { for (int i = 0; i < n; i++) o[i] = -1.f; }"
ADD = "void k(float* o, int n, int m) { for (int i = 0; i < n; i++) o[i] = (float)m; }"


@pytest.fixture(scope="module")
def dev() -> CpuDevice:
    return CpuDevice(threads=2)


def _kernel(prog: Any, name: str, var_names: List[str], nbuf: int = 1) -> CachedKernel:
    return CachedKernel(
        prog, "CPU", "", name, list(var_names), list(range(nbuf)), [0], list(range(1, nbuf)), True, (1, 1, 1)
    )


@needs_cc
def test_fixed_variables_must_be_the_values_that_run(dev: CpuDevice) -> None:
    prog = dev.compile(FILL, "k", buf_count=1, var_names=["n"])
    arena = dev.allocate([8], "float32").copyin([7.0] * 8)
    b = ExecutionPlanBuilder(dev)
    small = b.add_buffer(0, arena.view(0, 16, "float32"))
    canary = b.add_buffer(1, arena.view(16, 16, "float32"))
    # extents were checked with fixedvars (n=4) while vals (n=8) ran: 4 floats past the buffer
    b.add_op(PreparedKernel(0, _kernel(prog, "k", ["n"]), [small], [0], vals=[8], fixedvars={"n": 4}, extents={0: "n"}))
    b.set_output_buffers([small, canary])
    with pytest.raises(PlanError, match=r"op 0 \(id 0\): fixed variable n=4 but vals gives 8"):
        b.build()
    assert arena.tolist() == [7.0] * 8


@needs_cc
def test_a_fixed_variable_cannot_also_be_bound_to_an_expression(dev: CpuDevice) -> None:
    prog = dev.compile(FILL, "k", buf_count=1, var_names=["n"])
    arena = dev.allocate([8], "float32").copyin([7.0] * 8)
    b = ExecutionPlanBuilder(dev)
    b.set_var_values({"rows": 4})
    small = b.add_buffer(0, arena.view(0, 16, "float32"))
    canary = b.add_buffer(1, arena.view(16, 16, "float32"))
    # extents were checked with the fixed n=4 while var_exprs patched vals to n=8: 4 floats past the buffer
    b.add_op(
        PreparedKernel(
            0,
            _kernel(prog, "k", ["n"]),
            [small],
            [0],
            vals=[4],
            fixedvars={"n": 4},
            extents={0: "n"},
            var_exprs={"n": "rows*2"},
            runtime_vars=[RuntimeVar("rows", 1, 8)],
        )
    )
    b.set_output_buffers([small, canary])
    with pytest.raises(PlanError, match=r"op 0 \(id 0\): variable n is both fixed \(4\) and bound to 'rows\*2'"):
        b.build().execute()
    assert arena.tolist() == [7.0] * 8


@needs_cc
def test_kernels_with_more_arguments_than_the_native_runner_take_the_python_path(dev: CpuDevice) -> None:
    count = native_replay.MAX_ARGS  # one limit, in native_replay: native_entry refuses longer rows (1 + count)
    names = ["a%d" % i for i in range(count)]
    src = "void many(int* o, %s) { o[0] = a0 + a%d; }" % (", ".join("int " + n for n in names), count - 1)
    prog = dev.compile(src, "many", buf_count=1, var_names=names)
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(0, dev.allocate([1], "int32"))
    b.add_op(
        PreparedKernel(
            0, _kernel(prog, "many", names), [out], [0], list(range(count)), runtime_vars=[RuntimeVar("a0", 0, 100)]
        )
    )
    b.set_output_buffer(out)
    plan = b.build()  # raised NotSupportedError while native replay was on
    assert not plan.native_replay  # the one op's row is too long: the Python path runs it
    plan.execute()
    assert plan.output_buffer().tolist() == [count - 1]
    plan.set_native_replay(True)
    plan.execute_with_vars({"a0": 5})
    assert plan.output_buffer().tolist() == [count + 4]


def _rows_plan(dev: CpuDevice, m_expr: str) -> Any:
    """out[:n] = m, with m bound to an expression over the plan variable rows (= 3)."""
    prog = dev.compile(ADD, "k", buf_count=1, var_names=["n", "m"])
    b = ExecutionPlanBuilder(dev)
    b.set_var_values({"rows": 3})
    out = b.add_buffer(0, dev.allocate([4], "float32"))
    b.add_op(
        PreparedKernel(
            0,
            _kernel(prog, "k", ["n", "m"]),
            [out],
            [0],
            [4, 0],
            var_exprs={"m": m_expr},
            runtime_vars=[RuntimeVar("rows", 0, 10), RuntimeVar("n", 0, 4)],
        )
    )
    b.set_output_buffer(out)
    return b.build()


@needs_cc
def test_variable_expressions_apply_from_the_first_run(dev: CpuDevice) -> None:
    plan = _rows_plan(dev, "rows*2")
    plan.execute()  # ran with the stale m=0 before
    assert plan.output_buffer().tolist() == [6.0] * 4
    with pytest.raises(PlanError, match="unknown variable 'nope'"):
        _rows_plan(dev, "nope*2")


@needs_cc
def test_replicas_keep_variables_and_replay_settings(dev: CpuDevice) -> None:
    plan = _rows_plan(dev, "rows*2")
    plan.set_native_replay(False)
    replica = plan.replicate()
    assert replica.native_replay is False
    replica.execute_with_vars({"n": 2})  # raised: "expression 'rows*2' uses unknown variable 'rows'"
    assert replica.output_buffer().tolist() == [6.0, 6.0, 0.0, 0.0]


def _custom_plan(dev: CpuDevice, kind: str, **kw: Any) -> Any:
    b = ExecutionPlanBuilder(dev)
    x = b.add_buffer(0, dev.allocate([2], "float32"))
    b.add_op(PreparedCustomFunction(0, kind, [x], **kw))
    b.set_output_buffer(x)
    return b.build()


def test_custom_functions_see_their_runtime_variables(dev: CpuDevice) -> None:
    seen: List[Dict[str, int]] = []
    register_custom_function("misuse_see_k", lambda bufs, variables, attrs: seen.append(dict(variables)))
    plan = _custom_plan(dev, "misuse_see_k", runtime_vars=[RuntimeVar("k", 0, 10)])
    plan.execute_with_vars({"k": 7})  # accepted and bounds-checked, then dropped: the function saw {}
    assert seen[-1] == {"k": 7}
    plan = _custom_plan(dev, "misuse_see_k", fixedvars={"k": 1, "j": 2}, runtime_vars=[RuntimeVar("k", 0, 10)])
    plan.execute_with_vars({"k": 7})
    assert seen[-1] == {"k": 1, "j": 2}  # fixed values win, as for kernels


def test_reentering_a_running_plan_is_refused_not_a_deadlock(dev: CpuDevice) -> None:
    holder: Dict[str, Any] = {}
    errors: List[BaseException] = []

    def reenter(bufs: Any, variables: Any, attrs: Any) -> None:
        try:
            holder["plan"].execute()
        except ExecutionError as exc:
            errors.append(exc)
            raise

    register_custom_function("misuse_reenter", reenter)
    plan = holder["plan"] = _custom_plan(dev, "misuse_reenter")
    worker = threading.Thread(target=lambda: pytest.raises(ExecutionError, plan.execute), daemon=True)
    worker.start()
    worker.join(20)
    assert not worker.is_alive(), "execute() re-entered from its own custom function hung"
    assert "already running on this thread" in str(errors[0])


def test_plans_run_on_the_devices_own_pool_do_not_deadlock() -> None:
    dev = CpuDevice(threads=2)
    register_custom_function("misuse_noop", lambda bufs, variables, attrs: None)

    def plan_with_a_parallel_group() -> Any:
        b = ExecutionPlanBuilder(dev)
        x = b.add_buffer(0, dev.allocate([2], "float32"))
        y = b.add_buffer(1, dev.allocate([2], "float32"))
        from svod_min.plan.execution_plan import PreparedCopy

        z = b.add_buffer(2, dev.allocate([2], "float32"))
        w = b.add_buffer(3, dev.allocate([2], "float32"))
        b.add_op(PreparedCopy(0, [x, y]))
        b.add_op(PreparedCopy(1, [z, w]))  # independent: one group of two, handed to the pool
        b.set_output_buffers([x, z])
        return b.build()

    plans = [plan_with_a_parallel_group() for _ in range(2)]
    futures = [dev.pool.submit(p.execute) for p in plans]  # both pool threads wait on the pool: deadlock
    for fut in futures:
        fut.result(timeout=20)


def test_an_interrupted_run_poisons_the_plan(dev: CpuDevice) -> None:
    def interrupt(bufs: Any, variables: Any, attrs: Any) -> None:
        raise KeyboardInterrupt

    register_custom_function("misuse_interrupt", interrupt)
    plan = _custom_plan(dev, "misuse_interrupt")
    with pytest.raises(KeyboardInterrupt):
        plan.execute()
    with pytest.raises(PlanPoisonedError, match="interrupted by KeyboardInterrupt"):
        plan.execute()


@needs_cc
def test_a_bad_work_expression_is_refused_at_build_not_in_a_profile(dev: CpuDevice) -> None:
    prog = dev.compile(FILL, "k", buf_count=1, var_names=["n"])
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(0, dev.allocate([4], "float32"))
    b.add_op(PreparedKernel(0, _kernel(prog, "k", ["n"]), [out], [0], [4], flops="n*undefined_var"))
    b.set_output_buffer(out)
    with pytest.raises(PlanError, match=r"flops expression 'n\*undefined_var' uses \['undefined_var'\]"):
        b.build()
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(0, dev.allocate([4], "float32"))
    b.add_op(PreparedKernel(0, _kernel(prog, "k", ["n"]), [out], [0], [4], flops="n//(n-4)"))  # fails only at n=4
    b.set_output_buffer(out)
    plan = b.build()
    (profile,) = plan.execute_profiled()  # a figure that cannot be computed is None, never a poisoned plan
    assert profile.flops is None
    plan.execute()


def test_non_ops_and_non_mapping_variables_are_plan_errors(dev: CpuDevice) -> None:
    b = ExecutionPlanBuilder(dev)
    b.add_buffer(0, dev.allocate([2], "float32"))
    b.add_op("not an op")  # type: ignore[arg-type]
    b.set_output_buffer(0)
    with pytest.raises(PlanError, match="op 0: unknown op type str"):
        b.build()
    register_custom_function("misuse_noop2", lambda bufs, variables, attrs: None)
    plan = _custom_plan(dev, "misuse_noop2")
    for bad in ([("k", 1)], None):
        with pytest.raises(PlanError, match="variables must be a mapping"):
            plan.execute_with_vars(bad)  # type: ignore[arg-type]


@needs_cc
def test_closing_a_program_under_a_plan_is_refused_on_both_replay_paths() -> None:
    # The plan holds bound calls (and the native runner raw addresses): unmapping under them segfaulted.
    code = textwrap.dedent("""
        from svod_min.devices.cpu import CpuDevice
        from svod_min.plan.execution_plan import ExecutionPlanBuilder, PreparedKernel
        from svod_min.cache.kernel_cache import CachedKernel
        from svod_min.error import ExecutionError
        dev = CpuDevice(threads=1)
        for native in (True, False):
            prog = dev.compile("void k(float* o, int n) { for (int i = 0; i < n; i++) o[i] = 2.f; }", "k",
                               buf_count=1, var_names=["n"])
            b = ExecutionPlanBuilder(dev)
            out = b.add_buffer(0, dev.allocate([4], "float32"))
            b.add_op(PreparedKernel(0, CachedKernel(prog, "CPU", "", "k", ["n"], [0], [0], [], True, (1, 1, 1)),
                                    [out], [0], [4]))
            b.set_output_buffer(out)
            plan = b.build()
            plan.set_native_replay(native)
            plan.execute()
            prog.close()
            try:
                plan.execute()
                print("ran")
            except ExecutionError as exc:
                print(exc, "| poisoned:", plan.poisoned)
        try:
            prog.execute([dev.allocate([4], "float32")], [4])
        except Exception as exc:
            print(type(exc).__name__, exc)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    refused = "kernel k: its program was closed; build a new plan | poisoned: False"
    assert result.stdout.splitlines() == [refused, refused, "ExecutionError program k is closed"]


@needs_cc
def test_a_closed_programs_kernel_is_refused_by_name_before_anything_runs() -> None:
    # The native runner keeps calling the code close() leaves mapped: without a pre-run check a closed
    # program still ran under execute_with_vars, while the Python path failed half-way and poisoned.
    code = textwrap.dedent("""
        from svod_min.devices.cpu import CpuDevice
        from svod_min.plan.execution_plan import ExecutionPlanBuilder, PreparedKernel, RuntimeVar
        from svod_min.cache.kernel_cache import CachedKernel
        from svod_min.error import ExecutionError
        dev = CpuDevice(threads=1)
        src = "void %s(float* o, int n) { for (int i = 0; i < n; i++) o[i] += 1.f; }"
        progs = [dev.compile(src % name, name, buf_count=1, var_names=["n"]) for name in ("first", "second")]
        b = ExecutionPlanBuilder(dev)
        out = b.add_buffer(0, dev.allocate([4], "float32"))
        for i, prog in enumerate(progs):
            kernel = CachedKernel(prog, "CPU", "", prog.name, ["n"], [0], [0], [], True, (1, 1, 1))
            b.add_op(PreparedKernel(i, kernel, [out], [0], [4], runtime_vars=[RuntimeVar("n", 0, 4)]))
        b.set_output_buffer(out)
        plan = b.build()
        plan.set_native_replay(True)
        progs[1].close()
        for call in (lambda: plan.execute_with_vars({"n": 4}), plan.execute_profiled, plan.replicate):
            try:
                call()
                print("ran")
            except ExecutionError as exc:
                print(exc)
        print(plan.output_buffer().tolist(), plan.poisoned)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    refused = "kernel second: its program was closed; build a new plan"
    assert result.stdout.splitlines() == [refused] * 3 + ["[0.0, 0.0, 0.0, 0.0] False"]


@pytest.mark.parametrize("buffer", ["hello", None, 3, object()])
def test_add_buffer_refuses_what_is_not_a_buffer(dev: CpuDevice, buffer: Any) -> None:
    b = ExecutionPlanBuilder(dev)
    with pytest.raises(PlanError, match=r"add_buffer\(7\): not a device buffer: %s" % type(buffer).__name__):
        b.add_buffer(7, buffer)  # was accepted, then an AttributeError (or a bind-time error) at build


@needs_cc
@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda op: setattr(op, "extents", {-1: "n"}), r"extent position out of range: -1"),
        (lambda op: setattr(op, "extents", {"0": "n"}), r"extent position out of range: '0'"),
        (lambda op: setattr(op, "output_indices", ["0"]), r"output index out of range: '0'"),
        (lambda op: setattr(op, "buffer_indices", [0, 0]), r"kernel k takes 1 buffers, got 2"),
        (lambda op: setattr(op, "vals", [True]), r"vals must be ints, got \[True\]"),
        (lambda op: setattr(op, "vals", None), r"vals must be a list, got NoneType"),
        (lambda op: setattr(op, "dependencies", None), r"dependencies must be a list of op ids, got NoneType"),
        (lambda op: setattr(op, "dependencies", ["x"]), r"dependencies must be op ids \(ints\), got 'x'"),
        (lambda op: setattr(op, "buffer_indices", [False]), r"buffer index out of range: False"),  # not buffer 0
        (lambda op: setattr(op, "extents", [0]), r"extents must be a dict of positions to sizes, got list"),
        (lambda op: setattr(op, "fixedvars", {"n": "4"}), r"fixedvars must map names to ints, got 'n': '4'"),
        (lambda op: setattr(op, "runtime_vars", ["n"]), r"runtime_vars must hold RuntimeVar, got str"),
        (lambda op: setattr(op, "kernel", "k"), r"kernel must be a CachedKernel, got str"),
        (
            lambda op: setattr(op, "kernel", _kernel(op.kernel.program, "k", ["n", "m"])) or op.vals.append(1),
            r"kernel k takes variables \['n'\], the op names \['n', 'm'\]",
        ),
    ],
)
def test_malformed_kernel_op_fields_are_plan_errors(dev: CpuDevice, edit: Any, message: str) -> None:
    prog = dev.compile(FILL, "k", buf_count=1, var_names=["n"])
    b = ExecutionPlanBuilder(dev)
    out = b.add_buffer(0, dev.allocate([4], "float32"))
    op = PreparedKernel(0, _kernel(prog, "k", ["n"]), [out], [0], [4])
    edit(op)
    b.add_op(op)
    b.set_output_buffer(out)
    with pytest.raises(PlanError, match=r"op 0 \(id 0\): " + message):
        b.build()


def test_malformed_copy_view_custom_and_instance_dependencies_are_plan_errors(dev: CpuDevice) -> None:
    from svod_min.plan.execution_plan import PreparedBufferView, PreparedCopy

    base = dev.allocate([4], "float32")
    cases = [
        (PreparedBufferView(0, [1, 0], "0", 8), r"op 0 \(id 0\): view byte_offset and byte_size must be ints"),
        (PreparedCustomFunction(0, ["allreduce"], [0]), r"op 0 \(id 0\): kind must be a str, got list"),  # type: ignore[arg-type]
        (PreparedCustomFunction(0, "allreduce", [0], attrs=None), r"attrs must be a dict, got NoneType"),  # type: ignore[arg-type]
    ]
    for op, message in cases:
        b = ExecutionPlanBuilder(dev)
        b.add_buffer(0, base)
        b.add_buffer(1, base.view(0, 8, "float32"))
        b.add_op(op)
        b.set_output_buffer(0)
        with pytest.raises(PlanError, match=message):
            b.build()
    b = ExecutionPlanBuilder(dev)
    b.add_buffer(0, base)
    for deps in (["x"], 0, [True]):
        with pytest.raises(PlanError, match=r"op 0: instance dependencies must be a list of op indices \(ints\)"):
            b.add_op_with_instance_dependencies(PreparedCopy(0, [0, 0]), deps)  # type: ignore[arg-type]
    assert b.op_count == 0  # a refused op is not half-added
