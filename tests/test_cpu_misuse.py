"""CpuProgram misuse: a closed program refuses every route into its code (execute, bind, callables
bound before the close) with ExecutionError naming it, never a jump into unmapped pages."""

from __future__ import annotations

import array
import ctypes
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import needs_cc

from svod_min.devices.cpu import CpuBuffer, CpuDevice, CpuProgram, CpuStorage
from svod_min.dtypes import float32
from svod_min.error import BufferAllocationError, ExecutionError
from svod_min.executor import ExecutionGraph, ExecutionNode

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SRC = "void closeme(int* o, int core_id) { o[core_id] += 1; }"


@pytest.fixture(scope="module")
def dev() -> CpuDevice:
    return CpuDevice(threads=2)


def _program(dev: CpuDevice) -> CpuProgram:
    return dev.compile(_SRC, "closeme", buf_count=1, var_names=["core_id"])


@needs_cc
def test_closed_is_false_until_close_runs(dev: CpuDevice) -> None:
    prog = _program(dev)
    assert prog.closed is False
    prog.close()
    assert prog.closed is True
    prog.close()  # idempotent
    assert prog.closed is True


@needs_cc
def test_a_closed_program_refuses_execute_and_bind(dev: CpuDevice) -> None:
    prog = _program(dev)
    out = dev.allocate([2], "int32")
    prog.close()
    with pytest.raises(ExecutionError, match="program closeme is closed"):
        prog.execute([out], [0])
    with pytest.raises(ExecutionError, match="program closeme is closed"):
        prog.bind([out], [0])
    with pytest.raises(ExecutionError, match="program closeme is closed"):
        prog.execute_timed([out], [0], global_size=[2], core_id_index=0)
    assert out.tolist() == [0, 0]


@needs_cc
@pytest.mark.parametrize("global_size, threads", [(None, None), ([2], None), ([2], 1)])
def test_callables_bound_before_close_refuse_to_run(dev: CpuDevice, global_size: object, threads: object) -> None:
    prog = _program(dev)
    out = dev.allocate([2], "int32")
    call = prog.bind([out], [0], global_size=global_size, core_id_index=0, threads=threads)
    call()
    before = out.tolist()
    assert sum(before) == (1 if global_size is None else 2)
    prog.close()
    with pytest.raises(ExecutionError, match="program closeme is closed"):
        call()
    assert out.tolist() == before  # nothing ran


# --- the object cache: verify() reads entries as get() does ---------------------------------------


def _verify_in_a_child(plant: str) -> "subprocess.CompletedProcess[str]":
    code = textwrap.dedent('''
        import os, sys, tempfile
        from svod_min.kernel_cache import ObjectCache
        cache = ObjectCache(tempfile.mkdtemp(prefix="svod-verify-"))
        path = cache.path_for("k")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkfifo(path) if sys.argv[1] == "fifo" else os.symlink("/dev/zero", path)
        print(cache.verify() == [path])
    ''')
    return subprocess.run([sys.executable, "-c", code, plant], capture_output=True, text=True, timeout=30, cwd=_ROOT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks")
@pytest.mark.parametrize("plant", ["fifo", "devzero"])
def test_cache_verify_reports_a_planted_fifo_or_device_link_instead_of_hanging(plant: str) -> None:
    result = _verify_in_a_child(plant)  # a blocking open() of a FIFO, an endless read of /dev/zero
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr[-2000:]


# --- copyin from typed memory (array.array, ctypes, memoryviews of arrays) ------------------------


@pytest.mark.parametrize("dtype, source, message", [
    ("int32", lambda: array.array("f", [1.0, 2.0]), "memory of format 'f' does not hold int32 elements"),
    ("uint32", lambda: (ctypes.c_int32 * 2)(1, 2), "memory of format '<i' does not hold uint32 elements"),
    ("float16", lambda: array.array("H", [1, 2]), "memory of format 'H' does not hold float16 elements"),
    ("int64", lambda: array.array("d", [1.0, 2.0]), "memory of format 'd' does not hold int64 elements"),
])  # fmt: skip
def test_copyin_refuses_typed_memory_of_other_numbers(dev: CpuDevice, dtype: str, source: Any, message: str) -> None:
    buf = dev.allocate([2], dtype).copyin([7, 7])
    with pytest.raises(BufferAllocationError, match=message):
        buf.copyin(source())  # same byte count: the bits used to land as they were
    assert buf.tolist() == [7, 7]


def test_copyin_takes_typed_memory_of_the_same_numbers_and_raw_bytes(dev: CpuDevice) -> None:
    assert dev.allocate([2], "float32").copyin(array.array("f", [1.5, 2.5])).tolist() == [1.5, 2.5]
    assert dev.allocate([2], "int64").copyin(array.array("l" if ctypes.sizeof(ctypes.c_long) == 8 else "q", [3, -4])).tolist() == [3, -4]
    assert dev.allocate([2], "int32").copyin((ctypes.c_int32 * 2)(5, 6)).tolist() == [5, 6]
    assert dev.allocate([1], "bfloat16").copyin(array.array("H", [0x3F80])).tolist() == [1.0]  # raw bits
    assert dev.allocate([2], "bool").copyin(array.array("B", [1, 0])).tolist() == [True, False]
    assert dev.allocate([1], "int32").copyin(bytearray(b"\x01\x00\x00\x00")).tolist() == [1]
    assert dev.allocate([1], "float32").copyin(memoryview(b"\x00\x00\x80\x3f")).tolist() == [1.0]


@needs_cc
@pytest.mark.parametrize("buffers, vals", [(None, [0]), ("out", None), ("out", 3)])
def test_execute_refuses_buffers_or_values_that_are_not_sequences(dev: CpuDevice, buffers: Any, vals: Any) -> None:
    prog = _program(dev)
    out = dev.allocate([2], "int32")
    with pytest.raises(ExecutionError, match="closeme takes a sequence of buffers and one of values"):
        prog.execute([out] if buffers == "out" else buffers, vals)  # was TypeError: has no len()
    assert out.tolist() == [0, 0]


@needs_cc
def test_execute_refuses_one_bare_buffer_in_place_of_a_list(dev: CpuDevice) -> None:
    prog = _program(dev)
    out = dev.allocate([1], "int32")  # len() 1 == buf_count, but not a sequence of buffers
    with pytest.raises(ExecutionError, match="closeme: buffer argument has no address"):
        prog.execute(out, [0])  # type: ignore[arg-type]
    assert out.tolist() == [0]


# --- benchmark: configurations and devices ---------------------------------------------------------


@pytest.mark.parametrize("kwargs", [dict(timing_runs=True), dict(warmup_runs=False), dict(early_stop=float("nan")),
                                    dict(early_stop=True), dict(warmup_budget=float("nan"))])
def test_benchmark_config_refuses_bools_and_nan(kwargs: Any) -> None:
    from svod_min.benchmark import BenchmarkConfig

    with pytest.raises(ValueError, match="must be"):  # error.py has no configuration error: plain ValueError
        BenchmarkConfig(**kwargs)


@pytest.mark.parametrize("device", [object(), SimpleNamespace(threads=2), SimpleNamespace(threads=True, pool=None)])
def test_warmup_thread_pool_refuses_what_is_not_a_cpu_device(device: Any) -> None:
    from svod_min.benchmark import warmup_thread_pool
    from svod_min.error import DeviceError

    with pytest.raises(DeviceError, match="warmup_thread_pool needs a CPU device"):
        warmup_thread_pool(device)  # was AttributeError: no attribute 'pool'


# --- executor: timeouts, kernels, graph nodes ---------------------------------------------------


def _executor_wait_in_a_child(call: str) -> "subprocess.CompletedProcess[str]":
    code = textwrap.dedent('''
        from svod_min.error import ExecutionError
        from svod_min.executor import TimelineSignal, UnifiedExecutor
        ex = UnifiedExecutor()
        ctx = ex.add_device("CPU")
        try:
            %s
            print("returned")
        except ExecutionError as exc:
            print("ExecutionError", exc)
    ''') % call
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=_ROOT)


@pytest.mark.parametrize("call", ["TimelineSignal(0).wait(1, float('nan'))", "ctx.wait_for(0, 'x')",
                                  "ex.synchronize_all('1')", "TimelineSignal(0).wait(1, True)"])
def test_executor_timeouts_that_are_not_numbers_are_refused(call: str) -> None:
    result = _executor_wait_in_a_child(call)  # nan: a wait that never expired; a string: TypeError deep inside
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("ExecutionError timeout must be seconds (a number) or None"), result.stdout


def test_executor_timeouts_inf_and_past_deadlines_still_work() -> None:
    from svod_min.executor import TimelineSignal

    assert TimelineSignal(1).wait(1, float("inf")) is True
    assert TimelineSignal(0).wait(1, -0.5) is False  # a deadline already past: do not wait


def test_execute_kernel_refuses_a_non_callable_before_reserving() -> None:
    from svod_min.executor import UnifiedExecutor

    ex = UnifiedExecutor()
    with pytest.raises(ExecutionError, match="execute_kernel needs a callable, got NoneType"):
        ex.execute_kernel("CPU", None)  # type: ignore[arg-type]
    ctx = ex.context("CPU")
    assert ctx is None or (ctx.last_reserved == 0 and ctx.failures == {})


def test_signal_failure_needs_an_exception() -> None:
    from svod_min.executor import UnifiedExecutor

    ctx = UnifiedExecutor().add_device("CPU")
    value = ctx.next_timeline()
    with pytest.raises(ExecutionError, match="signal_failure needs an exception, got str"):
        ctx.signal_failure(value, "oops")  # type: ignore[arg-type]  # wait_for later: TypeError from "raise from"
    ctx.signal_completion(value)
    ctx.wait_for(value, 1.0)


@pytest.mark.parametrize("make, message", [
    (lambda: ExecutionNode("a", "CPU"), "node id must be an int, got 'a'"),
    (lambda: ExecutionNode(True, "CPU"), "node id must be an int, got True"),
    (lambda: ExecutionNode(0, "CPU", buffer_access=5), "buffer_access must be a list, got int"),
    (lambda: ExecutionNode(0, "CPU", buffer_access=[object()]), "buffer_access holds KernelBufferAccess"),
    (lambda: ExecutionGraph([5]), "graph nodes must be ExecutionNode, got int"),
])  # fmt: skip
def test_execution_graph_refuses_malformed_nodes(make: Any, message: str) -> None:
    from svod_min.error import PlanError

    with pytest.raises(PlanError, match=message):
        make()


# --- lists of values: bfloat16 and bool take numbers only ------------------------------------------


@pytest.mark.parametrize("dtype, values", [("bfloat16", ["1.5"]), ("bfloat16", [b"2"]), ("bool", ["no"]), ("bool", [None])])
def test_copyin_lists_of_text_are_refused_for_types_struct_does_not_check(dev: CpuDevice, dtype: str, values: Any) -> None:
    buf = dev.allocate([1], dtype)
    with pytest.raises(BufferAllocationError, match="cannot pack values as %s: .* is not a number" % dtype):
        buf.copyin(values)  # float("1.5") and struct "?" ("no" is True) took them silently
    assert dev.allocate([2], "bool").copyin([2, 0.0]).tolist() == [True, False]
    assert dev.allocate([2], "bfloat16").copyin([1, 2.5]).tolist() == [1.0, 2.5]


# --- hand-built buffers and storages ---------------------------------------------------------------


@pytest.mark.parametrize("make, message", [
    (lambda st: CpuBuffer(None, 0, 4, float32, (1,)), "CpuBuffer takes a CpuStorage and a DType, got NoneType and DType"),
    (lambda st: CpuBuffer(st, 0, 4, "float32", (1,)), "CpuBuffer takes a CpuStorage and a DType, got CpuStorage and str"),
    (lambda st: CpuBuffer(st, 0, 4, float32, 1), "buffer shape must be a sequence of ints, got 1"),
    (lambda st: CpuBuffer(st, 0, 4, float32, (-1, -1)), "buffer dimension must be >= 0, got -1"),
    (lambda st: CpuBuffer(st, 0, 4, float32, (1.0,)), "buffer dimension must be an integer, got 1.0"),
    (lambda st: CpuStorage(-1), "storage size must be >= 0, got -1"),
    (lambda st: CpuStorage("8"), "storage size must be an integer, got '8'"),
])  # fmt: skip
def test_hand_built_buffers_and_storages_are_checked(make: Any, message: str) -> None:
    with pytest.raises(BufferAllocationError, match=message):
        make(CpuStorage(16))  # [-1, -1] spanned 4 bytes (product 1); the rest were raw exceptions


def test_hand_built_buffer_shapes_become_int_tuples() -> None:
    buf = CpuBuffer(CpuStorage(16), 0, 8, float32, [2])
    assert buf.shape == (2,) and buf.tolist() == [0.0, 0.0]
