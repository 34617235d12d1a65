"""C source of the kernels the ONNX lowering generates where the library has none.

Each function returns a :class:`CKernel`: one C function in svod's calling convention
(``void k(float *out, const T *in..., int core_id)``, run ``chunks`` times with ``core_id = 0..chunks-1``,
each call doing its own contiguous share). Shapes, strides and attributes are compiled in as
constants: the bundle compiles every kernel for every target at build time, and constant trip
counts let the compiler unroll and vectorise. No header is included (a cross target may lack
the C library's headers); the few libm functions used are declared here and resolved by the loader.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

PROTOTYPES = ("float expf(float); float logf(float); float tanhf(float); float erff(float); "
              "float powf(float, float); float floorf(float); float ceilf(float); float nearbyintf(float);\n")  # fmt: skip
#: Elements one core_id call handles at least: smaller tensors run on one thread.
GRAIN = 1 << 15
MAX_CHUNKS = 64


@dataclass(frozen=True)
class CKernel:
    """A generated kernel: entry name, C text, pointer count, element counts each buffer must hold, calls, and
    compiler flags it adds to the target's (after them, so they win)."""

    name: str
    source: str
    extents: Tuple[int, ...]
    chunks: int
    flags: Tuple[str, ...] = ()
    flops: int = 0

    @property
    def buffers(self) -> int:
        return len(self.extents)


def make_kernel(tag: str, body: str, extents: Sequence[int], chunks: int, flags: Sequence[str] = (), flops: int = 0) -> CKernel:
    """A CKernel named after the hash of its body and flags (equal ones share one compiled kernel)."""
    digest = hashlib.sha256("\0".join([body, *flags]).encode("utf-8")).hexdigest()[:12]
    name = "svod_onnx_%s_%s" % (tag, digest)
    return CKernel(name, PROTOTYPES + body.replace("KNAME", name), tuple(max(1, int(e)) for e in extents),
                   max(1, int(chunks)), tuple(flags), int(flops))  # fmt: skip


def chunks_for(items: int, work_per_item: int, grain: int = GRAIN) -> int:
    """How many core_id calls share ``items`` independent items of ``work_per_item`` elements each (each call doing
    ``grain`` of that work at least)."""
    return max(1, min(items, MAX_CHUNKS, (items * max(1, work_per_item)) // grain))


def range_head(per: int, total: int, var: str = "i") -> str:
    """The C line giving this core_id's items ``[var0, var1)`` of ``total``, ``per`` per call."""
    return "  long %s0 = (long)core_id * %d, %s1 = %s0 + %d < %d ? %s0 + %d : %d;" % (var, per, var, var, per, total, var, per, total)


def flt(value: float) -> str:
    """A float32 C literal (infinities as huge constants the compiler folds to inf)."""
    if math.isinf(value):
        return "(%s1e39f)" % ("-" if value < 0 else "")
    if math.isnan(value):
        return "(0.0f/0.0f)"
    return "%.9gf" % value if "e" in "%.9g" % value or "." in "%.9g" % value else "%.9g.0f" % value


def activation(kind: Optional[str], params: Dict[str, float], v: str) -> str:
    """The C expression of a fused activation applied to ``v`` (NaN stays NaN where ONNX's does)."""
    if kind is None:
        return v
    if kind == "Relu":
        return "(%s < 0.0f ? 0.0f : %s)" % (v, v)
    if kind == "LeakyRelu":
        return "(%s < 0.0f ? %s * %s : %s)" % (v, flt(params["alpha"]), v, v)
    if kind == "Clip":
        return "(%s < %s ? %s : (%s > %s ? %s : %s))" % (v, flt(params["min"]), flt(params["min"]), v, flt(params["max"]), flt(params["max"]), v)
    if kind == "Sigmoid":
        return "(1.0f / (1.0f + expf(-%s)))" % v
    if kind == "Tanh":
        return "tanhf(%s)" % v
    if kind == "HardSigmoid":
        return "__builtin_fmaxf(0.0f, __builtin_fminf(1.0f, %s * %s + %s))" % (flt(params["alpha"]), v, flt(params["beta"]))
    if kind == "HardSwish":
        return "(%s * __builtin_fmaxf(0.0f, __builtin_fminf(1.0f, %s / 6.0f + 0.5f)))" % (v, v)
    if kind == "Gelu" and params.get("tanh"):
        return "(0.5f * %s * (1.0f + tanhf(0.7978845608028654f * (%s + 0.044715f * %s * %s * %s))))" % (v, v, v, v, v)
    if kind == "Gelu":
        return "(0.5f * %s * (1.0f + erff(%s * 0.70710678118654752f)))" % (v, v)
    raise ValueError(kind)


def contiguous_strides(shape: Sequence[int]) -> List[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> List[int]:
    """Element strides of ``shape`` read as ``out_shape`` (numpy broadcasting; 0 where it repeats)."""
    padded = [1] * (len(out_shape) - len(shape)) + list(shape)
    strides = contiguous_strides(padded)
    return [0 if p == 1 and o != 1 else s for p, o, s in zip(padded, out_shape, strides)]


def collapse(out_shape: Sequence[int], strides: List[List[int]]) -> Tuple[List[int], List[List[int]]]:
    """Drop size-1 dims and merge neighbours every array walks as one (shape, strides per array)."""
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(out_shape) if d != 1]
    merged: List[Tuple[int, List[int]]] = []
    for d, ss in dims:
        if merged and all(prev == cur * d for prev, cur in zip(merged[-1][1], ss)):
            merged[-1] = (merged[-1][0] * d, ss)
        else:
            merged.append((d, ss))
    if not merged:
        merged = [(1, [1 for _ in strides])]
    return [d for d, _ in merged], [[ss[k] for _, ss in merged] for k in range(len(strides))]


def elementwise(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]], expr: str, *, inplace: bool = False,
                tag: str = "ew", in_types: Optional[Sequence[str]] = None, out_type: str = "float") -> CKernel:  # fmt: skip
    """``out = expr(x0, x1, ...)`` with numpy broadcasting; ``inplace``: x0 is ``out`` itself (one buffer fewer);
    ``out_type``: the C type stored (``unsigned char`` for a bool result)."""
    n_out = max(1, int(math.prod(out_shape)))
    arrays = [contiguous_strides(out_shape)] + [broadcast_strides(s, out_shape) for s in in_shapes]
    shape, strides = collapse(out_shape, arrays)
    last = shape[-1]
    block = min(last, 4096)
    nblocks = -(-last // block)
    outer = shape[:-1]
    rows = int(math.prod(outer)) * nblocks
    chunks = chunks_for(rows, block)
    per = -(-rows // chunks)
    types = list(in_types or ["float"] * len(in_shapes))
    first = 1 if inplace else 0
    params = ["%s *restrict out" % out_type] + ["const %s *restrict in%d" % (types[k], k) for k in range(first, len(in_shapes))]
    lines = ["void KNAME(%s, int core_id) {" % ", ".join(params),
             "  const long rows = %d, per = %d;" % (rows, per),
             "  long r0 = (long)core_id * per, r1 = r0 + per < rows ? r0 + per : rows;",
             "  for (long r = r0; r < r1; ++r) {",
             "    long q = r / %d, j0 = (r %% %d) * %d, j1 = j0 + %d < %d ? j0 + %d : %d;" % (nblocks, nblocks, block, block, last, block, last),
             "    long o = 0%s;" % "".join(", o%d = 0" % k for k in range(len(in_shapes)))]
    for axis in reversed(range(len(outer))):
        adds = "".join(" o%d += k * %d;" % (k, strides[k + 1][axis]) for k in range(len(in_shapes)) if strides[k + 1][axis])
        lines.append("    { long k = q %% %d; q /= %d; o += k * %d;%s }" % (outer[axis], outer[axis], strides[0][axis], adds))
    loads = []
    for k in range(len(in_shapes)):
        src = "out" if (inplace and k == 0) else "in%d" % k
        step = strides[k + 1][-1]
        index = "o%d + j * %d" % (k, step) if step not in (0, 1) else ("o%d + j" % k if step == 1 else "o%d" % k)
        loads.append("const float x%d = (float)%s[%s];" % (k, src, index))
    lines += ["    for (long j = j0; j < j1; ++j) {", "      %s" % " ".join(loads),
              "      out[o + j] = %s;" % expr, "    }", "  }", "}", ""]
    extents = [n_out] + [max(1, int(math.prod(s))) for s in in_shapes[first:]]
    return make_kernel(tag, "\n".join(lines), extents, chunks)


@dataclass(frozen=True)
class ConvGeom:
    """One 2-D convolution or pooling window, all sizes known: N, C, H, W -> N, OC, OH, OW."""

    n: int
    c: int
    h: int
    w: int
    oc: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pl: int
    pb: int
    pr: int
    dh: int
    dw: int
    groups: int = 1


def conv2d(g: ConvGeom, bias: bool, act: Optional[str], act_params: Dict[str, float]) -> CKernel:
    """Direct grouped convolution with any padding; bias and activation in the store."""
    cg, ocg = g.c // g.groups, g.oc // g.groups
    planes = g.n * g.oc
    chunks = chunks_for(planes, g.oh * g.ow * cg * g.kh * g.kw)
    per = -(-planes // chunks)
    store = activation(act, act_params, "acc")
    body = """void KNAME(float *restrict out, const float *restrict x, const float *restrict w%s, int core_id) {
  long p0 = (long)core_id * %d, p1 = p0 + %d < %d ? p0 + %d : %d;
  for (long p = p0; p < p1; ++p) {
    long n = p / %d, oc = p %% %d, grp = oc / %d;
    const float *xg = x + (n * %d + grp * %d) * %d;
    const float *wk = w + oc * %d;
    float *o = out + p * %d;
    for (long oh = 0; oh < %d; ++oh) {
      for (long ow = 0; ow < %d; ++ow) {
        float acc = %s;
        for (long c = 0; c < %d; ++c) {
          for (long kh = 0; kh < %d; ++kh) {
            long ih = oh * %d - %d + kh * %d;
            if (ih < 0 || ih >= %d) continue;
            for (long kw = 0; kw < %d; ++kw) {
              long iw = ow * %d - %d + kw * %d;
              if (iw < 0 || iw >= %d) continue;
              acc += xg[(c * %d + ih) * %d + iw] * wk[(c * %d + kh) * %d + kw];
            }
          }
        }
        o[oh * %d + ow] = %s;
      }
    }
  }
}
""" % (", const float *restrict bias" if bias else "", per, per, planes, per, planes, g.oc, g.oc, ocg, g.c, cg, g.h * g.w,
       cg * g.kh * g.kw, g.oh * g.ow, g.oh, g.ow, "bias[oc]" if bias else "0.0f", cg, g.kh, g.sh, g.pt, g.dh, g.h,
       g.kw, g.sw, g.pl, g.dw, g.w, g.h, g.w, g.kh, g.kw, g.ow, store)  # fmt: skip
    extents = [g.n * g.oc * g.oh * g.ow, g.n * g.c * g.h * g.w, g.oc * cg * g.kh * g.kw] + ([g.oc] if bias else [])
    return make_kernel("conv", body, extents, chunks)


def pool2d(g: ConvGeom, kind: str, count_include_pad: bool) -> CKernel:
    """Max or average pooling, every output testing each tap (padding never wins a max, NaN wins; ONNX's divisor):
    for the rows too wide for :mod:`svod_min.onnx.csrc_pool`'s buffers, its stack use does not grow with the row."""
    planes = g.n * g.c
    chunks = chunks_for(planes, g.oh * g.ow * g.kh * g.kw)
    per = -(-planes // chunks)
    if kind == "max":
        init, step, final = "-(1e39f)", "acc = (v > acc || v != v) ? v : acc;", "acc"
    else:
        init, step, final = "0.0f", "acc += v;", "acc / (float)cnt"
    body = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  long p0 = (long)core_id * %d, p1 = p0 + %d < %d ? p0 + %d : %d;
  for (long p = p0; p < p1; ++p) {
    const float *xp = x + p * %d;
    float *o = out + p * %d;
    for (long oh = 0; oh < %d; ++oh) {
      for (long ow = 0; ow < %d; ++ow) {
        float acc = %s; long cnt = 0;
        for (long kh = 0; kh < %d; ++kh) {
          long ih = oh * %d - %d + kh * %d;
          for (long kw = 0; kw < %d; ++kw) {
            long iw = ow * %d - %d + kw * %d;
            int inside = ih >= 0 && ih < %d && iw >= 0 && iw < %d;
            int padded = ih < %d && iw < %d;
            cnt += %s;
            if (!inside) continue;
            float v = xp[ih * %d + iw];
            %s
          }
        }
        o[oh * %d + ow] = %s;
      }
    }
  }
}
""" % (per, per, planes, per, planes, g.h * g.w, g.oh * g.ow, g.oh, g.ow, init, g.kh, g.sh, g.pt, g.dh, g.kw, g.sw,
       g.pl, g.dw, g.h, g.w, g.h + g.pb, g.w + g.pr, "padded" if count_include_pad else "inside", g.w, step, g.ow, final)  # fmt: skip
    return make_kernel("pool", body, [g.n * g.c * g.oh * g.ow, g.n * g.c * g.h * g.w], chunks)


#: LRN's power (bias + alpha/size sum)^beta for the betas CNNs use, as square roots (instructions that
#: vectorise) instead of a powf call per element (AlexNet's two LRNs: 5.3 ms of its 30 at one thread).
LRN_POWERS = {0.75: "(__builtin_sqrtf(t) * __builtin_sqrtf(__builtin_sqrtf(t)))", 0.5: "__builtin_sqrtf(t)", 1.0: "t"}
#: Pixels per block of LRN's running sums (on the stack).
LRN_BLOCK = 1024


def lrn(n: int, c: int, hw: int, size: int, alpha: float, beta: float, bias: float) -> CKernel:
    """ONNX LRN across channels: x / (bias + alpha / size * sum of squares in the window) ** beta.

    Per plane, a block of pixels at a time: the window's channels squared and summed into the block in
    channel order (the loops over pixels vectorise), then each output; the power as square roots where
    beta allows (LRN_POWERS), powf otherwise."""
    planes = n * c
    chunks = chunks_for(planes, hw * size)
    per = -(-planes // chunks)
    power = LRN_POWERS.get(beta, "powf(t, %s)" % flt(beta))
    body = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  long p0 = (long)core_id * %(per)d, p1 = p0 + %(per)d < %(planes)d ? p0 + %(per)d : %(planes)d;
  float s[%(block)d];
  for (long p = p0; p < p1; ++p) {
    long n = p / %(c)d, c = p %% %(c)d;
    long lo = c - %(before)d < 0 ? 0 : c - %(before)d, hi = c + %(after)d > %(last)d ? %(last)d : c + %(after)d;
    for (long i0 = 0; i0 < %(hw)d; i0 += %(block)d) {
      long m = %(hw)d - i0 < %(block)d ? %(hw)d - i0 : %(block)d;
      for (long i = 0; i < m; ++i) s[i] = 0.0f;
      for (long cc = lo; cc <= hi; ++cc) {
        const float *xc = x + (n * %(c)d + cc) * %(hw)d + i0;
        for (long i = 0; i < m; ++i) s[i] += xc[i] * xc[i];
      }
      const float *xp = x + p * %(hw)d + i0;
      float *o = out + p * %(hw)d + i0;
      for (long i = 0; i < m; ++i) {
        float t = %(bias)s + %(scale)s * s[i];
        o[i] = xp[i] / %(power)s;
      }
    }
  }
}
""" % dict(per=per, planes=planes, block=LRN_BLOCK, c=c, before=(size - 1) // 2, after=-(-(size - 1) // 2),
           last=c - 1, hw=hw, bias=flt(bias), scale=flt(alpha / size), power=power)
    return make_kernel("lrn", body, [planes * hw, planes * hw], chunks)


def slice_copy(outer: int, length: int, total: int, offset: int) -> CKernel:
    """Concat's strided case: ``out[o, offset:offset+length] = x[o, :]`` for each of ``outer`` rows of ``total``."""
    chunks = chunks_for(outer, length)
    per = -(-outer // chunks)
    body = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  long r0 = (long)core_id * %d, r1 = r0 + %d < %d ? r0 + %d : %d;
  for (long r = r0; r < r1; ++r)
    for (long j = 0; j < %d; ++j) out[r * %d + %d + j] = x[r * %d + j];
}
""" % (per, per, outer, per, outer, length, total, offset, length)
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


#: Softmax's exp of x - max (never above 0): a polynomial the compiler vectorises, unlike a libm call. Below -87
#: the result is 0 (exp(-87) is float32's smallest normal; the subnormals below it vanish against the row's sum,
#: which is at least 1); NaN stays NaN.
SOFTMAX_EXP = """static inline float softmax_exp(float x) {
  float xc = x < -87.0f ? -87.0f : (x != x ? 0.0f : x);
  float kf = (xc * 1.44269502f + 12582912.0f) - 12582912.0f;
  float r = (xc - kf * 0.693145752f) - kf * 1.42860677e-06f;
  float p = 0.000198412701f;
  p = p * r + 0.00138888892f; p = p * r + 0.00833333377f; p = p * r + 0.0416666679f;
  p = p * r + 0.166666672f; p = p * r + 0.5f; p = p * r + 1.0f; p = p * r + 1.0f;
  union { unsigned u; float f; } scale = { (unsigned)((int)kf + 127) << 23 };
  float y = p * scale.f;
  return x < -87.0f ? 0.0f : (x != x ? x : y);
}
"""
#: Softmax over a middle axis runs this many inner positions side by side (one vector loop each step).
SOFTMAX_BLOCK = 64


def softmax_axis(outer: int, red: int, inner: int, log: bool) -> CKernel:
    """Softmax (or LogSoftmax) along an axis: x viewed as (outer, red, inner); rows (inner 1) or blocks of
    inner positions, each pass a contiguous loop: the max, exp and its sum, then the scale (or x - max - log sum)."""
    if inner == 1:
        return _softmax_rows(outer, red, log)
    block = min(inner, SOFTMAX_BLOCK)
    blocks = -(-inner // block)
    items = outer * blocks
    chunks = chunks_for(items, red * block * 3)
    per = -(-items // chunks)
    store = "" if log else "o[i] = e; "
    final = "o[i] = v[i] - m[i] - ls[i];" if log else "o[i] *= ls[i];"
    body = SOFTMAX_EXP + """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  long i0 = (long)core_id * %(per)d, i1 = i0 + %(per)d < %(items)d ? i0 + %(per)d : %(items)d;
  float m[%(block)d], s[%(block)d], ls[%(block)d];
  for (long it = i0; it < i1; ++it) {
    long b = (it / %(blocks)d) * %(plane)d + (it %% %(blocks)d) * %(block)d;
    long n = %(inner)d - (it %% %(blocks)d) * %(block)d < %(block)d ? %(inner)d - (it %% %(blocks)d) * %(block)d : %(block)d;
    for (long i = 0; i < n; ++i) { m[i] = -(1e39f); s[i] = 0.0f; }
    for (long k = 0; k < %(red)d; ++k) {
      const float *restrict v = x + b + k * %(inner)d;
      for (long i = 0; i < n; ++i) m[i] = v[i] > m[i] ? v[i] : m[i];
    }
    for (long k = 0; k < %(red)d; ++k) {
      const float *restrict v = x + b + k * %(inner)d;
      float *restrict o = out + b + k * %(inner)d;
      for (long i = 0; i < n; ++i) { float e = softmax_exp(v[i] - m[i]); %(store)ss[i] += e; }
    }
    for (long i = 0; i < n; ++i) ls[i] = %(total)s;
    for (long k = 0; k < %(red)d; ++k) {
      %(source)sfloat *restrict o = out + b + k * %(inner)d;
      for (long i = 0; i < n; ++i) %(final)s
    }
  }
}
""" % dict(per=per, items=items, block=block, blocks=blocks, plane=red * inner, inner=inner, red=red, store=store,
           total="logf(s[i])" if log else "1.0f / s[i]", final=final,
           source="const float *restrict v = x + b + k * %d; " % inner if log else "")
    return make_kernel("softmax", body, [outer * red * inner, outer * red * inner], chunks)


def _softmax_rows(rows: int, cols: int, log: bool) -> CKernel:
    """Softmax (or LogSoftmax) of contiguous rows: the max and the sum of exps in 16 lane accumulators (vector
    loops, a fixed summation order), the exps stored in the same pass as their sum, then scaled."""
    chunks = chunks_for(rows, cols * 3)
    per = -(-rows // chunks)
    store = "" if log else "o[j + l] = e; "
    tail_store = "" if log else "o[j] = e; "
    final = "o[j] = v[j] - m - ls;" if log else "o[j] *= ls;"
    body = SOFTMAX_EXP + """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  long r0 = (long)core_id * %(per)d, r1 = r0 + %(per)d < %(rows)d ? r0 + %(per)d : %(rows)d;
  for (long r = r0; r < r1; ++r) {
    const float *restrict v = x + r * %(cols)d;
    float *restrict o = out + r * %(cols)d;
    float lane[16], m = -(1e39f), s = 0.0f;
    long j;
    for (int l = 0; l < 16; ++l) lane[l] = -(1e39f);
    for (j = 0; j + 16 <= %(cols)d; j += 16)
      for (int l = 0; l < 16; ++l) lane[l] = v[j + l] > lane[l] ? v[j + l] : lane[l];
    for (int l = 0; l < 16; ++l) m = lane[l] > m ? lane[l] : m;
    for (; j < %(cols)d; ++j) m = v[j] > m ? v[j] : m;
    for (int l = 0; l < 16; ++l) lane[l] = 0.0f;
    for (j = 0; j + 16 <= %(cols)d; j += 16)
      for (int l = 0; l < 16; ++l) { float e = softmax_exp(v[j + l] - m); %(store)slane[l] += e; }
    for (int l = 0; l < 16; ++l) s += lane[l];
    for (; j < %(cols)d; ++j) { float e = softmax_exp(v[j] - m); %(tail_store)ss += e; }
    float ls = %(total)s;
    for (j = 0; j < %(cols)d; ++j) %(final)s
  }
}
""" % dict(per=per, rows=rows, cols=cols, store=store, tail_store=tail_store, total="logf(s)" if log else "1.0f / s", final=final)
    return make_kernel("softmax", body, [rows * cols, rows * cols], chunks)


def reduce_axis(outer: int, red: int, inner: int, kind: str) -> CKernel:
    """Reductions the library lacks (min, prod, sum of squares, L1, L2, log-sum-exp) over (outer, red, inner)."""
    items = outer * inner
    chunks = chunks_for(items, red)
    per = -(-items // chunks)
    init, step, final = {
        "min": ("(1e39f)", "a = (v < a || v != v) ? v : a;", "a"),
        "prod": ("1.0f", "a *= v;", "a"),
        "sumsquare": ("0.0f", "a += v * v;", "a"),
        "l1": ("0.0f", "a += __builtin_fabsf(v);", "a"),
        "l2": ("0.0f", "a += v * v;", "__builtin_sqrtf(a)"),
        "logsum": ("0.0f", "a += v;", "logf(a)"),
    }[kind]
    body = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  long i0 = (long)core_id * %d, i1 = i0 + %d < %d ? i0 + %d : %d;
  for (long i = i0; i < i1; ++i) {
    long b = (i / %d) * %d + i %% %d;
    float a = %s;
    for (long k = 0; k < %d; ++k) { float v = x[b + k * %d]; %s }
    out[i] = %s;
  }
}
""" % (per, per, items, per, items, inner, red * inner, inner, init, red, inner, step, final)
    return make_kernel("reduce", body, [items, outer * red * inner], chunks)


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


def im2col(g: ConvGeom) -> CKernel:
    """col[(c, kh, kw), (oh, ow)] = x[c, ih, iw] (0 in the padding) for N = 1: a convolution becomes one matmul."""
    rows = g.c * g.kh * g.kw
    chunks = chunks_for(rows, g.oh * g.ow)
    per = -(-rows // chunks)
    body = """void KNAME(float *restrict col, const float *restrict x, int core_id) {
  long r0 = (long)core_id * %d, r1 = r0 + %d < %d ? r0 + %d : %d;
  for (long r = r0; r < r1; ++r) {
    long c = r / %d, kh = (r / %d) %% %d, kw = r %% %d;
    float *dst = col + r * %d;
    const float *xc = x + c * %d;
    for (long oh = 0; oh < %d; ++oh) {
      long ih = oh * %d - %d + kh * %d;
      for (long ow = 0; ow < %d; ++ow) {
        long iw = ow * %d - %d + kw * %d;
        dst[oh * %d + ow] = (ih >= 0 && ih < %d && iw >= 0 && iw < %d) ? xc[ih * %d + iw] : 0.0f;
      }
    }
  }
}
""" % (per, per, rows, per, rows, g.kh * g.kw, g.kw, g.kh, g.kw, g.oh * g.ow, g.h * g.w, g.oh, g.sh, g.pt, g.dh, g.ow,
       g.sw, g.pl, g.dw, g.ow, g.h, g.w, g.w)  # fmt: skip
    return make_kernel("im2col", body, [rows * g.oh * g.ow, g.c * g.h * g.w], chunks)
