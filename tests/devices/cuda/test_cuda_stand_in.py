"""tests/support/fake_libcuda.c, the stand-in driver: it must refuse what a real driver refuses, or the CUDA tests
run against it cannot catch those bugs. Each test drives the driver's C entry points directly (through
svod_min's binding) and checks one rule, so a lax stand-in fails here.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any, Callable, Tuple

import pytest
from support.cuda import (  # noqa: F401  (fixtures)
    FAKE_GENERATIONS,
    FAKE_PTX,
    Fake,
    add_inputs,
    check_library_kernel,
    fake,
    fake_so,
    int_values,
    library_env,
)

from svod_min.devices import cuda
from svod_min.devices.cuda import HANDLE, CudaError, CudaGraph
from svod_min.kernels import cuda_kernels, cuda_library_kernel, ptx_path

np = pytest.importorskip("numpy")


def _code(fn: Callable[[], Any]) -> str:
    """The CUDA error name ``fn`` raised ("" when it raised none)."""
    try:
        fn()
    except CudaError as exc:
        return exc.name
    return ""


def test_device_addresses_are_not_host_pointers(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    buf = dev.allocate(64).copyin(bytes(range(64)))
    assert buf.address >= 1 << 55  # above every host mapping: dereferencing it on the host faults
    assert buf.view(8, 8).copyout() == bytes(range(8, 16))
    host = ctypes.create_string_buffer(8)
    lib = dev.lib
    assert _code(lambda: lib.call("cuMemcpyDtoH", host, ctypes.addressof(host), 8)) == "CUDA_ERROR_INVALID_VALUE"
    assert (
        _code(lambda: lib.call("cuMemcpyDtoH", host, buf.address + 60, 8)) == "CUDA_ERROR_INVALID_VALUE"
    )  # past its end


def test_primary_contexts_are_counted_and_die_on_the_last_release(fake: Callable[..., Fake]) -> None:
    f = fake()
    f.cfg.fake_context_refs.restype = ctypes.c_int
    dev = f.device()
    assert f.cfg.fake_context_refs(0) == 1
    handle, other = dev.handle, HANDLE()
    dev.lib.call("cuDevicePrimaryCtxRetain", ctypes.byref(other), handle)  # another library's reference
    assert other.value == dev.context_value and f.cfg.fake_context_refs(0) == 2
    buf = dev.allocate(16)
    address = buf.address
    dev.close()
    assert f.cfg.fake_context_refs(0) == 1 and f.counter("ctx_deaths") == 0  # still held: nothing died
    dev.lib.call("cuCtxSetCurrent", other)
    dev.lib.call("cuMemFree", address)  # the other holder may still use (and free) it
    dev.lib.call("cuDevicePrimaryCtxRelease", handle)
    assert f.cfg.fake_context_refs(0) == 0 and f.counter("ctx_deaths") == 1
    assert (
        _code(lambda: dev.lib.call("cuMemAlloc", ctypes.byref(cuda.CUdeviceptr()), 16)) == "CUDA_ERROR_INVALID_CONTEXT"
    )


def test_objects_are_refused_under_another_context(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    event, buf = dev0.new_event(), dev0.allocate(16)
    dev1.activate(force=True)
    lib = dev0.lib
    assert _code(lambda: lib.call("cuEventRecord", event.handle, dev0.stream)) == "CUDA_ERROR_INVALID_CONTEXT"
    assert _code(lambda: lib.call("cuStreamSynchronize", dev0.stream)) == "CUDA_ERROR_INVALID_CONTEXT"
    assert _code(lambda: lib.call("cuMemFree", buf.address)) == "CUDA_ERROR_INVALID_CONTEXT"
    assert _code(lambda: lib.call("cuMemsetD8Async", buf.address, 0, 16, dev1.stream)) == "CUDA_ERROR_INVALID_VALUE"
    event.record()  # svod_min makes the event's context current itself
    event.synchronize()
    assert buf.copyout() == bytes(16)


def test_kernel_attributes_come_from_the_ptx(fake: Callable[..., Fake]) -> None:
    """Threads from .reqntid, static shared bytes from the .shared arrays: against the signatures' own figures."""
    dev = fake().device()
    for name, params in (("matmul", {"tile": 16}), ("matmul", {"tile": 32}), ("transpose", {}), ("reduce_sum", {})):
        prog = cuda_library_kernel(dev, name, dtype="float32", **params)
        sig = prog.signature
        assert prog.max_threads == sig.block[0] * sig.block[1] * (sig.block[2] if len(sig.block) > 2 else 1)
        if sig.shared_bytes:
            assert prog.static_shared == sig.shared_bytes, name
    assert dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"]).max_threads == 1024  # no directive: the device's limit


@pytest.mark.parametrize(
    "dims, shared",
    [
        ((0, 1, 1, 32, 1, 1), 0),
        ((1, 1, 1, 0, 1, 1), 0),
        ((1, 65536, 1, 32, 1, 1), 0),
        ((1, 1, 1, 1, 1, 65), 0),
        ((1, 1, 1, 1025, 1, 1), 0),
        ((1, 1, 1, 32, 1, 1), 48 * 1024 + 4),
    ],
)
def test_launches_the_driver_refuses(fake: Callable[..., Fake], dims: Tuple[int, ...], shared: int) -> None:
    f = fake()
    dev = f.device()
    prog = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    out = dev.allocate([4], "int32")
    blob = cuda.pack_kernel_args([out.address], [4])
    u = ctypes.c_uint
    args = [u(d) for d in dims] + [u(shared), dev.stream, None, blob.extra]
    assert _code(lambda: dev.lib.call("cuLaunchKernel", prog.function, *args)) == "CUDA_ERROR_INVALID_VALUE"
    assert f.counter("launches") == 0


def test_ptx_newer_than_the_driver_is_refused(fake: Callable[..., Fake]) -> None:
    dev = fake(version=12040, cc=(8, 0)).device()
    newer = FAKE_PTX.replace(".version 7.0", ".version 8.5")
    assert _code(lambda: dev.module(newer)) == "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"  # svod_min's own check bypassed
    assert _code(lambda: dev.module(FAKE_PTX.replace("sm_75", "sm_86"))) == "CUDA_ERROR_NO_BINARY_FOR_GPU"
    dev.module(FAKE_PTX.replace(".version 7.0", ".version 8.4"))


def test_events_are_not_ready_until_their_work_ran(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    add, bufs, x = add_inputs(dev, 256)
    add.execute(bufs[:3], [256])
    event = dev.new_event(timing=False)
    event.record()
    polls = 1
    assert event.query() is False  # the add (and the copies before it) have not run yet
    while not event.query():  # each query lets the stream make one step of progress
        polls += 1
        assert polls < 100
    assert (
        _code(lambda: dev.lib.call("cuEventElapsedTime", ctypes.byref(ctypes.c_float()), event.handle, event.handle))
        == "CUDA_ERROR_INVALID_HANDLE"
    )
    never = dev.new_event()
    assert _code(lambda: never.elapsed_since(never)) == "CUDA_ERROR_INVALID_HANDLE"
    assert np.array_equal(bufs[0].numpy(), 3 * x)


def test_graph_updates_may_change_the_function_and_graphs_have_no_node_cap(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    add, bufs, x = add_inputs(dev, 64)
    mul = cuda_library_kernel(dev, "mul", dtype="float32")
    graph = CudaGraph([add.bind(bufs[:3], [64])])
    product = mul.bind(bufs[:3], [64])  # kept alive: the node parameters point into its argument blob
    params = product.node_params()
    dev.lib.call("cuGraphExecKernelNodeSetParams", graph.exec, graph.nodes[0], ctypes.byref(params))
    graph.launch()
    assert np.array_equal(bufs[0].numpy(), x * (2 * x))  # the node now runs mul
    chain = [add.bind([bufs[3], bufs[3], bufs[1]], [64]) for _ in range(300)]
    CudaGraph(chain).launch()
    assert np.array_equal(bufs[3].numpy(), 300 * x)


@pytest.mark.parametrize("generation", FAKE_GENERATIONS)
def test_library_kernels_and_graphs_on_each_gpu_generation(
    fake: Callable[..., Fake], generation: Any, tmp_path: Path
) -> None:
    """The defaults (cc 9.0, driver 13000) and the older GPU and driver (cc 8.0, driver 12040): the shipped
    PTX (.version 7.0) loads on both, and a plan-sized chain of library kernels runs as one graph."""
    version, cc = generation
    f = fake(version=version, cc=cc)
    dev = f.device()
    assert dev.arch == "sm_%d%d" % cc and dev.driver.version == version
    from support.cuda import check_plan_equals_cpu

    check_plan_equals_cpu(dev, 33, 20, 17)
    sig = next(s for s in cuda_kernels() if s.name == "add" and dict(s.params)["dtype"] == "float32")
    assert Path(ptx_path(sig.module)).read_text().count(".version 7.0") == 1
