"""Kernels that move elements: Concat's strided slices, strided gathers (transposes, slices, expands), Gather,
and Pad (constant, edge, reflect, wrap)."""

from __future__ import annotations

import math
from typing import Sequence

from ..geometry import collapse, contiguous_strides
from .ckernel import CKernel, chunks_for, flt, make_kernel, range_head, render

def slice_copy(outer: int, length: int, total: int, offset: int) -> CKernel:
    """Concat's strided case: ``out[o, offset:offset+length] = x[o, :]`` for each of ``outer`` rows of ``total``."""
    chunks = chunks_for(outer, length)
    per = -(-outer // chunks)
    body = render("concat.c.j2", per=per, outer=outer, length=length, total=total, offset=offset)
    return make_kernel("concat", body, [outer * total, outer * length], chunks)


def gather_copy(out_shape: Sequence[int], src_strides: Sequence[int], src_offset: int, src_count: int, tag: str) -> CKernel:
    """``out[i...] = x[offset + sum(i_k * stride_k)]``: transposes beyond 4-D, slices, expands."""
    n_out = max(1, int(math.prod(out_shape)))
    shape, strides = collapse(out_shape, [contiguous_strides(out_shape), list(src_strides)])
    last = shape[-1]
    outer = shape[:-1]
    rows = int(math.prod(outer))
    chunks = chunks_for(rows, last)
    per = -(-rows // chunks)
    lines = ["void KNAME(float *restrict out, const float *restrict x, int core_id) {",
             "  long r0 = (long)core_id * %d, r1 = r0 + %d < %d ? r0 + %d : %d;" % (per, per, rows, per, rows),
             "  for (long r = r0; r < r1; ++r) {", "    long q = r, o = 0, s = %d;" % src_offset]
    for axis in reversed(range(len(outer))):
        lines.append("    { long k = q %% %d; q /= %d; o += k * %d; s += k * %d; }" % (outer[axis], outer[axis], strides[0][axis], strides[1][axis]))
    lines += ["    for (long j = 0; j < %d; ++j) out[o + j] = x[s + j * %d];" % (last, strides[1][-1]), "  }", "}", ""]
    return make_kernel(tag, "\n".join(lines), [n_out, src_count], chunks)


def pad(in_shape: Sequence[int], out_shape: Sequence[int], begin: Sequence[int], value: float) -> CKernel:
    """Constant padding (negative pads crop): out[i] = x[i - begin] inside x, ``value`` elsewhere."""
    rank = len(out_shape)
    n_out = max(1, int(math.prod(out_shape)))
    in_strides = contiguous_strides(in_shape)
    chunks = chunks_for(n_out, 1)
    per = -(-n_out // chunks)
    lines = ["void KNAME(float *restrict out, const float *restrict x, int core_id) {",
             "  long i0 = (long)core_id * %d, i1 = i0 + %d < %d ? i0 + %d : %d;" % (per, per, n_out, per, n_out),
             "  for (long i = i0; i < i1; ++i) {", "    long q = i, s = 0; int inside = 1;"]
    for axis in reversed(range(rank)):
        lines.append("    { long k = q %% %d - %d; q /= %d; inside &= k >= 0 && k < %d; s += k * %d; }" % (
            out_shape[axis], begin[axis], out_shape[axis], in_shape[axis], in_strides[axis]))
    lines += ["    out[i] = inside ? x[s] : %s;" % flt(value), "  }", "}", ""]
    return make_kernel("pad", "\n".join(lines), [n_out, max(1, int(math.prod(in_shape)))], chunks)


def pad_index(in_shape: Sequence[int], out_shape: Sequence[int], begin: Sequence[int], mode: str) -> CKernel:
    """Pad in reflect, edge or wrap mode: each output index maps to an input index along every axis."""
    rank = len(out_shape)
    n_out = max(1, int(math.prod(out_shape)))
    in_strides = contiguous_strides(in_shape)
    chunks = chunks_for(n_out, 1)
    per = -(-n_out // chunks)
    fold = {
        "reflect": "if (k < 0) k = -k; if (k >= n) k = 2 * (n - 1) - k; if (k < 0) k = 0;",
        "edge": "if (k < 0) k = 0; if (k >= n) k = n - 1;",
        "wrap": "k %= n; if (k < 0) k += n;",
    }[mode]
    lines = ["void KNAME(float *restrict out, const float *restrict x, int core_id) {", range_head(per, n_out),
             "  for (long i = i0; i < i1; ++i) {", "    long q = i, s = 0;"]
    for axis in reversed(range(rank)):
        lines.append("    { long n = %d, k = q %% %d - %d; q /= %d; %s s += k * %d; }" % (
            in_shape[axis], out_shape[axis], begin[axis], out_shape[axis], fold, in_strides[axis]))
    lines += ["    out[i] = x[s];", "  }", "}", ""]
    return make_kernel("pad", "\n".join(lines), [n_out, max(1, int(math.prod(in_shape)))], chunks)


def gather(outer: int, axis_len: int, inner: int, count: int, index_type: str) -> CKernel:
    """``out[o, j, i] = x[o, idx[j], i]``; a negative index counts from the end, and an index out of range
    is clamped (ONNX calls it an error; a clamp keeps the read inside the buffer)."""
    rows = outer * count
    chunks = chunks_for(rows, inner)
    per = -(-rows // chunks)
    body = """void KNAME(float *restrict out, const float *restrict x, const %s *restrict idx, int core_id) {
%s
  for (long r = r0; r < r1; ++r) {
    long o = r / %d, j = r %% %d;
    long k = (long)idx[j];
    if (k < 0) k += %d;
    if (k < 0) k = 0;
    if (k >= %d) k = %d;
    const float *src = x + (o * %d + k) * %d;
    float *dst = out + r * %d;
    for (long i = 0; i < %d; ++i) dst[i] = src[i];
  }
}
""" % (index_type, range_head(per, rows, "r"), count, count, axis_len, axis_len, axis_len - 1, axis_len, inner, inner, inner)
    return make_kernel("gather", body, [rows * inner, outer * axis_len * inner, count], chunks)
