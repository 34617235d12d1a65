"""Ops along one axis, generated C (:mod:`..kernels.axis`): CumSum (exclusive, reverse; its axis a constant or fed at
run time, then checked by the kernel as indices are: docs/onnx.md, "Indices"), Hardmax and LpNormalization."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.table import ANY, one_of, register
from ..kernels.axis import cumsum, cumsum_any_axis, hardmax, lp_norm, split_sizes
from .lowering import Lowering


def _cumsum_check(graph: Graph, node: Node) -> Optional[str]:
    axis = node.inputs[1]
    rank = len(graph.values[node.inputs[0]].shape)
    if rank == 0:
        return "a scalar input (CumSum runs along an axis)"
    if graph.values[axis].size != 1:
        return "the axis must hold one value (it holds %d)" % graph.values[axis].size
    if not graph.is_const(axis):
        return None  # checked by the kernel at run time
    value = int(graph.const(axis).reshape(-1)[0])
    if not -rank <= value < rank:
        return "axis %d of a tensor of rank %d" % (value, rank)
    return None


@register(
    ["CumSum"],
    "generated C: a running sum per line in the element type, in onnxruntime's order (integers wrap); the axis "
    "constant (compiled in) or fed at run time (checked by the kernel: a bad one is reported, exit 2)",
    check=_cumsum_check,
    dtypes=("float32", "float64", "int32", "int64"),
    exclusive=one_of(0, 1),
    reverse=one_of(0, 1),
)
def lower_cumsum(L: Lowering, node: Node) -> None:
    x, axis, out = node.inputs[0], node.inputs[1], node.outputs[0]
    shape = L.value(x).shape
    exclusive, reverse = bool(node.attrs.get("exclusive", 0)), bool(node.attrs.get("reverse", 0))
    dtype = L.value(x).dtype
    if L.graph.is_const(axis):
        outer, n, inner = split_sizes(shape, normalize_axis(int(L.graph.const(axis).reshape(-1)[0]), len(shape)))
        L.source(cumsum(outer, n, inner, exclusive, reverse, dtype), [out, x])
        return
    kernel = cumsum_any_axis(shape, exclusive, reverse, dtype, "int" if L.value(axis).dtype == "int32" else "long long")
    why = "%r has %d dims" % (x, len(shape))
    status = L.status_slots(node.label(), "axis %r" % axis, L.value(axis).shape, why, kernel.chunks)
    L.source(kernel, [out, x, axis, status], outputs=(0, 3))


@register(
    ["Hardmax"],
    "generated C: 1 at the first largest element of each line (opset < 13: of the flattened trailing axes)",
    dtypes=("float32", "float64"),
    axis=ANY,
)
def lower_hardmax(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    rank = max(len(shape), 1)
    if L.graph.opset < 13:  # the input coerced to 2-D at the axis
        axis = normalize_axis(int(node.attrs.get("axis", 1)), rank)
        outer, n, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis:])), 1
    else:
        outer, n, inner = split_sizes(shape, normalize_axis(int(node.attrs.get("axis", -1)), rank))
    L.source(hardmax(outer, n, inner, L.value(x).dtype), [out, x])


@register(
    ["LpNormalization"],
    "generated C: each line over its L1 or L2 norm (summed in double); a zero norm gives zeros as in onnxruntime",
    dtypes=("float32", "float64"),
    axis=ANY,
    p=one_of(1, 2),
)
def lower_lp_normalization(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    outer, n, inner = split_sizes(shape, normalize_axis(int(node.attrs.get("axis", -1)), max(len(shape), 1)))
    L.source(lp_norm(outer, n, inner, int(node.attrs.get("p", 2)), L.value(x).dtype), [out, x])
