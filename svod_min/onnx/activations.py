"""The activations a Conv, Gemm, affine or elementwise node applies to what it writes."""

from __future__ import annotations

from typing import Dict, Optional

from .kernels.ckernel import flt

def activation(kind: Optional[str], params: Dict[str, float], v: str) -> str:
    """The C expression of a fused activation applied to ``v`` (NaN stays NaN where ONNX's does)."""
    if kind is None:
        return v
    if kind == "Relu":
        return "(%s < 0.0f ? 0.0f : %s)" % (v, v)
    if kind == "LeakyRelu":
        return "(%s < 0.0f ? %s * %s : %s)" % (v, flt(params["alpha"]), v, v)
    if kind == "Clip":
        return "(%s < %s ? %s : (%s > %s ? %s : %s))" % (v, flt(params["min"]), flt(params["min"]), v, flt(params["max"]), flt(params["max"]), v)
    if kind == "Sigmoid":
        return "(1.0f / (1.0f + expf(-%s)))" % v
    if kind == "Tanh":
        return "tanhf(%s)" % v
    if kind == "HardSigmoid":
        return "__builtin_fmaxf(0.0f, __builtin_fminf(1.0f, %s * %s + %s))" % (flt(params["alpha"]), v, flt(params["beta"]))
    if kind == "HardSwish":
        return "(%s * __builtin_fmaxf(0.0f, __builtin_fminf(1.0f, %s / 6.0f + 0.5f)))" % (v, v)
    if kind == "Gelu" and params.get("tanh"):
        return "(0.5f * %s * (1.0f + tanhf(0.7978845608028654f * (%s + 0.044715f * %s * %s * %s))))" % (v, v, v, v, v)
    if kind == "Gelu":
        return "(0.5f * %s * (1.0f + erff(%s * 0.70710678118654752f)))" % (v, v)
    raise ValueError(kind)
