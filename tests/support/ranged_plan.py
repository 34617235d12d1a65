"""A plan with ranged dims (docs/plan-format.md, "Ranged dims"), shared by the binding tests of the plan file,
the CLI and the batch bridge: ``y = 2*x + 1 + z`` over the first ``batch`` rows, and ``seen = [batch]``, the
row count the kernel ran with (a plain output: it tells a test which binding ran)."""

from __future__ import annotations

import copy
from typing import Any, Dict, List

ROWS, COLS = 8, 4

KERNEL_C = r"""
void rows2x1(float *restrict y, int *restrict seen, const float *restrict x, const float *restrict z, int batch,
             int core_id) {
  for (int j = 0; j < 4; j++) y[core_id * 4 + j] = 2.0f * x[core_id * 4 + j] + 1.0f + z[core_id];
  if (core_id == 0) seen[0] = batch;
}
"""

_PLAN: Dict[str, Any] = {
    "svod_plan": 1,
    "description": "y = 2*x + 1 + z over the first batch rows",
    "vars": {"batch": {"min": 1, "max": ROWS, "default": ROWS}},
    "buffers": {
        "x": {"dtype": "float32", "shape": [ROWS, COLS], "dims": ["batch", COLS], "input": True, "init": "arange"},
        "z": {"dtype": "float32", "shape": [ROWS], "dims": ["batch"], "input": True},
        "y": {"dtype": "float32", "shape": [ROWS, COLS], "dims": ["batch", COLS], "output": True},
        "seen": {"dtype": "int32", "shape": [1], "output": True},
    },
    "kernels": {
        "rows2x1": {
            "source": KERNEL_C,
            "buffers": 4,
            "outputs": [0, 1],
            "vars": ["batch", "core_id"],
            "global_size": ["batch", 1, 1],
            "extents": {"0": "batch*4", "1": "1", "2": "batch*4", "3": "batch"},
        }
    },
    "ops": [{"kernel": "rows2x1", "buffers": ["y", "seen", "x", "z"]}],
    "expect": {"y": {"values": [2.0 * i + 1.0 for i in range(ROWS * COLS)]}},
}


def ranged_plan() -> Dict[str, Any]:
    """A fresh copy of the plan (tests mutate it)."""
    return copy.deepcopy(_PLAN)


def reference(x: Any, z: Any) -> Any:
    """What the kernel computes, by numpy."""
    return 2.0 * x + 1.0 + z[:, None]


def rows_of(n: int, seed: int = 0) -> List[Any]:
    """``x`` and ``z`` of ``n`` rows (numpy needed)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, COLS)).astype(np.float32), rng.standard_normal(n).astype(np.float32)]


__all__ = ["COLS", "KERNEL_C", "ROWS", "ranged_plan", "reference", "rows_of"]
