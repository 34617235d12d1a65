"""MaxPool, AveragePool and the global pools: the library's maxpool2d / avgpool2d / global_avgpool where they fit,
generated C otherwise (two passes over the window's rows then columns, or one per output for rows too wide). 3-D
windows, MaxPool on float64, int8 and uint8, and MaxPool's Indices output take the per-tap N-D kernel
(:func:`..kernels.pool.pool_nd`)."""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, one_of, register
from ..geometry import ConvGeom
from ..kernels import pool as pool_kernels
from . import lowering
from .lowering import F32, Lowering
from .window import PAD_MODES, ceil_window_check, geometry, window_pads

#: The dtypes of x each pool takes (MaxPool's Indices output is int64).
MAX_DTYPES = ("float32", "float64", "int8", "uint8")
AVG_DTYPES = ("float32",)


def _pool_check(graph: Graph, node: Node) -> Optional[str]:
    x = graph.values[node.inputs[0]]
    rank = len(x.shape) - 2
    if rank not in (1, 2, 3):
        return "%d-D windows are not supported (1-D to 3-D)" % rank
    if x.dtype not in (MAX_DTYPES if node.op == "MaxPool" else AVG_DTYPES):
        return "input %r is %s (%s takes %s)" % (
            x.name,
            x.dtype,
            node.op,
            ", ".join(MAX_DTYPES if node.op == "MaxPool" else AVG_DTYPES),
        )
    if _wants_indices(node) and node.attrs.get("storage_order", 0) and rank != 2:
        return "storage_order=1 with the Indices output on a %d-D window (2-D only)" % rank
    if node.attrs.get("ceil_mode", 0):
        return ceil_window_check(graph, node)
    return None


def _wants_indices(node: Node) -> bool:
    return node.op == "MaxPool" and len(node.outputs) > 1 and bool(node.outputs[1])


@register(
    ["MaxPool"],
    "generated C in two passes (the window's rows, then its columns), 1-D and 2-D float32; per tap for 3-D "
    "windows, float64, int8, uint8 and the Indices output (int64, storage_order 0/1); NaN propagates",
    check=_pool_check,
    dtypes=MAX_DTYPES + ("int64",),
    auto_pad=PAD_MODES,
    ceil_mode=ANY,
    dilations=ANY,
    kernel_shape=ANY,
    pads=ANY,
    storage_order=one_of(0, 1),
    strides=ANY,
)
@register(
    ["AveragePool"],
    "generated C in two passes (the window's rows, then its columns), 1-D and 2-D; per tap for 3-D windows; "
    "count_include_pad 0/1, ceil_mode",
    check=_pool_check,
    dtypes=AVG_DTYPES,
    auto_pad=PAD_MODES,
    ceil_mode=ANY,
    count_include_pad=one_of(0, 1),
    dilations=ANY,
    kernel_shape=ANY,
    pads=ANY,
    strides=ANY,
)
def lower_pool(L: Lowering, node: Node) -> None:
    xs, dtype = L.value(node.inputs[0]).shape, L.value(node.inputs[0]).dtype
    kind, include = "max" if node.op == "MaxPool" else "avg", bool(node.attrs.get("count_include_pad", 0))
    if len(xs) == 5 or dtype not in ("float32", "int8", "uint8") or _wants_indices(node):
        lower_pool_nd(L, node, kind, include)
        return
    g = geometry(L, node, node.attrs["kernel_shape"], xs[1])
    if dtype != "float32":  # a QDQ model's MaxPool on its bytes (frontend/quant_movement.py)
        lower_byte_max_pool(L, node, g)
        return
    if lower_pool_library(L, node, g):
        return
    kernel = pool_kernels.pool2d(g, kind, include) or pool_kernels.pool2d_taps(g, kind, include)
    L.source(kernel, [node.outputs[0], node.inputs[0]])


def lower_byte_max_pool(L: Lowering, node: Node, g: ConvGeom) -> None:
    """An int8/uint8 MaxPool through the separable float kernels (every byte is exact in float) where each window
    holds an input element: undilated, the leading pads short of the window and the last window starting inside
    the input (the kernels' padding value, -inf, then never reaches a store); else the per-tap kernel."""
    starts_inside = (g.oh - 1) * g.sh - g.pt < g.h and (g.ow - 1) * g.sw - g.pl < g.w
    inside = (g.dh, g.dw) == (1, 1) and g.pt < g.kh and g.pl < g.kw and starts_inside
    kernel = pool_kernels.pool2d(g, "max", False, dtype=L.value(node.inputs[0]).dtype) if inside else None
    if kernel is None:
        lower_pool_nd(L, node, "max", False)
        return
    L.source(kernel, [node.outputs[0], node.inputs[0]])


def lower_pool_nd(L: Lowering, node: Node, kind: str, include: bool) -> None:
    """The per-tap kernel over 1 to 3 spatial axes (and MaxPool's Indices where the node asks for them)."""
    x, out = node.inputs[0], node.outputs[0]
    xs, ys = L.value(x).shape, L.value(out).shape
    rank = len(xs) - 2
    kernel = list(node.attrs["kernel_shape"])
    strides = list(node.attrs.get("strides", [1] * rank))
    dil = list(node.attrs.get("dilations", [1] * rank))
    pads = window_pads(node, xs[2:], kernel, strides, dil)
    window: List[Dict[str, int]] = [
        dict(i=xs[2 + a], o=ys[2 + a], k=kernel[a], s=strides[a], d=dil[a], b=pads[a], e=pads[rank + a])
        for a in range(rank)
    ]
    indices = _wants_indices(node)
    column_major = indices and bool(node.attrs.get("storage_order", 0))
    k = pool_kernels.pool_nd(xs[0] * xs[1], window, kind, include, L.value(x).dtype, indices, column_major)
    L.source(k, [out, x] + ([node.outputs[1]] if indices else []), outputs=(0, 2) if indices else (0,))


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
