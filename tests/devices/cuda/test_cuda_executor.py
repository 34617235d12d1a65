"""UnifiedExecutor on CUDA: event-backed timelines and transfers, against the stand-in driver.

The fake driver runs work at once, but ``fake_set_events_pending(n)`` keeps
the next ``n`` recorded events "not ready" until they are synchronized, so a
timeline that trusted anything but its events would show up here.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Tuple

import pytest
from support.cuda import FAKE_PTX, REAL_DRIVER, Fake, fake, fake_so, gpu_test  # noqa: F401

from svod_min.devices import cuda
from svod_min.devices.cpu.device import create_cpu_device
from svod_min.devices.registry import DeviceRegistry
from svod_min.error import BufferAllocationError, ExecutionError
from svod_min.executor.unified import DeviceContext, UnifiedExecutor

LONG = 10.0  # generous: only reached when something is broken
COUNTERS = ("stream_syncs", "event_records", "event_queries", "event_syncs", "live_events")


def _executor(f: Fake) -> UnifiedExecutor:
    registry = DeviceRegistry()
    registry.register_factory("CPU", lambda spec: create_cpu_device())
    assert cuda.register_cuda(registry, path=f.path)
    return UnifiedExecutor(registry)


def _counts(f: Fake) -> Dict[str, int]:
    return {name: f.counter(name) for name in COUNTERS}


def _delta(f: Fake, before: Dict[str, int]) -> Dict[str, int]:
    return {name: f.counter(name) - before[name] for name in COUNTERS}


def _pending(f: Fake, n: int) -> None:
    f.cfg.fake_set_events_pending(n)


def _iota(dev: cuda.CudaDevice, n: int) -> Tuple[cuda.CudaBuffer, Callable[[], None]]:
    """A buffer and a kernel launch writing 0..n-1 into it (queued on the stream)."""
    program = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    out = dev.allocate([n], "int32")
    return out, lambda: program.execute([out], [n])


def _ints(raw: bytes) -> Tuple[int, ...]:
    return struct.unpack("<%di" % (len(raw) // 4), raw)


# --- kernels: events, not host waits -----------------------------------------------------------


def test_kernel_returns_before_its_event_and_wait_for_syncs_it(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    ctx = ex.add_device("CUDA:0")
    assert ctx.event_backed and not ex.add_device("CPU").event_backed
    out, launch = _iota(ctx.device_handle, 8)
    before = _counts(f)
    _pending(f, 1)
    assert ex.execute_kernel("CUDA:0", launch) == 1
    assert _delta(f, before)["event_records"] == 1
    assert _delta(f, before)["stream_syncs"] == 0 and _delta(f, before)["event_syncs"] == 0  # no host wait
    assert ctx.current_value == 0 and ctx.last_reserved == 1  # the event has not completed
    with pytest.raises(ExecutionError, match=r"timed out after 0.05s waiting for CUDA:0 timeline value 1"):
        ctx.wait_for(1, timeout=0.05)
    polled = _delta(f, before)
    assert polled["event_queries"] >= 2 and polled["event_syncs"] == 0  # a timeout polls, never blocks
    ctx.wait_for(1)
    assert _delta(f, before)["event_syncs"] == 1 and ctx.current_value == 1
    assert _ints(out.copyout()) == tuple(range(8))


def test_completion_stays_in_order(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    ctx = ex.add_device("CUDA:0")
    _pending(f, 1)
    ex.execute_kernel("CUDA:0", lambda: None)  # 1: its event stays pending
    with pytest.raises(ExecutionError):
        ex.execute_kernel("CUDA:0", lambda: _raise(ValueError("two")))  # 2: failed, done at once
    ex.execute_kernel("CUDA:0", lambda: None)  # 3: its event is complete at once
    assert ctx.current_value == 0  # 2 and 3 are done, but 1 is not
    _pending(f, 1)
    ex.execute_kernel("CUDA:0", lambda: None)  # 4: pending
    ctx.wait_for(1)  # 1 itself succeeded
    assert ctx.current_value == 3  # 4 still pending
    with pytest.raises(ExecutionError, match=r"value\(s\) \[2\] failed: ValueError: two"):
        ctx.wait_for(3, timeout=0.01)
    with pytest.raises(ExecutionError, match="timeline value 4 "):
        ctx.wait_for(4, timeout=0.01)
    f.cfg.fake_complete_events()
    assert ctx.current_value == 4  # queried, not waited for
    assert list(ctx.failures) == [2]


def test_waiter_blocks_while_the_kernel_is_still_issued_on_the_host(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    ctx = ex.add_device("CUDA:0")
    release, results = threading.Event(), []  # type: ignore[var-annotated]

    def slow() -> None:
        assert release.wait(LONG)

    kernel = threading.Thread(target=lambda: results.append(ex.execute_kernel("CUDA:0", slow)))
    kernel.start()
    deadline = time.monotonic() + LONG
    while ctx.last_reserved < 1:
        assert time.monotonic() < deadline
        time.sleep(0.001)
    waiter = threading.Thread(target=lambda: results.append(ctx.wait_for(1, timeout=LONG)))
    waiter.start()
    waiter.join(0.05)
    assert waiter.is_alive()  # nothing recorded yet, so nothing to be done
    release.set()
    kernel.join(LONG)
    waiter.join(LONG)
    assert sorted(results, key=str) == [1, None] and ctx.current_value == 1


def test_failing_kernel_marks_its_value_failed_and_leaves_no_event(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    ctx = ex.add_device("CUDA:0")
    before = _counts(f)
    with pytest.raises(ExecutionError, match=r"kernel on CUDA:0 \(timeline value 1\) failed: ValueError: boom"):
        ex.execute_kernel("CUDA:0", lambda: _raise(ValueError("boom")))
    assert _delta(f, before)["event_records"] == 0 and _delta(f, before)["live_events"] == 0
    assert ctx.current_value == 1 and list(ctx.failures) == [1]
    with pytest.raises(ExecutionError, match=r"value\(s\) \[1\] failed: ValueError: boom"):
        ctx.wait_for(1, timeout=LONG)
    assert ex.execute_kernel("CUDA:0", lambda: None) == 2  # the timeline goes on
    with pytest.raises(ExecutionError, match="failed"):
        ex.synchronize_all(timeout=LONG)
    ctx.clear_failures()
    ex.synchronize_all(timeout=LONG)
    assert ctx.current_value == 2


def _raise(exc: BaseException) -> None:
    raise exc


def test_a_failing_event_fails_its_value_instead_of_hanging(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    ctx = ex.add_device("CUDA:0")
    ex.execute_kernel("CUDA:0", lambda: None)
    event = ctx._pending[1]  # white box: make the driver report a device fault for this event
    event.query = lambda: _raise(cuda.CudaError("cuEventQuery", 700, "CUDA_ERROR_ILLEGAL_ADDRESS", "bad"))
    with pytest.raises(ExecutionError, match=r"value\(s\) \[1\] failed: CudaError"):
        ctx.wait_for(1, timeout=LONG)
    assert ctx.current_value == 1


def test_event_pool_stays_small_over_many_ops(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    ctx = ex.add_device("CUDA:0")
    base = f.counter("live_events")
    for _ in range(300):
        ex.execute_kernel("CUDA:0", lambda: None)
    assert f.counter("live_events") - base <= 2  # completed events are reused, not created per op
    _pending(f, 10**6)  # now nothing completes unless waited for: recording must apply back-pressure
    for _ in range(300):
        ex.execute_kernel("CUDA:0", lambda: None)
    live = f.counter("live_events") - base
    assert 2 < live <= 40, live  # bounded by the in-flight limit, whatever the op count
    assert len(ctx._pending) < 40
    ex.synchronize_all(timeout=None)
    assert ctx.current_value == ctx.last_reserved == 600 and not ctx._pending
    assert f.counter("live_events") - base == live  # pooled, not leaked: nothing new was created


def test_synchronize_all_waits_for_cuda_events(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    ex = _executor(f)
    ctxs = [ex.add_device("CUDA:0"), ex.add_device("CUDA:1")]
    _pending(f, 4)
    for _ in range(2):
        ex.execute_kernel("CUDA:0", lambda: None)
        ex.execute_kernel("CUDA:1", lambda: None)
    assert [c.current_value for c in ctxs] == [0, 0]
    with pytest.raises(ExecutionError, match="timed out"):
        ex.synchronize_all(timeout=0.02)  # polls: fake pending events only complete when synchronized
    ex.synchronize_all()
    assert [c.current_value for c in ctxs] == [2, 2]


def test_executor_module_does_not_import_cuda() -> None:
    code = "import sys, svod_min.executor; sys.exit('svod_min.devices.cuda' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# --- transfers ---------------------------------------------------------------------------------


def _round_trip(ex: UnifiedExecutor, n: int, counters: Callable[[], Dict[str, int]]) -> Dict[str, Any]:
    """CPU -> CUDA:0 -> CUDA:0 -> CPU through the executor; per-hop counter deltas."""
    host = ex.add_device("CPU").device_handle.allocate([n], "float32")
    host.copyin([i * 0.5 - 7.0 for i in range(n)])
    gpu = ex.add_device("CUDA:0").device_handle
    a, b = gpu.allocate([n], "float32"), gpu.allocate([n], "float32")
    back = ex.add_device("CPU").device_handle.allocate([n], "float32")
    deltas: Dict[str, Any] = {}
    for name, (src, dst, sdev, ddev) in (
        ("h2d", (host, a, "CPU", "CUDA:0")),
        ("d2d", (a, b, "CUDA:0", "CUDA:0")),
        ("d2h", (b, back, "CUDA:0", "CPU")),
    ):
        before = counters()
        deltas[name + "_value"] = ex.execute_transfer(src, dst, sdev, ddev, timeout=LONG)
        deltas[name] = {k: counters()[k] - before[k] for k in before}
    deltas["equal"] = back.copyout() == host.copyout() and back.tolist() == host.tolist()
    return deltas


def test_round_trip_cpu_cuda_cuda_cpu(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    _pending(f, 0)
    out = _round_trip(ex, 4099, lambda: _counts(f))
    assert out["equal"]
    assert (out["h2d_value"], out["d2d_value"], out["d2h_value"]) == (1, 2, 1)
    for hop in ("h2d", "d2d"):  # queued on the stream with an event, no host wait
        assert out[hop]["stream_syncs"] == 0 and out[hop]["event_records"] >= 1, out
    assert out["d2h"]["stream_syncs"] >= 1  # copyout returns once the bytes landed
    cuda_ctx = ex.context("CUDA:0")
    assert cuda_ctx is not None
    ex.synchronize_all(timeout=LONG)
    assert cuda_ctx.current_value == 2 and ex.context("CPU").current_value == 1  # type: ignore[union-attr]


def test_device_to_host_waits_for_pending_device_values(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    ctx = ex.add_device("CUDA:0")
    out, launch = _iota(ctx.device_handle, 16)
    _pending(f, 1)
    ex.execute_kernel("CUDA:0", launch)
    back = ex.add_device("CPU").device_handle.allocate([16], "int32")
    before = _counts(f)
    ex.execute_transfer(out, back, "CUDA:0", "CPU")  # untimed: the source's event is synchronized
    assert _delta(f, before)["event_syncs"] == 1 and ctx.failures == {}
    assert _ints(back.copyout()) == tuple(range(16))
    assert ctx.current_value == 1


def test_transfer_from_a_failed_cuda_value_fails_the_destination(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    gpu = ex.add_device("CUDA:0").device_handle
    with pytest.raises(ExecutionError):
        ex.execute_kernel("CUDA:0", lambda: _raise(RuntimeError("kernel broke")))
    src = gpu.allocate(8)
    dst = ex.add_device("CPU").device_handle.allocate(8)
    dst.copyin(b"untouch!")
    with pytest.raises(ExecutionError, match="kernel broke"):
        ex.execute_transfer(src, dst, "CUDA:0", "CPU", timeout=LONG)
    assert dst.copyout() == b"untouch!"  # nothing moved
    with pytest.raises(ExecutionError, match="failed"):
        ex.context("CPU").wait_for(1, timeout=LONG)  # type: ignore[union-attr]


def test_peer_transfer_between_two_gpus(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    ex = _executor(f)
    c0, c1 = ex.add_device("CUDA:0"), ex.add_device("CUDA:1")
    src, launch = _iota(c0.device_handle, 32)
    dst = c1.device_handle.allocate([32], "int32")
    _pending(f, 1)
    ex.execute_kernel("CUDA:0", launch)
    before = _counts(f)
    assert ex.execute_transfer(src, dst, "CUDA:0", "CUDA:1") == 1
    assert _delta(f, before)["event_syncs"] == 1 and c0.current_value == 1  # the source was waited for
    assert f.counter("peer_enables") == 1
    c1.wait_for(1, timeout=LONG)
    assert _ints(dst.copyout()) == tuple(range(32))


def test_transfer_rejects_a_buffer_on_another_device(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    ex = _executor(f)
    c0, c1 = ex.add_device("CUDA:0"), ex.add_device("CUDA:1")
    a, b = c0.device_handle.allocate(16), c1.device_handle.allocate(16)
    with pytest.raises(ExecutionError, match="source buffer lives on CUDA:0, not on CUDA:1"):
        ex.execute_transfer(a, b, "CUDA:1", "CUDA:0")
    assert c0.last_reserved == c1.last_reserved == 0  # refused before reserving anything


def test_transfer_size_mismatch_before_anything_runs(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    gpu = f.device()
    host = create_cpu_device().allocate(16)
    small = gpu.allocate(8)
    memcpy = f.counter("memcpy")
    with pytest.raises(BufferAllocationError, match="16 bytes, destination 8 bytes"):
        ex.execute_transfer(host, small, "CPU", "CUDA:0")
    with pytest.raises(BufferAllocationError, match="8 bytes, destination 16 bytes"):
        ex.execute_transfer(small, host, "CUDA:0", "CPU")
    assert f.counter("memcpy") == memcpy and ex.devices() == []


def test_overlapping_same_device_transfer_is_staged(fake: Callable[..., Fake]) -> None:
    f = fake()
    ex = _executor(f)
    buf = ex.add_device("CUDA:0").device_handle.allocate(8)
    buf.copyin(bytes(range(8)))
    ex.execute_transfer(buf.view(0, 6), buf.view(2, 6), "CUDA:0", "CUDA:0")
    assert buf.copyout() == bytes([0, 1, 0, 1, 2, 3, 4, 5])  # memmove semantics, like the CPU


def test_context_without_events_refuses_record_event() -> None:
    ctx = DeviceContext("CPU")
    ctx.next_timeline()
    with pytest.raises(ExecutionError, match="no device events"):
        ctx.record_event(1)


# --- the real thing -------------------------------------------------------------------------------


@gpu_test
def test_gpu_executor_round_trip_and_events() -> None:
    assert REAL_DRIVER is not None
    registry = DeviceRegistry()
    registry.register_factory("CPU", lambda spec: create_cpu_device())
    assert cuda.register_cuda(registry)
    ex = UnifiedExecutor(registry)
    out = _round_trip(ex, (3 << 20) + 5, lambda: {})
    assert out["equal"]
    ctx = ex.add_device("CUDA:0")
    assert ctx.event_backed
    a = ctx.device_handle.allocate(64 << 20)
    b = ctx.device_handle.allocate(64 << 20)
    values = [ex.execute_kernel("CUDA:0", lambda: ctx.device_handle.copy(b, a)) for _ in range(100)]
    ctx.wait_for(values[-1], timeout=LONG)
    assert ctx.current_value == values[-1] == ctx.last_reserved
    ex.synchronize_all(timeout=LONG)
