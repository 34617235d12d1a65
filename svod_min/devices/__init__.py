"""Device implementations. Only the CPU device exists for now.

Submodules are imported lazily (PEP 562) so ``import svod_min.devices`` stays
cheap and never touches a compiler or driver.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "CpuBuffer": "cpu",
    "CpuDevice": "cpu",
    "CpuProgram": "cpu",
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
