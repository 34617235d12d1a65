"""QuantizeLinear and DequantizeLinear: QDQ models as float compute between a DequantizeLinear and a QuantizeLinear.

A DequantizeLinear of a constant (a quantized weight or bias) folds at build (frontend/parse.py's constant folding),
so Conv, MatMul and Gemm see float32 weights and lower as in any float model. The pairs on activations run here:
QuantizeLinear rounds to the integer dtype and DequantizeLinear turns it back into float32 at run time, rounding
as onnxruntime's CPU kernels do, so the model sees the same quantization error it was calibrated with. Scales are
float32; they and the zero points are read from buffers, constants (as quantize_static writes them) or run-time
tensors alike.

``svod.Lookup8`` (frontend/quant_lookup.py) is an 8-bit elementwise cone of such a model computed at build as a
256-entry table: one byte read, one written per element.
"""

from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.quant_lookup import LOOKUP
from ..frontend.table import ANY, one_of, register
from ..kernels.quant import lookup_kernel, quant_kernel
from .lowering import Lowering

#: The integer dtypes QuantizeLinear writes and DequantizeLinear reads (int32: DequantizeLinear only, for biases).
Q_TYPES = ("int8", "uint8", "int16", "uint16")
DQ_TYPES = Q_TYPES + ("int32",)


def _layout(graph: Graph, node: Node) -> Tuple[Optional[str], Tuple[int, int, int, str, int, int]]:
    """(why the node is refused or None, (outer, axis length, inner, mode, block, blocks)) for x and its scale."""
    x, scale = graph.values[node.inputs[0]], graph.values[node.inputs[1]]
    shape, sshape = x.shape, scale.shape
    block = int(node.attrs.get("block_size", 0) or 0)
    if len(shape) == 0:
        return (None if scale.size == 1 and not block else "a scalar x takes one scale"), (1, 1, 1, "tensor", 1, 1)
    raw = int(node.attrs.get("axis", 1))
    axis = normalize_axis(raw, len(shape)) if -len(shape) <= raw < len(shape) else -1
    if block:
        if axis < 0 or len(sshape) != len(shape):
            return "blocked scales need an axis of x and a scale of x's rank", (1, 1, 1, "tensor", 1, 1)
        blocks = -(-shape[axis] // block)
        expect = tuple(blocks if d == axis else n for d, n in enumerate(shape))
        if tuple(sshape) != expect:
            return "blocked scale shape %s is not %s (block_size %d along axis %d)" % (
                list(sshape),
                list(expect),
                block,
                axis,
            ), (1, 1, 1, "tensor", 1, 1)
    elif scale.size == 1 and len(sshape) <= 1:
        return None, (x.size, 1, 1, "tensor", 1, 1)
    elif len(sshape) != 1 or axis < 0 or sshape[0] != shape[axis]:
        return "scale shape %s fits neither per-tensor nor per-axis (axis %s of x %s)" % (
            list(sshape),
            node.attrs.get("axis", 1),
            list(shape),
        ), (1, 1, 1, "tensor", 1, 1)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1 :]))
    if block:
        return None, (outer, shape[axis], inner, "block", block, -(-shape[axis] // block))
    return None, (outer, shape[axis], inner, "axis", 1, 1)


def _check(graph: Graph, node: Node) -> Optional[str]:
    quantize = node.op == "QuantizeLinear"
    x, scale, y = (graph.values[n] for n in (node.inputs[0], node.inputs[1], node.outputs[0]))
    if scale.dtype != "float32":
        return "scale %r is %s; only float32 scales are supported" % (node.inputs[1], scale.dtype)
    zp = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    if zp and graph.values[zp].size != scale.size:  # quantize_static writes a scalar zero point beside a [1] scale
        return "zero point %r has shape %s, the scale %s" % (zp, list(graph.values[zp].shape), list(scale.shape))
    qtype = y.dtype if quantize else x.dtype
    if (x.dtype if quantize else y.dtype) != "float32":
        return "%s %s; only float32 is supported" % ("x is" if quantize else "y is", x.dtype if quantize else y.dtype)
    if qtype not in (Q_TYPES if quantize else DQ_TYPES):
        folded = "" if quantize else "; int4 and uint4 only as constants, dequantized at build"
        return "quantized dtype %s is not supported (only %s%s)" % (
            qtype,
            ", ".join(Q_TYPES if quantize else DQ_TYPES),
            folded,
        )
    if zp and graph.values[zp].dtype != qtype:
        return "zero point %r is %s, the quantized tensor %s" % (zp, graph.values[zp].dtype, qtype)
    return _layout(graph, node)[0]


def _lower(L: Lowering, node: Node) -> None:
    quantize = node.op == "QuantizeLinear"
    x, scale, y = node.inputs[0], node.inputs[1], node.outputs[0]
    qtype = L.value(y if quantize else x).dtype
    zp = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    if not zp:
        zp = L.const(np.zeros(L.value(scale).shape, np.dtype(qtype)), y + "~zero_point")
    outer, axis_len, inner, mode, block, blocks = _layout(L.graph, node)[1]
    kernel = quant_kernel("quantize" if quantize else "dequantize", qtype, outer, axis_len, inner, mode, block, blocks)
    L.source(kernel, [y, x, scale, zp])


register(
    ["QuantizeLinear"],
    "generated C; float32 x, float32 scales and zero points (constants or run-time tensors) per tensor, per axis or "
    "blocked; int8, uint8, int16, uint16 results, rounded half to even and saturated (NaN gives the dtype's lowest "
    "value, as onnxruntime)",
    check=_check,
    dtypes=("float32",) + Q_TYPES,
    axis=ANY,
    block_size=ANY,
    saturate=ANY,
    output_dtype=ANY,
    precision=one_of(0, 1),
)(_lower)
register(
    ["DequantizeLinear"],
    "generated C (a constant's folds at build); int8, uint8, int16, uint16, int32 x, float32 scales and zero "
    "points (constants or run-time tensors) per tensor, per axis or blocked",
    check=_check,
    dtypes=("float32",) + DQ_TYPES,
    axis=ANY,
    block_size=ANY,
    output_dtype=one_of(0, 1),
)(_lower)


@register([LOOKUP], "an 8-bit elementwise cone of a QDQ model as a 256-entry table (frontend/quant_lookup.py)")
def _lower_lookup(L: Lowering, node: Node) -> None:
    x, table, y = node.inputs[0], node.inputs[1], node.outputs[0]
    L.source(lookup_kernel(L.value(x).dtype, L.value(y).dtype, L.value(y).size), [y, x, table])
