"""Reductions: the library's reduce_mean / reduce_sum / reduce_max, generated C for the others and for ArgMax /
ArgMin. Axes that are not one contiguous block are first permuted to the end (the kept axes keep their order, so
the result's elements are in the output's order)."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.table import ANY, one_of, register
from ..geometry import contiguous_strides
from ..kernels.reduce import arg_reduce, reduce_axis
from .lowering import F32, Lowering
from .shape import permuted


def reduce_axes(graph: Graph, node: Node) -> Optional[List[int]]:
    shape = graph.values[node.inputs[0]].shape
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = [int(a) for a in graph.const(node.inputs[1]).reshape(-1)] if graph.is_const(node.inputs[1]) else None
        if axes is None:
            return None
    if axes is None or len(axes) == 0:
        if node.attrs.get("noop_with_empty_axes", 0):
            return []
        axes = list(range(len(shape)))
    return sorted(normalize_axis(int(a), len(shape)) for a in axes)


def _reduce_check(graph: Graph, node: Node) -> Optional[str]:
    axes = reduce_axes(graph, node)
    if axes is None:
        return "axes must be a constant"
    return None


REDUCE_LIB = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max"}


#: The library's reductions as generated C kinds, for float64.
REDUCE_DOUBLE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max"}

REDUCE_C = {
    "ReduceMin": "min",
    "ReduceProd": "prod",
    "ReduceSumSquare": "sumsquare",
    "ReduceL1": "l1",
    "ReduceL2": "l2",
    "ReduceLogSum": "logsum",
}


#: Reductions that also take bool: ReduceMax is any, ReduceMin all (generated C).
BOOL_REDUCE = {"ReduceMax": "any", "ReduceMin": "all"}


@register(
    sorted(BOOL_REDUCE),
    "library reduce_max (float32), generated C for the others; bool: max is any, min is all; axes not in one block "
    "permuted to the end first",
    check=_reduce_check,
    dtypes=("float32", "float64", "bool"),
    axes=ANY,
    keepdims=ANY,
    noop_with_empty_axes=ANY,
)
@register(
    sorted(set(REDUCE_LIB) - set(BOOL_REDUCE)) + sorted(set(REDUCE_C) - set(BOOL_REDUCE)),
    "library reduce_mean/sum/max, generated C for the others; axes not in one block permuted to the end first",
    check=_reduce_check,
    dtypes=("float32", "float64"),
    axes=ANY,
    keepdims=ANY,
    noop_with_empty_axes=ANY,
)
def lower_reduce(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    axes = reduce_axes(L.graph, node) or []
    if not axes:
        L.view(out, x)
        return
    if axes != list(range(axes[0], axes[-1] + 1)):
        x, shape, axes = _reduced_last(L, x, shape, axes)
    outer, red, inner = (
        int(np.prod(shape[: axes[0]])),
        int(np.prod(shape[axes[0] : axes[-1] + 1])),
        int(np.prod(shape[axes[-1] + 1 :])),
    )
    dtype = L.value(x).dtype
    if dtype == "bool":
        L.source(reduce_axis(outer, red, inner, BOOL_REDUCE[node.op], dtype), [out, x])
    elif dtype == "float64":  # generated C in double: the library's reductions are float32
        L.source(reduce_axis(outer, red, inner, REDUCE_C.get(node.op) or REDUCE_DOUBLE[node.op], dtype), [out, x])
    elif node.op in REDUCE_LIB:
        L.library(
            REDUCE_LIB[node.op],
            F32,
            [out, x],
            {"outer": outer, "red": red, "inner": inner, "so": red * inner, "sr": inner, "si": 1},
        )
    else:
        L.source(reduce_axis(outer, red, inner, REDUCE_C[node.op]), [out, x])


def _reduced_last(L: Lowering, x: str, shape: Sequence[int], axes: List[int]) -> Tuple[str, List[int], List[int]]:
    """x permuted so that the reduced axes come last, as (the permuted value, its shape, its reduced axes)."""
    perm = [a for a in range(len(shape)) if a not in axes] + list(axes)
    strides = contiguous_strides(shape)
    moved = [shape[p] for p in perm]
    tmp = L.temp(moved, L.value(x).dtype, "reduce_perm")
    permuted(L, tmp, x, moved, [strides[p] for p in perm], 0, "reduce_perm")
    first = len(shape) - len(axes)
    return tmp, moved, list(range(first, len(shape)))


#: The data types ArgMax/ArgMin compare in their own C type (float16 and bfloat16 are stored as bits).
ARG_DATA = ("float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


@register(
    ["ArgMax", "ArgMin"],
    "generated C; int64 result; float32, float64 and integer data",
    dtypes=ARG_DATA,
    axis=ANY,
    keepdims=ANY,
    select_last_index=one_of(0, 1),
)
def lower_arg(L: Lowering, node: Node) -> None:
    x = node.inputs[0]
    shape = L.value(x).shape
    axis = normalize_axis(int(node.attrs.get("axis", 0)), len(shape))
    outer, red, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
    largest, last = node.op == "ArgMax", bool(node.attrs.get("select_last_index", 0))
    kernel = arg_reduce(outer, red, inner, largest, last, L.value(x).dtype)
    L.source(kernel, [node.outputs[0], x])
