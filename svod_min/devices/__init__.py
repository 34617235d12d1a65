"""Devices: the interface plans and executors use, and its CPU and CUDA implementations.

* :mod:`.base` — the device interface (``Device``, ``Program``, ``Launch``, ``Buffer``, ``Event``,
  ``GraphRuntime`` Protocols, ``NO_NODE``), program loading (``ProgramSource`` and the form names a
  device's ``program_forms`` lists) and ``RELEASE_EPOCH``, the one close/release counter.
* :mod:`.cpu` — the host CPU: ``CpuDevice``, ``CpuProgram`` and its ``CpuLaunch``, ``CpuEvent``;
  :mod:`.cpu.buffer` its memory (``CpuStorage``, ``CpuBuffer``); :mod:`.cpu.queue` svod's
  ``CpuQueue`` (recorded launches, copies, waits and signals, run in order at submit).
* :mod:`.cuda` — NVIDIA GPUs through the driver API (graphs packed by :mod:`.graph_segments`).
* :mod:`.transfer` — copies between buffers of any devices; :mod:`.common` — host buffer helpers.

Submodules are imported lazily (PEP 562) so ``import svod_min.devices`` stays
cheap and never touches a compiler or driver.
"""

from __future__ import annotations

from ..lazy import lazy_exports

_LAZY = {
    "CpuBuffer": "cpu.device",
    "CpuDevice": "cpu.device",
    "CpuEvent": "cpu.device",
    "CpuLaunch": "cpu.device",
    "CpuProgram": "cpu.device",
    "CpuQueue": "cpu.queue",
    "CpuStorage": "cpu.device",
    "create_cpu_device": "cpu.device",
    "create_cpu_device_with_backend": "cpu.device",
    "ensure_thread_pool": "cpu.device",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
