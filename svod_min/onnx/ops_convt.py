"""ConvTranspose (1-D and 2-D): generated C that gathers, for each output position, the input taps that
reach it; groups, strides, dilations, pads, output_padding, output_shape and auto_pad as the ONNX spec
defines them (the output size itself comes from shape inference)."""

from __future__ import annotations

from typing import List, Optional, Sequence

from . import csrc_more
from .ir import Graph, Node
from .lower import Lowering
from .table import ANY, one_of, register


def _convt_check(graph: Graph, node: Node) -> Optional[str]:
    rank = len(graph.values[node.inputs[0]].shape) - 2
    if rank not in (1, 2):
        return "%d-D windows are not supported (1-D and 2-D)" % rank
    if not graph.is_const(node.inputs[1]) and graph.values[node.inputs[1]].dtype != "float32":
        return "the weight must be float32"
    return None


def begin_pads(node: Node, in_sizes: Sequence[int], out_sizes: Sequence[int], kernel: Sequence[int],
               strides: Sequence[int], dil: Sequence[int], out_pad: Sequence[int]) -> List[int]:  # fmt: skip
    """The leading pad of each spatial axis: given, or derived from output_shape / auto_pad (SAME_UPPER puts
    the smaller half first, everything else the larger half, as the spec's formula says)."""
    rank = len(in_sizes)
    mode = node.attrs.get("auto_pad", "NOTSET")
    if "output_shape" not in node.attrs and mode in ("NOTSET", "VALID"):
        return [0] * rank if mode == "VALID" else list(node.attrs.get("pads", [0] * (2 * rank)))[:rank]
    begin = []
    for i in range(rank):
        total = strides[i] * (in_sizes[i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1 - out_sizes[i]
        begin.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
    return begin


@register(["ConvTranspose"], "generated C; 1-D and 2-D, any groups/strides/dilations/pads", check=_convt_check,
          auto_pad=one_of("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"), dilations=ANY, group=ANY, kernel_shape=ANY,
          output_padding=ANY, output_shape=ANY, pads=ANY, strides=ANY)  # fmt: skip
def lower_conv_transpose(L: Lowering, node: Node) -> None:
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    out = node.outputs[0]
    xs, ws, ys = L.value(x).shape, L.value(w).shape, L.value(out).shape
    rank = len(xs) - 2
    groups = int(node.attrs.get("group", 1))
    kernel = list(ws[2:])
    strides = list(node.attrs.get("strides", [1] * rank))
    dil = list(node.attrs.get("dilations", [1] * rank))
    out_pad = list(node.attrs.get("output_padding", [0] * rank))
    pads = begin_pads(node, xs[2:], ys[2:], kernel, strides, dil, out_pad)
    if rank == 1:  # a 1-D transposed convolution is the 2-D one with H = 1
        xs, ys, kernel, strides, dil, pads = (xs[0], xs[1], 1, xs[2]), (ys[0], ys[1], 1, ys[2]), [1] + kernel, [1] + strides, [1] + dil, [0] + pads
    k = csrc_more.conv_transpose(xs[0], xs[1], xs[2], xs[3], ys[1], ys[2], ys[3], kernel[0], kernel[1], strides[0], strides[1],
                                 pads[0], pads[1], dil[0], dil[1], groups, bool(bias))  # fmt: skip
    L.source(k, [out, x, w] + ([bias] if bias else []))
