"""svod_min.devices.cuda.driver and .loader: the prototype table, binding, the checked call, loading the
driver (or saying why not), registration and ``info`` lines.
"""

from __future__ import annotations

import ctypes
import re
from typing import Any, Callable, Set

import pytest
from support.cuda import Fake, fake, fake_so, gpu_test, without_driver  # noqa: F401  (fixtures)

from svod_min.devices import cuda
from svod_min.devices.cuda import DRIVER_API, PROTOTYPES, CudaError, CudaLibrary, CudaSymbolError, LaunchLimits
from svod_min.devices.registry import DEVICE_FACTORIES, DeviceRegistry
from svod_min.error import DeviceError, InvalidDeviceError, UnsupportedDeviceError


@without_driver
def test_no_driver_load_driver_is_none_with_reason() -> None:
    assert cuda.load_driver() is None
    reason = cuda.driver_unavailable_reason()
    assert reason is not None and "libcuda.so.1" in reason


@without_driver
def test_no_driver_registry_has_no_cuda_and_asking_is_a_clear_error() -> None:
    assert "CUDA" not in DEVICE_FACTORIES.available_kinds()
    for spec in ("CUDA", "CUDA:1", "GPU:0"):
        with pytest.raises(UnsupportedDeviceError, match="libcuda.so.1"):
            DEVICE_FACTORIES.device(spec)
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry) is False
    assert registry.available_kinds() == []


@without_driver
def test_no_driver_info_lines() -> None:
    lines = cuda.info_lines()
    assert lines[0].startswith("cuda: not available") and "libcuda.so.1" in lines[0]
    assert lines[-1].startswith("nvrtc: ")


def test_svod_cuda_0_disables_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_CUDA", "0")
    assert cuda.load_driver("/nonexistent/libcuda.so.1") is None
    assert "SVOD_CUDA=0" in (cuda.driver_unavailable_reason("/nonexistent/libcuda.so.1") or "")
    assert cuda.register_cuda(DeviceRegistry(), path="/nonexistent/libcuda.so.1") is False


def test_missing_library_path_gives_reason() -> None:
    assert cuda.load_driver("/nonexistent/libcuda-test.so.1") is None
    assert "/nonexistent/libcuda-test.so.1" in (cuda.driver_unavailable_reason("/nonexistent/libcuda-test.so.1") or "")


REQUIRED_ENTRY_POINTS = """
cuInit cuDriverGetVersion cuDeviceGetCount cuDeviceGet cuDeviceGetName cuDeviceComputeCapability
cuDeviceGetAttribute cuDeviceTotalMem_v2 cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease_v2 cuCtxSetCurrent
cuCtxGetCurrent cuMemAlloc_v2 cuMemFree_v2 cuMemHostAlloc cuMemFreeHost cuMemcpyHtoD_v2 cuMemcpyDtoH_v2
cuMemcpyDtoD_v2 cuMemcpyHtoDAsync_v2 cuMemcpyDtoHAsync_v2 cuMemcpyDtoDAsync_v2 cuStreamCreate
cuStreamSynchronize cuStreamDestroy_v2 cuModuleLoadDataEx cuModuleGetFunction cuModuleUnload cuLaunchKernel
cuEventCreate cuEventRecord cuEventSynchronize cuEventElapsedTime cuEventDestroy_v2 cuGetErrorName
cuGetErrorString cuDeviceCanAccessPeer cuCtxEnablePeerAccess cuStreamBeginCapture_v2 cuStreamEndCapture
cuGraphInstantiateWithFlags cuGraphLaunch cuGraphExecKernelNodeSetParams cuGraphDestroy cuGraphExecDestroy
""".split()


def test_prototype_table_is_complete_and_unique() -> None:
    names = [name for name, _ in PROTOTYPES]
    assert len(names) == len(set(names))
    assert set(REQUIRED_ENTRY_POINTS) <= set(names)
    for _name, argtypes in PROTOTYPES:
        assert all(hasattr(t, "from_param") for t in argtypes)  # ctypes types only


def test_driver_api_rows_name_their_versioned_symbols() -> None:
    names = [p.name for p in DRIVER_API]
    assert len(names) == len(set(names)) and "cuMemAlloc" in names and "cuMemAlloc_v2" not in names
    for proto in DRIVER_API:
        assert proto.restype is cuda.CUresult and proto.symbols
        assert all(re.sub(r"_v\d+$", "", symbol) == proto.name for symbol in proto.symbols), proto
    fallbacks = [symbol for proto in DRIVER_API for symbol in proto.symbols[1:]]
    assert fallbacks == ["cuEventElapsedTime", "cuGraphAddKernelNode", "cuGraphExecKernelNodeSetParams"]


class _Exports:
    """Only ``names`` of a library's symbols: what an older driver looks like to the binding."""

    def __init__(self, dll: Any, names: Set[str]) -> None:
        self.dll, self.names = dll, names

    def __getitem__(self, name: str) -> Any:
        if name not in self.names:
            raise AttributeError(name)
        return self.dll[name]


def test_fake_a_name_binds_the_newest_symbol_the_library_exports(fake: Callable[..., Fake]) -> None:
    path = fake().path
    lib = CudaLibrary(path)
    assert lib.function("cuMemAlloc").__name__ == "cuMemAlloc_v2"
    assert lib.function("cuEventElapsedTime").__name__ == "cuEventElapsedTime_v2"
    assert lib.untyped("cuGraphAddKernelNode").__name__ == "cuGraphAddKernelNode_v2"
    assert lib.function("cuMemcpyDtoH_v2").__name__ == "cuMemcpyDtoH_v2"  # a symbol may be named directly
    old = CudaLibrary(path)
    old._dll = _Exports(old._dll, {"cuEventElapsedTime", "cuGraphAddKernelNode"})  # a driver before 12.0
    assert old.function("cuEventElapsedTime").__name__ == "cuEventElapsedTime"
    assert old.untyped("cuGraphAddKernelNode").__name__ == "cuGraphAddKernelNode"
    with pytest.raises(CudaSymbolError, match="does not export cuMemAlloc_v2 \\(driver too old"):
        old.function("cuMemAlloc")
    with pytest.raises(CudaSymbolError, match="cuGraphExecKernelNodeSetParams_v2 or cuGraphExecKernelNodeSetParams"):
        old.call("cuGraphExecKernelNodeSetParams", None, None, None)


def test_fake_every_prototype_binds(fake: Callable[..., Fake]) -> None:
    lib = CudaLibrary(fake().path)
    for name, _ in PROTOTYPES:
        lib.function(name)  # resolved and typed
    assert lib.has("cuGraphAddKernelNode_v2")
    with pytest.raises(CudaSymbolError, match="not in svod_min's CUDA prototype table"):
        lib.call("cuNotAFunction")


def test_fake_first_exported_prefers_the_newest_entry(fake: Callable[..., Fake]) -> None:
    lib = CudaLibrary(fake().path)
    assert lib.first_exported("cuEventElapsedTime_v2", "cuEventElapsedTime") == "cuEventElapsedTime_v2"
    assert lib.first_exported("cuNotInTheTable_v2", "cuEventElapsedTime") == "cuEventElapsedTime"
    with pytest.raises(CudaSymbolError, match="cuNotInTheTable_v2, cuAlsoMissing"):
        lib.first_exported("cuNotInTheTable_v2", "cuAlsoMissing")


def test_fake_checked_call_turns_cuResult_into_CudaError(fake: Callable[..., Fake]) -> None:
    lib = CudaLibrary(fake().path)
    handle = ctypes.c_int()
    with pytest.raises(CudaError) as info:
        lib.call("cuDeviceGet", ctypes.byref(handle), 0)  # before cuInit
    err = info.value
    assert (err.function, err.code, err.name, err.description) == (
        "cuDeviceGet",
        3,
        "CUDA_ERROR_NOT_INITIALIZED",
        "initialization error",
    )
    assert str(err) == "cuDeviceGet failed: CUDA_ERROR_NOT_INITIALIZED (3): initialization error"
    assert isinstance(err, DeviceError)
    lib.call("cuInit", 0)
    with pytest.raises(CudaError, match=r"CUDA_ERROR_INVALID_DEVICE \(101\): invalid device ordinal"):
        lib.call("cuDeviceGet", ctypes.byref(handle), 5)
    assert lib.call_raw("cuDeviceGet", ctypes.byref(handle), 5) == 101
    unknown = lib.error("cuFoo", 12345)  # the driver has no name for it
    assert (unknown.name, unknown.description) == ("CUDA_ERROR_12345", "unrecognized error code")
    assert not err.sticky and not unknown.sticky
    fault = lib.error("cuStreamSynchronize", 700)  # CUDA_ERROR_ILLEGAL_ADDRESS: a kernel fault
    assert fault.sticky and str(fault).endswith("every later CUDA call in this process will fail: restart the process)")


def test_fake_cuinit_failure_means_no_driver_with_the_drivers_words(fake: Callable[..., Fake]) -> None:
    f = fake(init_rc=100)
    assert cuda.load_driver(f.path) is None
    reason = cuda.driver_unavailable_reason(f.path) or ""
    assert "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected" in reason
    assert cuda.register_cuda(DeviceRegistry(), path=f.path) is False


def test_fake_zero_devices_is_not_registered(fake: Callable[..., Fake]) -> None:
    f = fake(count=0)
    driver = f.driver()
    assert driver.device_count == 0 and driver.version == 13000 and driver.version_string == "13.0"
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry, path=f.path) is False
    assert "CUDA" not in registry.available_kinds()
    assert "reports no CUDA device" in (cuda.driver_unavailable_reason(f.path) or "")
    with pytest.raises(UnsupportedDeviceError):
        registry.device("CUDA")


def test_fake_devices_are_registered(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry, path=f.path) is True
    assert registry.available_kinds() == ["CUDA"]
    dev1 = registry.device("GPU:1")
    assert dev1 is registry.device("CUDA:1") is f.driver().device(1)
    assert isinstance(dev1, cuda.CudaDevice) and str(dev1.spec) == "CUDA:1" and dev1.name == "CUDA:1"
    assert registry.device("cuda") is f.driver().device(0)
    with pytest.raises(UnsupportedDeviceError, match=r"reports 2 GPU\(s\)"):
        registry.device("CUDA:2")
    with pytest.raises(InvalidDeviceError):
        f.driver().device(7)


def test_fake_discovery_and_info_lines(fake: Callable[..., Fake]) -> None:
    f = fake(count=2, version=12080)
    info = f.driver().device_info(1)
    assert (info.name, info.compute_capability, info.arch, info.total_memory) == (
        "Fake GPU 1",
        (9, 0),
        "sm_90",
        16 << 30,
    )
    assert info.limits == LaunchLimits(1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535), 49152, 232448)
    lines = cuda.info_lines(f.path)
    assert lines[0] == "cuda: driver 12.8 via %s, PTX ISA up to 8.7, 2 device(s)" % f.path
    assert lines[1] == "cuda: CUDA:0 Fake GPU 0, sm_90, 16.0 GiB, 132 SMs"
    assert lines[-1].startswith("nvrtc: ")


@gpu_test
def test_gpu_registry_and_info() -> None:
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry) is True
    dev = registry.device("GPU:0")
    assert dev is registry.device("CUDA") and dev.arch.startswith("sm_")
    lines = cuda.info_lines()
    assert lines[0].startswith("cuda: driver ") and "CUDA:0" in lines[1]
    free, total = dev.memory_info()
    assert 0 < free <= total
