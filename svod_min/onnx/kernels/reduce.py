"""Reductions along one axis the library lacks (min, prod, sum of squares, L1, L2, log-sum-exp) and ArgMax/ArgMin."""

from __future__ import annotations


from .ckernel import CKernel, chunks_for, make_kernel, range_head

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
