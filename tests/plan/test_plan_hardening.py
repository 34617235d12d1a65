"""Plans and the CPU device under stress and bad input: no leaks over 10,000 build/run/release
cycles, eight threads sharing one kernel, bad sizes, variables, buffers and device specs that
dispatch nothing."""

from __future__ import annotations

import ctypes
import threading
from typing import List

import pytest
from conftest import needs_cc
from support.hardening import CYCLES, PLAN_SRC, assert_no_leak, measure, plan_object, wx  # noqa: F401 - fixtures

from svod_min.cache.kernel_cache import CachedKernel
from svod_min.compiler import clang
from svod_min.devices.cpu.device import CpuDevice, CpuProgram
from svod_min.error import BufferAllocationError, InvalidDeviceError, PlanError, SvodError, VariableBoundsError
from svod_min.plan.execution_plan import ExecutionPlanBuilder, PreparedCopy, PreparedKernel, RuntimeVar


@pytest.mark.parametrize("mode", ["anon", "memfd"])
def test_plan_build_execute_release_cycles_do_not_leak(mode: str, wx, plan_object) -> None:
    wx(mode)
    dev = CpuDevice(threads=2)

    def cycle() -> None:
        x = dev.allocate([64], "float32")
        y = dev.allocate([64], "float32")
        z = dev.allocate([64], "float32")
        x.copyin([float(i) for i in range(64)])
        prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
        kernel = CachedKernel(prog, "CPU", PLAN_SRC, "scale_add", ["n", "k"], [0, 1], [0], [1], True, (1, 1, 1))
        b = ExecutionPlanBuilder(dev)
        ix, iy, iz = b.add_buffer(0, x), b.add_buffer(1, y), b.add_buffer(2, z)
        b.add_op(
            PreparedKernel(
                0, kernel, [iy, ix], [0], [64, 2], {"n": 64}, [], [RuntimeVar("k", 0, 9)], extents={0: "n", 1: "n"}
            )
        )
        b.add_op(PreparedCopy(1, [iz, iy], [0]))
        b.set_output_buffer(iz)
        plan = b.build()
        plan.execute_with_vars({"k": 3})
        assert z.tolist()[5] == 16.0
        plan.release_intermediate_buffers()

    m = measure(cycle)
    print("plan build/execute/release x%d (%s): %s" % (CYCLES, mode, m))
    assert_no_leak(m)


THREADS = 8


RUNS = 1000


CORE_SRC = r"""
void scale_core(float* restrict out, const float* restrict x, const int n, const int k, const int core_id) {
    int half = (n + 1) / 2, lo = core_id * half, hi = lo + half < n ? lo + half : n;
    for (int i = lo; i < hi; ++i) out[i] = x[i] * (float)k + (float)core_id;
}
"""


@needs_cc
def test_eight_threads_times_1000_runs_of_independent_plans() -> None:
    dev = CpuDevice(threads=2)
    # One compiled kernel shared by every plan (as the kernel cache shares it); core_id
    # dispatch puts all eight threads on the device's one pool at once.
    prog = dev.load(clang.compile_c(CORE_SRC), "scale_core", buf_count=2, var_names=["n", "k", "core_id"])
    kernel = CachedKernel(prog, "CPU", CORE_SRC, "scale_core", ["n", "k", "core_id"], [0, 1], [0], [1], True, (2, 1, 1))
    n = 64
    errors: List[str] = []
    done = [0] * THREADS
    barrier = threading.Barrier(THREADS)

    def worker(tid: int) -> None:
        try:
            x = dev.allocate([n], "float32")
            y = dev.allocate([n], "float32")
            z = dev.allocate([n], "float32")
            x.copyin([float(tid * 100 + i) for i in range(n)])
            b = ExecutionPlanBuilder(dev)
            ix, iy, iz = b.add_buffer(0, x), b.add_buffer(1, y), b.add_buffer(2, z)
            b.add_op(PreparedKernel(0, kernel, [iy, ix], [0], [n, 1, 0], {"n": n}, [], [RuntimeVar("k", 0, 1 << 20)]))
            b.add_op(PreparedCopy(1, [iz, iy], [0]))
            b.set_output_buffer(iz)
            plan = b.build()
            xs = x.tolist()
            barrier.wait()
            for run in range(RUNS):
                k = tid * RUNS + run
                plan.execute_with_vars({"k": k})
                got = z.tolist()
                want = [xs[i] * k + (0 if i < n // 2 else 1) for i in range(n)]
                if got != [float(ctypes.c_float(w).value) for w in want]:
                    errors.append("thread %d run %d: %r != %r" % (tid, run, got[:4], want[:4]))
                    return
                done[tid] += 1
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append("thread %d: %s: %s" % (tid, type(exc).__name__, exc))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert done == [RUNS] * THREADS


ALLOCATE_CASES = [
    ((-1,), "buffer size must be >= 0"),
    ((1 << 62,), "cannot allocate"),
    (([1 << 31, 1 << 31],), "cannot allocate"),
    (([4, -1],), "shape dimension must be >= 0"),
    ((3.5,), "buffer size must be an integer"),
    (("64",), "buffer size must be an integer"),
    ((None,), "buffer size must be an integer"),
    ((10, "float32"), "not a whole number of float32"),
    ((16, "float33"), "float33"),
    ((16, 7), "dtype"),
    ((16, None), "dtype"),
]


@pytest.mark.parametrize("args, message", ALLOCATE_CASES, ids=[repr(c[0]) for c in ALLOCATE_CASES])
def test_allocate_bad_sizes_and_dtypes(args: tuple, message: str) -> None:
    with pytest.raises(SvodError) as info:
        CpuDevice(threads=1).allocate(*args)
    assert message in str(info.value)
    assert isinstance(info.value, (BufferAllocationError, PlanError, ValueError))


def _counting_plan(dev: CpuDevice, prog: CpuProgram, nbuf: int = 64, extent_max: int = 64, n: int = 64):
    """y = x * k + 1 over n elements; n and k are runtime variables; extents n on both buffers."""
    x, y = dev.allocate([nbuf], "float32"), dev.allocate([nbuf], "float32")
    x.copyin([1.0] * nbuf)
    kernel = CachedKernel(prog, "CPU", PLAN_SRC, "scale_add", ["n", "k"], [0, 1], [0], [1], True, (1, 1, 1))
    b = ExecutionPlanBuilder(dev)
    ix, iy = b.add_buffer(0, x), b.add_buffer(1, y)
    b.add_op(
        PreparedKernel(
            0,
            kernel,
            [iy, ix],
            [0],
            [n, 2],
            {},
            [],
            [RuntimeVar("n", 0, extent_max), RuntimeVar("k", -5, 5)],
            extents={0: "n", 1: "n"},
        )
    )
    b.set_output_buffer(iy)
    return b, y


BAD_VARS = [
    ({"k": 6}, VariableBoundsError, "outside bounds [-5, 5]"),
    ({"k": -6}, VariableBoundsError, "outside bounds"),
    ({"k": 1 << 40}, VariableBoundsError, "outside bounds"),
    ({"k": 1.5}, VariableBoundsError, "must be an int"),
    ({"k": "3"}, VariableBoundsError, "must be an int"),
    ({"k": True}, VariableBoundsError, "must be an int"),
    ({"k": None}, VariableBoundsError, "must be an int"),
    ({"m": 1}, PlanError, "unknown variable 'm'"),
    ({"k": 2, "n": 100}, BufferAllocationError, "needs 100 elements"),  # in bounds, but past the buffers
    ({"n": 65}, BufferAllocationError, "refusing to dispatch"),
]


@needs_cc
def test_bad_variables_dispatch_nothing_and_do_not_poison(plan_object) -> None:
    dev = CpuDevice(threads=1)
    prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
    calls = prog._loaded.function("scale_add_calls", ctypes.c_int)
    builder, y = _counting_plan(dev, prog, nbuf=64, extent_max=128)
    plan = builder.build()
    plan.execute_with_vars({"k": 3, "n": 64})
    assert calls() == 1 and y.tolist()[0] == 4.0
    before = y.copyout()
    for values, exc_type, message in BAD_VARS:
        with pytest.raises(exc_type, match=message.replace("[", r"\[").replace("]", r"\]")):
            plan.execute_with_vars(values)
        assert calls() == 1, "dispatched despite %r" % (values,)
        assert y.copyout() == before
        assert not plan.poisoned
    plan.execute_with_vars({"k": 5, "n": 64})  # still usable, and the rejected values left no trace
    assert calls() == 2 and y.tolist()[0] == 6.0


@needs_cc
def test_buffer_smaller_than_declared_extent_is_refused_at_build(plan_object) -> None:
    dev = CpuDevice(threads=1)
    prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
    calls = prog._loaded.function("scale_add_calls", ctypes.c_int)
    builder, _y = _counting_plan(dev, prog, nbuf=32, n=64)  # n = 64 > 32 elements
    with pytest.raises(BufferAllocationError, match="needs 64 elements .* holds 32"):
        builder.build()
    assert calls() == 0


@needs_cc
def test_program_level_bad_arguments_dispatch_nothing(plan_object) -> None:
    dev = CpuDevice(threads=1)
    prog = dev.load(plan_object, "scale_add", buf_count=2, var_names=["n", "k"])
    calls = prog._loaded.function("scale_add_calls", ctypes.c_int)
    y = dev.allocate([4], "float32")
    cases = [
        (([y], [4, 1]), "takes 2 buffers, got 1"),
        (([y, "not a buffer"], [4, 1]), "has no address"),
        (([y, y], [4]), "takes 2 variables"),
        (([y, y], [4, 1 << 31]), "does not fit the kernel's int32"),
        (([y, y], [4, 0.5]), "is not an integer"),
    ]
    for (buffers, vals), message in cases:
        with pytest.raises(SvodError, match=message):
            prog.execute(buffers, vals)
    assert calls() == 0


@pytest.mark.parametrize("spec", ["TPU", "TPU:0", "", "CPU:1", "CPU:x", "cpu:-1", "GPU:zero"])
def test_unknown_or_malformed_devices(spec: str) -> None:
    from svod_min.devices.registry import DEVICE_FACTORIES

    with pytest.raises(InvalidDeviceError):
        DEVICE_FACTORIES.device(spec)
