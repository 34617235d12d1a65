"""Device specs and the device factory registry (svod's ``DEVICE_FACTORIES``).

``DeviceSpec.parse("cuda:1")`` turns a user string into a canonical, hashable
spec. A :class:`DeviceRegistry` maps a device kind to a factory and caches one
device per spec; each cache slot has its own lock, so two threads asking for
the same spec build it once while different specs build concurrently. A
factory that fails is not cached: the next call tries again.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional

from ..error import DeviceError, SvodError, UnsupportedDeviceError
from .spec import KNOWN_KINDS, DeviceSpec, SpecLike, add_kind, as_spec, normalise_kind

Device = Any  # a device object (CpuDevice, CudaDevice ...)
Factory = Callable[[DeviceSpec], Device]


class _Slot:
    """One cache entry: its own lock so a slow factory blocks only its own spec."""

    __slots__ = ("lock", "device")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.device: Optional[Device] = None


class DeviceRegistry:
    """Device kind -> factory, plus a per-spec device cache."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards the two dicts, never held while building
        self._factories: Dict[str, Factory] = {}
        self._slots: Dict[DeviceSpec, _Slot] = {}
        # kind -> probe(registry) that may register a factory; run once, on first need
        self._probes: Dict[str, Callable[["DeviceRegistry"], Any]] = {}

    def register_probe(self, kind: str, probe: Callable[["DeviceRegistry"], Any]) -> None:
        """Defer a driver probe (e.g. cuInit) until ``kind`` is first asked for or listed."""
        with self._lock:
            self._probes[normalise_kind(kind)] = probe

    def _run_probes(self, kind: Optional[str] = None) -> None:
        with self._lock:
            keys = [k for k in self._probes if kind is None or k == kind]
            probes = [self._probes.pop(k) for k in keys]
        for probe in probes:  # outside the lock: a probe registers through register_factory
            try:
                probe(self)
            except Exception:  # a probe must never break the registry
                pass

    def register_factory(self, kind: str, factory: Factory, *, indexed: bool = False) -> None:
        """Register (or replace) the factory for ``kind`` (case-insensitive; GPU means CUDA).

        A kind outside :data:`KNOWN_KINDS` becomes a valid spec name (``indexed``: ``KIND:N``), so
        plans and ``--device`` can name it; its devices implement devices/base.py's ``Device``.
        """
        if not callable(factory):
            raise TypeError("factory must be callable, got %r" % (factory,))
        key = add_kind(kind, indexed)
        with self._lock:
            self._factories[key] = factory

    def unregister_factory(self, kind: str) -> bool:
        """Remove the factory and the cached devices of ``kind``; False if none was registered."""
        key = normalise_kind(kind)
        with self._lock:
            found = self._factories.pop(key, None) is not None
            for spec in [s for s in self._slots if s.kind == key]:
                del self._slots[spec]
        return found

    def available_kinds(self) -> List[str]:
        """The kinds that have a factory, sorted (runs pending driver probes)."""
        self._run_probes()
        with self._lock:
            return sorted(self._factories)

    def clear_cache(self) -> None:
        """Forget every cached device (the devices themselves live on while referenced)."""
        with self._lock:
            self._slots.clear()

    def device(self, spec: SpecLike) -> Device:
        """The cached device for ``spec``, built by its kind's factory on first use."""
        parsed = as_spec(spec)
        self._run_probes(parsed.kind)
        slot = self._slot(parsed)
        with slot.lock:
            if slot.device is None:
                slot.device = self._build(parsed)
            return slot.device

    def _slot(self, spec: DeviceSpec) -> _Slot:
        with self._lock:
            if spec.kind not in self._factories:
                raise _unsupported(spec, sorted(self._factories))
            slot = self._slots.get(spec)
            if slot is None:
                slot = self._slots[spec] = _Slot()
            return slot

    def _build(self, spec: DeviceSpec) -> Device:
        with self._lock:
            factory = self._factories.get(spec.kind)
            kinds = sorted(self._factories)
        if factory is None:  # unregistered while we waited for the slot
            raise _unsupported(spec, kinds)
        try:
            built = factory(spec)
        except SvodError:
            raise
        except Exception as exc:
            raise DeviceError("failed to create device %s: %s" % (spec, exc)) from exc
        if built is None:
            raise DeviceError("factory for %s returned None" % (spec,))
        return built


def _cuda_driver_hint() -> str:
    # The recorded reason wins: it knows about SVOD_CUDA_LIBRARY, SVOD_CUDA=0 and a driver without GPUs.
    try:  # optional, on the error path only (see _probe_cuda)
        from .cuda import driver_unavailable_reason

        reason = driver_unavailable_reason()
    except Exception:  # the hint must never fail
        reason = None
    if reason:
        return "the CUDA device is not available here: %s" % reason
    # Only on the error path: find_library may run ldconfig (milliseconds).
    import ctypes.util  # here too: it imports subprocess, ~5 ms of every start otherwise

    try:
        found = ctypes.util.find_library("cuda")
    except Exception:  # find_library shells out; never let a hint crash
        found = None
    if found is None:
        return "no NVIDIA driver (libcuda.so.1) was found, so the CUDA device is not available here"
    return "an NVIDIA driver (%s) is present but unusable: unknown reason" % found


def _unsupported(spec: DeviceSpec, kinds: List[str]) -> UnsupportedDeviceError:
    registered = ", ".join(kinds) if kinds else "none"
    message = "device %s is not supported (registered kinds: %s)" % (spec, registered)
    if spec.kind == "CUDA":
        message += "; " + _cuda_driver_hint()
    return UnsupportedDeviceError(message)


def _cpu_factory(spec: DeviceSpec) -> Device:
    # Lazy import: building the registry must not import the compiler driver.
    from .cpu.device import create_cpu_device

    return create_cpu_device()


def _probe_cuda(registry: DeviceRegistry) -> None:
    # CUDA is optional: its package is imported only when a CUDA device is first asked for.
    from .cuda import register_cuda

    register_cuda(registry)


def _register_optional_devices(registry: DeviceRegistry) -> None:
    """Devices that need a driver: probed lazily, so importing svod_min never runs cuInit."""
    registry.register_probe("CUDA", _probe_cuda)


DEVICE_FACTORIES = DeviceRegistry()
DEVICE_FACTORIES.register_factory("CPU", _cpu_factory)
_register_optional_devices(DEVICE_FACTORIES)


def device(spec: SpecLike, registry: Optional[DeviceRegistry] = None) -> Device:
    """The device for ``spec`` from ``registry`` (default :data:`DEVICE_FACTORIES`)."""
    return (DEVICE_FACTORIES if registry is None else registry).device(spec)


def available_kinds() -> List[str]:
    """Kinds registered in :data:`DEVICE_FACTORIES`."""
    return DEVICE_FACTORIES.available_kinds()


__all__ = [
    "DEVICE_FACTORIES",
    "DeviceRegistry",
    "DeviceSpec",
    "KNOWN_KINDS",
    "as_spec",
    "available_kinds",
    "device",
]
