"""TensorScatter (opset 24): a KV cache's update written into a copy of the past cache along its sequence axis, at
each batch element's write index (linear, or circular: modulo the cache's length), on every dtype. The write
indices are untrusted: constant ones are checked at build (frontend/indices.py), ones from data by the kernel (a
bad one is reported, exit 2, and its rows keep the past cache's values; docs/onnx.md, "Indices")."""

from __future__ import annotations

import math
from typing import Optional

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, one_of, register
from ..kernels.tensor_scatter import tensor_scatter
from .lowering import Lowering
from .shape import MOVABLE


def _axis(graph: Graph, node: Node) -> int:
    rank = len(graph.values[node.inputs[0]].shape)
    axis = int(node.attrs.get("axis", -2))
    return axis + rank if axis < 0 else axis


def _tensor_scatter_check(graph: Graph, node: Node) -> Optional[str]:
    past, update = graph.values[node.inputs[0]].shape, graph.values[node.inputs[1]].shape
    axis = _axis(graph, node)
    if not 1 <= axis < len(past):
        return "axis %r of a rank-%d cache (the sequence axis is one of axes 1 to %d; axis 0 is the batch)" % (
            node.attrs.get("axis", -2),
            len(past),
            len(past) - 1,
        )
    same = len(update) == len(past) and all(u == p for i, (u, p) in enumerate(zip(update, past)) if i != axis)
    if not same or update[axis] > past[axis]:
        return "update of shape %s for a cache of shape %s (they differ only along axis %d, no longer than it)" % (
            list(update),
            list(past),
            axis,
        )
    if len(node.inputs) > 2 and node.inputs[2]:
        w = graph.values[node.inputs[2]]
        if w.dtype != "int64" or w.shape != (past[0],):
            return "write_indices %r is %s %s (ONNX: int64 [%d], one per batch element)" % (
                w.name,
                w.dtype,
                list(w.shape),
                past[0],
            )
    return None


@register(
    ["TensorScatter"],
    "generated C, any dtype, linear and circular; write_indices constant (checked at build) or from data (checked "
    "by the kernel: an index outside [0, max - seq] (circular: a negative one) is reported, exit 2)",
    check=_tensor_scatter_check,
    dtypes=MOVABLE,
    axis=ANY,
    mode=one_of("linear", "circular"),
)
def lower_tensor_scatter(L: Lowering, node: Node) -> None:
    past, update, out = node.inputs[0], node.inputs[1], node.outputs[0]
    w = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    shape, seq = L.value(past).shape, int(L.value(update).shape[_axis(L.graph, node)])
    axis = _axis(L.graph, node)
    circular = node.attrs.get("mode", "linear") == "circular"
    prefix, inner = int(math.prod(shape[:axis])), int(math.prod(shape[axis + 1 :]))
    kernel = tensor_scatter(
        prefix, int(shape[0]), int(shape[axis]), seq, inner, circular, w is not None, L.value(past).dtype
    )
    if w is None:
        L.source(kernel, [out, past, update])
        return
    why = "axis %d of %r has %d positions, the update %d%s" % (
        axis,
        past,
        int(shape[axis]),
        seq,
        " (circular: any non-negative index, modulo %d)" % shape[axis] if circular else "",
    )
    status = L.status_slots(node.label(), "write_indices %r" % w, L.value(w).shape, why, kernel.chunks)
    L.source(kernel, [out, past, update, w, status], outputs=(0, 4))
