"""DeviceSpec parsing and the DeviceRegistry cache (svod's DEVICE_FACTORIES)."""

from __future__ import annotations

import ctypes.util
import threading
import time

import pytest

from svod_min.devices import registry as reg
from svod_min.devices.registry import DEVICE_FACTORIES, DeviceRegistry, DeviceSpec
from svod_min.error import DeviceError, InvalidDeviceError, SvodError, UnsupportedDeviceError, VariableBoundsError

# --- parsing -------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, kind, index, path, canonical",
    [
        ("CPU", "CPU", 0, None, "CPU"),
        ("cpu", "CPU", 0, None, "CPU"),
        ("  Cpu\n", "CPU", 0, None, "CPU"),
        ("CPU:0", "CPU", 0, None, "CPU"),
        ("CUDA", "CUDA", 0, None, "CUDA:0"),
        ("cuda:3", "CUDA", 3, None, "CUDA:3"),
        ("GPU", "CUDA", 0, None, "CUDA:0"),
        ("gpu:2", "CUDA", 2, None, "CUDA:2"),
        ("Metal", "METAL", 0, None, "METAL:0"),
        ("METAL:1", "METAL", 1, None, "METAL:1"),
        ("webgpu", "WEBGPU", 0, None, "WEBGPU"),
        ("AMD:0", "AMD", 0, None, "AMD:0"),
        ("amd:7", "AMD", 7, None, "AMD:7"),
        ("AMD", "AMD", 0, None, "AMD:0"),
        ("DISK:/Tmp/MixedCase.bin", "DISK", 0, "/Tmp/MixedCase.bin", "DISK:/Tmp/MixedCase.bin"),
        ("disk:relative/Path", "DISK", 0, "relative/Path", "DISK:relative/Path"),
        ("DISK:C:/Win Path", "DISK", 0, "C:/Win Path", "DISK:C:/Win Path"),
        (" cuda : 1 ", "CUDA", 1, None, "CUDA:1"),
    ],
)
def test_parse_valid(text: str, kind: str, index: int, path: object, canonical: str) -> None:
    spec = DeviceSpec.parse(text)
    assert (spec.kind, spec.index, spec.path) == (kind, index, path)
    assert str(spec) == canonical
    assert DeviceSpec.parse(str(spec)) == spec  # canonical form round-trips


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "TPU",
        "CUDA:",
        "CUDA:-1",
        "CUDA:x",
        "CUDA:1.5",
        "CUDA:+1",
        "CUDA:1:2",
        "GPU:0x1",
        "METAL:²",
        "CPU:1",
        "WEBGPU:3",
        "DISK:",
        "AMD:99999999999",
        ":0",
    ],
)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(InvalidDeviceError) as info:
        DeviceSpec.parse(text)
    assert repr(text) in str(info.value)  # the message names the input
    assert isinstance(info.value, (DeviceError, ValueError))


def test_parse_rejects_non_string() -> None:
    with pytest.raises(InvalidDeviceError):
        DeviceSpec.parse(3)  # type: ignore[arg-type]


def test_gpu_alias_is_the_same_spec() -> None:
    assert DeviceSpec.parse("GPU:1") == DeviceSpec.parse("cuda:1") == DeviceSpec("gpu", 1)
    assert hash(DeviceSpec.parse("gpu")) == hash(DeviceSpec("CUDA"))


def test_disk_path_keeps_case_and_distinct_paths_differ() -> None:
    a, b = DeviceSpec.parse("disk:/A/b"), DeviceSpec.parse("DISK:/a/B")
    assert a.path == "/A/b" and b.path == "/a/B" and a != b


def test_spec_is_frozen_and_validates_index() -> None:
    spec = DeviceSpec("CPU")
    with pytest.raises(Exception):
        spec.kind = "CUDA"  # type: ignore[misc]
    with pytest.raises(InvalidDeviceError):
        DeviceSpec("CUDA", -1)
    with pytest.raises(InvalidDeviceError):
        DeviceSpec("DISK")  # DISK needs a path
    with pytest.raises(InvalidDeviceError):
        DeviceSpec("CPU", 0, "/tmp/x")  # only DISK takes one


# --- registry ------------------------------------------------------------------


class _Dev:
    def __init__(self, spec: DeviceSpec) -> None:
        self.spec = spec


def test_caching_identity_per_spec() -> None:
    r = DeviceRegistry()
    r.register_factory("cuda", _Dev)
    assert r.device("CUDA:0") is r.device("gpu") is r.device(DeviceSpec("CUDA", 0))
    assert r.device("CUDA:1") is not r.device("CUDA:0")
    assert r.device("CUDA:1").spec == DeviceSpec("CUDA", 1)
    assert r.available_kinds() == ["CUDA"]


def test_clear_cache_rebuilds() -> None:
    r = DeviceRegistry()
    r.register_factory("CPU", _Dev)
    first = r.device("CPU")
    r.clear_cache()
    assert r.device("CPU") is not first


def test_single_construction_under_threads() -> None:
    r = DeviceRegistry()
    calls = []
    lock = threading.Lock()

    def slow_factory(spec: DeviceSpec) -> _Dev:
        with lock:
            calls.append(spec)
        time.sleep(0.05)  # widen the race window
        return _Dev(spec)

    r.register_factory("METAL", slow_factory)
    start = threading.Barrier(8)
    results: list = [None] * 8

    def worker(i: int) -> None:
        start.wait()
        results[i] = r.device("METAL:0")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(calls) == 1
    assert all(d is results[0] for d in results)


def test_different_specs_build_concurrently() -> None:
    # Each slot has its own lock: a slow METAL:0 must not block METAL:1.
    r = DeviceRegistry()
    release = threading.Event()

    def factory(spec: DeviceSpec) -> _Dev:
        if spec.index == 0:
            assert release.wait(10)
        return _Dev(spec)

    r.register_factory("METAL", factory)
    slow = threading.Thread(target=r.device, args=("METAL:0",))
    slow.start()
    try:
        assert r.device("METAL:1").spec.index == 1  # would hang with one global lock
    finally:
        release.set()
        slow.join(10)


def test_failing_factory_not_cached_and_retried() -> None:
    r = DeviceRegistry()
    attempts = []

    def flaky(spec: DeviceSpec) -> _Dev:
        attempts.append(spec)
        if len(attempts) == 1:
            raise RuntimeError("driver busy")
        return _Dev(spec)

    r.register_factory("AMD", flaky)
    with pytest.raises(DeviceError) as info:
        r.device("AMD:0")
    assert "driver busy" in str(info.value) and "AMD:0" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    dev = r.device("AMD:0")  # retried, now succeeds
    assert r.device("AMD:0") is dev and len(attempts) == 2


def test_svod_errors_pass_through_unwrapped() -> None:
    r = DeviceRegistry()

    def factory(spec: DeviceSpec) -> _Dev:
        raise VariableBoundsError("specific")

    r.register_factory("CPU", factory)
    with pytest.raises(VariableBoundsError):
        r.device("CPU")


def test_factory_returning_none_is_an_error() -> None:
    r = DeviceRegistry()
    r.register_factory("CPU", lambda spec: None)
    with pytest.raises(DeviceError):
        r.device("CPU")


def test_unknown_kind_lists_registered_kinds() -> None:
    r = DeviceRegistry()
    r.register_factory("CPU", _Dev)
    r.register_factory("DISK", _Dev)
    with pytest.raises(UnsupportedDeviceError) as info:
        r.device("METAL:0")
    msg = str(info.value)
    assert "METAL:0" in msg and "CPU" in msg and "DISK" in msg


def test_unregister_drops_factory_and_cache() -> None:
    r = DeviceRegistry()
    r.register_factory("webgpu", _Dev)
    r.device("WEBGPU")
    assert r.unregister_factory("WebGPU") is True
    assert r.unregister_factory("WEBGPU") is False
    with pytest.raises(UnsupportedDeviceError):
        r.device("WEBGPU")


def test_register_rejects_non_callable() -> None:
    with pytest.raises(TypeError):
        DeviceRegistry().register_factory("CPU", 3)  # type: ignore[arg-type]


def test_invalid_spec_string_is_invalid_not_unsupported() -> None:
    with pytest.raises(InvalidDeviceError):
        DeviceRegistry().device("CUDA:x")


# --- the global registry ---------------------------------------------------------


def test_global_registry_has_cpu_only() -> None:
    if ctypes.util.find_library("cuda") is not None:  # found on a lent GPU machine: CUDA is then registered
        assert reg.available_kinds() == ["CPU", "CUDA"]
        return
    assert reg.available_kinds() == ["CPU"]


def test_cuda_not_registered_here() -> None:
    if ctypes.util.find_library("cuda") is not None:
        pytest.skip("an NVIDIA driver is installed; the no-driver message does not apply")
    with pytest.raises(UnsupportedDeviceError) as info:
        reg.device("CUDA")
    msg = str(info.value)
    assert "CUDA" in msg and "libcuda.so.1" in msg and "not available" in msg
    assert "registered kinds: CPU" in msg
    assert isinstance(info.value, SvodError)


def test_global_cpu_device_is_cached() -> None:
    pytest.importorskip("svod_min.devices.cpu")
    from svod_min.devices.cpu.device import CpuDevice, create_cpu_device

    dev = reg.device("cpu")
    assert isinstance(dev, CpuDevice)
    assert dev is reg.device(DeviceSpec("CPU")) is DEVICE_FACTORIES.device("CPU:0")
    assert dev is create_cpu_device()  # registry and memo agree
