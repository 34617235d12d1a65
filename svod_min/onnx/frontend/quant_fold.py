"""QuantizeLinear and DequantizeLinear of constants folded at build: a QDQ model's quantized weights and biases
become the float32 tensors Conv, MatMul and Gemm lower as in any float model.

onnx's reference evaluator has neither op before opset 19, and the fold must round as onnxruntime's kernels do: for
DequantizeLinear, the difference ``x - zero_point`` exact (int64 here), converted to float32 once, then multiplied
by the float32 scale (one rounding, numpy's IEEE float32 product).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from onnx import helper, numpy_helper

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


def fuse_qdq_groups(model: Any) -> int:
    """Rewrite each QDQ MatMul and Conv group, the forms ``quantize_static`` writes, into one QLinearMatMul or
    QLinearConv on the integer tensors (ops/quant_integer.py lowers them onto the int8 GEMM): a ``MatMul`` or
    ``Conv`` of DequantizeLinear outputs whose only reader is a ``QuantizeLinear`` (per tensor) becomes
    ``QLinearMatMul(a_q, ..., b_q, ..., y_scale, y_zero_point)`` / ``QLinearConv(x_q, ..., w_q, ..., y_scale,
    y_zero_point, bias)`` writing that QuantizeLinear's output. The activation's dequantization per tensor; MatMul's
    b per tensor or, for a constant 2-D b, per column (axis 1 of [K, N]); Conv's constant weight per tensor or per
    output channel (axis 0), one group only (the others keep the float convolution), its bias an int32
    DequantizeLinear whose scale is x_scale * w_scale (as quantize_static writes it) and zero point 0. The sums are
    exact in int32 and requantized once, as onnxruntime computes a group its QDQ transformations fuse (where it
    computes in float instead, a result may round one quantum the other way). DequantizeLinear nodes no one reads
    any more are dropped. Returns how many groups were rewritten."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output if o}
    readers: Dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    outputs = {o.name for o in graph.output}
    for o in outputs:
        readers[o] = readers.get(o, 0) + 1
    reader_of = {i: n for n in graph.node for i in n.input if i}
    fused: List[Tuple[Any, Any, Any]] = []
    for node in graph.node:
        if node.op_type not in ("MatMul", "Conv") or readers.get(node.output[0], 0) != 1:
            continue
        q = reader_of.get(node.output[0])
        if q is None or q.op_type != "QuantizeLinear" or node.output[0] in outputs:
            continue
        new = _group(node, q, producer, inits, graph)
        if new is not None:
            fused.append((node, q, new))
    drop = set()
    for node, q, new in fused:
        node.CopyFrom(new)
        drop.add(id(q))
    if fused:
        keep = [n for n in graph.node if id(n) not in drop]
        del graph.node[:]
        graph.node.extend(keep)
        drop_unread_dequantize(graph)
    return len(fused)


def _group(node: Any, q: Any, producer: Dict[str, Any], inits: Dict[str, Any], graph: Any) -> Optional[Any]:
    """The QLinearMatMul / QLinearConv node that computes MatMul/Conv ``node`` and its QuantizeLinear ``q``, or None
    where the group is not one of the forms rewritten."""
    conv = node.op_type == "Conv"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if len(node.input) not in ((2, 3) if conv else (2,)):
        return None
    if conv and int(attrs.get("group", 1)) != 1:
        return None
    a_args = _dq_args(producer.get(node.input[0]), inits, None)
    b_args = _dq_args(producer.get(node.input[1]), inits, (0, None) if conv else (1, 2))
    y_args = per_tensor_params(q, inits)
    if a_args is None or b_args is None or y_args is None:
        return None
    if conv and (b_args[0] not in inits or len(inits[b_args[0]].dims) not in (3, 4)):  # QLinearConv: 1-D and 2-D
        return None
    bias: List[str] = []
    if conv and len(node.input) == 3 and node.input[2]:
        b = _conv_bias(producer.get(node.input[2]), inits, a_args[1], b_args[1])
        if b is None:
            return None
        bias = [b]
    ins: List[str] = []
    for data, scale, zp, dtype in (a_args, b_args):
        if not zp:  # the QLinear ops take every zero point
            zp = "%s~zero_point_%s" % (q.output[0], data)
            graph.initializer.append(numpy_helper.from_array(np.zeros((), dtype), zp))
        ins += [data, scale, zp]
    ins += list(y_args) + bias
    op = "QLinearConv" if conv else "QLinearMatMul"
    new = helper.make_node(op, ins, [q.output[0]], name=(node.name or q.output[0]) + "~qlinear")
    new.attribute.extend(node.attribute)
    return new


def _conv_bias(node: Any, inits: Dict[str, Any], x_scale: str, w_scale: str) -> Optional[str]:
    """The int32 data of a Conv's bias DequantizeLinear whose scale is x_scale * w_scale (float32) and whose zero
    point is 0, as QLinearConv's bias input is defined; None otherwise."""
    if node is None or node.op_type != "DequantizeLinear" or node.input[0] not in inits:
        return None
    if any(n not in inits for n in node.input[1:] if n):
        return None
    data = numpy_helper.to_array(inits[node.input[0]])
    scale = numpy_helper.to_array(inits[node.input[1]])
    zp = node.input[2] if len(node.input) > 2 and node.input[2] else ""
    if data.dtype != np.int32 or data.ndim != 1 or (zp and numpy_helper.to_array(inits[zp]).any()):
        return None
    want = np.multiply(numpy_helper.to_array(inits[x_scale]), numpy_helper.to_array(inits[w_scale]), dtype=np.float32)
    if (
        scale.dtype != np.float32
        or np.broadcast_to(want.reshape(-1), data.shape).tolist()
        != np.broadcast_to(scale.reshape(-1), data.shape).tolist()
    ):
        return None
    return node.input[0]


def _dq_args(
    node: Any, inits: Dict[str, Any], per_axis: Optional[Tuple[int, Optional[int]]]
) -> Optional[Tuple[str, str, str, Any]]:
    """(data, scale, zero point or "", integer dtype) of a DequantizeLinear a QLinear op can take, else None;
    ``per_axis``: (axis, rank or None) where a constant x may be dequantized per slice of that axis."""
    if node is None or node.op_type != "DequantizeLinear" or node.input[1] not in inits:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    zp = node.input[2] if len(node.input) > 2 else ""
    if attrs.get("block_size", 0) or (zp and zp not in inits):
        return None
    scale = numpy_helper.to_array(inits[node.input[1]])
    data = node.input[0]
    if not zp and data not in inits:  # the zero point's dtype is x's, unknown here
        return None
    xtype = helper.tensor_dtype_to_np_dtype(inits[data].data_type) if data in inits else None
    zpv = numpy_helper.to_array(inits[zp]) if zp else np.zeros((), xtype)
    if scale.dtype != np.float32 or zpv.dtype.name not in ("int8", "uint8") or zpv.size != scale.size:
        return None
    if scale.size != 1:
        w = inits.get(data)
        if per_axis is None or w is None or (per_axis[1] is not None and len(w.dims) != per_axis[1]):
            return None
        axis = per_axis[0]
        if len(w.dims) < 2 or scale.shape != (w.dims[axis],) or int(attrs.get("axis", 1)) % len(w.dims) != axis:
            return None
    elif scale.ndim > 1:
        return None
    if xtype is not None and xtype != zpv.dtype:
        return None
    return data, node.input[1], zp, zpv.dtype


def per_tensor_params(node: Any, inits: Dict[str, Any]) -> Optional[Tuple[str, str]]:
    """(scale, zero point) names of a per-tensor QuantizeLinear (or DequantizeLinear) of int8/uint8 whose float32
    scale and zero point are constants, else None."""
    if len(node.input) < 3 or node.input[1] not in inits or node.input[2] not in inits:
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if attrs.get("output_dtype", 0) or attrs.get("block_size", 0) or not attrs.get("saturate", 1):
        return None
    scale, zp = (numpy_helper.to_array(inits[n]) for n in node.input[1:3])
    if scale.dtype != np.float32 or scale.size != 1 or zp.size != 1 or zp.dtype.name not in ("int8", "uint8"):
        return None
    return node.input[1], node.input[2]


def drop_unread_dequantize(graph: Any) -> None:
    """Drop DequantizeLinear nodes whose outputs nothing reads (a group's, once rewritten), repeatedly."""
    while True:
        read = {i for n in graph.node for i in n.input} | {o.name for o in graph.output}
        keep = [n for n in graph.node if n.op_type != "DequantizeLinear" or n.output[0] in read]
        if len(keep) == len(graph.node):
            return
        del graph.node[:]
        graph.node.extend(keep)
