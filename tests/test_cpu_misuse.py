"""CpuProgram misuse: a closed program refuses every route into its code (execute, bind, callables
bound before the close) with ExecutionError naming it, never a jump into unmapped pages."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from conftest import needs_cc

from svod_min.devices.cpu import CpuDevice, CpuProgram
from svod_min.error import ExecutionError

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
