"""Resize's kernels: per-axis taps (linear, cubic, nearest) from tables of source indices and weights, and a 2-D nearest.

Tables a kernel needs are compiled in as ``static const`` arrays: they are small (one entry per output position
of one axis) and known at build time."""

from __future__ import annotations

from typing import Optional, Sequence

from .ckernel import CKernel, chunks_for, flt, make_kernel, range_head

def taps(outer: int, n_in: int, n_out: int, inner: int, index: Sequence[int], weight: Sequence[float], per_out: int,
         fill: Optional[Sequence[float]] = None) -> CKernel:  # fmt: skip
    """One axis of a separable resize: ``out[o, j, i] = fill[j] + sum_t weight[j, t] * x[o, index[j, t], i]`` with
    ``per_out`` taps per output position (1 for nearest, 2 for linear, 4 for cubic)."""
    if inner == 1:
        return taps_last_axis(outer, n_in, n_out, index, weight, per_out, fill)
    rows = outer * n_out
    chunks = chunks_for(rows, inner * per_out)
    per = -(-rows // chunks)
    idx = ", ".join(str(int(v)) for v in index)
    wts = ", ".join(flt(float(v)) for v in weight)
    extra = ""
    if fill is not None:
        extra = "static const float FILL[%d] = {%s};\n" % (len(fill), ", ".join(flt(float(v)) for v in fill))
    if per_out == 1 and fill is None:
        inner_loop = "for (long i = 0; i < %d; ++i) dst[i] = s0[i];" % inner
        pointers = "const float *s0 = x + (o * %d + IDX[j]) * %d;" % (n_in, inner)
    else:
        terms = " + ".join("w%d * s%d[i]" % (t, t) for t in range(per_out))
        pointers = " ".join("const float *s%d = x + (o * %d + IDX[j * %d + %d]) * %d; const float w%d = WT[j * %d + %d];" % (
            t, n_in, per_out, t, inner, t, per_out, t) for t in range(per_out))
        inner_loop = "for (long i = 0; i < %d; ++i) dst[i] = %s%s;" % (inner, "FILL[j] + " if fill is not None else "", terms)
    body = extra + """static const int IDX[%d] = {%s};
static const float WT[%d] = {%s};
void KNAME(float *restrict out, const float *restrict x, int core_id) {
%s
  for (long r = r0; r < r1; ++r) {
    long o = r / %d, j = r %% %d;
    float *dst = out + r * %d;
    %s
    %s
  }
}
""" % (len(index), idx, len(weight), wts, range_head(per, rows, "r"), n_out, n_out, inner, pointers, inner_loop)
    return make_kernel("resize", body, [rows * inner, outer * n_in * inner], chunks)


def _tap_tables(n_out: int, index: Sequence[int], weight: Sequence[float], per_out: int) -> str:
    """Tap t's source indices and weights as tables I<t>, W<t> of ``n_out`` entries each (contiguous per tap, so a
    loop over output positions loads them as vectors)."""
    lines = []
    for t in range(per_out):
        lines.append("static const int I%d[%d] = {%s};" % (t, n_out, ", ".join(str(int(index[j * per_out + t])) for j in range(n_out))))
        if per_out > 1:
            lines.append("static const float W%d[%d] = {%s};" % (t, n_out, ", ".join(flt(float(weight[j * per_out + t])) for j in range(n_out))))
    return "\n".join(lines) + "\n"


def taps_last_axis(outer: int, n_in: int, n_out: int, index: Sequence[int], weight: Sequence[float], per_out: int,
                   fill: Optional[Sequence[float]] = None) -> CKernel:  # fmt: skip
    """:func:`taps` on the last axis: per row, a loop over output positions reading its taps from the row by
    table (a vector gather), rather than one output element per row of a one-element inner loop."""
    chunks = chunks_for(outer, n_out * per_out)
    per = -(-outer // chunks)
    terms = " + ".join("W%d[j] * s[I%d[j]]" % (t, t) for t in range(per_out)) if per_out > 1 else "s[I0[j]]"
    extra = ""
    if fill is not None:
        extra = "static const float FILL[%d] = {%s};\n" % (n_out, ", ".join(flt(float(v)) for v in fill))
        terms = "FILL[j] + " + (terms if per_out > 1 else "W0[j] * s[I0[j]]")
        if per_out == 1:
            extra += "static const float W0[%d] = {%s};\n" % (n_out, ", ".join(flt(float(w)) for w in weight))
    body = extra + _tap_tables(n_out, index, weight, per_out) + """void KNAME(float *restrict out, const float *restrict x, int core_id) {
%s
  for (long r = r0; r < r1; ++r) {
    const float *restrict s = x + r * %d;
    float *restrict dst = out + r * %d;
    for (long j = 0; j < %d; ++j) dst[j] = %s;
  }
}
""" % (range_head(per, outer, "r"), n_in, n_out, n_out, terms)
    return make_kernel("resize", body, [outer * n_out, outer * n_in], chunks)


def nearest_2d(outer: int, h_in: int, w_in: int, rows_at: Sequence[int], cols_at: Sequence[int]) -> CKernel:
    """Nearest Resize of the last two axes in one pass: ``out[o, y, x] = x[o, rows_at[y], cols_at[x]]``; an output
    row whose source row is the previous one's copies that output row (contiguous) instead of gathering again."""
    h_out, w_out = len(rows_at), len(cols_at)
    rows = outer * h_out
    chunks = chunks_for(rows, w_out)
    per = -(-rows // chunks)
    body = """static const int IY[%d] = {%s};
static const int IX[%d] = {%s};
void KNAME(float *restrict out, const float *restrict x, int core_id) {
%s
  for (long r = r0; r < r1; ++r) {
    long o = r / %d, y = r %% %d;
    float *restrict dst = out + r * %d;
    if (r > r0 && y > 0 && IY[y] == IY[y - 1]) {
      const float *restrict prev = dst - %d;
      for (long j = 0; j < %d; ++j) dst[j] = prev[j];
      continue;
    }
    const float *restrict s = x + (o * %d + IY[y]) * %d;
    for (long j = 0; j < %d; ++j) dst[j] = s[IX[j]];
  }
}
""" % (h_out, ", ".join(str(int(v)) for v in rows_at), w_out, ", ".join(str(int(v)) for v in cols_at), range_head(per, rows, "r"),
       h_out, h_out, w_out, w_out, w_out, h_in, w_in, w_out)  # fmt: skip
    return make_kernel("resize", body, [rows * w_out, outer * h_in * w_in], chunks)
