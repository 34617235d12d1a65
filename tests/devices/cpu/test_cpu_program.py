"""CPU programs (devices/cpu.py): compiling, loading, dispatch over core ids, bound launches, and
misuse: a closed program refuses every route into its code (execute, bind, launches bound before
the close) with ExecutionError naming it, never a jump into unmapped pages."""

from __future__ import annotations

import struct
import threading
from typing import Any

import pytest
from conftest import needs_cc
from support.dispatch import WAIT_ENTRY, WAIT_SRC, all_ids_ran

from svod_min.devices.cpu.device import CpuBuffer, CpuDevice, CpuProgram
from svod_min.error import ExecutionError, VariableBoundsError


@pytest.fixture
def dev() -> CpuDevice:
    return CpuDevice(threads=4)


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
    pytest.importorskip("svod_min.compiler.clang")
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


def test_threaded_dispatch_runs_core_ids_on_the_caller_and_the_pool(dev: CpuDevice, compiled) -> None:
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
    assert len(submitted) == min(8, dev.threads) - 1  # the caller is one of the threads
    main = threading.get_ident()  # == pthread_self() on Linux
    pool_idents = {t.ident for t in threading.enumerate() if t.name.startswith("svod-cpu")}
    assert 0 not in out.tolist() and set(out.tolist()) <= pool_idents | {main}  # who won which id varies
    submitted.clear()
    prog.bind([out], [0], global_size=(8, 1, 1), threads=2)()
    assert len(submitted) == 1  # threads= caps the threads, not the core ids


def test_threads_claim_core_ids_so_a_busy_thread_takes_fewer(compiled) -> None:
    two = CpuDevice(threads=2)
    prog = compiled(WAIT_SRC, WAIT_ENTRY, 1, ("n", "core_id"))
    prog.device = two
    n = 8
    flags = two.allocate((n + 1,), "int32").copyin([0] * (n + 1))
    prog.execute([flags], [n, 0], global_size=(n, 1, 1), core_id_index=1)
    assert flags.tolist() == all_ids_ran(n)  # id 0 busy: the other thread ran all the rest


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


# --- closed programs and malformed arguments ---------------------------------------------------

_SRC = "void closeme(int* o, int core_id) { o[core_id] += 1; }"


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


@needs_cc
@pytest.mark.parametrize("global_size", [[0], [-3], [2.9], [True], ["4"], [1, 1, 1, 1]])
def test_execute_refuses_launch_sizes_that_are_not_positive_ints(dev: CpuDevice, global_size: Any) -> None:
    prog = dev.compile("void k(int* o, int core_id) { o[core_id] += 1; }", "k", buf_count=1, var_names=["core_id"])
    out = dev.allocate([4], "int32")
    with pytest.raises(ExecutionError, match="global_size must be 1 to 3 positive ints"):
        prog.execute([out], [0], global_size=global_size, core_id_index=0)
    assert out.tolist() == [0, 0, 0, 0]  # nothing ran
    np = pytest.importorskip("numpy")  # numpy integers are sizes too
    prog.execute([out], [0], global_size=[np.int64(4), 1, 1], core_id_index=0)
    assert out.tolist() == [1, 1, 1, 1]


# --- launches (the device interface's Launch) --------------------------------------------------------


@needs_cc
def test_launch_slots_and_patching(dev: CpuDevice) -> None:
    prog = _program(dev)
    assert prog.grid_in_blocks is False and isinstance(prog.native_address, int)
    out = dev.allocate([4], "int32")
    launch = prog.bind([out], [0], global_size=[2], core_id_index=0)
    assert launch.graphable is False and launch.timed is None
    launch()
    assert out.tolist() == [1, 1, 0, 0]
    launch.set_dims((4, 1, 1))
    launch()
    assert out.tolist() == [2, 2, 1, 1]
    with pytest.raises(ExecutionError, match="global_size must be 1 to 3 positive ints"):
        launch.set_dims((0, 1, 1))
    launch()  # a refused patch leaves the launch as it was
    assert out.tolist() == [3, 3, 2, 2]
    prog.close()
    assert prog.native_address is None


@needs_cc
def test_launch_set_vals_validates_before_changing(dev: CpuDevice) -> None:
    prog = dev.compile("void put(int* o, int v) { o[0] = v; }", "put", buf_count=1, var_names=["v"])
    out = dev.allocate([1], "int32")
    launch = prog.bind([out], [5])
    launch.set_vals([7])
    launch()
    assert out.tolist() == [7]
    with pytest.raises(VariableBoundsError):
        launch.set_vals([1 << 40])
    launch()
    assert out.tolist() == [7]
