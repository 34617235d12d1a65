"""Col2Im: columns of sliding blocks ([N, C * prod(block_shape), L]) summed back into images ([N, C, *image_shape])
over any number of spatial axes, with strides, pads and dilations; overlapping blocks add up. image_shape and
block_shape decide the output's shape, so they are constants (or inputs pinned at build, ``build --pin``); a
generated kernel accumulates each image (kernels/templates/col2im.c.j2)."""

from __future__ import annotations

import math
from typing import List, Optional, Tuple

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..kernels.col2im import col2im
from .lowering import Lowering


def _geometry(graph: Graph, node: Node) -> Tuple[List[int], List[int], List[int], List[int], List[int], List[int]]:
    """image_shape, block_shape, strides, leading pads, trailing pads, dilations (attribute defaults filled in)."""
    image = [int(v) for v in graph.values[node.inputs[1]].const.reshape(-1)]  # type: ignore[union-attr]
    block = [int(v) for v in graph.values[node.inputs[2]].const.reshape(-1)]  # type: ignore[union-attr]
    rank = len(image)
    strides = [int(v) for v in node.attrs.get("strides", [1] * rank)]
    pads = [int(v) for v in node.attrs.get("pads", [0] * (2 * rank))]
    dilations = [int(v) for v in node.attrs.get("dilations", [1] * rank)]
    return image, block, strides, pads[:rank], pads[rank:], dilations


def _blocks(image: int, block: int, stride: int, begin: int, end: int, dilation: int) -> int:
    """Block positions along one axis: those whose dilated block fits in the padded image."""
    return (image + begin + end - dilation * (block - 1) - 1) // stride + 1


def _col2im_check(graph: Graph, node: Node) -> Optional[str]:
    if len(node.inputs) < 3 or any(graph.values[n].const is None for n in node.inputs[1:3]):
        return "image_shape and block_shape decide the output's shape: they must be constants (or pinned, --pin)"
    image, block, strides, begin, end, dilations = _geometry(graph, node)
    rank = len(image)
    if rank == 0 or len(block) != rank:
        return "image_shape %s and block_shape %s must have one value per spatial axis" % (image, block)
    if len(strides) != rank or len(dilations) != rank or len(begin) != rank or len(end) != rank:
        return "strides, dilations and pads must have %d, %d and %d values" % (rank, rank, 2 * rank)
    if min(image + block + strides + dilations) < 1 or min(begin + end) < 0:
        return "image_shape, block_shape, strides and dilations must be positive and pads not negative"
    shape = graph.values[node.inputs[0]].shape
    taps = math.prod(block)
    blocks = [_blocks(*a) for a in zip(image, block, strides, begin, end, dilations)]
    if len(shape) != 3 or shape[1] % taps or min(blocks) < 1 or shape[2] != math.prod(blocks):
        return "input of shape %s does not hold blocks %s at %s positions (expected [N, C * %d, %d])" % (
            list(shape),
            block,
            blocks,
            taps,
            math.prod(blocks),
        )
    return None


@register(
    ["Col2Im"],
    "generated C, any number of spatial axes; strides, pads, dilations; image_shape and block_shape constants or "
    "pinned (--pin)",
    check=_col2im_check,
    dilations=ANY,
    pads=ANY,
    strides=ANY,
)
def lower_col2im(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    image, block, strides, begin, end, dilations = _geometry(L.graph, node)
    shape = L.value(x).shape
    images = int(shape[0]) * (int(shape[1]) // math.prod(block))
    blocks = [_blocks(*a) for a in zip(image, block, strides, begin, end, dilations)]
    L.source(col2im(images, image, block, blocks, strides, begin, dilations), [out, x])
