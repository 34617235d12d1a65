"""Unified executor: devices, kernels on timelines, transfers (host, staged, peer), synchronize_all."""

from __future__ import annotations

import functools
import threading
from typing import Any, List, Tuple

import pytest
from support.executor import LONG, SHORT, start_thread, wait_until

from svod_min.devices.registry import DEVICE_FACTORIES, DeviceRegistry, DeviceSpec
from svod_min.error import BufferAllocationError, ExecutionError, UnsupportedDeviceError
from svod_min.executor.unified import UnifiedExecutor, global_executor

# --- fakes for non-CPU devices (no GPU needed) ----------------------------------------


class FakeDevice:
    queues_work = False  # device interface slot: its copies finish when the call returns

    def __init__(self, spec: DeviceSpec, peer: bool = False) -> None:
        self.spec = spec
        self.peer_copies: List[Tuple[Any, Any]] = []
        self.synced = 0
        if peer:
            self.copy_from_peer = self._copy_from_peer

    def _copy_from_peer(self, dst: "FakeBuffer", src: "FakeBuffer") -> None:
        self.peer_copies.append((dst, src))
        dst.data[:] = src.data

    def synchronize(self) -> None:
        self.synced += 1


class FakeBuffer:
    """A device buffer as the executor sees it (base.Buffer): not host memory, copies itself."""

    on_host = False

    def __init__(self, device: Any, data: bytes) -> None:
        self.device = device
        self.data = bytearray(data)

    @property
    def nbytes(self) -> int:
        return len(self.data)

    def copyout(self) -> bytes:
        return bytes(self.data)

    def copyin(self, data: Any) -> None:
        """Bytes, or another buffer: a peer copy when this device has one (as CudaBuffer.copyin), else staged."""
        if isinstance(data, FakeBuffer):
            peer = getattr(self.device, "copy_from_peer", None)
            if peer is not None and data.device is not self.device:
                peer(self, data)
                return
            data = data.copyout()
        assert len(data) == len(self.data)
        self.data[:] = data


@pytest.fixture
def fake_registry() -> DeviceRegistry:
    reg = DeviceRegistry()
    reg.register_factory("CPU", lambda spec: FakeDevice(spec))
    reg.register_factory("CUDA", lambda spec: FakeDevice(spec, peer=True))
    return reg


# --- executor: kernels -------------------------------------------------------------------------


def test_add_device_is_idempotent_and_parses_strings() -> None:
    ex = UnifiedExecutor()
    ctx = ex.add_device("cpu")
    assert ex.add_device(DeviceSpec("CPU")) is ctx
    assert ex.context("CPU") is ctx
    assert ctx.device_handle is DEVICE_FACTORIES.device("CPU")
    assert ex.devices() == [DeviceSpec("CPU")]
    assert ex.context("CUDA:3") is None
    with pytest.raises(UnsupportedDeviceError):
        ex.add_device("METAL")


def test_execute_kernel_returns_increasing_values() -> None:
    ex = UnifiedExecutor()
    ran: List[int] = []
    values = [ex.execute_kernel("CPU", functools.partial(ran.append, i)) for i in range(5)]
    assert values == [1, 2, 3, 4, 5]
    assert ran == [0, 1, 2, 3, 4]
    assert ex.context("CPU").current_value == 5  # type: ignore[union-attr]


def test_concurrent_kernels_get_unique_values() -> None:
    ex = UnifiedExecutor()
    ex.add_device("CPU")
    values: List[int] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(50):
            v = ex.execute_kernel("CPU", lambda: None)
            with lock:
                values.append(v)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LONG)
    assert sorted(values) == list(range(1, 401))
    ex.synchronize_all(timeout=LONG)
    assert ex.context("CPU").current_value == 400  # type: ignore[union-attr]


def test_failing_kernel_raises_and_waiter_gets_error() -> None:
    ex = UnifiedExecutor()
    ctx = ex.add_device("CPU")
    release = threading.Event()

    def bad() -> None:
        assert release.wait(LONG)
        raise ValueError("boom")

    kernel, kernel_out = start_thread(lambda: ex.execute_kernel("CPU", bad))
    wait_until(lambda: ctx.last_reserved >= 1)  # the kernel thread has reserved value 1
    waiter, waiter_out = start_thread(lambda: ctx.wait_for(1, timeout=LONG))
    assert not ctx.signal.wait(1, timeout=SHORT)  # kernel still running; waiter blocked
    release.set()
    kernel.join(LONG)
    waiter.join(LONG)
    assert isinstance(kernel_out[0], ExecutionError) and "boom" in str(kernel_out[0])
    assert isinstance(kernel_out[0].__cause__, ValueError)
    assert isinstance(waiter_out[0], ExecutionError), waiter_out
    assert "value(s) [1] failed" in str(waiter_out[0]) and "boom" in str(waiter_out[0])
    # Later ops still run; the failure stays visible until acknowledged.
    assert ex.execute_kernel("CPU", lambda: None) == 2
    with pytest.raises(ExecutionError, match="failed"):
        ex.synchronize_all(timeout=LONG)
    assert list(ctx.clear_failures()) == [1]
    ex.synchronize_all(timeout=LONG)


def test_svod_errors_pass_through_unwrapped() -> None:
    ex = UnifiedExecutor()

    def bad() -> None:
        raise BufferAllocationError("too big")

    with pytest.raises(BufferAllocationError, match="too big"):
        ex.execute_kernel("CPU", bad)


# --- executor: transfers ---------------------------------------------------------------------


def test_transfer_cpu_to_cpu_copies_bytes() -> None:
    ex = UnifiedExecutor()
    cpu = DEVICE_FACTORIES.device("CPU")
    src = cpu.allocate(16)
    dst = cpu.allocate(16)
    payload = bytes(range(100, 116))
    src.copyin(payload)
    value = ex.execute_transfer(src, dst, "CPU", "CPU")
    assert value == 1
    assert dst.copyout() == payload
    assert src.copyout() == payload


def test_transfer_between_overlapping_views() -> None:
    ex = UnifiedExecutor()
    buf = DEVICE_FACTORIES.device("CPU").allocate(8)
    buf.copyin(bytes(range(8)))
    ex.execute_transfer(buf.view(0, 6), buf.view(2, 6), "CPU", "CPU")  # memmove semantics
    assert buf.copyout() == bytes([0, 1, 0, 1, 2, 3, 4, 5])


def test_transfer_rejects_size_mismatch() -> None:
    ex = UnifiedExecutor()
    cpu = DEVICE_FACTORIES.device("CPU")
    with pytest.raises(BufferAllocationError, match="16 bytes.*8 bytes"):
        ex.execute_transfer(cpu.allocate(16), cpu.allocate(8), "CPU", "CPU")
    assert ex.devices() == []  # rejected before touching any timeline


def test_staged_transfer_waits_for_source(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    gpu = ex.add_device("CUDA:0").device_handle
    cpu = ex.add_device("CPU").device_handle
    src, dst = FakeBuffer(gpu, b"\0" * 4), FakeBuffer(cpu, b"\0" * 4)
    release = threading.Event()

    def produce() -> None:
        assert release.wait(LONG)
        src.data[:] = b"done"

    kernel, _ = start_thread(lambda: ex.execute_kernel("CUDA:0", produce))
    wait_until(lambda: ex.context("CUDA:0").last_reserved >= 1)  # type: ignore[union-attr]
    copy, copy_out = start_thread(lambda: ex.execute_transfer(src, dst, "CUDA:0", "CPU", timeout=LONG))
    assert not ex.context("CPU").signal.wait(1, timeout=SHORT)  # type: ignore[union-attr]
    release.set()
    kernel.join(LONG)
    copy.join(LONG)
    assert copy_out == [1]
    assert bytes(dst.data) == b"done"  # the copy saw the kernel's write
    assert cpu.synced >= 1  # destination synchronised before the value was signalled


def test_staged_transfer_from_failed_source_raises(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    gpu = ex.add_device("CUDA:0").device_handle
    cpu = ex.add_device("CPU").device_handle
    with pytest.raises(ExecutionError):
        ex.execute_kernel("CUDA:0", lambda: 1 / 0)
    src, dst = FakeBuffer(gpu, b"abcd"), FakeBuffer(cpu, b"\0" * 4)
    with pytest.raises(ExecutionError, match="CUDA:0.*failed"):
        ex.execute_transfer(src, dst, "CUDA:0", "CPU", timeout=LONG)
    assert bytes(dst.data) == b"\0" * 4
    with pytest.raises(ExecutionError):  # the destination's value is marked failed too
        ex.context("CPU").wait_for(1, timeout=LONG)  # type: ignore[union-attr]


def test_peer_transfer_uses_copy_from_peer(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    g0 = ex.add_device("CUDA:0").device_handle
    g1 = ex.add_device("CUDA:1").device_handle
    src, dst = FakeBuffer(g0, b"peer"), FakeBuffer(g1, b"\0" * 4)
    assert ex.execute_transfer(src, dst, "CUDA:0", "CUDA:1") == 1
    assert bytes(dst.data) == b"peer"
    assert g1.peer_copies == [(dst, src)]


def test_same_device_non_cpu_transfer_never_memmoves(fake_registry: DeviceRegistry) -> None:
    ex = UnifiedExecutor(fake_registry)
    gpu = ex.add_device("CUDA:0").device_handle
    src, dst = FakeBuffer(gpu, b"same"), FakeBuffer(gpu, b"\0" * 4)
    src.address = dst.address = 0  # type: ignore[attr-defined]  # a device pointer, not a host one
    assert ex.execute_transfer(src, dst, "CUDA:0", "CUDA:0") == 1
    assert bytes(dst.data) == b"same"


def test_peer_transfer_without_peer_copy_is_staged() -> None:
    reg = DeviceRegistry()
    reg.register_factory("CUDA", lambda spec: FakeDevice(spec, peer=False))
    ex = UnifiedExecutor(reg)
    src = FakeBuffer(ex.add_device("CUDA:0").device_handle, b"host")
    dst = FakeBuffer(ex.add_device("CUDA:1").device_handle, b"\0" * 4)
    ex.execute_transfer(src, dst, "CUDA:0", "CUDA:1")
    assert bytes(dst.data) == b"host"


# --- executor: misc ----------------------------------------------------------------------------


def test_single_device_check(fake_registry: DeviceRegistry) -> None:
    cpu = DEVICE_FACTORIES.device("CPU")
    a, b = cpu.allocate(4), cpu.allocate(8)
    assert UnifiedExecutor.single_device_check([a, b]) == DeviceSpec("CPU")
    gpu = FakeBuffer(FakeDevice(DeviceSpec("CUDA", 1)), b"x")
    assert UnifiedExecutor.single_device_check([a, gpu]) is None
    assert UnifiedExecutor.single_device_check([gpu]) == DeviceSpec("CUDA", 1)
    spec_only = FakeBuffer(DeviceSpec("CUDA", 1), b"x")  # .device is a DeviceSpec
    assert UnifiedExecutor.single_device_check([gpu, spec_only]) == DeviceSpec("CUDA", 1)
    assert UnifiedExecutor.single_device_check([FakeBuffer(None, b"x")]) is None
    assert UnifiedExecutor.single_device_check([]) is None


def test_synchronize_all_returns_and_times_out() -> None:
    ex = UnifiedExecutor()
    ex.synchronize_all()  # nothing added
    ex.execute_kernel("CPU", lambda: None)
    ex.synchronize_all(timeout=LONG)
    ctx = ex.context("CPU")
    assert ctx is not None
    pending = ctx.next_timeline()  # reserved, never completed
    with pytest.raises(ExecutionError, match=r"timed out.*CPU timeline value %d" % pending):
        ex.synchronize_all(timeout=0.01)
    ctx.signal_completion(pending)
    ex.synchronize_all(timeout=LONG)


def test_global_executor_is_a_singleton() -> None:
    assert global_executor() is global_executor()
    assert global_executor().registry is DEVICE_FACTORIES


# --- regressions from the 2026-11-24 review -------------------------------------------------------


def test_transfers_refuse_non_buffers_and_buffers_named_with_the_wrong_device() -> None:
    from svod_min.devices.cpu.device import CpuDevice
    from svod_min.devices.registry import DeviceSpec
    from svod_min.executor.unified import UnifiedExecutor

    dev = CpuDevice(threads=1)
    host = dev.allocate(16)

    class DeviceBuffer:  # what a CUDA buffer looks like to the executor: its device and a device pointer
        nbytes = 16
        address = 0x10  # never a host address: a memmove from it would read garbage or crash
        device = DeviceSpec.parse("CUDA:0")

    ex = UnifiedExecutor()
    with pytest.raises(ExecutionError, match="transfer source buffer lives on CUDA:0, not on CPU"):
        ex.execute_transfer(DeviceBuffer(), host, "CPU", "CPU")
    with pytest.raises(ExecutionError, match="transfer source must be a device buffer, got bytes"):
        ex.execute_transfer(b"abc", host, "CPU", "CPU")
    assert ex.context("CPU").last_reserved == 0  # refused before a value was reserved


def test_executor_module_keeps_every_name_it_had() -> None:
    """The split moved classes to device_context/execution_graph; ``svod_min.executor.X`` still works."""
    import svod_min.executor.device_context as device_context
    import svod_min.executor.graph as execution_graph
    import svod_min.executor.unified as executor

    moved = {
        device_context: ("U64_MAX", "DeviceContext", "TimelineSignal"),
        execution_graph: ("ExecutionGraph", "ExecutionNode", "KernelBufferAccess", "SyncStrategy"),
    }
    for module, names in moved.items():
        for name in names:
            assert getattr(executor, name) is getattr(module, name), name
    assert set(executor.__all__) >= {"UnifiedExecutor", "global_executor"} | {
        n for names in moved.values() for n in names
    }
