"""QuantizeLinear and DequantizeLinear of constants folded at build: a QDQ model's quantized weights and biases
become the float32 tensors Conv, MatMul and Gemm lower as in any float model.

onnx's reference evaluator has neither op before opset 19, and the fold must round as onnxruntime's kernels do: for
DequantizeLinear, the difference ``x - zero_point`` exact (int64 here), converted to float32 once, then multiplied
by the float32 scale (one rounding, numpy's IEEE float32 product).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from onnx import helper

#: The integer dtypes folded here (QuantizeLinear: the first four; DequantizeLinear all: int4/uint4 weights, ml_dtypes'
#: types in numpy, fold only here, the run-time kernels take none); others stay nodes the op table checks.
INTEGERS = ("int8", "uint8", "int16", "uint16", "int32", "int4", "uint4")


def dequantize_constant(node: Any, consts: Dict[str, np.ndarray]) -> Optional[List[np.ndarray]]:
    """The folded output of a DequantizeLinear whose inputs are all constants, or None where the node's form is not
    one folded here (the op table then checks the node and names what it refuses)."""
    x = consts[node.input[0]]
    if x.dtype.name not in INTEGERS:
        return None
    pair = _scale_and_zero_point(node, consts, x, x.dtype)
    if pair is None:
        return None
    scale, zp = pair
    diff = (x.astype(np.int64) - zp.astype(np.int64)).astype(np.float32)
    return [np.multiply(diff, scale, dtype=np.float32)]


def quantize_constant(node: Any, consts: Dict[str, np.ndarray]) -> Optional[List[np.ndarray]]:
    """The folded output of a QuantizeLinear of a constant float32 x (a weight an exporter left in float32 before its
    QuantizeLinear -> DequantizeLinear pair): saturate(round_half_to_even(x / scale) + zero_point), NaN to the
    dtype's lowest value, as the run-time kernel (templates/quant.c.j2) and onnxruntime compute it."""
    x = consts[node.input[0]]
    zp_name = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    qtype = consts[zp_name].dtype if zp_name else np.dtype("uint8")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if x.dtype != np.float32 or qtype.name not in INTEGERS[:4] or attrs.get("output_dtype", 0):
        return None
    pair = _scale_and_zero_point(node, consts, x, qtype)
    if pair is None:
        return None
    scale, zp = pair
    info = np.iinfo(qtype)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        v = np.divide(x, scale, dtype=np.float32)
        q = np.clip(np.rint(v).astype(np.float64) + zp.astype(np.float64), info.min, info.max)
    return [np.where(np.isnan(v), info.min, q).astype(qtype)]


def _scale_and_zero_point(
    node: Any, consts: Dict[str, np.ndarray], x: np.ndarray, qtype: Any
) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The node's scale and zero point broadcast against x (per tensor, per axis or blocked), or None."""
    scale = consts[node.input[1]]
    zp = consts[node.input[2]] if len(node.input) > 2 and node.input[2] else np.zeros(scale.shape, qtype)
    if scale.dtype != np.float32 or zp.dtype != qtype or zp.size != scale.size:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    block = int(attrs.get("block_size", 0) or 0)
    zp = zp.reshape(scale.shape)
    if scale.size == 1 and not block:
        return scale.reshape(()), zp.reshape(())
    axis = int(attrs.get("axis", 1))
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        return None
    axis %= x.ndim
    if block:
        if scale.ndim != x.ndim:
            return None
        scale = np.repeat(scale, block, axis=axis).take(range(x.shape[axis]), axis=axis)
        zp = np.repeat(zp, block, axis=axis).take(range(x.shape[axis]), axis=axis)
        return (scale, zp) if scale.shape == x.shape else None
    if scale.ndim != 1 or scale.size != x.shape[axis]:
        return None
    shape = [1] * x.ndim
    shape[axis] = scale.size
    return scale.reshape(shape), zp.reshape(shape)
