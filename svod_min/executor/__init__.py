"""The executor: work across devices ordered by buffer hazards.

* :mod:`.unified` — ``UnifiedExecutor``: one context per device, kernels and copies submitted in
  dependency order, ``global_executor()``.
* :mod:`.graph` — ``ExecutionGraph``: which op waits for which, from the buffers each reads and writes.
* :mod:`.device_context` — ``DeviceContext``: a device's queue, its timeline signal and sync strategy.
"""

from __future__ import annotations

from ..lazy import lazy_exports

_LAZY = {
    "DeviceContext": "device_context",
    "ExecutionGraph": "graph",
    "ExecutionNode": "graph",
    "KernelBufferAccess": "graph",
    "SyncStrategy": "device_context",
    "TimelineSignal": "device_context",
    "U64_MAX": "device_context",
    "UnifiedExecutor": "unified",
    "global_executor": "unified",
}

__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = sorted(_LAZY)
