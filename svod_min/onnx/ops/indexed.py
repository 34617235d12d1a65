"""Ops that take indices, beside Gather and GatherElements (:mod:`.shape`): GatherND, ScatterND, ScatterElements
(and Scatter, its name before opset 11) and OneHot, generated C (:mod:`..kernels.indexed`).

Constant indices were checked at build (frontend/indices.py refuses a bad one by name) and are wrapped here;
indices from data are checked by the kernel at run time, which reports a bad one in the status buffer
(IndexOutOfRangeError, exit 2) and never reads or writes through it (docs/onnx.md, "Indices"). OneHot's indices
are not checked: ONNX gives a line of off values for an index outside [-depth, depth-1]."""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.table import ANY, one_of, register
from ..kernels.arith import NUMERIC
from ..kernels.ckernel import CKernel
from ..kernels.indexed import gather_nd, one_hot, scatter_elements, scatter_nd
from .lowering import Lowering
from .shape import MOVABLE

#: The reductions computed in the element type: not on float16/bfloat16 (stored as bits) or bool.
REDUCIBLE = tuple(d for d in NUMERIC if d not in ("float16", "bfloat16"))


def _checked_source(L: Lowering, node: Node, kernel: CKernel, buffers: List[str], indices: str, why: str) -> None:
    """Emit an index-taking kernel on ``buffers`` (the output first); with indices from data (``kernel`` takes the
    status buffer last) its slots of the status buffer too, named after the node, its indices and the bound."""
    if L.graph.is_const(indices):
        L.source(kernel, buffers)
        return
    status = L.status_slots(node.label(), "indices %r" % indices, L.value(indices).shape, why, kernel.chunks)
    L.source(kernel, buffers + [status], outputs=(0, len(buffers)))


def _wrapped(L: Lowering, indices: str, bounds: np.ndarray) -> str:
    """Constant indices (checked at build) with their negative entries counted from the end of ``bounds``."""
    raw = L.graph.const(indices).astype(np.int64)
    return L.const(np.where(raw < 0, raw + bounds, raw), indices)


def _start_from_data(L: Lowering, data: str, out: str) -> None:
    """A scatter's output starts as its data: the data computed in place there when nothing else reads it (a
    computed value, read by this node alone: its producer writes straight into the output), else a copy."""
    if len(L.graph.consumers().get(data, [])) == 1 and L.place_into(data, out, 0):
        return
    L.copy(out, data)


def _nd_check(graph: Graph, node: Node) -> Optional[str]:
    """Index tuples that fit data, and (ScatterND) updates of the shape they address: the kernel reads and writes by
    these shapes."""
    data, ishape = graph.values[node.inputs[0]].shape, graph.values[node.inputs[1]].shape
    b = int(node.attrs.get("batch_dims", 0))
    if not ishape or ishape[-1] < 1:
        return "indices of shape %s (index tuples of at least one component)" % list(ishape)
    if not 0 <= b < len(ishape) or b + ishape[-1] > len(data) or tuple(ishape[:b]) != tuple(data[:b]):
        why = "tuples longer than data's rank past the batch dims, or batch dims that differ"
        return "indices of shape %s on data of shape %s with batch_dims %d (%s)" % (list(ishape), list(data), b, why)
    if node.op == "GatherND":
        want = tuple(ishape[:-1]) + tuple(data[b + ishape[-1] :])
        if tuple(graph.values[node.outputs[0]].shape) != want:
            return "output of shape %s where GatherND gives %s" % (
                list(graph.values[node.outputs[0]].shape),
                list(want),
            )
    if node.op == "ScatterND":
        want = tuple(ishape[:-1]) + tuple(data[ishape[-1] :])
        got = graph.values[node.inputs[2]].shape
        if tuple(got) != want:
            return "updates of shape %s where indices %s on data %s address %s" % (
                list(got),
                list(ishape),
                list(data),
                list(want),
            )
    return _reduction_refusal(graph, node)


def _reduction_refusal(graph: Graph, node: Node) -> Optional[str]:
    """A scatter's reduction other than none takes the dtypes REDUCIBLE names."""
    reduction = node.attrs.get("reduction", "none")
    if reduction != "none" and graph.values[node.inputs[0]].dtype not in REDUCIBLE:
        return "reduction %r on %s" % (reduction, graph.values[node.inputs[0]].dtype)
    return None


def _tuple_why(data: str, dims: List[int]) -> str:
    return "each component of an index tuple addresses its axis of %r, sizes %s" % (data, dims)


@register(
    ["GatherND"],
    "generated C; data of any dtype; indices constant (checked at build) or from data (checked by the kernel: a bad "
    "one is reported, exit 2); negative indices count from the end",
    check=_nd_check,
    dtypes=MOVABLE,
    batch_dims=ANY,
)
def lower_gather_nd(L: Lowering, node: Node) -> None:
    data, indices, out = node.inputs[0], node.inputs[1], node.outputs[0]
    ds, ishape = L.value(data).shape, L.value(indices).shape
    b = int(node.attrs.get("batch_dims", 0))
    m = ishape[-1]
    dims = [int(d) for d in ds[b : b + m]]
    if L.graph.is_const(indices):
        indices = _wrapped(L, indices, np.array(dims, np.int64))
    kernel = gather_nd(
        int(np.prod(ds[:b])),
        int(np.prod(ishape[b:-1])),
        dims,
        int(np.prod(ds[b + m :])),
        int(np.prod(ds[b:])),
        L.value(data).dtype,
        not L.graph.is_const(indices),
    )
    _checked_source(L, node, kernel, [out, data, indices], indices, _tuple_why(data, dims))


@register(
    ["ScatterND"],
    "generated C; the data copied (or updated in place where the scatter alone reads it), then each update slice "
    "written (or reduced: add, mul, max, min) in order; indices constant (checked at build) or from data (checked "
    "by the kernel: a bad tuple is skipped and reported, exit 2)",
    check=_nd_check,
    dtypes=MOVABLE,
    reduction=one_of("none", "add", "mul", "max", "min"),
)
def lower_scatter_nd(L: Lowering, node: Node) -> None:
    data, indices, updates = node.inputs
    out = node.outputs[0]
    ds, ishape = L.value(data).shape, L.value(indices).shape
    m = ishape[-1]
    dims = [int(d) for d in ds[:m]]
    _start_from_data(L, data, out)
    if L.value(updates).size == 0:
        return  # no update: the data as it is
    if L.graph.is_const(indices):
        indices = _wrapped(L, indices, np.array(dims, np.int64))
    kernel = scatter_nd(
        int(np.prod(ishape[:-1])),
        dims,
        int(np.prod(ds[m:])),
        node.attrs.get("reduction", "none"),
        L.value(data).dtype,
        not L.graph.is_const(indices),
    )
    _checked_source(L, node, kernel, [out, indices, updates], indices, _tuple_why(data, dims))


def _scatter_elements_check(graph: Graph, node: Node) -> Optional[str]:
    data, indices, updates = (graph.values[n].shape for n in node.inputs)
    axis = normalize_axis(int(node.attrs.get("axis", 0)), len(data))
    if (
        indices != updates
        or len(indices) != len(data)
        or any(i > d for a, (i, d) in enumerate(zip(indices, data)) if a != axis)
    ):
        return "indices %s and updates %s on data %s (equal shapes, data's rank, no larger off the axis)" % (
            list(indices),
            list(updates),
            list(data),
        )
    return _reduction_refusal(graph, node)


@register(
    ["Scatter"],
    "ScatterElements without a reduction (its name before opset 11)",
    check=_scatter_elements_check,
    dtypes=MOVABLE,
    axis=ANY,
)
@register(
    ["ScatterElements"],
    "generated C; the data copied (or updated in place where the scatter alone reads it), then each update written "
    "(or reduced: add, mul, max, min) in order; int32/int64 indices constant (checked at build) or from data "
    "(checked by the kernel: a bad one is skipped and reported, exit 2); negative indices count from the end",
    check=_scatter_elements_check,
    dtypes=MOVABLE,
    axis=ANY,
    reduction=one_of("none", "add", "mul", "max", "min"),
)
def lower_scatter_elements(L: Lowering, node: Node) -> None:
    data, indices, updates = node.inputs
    out = node.outputs[0]
    ds = L.value(data).shape
    axis = normalize_axis(int(node.attrs.get("axis", 0)), len(ds))
    index_shape = L.value(indices).shape
    _start_from_data(L, data, out)
    if L.value(updates).size == 0:
        return
    if L.graph.is_const(indices):
        indices = _wrapped(L, indices, np.array(ds[axis], np.int64))
    kernel = scatter_elements(
        ds,
        index_shape,
        axis,
        node.attrs.get("reduction", "none"),
        "int" if L.value(indices).dtype == "int32" else "long long",
        L.value(data).dtype,
        not L.graph.is_const(indices),
    )
    why = "axis %d of %r has %d elements" % (axis, data, ds[axis])
    _checked_source(L, node, kernel, [out, indices, updates], indices, why)


#: OneHot's index dtypes: numbers C converts exactly (no float16/bfloat16 bits).
ONE_HOT_INDICES = tuple(d for d in NUMERIC if d not in ("float16", "bfloat16"))


def _one_hot_check(graph: Graph, node: Node) -> Optional[str]:
    indices, depth = node.inputs[0], node.inputs[1]
    if graph.values[indices].const is None and graph.values[indices].dtype not in ONE_HOT_INDICES:
        return "indices of %s" % graph.values[indices].dtype
    if not graph.is_const(depth):
        return "depth must be a constant (it decides the output's shape)"
    if graph.values[node.inputs[2]].size != 2:
        return "values must hold two elements (off, on)"
    ishape, out = graph.values[indices].shape, graph.values[node.outputs[0]].shape
    axis = normalize_axis(int(node.attrs.get("axis", -1)), len(ishape) + 1)
    if len(out) != len(ishape) + 1 or tuple(out[:axis]) + tuple(out[axis + 1 :]) != tuple(ishape):
        return "output of shape %s for indices of shape %s" % (list(out), list(ishape))
    return None


@register(
    ["OneHot"],
    "generated C; values of any dtype (constant or fed at run time), depth constant; an index outside "
    "[-depth, depth-1] gives a line of off values (ONNX's rule)",
    check=_one_hot_check,
    dtypes=MOVABLE,
    axis=ANY,
)
def lower_one_hot(L: Lowering, node: Node) -> None:
    indices, _, values = node.inputs
    out = node.outputs[0]
    shape = L.value(out).shape
    axis = normalize_axis(int(node.attrs.get("axis", -1)), len(shape))
    depth = int(shape[axis])
    ishape = L.value(indices).shape
    if L.graph.is_const(indices):
        indices = L.const(L.graph.const(indices).astype(np.int64), indices)
    if L.graph.is_const(values) and L.value(values).dtype != L.value(out).dtype:
        values = L.const(L.graph.const(values).astype(L.value(out).dtype), values)
    kernel = one_hot(
        int(np.prod(ishape[:axis])), depth, int(np.prod(ishape[axis:])), L.value(indices).dtype, L.value(out).dtype
    )
    L.source(kernel, [out, indices, values])
