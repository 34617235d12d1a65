"""The embedded default plan of ``python -m svod_min run``: a small seeded MLP built
from the kernel library (prebuilt objects: no compiler needed).

    h1 = relu(x @ W1 + b1); h2 = relu(h1 @ W2 + b2); y = softmax(h2)   (row-wise)

Weights and inputs come from the plan's seeded ``random`` initialisers; the
expected output is computed here by an independent pure-Python reference
(numpy is not needed), for whatever ``batch`` the caller chooses.
"""

from __future__ import annotations

import math
import random
from typing import Any, Dict, List, Mapping

from ..dtypes import float32, pack_values, unpack_values

BATCH, D_IN, D_HID, D_OUT = 8, 64, 128, 32


def _rand(seed: int, scale: float) -> Dict[str, Any]:
    return {"random": {"seed": seed, "low": -scale, "high": scale}}


def _row_broadcast(seed: int, scale: float, cols: int) -> Dict[str, Any]:
    """A bias row (seeded) repeated for every batch row: the library add has no broadcasting."""
    row = _values(_rand(seed, scale), cols)
    return {"values": row * BATCH}


def plan_document() -> Dict[str, Any]:
    """The plan as a JSON-compatible document, built from the kernel library (svod_min.kernels)."""
    f32 = {"dtype": "float32"}
    return {
        "svod_plan": 1,
        "description": "seeded MLP forward from the kernel library: relu(x@W1+b1) -> relu(.@W2+b2) -> softmax",
        "device": "CPU",
        "vars": {"rows": {"min": 1, "max": BATCH, "default": BATCH}},
        "buffers": {
            "x": {"dtype": "float32", "shape": [BATCH, D_IN], "init": _rand(1, 1.0), "input": True},
            "w1": {"dtype": "float32", "shape": [D_IN, D_HID], "init": _rand(2, 0.2)},
            "b1": {"dtype": "float32", "shape": [BATCH, D_HID], "init": _row_broadcast(3, 0.1, D_HID)},
            "t1": {"dtype": "float32", "shape": [BATCH, D_HID]},
            "h1": {"dtype": "float32", "shape": [BATCH, D_HID]},
            "w2": {"dtype": "float32", "shape": [D_HID, D_OUT], "init": _rand(4, 0.2)},
            "b2": {"dtype": "float32", "shape": [BATCH, D_OUT], "init": _row_broadcast(5, 0.1, D_OUT)},
            "t2": {"dtype": "float32", "shape": [BATCH, D_OUT]},
            "h2": {"dtype": "float32", "shape": [BATCH, D_OUT]},
            "y": {"dtype": "float32", "shape": [BATCH, D_OUT], "output": True},
        },
        "kernels": {
            "matmul": {"library": "matmul", "params": f32},
            "add_relu": {"library": "add_relu", "params": f32},
            "softmax": {"library": "softmax", "params": f32},
        },
        "ops": [
            {"kernel": "matmul", "buffers": ["t1", "x", "w1"], "vars": {"M": "rows", "N": D_HID, "K": D_IN}},
            {"kernel": "add_relu", "buffers": ["h1", "t1", "b1"], "vars": {"n": "rows*%d" % D_HID}},
            {"kernel": "matmul", "buffers": ["t2", "h1", "w2"], "vars": {"M": "rows", "N": D_OUT, "K": D_HID}},
            {"kernel": "add_relu", "buffers": ["h2", "t2", "b2"], "vars": {"n": "rows*%d" % D_OUT}},
            {"kernel": "softmax", "buffers": ["y", "h2"], "vars": {"cols": D_OUT}},
        ],
    }


def _values(init: Dict[str, Any], count: int) -> List[float]:
    """The float32 values a ``random`` initialiser produces (the generator of :mod:`svod_min.planfile.data`)."""
    spec = init["random"]
    rng = random.Random(spec["seed"])
    raw = [rng.uniform(spec["low"], spec["high"]) for _ in range(count)]
    return unpack_values(float32, pack_values(float32, raw))


def reference_output(doc: Mapping[str, Any], rows: int) -> List[float]:
    """Pure-Python forward pass of the plan in ``doc`` for the first ``rows`` rows."""
    bufs = doc["buffers"]
    x = _values(bufs["x"]["init"], BATCH * D_IN)
    w1, b1 = _values(bufs["w1"]["init"], D_IN * D_HID), bufs["b1"]["init"]["values"][:D_HID]
    w2, b2 = _values(bufs["w2"]["init"], D_HID * D_OUT), bufs["b2"]["init"]["values"][:D_OUT]
    out: List[float] = []
    for r in range(BATCH):
        if r >= rows:
            out.extend([0.0] * D_OUT)
            continue
        h1 = [max(0.0, b1[j] + sum(x[r * D_IN + k] * w1[k * D_HID + j] for k in range(D_IN))) for j in range(D_HID)]
        h2 = [max(0.0, b2[j] + sum(h1[k] * w2[k * D_OUT + j] for k in range(D_HID))) for j in range(D_OUT)]
        m = max(h2)
        e = [math.exp(v - m) for v in h2]
        total = sum(e)
        out.extend(v / total for v in e)
    return out


def default_plan_document(rows: int = BATCH) -> Dict[str, Any]:
    """The plan plus an ``expect`` section computed by the reference."""
    doc = plan_document()
    doc["expect"] = {"y": {"values": reference_output(doc, rows), "rtol": 1e-4, "atol": 1e-6}}
    return doc
