"""ConvTranspose (1-D and 2-D); groups, strides, dilations, pads, output_padding, output_shape and auto_pad as
the ONNX spec defines them (the output size itself comes from shape inference).

With constant float32 weights it runs as a GEMM on the library's matmul: per image and group,
``col = W_g^T x_g`` (OC/groups x KH x KW rows, one column per input pixel; the transposed weights made
here, at build time), then a generated col2im sums, for each output position, the columns of the taps
that reach it, from the bias. Otherwise (weights computed at run time, or a col buffer over
:data:`COL_BYTES_MAX`) generated C gathers each output's input taps and weights directly."""

from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, one_of, register
from ..geometry import ConvGeom
from ..kernels.conv import col2im, col_rows, conv_transpose
from .lowering import F32, Lowering


def _convt_check(graph: Graph, node: Node) -> Optional[str]:
    rank = len(graph.values[node.inputs[0]].shape) - 2
    if rank not in (1, 2):
        return "%d-D windows are not supported (1-D and 2-D)" % rank
    if not graph.is_const(node.inputs[1]) and graph.values[node.inputs[1]].dtype != "float32":
        return "the weight must be float32"
    return None


def begin_pads(
    node: Node,
    in_sizes: Sequence[int],
    out_sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dil: Sequence[int],
    out_pad: Sequence[int],
) -> List[int]:
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


#: The largest col buffer (bytes, every image and group) the GEMM path allocates; past it the gather runs.
COL_BYTES_MAX = 256 << 20


def end_pads(
    in_sizes: Sequence[int],
    out_sizes: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dil: Sequence[int],
    out_pad: Sequence[int],
    begin: Sequence[int],
) -> List[int]:
    """The trailing pad of each spatial axis: what the spec's output size leaves after the leading pad."""
    return [
        strides[i] * (in_sizes[i] - 1) + out_pad[i] + (kernel[i] - 1) * dil[i] + 1 - begin[i] - out_sizes[i]
        for i in range(len(in_sizes))
    ]


@register(
    ["ConvTranspose"],
    "library matmul + generated col2im for constant float32 weights, else generated C; "
    "1-D and 2-D, any groups/strides/dilations/pads",
    check=_convt_check,
    auto_pad=one_of("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
    dilations=ANY,
    group=ANY,
    kernel_shape=ANY,
    output_padding=ANY,
    output_shape=ANY,
    pads=ANY,
    strides=ANY,
)
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
    ends = end_pads(xs[2:], ys[2:], kernel, strides, dil, out_pad, pads)
    if rank == 1:  # a 1-D transposed convolution is the 2-D one with H = 1
        xs, ys, kernel, strides, dil = (
            (xs[0], xs[1], 1, xs[2]),
            (ys[0], ys[1], 1, ys[2]),
            [1] + kernel,
            [1] + strides,
            [1] + dil,
        )
        pads, ends = [0] + pads, [0] + ends
    g = ConvGeom(
        xs[0],
        xs[1],
        xs[2],
        xs[3],
        ys[1],
        ys[2],
        ys[3],
        kernel[0],
        kernel[1],
        strides[0],
        strides[1],
        pads[0],
        pads[1],
        ends[0],
        ends[1],
        dil[0],
        dil[1],
        groups,
    )
    if gemm_applies(L, w, g):
        lower_gemm(L, g, out, x, w, bias)
        return
    k = conv_transpose(
        g.n, g.c, g.h, g.w, g.oc, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.dh, g.dw, g.groups, bool(bias)
    )
    L.source(k, [out, x, w] + ([bias] if bias else []))


def gemm_applies(L: Lowering, w: str, g: ConvGeom) -> bool:
    """Constant float32 weights and a col buffer within :data:`COL_BYTES_MAX`."""
    if not L.graph.is_const(w) or L.value(w).dtype != "float32":
        return False
    return g.n * g.groups * col_rows(g) * g.h * g.w * 4 <= COL_BYTES_MAX


def lower_gemm(L: Lowering, g: ConvGeom, out: str, x: str, w: str, bias: str) -> None:
    """One matmul per (image, group) into a col buffer, then one col2im over every output plane."""
    cg, rows, pixels = g.c // g.groups, col_rows(g), g.h * g.w
    weights = L.graph.const(w).astype(np.float32).reshape(g.groups, cg, rows)
    a = L.const(np.ascontiguousarray(weights.transpose(0, 2, 1)), w + "~transposed")  # (groups, rows, cg)
    col = L.temp((g.n, g.groups, rows, pixels), hint="col")
    for n in range(g.n):
        for grp in range(g.groups):
            va = L.subview(a, 4 * grp * rows * cg, (rows, cg))
            vx = L.subview(x, 4 * (n * g.c + grp * cg) * pixels, (cg, pixels))
            vc = L.subview(col, 4 * (n * g.groups + grp) * rows * pixels, (rows, pixels))
            L.library("matmul", F32, [vc, va, vx], {"M": rows, "N": pixels, "K": cg})
    L.source(col2im(g, bool(bias)), [out, col] + ([bias] if bias else []))
