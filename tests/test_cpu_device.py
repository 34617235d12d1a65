"""CPU device: buffers, dtypes, kernel programs and threaded dispatch."""

from __future__ import annotations

import ctypes
import struct
import threading

import pytest

from svod_min import dtypes
from svod_min.devices import cpu, cpu_buffer
from svod_min.devices.cpu import CpuBuffer, CpuDevice, CpuProgram, create_cpu_device
from svod_min.error import (
    BufferAllocationError,
    ExecutionError,
    NotSupportedError,
    SvodError,
    VariableBoundsError,
)

try:
    import numpy as np
except ImportError:  # numpy is optional: its tests skip
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy not installed")


@pytest.fixture
def dev() -> CpuDevice:
    return CpuDevice(threads=4)


# --- dtypes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, itemsize, fmt",
    [
        ("float16", 2, "e"), ("bfloat16", 2, "H"), ("float32", 4, "f"), ("float64", 8, "d"),
        ("int8", 1, "b"), ("int16", 2, "h"), ("int32", 4, "i"), ("int64", 8, "q"),
        ("uint8", 1, "B"), ("uint16", 2, "H"), ("uint32", 4, "I"), ("uint64", 8, "Q"),
        ("bool", 1, "?"),
    ],
)  # fmt: skip
def test_dtype_table(name: str, itemsize: int, fmt: str) -> None:
    dt = dtypes.dtype(name)
    assert (dt.name, dt.itemsize, dt.fmt) == (name, itemsize, fmt)
    assert ctypes.sizeof(dt.ctype) == itemsize == struct.calcsize("=" + fmt)
    if np is not None and dt.numpy_name is not None:
        assert np.dtype(dt.numpy_name).itemsize == itemsize


@pytest.mark.parametrize(
    "alias, name",
    [("f32", "float32"), ("float", "float32"), ("F64", "float64"), ("double", "float64"),
     ("i32", "int32"), ("int", "int32"), ("bf16", "bfloat16"), ("half", "float16"), ("u8", "uint8")],
)  # fmt: skip
def test_dtype_aliases(alias: str, name: str) -> None:
    assert dtypes.dtype(alias).name == name
    assert dtypes.dtype(dtypes.dtype(alias)) is dtypes.dtype(name)


def test_dtype_unknown_and_bfloat16_has_no_numpy() -> None:
    with pytest.raises(BufferAllocationError) as info:
        dtypes.dtype("complex64")
    assert "complex64" in str(info.value) and isinstance(info.value, ValueError)
    with pytest.raises(BufferAllocationError):
        dtypes.dtype(float)  # Python's float is ambiguous (f32 here, f64 to numpy)
    assert dtypes.bfloat16.numpy_name is None


@needs_numpy
def test_dtype_from_numpy() -> None:
    assert dtypes.dtype(np.float32) is dtypes.float32
    assert dtypes.dtype(np.dtype("int64")) is dtypes.int64
    assert dtypes.dtype(np.bool_) is dtypes.bool_


def test_bfloat16_round_trip_bits() -> None:
    assert dtypes.float_to_bf16_bits(1.0) == 0x3F80
    assert dtypes.bf16_bits_to_float(0xC020) == -2.5
    assert dtypes.bf16_bits_to_float(dtypes.float_to_bf16_bits(3.14159)) == pytest.approx(3.140625)


# --- buffers ---------------------------------------------------------------------


def test_allocate_page_aligned_zeroed(dev: CpuDevice) -> None:
    for size in (1, 4096, 4097, 1 << 20):
        buf = dev.allocate(size)
        assert buf.address % 4096 == 0
        assert buf.nbytes == size and buf.dtype is dtypes.uint8 and len(buf) == size
        assert buf.copyout() == bytes(size)


def test_allocate_by_shape(dev: CpuDevice) -> None:
    buf = dev.allocate((2, 3), dtype="f32")
    assert (buf.shape, buf.nbytes, len(buf), buf.dtype) == ((2, 3), 24, 6, dtypes.float32)
    assert buf.tolist() == [[0.0] * 3] * 2
    assert buf.device is dev and buf.offset == 0


def test_allocate_zero_bytes(dev: CpuDevice) -> None:
    buf = dev.allocate(0)
    assert buf.nbytes == 0 and len(buf) == 0 and buf.copyout() == b"" and buf.tolist() == []
    buf.copyin(b"")
    assert dev.allocate((0, 5), "f32").nbytes == 0


@pytest.mark.parametrize("size", [-1, 1 << 62, 1 << 70, 2.5, "8"])
def test_allocate_bad_sizes(dev: CpuDevice, size: object) -> None:
    with pytest.raises(BufferAllocationError):
        dev.allocate(size)  # type: ignore[arg-type]


def test_allocate_size_not_multiple_of_itemsize(dev: CpuDevice) -> None:
    with pytest.raises(BufferAllocationError):
        dev.allocate(10, dtype="float32")
    with pytest.raises(BufferAllocationError):
        dev.allocate((2, -1), dtype="float32")


def test_copyin_copyout_round_trip(dev: CpuDevice) -> None:
    buf = dev.allocate((4,), "float32")
    payload = struct.pack("=4f", 1.5, -2.0, 3.25, 0.0)
    for source in (payload, bytearray(payload), memoryview(payload)):
        buf.copyin(source)
        assert buf.copyout() == payload
    assert buf.tolist() == [1.5, -2.0, 3.25, 0.0]
    buf.copyin([4, 3, 2, 1])
    assert buf.tolist() == [4.0, 3.0, 2.0, 1.0]


def test_copyin_non_contiguous_memoryview(dev: CpuDevice) -> None:
    buf = dev.allocate(4)
    buf.copyin(memoryview(b"a1b2c3d4")[::2])
    assert buf.copyout() == b"abcd"


def test_copyin_size_mismatch_names_both_sizes(dev: CpuDevice) -> None:
    buf = dev.allocate((4,), "float32")
    with pytest.raises(BufferAllocationError) as info:
        buf.copyin(b"\0" * 12)
    assert "12" in str(info.value) and "16" in str(info.value)
    with pytest.raises(BufferAllocationError):
        buf.copyin([1.0, 2.0])
    with pytest.raises(BufferAllocationError):
        buf.copyin(object())


def test_views_share_memory(dev: CpuDevice) -> None:
    base = dev.allocate((8,), "int32")
    base.copyin(list(range(8)))
    view = base.view(8, 16)
    assert view.storage is base.storage and view.offset == 8 and view.address == base.address + 8
    assert view.tolist() == [2, 3, 4, 5] and view.byte_range() == (8, 24)
    view.copyin([20, 30, 40, 50])
    assert base.tolist() == [0, 1, 20, 30, 40, 50, 6, 7]
    nested = view.view(4, 4, dtype="uint8", shape=(2, 2))
    assert nested.offset == 12 and nested.storage is base.storage and nested.shape == (2, 2)
    assert base.view(32, 0).nbytes == 0  # empty view at the end is fine


@pytest.mark.parametrize("offset, nbytes", [(0, 36), (30, 4), (33, 0), (-4, 4), (4, -4)])
def test_view_out_of_range(dev: CpuDevice, offset: int, nbytes: int) -> None:
    base = dev.allocate((8,), "int32")
    with pytest.raises(BufferAllocationError):
        base.view(offset, nbytes)


def test_view_shape_mismatch(dev: CpuDevice) -> None:
    base = dev.allocate((8,), "int32")
    with pytest.raises(BufferAllocationError):
        base.view(0, 16, shape=(3,))
    with pytest.raises(BufferAllocationError):
        base.view(0, 6)  # not a whole number of int32


def test_tolist_dtypes_without_numpy(dev: CpuDevice) -> None:
    buf = dev.allocate((3,), "bfloat16")
    buf.copyin([1.0, -2.5, 0.5])
    assert buf.tolist() == [1.0, -2.5, 0.5]
    assert buf.view(0, 6, dtype="uint16").tolist() == [0x3F80, 0xC020, 0x3F00]
    flags = dev.allocate((2,), "bool").copyin([True, False])
    assert flags.tolist() == [True, False]
    half = dev.allocate((2,), "float16").copyin([0.5, 65504.0])
    assert half.tolist() == [0.5, 65504.0]
    scalar = dev.allocate(4, "int32").view(0, 4, shape=())
    assert scalar.tolist() == 0 and len(scalar) == 1


@needs_numpy
def test_numpy_zero_copy_view(dev: CpuDevice) -> None:
    buf = dev.allocate((2, 3), "float32")
    arr = buf.numpy()
    assert arr.shape == (2, 3) and arr.dtype == np.float32
    assert arr.ctypes.data == buf.address
    arr[1, 2] = 7.5
    assert buf.tolist()[1][2] == 7.5
    assert struct.unpack("=6f", buf.copyout())[5] == 7.5
    sub = buf.view(12, 12).numpy()
    sub[:] = [1, 2, 3]
    assert arr[1].tolist() == [1, 2, 3] and sub.ctypes.data == buf.address + 12


@needs_numpy
def test_numpy_copyin(dev: CpuDevice) -> None:
    buf = dev.allocate((2, 2), "float32")
    src = np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2]  # non-contiguous
    buf.copyin(src)
    assert buf.tolist() == [[0.0, 2.0], [4.0, 6.0]]
    with pytest.raises(BufferAllocationError) as info:
        buf.copyin(np.zeros(2, dtype=np.float64))  # same nbytes, wrong itemsize
    assert "float64" in str(info.value)
    with pytest.raises(BufferAllocationError):
        buf.copyin(np.zeros(3, dtype=np.float32))
    bf = dev.allocate((2,), "bfloat16")
    bf.copyin(np.array([0x3F80, 0x4000], dtype=np.uint16))  # raw bits are accepted
    assert bf.tolist() == [1.0, 2.0]


@needs_numpy
def test_numpy_bfloat16_and_empty(dev: CpuDevice) -> None:
    with pytest.raises(NotSupportedError):
        dev.allocate((2,), "bfloat16").numpy()
    assert dev.allocate(0, "float32").numpy().shape == (0,)


def test_no_numpy_path(dev: CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_buffer, "numpy_module", lambda: None)
    buf = dev.allocate((3,), "int16")
    buf.copyin(struct.pack("=3h", -1, 2, 3))
    assert buf.tolist() == [-1, 2, 3]
    buf.copyin([7, 8, 9])
    assert buf.copyout() == struct.pack("=3h", 7, 8, 9)
    with pytest.raises(NotSupportedError) as info:
        buf.numpy()
    assert "numpy" in str(info.value) and isinstance(info.value, SvodError)


def test_buffer_memory_outlives_its_first_owner(dev: CpuDevice) -> None:
    view = dev.allocate((4,), "int32").copyin([1, 2, 3, 4]).view(4, 8)
    import gc

    gc.collect()  # the base buffer is gone; the view keeps the storage mapped
    assert view.tolist() == [2, 3]


# --- device ------------------------------------------------------------------------


def test_threads_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_THREADS", "3")
    assert CpuDevice().threads == 3
    for bad in ("zero", "0", "-2"):
        monkeypatch.setenv("SVOD_THREADS", bad)
        with pytest.warns(RuntimeWarning, match="SVOD_THREADS"):
            assert CpuDevice().threads == cpu._default_threads()
    monkeypatch.delenv("SVOD_THREADS")
    assert CpuDevice().threads == cpu._default_threads()


def test_device_basics() -> None:
    dev = create_cpu_device()
    assert dev is create_cpu_device() is cpu.create_cpu_device_with_backend(dev.backend)
    assert str(dev.spec) == "CPU" and dev.name == "CPU"
    dev.synchronize()
    other = cpu.CpuBackend.LLVM if dev.backend is cpu.CpuBackend.CLANG else cpu.CpuBackend.CLANG
    assert cpu.create_cpu_device_with_backend(other) is not dev
    assert cpu.create_cpu_device(other.value) is cpu.create_cpu_device_with_backend(other)


def test_pool_is_lazy_and_resizable() -> None:
    dev = CpuDevice(threads=2)
    assert dev._pool is None
    pool = dev.pool
    assert pool is dev.pool
    dev.set_threads(3)
    assert dev.threads == 3 and dev.pool is not pool
    with pytest.raises(ValueError):
        dev.set_threads(0)


def test_ensure_thread_pool_warms_workers() -> None:
    dev = create_cpu_device()
    before = dev.threads
    try:
        pool = cpu.ensure_thread_pool(2)
        assert pool is dev.pool and dev.threads == 2
        names = {t.name for t in threading.enumerate()}
        assert sum(n.startswith("svod-cpu") for n in names) >= 2
    finally:
        cpu.ensure_thread_pool(before)


# --- programs (need the compiler driver and the loader) ------------------------

ADD_SRC = """
void add(float* restrict out, const float* restrict a, const float* restrict b, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}
"""

CORE_ID_SRC = """
void who(int* restrict out, const int core_id) { out[core_id] = core_id + 100; }
"""

THREAD_SRC = """
extern unsigned long pthread_self(void);
void tid(unsigned long* restrict out, int core_id) { out[core_id] = pthread_self(); }
"""


@pytest.fixture
def compiled(dev: CpuDevice, tmp_path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("svod_min.clang")
    pytest.importorskip("svod_min.jit_loader")
    from svod_min.error import CompilerNotFoundError

    # Keep the disk object cache (when present) out of the user's home.
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "objects"))

    def build(src: str, entry: str, buf_count: int, var_names=()) -> CpuProgram:
        try:
            return dev.compile(src, entry, buf_count=buf_count, var_names=var_names)
        except CompilerNotFoundError as exc:
            pytest.skip("no C compiler: %s" % exc)

    return build


def _floats(dev: CpuDevice, values) -> CpuBuffer:
    return dev.allocate((len(values),), "float32").copyin(list(values))


def test_add_kernel_matches_python(dev: CpuDevice, compiled) -> None:
    prog = compiled(ADD_SRC, "add", 3, ("n",))
    assert prog.name == "add" and prog.var_names == ("n",)
    a = [i * 0.5 for i in range(1000)]
    b = [1000.0 - i for i in range(1000)]
    out = dev.allocate((1000,), "float32")
    prog.execute([out, _floats(dev, a), _floats(dev, b)], [1000])
    expected = struct.unpack("=1000f", struct.pack("=1000f", *[x + y for x, y in zip(a, b)]))
    assert out.tolist() == list(expected)


def test_add_kernel_on_views_and_partial_n(dev: CpuDevice, compiled) -> None:
    prog = compiled(ADD_SRC, "add", 3, ("n",))
    arena = dev.allocate((12,), "float32").copyin([float(i) for i in range(12)])
    out, a, b = arena.view(0, 16), arena.view(16, 16), arena.view(32, 16)
    prog.execute([out, a, b], [3])  # only 3 of 4 elements
    assert arena.tolist()[:4] == [12.0, 14.0, 16.0, 3.0]


def test_bind_and_execute_timed(dev: CpuDevice, compiled) -> None:
    prog = compiled(ADD_SRC, "add", 3, ("n",))
    a, out = _floats(dev, [1, 2]), dev.allocate((2,), "float32")
    call = prog.bind([out, a, a], [2])
    call()
    assert out.tolist() == [2.0, 4.0]
    seconds = prog.execute_timed([out, out, a], [2])
    assert seconds >= 0.0 and out.tolist() == [3.0, 6.0]
    prog.execute([out.address, a.address, a.address], [1])  # raw addresses work too
    assert out.tolist() == [2.0, 6.0]


def test_core_id_kernel(dev: CpuDevice, compiled) -> None:
    prog = compiled(CORE_ID_SRC, "who", 1, ("core_id",))
    out = dev.allocate((4,), "int32")
    prog.execute([out], [0], global_size=(4, 1, 1), core_id_index=0)
    assert out.tolist() == [100, 101, 102, 103]
    out2 = dev.allocate((4,), "int32")
    prog.bind([out2], [0], global_size=(4, 1, 1))()  # core_id found by name
    assert out2.tolist() == [100, 101, 102, 103]


def test_many_core_ids_chunked(dev: CpuDevice, compiled) -> None:
    prog = compiled(CORE_ID_SRC, "who", 1, ("core_id",))
    out = dev.allocate((1000,), "int32")
    prog.execute([out], [0], global_size=(1000, 1, 1))
    assert out.tolist() == [i + 100 for i in range(1000)]


def test_single_thread_device_runs_serially(compiled) -> None:
    serial = CpuDevice(threads=1)
    prog = compiled(CORE_ID_SRC, "who", 1, ("core_id",))
    prog.device = serial
    out = serial.allocate((3,), "int32")
    prog.execute([out], [0], global_size=(3, 1, 1))
    assert out.tolist() == [100, 101, 102] and serial._pool is None


def test_threaded_dispatch_uses_the_pool(dev: CpuDevice, compiled) -> None:
    from svod_min.error import SymbolNotFoundError

    try:
        prog = compiled(THREAD_SRC, "tid", 1, ("core_id",))
    except SymbolNotFoundError:
        pytest.skip("pthread_self is not resolvable on this libc")
    submitted = []
    real_submit = dev.pool.submit

    def counting_submit(*args, **kwargs):
        submitted.append(args)
        return real_submit(*args, **kwargs)

    dev.pool.submit = counting_submit  # type: ignore[method-assign]
    out = dev.allocate((8,), "uint64")
    prog.execute([out], [0], global_size=(8, 1, 1))
    assert len(submitted) == min(8, dev.threads)
    main = threading.get_ident()  # == pthread_self() on Linux
    pool_idents = {t.ident for t in threading.enumerate() if t.name.startswith("svod-cpu")}
    recorded = set(out.tolist())
    assert main not in recorded and recorded <= pool_idents


def test_nested_dispatch_in_worker_runs_serially(compiled) -> None:
    # Two pool workers each dispatch a threaded kernel; waiting on the pool
    # from inside it would deadlock, so nested dispatch must run inline.
    dev2 = CpuDevice(threads=2)
    prog = compiled(CORE_ID_SRC, "who", 1, ("core_id",))
    prog.device = dev2
    outs = [dev2.allocate((4,), "int32") for _ in range(2)]
    futures = [dev2.pool.submit(prog.execute, [o], [0], global_size=(4, 1, 1)) for o in outs]
    for fut in futures:
        fut.result(timeout=30)
    assert [o.tolist() for o in outs] == [[100, 101, 102, 103]] * 2


def test_int32_overflow_dispatches_nothing(dev: CpuDevice, compiled) -> None:
    prog = compiled(ADD_SRC, "add", 3, ("n",))
    a = _floats(dev, [1.0])
    out = dev.allocate((1,), "float32")
    for bad in (2**31, -(2**31) - 1, 1.0, "1"):
        with pytest.raises(VariableBoundsError) as info:
            prog.execute([out, a, a], [bad])
        assert "n=" in str(info.value)
    assert out.tolist() == [0.0]  # nothing ran
    prog.execute([out, a, a], [True])  # bool is an int
    assert out.tolist() == [2.0]


def test_wrong_counts_are_execution_errors(dev: CpuDevice, compiled) -> None:
    prog = compiled(ADD_SRC, "add", 3, ("n",))
    a = _floats(dev, [1.0])
    with pytest.raises(ExecutionError, match="3 buffers, got 2"):
        prog.execute([a, a], [1])
    with pytest.raises(ExecutionError, match="variables"):
        prog.execute([a, a, a], [])
    with pytest.raises(ExecutionError, match="address"):
        prog.execute([a, a, object()], [1])
    with pytest.raises(ExecutionError, match="core id"):
        prog.execute([a, a, a], [1], global_size=(2, 1, 1))  # "n" is no core id
    assert a.tolist() == [1.0]


def test_closed_program_refuses(dev: CpuDevice, compiled) -> None:
    prog = compiled(ADD_SRC, "add", 3, ("n",))
    prog.close()
    a = _floats(dev, [1.0])
    with pytest.raises(ExecutionError, match="closed"):
        prog.execute([a, a, a], [1])


def test_from_object_and_load(dev: CpuDevice, compiled) -> None:
    compiled(ADD_SRC, "add", 3, ("n",))  # skips when no compiler
    obj = dev.compile_object(ADD_SRC)
    assert obj[:4] == b"\x7fELF"
    prog = CpuProgram.from_object(obj, "add", buf_count=3, var_names=["n"], device=dev)
    a, out = _floats(dev, [2.0]), dev.allocate((1,), "float32")
    prog.execute([out, a, a], [1])
    assert out.tolist() == [4.0]
    from svod_min.error import SymbolNotFoundError

    with pytest.raises(SymbolNotFoundError):
        dev.load(obj, "missing", buf_count=0)


def test_compile_goes_through_the_object_cache(dev: CpuDevice, compiled, tmp_path) -> None:
    compiled(ADD_SRC + "/* cache probe */", "add", 3, ("n",))
    stored = [p for p in (tmp_path / "objects").rglob("*") if p.is_file()]
    assert stored, "the compiled object was not written to the disk cache"
