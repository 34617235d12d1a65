"""Kernels that move elements: Concat's strided slices, strided gathers (transposes, slices, expands), Gather and
GatherElements (checking indices from data), and Pad (constant, edge, reflect, wrap).

They only move elements, so they take any dtype: every dtype but float32 is moved as the unsigned integer of its
size (:func:`move_type`), which copies its bits exactly (a NaN's payload, -0.0) and lets dtypes of one size share
one compiled kernel. float32 keeps ``float`` (its kernels' names stay those of bundles built before)."""

from __future__ import annotations

import math
import struct
import sys
from typing import Sequence, Union

from ...dtypes import dtype as dtype_of
from ...planfile.status import SLOT_WORDS
from ..ctext import flt
from ..geometry import collapse, contiguous_strides
from .ckernel import CKernel, make_kernel, render, share

#: The C type that moves an element of each size (in bytes) as its bits.
MOVE_TYPES = {1: "unsigned char", 2: "unsigned short", 4: "unsigned int", 8: "unsigned long long"}


def move_type(dtype: str) -> str:
    """The C type a kernel moves ``dtype``'s elements as: ``float`` for float32, else the unsigned integer of its
    size."""
    return "float" if dtype == "float32" else MOVE_TYPES[dtype_of(dtype).itemsize]


def bits_literal(raw: bytes) -> str:
    """One element's stored bytes (in the build host's order, as numpy's ``tobytes`` gives them) as a C constant of
    the unsigned type of that size: Pad's fill, exact for any dtype."""
    return "(%s)%dULL" % (MOVE_TYPES[len(raw)], int.from_bytes(raw, sys.byteorder))


def slice_copy(outer: int, length: int, total: int, offset: int, dtype: str = "float32") -> CKernel:
    """Concat's strided case: ``out[o, offset:offset+length] = x[o, :]`` for each of ``outer`` rows of ``total``."""
    chunks, per = share(outer, length)
    body = render("concat.c.j2", T=move_type(dtype), per=per, outer=outer, length=length, total=total, offset=offset)
    return make_kernel("concat", body, [outer * total, outer * length], chunks, rows_first=True)


def gather_copy(
    out_shape: Sequence[int],
    src_strides: Sequence[int],
    src_offset: int,
    src_count: int,
    tag: str,
    dtype: str = "float32",
) -> CKernel:
    """``out[i...] = x[offset + sum(i_k * stride_k)]``: transposes beyond 4-D, slices, expands."""
    n_out = max(1, int(math.prod(out_shape)))
    shape, (out_strides, strides) = collapse(out_shape, [contiguous_strides(out_shape), list(src_strides)])
    outer = [int(n) for n in shape[:-1]]
    rows = int(math.prod(outer))
    chunks, per = share(rows, shape[-1])
    body = render(
        "copy.c.j2",
        T=move_type(dtype),
        per=per,
        rows=rows,
        offset=int(src_offset),
        outer=outer,
        out_strides=[int(v) for v in out_strides[:-1]],
        src_strides=[int(v) for v in strides[:-1]],
        last=int(shape[-1]),
        step=int(strides[-1]),
    )
    return make_kernel(tag, body, [n_out, src_count], chunks, rows_first=True)


def pad(
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    begin: Sequence[int],
    value: Union[float, bytes],
    dtype: str = "float32",
) -> CKernel:
    """Constant padding (negative pads crop): out[i] = x[i - begin] inside x, ``value`` elsewhere: a float for
    float32, one element's stored bytes for any dtype."""
    if isinstance(value, bytes) and dtype != "float32":
        fill = bits_literal(value)
    elif isinstance(value, bytes):
        number = struct.unpack("=f", value)[0]
        # flt writes every float32 but a NaN exactly; a NaN keeps its sign and payload through a union's bits
        fill = (
            flt(number)
            if number == number
            else "((union { unsigned int u; float f; }){%dU}).f" % (int.from_bytes(value, sys.byteorder))
        )
    else:
        fill = flt(float(value)) if dtype == "float32" else "(%s)%r" % (move_type(dtype), value)
    return _pad(in_shape, out_shape, begin, "constant", fill, dtype)


def pad_index(
    in_shape: Sequence[int], out_shape: Sequence[int], begin: Sequence[int], mode: str, dtype: str = "float32"
) -> CKernel:
    """Pad in reflect, edge or wrap mode: each output index maps to an input index along every axis."""
    if mode not in ("reflect", "edge", "wrap"):
        raise KeyError(mode)
    return _pad(in_shape, out_shape, begin, mode, "0", dtype)


def _pad(
    in_shape: Sequence[int], out_shape: Sequence[int], begin: Sequence[int], mode: str, fill: str, dtype: str
) -> CKernel:
    """Either Pad kernel of ``templates/pad.c.j2``: ``mode`` "constant" (``fill``, a C constant, outside x), or how an
    index out of x folds back in."""
    rank = len(out_shape)
    n_out = max(1, int(math.prod(out_shape)))
    chunks, per = share(n_out, 1)
    body = render(
        "pad.c.j2",
        T=move_type(dtype),
        mode=mode,
        fill=fill,
        per=per,
        n_out=n_out,
        rank=rank,
        in_shape=[int(n) for n in in_shape],
        out_shape=[int(n) for n in out_shape],
        begin=[int(b) for b in begin],
        in_strides=contiguous_strides(in_shape),
    )
    return make_kernel("pad", body, [n_out, max(1, int(math.prod(in_shape)))], chunks, rows_first=True)


def gather(
    outer: int, axis_len: int, inner: int, count: int, index_type: str, dtype: str = "float32", checked: bool = True
) -> CKernel:
    """``out[o, j, i] = x[o, idx[j], i]``. ``checked`` (indices from data): each index is checked against
    ``[-axis_len, axis_len-1]`` (a negative one counts from the end); a bad one leaves its row unwritten and is
    reported in the status buffer, the kernel's fourth pointer, one slot per call (planfile/status.py). Unchecked:
    constant indices, checked and wrapped at build."""
    rows = outer * count
    chunks, per = share(rows, inner)
    body = render(
        "gather.c.j2",
        T=move_type(dtype),
        index_type=index_type,
        per=per,
        rows=rows,
        count=count,
        axis_len=axis_len,
        inner=inner,
        checked=checked,
        words=SLOT_WORDS,
    )
    extents = [rows * inner, outer * axis_len * inner, count] + ([chunks * SLOT_WORDS] if checked else [])
    return make_kernel("gather", body, extents, chunks, rows_first=True)


def gather_elements(
    data_shape: Sequence[int],
    index_shape: Sequence[int],
    axis: int,
    index_type: str,
    dtype: str = "float32",
    checked: bool = True,
) -> CKernel:
    """GatherElements: ``out[i...] = x[i...]`` with the ``axis`` coordinate taken from ``idx[i...]`` (indices no
    larger than x along the other axes). ``checked``: indices from data, checked like :func:`gather`'s."""
    total = max(1, int(math.prod(index_shape)))
    strides = contiguous_strides(data_shape)
    dims = [(int(n), 0 if d == axis else int(strides[d])) for d, n in reversed(list(enumerate(index_shape)))]
    chunks, per = share(total, 1)
    body = render(
        "gather_elements.c.j2",
        T=move_type(dtype),
        index_type=index_type,
        per=per,
        total=total,
        axis_len=int(data_shape[axis]),
        axis_stride=int(strides[axis]),
        dims=dims,
        checked=checked,
        words=SLOT_WORDS,
    )
    extents = [total, max(1, int(math.prod(data_shape))), total] + ([chunks * SLOT_WORDS] if checked else [])
    return make_kernel("gather_elements", body, extents, chunks, rows_first=True)
