"""CpuQueue: recorded commands run in order at submit, against a pure-Python reference of the same sequence."""

from __future__ import annotations

import random
import threading
from typing import List

import pytest
from conftest import needs_cc

from svod_min.devices.cpu.device import CpuDevice, CpuProgram
from svod_min.devices.cpu.queue import CpuQueue
from svod_min.error import ExecutionError
from svod_min.executor.unified import TimelineSignal

# buf[i] = buf[i] * mul + add, for i < n (n = the buffer's length)
AXPB_SRC = """
void axpb(int* restrict buf, const int n, const int mul, const int add) {
    for (int i = 0; i < n; i++) buf[i] = buf[i] * mul + add;
}
"""
N = 8


@pytest.fixture
def dev() -> CpuDevice:
    return CpuDevice(threads=2)


@pytest.fixture
def axpb(dev: CpuDevice) -> CpuProgram:
    return dev.compile(AXPB_SRC, "axpb", buf_count=1, var_names=("n", "mul", "add"))


def _ints(dev: CpuDevice, values: List[int]):
    return dev.allocate([len(values)], "int32").copyin(values)


def test_signal_is_set_at_submit_not_before() -> None:
    sig = TimelineSignal()
    queue = CpuQueue().signal(sig, 7)
    assert sig.value == 0 and len(queue) == 1
    assert queue.submit() == 1
    assert sig.value == 7 and len(queue) == 0


@needs_cc
def test_exec_runs_at_submit(dev: CpuDevice, axpb: CpuProgram) -> None:
    buf = _ints(dev, [1] * N)
    queue = CpuQueue().exec(axpb, [buf], [N, 2, 3])
    assert buf.tolist() == [1] * N  # recorded, not run
    queue.finish()
    assert buf.tolist() == [5] * N and queue.submitted == 1


@needs_cc
def test_random_sequences_match_the_python_reference(dev: CpuDevice, axpb: CpuProgram) -> None:
    rng = random.Random(11)
    for _ in range(20):
        model = [[rng.randrange(-50, 50) for _ in range(N)] for _ in range(3)]
        bufs = [_ints(dev, list(values)) for values in model]
        queue = CpuQueue()
        for _ in range(rng.randrange(1, 12)):
            if rng.random() < 0.6:
                k, mul, add = rng.randrange(3), rng.randrange(-3, 4), rng.randrange(-9, 10)
                queue.exec(axpb, [bufs[k]], [N, mul, add]).memory_barrier()
                model[k] = [v * mul + add for v in model[k]]
            else:
                dst, src = rng.sample(range(3), 2)
                queue.copy(bufs[dst], bufs[src])
                model[dst] = list(model[src])
        queue.submit()
        assert [b.tolist() for b in bufs] == model


@needs_cc
def test_recording_errors_are_reported_together_and_nothing_runs(dev: CpuDevice, axpb: CpuProgram) -> None:
    buf = _ints(dev, [1] * N)
    queue = CpuQueue().exec(axpb, [buf], [N, 2, 0])  # valid, but must not run
    queue.exec(axpb, [buf, buf], [N, 1, 1])  # two buffers for a one-buffer kernel
    queue.copy(buf, _ints(dev, [0] * (N + 1)))  # sizes differ
    queue.signal(TimelineSignal(), -1)
    with pytest.raises(ExecutionError) as info:
        queue.submit()
    message = str(info.value)
    assert message.count("; ") == 2
    assert "exec axpb" in message and "copy: size mismatch" in message and "signal: value" in message
    assert buf.tolist() == [1] * N and queue.submitted == 0
    assert len(queue) == 0 and queue.submit() == 0  # the failed submit emptied the queue


@needs_cc
def test_closed_program_is_a_recording_error(dev: CpuDevice, axpb: CpuProgram) -> None:
    buf = _ints(dev, [1] * N)
    axpb.close()
    with pytest.raises(ExecutionError, match="exec axpb: program axpb is closed"):
        CpuQueue().exec(axpb, [buf], [N, 1, 1]).submit()


def test_wait_blocks_until_another_thread_signals() -> None:
    gate, done = TimelineSignal(), TimelineSignal()
    queue = CpuQueue().wait(gate, 3).signal(done, 1)
    worker = threading.Thread(target=queue.submit)
    worker.start()
    assert not done.wait(1, timeout=0.05)  # the queue is parked on the gate
    gate.signal(3)
    worker.join(5)
    assert done.value == 1


def test_wait_timeout_stops_the_queue() -> None:
    done = TimelineSignal()
    queue = CpuQueue().wait(TimelineSignal(), 1, timeout=0.01).signal(done, 5)
    with pytest.raises(ExecutionError, match="timed out after 0.01s waiting for timeline value 1"):
        queue.submit()
    assert done.value == 0 and queue.submitted == 0
