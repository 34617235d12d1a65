"""svod_min.devices.cuda.memory: buffers, views, host and device copies, the pinned staging pool, peers."""

from __future__ import annotations

import ctypes
import gc
import struct
from typing import Callable, List

import pytest
from support.cuda import HAVE_GPU, REAL_DRIVER, Fake, fake, fake_so, gpu, gpu_test, int_values  # noqa: F401  (fixtures)

from svod_min.devices import cuda
from svod_min.devices.cuda import CudaError, StagingPool, memory
from svod_min.devices.registry import DeviceRegistry
from svod_min.error import BufferAllocationError, InvalidDeviceError, NotSupportedError

np = pytest.importorskip("numpy")


def test_fake_buffers_roundtrip_and_zero_fill(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    buf = dev.allocate((2, 3), "float32")
    assert buf.tolist() == [[0.0] * 3, [0.0] * 3]  # the fake's allocations start as 0xAB garbage
    assert (buf.shape, buf.nbytes, len(buf), buf.size, buf.byte_range()) == ((2, 3), 24, 6, 6, (0, 24))
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf.copyin(data)
    assert np.array_equal(buf.numpy(), data) and buf.numpy().shape == (2, 3)
    buf.copyin([9, 8, 7, 6, 5, 4])
    assert buf.tolist() == [[9, 8, 7], [6, 5, 4]]
    buf.copyin(struct.pack("6f", *range(6)))
    assert buf.copyout() == struct.pack("6f", *range(6))
    buf.copyin(bytearray(struct.pack("6f", *range(10, 16))))
    assert buf.tolist()[1] == [13.0, 14.0, 15.0]
    buf.copyin(memoryview(struct.pack("6f", *range(20, 26))))  # read-only memoryview
    assert buf.tolist()[0][0] == 20.0
    strided = np.arange(12, dtype=np.float32)[::2]
    buf.copyin(strided)
    assert np.array_equal(buf.numpy().ravel(), strided)
    out = np.zeros(6, np.float32)
    assert buf.copyout_into(out) is out and np.array_equal(out, strided)
    empty = dev.allocate(0)
    assert empty.copyout() == b"" and empty.copyin(b"") is empty


def test_fake_views_and_cpu_buffers(fake: Callable[..., Fake]) -> None:
    from svod_min.devices.cpu.device import create_cpu_device

    dev = fake().device()
    buf = dev.allocate([8], "int32")
    buf.copyin(list(range(8)))
    view = buf.view(8, 16, shape=(2, 2))
    assert view.storage is buf.storage and view.address == buf.address + 8 and view.byte_range() == (8, 24)
    assert view.tolist() == [[2, 3], [4, 5]]
    view.copyin([-1, -2, -3, -4])
    assert int_values(buf) == [0, 1, -1, -2, -3, -4, 6, 7]
    host = create_cpu_device().allocate([8], "int32")
    buf.copyout_into(host)
    assert host.tolist() == [0, 1, -1, -2, -3, -4, 6, 7]
    host.copyin(list(range(100, 108)))
    buf.copyin(host)
    assert int_values(buf)[0] == 100
    with pytest.raises(BufferAllocationError, match="out of range"):
        buf.view(24, 16)
    with pytest.raises(BufferAllocationError, match="copyin size mismatch"):
        buf.copyin(b"\0" * 4)
    with pytest.raises(BufferAllocationError, match="copyout size mismatch"):
        buf.copyout_into(bytearray(4))
    with pytest.raises(BufferAllocationError, match="does not match buffer dtype"):
        buf.copyin(np.zeros(4, np.float64))
    with pytest.raises(BufferAllocationError, match="writable"):
        buf.copyout_into(b"\0" * 32)
    with pytest.raises(NotSupportedError, match="no numpy dtype"):
        dev.allocate([2], "bfloat16").numpy()


def test_fake_large_copies_go_through_the_pinned_pool(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    dev.staging = StagingPool(dev, chunk=4096, direct_max=1024)
    data = np.random.default_rng(0).integers(0, 255, 3 * 4096 + 123, dtype=np.uint8)
    buf = dev.allocate(data.nbytes)
    buf.copyin(data)
    assert f.counter("live_host") == 2  # two pinned blocks, used in turn
    assert buf.copyout() == data.tobytes()
    small = dev.allocate(100)
    small.copyin(data[:100])
    assert small.copyout() == data[:100].tobytes()
    assert f.counter("live_host") == 2
    dev.staging.release()
    gc.collect()
    assert f.counter("live_host") == 0


def test_fake_staged_copies_split_across_host_threads(
    fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = fake()
    dev = f.device()
    dev.staging = StagingPool(dev, chunk=5 << 20, direct_max=1024, threads=3)
    pieces: List[int] = []
    real = ctypes.memmove
    monkeypatch.setattr(memory.ctypes, "memmove", lambda d, s, n: (pieces.append(n), real(d, s, n))[1])
    data = np.random.default_rng(1).integers(0, 255, (12 << 20) + 7, dtype=np.uint8)
    buf = dev.allocate(data.nbytes)
    buf.copyin(data)
    # chunks of 5, 5 and 2 MiB + 7 bytes: split 3, 3 and 2 ways (a piece is never below 1 MiB)
    assert len(pieces) == 8 and sum(pieces) == data.nbytes and min(pieces) >= 1 << 20 and max(pieces) < 2 << 20
    del pieces[:]
    out = np.empty_like(data)
    buf.copyout_into(out)  # device -> host through the same split memcpy
    assert np.array_equal(out, data) and len(pieces) == 8
    dev.staging.release()
    monkeypatch.setenv("SVOD_CUDA_COPY_THREADS", "x")
    with pytest.raises(InvalidDeviceError, match="SVOD_CUDA_COPY_THREADS='x'"):
        StagingPool(dev)
    monkeypatch.setenv("SVOD_CUDA_COPY_THREADS", "4")
    assert StagingPool(dev).threads == 4


def test_fake_device_to_device_and_peer_copies(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    a, b = dev0.allocate([4], "int32"), dev0.allocate([4], "int32")
    a.copyin([1, 2, 3, 4])
    b.copyin(a)  # same device: DtoD
    assert int_values(b) == [1, 2, 3, 4]
    c = dev1.allocate([4], "int32")
    dev1.copy_from_peer(c, a)  # other device
    assert int_values(c) == [1, 2, 3, 4]
    assert f.counter("peer_enables") == 1
    dev1.copy_from_peer(c, b)
    assert f.counter("peer_enables") == 1  # remembered
    assert dev0.enable_peer_access(dev1) is True
    a.copyin([9, 8, 7, 6])  # still queued on CUDA:0's stream (the stand-in runs it only when waited for)
    dev1.copy_from_peer(c, a)  # so the peer copy must wait for CUDA:0
    assert int_values(c) == [9, 8, 7, 6]
    dev1.copy_from_peer(c, [5, 6, 7, 8])  # host data: staged
    assert int_values(c) == [5, 6, 7, 8]


def test_fake_allocation_failure_and_leaks(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    before = f.counter("live_dev")
    bufs = [dev.allocate(64) for _ in range(3)]
    view = bufs[0].view(8, 8)
    assert f.counter("live_dev") == before + 3
    del bufs
    gc.collect()
    assert f.counter("live_dev") == before + 1  # the view keeps its storage alive
    del view
    gc.collect()
    assert f.counter("live_dev") == before
    f.cfg.fake_set_mem_limit(1024)
    with pytest.raises(BufferAllocationError, match="CUDA_ERROR_OUT_OF_MEMORY") as info:
        dev.allocate(4096)
    assert isinstance(info.value.__cause__, CudaError)


def test_copy_buffer_crosses_devices(fake: Callable[..., Fake]) -> None:
    from svod_min.devices.registry import DEVICE_FACTORIES
    from svod_min.plan.execution_plan import copy_buffer

    dev = fake().device()
    host = DEVICE_FACTORIES.device("CPU")
    a, b = host.allocate([8], "int32"), host.allocate([8], "int32")
    g = dev.allocate([8], "int32")
    a.copyin(np.arange(8, dtype=np.int32))
    copy_buffer(g, a)  # host -> device
    copy_buffer(b, g)  # device -> host
    assert np.array_equal(b.numpy(), np.arange(8, dtype=np.int32))


@gpu_test
@pytest.mark.parametrize("nbytes", [1, 1000, 300 << 10, (20 << 20) + 12])
def test_gpu_transfers_both_ways(gpu: cuda.CudaDevice, nbytes: int) -> None:
    data = np.random.default_rng(nbytes).integers(0, 255, nbytes, dtype=np.uint8)
    buf = gpu.allocate(nbytes)
    assert buf.copyout() == bytes(nbytes)  # zero-filled
    buf.copyin(data)
    assert buf.copyout() == data.tobytes()
    other = gpu.allocate(nbytes)
    other.copyin(buf)  # device to device
    out = np.empty(nbytes, np.uint8)
    other.copyout_into(out)
    assert np.array_equal(out, data)
    if nbytes >= 16:
        view = buf.view(8, 8)
        view.copyin(b"\x01" * 8)
        assert buf.copyout()[:16] == data[:8].tobytes() + b"\x01" * 8


@gpu_test
def test_gpu_cpu_transfers_through_the_executor(gpu: cuda.CudaDevice) -> None:
    from svod_min.devices.cpu.device import create_cpu_device
    from svod_min.executor.unified import UnifiedExecutor

    registry = DeviceRegistry()
    assert cuda.register_cuda(registry)
    registry.register_factory("CPU", lambda spec: create_cpu_device())
    ex = UnifiedExecutor(registry)
    host = create_cpu_device().allocate([1000], "float32")
    host.copyin(list(range(1000)))
    dev_buf = gpu.allocate([1000], "float32")
    ex.execute_transfer(host, dev_buf, "CPU", "CUDA:0")
    back = create_cpu_device().allocate([1000], "float32")
    ex.execute_transfer(dev_buf, back, "CUDA:0", "CPU")
    assert back.tolist() == host.tolist()


@gpu_test
@pytest.mark.skipif(HAVE_GPU and REAL_DRIVER.device_count < 2, reason="needs two GPUs")  # type: ignore[union-attr]
def test_gpu_peer_copy() -> None:
    assert REAL_DRIVER is not None
    dev0, dev1 = REAL_DRIVER.device(0), REAL_DRIVER.device(1)
    a, b = dev0.allocate([1000], "float32"), dev1.allocate([1000], "float32")
    a.copyin(np.arange(1000, dtype=np.float32))
    b.copyin(a)
    assert np.array_equal(b.numpy(), np.arange(1000, dtype=np.float32))


def test_fake_staging_blocks_grow_with_the_chunk(fake: Callable[..., Fake]) -> None:
    """Enlarging ``StagingPool.chunk`` after the pool made its blocks must not push whole chunks through
    the smaller blocks (a heap overflow in pinned memory): they are made again, large enough."""
    f = fake()
    dev = f.device()
    dev.staging.chunk = 4096
    data = np.arange(4096, dtype=np.uint8)
    buf = dev.allocate(4096).copyin(data)
    assert [b.nbytes for b in dev.staging.blocks()] == [4096, 4096]
    dev.staging.chunk = 16384
    big = np.arange(16384, dtype=np.uint32).view(np.uint8)[:16384]
    wide = dev.allocate(16384).copyin(big)
    assert all(b.nbytes >= 16384 for b in dev.staging.blocks())
    assert np.array_equal(np.frombuffer(wide.copyout(), np.uint8), big)
    assert np.array_equal(np.frombuffer(buf.copyout(), np.uint8), data)
    assert f.counter("live_host") == 2  # the two small blocks were freed


def test_fake_elapsed_time_makes_the_events_context_current(fake: Callable[..., Fake]) -> None:
    """The driver wants an event's context current for cuEventElapsedTime as for the other event calls;
    the thread may have used another GPU since the events were recorded."""
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    start, end = dev0.new_event(), dev0.new_event()
    start.record()
    end.record()
    end.synchronize()
    dev1.allocate(16)  # the thread's current context is GPU 1's now
    assert end.elapsed_since(start) == pytest.approx(0.25e-3)  # the stand-in's clock: 0.25 ms per record
    untimed = dev0.new_event(timing=False)
    untimed.record()
    untimed.synchronize()
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_HANDLE"):
        untimed.elapsed_since(start)
