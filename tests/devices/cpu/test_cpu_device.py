"""The CPU device (devices/cpu.py): threads, its pool, the memoised devices, and the device
interface's slots (graph, host_pool, new_event, synchronize, close)."""

from __future__ import annotations

import threading

import pytest

from svod_min.devices.cpu import device as cpu
from svod_min.devices.cpu.device import CpuDevice, create_cpu_device
from svod_min.error import ExecutionError

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


# --- the device interface's slots --------------------------------------------------------------------


def test_cpu_device_has_no_graph_runtime_and_a_host_event_timer() -> None:
    dev = CpuDevice(threads=2)
    assert dev.graph is None
    start, end = dev.new_event(), dev.new_event()
    with pytest.raises(ExecutionError, match="two recorded events"):
        end.elapsed_since(start)
    start.record()
    end.record()
    end.synchronize()
    assert end.elapsed_since(start) >= 0.0


def test_host_pool_is_none_with_one_thread_or_on_a_worker() -> None:
    assert CpuDevice(threads=1).host_pool() is None
    dev = CpuDevice(threads=2)
    pool = dev.host_pool()
    assert pool is dev.pool
    assert pool.submit(dev.host_pool).result() is None  # waiting on the pool from its own worker could deadlock


def test_close_shuts_the_pool_down_and_a_later_use_starts_a_new_one() -> None:
    dev = CpuDevice(threads=2)
    pool = dev.pool
    dev.close()
    with pytest.raises(RuntimeError):
        pool.submit(int)
    assert dev.pool is not pool and dev.pool.submit(int, "3").result() == 3
    dev.close()
    dev.close()  # idempotent
