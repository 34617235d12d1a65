"""Compress with its condition known at build time (a constant, or an input pinned with ``--pin``): a Gather with
constant indices, the positions the condition selects, along the axis (or along the flattened input without one).
A condition fed at run time decides the output's shape, so the build asks for a pin (docs/onnx.md, "Inputs that
decide shapes")."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.table import ANY, register
from ..kernels.copy import gather
from .lowering import Lowering
from .shape import MOVABLE


def _selected(graph: Graph, node: Node) -> np.ndarray:
    """The positions the condition keeps, along the axis (or of the flattened input)."""
    shape = graph.values[node.inputs[0]].shape
    n = shape[normalize_axis(int(node.attrs["axis"]), len(shape))] if "axis" in node.attrs else int(np.prod(shape))
    return np.flatnonzero(graph.const(node.inputs[1]).reshape(-1)[:n]).astype(np.int64)


def _compress_check(graph: Graph, node: Node) -> Optional[str]:
    cond = node.inputs[1]
    if not graph.is_const(cond):
        return "condition %r must be a constant (it decides the output's shape: build with --pin %s=...)" % (cond, cond)
    shape = graph.values[node.inputs[0]].shape
    n = shape[normalize_axis(int(node.attrs["axis"]), len(shape))] if "axis" in node.attrs else int(np.prod(shape))
    values = graph.const(cond).reshape(-1)
    if values[n:].any():
        where = "axis %d" % int(node.attrs["axis"]) if "axis" in node.attrs else "the flattened input"
        return "condition %r selects position %d, past the %d positions of %s" % (
            cond,
            int(np.flatnonzero(values[n:])[0]) + n,
            n,
            where,
        )
    return None


@register(
    ["Compress"],
    "any dtype; a Gather of the selected positions (generated C); condition constant or pinned (--pin)",
    check=_compress_check,
    dtypes=MOVABLE,
    axis=ANY,
)
def lower_compress(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    if L.value(out).size == 0:
        return  # nothing selected
    shape, dtype = L.value(x).shape, L.value(x).dtype
    if "axis" in node.attrs:
        axis = normalize_axis(int(node.attrs["axis"]), len(shape))
        outer, n, inner = int(np.prod(shape[:axis])), int(shape[axis]), int(np.prod(shape[axis + 1 :]))
    else:
        outer, n, inner = 1, int(np.prod(shape)), 1
    picks = _selected(L.graph, node)
    indices = L.const(picks, node.inputs[1] + "~positions")
    L.source(gather(outer, n, inner, len(picks), "long long", dtype, False), [out, x, indices])
