"""DeformConv (opset 19+), 2-D float32: each tap of the window sampled bilinearly at its offset position (offsets fed
at run time or constant, per offset group), scaled by the optional mask, summed with the weights (groups), plus the
optional bias; one generated kernel (kernels/templates/deform_conv.c.j2). Offsets are coordinates, not indices: any
value is valid, and a sample outside the input reads zeros."""

from __future__ import annotations

from typing import List, Optional, Tuple

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..kernels.deform_conv import deform_conv
from .lowering import Lowering

#: The most floats one output pixel's columns (input channels per group x taps) may hold: they live on the stack.
MAX_COLUMNS = 1 << 14


def _geometry(graph: Graph, node: Node) -> Tuple[List[int], List[int], List[int], List[int]]:
    """kernel_shape, strides, pads (begin then end), dilations, defaults filled in."""
    kernel = [int(k) for k in node.attrs.get("kernel_shape", graph.values[node.inputs[1]].shape[2:])]
    strides = [int(s) for s in node.attrs.get("strides", [1, 1])]
    pads = [int(p) for p in node.attrs.get("pads", [0, 0, 0, 0])]
    dilations = [int(d) for d in node.attrs.get("dilations", [1, 1])]
    return kernel, strides, pads, dilations


def _input(node: Node, i: int) -> Optional[str]:
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else None


def _deform_conv_check(graph: Graph, node: Node) -> Optional[str]:
    x, w, offset = (graph.values[node.inputs[i]].shape for i in range(3))
    out = graph.values[node.outputs[0]].shape
    if len(x) != 4 or len(w) != 4:
        return "input of rank %d (2-D deformable convolution is implemented)" % len(x)
    kernel, strides, pads, dilations = _geometry(graph, node)
    if len(kernel) != 2 or len(strides) != 2 or len(pads) != 4 or len(dilations) != 2 or list(w[2:]) != kernel:
        return "kernel_shape %s, strides, pads and dilations do not fit weights of shape %s" % (kernel, list(w))
    groups, offset_groups = int(node.attrs.get("group", 1)), int(node.attrs.get("offset_group", 1))
    if groups < 1 or offset_groups < 1 or x[1] != w[1] * groups or w[0] % groups or x[1] % offset_groups:
        return "group %d and offset_group %d do not divide input %s and weights %s" % (
            groups,
            offset_groups,
            list(x),
            list(w),
        )
    if min(strides + dilations) < 1 or min(pads) < 0:
        return "strides and dilations must be positive and pads not negative"
    spatial = [
        (x[2 + a] + pads[a] + pads[2 + a] - dilations[a] * (kernel[a] - 1) - 1) // strides[a] + 1 for a in (0, 1)
    ]
    taps = kernel[0] * kernel[1]
    want = [x[0], offset_groups * taps * 2] + spatial
    if list(offset) != want or list(out) != [x[0], w[0]] + spatial:
        return "offset of shape %s and output %s (expected %s and %s)" % (
            list(offset),
            list(out),
            want,
            [x[0], w[0]] + spatial,
        )
    bias, mask = _input(node, 3), _input(node, 4)
    if bias is not None and graph.values[bias].shape != (w[0],):
        return "bias of shape %s (expected [%d])" % (list(graph.values[bias].shape), w[0])
    if mask is not None and list(graph.values[mask].shape) != [x[0], offset_groups * taps] + spatial:
        return "mask of shape %s (expected %s)" % (
            list(graph.values[mask].shape),
            [x[0], offset_groups * taps] + spatial,
        )
    if w[1] * taps > MAX_COLUMNS:
        return "%d input channels per group x %d taps (at most %d are implemented)" % (w[1], taps, MAX_COLUMNS)
    return None


@register(
    ["DeformConv"],
    "generated C, 2-D float32: bilinear samples at the offsets (zeros outside the input), groups, offset groups, "
    "optional bias and mask",
    check=_deform_conv_check,
    dilations=ANY,
    group=ANY,
    kernel_shape=ANY,
    offset_group=ANY,
    pads=ANY,
    strides=ANY,
)
def lower_deform_conv(L: Lowering, node: Node) -> None:
    x, w, offset, out = node.inputs[0], node.inputs[1], node.inputs[2], node.outputs[0]
    bias, mask = _input(node, 3), _input(node, 4)
    kernel, strides, pads, dilations = _geometry(L.graph, node)
    xs, ws, outs = L.value(x).shape, L.value(w).shape, L.value(out).shape
    k = deform_conv(
        int(xs[0]),
        int(xs[1]),
        [int(d) for d in xs[2:]],
        int(ws[0]),
        [int(d) for d in outs[2:]],
        kernel,
        strides,
        pads[:2],
        dilations,
        int(node.attrs.get("group", 1)),
        int(node.attrs.get("offset_group", 1)),
        bias is not None,
        mask is not None,
    )
    L.source(k, [out, x, w, offset] + [n for n in (bias, mask) if n is not None])
