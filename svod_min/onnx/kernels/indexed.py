"""Kernels that take indices beside Gather's (:mod:`.copy`): GatherND, ScatterND, ScatterElements (reduction none,
add, mul, max, min) and OneHot.

Indices from data are checked in the kernel (``checked``) through prelude's ``index_check``, as Gather's are
(docs/onnx.md, "Indices"): a bad one is recorded in the status buffer, the kernel's last pointer, and its work is
skipped, so nothing is read or written through it; constant indices were checked and wrapped at build. A scatter
without a reduction moves elements as the unsigned integer of their size (:func:`.copy.move_type`: any dtype, bits
kept); a reduction computes in the dtype (:mod:`.arith`: integers wrap; max and min compare as onnxruntime does). The
scatters update the output in place after the data was copied into it, and keep ONNX's order where two updates hit
one element: each call owns whole lines the updates of one line never leave (ScatterElements), or the same columns
of every update slice (ScatterND)."""

from __future__ import annotations

import math
from typing import Sequence

from ...planfile.status import SLOT_WORDS
from ..geometry import contiguous_strides
from .arith import DTYPES, Arith
from .ckernel import CKernel, make_kernel, render, share
from .copy import move_type

#: The reductions of ScatterND and ScatterElements: add and mul as :class:`.arith.Arith` ops (integers wrap), max
#: and min as onnxruntime's comparisons of the element ``a`` with the update ``b`` (a NaN update wins, and an update
#: replaces a NaN element); "none": the update replaces.
REDUCTIONS = {
    "none": "",
    "add": "Add",
    "mul": "Mul",
    "max": "({a} > {b} ? {a} : {b})",
    "min": "({a} < {b} ? {a} : {b})",
}


def _reduce(reduction: str, dtype: str, a: str, b: str, arith: Arith) -> str:
    """The C expression that folds update ``b`` into element ``a`` (``b`` alone for "none")."""
    if reduction == "none":
        return b
    op = REDUCTIONS[reduction]
    return op.format(a=a, b=b) if "{" in op else arith.binary(op, DTYPES[dtype], a, b)


def _status(extents: list, checked: bool, chunks: int) -> list:
    return extents + ([chunks * SLOT_WORDS] if checked else [])


def gather_nd(
    batches: int,
    tuples: int,
    dims: Sequence[int],
    slice_size: int,
    batch_stride: int,
    dtype: str,
    checked: bool,
) -> CKernel:
    """GatherND: per batch, each of ``tuples`` index tuples of ``len(dims)`` components picks the slice of
    ``slice_size`` elements at data[tuple] (component j in [-dims[j], dims[j]-1]); ``batch_stride``: data's elements
    per batch."""
    m = len(dims)
    items = batches * tuples
    chunks, per = share(items, slice_size)
    strides = [int(s) * slice_size for s in contiguous_strides(list(dims))]
    body = render(
        "gather_nd.c.j2",
        T=move_type(dtype),
        per=per,
        items=items,
        tuples=tuples,
        m=m,
        dims=[int(d) for d in dims],
        strides=strides,
        size=slice_size,
        batch_stride=batch_stride,
        checked=checked,
        words=SLOT_WORDS,
    )
    extents = [items * slice_size, batches * batch_stride, items * m]
    return make_kernel("gather_nd", body, _status(extents, checked, chunks), chunks)


def scatter_nd(tuples: int, dims: Sequence[int], slice_size: int, reduction: str, dtype: str, checked: bool) -> CKernel:
    """ScatterND on the output (the data already copied in): each of ``tuples`` index tuples addresses a slice of
    ``slice_size`` elements that takes the tuple's update slice (or reduces it in). The calls share the slice's
    columns, each applying every update in order to its own columns."""
    m = len(dims)
    chunks, per = share(slice_size, tuples)
    A = Arith()
    d = DTYPES[dtype]
    T = move_type(dtype) if reduction == "none" else d.c
    expr = _reduce(reduction, dtype, "o[c]", "u[c]", A)
    body = render(
        "scatter_nd.c.j2",
        T=T,
        helpers=A.helpers(),
        per=per,
        tuples=tuples,
        m=m,
        dims=[int(n) for n in dims],
        strides=[int(s) * slice_size for s in contiguous_strides(list(dims))],
        size=slice_size,
        expr=expr,
        checked=checked,
        words=SLOT_WORDS,
    )
    total = int(math.prod(dims)) * slice_size
    extents = [total, tuples * m, tuples * slice_size]
    return make_kernel("scatter_nd", body, _status(extents, checked, chunks), chunks)


def scatter_elements(
    data_shape: Sequence[int],
    index_shape: Sequence[int],
    axis: int,
    reduction: str,
    index_type: str,
    dtype: str,
    checked: bool,
) -> CKernel:
    """ScatterElements on the output (the data already copied in): update e goes to the output at e's coordinates,
    the ``axis`` one replaced by idx[e]. One item per line of indices along the axis: its updates stay in one line
    of the output, applied in order."""
    n_axis = int(index_shape[axis])
    lines = int(math.prod(index_shape)) // max(1, n_axis)
    total = int(math.prod(index_shape))
    strides = contiguous_strides(data_shape)
    index_strides = contiguous_strides(index_shape)
    # the coordinates of a line off the axis, innermost first: its size in indices, data's and indices' strides
    off = [
        (int(index_shape[a]), int(strides[a]), int(index_strides[a]))
        for a in reversed(range(len(index_shape)))
        if a != axis
    ]
    chunks, per = share(lines, n_axis)
    A = Arith()
    d = DTYPES[dtype]
    T = move_type(dtype) if reduction == "none" else d.c
    expr = _reduce(reduction, dtype, "out[at]", "upd[e]", A)
    body = render(
        "scatter_elements.c.j2",
        T=T,
        index_type=index_type,
        helpers=A.helpers(),
        per=per,
        lines=lines,
        n_axis=n_axis,
        axis_len=int(data_shape[axis]),
        axis_stride=int(strides[axis]),
        index_axis_stride=int(index_strides[axis]),
        off=off,
        expr=expr,
        checked=checked,
        words=SLOT_WORDS,
    )
    extents = [int(math.prod(data_shape)), total, total]
    return make_kernel("scatter_elements", body, _status(extents, checked, chunks), chunks)


def one_hot(outer: int, depth: int, inner: int, index_dtype: str, dtype: str) -> CKernel:
    """OneHot: out[o, d, i] = values[1] where the index at (o, i) (negative: counted from the end of ``depth``) is
    d, else values[0]; an index outside [-depth, depth-1] gives a line of values[0] (ONNX's rule, not an error)."""
    items = outer * inner
    chunks, per = share(items, depth)
    body = render(
        "one_hot.c.j2",
        T=move_type(dtype),
        I=DTYPES[index_dtype].c,
        floating=DTYPES[index_dtype].kind == "f",
        per=per,
        items=items,
        depth=depth,
        inner=inner,
    )
    return make_kernel("one_hot", body, [items * depth, items, 2], chunks)
