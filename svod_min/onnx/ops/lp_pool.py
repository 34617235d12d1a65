"""LpPool: generated C over 1-, 2- and 3-D windows (:mod:`..kernels.lp_pool`); pads, auto_pad, strides, dilations
and ceil_mode as the pools take them (:mod:`.window`)."""

from __future__ import annotations

from typing import Optional

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..kernels.lp_pool import lp_pool
from .lowering import Lowering
from .window import PAD_MODES, ceil_window_check, window_pads


def _lp_pool_check(graph: Graph, node: Node) -> Optional[str]:
    rank = len(graph.values[node.inputs[0]].shape) - 2
    if rank not in (1, 2, 3):
        return "%d-D windows are not supported (1-D, 2-D and 3-D)" % rank
    if int(node.attrs.get("p", 2)) < 1:
        return "p=%d (p must be at least 1)" % int(node.attrs.get("p", 2))
    if "kernel_shape" not in node.attrs:
        return "kernel_shape is missing"
    for name, default in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
        values = node.attrs.get(name, [default] * rank)
        if len(values) != rank or any(int(v) < 1 for v in values):
            return "%s=%s (%d values of at least 1)" % (name, list(values), rank)
    if len(node.attrs.get("pads", [0] * 2 * rank)) != 2 * rank:
        return "pads=%s (%d values)" % (list(node.attrs["pads"]), 2 * rank)
    if node.attrs.get("ceil_mode", 0):
        return ceil_window_check(graph, node)
    return None


@register(
    ["LpPool"],
    "generated C, 1-D to 3-D windows: the p-th root of the sum of abs(x)^p over each window (padding adds nothing)",
    check=_lp_pool_check,
    auto_pad=PAD_MODES,
    ceil_mode=ANY,
    dilations=ANY,
    kernel_shape=ANY,
    p=ANY,
    pads=ANY,
    strides=ANY,
)
def lower_lp_pool(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    xs, ys = L.value(x).shape, L.value(out).shape
    rank = len(xs) - 2
    kernel = list(node.attrs["kernel_shape"])
    strides = list(node.attrs.get("strides", [1] * rank))
    dil = list(node.attrs.get("dilations", [1] * rank))
    begin = window_pads(node, xs[2:], kernel, strides, dil)[:rank]
    planes = xs[0] * xs[1]
    L.source(lp_pool(planes, xs[2:], ys[2:], kernel, strides, dil, begin, int(node.attrs.get("p", 2))), [out, x])
