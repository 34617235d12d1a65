"""MaxPool, AveragePool and the global pools: the library's maxpool2d / avgpool2d / global_avgpool where they fit,
generated C otherwise (two passes over the window's rows then columns, or one per output for rows too wide)."""

from __future__ import annotations

import numpy as np

from ..frontend.ir import Node
from ..frontend.table import ANY, one_of, register
from ..geometry import ConvGeom
from ..kernels import pool as pool_kernels
from . import lowering
from .lowering import F32, Lowering
from .window import PAD_MODES, geometry, window_check


@register(
    ["MaxPool"],
    "generated C in two passes (the window's rows, then its columns), "
    "1-D and 2-D; NaN propagates; the Indices output is not supported",
    check=window_check,
    auto_pad=PAD_MODES,
    ceil_mode=ANY,
    dilations=ANY,
    kernel_shape=ANY,
    pads=ANY,
    storage_order=ANY,
    strides=ANY,
)
@register(
    ["AveragePool"],
    "generated C in two passes (the window's rows, then its columns), 1-D and 2-D; count_include_pad 0/1, ceil_mode",
    check=window_check,
    auto_pad=PAD_MODES,
    ceil_mode=ANY,
    count_include_pad=one_of(0, 1),
    dilations=ANY,
    kernel_shape=ANY,
    pads=ANY,
    strides=ANY,
)
def lower_pool(L: Lowering, node: Node) -> None:
    xs = L.value(node.inputs[0]).shape
    g = geometry(L, node, node.attrs["kernel_shape"], xs[1])
    if lower_pool_library(L, node, g):
        return
    kind, include = "max" if node.op == "MaxPool" else "avg", bool(node.attrs.get("count_include_pad", 0))
    kernel = pool_kernels.pool2d(g, kind, include) or pool_kernels.pool2d_taps(g, kind, include)
    L.source(kernel, [node.outputs[0], node.inputs[0]])


@register(
    ["GlobalAveragePool", "GlobalMaxPool"],
    "library global_avgpool (4-D float32), else reduce_mean; reduce_max over the spatial dims",
)
def lower_global_pool(L: Lowering, node: Node) -> None:
    if node.op == "GlobalAveragePool" and lower_global_avgpool_library(L, node):
        return
    xs = L.value(node.inputs[0]).shape
    outer, red = xs[0] * xs[1], int(np.prod(xs[2:]))
    kernel = "reduce_mean" if node.op == "GlobalAveragePool" else "reduce_max"
    L.library(
        kernel,
        F32,
        [node.outputs[0], node.inputs[0]],
        {"outer": outer, "red": red, "inner": 1, "so": red, "sr": 1, "si": 1},
    )


def lower_pool_library(L: Lowering, node: Node, g: ConvGeom) -> bool:
    """maxpool2d / avgpool2d for a 2-D float32 pool; False where they do not apply (the caller generates C)."""
    x, out = node.inputs[0], node.outputs[0]
    if ("maxpool2d" if node.op == "MaxPool" else "avgpool2d") not in lowering.LIBRARY_KERNELS:
        return False
    if len(L.value(x).shape) != 4 or L.value(x).dtype != "float32" or min(g.pt, g.pl, g.pb, g.pr) < 0:
        return False
    if not _windows_start_inside(g):
        return False
    base = {
        "N": g.n,
        "C": g.c,
        "H": g.h,
        "W": g.w,
        "OH": g.oh,
        "OW": g.ow,
        "KH": g.kh,
        "KW": g.kw,
        "sh": g.sh,
        "sw": g.sw,
        "pt": g.pt,
        "pl": g.pl,
    }
    if node.op == "MaxPool":
        L.library("maxpool2d", {"dtype": "float32"}, [out, x], dict(base, dh=g.dh, dw=g.dw))
        return True
    if (g.dh, g.dw) != (1, 1):
        return False
    include = int(node.attrs.get("count_include_pad", 0))
    L.library("avgpool2d", {"dtype": "float32"}, [out, x], dict(base, pb=g.pb, pr=g.pr, count_include_pad=include))
    return True


def _windows_start_inside(g: ConvGeom) -> bool:
    """ceil_mode may add a last window; the kernel refuses one that starts past the padded input."""
    return (g.oh - 1) * g.sh < g.h + g.pt and (g.ow - 1) * g.sw < g.w + g.pl


def lower_global_avgpool_library(L: Lowering, node: Node) -> bool:
    """global_avgpool for a 4-D float32 input; False where it does not apply."""
    xs = L.value(node.inputs[0]).shape
    if len(xs) != 4 or L.value(node.inputs[0]).dtype != "float32":
        return False
    variables = {"N": xs[0], "C": xs[1], "H": xs[2], "W": xs[3]}
    L.library("global_avgpool", {"dtype": "float32"}, [node.outputs[0], node.inputs[0]], variables)
    return True
