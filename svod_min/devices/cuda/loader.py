"""Loading the driver: :func:`load_driver` (cached per library path), :class:`CudaDriver` (``cuInit``,
discovery, the fork check, one :class:`~.device.CudaDevice` per GPU), and the hooks of the device
registry (:func:`register_cuda`) and the CLI (:func:`info_lines`). Nothing here raises when there is no
driver: the reason is kept for :func:`driver_unavailable_reason`.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from functools import partial
from typing import Any, Dict, List, Optional, Tuple

from ...error import CudaError, ForkedChildError, InvalidDeviceError, NotSupportedError, UnsupportedDeviceError
from ..spec import DeviceSpec
from . import enums
from .device import CudaDevice
from .driver import CudaLibrary, CUdevice
from .launch import LaunchLimits
from .nvrtc import find_nvrtc, load_nvrtc
from .ptx import driver_version_tuple, format_version, select_ptx_version

DEFAULT_LIBRARY = "libcuda.so.1"
_LIBRARY_ENV = "SVOD_CUDA_LIBRARY"  # another path for the driver library (tests, odd installs)
_DISABLE_ENV = "SVOD_CUDA"  # "0": never load the driver
NO_DRIVER_REASON = "no NVIDIA driver (libcuda.so.1) on this machine"


@dataclass(frozen=True)
class CudaDeviceInfo:
    """Static facts about one GPU (no context needed to read them)."""

    ordinal: int
    name: str
    compute_capability: Tuple[int, int]
    total_memory: int
    multiprocessors: int
    limits: LaunchLimits
    #: CU_DEVICE_ATTRIBUTE_MAX_PITCH: graph copy nodes keep their rows within it.
    max_pitch: int = 2**31 - 1

    @property
    def arch(self) -> str:
        return "sm_%d%d" % self.compute_capability


class CudaDriver:
    """An initialised driver library: version, devices, and the process that may use it."""

    def __init__(self, lib: CudaLibrary) -> None:
        self.lib = lib
        self.path = lib.path
        lib.call("cuInit", 0)
        self.pid = os.getpid()
        self.version = _out_int(lib, "cuDriverGetVersion")
        self.device_count = _out_int(lib, "cuDeviceGetCount")
        self._devices: Dict[int, CudaDevice] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "<CudaDriver %s %s devices=%d>" % (self.path, self.version_string, self.device_count)

    @property
    def version_string(self) -> str:
        return format_version(driver_version_tuple(self.version))

    @property
    def max_ptx_version(self) -> str:
        return select_ptx_version(self.version)

    def check_process(self) -> None:
        """Raise :class:`ForkedChildError` when called in a child forked after ``cuInit``."""
        if os.getpid() != self.pid:
            raise ForkedChildError(
                "CUDA was initialised in process %d; it cannot be used in a forked child (use spawn)" % self.pid
            )

    def _check_ordinal(self, ordinal: int) -> None:
        if not isinstance(ordinal, int) or not 0 <= ordinal < self.device_count:
            raise InvalidDeviceError(
                "CUDA:%s does not exist: the driver reports %d device(s)" % (ordinal, self.device_count)
            )

    def device_info(self, ordinal: int) -> CudaDeviceInfo:
        """Name, compute capability, memory and limits of GPU ``ordinal``."""
        self.check_process()
        self._check_ordinal(ordinal)
        handle = self.device_handle(ordinal)
        name = ctypes.create_string_buffer(256)
        self.lib.call("cuDeviceGetName", name, 256, handle)
        memory = ctypes.c_size_t()
        self.lib.call("cuDeviceTotalMem", ctypes.byref(memory), handle)
        attr = partial(self.attribute, handle)
        limits = LaunchLimits(
            attr(enums.ATTR_MAX_THREADS_PER_BLOCK),
            (attr(enums.ATTR_MAX_BLOCK_DIM_X), attr(enums.ATTR_MAX_BLOCK_DIM_Y), attr(enums.ATTR_MAX_BLOCK_DIM_Z)),
            (attr(enums.ATTR_MAX_GRID_DIM_X), attr(enums.ATTR_MAX_GRID_DIM_Y), attr(enums.ATTR_MAX_GRID_DIM_Z)),
            attr(enums.ATTR_MAX_SHARED_MEMORY_PER_BLOCK),
            self._optional_attribute(handle, enums.ATTR_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
        )
        capability = (attr(enums.ATTR_COMPUTE_CAPABILITY_MAJOR), attr(enums.ATTR_COMPUTE_CAPABILITY_MINOR))
        text = name.value.decode("utf-8", "replace")
        pitch = self._optional_attribute(handle, enums.ATTR_MAX_PITCH) or 2**31 - 1
        return CudaDeviceInfo(
            ordinal, text, capability, memory.value, attr(enums.ATTR_MULTIPROCESSOR_COUNT), limits, pitch
        )

    def device_handle(self, ordinal: int) -> int:
        handle = CUdevice()
        self.lib.call("cuDeviceGet", ctypes.byref(handle), ordinal)
        return handle.value

    def attribute(self, handle: int, attribute: int) -> int:
        value = ctypes.c_int()
        self.lib.call("cuDeviceGetAttribute", ctypes.byref(value), attribute, handle)
        return value.value

    def _optional_attribute(self, handle: int, attribute: int) -> int:
        """An attribute older drivers may not know: 0 when they refuse it."""
        try:
            return self.attribute(handle, attribute)
        except CudaError:
            return 0

    def forget(self, device: CudaDevice) -> None:
        """Drop a closed device from the cache, so :meth:`device` makes a new one."""
        with self._lock:
            if self._devices.get(device.ordinal) is device:
                del self._devices[device.ordinal]

    def device(self, ordinal: int = 0) -> CudaDevice:
        """The process-wide :class:`CudaDevice` for GPU ``ordinal`` (created on first use, again after its close())."""
        self.check_process()
        self._check_ordinal(ordinal)
        with self._lock:
            dev = self._devices.get(ordinal)
            if dev is None:
                dev = self._devices[ordinal] = CudaDevice(self, ordinal)
            return dev


def _out_int(lib: CudaLibrary, name: str) -> int:
    value = ctypes.c_int()
    lib.call(name, ctypes.byref(value))
    return value.value


_drivers: Dict[str, Optional[CudaDriver]] = {}
_reasons: Dict[str, str] = {}
_drivers_lock = threading.Lock()


def _library_path(path: Optional[str]) -> str:
    return path or os.environ.get(_LIBRARY_ENV, "").strip() or DEFAULT_LIBRARY


def load_driver(path: Optional[str] = None) -> Optional[CudaDriver]:
    """The initialised driver (cached per library path), or None; never raises.

    ``path`` (default ``$SVOD_CUDA_LIBRARY`` or ``libcuda.so.1``) lets tests
    load a stand-in library. When None is returned,
    :func:`driver_unavailable_reason` says why. ``SVOD_CUDA=0`` disables CUDA.
    """
    key = _library_path(path)
    if os.environ.get(_DISABLE_ENV, "").strip() == "0":
        with _drivers_lock:
            _reasons[key] = "CUDA disabled by %s=0" % _DISABLE_ENV
        return None
    with _drivers_lock:
        if key in _drivers:
            return _drivers[key]
        driver, reason = _open_driver(key)
        _drivers[key] = driver
        if reason:
            _reasons[key] = reason
        return driver


def _open_driver(path: str) -> Tuple[Optional[CudaDriver], str]:
    try:
        lib = CudaLibrary(path)
    except OSError as exc:
        return None, "cannot load %s (no NVIDIA driver?): %s" % (path, exc)
    try:
        return CudaDriver(lib), ""
    except CudaError as exc:
        return None, "%s loaded, but %s" % (path, exc)
    except Exception as exc:  # a broken stand-in library must not take the import down
        return None, "%s loaded, but initialising it failed: %s: %s" % (path, type(exc).__name__, exc)


def driver_unavailable_reason(path: Optional[str] = None) -> Optional[str]:
    """Why :func:`load_driver` returned None (or the last registration problem); None when it did not."""
    key = _library_path(path)
    with _drivers_lock:
        return _reasons.get(key)


def reset_driver_cache() -> None:
    """Forget loaded drivers and reasons (tests; devices already handed out stay usable)."""
    with _drivers_lock:
        _drivers.clear()
        _reasons.clear()


# --- registry and CLI -----------------------------------------------------------------------------


def _cuda_factory(driver: CudaDriver, spec: DeviceSpec) -> CudaDevice:
    if spec.index >= driver.device_count:
        raise UnsupportedDeviceError(
            "device %s does not exist: the NVIDIA driver reports %d GPU(s) (CUDA:0 .. CUDA:%d)"
            % (spec, driver.device_count, driver.device_count - 1)
        )
    return driver.device(spec.index)


def register_cuda(registry: Any, path: Optional[str] = None) -> bool:
    """Register the CUDA factory (``CUDA``, ``CUDA:N``, ``GPU:N``) when the driver loads with >= 1 GPU.

    Never raises (it runs at import time); returns whether it registered.
    """
    try:
        driver = load_driver(path)
        if driver is None:
            return False
        if driver.device_count < 1:
            with _drivers_lock:
                _reasons[_library_path(path)] = "%s loaded (driver %s) but reports no CUDA device" % (
                    driver.path,
                    driver.version_string,
                )
            return False
        registry.register_factory("CUDA", partial(_cuda_factory, driver))
        return True
    except Exception as exc:  # noqa: B902 - import-time hook
        with _drivers_lock:
            _reasons[_library_path(path)] = "CUDA registration failed: %s: %s" % (type(exc).__name__, exc)
        return False


def info_lines(path: Optional[str] = None) -> List[str]:
    """Lines for ``python -m svod_min info``: GPUs, driver version, NVRTC. Never raises."""
    try:
        lines = _driver_lines(path)
    except Exception as exc:  # noqa: B902
        lines = ["cuda: error while probing: %s: %s" % (type(exc).__name__, exc)]
    try:
        lines.append(_nvrtc_line(path))
    except Exception as exc:  # noqa: B902
        lines.append("nvrtc: error while probing: %s: %s" % (type(exc).__name__, exc))
    return lines


def _nvrtc_line(driver_path: Optional[str]) -> str:
    """Where NVRTC is, its CUDA version, and whether its PTX must be lowered for this driver."""
    path = find_nvrtc()
    if not path:
        return "nvrtc: not found (optional: the kernel library ships PTX)"
    try:
        version = load_nvrtc().version
    except NotSupportedError as exc:
        return "nvrtc: %s cannot be used: %s" % (path, exc)
    line = "nvrtc: %s, CUDA %s" % (path, format_version(version))
    driver = load_driver(driver_path)
    if driver is not None and version > driver_version_tuple(driver.version):
        line += " (newer than the driver, CUDA %s: its PTX is lowered to ISA %s on load)" % (
            driver.version_string,
            driver.max_ptx_version,
        )
    return line


def _driver_lines(path: Optional[str]) -> List[str]:
    driver = load_driver(path)
    if driver is None:
        return ["cuda: not available (%s)" % (driver_unavailable_reason(path) or NO_DRIVER_REASON)]
    lines = [
        "cuda: driver %s via %s, PTX ISA up to %s, %d device(s)"
        % (driver.version_string, driver.path, driver.max_ptx_version, driver.device_count)
    ]
    for ordinal in range(driver.device_count):
        info = driver.device_info(ordinal)
        lines.append(
            "cuda: CUDA:%d %s, %s, %.1f GiB, %d SMs"
            % (ordinal, info.name, info.arch, info.total_memory / 2**30, info.multiprocessors)
        )
    return lines
