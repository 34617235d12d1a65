"""The embedded default plan of ``python -m svod_min run``: a small seeded MLP.

    h1 = relu(x @ W1 + b1); h2 = relu(h1 @ W2 + b2); y = softmax(h2)   (row-wise)

Weights and inputs come from the plan's seeded ``random`` initialisers; the
expected output is computed here by an independent pure-Python reference
(numpy is not needed), for whatever ``batch`` the caller chooses.
"""

from __future__ import annotations

import math
import random
from typing import Any, Dict, List, Mapping

from .dtypes import float32, pack_values, unpack_values

BATCH, D_IN, D_HID, D_OUT, CHUNKS = 8, 64, 128, 32, 4

KERNELS_C = r"""
#include <math.h>
#define CHUNKS %(chunks)d
/* out[r, j] = relu(sum_k x[r, k] * w[k, j] + b[j]); rows split over core_id */
void linear_relu(float* restrict out, const float* restrict x, const float* restrict w,
                 const float* restrict b, int rows, int in_f, int out_f, int core_id) {
    int lo = core_id * rows / CHUNKS, hi = (core_id + 1) * rows / CHUNKS;
    for (int r = lo; r < hi; r++) {
        float* o = out + r * out_f;
        for (int j = 0; j < out_f; j++) o[j] = b[j];
        for (int k = 0; k < in_f; k++) {
            float xv = x[r * in_f + k];
            const float* wr = w + k * out_f;
            for (int j = 0; j < out_f; j++) o[j] += xv * wr[j];
        }
        for (int j = 0; j < out_f; j++) o[j] = o[j] > 0.0f ? o[j] : 0.0f;
    }
}
/* numerically stable row-wise softmax */
void softmax(float* restrict out, const float* restrict x, int rows, int cols) {
    for (int r = 0; r < rows; r++) {
        const float* xr = x + r * cols;
        float* o = out + r * cols;
        float m = xr[0], s = 0.0f;
        for (int j = 1; j < cols; j++) m = xr[j] > m ? xr[j] : m;
        for (int j = 0; j < cols; j++) { o[j] = expf(xr[j] - m); s += o[j]; }
        for (int j = 0; j < cols; j++) o[j] /= s;
    }
}
""" % {"chunks": CHUNKS}


def _rand(seed: int, count: int, scale: float) -> Dict[str, Any]:
    return {"random": {"seed": seed, "low": -scale, "high": scale}}


def plan_document() -> Dict[str, Any]:
    """The plan as a JSON-compatible document (also a worked example of the format)."""
    linear = {
        "source": KERNELS_C, "entry": "linear_relu", "buffers": 4, "outputs": [0],
        "vars": ["rows", "in_f", "out_f", "core_id"], "global_size": [CHUNKS, 1, 1],
        "extents": {"0": "rows*out_f", "1": "rows*in_f", "2": "in_f*out_f", "3": "out_f"},
        "flops": "2*rows*in_f*out_f", "bytes": "4*(rows*in_f + in_f*out_f + rows*out_f)",
    }
    return {
        "svod_plan": 1,
        "description": "seeded MLP forward: relu(x@W1+b1) -> relu(.@W2+b2) -> softmax",
        "device": "CPU",
        "vars": {"rows": {"min": 1, "max": BATCH, "default": BATCH}},
        "buffers": {
            "x": {"dtype": "float32", "shape": [BATCH, D_IN], "init": _rand(1, BATCH * D_IN, 1.0), "input": True},
            "w1": {"dtype": "float32", "shape": [D_IN, D_HID], "init": _rand(2, 0, 0.2)},
            "b1": {"dtype": "float32", "shape": [D_HID], "init": _rand(3, 0, 0.1)},
            "h1": {"dtype": "float32", "shape": [BATCH, D_HID]},
            "w2": {"dtype": "float32", "shape": [D_HID, D_OUT], "init": _rand(4, 0, 0.2)},
            "b2": {"dtype": "float32", "shape": [D_OUT], "init": _rand(5, 0, 0.1)},
            "h2": {"dtype": "float32", "shape": [BATCH, D_OUT]},
            "y": {"dtype": "float32", "shape": [BATCH, D_OUT], "output": True},
        },
        "kernels": {
            "linear_relu": linear,
            "softmax": {
                "source": KERNELS_C, "entry": "softmax", "buffers": 2, "vars": ["rows", "cols"],
                "extents": {"0": "rows*cols", "1": "rows*cols"},
            },
        },
        "ops": [
            {"kernel": "linear_relu", "buffers": ["h1", "x", "w1", "b1"], "vars": {"in_f": D_IN, "out_f": D_HID}},
            {"kernel": "linear_relu", "buffers": ["h2", "h1", "w2", "b2"], "vars": {"in_f": D_HID, "out_f": D_OUT}},
            {"kernel": "softmax", "buffers": ["y", "h2"], "vars": {"cols": D_OUT}},
        ],
    }


def _values(init: Dict[str, Any], count: int) -> List[float]:
    """The float32 values a ``random`` initialiser produces (same generator as plan_file)."""
    spec = init["random"]
    rng = random.Random(spec["seed"])
    raw = [rng.uniform(spec["low"], spec["high"]) for _ in range(count)]
    return unpack_values(float32, pack_values(float32, raw))


def reference_output(doc: Mapping[str, Any], rows: int) -> List[float]:
    """Pure-Python forward pass of the plan in ``doc`` for the first ``rows`` rows."""
    bufs = doc["buffers"]
    x = _values(bufs["x"]["init"], BATCH * D_IN)
    w1, b1 = _values(bufs["w1"]["init"], D_IN * D_HID), _values(bufs["b1"]["init"], D_HID)
    w2, b2 = _values(bufs["w2"]["init"], D_HID * D_OUT), _values(bufs["b2"]["init"], D_OUT)
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
