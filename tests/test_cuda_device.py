"""svod_min.devices.cuda.device: the current context per thread, forked children, finalizers and interpreter exit.
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
from typing import Callable

import pytest
from cuda_support import (  # noqa: F401  (fixtures)
    FAKE_PTX,
    Fake,
    device_counter,
    fake,
    fake_so,
    gpu,
    gpu_test,
)

from svod_min.devices import cuda
from svod_min.devices.cuda import ForkedChildError


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
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report the error message through the pipe, never run pytest's teardown
        try:
            try:
                buf.copyout()
                message = "no error"
            except ForkedChildError as exc:
                message = str(exc)
            os.write(write, message.encode())
        finally:
            os._exit(0)
    os.close(write)
    message = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert message == "CUDA was initialised in process %d; it cannot be used in a forked child (use spawn)" % os.getpid()
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
