"""Normalisations: Softmax and LogSoftmax along an axis, LRN across channels, InstanceNormalization."""

from __future__ import annotations


from .ckernel import CKernel, chunks_for, flt, make_kernel, range_head

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
