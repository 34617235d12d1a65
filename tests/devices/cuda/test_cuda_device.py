"""svod_min.devices.cuda.device: the current context per thread, forked children, finalizers, interpreter exit, and the
device interface of devices/base.py (every slot filled, program close, the graph slot).
"""

from __future__ import annotations

import ctypes
import gc
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Callable, List

import pytest
from support.cuda import (  # noqa: F401  (fixtures)
    FAKE_PTX,
    Fake,
    device_counter,
    fake,
    fake_so,
    gpu,
    gpu_test,
    in_forked_child,
    int_values,
)
from support.paths import REPO as REPO_PATH

from svod_min.devices import base, cuda
from svod_min.devices.cuda import ForkedChildError, GraphCopy
from svod_min.error import ReleasedError


def test_fake_context_made_current_once_per_thread(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    keep = [dev.allocate(16)]
    start = device_counter(dev, "set_current")
    keep += [dev.allocate(16) for _ in range(5)]
    assert device_counter(dev, "set_current") == start  # same thread: never again

    def worker() -> None:
        keep.extend(dev.allocate(16) for _ in range(5))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(keep) == 11
    assert device_counter(dev, "set_current") == start + 1  # once for the new thread


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # forking is the point
def test_fake_forked_child_is_refused(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    buf = dev.allocate(16)

    def copy_out() -> str:
        try:
            buf.copyout()
            return "no error"
        except ForkedChildError as exc:
            return str(exc)

    message = in_forked_child(copy_out)
    assert (
        message == "CUDA was initialised in process %d; it cannot be used in a forked child (use spawn)" % os.getpid()
    )
    assert buf.copyout() == bytes(16)  # the parent is unaffected


def test_fake_finalizers_keep_the_threads_current_context(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    buf = dev0.allocate(64)
    dev1.activate(force=True)
    live, pushes = f.counter("live_dev"), f.counter("pushes")
    del buf
    gc.collect()
    assert f.counter("live_dev") == live - 1 and f.counter("pushes") == pushes + 1
    current = ctypes.c_void_p()
    dev1.lib.call("cuCtxGetCurrent", ctypes.byref(current))
    assert current.value == dev1.context_value  # freed under dev0's context, dev1's restored


def test_close_keeps_the_other_devices_context_current(fake: Callable[..., Fake]) -> None:
    """Closing GPU 0 synchronises it under its own context, then gives the thread's context back:
    GPU 1, believed current, really is (on hardware its next call would fail or land on GPU 0)."""
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    dev0.allocate(64)
    dev1.activate(force=True)
    dev0.close()
    current = ctypes.c_void_p()
    dev1.lib.call("cuCtxGetCurrent", ctypes.byref(current))
    assert current.value == dev1.context_value
    assert dev1.allocate(16).copyin(bytes(range(16))).copyout() == bytes(range(16))


def test_close_in_a_forked_child_does_nothing(fake: Callable[..., Fake]) -> None:
    """A child forked from a process using the GPU may close its copy of the device (cleanup code, atexit):
    that must neither raise nor touch the parent's driver state."""
    f = fake()
    dev = f.device()
    buf = dev.allocate(16).copyin(bytes(range(16)))
    calls = f.counter("set_current") + f.counter("pushes") + f.counter("stream_syncs")

    def close_in_child() -> str:
        try:
            dev.close()
            dev.close()
        except Exception as exc:  # noqa: B902 - the message is the test's result
            return "%s: %s" % (type(exc).__name__, exc)
        return "closed" if dev.closed else "still open"

    assert in_forked_child(close_in_child) == "closed"
    assert not dev.closed and buf.copyout() == bytes(range(16))  # the parent's device is untouched
    assert f.counter("set_current") + f.counter("pushes") + f.counter("stream_syncs") > calls


def test_the_cuda_path_needs_no_pyelftools(fake_so: str) -> None:
    """The GPU machine's image has no pyelftools: importing and running the CUDA path (driver, library
    kernels, a graph, a plan file on the device) must work with every ``elftools`` import refused."""
    script = textwrap.dedent(
        """
        import ctypes, sys

        class NoElftools:
            def find_spec(self, name, path=None, target=None):
                if name == "elftools" or name.startswith("elftools."):
                    raise ImportError("blocked: %s (the GPU image has no pyelftools)" % name)
                return None

        sys.meta_path.insert(0, NoElftools())
        ctypes.CDLL(sys.argv[1]).fake_configure(0, 13000, 1)
        from svod_min.devices import cuda
        from svod_min.kernels import cuda_library_kernel
        dev = cuda.load_driver(sys.argv[1]).device(0)
        add = cuda_library_kernel(dev, "add", dtype="float32")
        x, y, out = (dev.allocate([64], "float32") for _ in range(3))
        x.copyin(list(range(64)))
        y.copyin([1.0] * 64)
        cuda.CudaGraph([add.bind([out, x, y], [64])]).launch()
        assert out.tolist() == [i + 1.0 for i in range(64)], out.tolist()
        import svod_min
        plan = svod_min.load_plan(sys.argv[2], device=dev).plan  # its CUDA form: examples/saxpy.ptx
        plan.execute()
        assert plan.output_buffer().tolist() == [2.0 * i + 1.0 for i in range(1000)]
        assert not any(m == "elftools" or m.startswith("elftools.") for m in sys.modules)
        print("ok")
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_PATH))
    example = str(REPO_PATH / "examples" / "saxpy_vars.json")
    proc = subprocess.run(
        [sys.executable, "-c", script, fake_so, example], capture_output=True, text=True, timeout=120, env=env
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_fake_interpreter_exit_with_live_objects_is_quiet(fake_so: str, tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import ctypes, sys
        from svod_min.devices import cuda
        ctypes.CDLL(sys.argv[1]).fake_configure(0, 12040, 1)
        dev = cuda.load_driver(sys.argv[1]).device(0)
        bufs = [dev.allocate(1 << 20) for _ in range(3)]
        bufs[0].copyin(bytes(1 << 20))
        prog = dev.load_ptx(sys.argv[2], "fake_iota", 1, ["n"])
        bound = prog.bind([bufs[1]], [5])
        graph = cuda.CudaGraph([bound])
        graph.launch()
        cycle = [bufs, graph]; cycle.append(cycle)  # only the cyclic GC (or exit) can free these
        print("ok")
        """
    )
    import svod_min

    here = str(Path(svod_min.__file__).resolve().parents[1])  # the same svod_min as this process (tree or wheel)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + [p for p in sys.path if p]))
    proc = subprocess.run(
        [sys.executable, "-c", script, fake_so, FAKE_PTX], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


@gpu_test
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_gpu_forked_child_is_refused(gpu: cuda.CudaDevice) -> None:
    buf = gpu.allocate(16)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            buf.copyout()
        except ForkedChildError:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert buf.copyout() == bytes(16)


# --- the device interface (devices/base.py) ------------------------------------------------------


def _members(protocol: Any) -> List[str]:
    """The attributes and methods a Protocol of devices/base.py asks for."""
    names = set(getattr(protocol, "__annotations__", {}))
    names |= {n for n, v in vars(protocol).items() if callable(v) and (not n.startswith("_") or n == "__call__")}
    return sorted(names)


def test_fake_cuda_objects_fill_every_slot_of_the_device_interface(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    buf = dev.allocate([4], "int32")
    prog = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    bound = prog.bind([buf], [4])
    pairs = (
        (base.Device, dev),
        (base.Buffer, buf),
        (base.Program, prog),
        (base.Launch, bound),
        (base.Event, dev.new_event()),
        (base.GraphRuntime, dev.graph),
    )
    for protocol, obj in pairs:
        assert len(_members(protocol)) >= 2  # the helper reads the Protocol at all
        assert [m for m in _members(protocol) if not hasattr(obj, m)] == [], protocol.__name__
    assert dev.threads == 1 and dev.host_pool() is None and buf.on_host is False
    assert prog.grid_in_blocks and prog.native_address is None and bound.graphable and not prog.closed
    start, end = dev.new_event(), dev.new_event()
    start.record()
    bound()
    end.record()
    end.synchronize()
    assert end.elapsed_since(start) >= 0.0


def test_fake_closed_program_is_refused_and_its_module_stays(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    buf = dev.allocate([8], "int32")
    first, second = (dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], local_size=8) for _ in range(2))
    assert first.module is second.module  # one cached module under both programs
    bound = first.bind([buf], [8])
    first.close()
    first.close()  # twice is fine
    assert first.closed and not second.closed
    with pytest.raises(ReleasedError, match="was closed"):
        bound()
    with pytest.raises(ReleasedError, match="was closed"):
        first.bind([buf], [8])
    second.execute([buf], [8])
    assert int_values(buf) == list(range(8)) and f.counter("live_modules") == 1
    second.module.unload()
    assert second.closed


def test_fake_graph_runtime_turns_runs_of_graphable_ops_into_graphs(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    out, other = dev.allocate([8], "int32"), dev.allocate([8], "int32")
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], local_size=8)
    first, second, third = (iota.bind([out], [8]) for _ in range(3))
    copy = dev.graph.copy_node(other, out)
    assert isinstance(copy, GraphCopy)
    assert dev.graph.copy_node(out.view(0, 16), out.view(8, 16)) is None  # overlapping views: not a memcpy node
    assert dev.graph.copy_node(out, bytearray(32)) is None and dev.graph_copy(other, out) is not None
    nodes = {0: first, 1: base.NO_NODE, 2: copy, 3: None, 4: second, 5: third}
    segments = dev.graph.build([[0, 1], [2], [3], [4], [5]], nodes)
    assert [type(s).__name__ for s in segments] == ["CudaGraph", "list", "CudaGraph"] and segments[1] == [3]
    assert segments[0].launches == [first, copy] and segments[2].launches == [second, third]
    assert dev.graph.build([[0, 1], [3], [4]], nodes) == [[0, 1], [3], [4]]  # one node is not worth a graph
    segments[0]()
    assert int_values(other) == list(range(8))
