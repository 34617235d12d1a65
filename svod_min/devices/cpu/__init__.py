"""The host CPU device: relocated ELF objects called through ctypes, split over a thread pool.

* :mod:`.device` — ``CpuDevice`` (the device slots), ``CpuProgram`` and its ``CpuLaunch``,
  ``CpuEvent``, ``create_cpu_device``.
* :mod:`.buffer` — host memory (``CpuStorage``, ``CpuBuffer``).
* :mod:`.dispatch` — how a call's core ids are claimed by the caller and the pool's threads.
* :mod:`.queue` — ``CpuQueue``: recorded launches, copies, waits and signals run in order at submit.
"""

from __future__ import annotations

from ...lazy import lazy_exports

_LAZY = {
    "CpuBuffer": "device",
    "CpuDevice": "device",
    "CpuEvent": "device",
    "CpuLaunch": "device",
    "CpuProgram": "device",
    "CpuQueue": "queue",
    "CpuStorage": "device",
    "create_cpu_device": "device",
    "create_cpu_device_with_backend": "device",
    "ensure_thread_pool": "device",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
