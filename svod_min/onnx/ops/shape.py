"""Data movement: Reshape-like ops as views, Concat in place, Transpose, Slice, Split, Expand, Pad, Tile, Gather and
GatherElements (indices checked: docs/onnx.md, "Indices").

These ops only move elements, so each takes every run-time dtype (``MOVABLE``): offsets are in elements times the
dtype's size, and the generated kernels move an element as the unsigned integer of its size (kernels/copy.py)."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np

from ...dtypes import ALL_DTYPES
from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.table import ANY, OPS, one_of, register
from ..geometry import broadcast_strides, collapse, contiguous_strides
from ..kernels.copy import gather, gather_copy, gather_elements, pad, pad_index, slice_copy
from .lowering import F32, Lowering

#: Every run-time dtype: what the ops of this module move.
MOVABLE = tuple(d.name for d in ALL_DTYPES)


def _itemsize(L: Lowering, name: str) -> int:
    return int(np.dtype(L.value(name).dtype).itemsize)


@register(
    ["Reshape", "Flatten", "Squeeze", "Unsqueeze"],
    "a view (no copy), any dtype; shapes from shape inference; the shape or axes input constant",
    check=lambda g, n: (
        None
        if all(g.is_const(name) for name in n.inputs[1:] if name)
        else "the %s input must be a constant (shapes are fixed at build)" % ("shape" if n.op == "Reshape" else "axes")
    ),
    dtypes=MOVABLE,
    axis=ANY,
    axes=ANY,
    allowzero=ANY,
    shape=ANY,
)
@register(["Identity"], "a view, any dtype", dtypes=MOVABLE)
def lower_view(L: Lowering, node: Node) -> None:
    L.view(node.outputs[0], node.inputs[0])


@register(
    ["Dropout"],
    "inference: a view, any dtype; the mask output all true",
    dtypes=MOVABLE,
    ratio=ANY,
    seed=ANY,
    is_test=ANY,
    check=lambda g, n: (
        "training_mode must be a constant false"
        if len(n.inputs) > 2 and n.inputs[2] and not (g.is_const(n.inputs[2]) and not g.const(n.inputs[2]).any())
        else None
    ),
)
def lower_dropout(L: Lowering, node: Node) -> None:
    """Inference keeps every element: the output is the input, and the mask (opset 7 on: bool) is all true."""
    L.view(node.outputs[0], node.inputs[0])
    mask = node.outputs[1] if len(node.outputs) > 1 else ""
    if mask:
        v = L.value(mask)
        L.copy(mask, L.const(np.ones(v.shape, dtype=v.dtype), mask + "~kept"))


if "Cast" not in OPS:  # ops/cast.py lowers every Cast where it is present (imported first or later, it wins)
    register(
        ["Cast"], "float32 to float32 only (other casts of run-time tensors are refused)", to=one_of(1), saturate=ANY
    )(lower_view)


@register(
    ["Concat"],
    "any dtype; inputs written in place into the output where the slices are contiguous; a copy otherwise",
    dtypes=MOVABLE,
    axis=ANY,
)
def lower_concat(L: Lowering, node: Node) -> None:
    out = node.outputs[0]
    shape, dtype, size = L.value(out).shape, L.value(out).dtype, _itemsize(L, out)
    axis = int(node.attrs["axis"]) % len(shape)
    outer = int(np.prod(shape[:axis]))
    inner = int(np.prod(shape[axis + 1 :]))
    at = 0
    for name in node.inputs:
        if not name:
            continue
        part = L.value(name).shape[axis] * inner
        if outer == 1:
            if not L.place_into(name, out, size * at):
                L.copy(L.subview(out, size * at, L.value(name).shape, dtype), name)
        elif part:
            L.source(slice_copy(outer, part, shape[axis] * inner, at, dtype), [out, name])
        at += part


def permuted(
    L: Lowering, out: str, x: str, out_shape: Sequence[int], src_strides: Sequence[int], offset: int, tag: str
) -> None:
    """out = x read with ``src_strides`` from ``offset``: float32's library permute up to 4 collapsed dims, C beyond
    and for every other dtype."""
    shape, strides = collapse(out_shape, [contiguous_strides(out_shape), list(src_strides)])
    src = strides[1]
    dtype = L.value(x).dtype
    if offset == 0 and len(shape) <= 4 and dtype == "float32":
        pad = 4 - len(shape)
        e = [1] * pad + list(shape)
        t = [0] * pad + list(src)
        L.library(
            "permute",
            F32,
            [out, x],
            dict([("e%d" % i, e[i]) for i in range(4)] + [("t%d" % i, t[i]) for i in range(4)]),
        )
        return
    L.source(gather_copy(out_shape, src_strides, offset, L.value(x).size, tag, dtype), [out, x])


@register(
    ["Transpose"],
    "any dtype; library permute (float32, up to 4 dims after merging), generated C beyond",
    dtypes=MOVABLE,
    perm=ANY,
)
def lower_transpose(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    perm = node.attrs.get("perm", list(reversed(range(len(shape)))))
    strides = contiguous_strides(shape)
    permuted(L, out, x, L.value(out).shape, [strides[p] for p in perm], 0, "transpose")


def _slice_params(graph: Graph, node: Node) -> Optional[tuple]:
    shape = graph.values[node.inputs[0]].shape
    if graph.opset < 10:
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        axes = node.attrs.get("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        if not all(graph.is_const(n) for n in node.inputs[1:] if n):
            return None

        def get(i: int, default: List[int]) -> List[int]:
            if len(node.inputs) > i and node.inputs[i]:
                return [int(v) for v in graph.const(node.inputs[i]).reshape(-1)]
            return default

        starts, ends = get(1, []), get(2, [])
        axes = get(3, list(range(len(starts))))
        steps = get(4, [1] * len(starts))
    begin = [0] * len(shape)
    step = [1] * len(shape)
    for s, e, a, k in zip(starts, ends, axes, steps):
        a = a % len(shape)
        dim = shape[a]
        s = s + dim if s < 0 else s
        s = min(max(s, 0), dim - 1 if k < 0 else dim)
        begin[a], step[a] = s, k
    return begin, step


@register(
    ["Slice"],
    "any dtype; a strided copy (float32: library permute where it fits); starts/ends/axes/steps constant",
    check=lambda g, n: None if _slice_params(g, n) is not None else "starts/ends/axes/steps must be constants",
    dtypes=MOVABLE,
    starts=ANY,
    ends=ANY,
    axes=ANY,
)
def lower_slice(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    begin, step = _slice_params(L.graph, node)  # type: ignore[misc]
    strides = contiguous_strides(L.value(x).shape)
    offset = sum(b * s for b, s in zip(begin, strides))
    permuted(L, out, x, L.value(out).shape, [s * k for s, k in zip(strides, step)], offset, "slice")


@register(
    ["Split"],
    "any dtype; views where the parts are contiguous, strided copies otherwise; split sizes constant",
    check=lambda g, n: (
        None if len(n.inputs) < 2 or not n.inputs[1] or g.is_const(n.inputs[1]) else "split sizes must be constants"
    ),
    dtypes=MOVABLE,
    axis=ANY,
    split=ANY,
    num_outputs=ANY,
)
def lower_split(L: Lowering, node: Node) -> None:
    x = node.inputs[0]
    shape = L.value(x).shape
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    strides = contiguous_strides(shape)
    outer = int(np.prod(shape[:axis]))
    at = 0
    for out in node.outputs:
        part = L.value(out).shape[axis]
        if out and outer == 1 and out not in L.graph.outputs:
            L.alias[out] = (x, _itemsize(L, x) * at * strides[axis])
        elif out:
            permuted(L, out, x, L.value(out).shape, strides, at * strides[axis], "split")
        at += part


@register(
    ["Expand"],
    "any dtype; a broadcasting copy (float32: library permute with zero strides where it fits)",
    check=lambda g, n: None if g.is_const(n.inputs[1]) else "the shape must be a constant",
    dtypes=MOVABLE,
)
def lower_expand(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    out_shape = L.value(out).shape
    permuted(L, out, x, out_shape, broadcast_strides(L.value(x).shape, out_shape), 0, "expand")


def _pad_check(graph: Graph, node: Node) -> Optional[str]:
    if any(n and not graph.is_const(n) for n in node.inputs[1:]):
        return "pads/value/axes must be constants"
    return None


@register(
    ["Pad"],
    "any dtype (the constant of the data's dtype, its bits kept); constant, reflect, edge and wrap modes; generated C; "
    "pads constant",
    check=_pad_check,
    dtypes=MOVABLE,
    mode=one_of("constant", "reflect", "edge", "wrap"),
    pads=ANY,
    paddings=ANY,
    value=ANY,
)
def lower_pad(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    in_shape, out_shape = L.value(x).shape, L.value(out).shape
    rank = len(in_shape)
    dtype = L.value(x).dtype
    if L.graph.opset < 11:  # float types only before opset 11: the value attribute is a float
        pads = list(node.attrs["pads"] if "pads" in node.attrs else node.attrs["paddings"])  # opset 1 says paddings
        fill = np.array(float(node.attrs.get("value", 0.0))).astype(dtype)
    else:
        raw = [int(v) for v in L.graph.const(node.inputs[1]).reshape(-1)]
        given = len(node.inputs) > 2 and node.inputs[2] and L.graph.const(node.inputs[2]).size
        fill = L.graph.const(node.inputs[2]).reshape(-1)[:1] if given else np.zeros(1, np.dtype(dtype))
        axes = (
            [int(a) % rank for a in L.graph.const(node.inputs[3]).reshape(-1)]
            if len(node.inputs) > 3 and node.inputs[3]
            else list(range(rank))
        )
        pads = [0] * (2 * rank)
        for i, a in enumerate(axes):
            pads[a], pads[a + rank] = raw[i], raw[i + len(axes)]
    mode = node.attrs.get("mode", "constant")
    if mode == "constant":
        raw = np.ascontiguousarray(np.asarray(fill).reshape(-1)[:1]).tobytes()
        L.source(pad(in_shape, out_shape, pads[:rank], raw, dtype), [out, x])
    else:
        L.source(pad_index(in_shape, out_shape, pads[:rank], mode, dtype), [out, x])


@register(
    ["Gather"],
    "generated C; data of any dtype, int64/int32 indices, constant (checked at build) or run-time (checked by the "
    "kernel: a bad one is reported, exit 2); negative indices count from the end",
    dtypes=MOVABLE,
    axis=ANY,
)
def lower_gather(L: Lowering, node: Node) -> None:
    data, indices, out = node.inputs[0], node.inputs[1], node.outputs[0]
    shape = L.value(data).shape
    axis = normalize_axis(int(node.attrs.get("axis", 0)), len(shape))
    if L.value(out).size == 0:
        return  # nothing to write (and no index to check)
    checked = not L.graph.is_const(indices)
    if not checked:  # in range: frontend/indices.py refused the node otherwise
        raw = L.graph.const(indices).astype(np.int64)
        indices = L.const(np.where(raw < 0, raw + shape[axis], raw).reshape(-1), indices)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1 :]))
    index_type = "int" if L.value(indices).dtype == "int32" else "long long"
    kernel = gather(outer, shape[axis], inner, L.value(indices).size, index_type, L.value(data).dtype, checked)
    _indexing(L, node, kernel, [out, data, indices], checked, axis)


def _indexing(L: Lowering, node: Node, kernel: Any, buffers: List[str], checked: bool, axis: int) -> None:
    """Emit an index-taking kernel on ``[out, data, indices]``; a checked one (indices from data) also gets its slots
    of the status buffer, named after the node, its indices and the bound (docs/onnx.md, "Indices")."""
    if not checked:
        L.source(kernel, buffers)
        return
    out, data, indices = buffers
    why = "axis %d of %r has %d elements" % (axis, data, L.value(data).shape[axis])
    status = L.status_slots(node.label(), "indices %r" % indices, L.value(indices).shape, why, kernel.chunks)
    L.source(kernel, [out, data, indices, status], outputs=(0, 3))


@register(
    ["Tile"],
    "any dtype; a wrapping copy (generated C: Pad's wrap mode from the origin); repeats constant",
    check=lambda g, n: None if g.is_const(n.inputs[1]) else "repeats must be a constant",
    dtypes=MOVABLE,
)
def lower_tile(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    in_shape = L.value(x).shape
    # out[i] = x[i mod shape]: index i - 0 wrapped into each axis is exactly what Pad's wrap mode reads
    L.source(pad_index(in_shape, L.value(out).shape, [0] * len(in_shape), "wrap", L.value(x).dtype), [out, x])


def _gather_elements_check(graph: Graph, node: Node) -> Optional[str]:
    data, indices = graph.values[node.inputs[0]].shape, graph.values[node.inputs[1]].shape
    axis = normalize_axis(int(node.attrs.get("axis", 0)), len(data))
    if len(indices) != len(data) or any(i > d for a, (i, d) in enumerate(zip(indices, data)) if a != axis):
        return "indices of shape %s on data of shape %s (same rank, no larger off the axis)" % (
            list(indices),
            list(data),
        )
    return None


@register(
    ["GatherElements"],
    "generated C; data of any dtype, int64/int32 indices, constant (checked at build) or run-time (checked by the "
    "kernel: a bad one is reported, exit 2); negative indices count from the end",
    check=_gather_elements_check,
    dtypes=MOVABLE,
    axis=ANY,
)
def lower_gather_elements(L: Lowering, node: Node) -> None:
    data, indices, out = node.inputs[0], node.inputs[1], node.outputs[0]
    shape = L.value(data).shape
    axis = normalize_axis(int(node.attrs.get("axis", 0)), len(shape))
    if L.value(out).size == 0:
        return
    checked = not L.graph.is_const(indices)
    index_shape = L.value(indices).shape
    if not checked:  # in range: frontend/indices.py refused the node otherwise
        raw = L.graph.const(indices).astype(np.int64)
        indices = L.const(np.where(raw < 0, raw + shape[axis], raw), indices)
    index_type = "int" if L.value(indices).dtype == "int32" else "long long"
    kernel = gather_elements(shape, index_shape, axis, index_type, L.value(data).dtype, checked)
    _indexing(L, node, kernel, [out, data, indices], checked, axis)
