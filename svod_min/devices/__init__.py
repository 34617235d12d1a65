"""Devices: the interface plans and executors use, and its CPU and CUDA implementations.

* :mod:`.base` — the device interface (``Device``, ``Program``, ``Launch``, ``Buffer``, ``Event``,
  ``GraphRuntime`` Protocols, ``NO_NODE``) and ``RELEASE_EPOCH``, the one close/release counter.
* :mod:`.cpu` — the host CPU: ``CpuDevice``, ``CpuProgram`` and its ``CpuLaunch``, ``CpuEvent``;
  :mod:`.cpu_buffer` its memory (``CpuStorage``, ``CpuBuffer``); :mod:`.cpu_queue` svod's
  ``CpuQueue`` (recorded launches, copies, waits and signals, run in order at submit).
* :mod:`.cuda` — NVIDIA GPUs through the driver API (graphs packed by :mod:`.graph_segments`).
* :mod:`.transfer` — copies between buffers of any devices; :mod:`.common` — host buffer helpers.

Submodules are imported lazily (PEP 562) so ``import svod_min.devices`` stays
cheap and never touches a compiler or driver.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CpuBuffer": "cpu",
    "CpuDevice": "cpu",
    "CpuEvent": "cpu",
    "CpuLaunch": "cpu",
    "CpuProgram": "cpu",
    "CpuQueue": "cpu_queue",
    "CpuStorage": "cpu",
    "create_cpu_device": "cpu",
    "create_cpu_device_with_backend": "cpu",
    "ensure_thread_pool": "cpu",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    return getattr(importlib.import_module("." + module, __name__), name)


def __dir__() -> list:
    return sorted(list(globals()) + list(_LAZY))


__all__ = sorted(_LAZY)
