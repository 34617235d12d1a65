"""Pools of the blocked channel layout (NCHWc): MaxPool/AveragePool and the global pools.

Every pixel is 16 contiguous channels, so a pool's work is whole 16-float vectors: the loops below run over 16
lanes (or over whole rows of 16-lane pixels) and the compiler turns each into vector instructions.

The pools mirror :mod:`svod_min.onnx.kernels.pool`'s semantics: padding never wins a max, NaN does; the average's
divisor is ONNX's count, (rows counted) x (columns counted), and the overhang of a ceil_mode window past the
end padding never counts. They run in the same two passes (the window's rows element by element into a
buffer of a tile of columns padded with -inf or 0, then its columns without bounds tests), one output row of
one channel block per work item. A max takes the NaN-propagating step at every tap: on 16-lane pixels it
costs a compare and a blend beside the max, less than the NCHW kernels' scan for NaN and second copy.
"""

from __future__ import annotations

from typing import Dict

from ...error import NotSupportedError
from ..geometry import LANES, ConvGeom, blocks
from .blocked import items_head
from .ckernel import CKernel, chunks_for, make_kernel

#: Columns (of 16 floats each) of a pool's tile buffer, on the stack: 16 KiB.
TILE_COLUMNS = 256


#: A max's step: NaN wins, padding (-inf) never does.
NAN_STEP = "acc = (v > acc || v != v) ? v : acc;"


#: (padding, step) of each pool: the step folds ``v`` into ``acc``.
POOL_KINDS = {"MaxPool": ("-(1e39f)", NAN_STEP), "AveragePool": ("0.0f", "acc += v;")}


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
#: output's columns.
ROW_FUNCTION = """static __attribute__((noinline)) void KNAME_row(const float *restrict xp, float *restrict o, long oh,
                                                 float *restrict buf) {
%(enum)s  long top = oh * SH - PT;
  long lo = top < 0 ? (-top + DH - 1) / DH : 0;
  long hi = H - 1 - top < 0 ? 0 : (H - 1 - top) / DH + 1;
  if (hi > KH) hi = KH;
  long r = 0;
  for (long kh = 0; kh < KH; ++kh) { long ih = top + kh * DH; r += %(row_ok)s; }
  float full = 1.0f / ((float)r * (float)KW);
  for (long t0 = 0; t0 < OW; t0 += OT) {
    long nt = OW - t0 < OT ? OW - t0 : OT;
    long left = t0 * SW - PL, tw = (nt - 1) * SW + (KW - 1) * DW + 1;
    long jlo = left < 0 ? -left : 0, jhi = W - left < tw ? W - left : tw;
    if (jhi < jlo) jhi = jlo;
    for (long e = 0; e < jlo * 16; ++e) buf[e] = %(pad)s;
    for (long e = jhi * 16; e < tw * 16; ++e) buf[e] = %(pad)s;
    if (lo == 0 && hi == KH) {
      const float *xr = xp + top * W * 16;
      for (long e = jlo * 16; e < jhi * 16; ++e) {
        float acc = xr[left * 16 + e];
        for (long kh = 1; kh < KH; ++kh) { float v = xr[kh * DH * W * 16 + left * 16 + e]; %(step)s }
        buf[e] = acc;
      }
    } else if (lo >= hi) {
      for (long e = jlo * 16; e < jhi * 16; ++e) buf[e] = %(pad)s;
    } else {
      const float *xr = xp + (top + lo * DH) * W * 16;
      for (long e = jlo * 16; e < jhi * 16; ++e) buf[e] = xr[left * 16 + e];
      for (long kh = lo + 1; kh < hi; ++kh) {
        xr = xp + (top + kh * DH) * W * 16;
        for (long e = jlo * 16; e < jhi * 16; ++e) { float acc = buf[e], v = xr[left * 16 + e]; %(step)s buf[e] = acc; }
      }
    }
    for (long i = 0; i < nt; ++i) {
      const float *bw = buf + i * SW * 16;
      float *ow = o + (t0 + i) * 16;
%(scale)s      for (long l = 0; l < 16; ++l) {
        float acc = bw[l];
        for (long kw = 1; kw < KW; ++kw) { float v = bw[kw * DW * 16 + l]; %(step)s }
        ow[l] = %(final)s;
      }
    }
  }
  (void)r; (void)full;
}
"""


#: The average's multiplier of output column t0 + i: 1 / (rows counted x columns counted), the row's ``full`` where
#: the first and the last tap count (then all do), so that only the edge columns count theirs and divide.
AVG_SCALE = """      float sc = full;
      {
        long iw = (t0 + i) * SW - PL;
        int first = %(col_ok)s;
        iw += (KW - 1) * DW;
        if (!first || !(%(col_ok)s)) {
          long cols = 0;
          for (long kw = 0; kw < KW; ++kw) { iw = (t0 + i) * SW - PL + kw * DW; cols += %(col_ok)s; }
          sc = 1.0f / ((float)r * (float)cols);
        }
      }
"""


def blocked_pool(op: str, g: ConvGeom, count_include_pad: bool) -> CKernel:
    """MaxPool or AveragePool on blocked tensors (buffers: out [N, CB, OH, OW, 16], in [N, CB, H, W, 16]); ``g``'s
    output size already holds ceil_mode. One work item per output row of a channel block."""
    if op not in POOL_KINDS:
        raise NotSupportedError("blocked_pool: op %r is not MaxPool or AveragePool" % (op,))
    if min(g.pt, g.pl, g.pb, g.pr) < 0 or min(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.oh, g.ow) < 1:
        raise NotSupportedError("blocked_pool: negative padding or a size below 1 in %r" % (g,))
    cb = blocks(g.c)
    items = g.n * cb * g.oh
    chunks = chunks_for(items, g.ow * g.kh * g.kw * LANES)
    pad, step = POOL_KINDS[op]
    fill = dict(_counts(count_include_pad), enum=_geometry_enum(g, pool_tile(g)), pad=pad, step=step)
    is_max = op == "MaxPool"
    fill.update(final="acc" if is_max else "acc * sc", scale="" if is_max else AVG_SCALE % fill)
    body = ROW_FUNCTION % fill + """
void KNAME(float *restrict out, const float *restrict x, int core_id) {
%(enum)s%(head)s  float buf[%(buf)d];
  for (long it = i0; it < i1; ++it)
    KNAME_row(x + (it / OH) * (long)(H * W * 16), out + it * (long)(OW * 16), it %% OH, buf);
}
""" % dict(enum=fill["enum"], head=items_head(items, chunks), buf=LANES * TILE_COLUMNS)  # fmt: skip
    tag = "bpool_max" if is_max else "bpool_avg"
    return make_kernel(tag, body, [items * g.ow * LANES, g.n * cb * g.h * g.w * LANES], chunks)


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
    body = GLOBAL_BODY % dict(c=c, cb=cb, hw=h * w, head=items_head(items, chunks), init=init, step=step, final=final)
    return make_kernel(tag, body, [n * c, items * h * w * LANES], chunks)


def blocked_global_avgpool(n: int, c: int, h: int, w: int) -> CKernel:
    """GlobalAveragePool of a blocked tensor into an NCHW [N, C, 1, 1] output (the real channels only)."""
    return _global_pool("bgavg", n, c, h, w, "0.0f", "acc += v;", "a[0][l] * %s" % _reciprocal(h * w))


def blocked_global_maxpool(n: int, c: int, h: int, w: int) -> CKernel:
    """GlobalMaxPool of a blocked tensor into an NCHW [N, C, 1, 1] output; NaN propagates."""
    return _global_pool("bgmax", n, c, h, w, "-(1e39f)", NAN_STEP, "a[0][l]")


def _reciprocal(count: int) -> str:
    return "(1.0f / %d.0f)" % count
