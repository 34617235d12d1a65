"""C source of the generated kernels for the index, normalisation, padding, resize and transposed-convolution ops.

Same calling convention as :mod:`svod_min.onnx.csrc` (``void k(T *out, const T *in..., int core_id)``,
``chunks`` calls, every shape compiled in, no header). Tables a kernel needs (Resize's source
indices and weights) are compiled in as ``static const`` arrays: they are small (one entry per
output position of one axis) and known at build time.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Sequence

from .csrc import CKernel, ConvGeom, activation, chunks_for, contiguous_strides, flt, make_kernel, range_head

#: C type of each run-time dtype a generated kernel reads or writes.
C_TYPES = {"float32": "float", "bool": "unsigned char", "int64": "long long", "int32": "int"}


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


def arg_reduce(outer: int, red: int, inner: int, largest: bool, last: bool) -> CKernel:
    """ArgMax/ArgMin over (outer, red, inner) as int64; ties go to the first index, or the last with ``last``."""
    items = outer * inner
    chunks = chunks_for(items, red)
    per = -(-items // chunks)
    cmp = (">=" if last else ">") if largest else ("<=" if last else "<")
    body = """void KNAME(long long *restrict out, const float *restrict x, int core_id) {
%s
  for (long i = i0; i < i1; ++i) {
    const float *p = x + (i / %d) * %d + i %% %d;
    float best = p[0]; long at = 0;
    for (long k = 1; k < %d; ++k) { float v = p[k * %d]; if (v %s best) { best = v; at = k; } }
    out[i] = at;
  }
}
""" % (range_head(per, items), inner, red * inner, inner, red, inner, cmp)
    return make_kernel("arg", body, [items, outer * red * inner], chunks)


def instance_norm(planes: int, channels: int, size: int, epsilon: float) -> CKernel:
    """InstanceNormalization: each (n, c) plane normalised by its own mean and variance, then scale[c], bias[c]."""
    chunks = chunks_for(planes, size * 3)
    per = -(-planes // chunks)
    body = """void KNAME(float *restrict out, const float *restrict x, const float *restrict scale, const float *restrict bias, int core_id) {
%s
  for (long p = p0; p < p1; ++p) {
    const float *xp = x + p * %d;
    float *op = out + p * %d;
    double sum = 0.0, sq = 0.0;
    for (long i = 0; i < %d; ++i) sum += xp[i];
    float mean = (float)(sum / %d);
    for (long i = 0; i < %d; ++i) { float d = xp[i] - mean; sq += (double)d * d; }
    float var = (float)(sq / %d);
    long c = p %% %d;
    float k = scale[c] / __builtin_sqrtf(var + %s), b = bias[c];
    for (long i = 0; i < %d; ++i) op[i] = (xp[i] - mean) * k + b;
  }
}
""" % (range_head(per, planes, "p"), size, size, size, size, size, size, channels, flt(epsilon), size)
    return make_kernel("instnorm", body, [planes * size, planes * size, channels, channels], chunks)


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


def conv_transpose(n: int, c: int, h: int, w: int, oc: int, oh: int, ow: int, kh: int, kw: int, sh: int, sw: int,
                   pt: int, pl: int, dh: int, dw: int, groups: int, bias: bool) -> CKernel:  # fmt: skip
    """ConvTranspose as a gather: out[n, oc, y, x] = bias + sum of x[n, c, iy, ix] * w[c, oc % ocg, ky, kx] over
    the taps with y + pt = iy * sh + ky * dh (and the same for x)."""
    cg, ocg = c // groups, oc // groups
    planes = n * oc
    chunks = chunks_for(planes, oh * ow * cg * kh * kw)
    per = -(-planes // chunks)
    body = """void KNAME(float *restrict out, const float *restrict x, const float *restrict wt%s, int core_id) {
%s
  for (long p = p0; p < p1; ++p) {
    long b = p / %d, o = p %% %d, grp = o / %d, oo = o %% %d;
    const float *xg = x + (b * %d + grp * %d) * %d;
    float *dst = out + p * %d;
    for (long y = 0; y < %d; ++y) {
      for (long xx = 0; xx < %d; ++xx) {
        float acc = %s;
        for (long ky = 0; ky < %d; ++ky) {
          long ty = y + %d - ky * %d;
          if (ty < 0 || ty %% %d) continue;
          long iy = ty / %d;
          if (iy >= %d) continue;
          for (long kx = 0; kx < %d; ++kx) {
            long tx = xx + %d - kx * %d;
            if (tx < 0 || tx %% %d) continue;
            long ix = tx / %d;
            if (ix >= %d) continue;
            for (long ci = 0; ci < %d; ++ci)
              acc += xg[(ci * %d + iy) * %d + ix] * wt[(((grp * %d + ci) * %d + oo) * %d + ky) * %d + kx];
          }
        }
        dst[y * %d + xx] = acc;
      }
    }
  }
}
""" % (", const float *restrict bias" if bias else "", range_head(per, planes, "p"), oc, oc, ocg, ocg, c, cg, h * w,
       oh * ow, oh, ow, "bias[o]" if bias else "0.0f", kh, pt, dh, sh, sh, h, kw, pl, dw, sw, sw, w, cg, h, w, cg, ocg,
       kh, kw, ow)  # fmt: skip
    extents = [n * oc * oh * ow, n * c * h * w, c * ocg * kh * kw] + ([oc] if bias else [])
    return make_kernel("convt", body, extents, chunks)


#: The largest padded input plane (elements, on the stack) depthwise2d copies each plane into.
DEPTHWISE_PAD_MAX = 16384


def depthwise_padded_plane(g: ConvGeom) -> int:
    """Elements of a plane padded to hold every tap of every output (0 past the pads)."""
    rows = max(g.h + g.pt, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1)
    cols = max(g.w + g.pl, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1)
    return rows * cols


def depthwise2d(g: ConvGeom, bias: bool, act: Optional[str], act_params: Dict[str, float]) -> CKernel:
    """Depthwise convolution (groups = C = OC) of planes up to DEPTHWISE_PAD_MAX padded elements: each input plane
    copied into a zero-padded one (the borders filled once), then every output's fixed taps in (kh, kw) order from
    the bias, without bounds tests, so the outputs vectorise; activation in the store. The taps in the padding add
    0 x w: the sums are those of a conv that skips them."""
    rows = max(g.h + g.pt, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1)
    cols = max(g.w + g.pl, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1)
    planes = g.n * g.c
    chunks = chunks_for(planes, g.oh * g.ow * g.kh * g.kw)
    per = -(-planes // chunks)
    body = """void KNAME(float *restrict out, const float *restrict x, const float *restrict w%(bias_arg)s, int core_id) {
  enum { C = %(c)d, H = %(h)d, W = %(w)d, OH = %(oh)d, OW = %(ow)d, KH = %(kh)d, KW = %(kw)d, SH = %(sh)d, SW = %(sw)d,
         PT = %(pt)d, PL = %(pl)d, DH = %(dh)d, DW = %(dw)d, PH = %(ph)d, PW = %(pw)d };
  long p0 = (long)core_id * %(per)d, p1 = p0 + %(per)d < %(planes)d ? p0 + %(per)d : %(planes)d;
  float padded[PH * PW];
  for (long i = 0; i < PH * PW; ++i) padded[i] = 0.0f;
  for (long p = p0; p < p1; ++p) {
    const long c = p %% C;
    const float *xp = x + p * (long)(H * W), *wk = w + c * (KH * KW);
    float *o = out + p * (long)(OH * OW);
    float wv[KH * KW];
    for (long t = 0; t < KH * KW; ++t) wv[t] = wk[t];
    for (long ih = 0; ih < H; ++ih)
      for (long iw = 0; iw < W; ++iw) padded[(ih + PT) * PW + iw + PL] = xp[ih * W + iw];
    const float b = %(bias)s;
    for (long oh = 0; oh < OH; ++oh)
      for (long ow = 0; ow < OW; ++ow) {
        const float *xw = padded + oh * SH * PW + ow * SW;
        float acc = b;
        for (long kh = 0; kh < KH; ++kh)
          for (long kw = 0; kw < KW; ++kw) acc += wv[kh * KW + kw] * xw[kh * DH * PW + kw * DW];
        o[oh * OW + ow] = %(store)s;
      }
  }
}
""" % dict(bias_arg=", const float *restrict bias" if bias else "", c=g.c, h=g.h, w=g.w, oh=g.oh, ow=g.ow, kh=g.kh,
           kw=g.kw, sh=g.sh, sw=g.sw, pt=g.pt, pl=g.pl, dh=g.dh, dw=g.dw, ph=rows, pw=cols, per=per, planes=planes,
           bias="bias[c]" if bias else "0.0f", store=activation(act, act_params, "acc"))
    extents = [g.n * g.c * g.oh * g.ow, g.n * g.c * g.h * g.w, g.c * g.kh * g.kw] + ([g.c] if bias else [])
    return make_kernel("dwconv", body, extents, chunks)

