"""The native runner's worker pool: kept across replays, shared by replays from several Python
threads (one owns it, the others run serially) and rebuilt in a child after fork()."""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import List

import pytest
from conftest import needs_cc
from support.dispatch import WAIT_ENTRY, WAIT_SRC, all_ids_ran

from svod_min.devices.cpu.device import create_cpu_device
from svod_min.plan import native_replay

pytestmark = needs_cc

IDS = 24
KERNELS = 6

MARK_SRC = """
void mark(int* restrict out, const int step, const int core_id) {
    volatile int spin = 0;
    for (int i = 0; i < 2000; ++i) spin += i;  /* long enough for the other thread to claim ids too */
    out[core_id] += (core_id + 1) * step;
}
"""


def _table(dev, prog, out) -> native_replay.ReplayTable:
    """KERNELS threaded kernels, kernel k adding (id + 1) * (k + 1) to out[id] for IDS ids."""
    table = native_replay.ReplayTable()
    for k in range(KERNELS):
        table.add(prog.address, [out.address, k + 1, 0], ncalls=IDS, core_pos=2, threads=2)
    return table


def _expected(replays: int) -> List[int]:
    steps = sum(range(1, KERNELS + 1))
    return [replays * (i + 1) * steps for i in range(IDS)]


def _program():
    dev = create_cpu_device()
    return dev, dev.compile(MARK_SRC, "mark", buf_count=1, var_names=["step", "core_id"])


def test_every_id_runs_once_per_replay_on_the_pool() -> None:
    dev, prog = _program()
    out = dev.allocate([IDS], "int32").copyin([0] * IDS)
    bound = _table(dev, prog, out).bind(2)
    for _ in range(20):
        assert bound() == KERNELS
    assert out.tolist() == _expected(20)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_workers_are_kept_not_started_per_replay() -> None:
    dev, prog = _program()
    out = dev.allocate([IDS], "int32").copyin([0] * IDS)
    bound = _table(dev, prog, out).bind(2)
    bound()
    before = len(os.listdir("/proc/self/task"))
    for _ in range(30):
        bound()
    assert len(os.listdir("/proc/self/task")) == before
    assert out.tolist() == _expected(31)


def test_a_worker_asleep_after_a_long_serial_kernel_is_woken_for_the_next() -> None:
    dev, prog = _program()
    nap = dev.compile("extern int usleep(unsigned); void nap(int* o) { usleep(20000); o[0] += 1; }", "nap", buf_count=1)
    wait = dev.compile(WAIT_SRC, WAIT_ENTRY, buf_count=1, var_names=["n", "core_id"])
    out = dev.allocate([IDS], "int32").copyin([0] * IDS)
    napped = dev.allocate([1], "int32").copyin([0])
    n = 8
    flags = dev.allocate([n + 1], "int32").copyin([0] * (n + 1))
    table = native_replay.ReplayTable()
    table.add(prog.address, [out.address, 1, 0], ncalls=IDS, core_pos=2, threads=2)  # the worker polls ...
    table.add(nap.address, [napped.address])  # ... and sleeps through 20 ms of one serial kernel
    table.add(wait.address, [flags.address, n, 0], ncalls=n, core_pos=2, threads=2)  # id 0 waits for the rest
    assert table.run(2) == 3
    assert napped.tolist() == [1]
    assert flags.tolist() == all_ids_ran(n), "the sleeping worker was not woken for the last kernel"


def test_replays_from_two_python_threads_at_once_stay_exact() -> None:
    dev, prog = _program()
    outs = [dev.allocate([IDS], "int32").copyin([0] * IDS) for _ in range(2)]
    tables = [_table(dev, prog, out).bind(2) for out in outs]
    replays = 40
    errors: List[BaseException] = []

    def run(bound) -> None:
        try:
            for _ in range(replays):
                bound()
        except BaseException as exc:  # reported below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(t,)) for t in tables]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a replay hung"
    assert not errors
    for out in outs:
        assert out.tolist() == _expected(replays)


@pytest.mark.skipif(not hasattr(os, "fork") or sys.platform != "linux", reason="fork() on Linux")
def test_a_forked_child_replays_on_a_pool_of_its_own() -> None:
    dev, prog = _program()
    out = dev.allocate([IDS], "int32").copyin([0] * IDS)
    bound = _table(dev, prog, out).bind(2)
    bound()  # the parent's workers exist; the child inherits none of them
    pid = os.fork()
    if pid == 0:  # the child: a hang ends in SIGALRM, a wrong sum in exit status 1, an exception in 3
        code = 3
        try:
            signal.alarm(60)
            code = _child_replays(bound, out)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status), "child status %#x (a hang ends in SIGALRM)" % status
    assert os.WEXITSTATUS(status) != 1, "the child's replays gave wrong sums"
    assert os.WEXITSTATUS(status) != 3, "the child raised"
    assert os.WEXITSTATUS(status) == 0, "the child replayed without a worker of its own"
    assert out.tolist() == _expected(1)


def _child_replays(bound, out) -> int:
    """In a forked child: 0 when its replays are exact and, where /proc shows threads, started one worker."""
    tasks = "/proc/self/task"
    before = len(os.listdir(tasks)) if os.path.isdir(tasks) else None  # fork() left none of the parent's workers
    if not (all(bound() == KERNELS for _ in range(5)) and out.tolist() == _expected(6)):
        return 1
    if before is not None and len(os.listdir(tasks)) - before != 1:
        return 2
    return 0
