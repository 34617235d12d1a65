"""C source of the blocked-channel-layout kernels other than convolution: reorders and pools.

The blocked layout stores a float32 tensor of logical shape [N, C, H, W] as [N, CB, H, W, 16] with
CB = ceil(C / 16): element (n, c, h, w) at (((n CB + c / 16) H + h) W + w) 16 + c % 16. Channels C and above
in the last block are padding: finite but arbitrary values (``to_blocked`` writes zeros) that no kernel lets
reach a real output channel. Every pixel is then 16 contiguous channels, so a pool's work is whole 16-float
vectors: the loops below run over 16 lanes (or over whole rows of 16-lane pixels) and the compiler turns each
into vector instructions.

The pools mirror :mod:`svod_min.onnx.csrc_pool`'s semantics: padding never wins a max, NaN does; the average's
divisor is ONNX's count, (rows counted) x (columns counted), and the overhang of a ceil_mode window past the
end padding never counts. They run in the same two passes (the window's rows element by element into a
buffer of a tile of columns padded with -inf or 0, then its columns without bounds tests), one output row of
one channel block per work item. A max scans the input rows it reads for NaN once, as it reaches them; an
item that meets one, and every later item of its channel block, takes the NaN-propagating copy.

Same calling convention as :mod:`svod_min.onnx.csrc`.
"""

from __future__ import annotations

import hashlib
from typing import Dict, Sequence

from .csrc import PROTOTYPES, CKernel, ConvGeom, chunks_for

#: Channels per block.
LANES = 16
#: Columns (of 16 floats each) of a pool's tile buffer, on the stack: 16 KiB.
TILE_COLUMNS = 256
#: (padding, step) of each pool: the step folds ``v`` into ``acc``.
POOL_KINDS = {"MaxPool": ("-(1e39f)", "acc = acc > v ? acc : v;"), "AveragePool": ("0.0f", "acc += v;")}
#: A max's step where its input holds a NaN: NaN wins, padding (-inf) never does.
NAN_STEP = "acc = (v > acc || v != v) ? v : acc;"


def make_named(tag: str, body: str, extents: Sequence[int], chunks: int) -> CKernel:
    """A CKernel named after the hash of its body (equal bodies share one compiled kernel)."""
    name = "svod_onnx_%s_%s" % (tag, hashlib.sha256(body.encode("utf-8")).hexdigest()[:12])
    return CKernel(name, PROTOTYPES + body.replace("KNAME", name), tuple(max(1, int(e)) for e in extents), max(1, int(chunks)))


def blocks(c: int) -> int:
    """Channel blocks of ``c`` channels."""
    return -(-c // LANES)


def _range_head(items: int, chunks: int) -> str:
    per = -(-items // chunks)
    return "  long i0 = (long)core_id * %d, i1 = i0 + %d < %d ? i0 + %d : %d;\n" % (per, per, items, per, items)


def to_blocked(n: int, c: int, h: int, w: int) -> CKernel:
    """NCHW -> blocked (buffers: out blocked, in NCHW); padding channels 0. One work item per (n, block, row)."""
    cb, items = blocks(c), n * blocks(c) * h
    chunks = chunks_for(items, LANES * w)
    body = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  enum { C = %(c)d, CB = %(cb)d, H = %(h)d, W = %(w)d };
%(head)s  for (long it = i0; it < i1; ++it) {
    long row = it %% H, b = (it / H) %% CB, n = it / (H * CB);
    long lanes = C - b * 16 < 16 ? C - b * 16 : 16;
    const float *src = x + ((n * C + b * 16) * H + row) * (long)W;
    float *dst = out + it * (long)(W * 16);
    if (lanes == 16) {
      for (long iw = 0; iw < W; ++iw)
        for (long l = 0; l < 16; ++l) dst[iw * 16 + l] = src[l * (long)(H * W) + iw];
      continue;
    }
    for (long iw = 0; iw < W; ++iw) {
      for (long l = 0; l < lanes; ++l) dst[iw * 16 + l] = src[l * (long)(H * W) + iw];
      for (long l = lanes; l < 16; ++l) dst[iw * 16 + l] = 0.0f;
    }
  }
}
""" % dict(c=c, cb=cb, h=h, w=w, head=_range_head(items, chunks))
    return make_named("to_blocked", body, [n * cb * h * w * LANES, n * c * h * w], chunks)


def from_blocked(n: int, c: int, h: int, w: int) -> CKernel:
    """Blocked -> NCHW (buffers: out NCHW, in blocked): the real channels only. One work item per (n, block, row)."""
    cb, items = blocks(c), n * blocks(c) * h
    chunks = chunks_for(items, LANES * w)
    body = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  enum { C = %(c)d, CB = %(cb)d, H = %(h)d, W = %(w)d };
%(head)s  for (long it = i0; it < i1; ++it) {
    long row = it %% H, b = (it / H) %% CB, n = it / (H * CB);
    long lanes = C - b * 16 < 16 ? C - b * 16 : 16;
    const float *src = x + it * (long)(W * 16);
    float *dst = out + ((n * C + b * 16) * H + row) * (long)W;
    for (long l = 0; l < lanes; ++l)
      for (long iw = 0; iw < W; ++iw) dst[l * (long)(H * W) + iw] = src[iw * 16 + l];
  }
}
""" % dict(c=c, cb=cb, h=h, w=w, head=_range_head(items, chunks))
    return make_named("from_blocked", body, [n * c * h * w, n * cb * h * w * LANES], chunks)


def _geometry_enum(g: ConvGeom, tile: int) -> str:
    return ("  enum { H = %d, W = %d, OH = %d, OW = %d, KH = %d, KW = %d, SH = %d, SW = %d, PT = %d, PL = %d, "
            "PB = %d, PR = %d, DH = %d, DW = %d, OT = %d };\n") % (
        g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr, g.dh, g.dw, tile)  # fmt: skip


def pool_tile(g: ConvGeom) -> int:
    """Output columns per tile: as many as a buffer of TILE_COLUMNS input columns holds the windows of (at least 1)."""
    reach = (g.kw - 1) * g.dw + 1
    return max(1, min(g.ow, (TILE_COLUMNS - reach) // g.sw + 1))


def _counts(count_include_pad: bool) -> Dict[str, str]:
    """ONNX's average counts the taps inside the input, or with count_include_pad those inside the padded input."""
    if count_include_pad:
        return {"row_ok": "ih < H + PB", "col_ok": "iw < W + PR"}
    return {"row_ok": "ih >= 0 && ih < H", "col_ok": "iw >= 0 && iw < W"}


#: One output row (``oh``) of one channel block (plane ``xp``, output row ``o``): per tile of output columns, the
#: window's rows folded element by element into ``buf`` (16 floats a column, padding outside the input), then each
#: output's columns. The fast copy of a max first scans the input rows it has not scanned yet (``*scanned``) for
#: NaN and returns 1, computing nothing, where it meets one.
ROW_FUNCTION = """static __attribute__((noinline)) int FNAME(const float *restrict xp, float *restrict o, long oh,
                                           float *restrict buf, long *scanned) {
%(enum)s  long top = oh * SH - PT;
  long lo = top < 0 ? (-top + DH - 1) / DH : 0;
  long hi = H - 1 - top < 0 ? 0 : (H - 1 - top) / DH + 1;
  if (hi > KH) hi = KH;
SCAN  long r = 0;
  for (long kh = 0; kh < KH; ++kh) { long ih = top + kh * DH; r += %(row_ok)s; }
  for (long t0 = 0; t0 < OW; t0 += OT) {
    long nt = OW - t0 < OT ? OW - t0 : OT;
    long left = t0 * SW - PL, tw = (nt - 1) * SW + (KW - 1) * DW + 1;
    long jlo = left < 0 ? -left : 0, jhi = W - left < tw ? W - left : tw;
    if (jhi < jlo) jhi = jlo;
    for (long e = 0; e < jlo * 16; ++e) buf[e] = PADV;
    for (long e = jhi * 16; e < tw * 16; ++e) buf[e] = PADV;
    if (lo >= hi) {
      for (long e = jlo * 16; e < jhi * 16; ++e) buf[e] = PADV;
    } else {
      const float *xr = xp + (top + lo * DH) * W * 16;
      for (long e = jlo * 16; e < jhi * 16; ++e) buf[e] = xr[left * 16 + e];
      for (long kh = lo + 1; kh < hi; ++kh) {
        xr = xp + (top + kh * DH) * W * 16;
        for (long e = jlo * 16; e < jhi * 16; ++e) { float acc = buf[e], v = xr[left * 16 + e]; STEP buf[e] = acc; }
      }
    }
    for (long i = 0; i < nt; ++i) {
      const float *bw = buf + i * SW * 16;
      float *ow = o + (t0 + i) * 16;
%(scale)s      for (long l = 0; l < 16; ++l) {
        float acc = bw[l];
        for (long kw = 1; kw < KW; ++kw) { float v = bw[kw * DW * 16 + l]; STEP }
        ow[l] = %(final)s;
      }
    }
  }
  (void)r; (void)scanned;
  return 0;
}
"""
#: The average's multiplier of output column t0 + i: 1 / (rows counted x columns counted).
AVG_SCALE = """      long cols = 0;
      for (long kw = 0; kw < KW; ++kw) { long iw = (t0 + i) * SW - PL + kw * DW; cols += %(col_ok)s; }
      float sc = 1.0f / ((float)r * (float)cols);
"""
#: The fast max's NaN scan: the input rows this output row reads that no earlier item of the block scanned.
ROW_SCAN = """  if (hi > lo) {
    long need = top + (hi - 1) * DH + 1, from = *scanned > top + lo * DH ? *scanned : top + lo * DH;
    int nan = 0;
    for (long e = from * W * 16; e < need * W * 16; ++e) nan |= xp[e] != xp[e];
    if (nan) return 1;
    if (need > *scanned) *scanned = need;
  }
"""


def blocked_pool(op: str, g: ConvGeom, count_include_pad: bool) -> CKernel:
    """MaxPool or AveragePool on blocked tensors (buffers: out [N, CB, OH, OW, 16], in [N, CB, H, W, 16]); ``g``'s
    output size already holds ceil_mode. One work item per output row of a channel block."""
    if op not in POOL_KINDS:
        raise ValueError("blocked_pool: op %r is not MaxPool or AveragePool" % (op,))
    if min(g.pt, g.pl, g.pb, g.pr) < 0 or min(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.oh, g.ow) < 1:
        raise ValueError("blocked_pool: negative padding or a size below 1 in %r" % (g,))
    cb = blocks(g.c)
    items = g.n * cb * g.oh
    chunks = chunks_for(items, g.ow * g.kh * g.kw * LANES)
    fill = dict(_counts(count_include_pad), enum=_geometry_enum(g, pool_tile(g)))
    is_max = op == "MaxPool"
    fill.update(final="acc" if is_max else "acc * sc", scale="" if is_max else AVG_SCALE % fill)
    pad, step = POOL_KINDS[op]
    function = (ROW_FUNCTION % fill).replace("PADV", pad)
    fast = function.replace("FNAME", "KNAME_fast").replace("STEP", step).replace("SCAN", ROW_SCAN if is_max else "")
    exact = function.replace("FNAME", "KNAME_nan").replace("STEP", NAN_STEP).replace("SCAN", "")
    per_row = ("if (nan_block == p || KNAME_fast(xp, o, oh, buf, &scanned)) { nan_block = p; KNAME_nan(xp, o, oh, buf, &scanned); }"
               if is_max else "KNAME_fast(xp, o, oh, buf, &scanned);")  # fmt: skip
    body = (fast + (exact if is_max else "")) + """
void KNAME(float *restrict out, const float *restrict x, int core_id) {
%(enum)s%(head)s  float buf[%(buf)d];
  long plane = -1, nan_block = -1, scanned = 0;
  for (long it = i0; it < i1; ++it) {
    long p = it / OH, oh = it %% OH;
    if (p != plane) { plane = p; scanned = 0; }
    const float *xp = x + p * (long)(H * W * 16);
    float *o = out + it * (long)(OW * 16);
    %(per_row)s
  }
  (void)nan_block;
}
""" % dict(enum=fill["enum"], head=_range_head(items, chunks), buf=LANES * TILE_COLUMNS, per_row=per_row)  # fmt: skip
    tag = "bpool_max" if is_max else "bpool_avg"
    return make_named(tag, body, [items * g.ow * LANES, g.n * cb * g.h * g.w * LANES], chunks)


#: A global pool of one channel block into the NCHW output's real channels: four 16-lane accumulators over the
#: pixels (a shorter dependency chain), combined in a fixed order.
GLOBAL_BODY = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  enum { C = %(c)d, CB = %(cb)d, HW = %(hw)d };
%(head)s  for (long it = i0; it < i1; ++it) {
    long b = it %% CB, n = it / CB;
    long lanes = C - b * 16 < 16 ? C - b * 16 : 16;
    const float *xp = x + it * (long)(HW * 16);
    float a[4][16];
    for (long k = 0; k < 4; ++k)
      for (long l = 0; l < 16; ++l) a[k][l] = %(init)s;
    long j = 0;
    for (; j + 4 <= HW; j += 4)
      for (long k = 0; k < 4; ++k)
        for (long l = 0; l < 16; ++l) { float acc = a[k][l], v = xp[(j + k) * 16 + l]; %(step)s a[k][l] = acc; }
    for (; j < HW; ++j)
      for (long l = 0; l < 16; ++l) { float acc = a[0][l], v = xp[j * 16 + l]; %(step)s a[0][l] = acc; }
    for (long l = 0; l < 16; ++l) {
      float acc = a[0][l], v = a[1][l];
      %(step)s
      v = a[2][l]; %(step)s
      v = a[3][l]; %(step)s
      a[0][l] = acc;
    }
    for (long l = 0; l < lanes; ++l) out[n * C + b * 16 + l] = %(final)s;
  }
}
"""


def _global_pool(tag: str, n: int, c: int, h: int, w: int, init: str, step: str, final: str) -> CKernel:
    cb = blocks(c)
    items = n * cb
    chunks = chunks_for(items, h * w * LANES)
    body = GLOBAL_BODY % dict(c=c, cb=cb, hw=h * w, head=_range_head(items, chunks), init=init, step=step, final=final)
    return make_named(tag, body, [n * c, items * h * w * LANES], chunks)


def blocked_global_avgpool(n: int, c: int, h: int, w: int) -> CKernel:
    """GlobalAveragePool of a blocked tensor into an NCHW [N, C, 1, 1] output (the real channels only)."""
    return _global_pool("bgavg", n, c, h, w, "0.0f", "acc += v;", "a[0][l] * %s" % _reciprocal(h * w))


def blocked_global_maxpool(n: int, c: int, h: int, w: int) -> CKernel:
    """GlobalMaxPool of a blocked tensor into an NCHW [N, C, 1, 1] output; NaN propagates."""
    return _global_pool("bgmax", n, c, h, w, "-(1e39f)", NAN_STEP, "a[0][l]")


def _reciprocal(count: int) -> str:
    return "(1.0f / %d.0f)" % count
