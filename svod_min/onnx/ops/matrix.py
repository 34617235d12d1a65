"""Ops on the last two axes as a batch of matrices: Trilu (any dtype; k a constant or fed at run time) and Det
(float32, float64: LU with partial pivoting in double)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..kernels.matrix import det, trilu
from .lowering import Lowering
from .shape import MOVABLE


def _trilu_check(graph: Graph, node: Node) -> Optional[str]:
    shape = graph.values[node.inputs[0]].shape
    if len(shape) < 2:
        return "input of rank %d (Trilu takes rank 2 or more)" % len(shape)
    if len(node.inputs) > 1 and node.inputs[1]:
        k = graph.values[node.inputs[1]]
        if k.dtype != "int64" or k.size != 1:
            return "k must be one int64 (ONNX: a scalar); %r is %s of shape %s" % (k.name, k.dtype, list(k.shape))
    return None


@register(
    ["Trilu"],
    "generated C, any dtype; k a constant (compiled in) or fed at run time (any value: a diagonal beyond the "
    "matrix keeps all or nothing)",
    check=_trilu_check,
    dtypes=MOVABLE,
    upper=ANY,
)
def lower_trilu(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    k_name = node.inputs[1] if len(node.inputs) > 1 and node.inputs[1] else ""
    k: Optional[int] = 0
    if k_name and L.graph.is_const(k_name):
        k = int(np.asarray(L.graph.const(k_name)).reshape(-1)[0])
    elif k_name:
        k = None
    rows, cols = int(shape[-2]), int(shape[-1])
    batch = int(np.prod(shape[:-2]))
    kernel = trilu(batch, rows, cols, bool(node.attrs.get("upper", 1)), k, L.value(x).dtype)
    L.source(kernel, [out, x] + ([k_name] if k is None else []))


def _det_check(graph: Graph, node: Node) -> Optional[str]:
    shape = graph.values[node.inputs[0]].shape
    if len(shape) < 2 or shape[-1] != shape[-2]:
        return "input of shape %s (Det takes [..., M, M])" % list(shape)
    return None


@register(
    ["Det"],
    "generated C, float32 and float64: LU factorisation with partial pivoting, in double",
    check=_det_check,
    dtypes=("float32", "float64"),
)
def lower_det(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    m, items = int(shape[-1]), int(np.prod(shape[:-2]))
    work = L.temp([items, m, m], "float64", "det")
    L.source(det(items, m, L.value(x).dtype), [out, x, work], outputs=(0, 2))
