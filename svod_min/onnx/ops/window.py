"""A Conv's or pool's window from its node: the attribute checks shared by both, the pads (auto_pad resolved) and the
:class:`~svod_min.onnx.geometry.ConvGeom` its kernels take."""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..frontend.ir import Graph, Node
from ..frontend.table import one_of
from ..geometry import ConvGeom
from .lowering import Lowering

PAD_MODES = one_of("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _spatial_rank(graph: Graph, node: Node) -> int:
    return len(graph.values[node.inputs[0]].shape) - 2


def window_check(graph: Graph, node: Node) -> Optional[str]:
    rank = _spatial_rank(graph, node)
    if rank not in (1, 2):
        return "%d-D windows are not supported (1-D and 2-D)" % rank
    if node.op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
        return "the Indices output is not supported"
    if node.op == "Conv" and graph.values[node.inputs[1]].shape[2:] != tuple(
        node.attrs.get("kernel_shape", graph.values[node.inputs[1]].shape[2:])
    ):
        return "kernel_shape does not match the weight"
    if node.op in ("MaxPool", "AveragePool") and node.attrs.get("ceil_mode", 0):
        return ceil_window_check(graph, node)
    return None


def ceil_window_check(graph: Graph, node: Node) -> Optional[str]:
    """A ceil_mode output whose last window starts past the input and its leading pad: onnx's shape inference
    keeps that window, onnxruntime drops it (one output fewer), so the two disagree on the output's shape."""
    in_hw = list(graph.values[node.inputs[0]].shape[2:])
    out_hw = list(graph.values[node.outputs[0]].shape[2:])
    kernel = list(node.attrs["kernel_shape"])
    strides = list(node.attrs.get("strides", [1] * len(in_hw)))
    dil = list(node.attrs.get("dilations", [1] * len(in_hw)))
    pads = window_pads(node, in_hw, kernel, strides, dil)
    for axis, (size, out, stride, begin) in enumerate(zip(in_hw, out_hw, strides, pads)):
        if isinstance(out, int) and (out - 1) * stride >= size + begin:
            return (
                "ceil_mode: the last window of spatial axis %d starts in the end padding (output %d, stride %d, "
                "input %d, leading pad %d); onnx shape inference keeps it, onnxruntime drops it"
                % (axis, out, stride, size, begin)
            )
    return None


def window_pads(
    node: Node, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int]
) -> List[int]:
    """The begin pads of each spatial axis, then the end pads ([top, left, bottom, right] in 2-D), from pads or
    auto_pad."""
    rank = len(in_hw)
    mode = node.attrs.get("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(rank):
            out = -(-in_hw[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in_hw[i])
            small = total // 2
            begin.append(small if mode == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        return begin + end
    if mode == "VALID":
        return [0] * (2 * rank)
    return list(node.attrs.get("pads", [0] * (2 * rank)))


def geometry(L: Lowering, node: Node, kernel: Sequence[int], oc: int, groups: int = 1) -> ConvGeom:
    """The window geometry of a Conv/pool node as 2-D (a 1-D one gets H = 1); output sizes from shape inference."""
    xs, ys = L.value(node.inputs[0]).shape, L.value(node.outputs[0]).shape
    in_hw, out_hw = list(xs[2:]), list(ys[2:])
    rank = len(in_hw)
    strides = list(node.attrs.get("strides", [1] * rank))
    dil = list(node.attrs.get("dilations", [1] * rank))
    pads = window_pads(node, in_hw, kernel, strides, dil)
    if rank == 1:
        in_hw, out_hw, kernel, strides, dil = [1] + in_hw, [1] + out_hw, [1] + list(kernel), [1] + strides, [1] + dil
        pads = [0, pads[0], 0, pads[1]]
    return ConvGeom(
        xs[0],
        xs[1],
        in_hw[0],
        in_hw[1],
        oc,
        out_hw[0],
        out_hw[1],
        kernel[0],
        kernel[1],
        strides[0],
        strides[1],
        pads[0],
        pads[1],
        pads[2],
        pads[3],
        dil[0],
        dil[1],
        groups,
    )
