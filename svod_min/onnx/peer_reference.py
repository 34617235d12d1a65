"""onnxruntime as the reference for integer-quantized models, exact on every x86-64 host.

Without VNNI (AVX2, or AVX512BW alone), onnxruntime multiplies uint8 by int8 with vpmaddubsw, which adds two products
into a saturating 16-bit lane (255 * 127 * 2 does not fit), and runs int8 x int8 the same way after adding 128 to
the first operand. Its MatMulInteger, ConvInteger, QLinear* and fused QDQ results are then wrong by up to the
saturation: on an AMD EPYC host 21 of 144 QLinearMatMul outputs were off by as much as 13, and a per-channel QDQ
model with int8 activations by 4 quanta. Its uint8 x uint8 kernels widen to 16 bits first and are exact. A build
records its expectations from onnxruntime (build.py), so a saturated reference would fail a correct bundle's
verification on such a host.

:func:`with_unsigned_weights` rewrites a model so that onnxruntime computes the same exact values on that path:
  - in a QDQ graph (QuantizeLinear/DequantizeLinear are the only ops that touch int8), every int8 zero point and
    every int8 constant or input a DequantizeLinear reads becomes uint8 plus 128: ``Q`` then gives its int8 result
    plus 128 (the saturation bounds move with it) and ``DQ`` subtracts the same 128;
  - the int8 second operand of MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv and the com.microsoft QGemm,
    DynamicQuantizeMatMul, MatMulIntegerToFloat and DynamicQuantizeLSTM (W and R), where the first is uint8,
    becomes uint8 plus 128, its zero point too (``(w + 128) - (zp + 128) = w - zp``; a missing zero point becomes 128).
The model's outputs keep their types and values. Only the reference changes: timings run the model as it is.
"""

from __future__ import annotations

from typing import Any, Dict, List, Set, Tuple

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

#: op -> (first operand, ((second operand, its zero point), ...)): inputs by position; None: the first operand is
#: float32, quantized to uint8 inside the op.
OPERANDS = {
    "MatMulInteger": (0, ((1, 3),)),
    "ConvInteger": (0, ((1, 3),)),
    "QLinearMatMul": (0, ((3, 5),)),
    "QLinearConv": (0, ((3, 5),)),
    "QGemm": (0, ((3, 5),)),
    "DynamicQuantizeMatMul": (None, ((1, 3),)),
    "MatMulIntegerToFloat": (0, ((1, 5),)),
    "DynamicQuantizeLSTM": (None, ((1, 9), (2, 11))),
}
QDQ = ("QuantizeLinear", "DequantizeLinear")


def with_unsigned_weights(
    model: onnx.ModelProto, feeds: Dict[str, np.ndarray], in_place: bool = False
) -> Tuple[onnx.ModelProto, Dict[str, np.ndarray]]:
    """``model`` (a copy, or itself with ``in_place``) and ``feeds`` with the int8 operands onnxruntime may saturate
    on made uint8 (the same values)."""
    if not in_place:
        model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    types = _elem_types(model)
    shifted = _qdq_int8(graph, types) if _is_qdq_graph(graph, types) else set()
    for node in graph.node:
        for second, zero_point in _signed_operands(node, types):
            shifted.add(node.input[second])
            if zero_point < len(node.input) and node.input[zero_point]:
                shifted.add(node.input[zero_point])
            else:
                _add_zero_point(graph, node, second, zero_point)
    if not shifted:
        return model, feeds
    return model, _shift(graph, shifted, feeds)


def _shift(graph: onnx.GraphProto, shifted: Set[str], feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Every named int8 constant or graph input made uint8 plus 128 (a feed with it); computed int8 values (a
    QuantizeLinear's) follow from their zero points."""
    feeds = dict(feeds)
    consts = {t.name: t for t in graph.initializer}
    inputs = {v.name: v for v in graph.input}
    for name in sorted(shifted):
        if name in consts:
            values = numpy_helper.to_array(consts[name]).astype(np.int16) + 128
            consts[name].CopyFrom(numpy_helper.from_array(values.astype(np.uint8), name))
        elif name in inputs and name in feeds:
            feeds[name] = (feeds[name].astype(np.int16) + 128).astype(np.uint8)
            inputs[name].type.tensor_type.elem_type = TensorProto.UINT8
    for value in list(graph.value_info):  # int8 types recorded for values that are now uint8: inferred again
        if value.type.tensor_type.elem_type == TensorProto.INT8:
            graph.value_info.remove(value)
    return feeds


def _elem_types(model: onnx.ModelProto) -> Dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model)
    values = list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output)
    types = {v.name: v.type.tensor_type.elem_type for v in values}
    types.update({t.name: t.data_type for t in model.graph.initializer})
    return types


def _is_qdq_graph(graph: onnx.GraphProto, types: Dict[str, int]) -> bool:
    """Whether int8 values reach only QuantizeLinear and DequantizeLinear (and no graph output is int8)."""
    touches_int8 = [
        n for n in graph.node if any(types.get(v) == TensorProto.INT8 for v in list(n.input) + list(n.output) if v)
    ]
    outputs_int8 = any(types.get(o.name) == TensorProto.INT8 for o in graph.output)
    return bool(touches_int8) and not outputs_int8 and all(n.op_type in QDQ for n in touches_int8)


def _qdq_int8(graph: onnx.GraphProto, types: Dict[str, int]) -> Set[str]:
    """The int8 zero points of a QDQ graph and the int8 constants or inputs its DequantizeLinear nodes read."""
    names: Set[str] = set()
    computed = {out for n in graph.node for out in n.output}
    for node in graph.node:
        if node.op_type not in QDQ:
            continue
        zero_point = node.input[2] if len(node.input) > 2 else ""
        if zero_point and types.get(zero_point) == TensorProto.INT8:
            names.add(zero_point)
        if node.op_type == "DequantizeLinear" and types.get(node.input[0]) == TensorProto.INT8:
            if not zero_point:
                _add_zero_point(graph, node, 0, 2)
            if node.input[0] not in computed:
                names.add(node.input[0])
    return names


def _signed_operands(node: Any, types: Dict[str, int]) -> List[Tuple[int, int]]:
    """Where an integer op's int8 second operands and their zero points sit (input positions), when its first
    operand is uint8."""
    if node.op_type not in OPERANDS:
        return []
    first, pairs = OPERANDS[node.op_type]
    if first is not None and types.get(node.input[first]) != TensorProto.UINT8:
        return []
    return [(b, z) for b, z in pairs if b < len(node.input) and types.get(node.input[b]) == TensorProto.INT8]


def _zero_point_shape(graph: onnx.GraphProto, node: Any) -> List[int]:
    """A new zero point's shape: a DequantizeLinear's scale's (per tensor or per axis), else a scalar."""
    if node.op_type != "DequantizeLinear":
        return []
    scales = [t for t in graph.initializer if t.name == node.input[1]]
    return list(scales[0].dims) if scales else []


def _add_zero_point(graph: onnx.GraphProto, node: Any, second: int, slot: int) -> None:
    """An int8 operand without a zero point gets one of 128 (uint8) once it is shifted: its zero point was 0."""
    name = node.input[second] + "__zero_point_128"
    if name not in {t.name for t in graph.initializer}:
        shape = _zero_point_shape(graph, node)
        graph.initializer.append(numpy_helper.from_array(np.full(shape, 128, np.uint8), name))
    while len(node.input) <= slot:
        node.input.append("")
    node.input[slot] = name
