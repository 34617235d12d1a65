"""Misuse of the CUDA device gets the project's own errors, before anything reaches the driver.

Runs against the stand-in driver (tests/support/fake_libcuda.c, built by tests/support/cuda.py's ``fake`` fixture):
patches of bound launches checked like bind(), grids that follow patched variables, objects used
after free / unload / close, overlapping device copies, shared-memory opt-in per function, the
``.ptr`` PTX parameter attribute, bad arguments that used to leak raw Python exceptions, library
variable errors, events in a forked child and the registry's "not available" hint.
"""

from __future__ import annotations

import gc
import os
import weakref
from typing import Any, Callable, List, Tuple

import pytest
from support.cuda import FAKE_PTX, Fake, fake, fake_so, in_forked_child  # noqa: F401  (fixtures)

from svod_min.devices import cuda
from svod_min.devices.cuda import (
    ArgumentRangeError,
    CudaGraph,
    ForkedChildError,
    FreedBufferError,
    LaunchConfigError,
    ReleasedError,
)
from svod_min.devices.registry import DeviceRegistry
from svod_min.error import (
    BufferAllocationError,
    DeviceError,
    ExecutionError,
    SvodError,
    UnsupportedDeviceError,
    VariableBoundsError,
)
from svod_min.kernels import cuda_library_kernel

np = pytest.importorskip("numpy")


def _floats(n: int, start: int = 0) -> Any:
    return np.arange(start, start + n, dtype=np.float32)


# --- 1. set_val / set_vals / set_buffer run bind()'s checks --------------------------------------


def test_set_val_and_set_vals_refuse_sizes_the_buffers_cannot_hold(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    add = cuda_library_kernel(dev, "add", dtype="float32")
    out, a, b = (dev.allocate([16], "float32") for _ in range(3))
    bound = add.bind([out, a, b], [16])
    version = bound.version
    with pytest.raises(BufferAllocationError, match=r"'out' holds 64 bytes, it needs n = 24 elements"):
        bound.set_val(0, 24)
    with pytest.raises(BufferAllocationError, match=r"needs n = 24 elements"):
        bound.set_vals([24])
    with pytest.raises(ArgumentRangeError, match="variable n=2147483648"):
        bound.set_val(0, 2**31)
    assert bound.blob.ints() == [16] and bound.version == version  # refused patches change nothing
    bound.set_val(0, 8)
    bound()
    assert bound.blob.ints() == [8] and f.counter("launches") == 1


def test_set_buffer_refuses_small_wrong_dtype_misaligned_and_foreign_buffers(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev = f.device(0)
    add = cuda_library_kernel(dev, "add", dtype="float32")
    out, a, b = (dev.allocate([16], "float32") for _ in range(3))
    bound = add.bind([out, a, b], [16])
    pointers = bound.blob.pointers()
    with pytest.raises(BufferAllocationError, match=r"'out' holds 8 bytes, it needs n = 16 elements"):
        bound.set_buffer(0, dev.allocate([2], "float32"))
    with pytest.raises(ExecutionError, match="'out' is int32, the kernel takes float32"):
        bound.set_buffer(0, dev.allocate([16], "int32"))
    with pytest.raises(ExecutionError, match="misaligned"):
        bound.set_buffer(0, dev.allocate([17], "float32").view(2, 64, "float32"))
    with pytest.raises(ExecutionError, match="lives on CUDA:1"):
        bound.set_buffer(0, f.device(1).allocate([16], "float32"))
    assert bound.blob.pointers() == pointers and bound._keep[0] is out
    other = dev.allocate([16], "float32")
    bound.set_buffer(0, other)
    assert bound.blob.pointers()[0] == other.address and bound._keep[0] is other


def test_patch_indices_out_of_range_are_project_errors(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    out = dev.allocate([8], "int32")
    bound = iota.bind([out], [8])
    with pytest.raises(ExecutionError, match="variable index 5 is out of range") as info:
        bound.set_val(5, 1)
    assert not isinstance(info.value, IndexError)
    with pytest.raises(ExecutionError, match="buffer index 3 is out of range") as info:
        bound.set_buffer(3, out)
    assert not isinstance(info.value, IndexError)
    with pytest.raises(ExecutionError, match="takes 1 variables"):
        bound.set_vals([1, 2])


# --- 2. the grid follows patched variables when it came from the program -------------------------


def _transpose(dev: cuda.CudaDevice, rows: int, cols: int) -> Tuple[Any, Any, Any]:
    tr = cuda_library_kernel(dev, "transpose", dtype="float32")
    x, out = dev.allocate([rows * cols], "float32"), dev.allocate([rows * cols], "float32")
    x.copyin(_floats(rows * cols))
    return tr, x, out


def test_set_vals_recomputes_a_grid_from_the_programs_expressions(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    tr, x, out = _transpose(dev, 64, 64)
    bound = tr.bind([out, x], [32, 32])
    assert bound.grid == (1, 1, 1)
    bound.set_vals([64, 64])
    assert bound.grid == (2, 2, 1)
    bound()
    assert np.array_equal(out.numpy().reshape(64, 64), _floats(64 * 64).reshape(64, 64).T)
    bound.set_val(1, 32)  # cols
    assert bound.grid == (1, 2, 1)


def test_set_vals_updates_a_graph_node_grid(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    tr, x, out = _transpose(dev, 64, 64)
    bound = tr.bind([out, x], [32, 32])
    graph = CudaGraph([bound])
    bound.set_vals([64, 64])
    graph.launch()
    assert np.array_equal(out.numpy().reshape(64, 64), _floats(64 * 64).reshape(64, 64).T)


def test_explicit_grids_stay_explicit_after_set_vals(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    tr, x, out = _transpose(dev, 64, 64)
    bound = tr.bind([out, x], [32, 32], global_size=(3, 3))
    bound.set_vals([64, 64])
    assert bound.grid == (3, 3, 1)
    auto = tr.bind([out, x], [32, 32])
    auto.set_dims((5, 5))  # what plans do after set_vals: their grid wins from then on
    auto.set_vals([64, 64])
    assert auto.grid == (5, 5, 1)


# --- 3. use after free / unload / close -----------------------------------------------------------


def _uses_of_freed(dev: Any, add: Any, buf: Any, a: Any, bound: Any, graph: CudaGraph) -> List[Callable[[], Any]]:
    """Every way to touch the freed ``buf``.

    Built here, not in the test: closures over a name the test later ``del``s read as undefined to ruff (F821).
    """
    return [
        lambda: buf.copyin(_floats(64)),
        buf.copyout,
        buf.numpy,
        lambda: buf.view(0, 16),
        lambda: a.copyin(buf),
        lambda: buf.copyin(a),
        lambda: add.execute([buf, a, a], [64]),
        bound,
        graph.launch,
        lambda: dev.copy(a, buf),
    ]


def test_freed_buffers_are_refused_everywhere(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    add = cuda_library_kernel(dev, "add", dtype="float32")
    buf, a = dev.allocate([64], "float32"), dev.allocate([64], "float32")
    bound = add.bind([buf, a, a], [64])
    graph = CudaGraph([bound])
    live = f.counter("live_dev")
    buf.storage.free()
    assert f.counter("live_dev") == live - 1
    uses = _uses_of_freed(dev, add, buf, a, bound, graph)
    for use in uses:
        with pytest.raises(FreedBufferError, match="was freed"):
            use()
    assert f.counter("launches") == 0 and f.counter("graph_launches") == 0
    assert isinstance(FreedBufferError("x"), ReleasedError) and isinstance(FreedBufferError("x"), DeviceError)
    buf.storage.free()  # twice: no second cuMemFree
    released = weakref.ref(buf.storage)
    del buf, bound, graph, uses, use  # the uses hold buf too
    gc.collect()
    assert released() is None  # the storage went: its finalizer ran, and freed nothing a second time
    assert f.counter("live_dev") == live - 1


def test_unloaded_modules_are_refused_and_leave_the_cache(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    add = cuda_library_kernel(dev, "add", dtype="float32")
    out, a = dev.allocate([64], "float32"), dev.allocate([64], "float32")
    bound = add.bind([out, a, a], [64])
    add.module.unload()
    assert f.counter("live_modules") == 0
    for use in (lambda: add.execute([out, a, a], [64]), bound, lambda: add.module.function(add.entry_point)):
        with pytest.raises(ReleasedError, match="was unloaded"):
            use()
    assert f.counter("launches") == 0
    again = cuda_library_kernel(dev, "add", dtype="float32")
    assert again.module is not add.module and f.counter("live_modules") == 1
    a.copyin(_floats(64))
    again.execute([out, a, a], [64])
    assert np.array_equal(out.numpy(), 2 * _floats(64))
    add.module.unload()  # twice: nothing more
    assert f.counter("live_modules") == 1


def test_closed_graphs_are_refused(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    graph = CudaGraph([iota.bind([dev.allocate([8], "int32")], [8])])
    graph.close()
    with pytest.raises(ReleasedError, match="graph was closed"):
        graph.launch()
    assert f.counter("graph_launches") == 0
    graph.close()


def _uses_of_closed(dev: Any, buf: Any, iota: Any, event: Any) -> List[Callable[[], Any]]:
    """Every way to touch the closed ``dev`` (built here for the reason :func:`_uses_of_freed` gives)."""
    return [
        lambda: dev.allocate([16], "float32"),
        lambda: buf.copyin(_floats(16)),
        buf.copyout,
        dev.synchronize,
        lambda: iota.execute([buf], [4]),
        event.record,
        lambda: dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"]),
    ]


def test_closed_devices_are_refused_and_replaced(fake: Callable[..., Fake]) -> None:
    f = fake()
    driver = f.driver()
    dev = driver.device(0)
    buf = dev.allocate([16], "float32")
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    event = cuda.CudaEvent(dev)
    live = f.counter("live_dev")
    dev.close()
    for use in _uses_of_closed(dev, buf, iota, event):
        with pytest.raises(ReleasedError, match="CUDA:0 was closed"):
            use()
    fresh = driver.device(0)
    assert fresh is not dev and not fresh.closed
    fresh.allocate([16], "float32").copyin(_floats(16))
    del buf, iota, event
    gc.collect()
    # The last release of the primary context took its memory; the leftovers' finalizers free nothing again.
    assert live == 1 and f.counter("ctx_deaths") == 1 and f.counter("live_dev") == 0 and f.counter("bad_frees") == 0
    dev.close()  # twice: nothing more


# --- 4. overlapping device copies -------------------------------------------------------------------


def _spy_dtod(monkeypatch: pytest.MonkeyPatch) -> List[Tuple[int, int, int]]:
    calls: List[Tuple[int, int, int]] = []
    real = cuda.CudaLibrary.call

    def spy(self: Any, name: str, *args: Any) -> None:
        if name.startswith("cuMemcpyDtoD"):
            calls.append((int(args[0]), int(args[1]), int(args[2])))
        return real(self, name, *args)

    monkeypatch.setattr(cuda.CudaLibrary, "call", spy)
    return calls


@pytest.mark.parametrize("dst_off,src_off", [(16, 0), (0, 16)])
def test_overlapping_copies_have_memmove_semantics(
    fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch, dst_off: int, src_off: int
) -> None:
    dev = fake().device()
    arena = dev.allocate([16], "float32")
    arena.copyin(_floats(16))
    dst, src = arena.view(dst_off, 32, "float32"), arena.view(src_off, 32, "float32")
    calls = _spy_dtod(monkeypatch)
    dst.copyin(src)
    want = _floats(16)
    want[dst_off // 4 : dst_off // 4 + 8] = _floats(16)[src_off // 4 : src_off // 4 + 8].copy()
    assert np.array_equal(arena.numpy(), want)
    assert calls and all(not (d < s + n and s < d + n) for d, s, n in calls)  # no overlapping driver copy


def test_device_copy_refuses_buffers_of_another_device(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    here, there = dev0.allocate([4], "float32"), dev1.allocate([4], "float32")
    with pytest.raises(ExecutionError, match="copy source lives on CUDA:1, not on CUDA:0"):
        dev0.copy(here, there)
    with pytest.raises(ExecutionError, match="copy destination lives on CUDA:1"):
        dev0.copy(there, here)


# --- 5. shared-memory opt-in belongs to the function ------------------------------------------------


def test_shared_memory_opt_in_is_tracked_per_function(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    a = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], name="A")
    b = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], name="B")
    assert a.function.value == b.function.value  # one cached module, one CUfunction
    out = dev.allocate([16], "int32")
    a.execute([out], [4], shared_bytes=100 << 10)
    b.execute([out], [4], shared_bytes=64 << 10)  # must not lower the function's attribute
    a.execute([out], [4], shared_bytes=100 << 10)
    assert f.counter("func_set_attrs") == 1 and f.counter("launches") == 3


# --- 6. the .ptr parameter attribute ------------------------------------------------------------------

PTR_PTX = """\
.version 7.0
.target sm_75
.address_size 64

.visible .entry fake_axpb(
    .param .u64 .ptr .global .align 4 fake_axpb_param_0,
    .param .u64 .ptr .align 16 fake_axpb_param_1,
    .param .u32 fake_axpb_param_2,
    .param .u32 fake_axpb_param_3,
    .param .u32 fake_axpb_param_4
)
{
    ret;
}
"""


def test_ptx_pointer_params_with_the_ptr_attribute(fake: Callable[..., Fake]) -> None:
    assert cuda.ptx_entry_params(PTR_PTX, "fake_axpb") == [8, 8, 4, 4, 4]
    for space in ("global", "shared", "const", "local"):
        text = PTR_PTX.replace(".ptr .global", ".ptr .%s" % space)
        assert cuda.ptx_entry_params(text, "fake_axpb") == [8, 8, 4, 4, 4]
    dev = fake().device()
    prog = dev.load_ptx(PTR_PTX, "fake_axpb", 2, ["n", "k", "c"])
    out, x = dev.allocate([4], "int32"), dev.allocate([4], "int32")
    x.copyin(np.arange(4, dtype=np.int32))
    prog.execute([out, x], [4, 3, 1])
    assert out.numpy().tolist() == [1, 4, 7, 10]


# --- 7. bad arguments give project errors, not raw Python exceptions -------------------------------


def test_non_utf8_ptx_bytes_are_judged_not_decoded_strictly(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    prog = dev.load_ptx(FAKE_PTX.encode() + b"// \xff\n", "fake_iota", 1, ["n"])  # a stray byte in a comment
    assert prog.entry_point == "fake_iota"
    with pytest.raises(cuda.PtxError, match="no .version"):
        dev.load_ptx(b"\xff\xfe garbage", "fake_iota", 1, ["n"])
    with pytest.raises(cuda.PtxError, match="must be str or bytes"):
        dev.load_ptx(42, "fake_iota", 1, ["n"])  # type: ignore[arg-type]


def test_load_ptx_checks_local_size_and_grid_at_load(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    assert dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], local_size=128).local_size == (128, 1, 1)
    bad_blocks = [("x", "not an integer"), ((2048,), "the device allows 1024"), ((1, 2, 3, 4), "1 to 3 dimensions")]
    for local_size, message in bad_blocks:
        with pytest.raises(LaunchConfigError, match=message):
            dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], local_size=local_size)
    bad_grids = [
        (("n//0", 1, 1), "division by zero"),
        (("ceildiv(n)",), r"ceildiv\(\) takes 2 arguments"),
        (("abs(n)",), r"call to abs\(\) is not allowed"),
        (("max(n)",), r"max\(\) takes 2 or more arguments"),
        (("ceildiv(n,0)",), "division by zero"),
        (("n//(1-1)",), "division by zero"),
        (("m*2",), "unknown variable 'm'"),
        (("n +",), "grid\\[0\\]"),
        ((0,), "positive"),
        ((1.5,), "not an integer"),
    ]
    for grid, message in bad_grids:
        with pytest.raises(LaunchConfigError, match=message):
            dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], grid=grid)


def test_grid_expressions_failing_at_launch_are_launch_config_errors(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    out = dev.allocate([8], "int32")
    prog = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], grid=("8//(n-8)",))
    with pytest.raises(LaunchConfigError, match=r"grid\[0\]='8//\(n-8\)' with \{'n': 8\}"):
        prog.execute([out], [8])
    # 11: a grid expression <= 0 is refused, not launched as 1 block
    empty = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], grid=("n-8",))
    with pytest.raises(LaunchConfigError, match=r"is 0 blocks with \{'n': 8\}"):
        empty.execute([out], [8])
    bound = empty.bind([out], [9])
    with pytest.raises(LaunchConfigError, match="is -1 blocks"):
        bound.set_val(0, 7)
    assert bound.blob.ints() == [9] and bound.grid == (1, 1, 1)
    assert f.counter("launches") == 0


def test_library_kernels_with_no_work_still_launch(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    add = cuda_library_kernel(dev, "add", dtype="float32")
    bufs = [dev.allocate([4], "float32") for _ in range(3)]
    add.execute(bufs, [0])  # the library's grids say max(1, ...) themselves
    assert f.counter("launches") == 1


def test_launch_dims_takes_sequences_of_ints() -> None:
    assert cuda.launch_dims(np.array([2, 1, 1])) == ((2, 1, 1), (1, 1, 1))
    assert cuda.launch_dims(np.int64(3), np.array([32, 2])) == ((3, 1, 1), (32, 2, 1))
    for bad in (np.array([[1, 2]]), "8", [1.0], object()):
        with pytest.raises(LaunchConfigError, match="global_size"):
            cuda.launch_dims(bad)


def test_bad_argument_containers_are_execution_errors(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    out = dev.allocate([8], "int32")
    with pytest.raises(ExecutionError, match=r"vals \(the variables \['n'\]\) must be a sequence, got int 8"):
        iota.execute([out], 8)  # type: ignore[arg-type]
    with pytest.raises(ExecutionError, match="buffers must be a sequence"):
        iota.execute(out, [8])  # type: ignore[arg-type]
    bound = iota.bind([out], [8])
    with pytest.raises(ExecutionError, match="dependencies has 1 entries for 2 nodes"):
        CudaGraph([bound, bound], dependencies=[[]])
    with pytest.raises(ExecutionError, match="graph node 0 is int, not a BoundLaunch or GraphCopy"):
        CudaGraph([1, 2])  # type: ignore[list-item]
    with pytest.raises(ExecutionError, match="launches must be a sequence"):
        CudaGraph(bound)  # type: ignore[arg-type]


# --- 8. library variable errors ------------------------------------------------------------------


def test_library_variables_out_of_range_are_variable_bounds_errors(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    add = cuda_library_kernel(dev, "add", dtype="float32")
    softmax = cuda_library_kernel(dev, "softmax", dtype="float32")
    bufs = [dev.allocate([16], "float32") for _ in range(3)]
    with pytest.raises(ArgumentRangeError, match="variable n=2147483648 does not fit"):
        add.execute(bufs, [2**31])  # int32 first, not "buffer holds 64 bytes"
    with pytest.raises(VariableBoundsError, match="rows=0 is below its minimum 1") as info:
        softmax.execute(bufs[:2], [0, 4])
    assert info.value.exit_code == 2  # bad input: nothing was launched
    assert f.counter("launches") == 0


# --- 9. events in a forked child ------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # forking is the point
def test_event_methods_in_a_forked_child_are_refused(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    event = cuda.CudaEvent(dev)
    event.record()
    uses = [event.record, event.query, event.synchronize, lambda: event.elapsed_since(event)]

    def use_all() -> str:
        results = []
        for use in uses:
            try:
                use()
                results.append("no error")
            except ForkedChildError:
                results.append("ForkedChildError")
            except BaseException as exc:  # noqa: B902 - reported to the parent
                results.append(type(exc).__name__)
        return ",".join(results)

    message = in_forked_child(use_all)
    assert message == ",".join(["ForkedChildError"] * 4)
    event.synchronize()  # the parent is unaffected


# --- 10. the registry's hint says why CUDA is unavailable ---------------------------------------------


def test_registry_hint_uses_the_recorded_reason(fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch) -> None:
    f = fake(count=0)
    monkeypatch.setenv("SVOD_CUDA_LIBRARY", f.path)
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry) is False
    with pytest.raises(UnsupportedDeviceError, match="%s loaded \\(driver 13.0\\) but reports no CUDA device" % f.path):
        registry.device("CUDA")


def test_every_error_here_is_an_svod_error() -> None:
    for cls in (cuda.ReleasedError, cuda.FreedBufferError, cuda.KernelVariableError):
        assert issubclass(cls, SvodError)
