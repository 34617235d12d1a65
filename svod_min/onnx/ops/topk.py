"""TopK as generated C (kernels/topk.py): k from the attribute (opset 1) or the constant second input (opset 10 on;
``build --pin`` makes a graph input one), checked against the axis at build (frontend/indices.py)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.table import ANY, one_of, register
from ..kernels.topk import topk
from .lowering import Lowering
from .reduce import ARG_DATA


def _check(graph: Graph, node: Node) -> Optional[str]:
    if len(node.inputs) > 1 and node.inputs[1]:
        if not graph.is_const(node.inputs[1]):
            return "k must be a constant (it decides the outputs' shape)"
    elif "k" not in node.attrs:
        return "k is missing"
    return None


@register(
    ["TopK"],
    "generated C; int64 indices, equal values in index order, NaN above every number; always sorted",
    check=_check,
    dtypes=ARG_DATA,
    axis=ANY,
    k=ANY,
    largest=one_of(0, 1),
    sorted=one_of(0, 1),
)
def lower_topk(L: Lowering, node: Node) -> None:
    x, values, indices = node.inputs[0], node.outputs[0], node.outputs[1]
    shape = L.value(x).shape
    axis = normalize_axis(int(node.attrs.get("axis", -1)), len(shape))
    if len(node.inputs) > 1 and node.inputs[1]:
        k = int(np.asarray(L.graph.const(node.inputs[1])).reshape(-1)[0])
    else:
        k = int(node.attrs["k"])
    if k == 0 or L.nothing_to_write([values, indices]):
        return
    outer, red, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
    # sorted=0 leaves the order to the runtime; the sorted one is as good as any (onnxruntime's heap order is not
    # one a user can rely on).
    kernel = topk(outer, red, inner, k, bool(node.attrs.get("largest", 1)), L.value(x).dtype)
    L.source(kernel, [values, indices, x], outputs=(0, 1))
