"""DepthToSpace and SpaceToDepth: a reshape to 6-D, a transpose and a reshape back, so one permuting copy
(:func:`.shape.permuted`: the library's permute for float32 where the axes merge to 4, generated C otherwise), any
dtype."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, one_of, register
from ..geometry import contiguous_strides
from .lowering import Lowering
from .shape import MOVABLE, permuted


def _blocks_check(graph: Graph, node: Node) -> Optional[str]:
    shape = graph.values[node.inputs[0]].shape
    b = int(node.attrs.get("blocksize", 0))
    if len(shape) != 4:
        return "input of rank %d (%s takes 4-D tensors)" % (len(shape), node.op)
    if b < 1:
        return "blocksize=%d (must be at least 1)" % b
    n, c, h, w = shape
    if node.op == "DepthToSpace" and c % (b * b):
        return "%d channels do not split into blocks of %d x %d" % (c, b, b)
    if node.op == "SpaceToDepth" and (h % b or w % b):
        return "a %d x %d plane does not split into blocks of %d x %d" % (h, w, b, b)
    return None


def _transposed(shape: Sequence[int], perm: Sequence[int]) -> Tuple[List[int], List[int]]:
    """(shape after the transpose, source strides of each of its axes) of a contiguous tensor of ``shape``."""
    strides = contiguous_strides(shape)
    return [shape[p] for p in perm], [strides[p] for p in perm]


@register(
    ["DepthToSpace"],
    "any dtype; one permuting copy (library permute for float32 where it fits, generated C otherwise)",
    check=_blocks_check,
    dtypes=MOVABLE,
    blocksize=ANY,
    mode=one_of("DCR", "CRD"),
)
@register(
    ["SpaceToDepth"],
    "any dtype; one permuting copy (library permute for float32 where it fits, generated C otherwise)",
    check=_blocks_check,
    dtypes=MOVABLE,
    blocksize=ANY,
)
def lower_space_depth(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    n, c, h, w = L.value(x).shape
    b = int(node.attrs["blocksize"])
    if node.op == "SpaceToDepth":
        six, perm = [n, c, h // b, b, w // b, b], [0, 3, 5, 1, 2, 4]
    elif node.attrs.get("mode", "DCR") == "DCR":
        six, perm = [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    else:
        six, perm = [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    shape, strides = _transposed(six, perm)
    permuted(L, out, x, shape, strides, 0, node.op.lower())
