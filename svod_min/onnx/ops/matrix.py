"""Ops on the last two axes as a batch of matrices: Trilu (any dtype; k a constant or fed at run time)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..kernels.matrix import trilu
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
