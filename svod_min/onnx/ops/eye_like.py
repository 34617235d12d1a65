"""EyeLike: ones on the k-th diagonal of a 2-D tensor shaped as its input. Shapes are fixed at build and the input's
values are never read, so the result is a constant of the bundle (copied into the output where it is one)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ...dtypes import ALL_DTYPES
from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from .lowering import Lowering


def _eye_like_check(graph: Graph, node: Node) -> Optional[str]:
    shape = graph.values[node.inputs[0]].shape
    if len(shape) != 2:
        return "input of rank %d (EyeLike takes 2-D tensors)" % len(shape)
    return None


@register(
    ["EyeLike"],
    "a constant of the output's dtype (shapes are fixed at build; the input's values are not read)",
    check=_eye_like_check,
    dtypes=tuple(d.name for d in ALL_DTYPES),
    dtype=ANY,
    k=ANY,
)
def lower_eye_like(L: Lowering, node: Node) -> None:
    out = node.outputs[0]
    v = L.value(out)
    eye = np.eye(v.shape[0], v.shape[1], int(node.attrs.get("k", 0))).astype(v.dtype)
    L.view(out, L.const(eye, out + "~eye"))
