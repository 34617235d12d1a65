"""Shared by the plan-file tests: the base plan, the spy device that counts dispatches, the CLI runner."""

from __future__ import annotations

import copy
import struct
from typing import Any, Callable, Dict, List, Optional

import pytest

import svod_min.devices.transfer as transfer
import svod_min.plan.execution_plan as execution_plan
from support.paths import REPO as REPO_PATH
from svod_min.devices.cpu.device import CpuDevice
from svod_min.error import CompilationError
from svod_min.planfile.load import load_plan

REPO = REPO_PATH


try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is optional
    np = None


needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")


BUMP_C = r"""
void bump(int* restrict count, float* restrict y, const float* restrict x, int n) {
  count[0] += 1;
  for (int i = 0; i < n; i++) y[i] = x[i] + 1.0f;
}
"""


BASE: Dict[str, Any] = {
    "svod_plan": 1,
    "description": "bump: count += 1, y = x + 1",
    "device": "CPU",
    "vars": {"n": {"min": 1, "max": 4, "default": 4}},
    "buffers": {
        "count": {"dtype": "int32", "shape": [1], "output": True},
        "y": {"dtype": "float32", "shape": [4], "output": True},
        "x": {"dtype": "float32", "shape": [4], "init": "ones"},
    },
    "kernels": {
        "bump": {"source": BUMP_C, "buffers": 3, "outputs": [0, 1], "vars": ["n"], "extents": {"1": "n", "2": "n"}},
    },
    "ops": [{"kernel": "bump", "buffers": ["count", "y", "x"]}],
    "expect": {"count": {"values": [1]}, "y": {"values": [2, 2, 2, 2]}},
}


def base() -> Dict[str, Any]:
    return copy.deepcopy(BASE)


class _SpyLaunch:
    """A bound call (the interface's ``Launch``) that counts every replay on its device."""

    graphable = False
    timed = None

    def __init__(self, inner: Any, device: "SpyDevice") -> None:
        self._inner = inner
        self._device = device

    def __call__(self) -> None:
        self._device.dispatches += 1
        self._inner()

    def set_vals(self, vals: Any) -> None:
        self._inner.set_vals(vals)

    def set_dims(self, grid: Any, block: Any = None) -> None:
        self._inner.set_dims(grid, block)


class _SpyProgram:
    """Wraps a loaded program; every dispatch (bound call or execute) is counted.

    ``native_address`` is None: the native runner would call the C entry behind the spy's back.
    """

    native_address = None

    def __init__(self, inner: Any, device: "SpyDevice") -> None:
        self._inner = inner
        self._device = device

    def bind(self, *args: Any, **kwargs: Any) -> _SpyLaunch:
        return _SpyLaunch(self._inner.bind(*args, **kwargs), self._device)

    def execute(self, *args: Any, **kwargs: Any) -> None:
        self._device.dispatches += 1
        self._inner.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SpyDevice(CpuDevice):
    """A CPU device that records its allocations and counts kernel dispatches."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.allocated: List[Any] = []
        self.dispatches = 0

    def allocate(self, *args: Any, **kwargs: Any) -> Any:
        buf = super().allocate(*args, **kwargs)
        self.allocated.append(buf)
        return buf

    def load(self, *args: Any, **kwargs: Any) -> Any:
        return _SpyProgram(super().load(*args, **kwargs), self)


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.device = SpyDevice()
        self.customs = 0
        self.copies = 0
        real_custom, real_memmove = execution_plan.run_custom_function, transfer.memmove

        def custom(*args: Any, **kwargs: Any) -> None:
            self.customs += 1
            real_custom(*args, **kwargs)

        def memmove(*args: Any, **kwargs: Any) -> None:
            self.copies += 1
            real_memmove(*args, **kwargs)

        monkeypatch.setattr(execution_plan, "run_custom_function", custom)
        monkeypatch.setattr(transfer, "memmove", memmove)  # every host copy goes through it

    def counters(self) -> List[int]:
        """Values of every int32[1] buffer allocated (the bump kernel's counter)."""
        return [
            struct.unpack("<i", b.copyout())[0]
            for b in self.device.allocated
            if b.dtype.name == "int32" and tuple(b.shape) == (1,)
        ]

    def assert_nothing_ran(self) -> None:
        assert self.device.dispatches == 0, "a kernel was dispatched"
        assert self.customs == 0, "a custom op ran"
        assert self.copies == 0, "a copy ran"
        assert all(c == 0 for c in self.counters()), "the counter kernel ran: %s" % self.counters()


def rejected(
    spy: Spy, doc: Any, exc_type: type, message: str, base_dir: Optional[str] = None, **kw: Any
) -> BaseException:
    with pytest.raises(exc_type) as info:
        load_plan(doc, device=spy.device, base_dir=base_dir, **kw)
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value).strip() or exc_type is CompilationError
    spy.assert_nothing_ran()
    return info.value


def set_key(*keys: Any, value: Any) -> Callable[[Dict[str, Any]], None]:
    def mutate(doc: Dict[str, Any]) -> None:
        target = doc
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return mutate
