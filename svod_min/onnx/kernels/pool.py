"""C source of MaxPool / AveragePool as two passes: down the window's rows, then along its columns.

A window is a rectangle, so its max (or sum) is the max (or sum) over its columns of each column's max (or sum)
down the rows. The kernels first reduce the window's input rows element by element over whole rows (contiguous
loads, the compiler vectorises them) into a buffer that carries the left and right padding (-inf for a max, 0
for a sum) and any ceil_mode overhang, then reduce each output's columns of that buffer without bounds tests
(contiguous at column stride 1, an even/odd deinterleave at stride 2). Two shapes of the same idea:

- :func:`pool2d_rows`: one output row at a time, for wide rows; rows outside the input are left out of the row
  pass.
- :func:`pool2d_plane`: a whole small plane at a time, copied into a padded plane whose width is a multiple of
  the column stride and whose rows are grouped by their remainder modulo the row stride, so that each pass is
  one loop over the whole plane at any stride (short rows would make per-row loops mostly loop overhead); the
  padded columns' outputs are computed too and dropped.
- :func:`pool2d_same`: a stride-1 pool whose padding keeps the plane's size, straight from the input.

The average's divisor is ONNX's count of the window's taps, (rows counted) x (columns counted) as the window is
a rectangle; the kernels multiply by its reciprocal. A max propagates NaN as the ONNX reference and onnxruntime
do; testing each tap for NaN costs as much as the max itself, so each plane is scanned for NaN once and only a
plane that holds one takes the taps' NaN-propagating step.

Same calling convention as :mod:`svod_min.onnx.csrc`; a kernel returns None where its buffers would not fit
its stack limit (the caller then uses another kernel).
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from ..geometry import ConvGeom
from .ckernel import CKernel, chunks_for, make_kernel

#: The widest padded row (elements, on the stack) the row kernel holds.
POOL_ROW_MAX = 8192
#: The largest padded plane (elements, on the stack, beside two buffers of at most its size) the plane kernel
#: takes, and the narrowest input rows (at 1 thread on x86_64-v4 the plane kernel ran 1.5-2.5x faster than the
#: row kernel on 13x13 to 28x28 planes, 1.2x slower on 56x56, 1.3-2x slower on 6x6 and 7x7).
POOL_PLANE_MAX = 1024
POOL_PLANE_MIN_W = 8
#: A max's step where the plane holds a NaN: NaN wins, padding (-inf) never does.
NAN_MAX_STEP = "acc = (v > acc || v != v) ? v : acc;"
#: A max's step where the plane holds no NaN (one instruction).
MAX_STEP = "acc = acc > v ? acc : v;"
#: (padding, step) of each kind of pool.
KINDS = {"max": ("-(1e39f)", MAX_STEP), "avg": ("0.0f", "acc += v;")}


def pool2d(g: ConvGeom, kind: str, count_include_pad: bool) -> Optional[CKernel]:
    """Max (``kind`` 'max') or average pooling: small planes whole, others a row at a time; None where neither
    kernel's buffers fit (the caller then generates the per-output kernel)."""
    if same_size(g):
        return pool2d_same(g, kind, count_include_pad)
    ph, pw = padded_plane(g)
    if ph * pw <= POOL_PLANE_MAX and g.w >= POOL_PLANE_MIN_W:
        return pool2d_plane(g, kind, count_include_pad)
    return pool2d_rows(g, kind, count_include_pad)


def padded_row(g: ConvGeom) -> int:
    """Elements of a padded row: left padding, the input row, and whatever the last window reaches past it."""
    return max(g.w + g.pl, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1)


def padded_plane(g: ConvGeom) -> Tuple[int, int]:
    """(rows, columns) of a plane padded to hold every tap of every window, its rows in row-stride blocks (see
    :func:`pool2d_plane`); columns a multiple of the column stride."""
    cols = -(-padded_row(g) // g.sw) * g.sw
    return g.sh * block_rows(g), cols


def block_rows(g: ConvGeom) -> int:
    """Rows of each of the plane kernel's row-stride blocks: the most any window's taps reach into one."""
    return g.oh + (g.kh - 1) * g.dh // g.sh


def _constants(g: ConvGeom) -> Dict[str, int]:
    return dict(h=g.h, w=g.w, oh=g.oh, ow=g.ow, kh=g.kh, kw=g.kw, sh=g.sh, sw=g.sw, pt=g.pt, pl=g.pl, pb=g.pb,
                pr=g.pr, dh=g.dh, dw=g.dw)  # fmt: skip


ENUM = """  enum { H = %(h)d, W = %(w)d, OH = %(oh)d, OW = %(ow)d, KH = %(kh)d, KW = %(kw)d, SH = %(sh)d, SW = %(sw)d,
         PT = %(pt)d, PL = %(pl)d, PB = %(pb)d, PR = %(pr)d, DH = %(dh)d, DW = %(dw)d };
"""


def _counts(count_include_pad: bool) -> Dict[str, str]:
    """ONNX's average counts the taps inside the input, or with count_include_pad those inside the padded input
    (a ceil_mode window's overhang past the end padding never counts)."""
    if count_include_pad:
        return {"row_ok": "ih < H + PB", "col_ok": "iw < W + PR"}
    return {"row_ok": "ih >= 0 && ih < H", "col_ok": "iw >= 0 && iw < W"}


#: Per-call setup: how many columns of each output's window count (the average's divisor is rows x columns).
COLUMN_COUNTS = """  for (long ow = 0; ow < OW; ++ow) {
    long c = 0;
    for (long kw = 0; kw < KW; ++kw) { long iw = ow * SW - PL + kw * DW; c += %(col_ok)s; }
    cols[ow] = (float)c;
  }
"""

#: The main function: a plane with a NaN takes the NaN-propagating copy of the per-plane code.
DISPATCH = """  for (long p = p0; p < p1; ++p) {
    const float *xp = x + p * (long)(H * W);
    float *o = out + p * (long)(OH * OW);
%s
  }
"""


def _per_plane(kind: str, plane_code: str) -> str:
    """Calls of the per-plane function; for a max, the NaN-propagating copy where the fast one met a NaN."""
    if kind != "max":
        return "    KNAME_fast(%s);" % plane_code
    return "    if (KNAME_fast(%s)) KNAME_nan(%s);" % (plane_code, plane_code)


def _two_copies(kind: str, function: str, scans: Dict[str, str]) -> str:
    """The per-plane function as KNAME_fast, and for a max also KNAME_nan with the NaN-propagating step. The fast
    copy of a max runs the NaN scans (``scans``: placeholder -> code) over the input it reads and returns whether
    it met a NaN."""
    pad, step = KINDS[kind]
    fast = function.replace("FNAME", "KNAME_fast").replace("STEP", step).replace("PADV", pad)
    exact = function.replace("FNAME", "KNAME_nan").replace("STEP", NAN_MAX_STEP).replace("PADV", pad)
    for mark, scan in scans.items():
        fast, exact = fast.replace(mark, scan if kind == "max" else ""), exact.replace(mark, "")
    return fast + exact if kind == "max" else fast


ROW_FUNCTION = """static __attribute__((noinline)) int FNAME(const float *restrict xp, float *restrict o, float *buf,
                                            const float *restrict cols) {
%(enum)s  float scale[OW];
  long last = -1, scanned = 0;
  int nan = 0;
  float *line = buf + PL;
SCAN_PLANE  for (long oh = 0; oh < OH; ++oh) {
    long top = oh * SH - PT;
    long lo = top < 0 ? (-top + DH - 1) / DH : 0;
    long hi = H - 1 - top < 0 ? 0 : (H - 1 - top) / DH + 1;
    if (hi > KH) hi = KH;
SCAN_ROW    if (lo == 0 && hi == KH) {
      const float *xr = xp + top * W;
      for (long iw = 0; iw < W; ++iw) {
        float acc = PADV;
        for (long kh = 0; kh < KH; ++kh) { float v = xr[kh * DH * W + iw]; STEP }
        line[iw] = acc;
      }
    } else {
      for (long iw = 0; iw < W; ++iw) line[iw] = PADV;
      for (long kh = lo; kh < hi; ++kh) {
        const float *xr = xp + (top + kh * DH) * W;
        for (long iw = 0; iw < W; ++iw) { float acc = line[iw], v = xr[iw]; STEP line[iw] = acc; }
      }
    }
    long r = 0;
    for (long kh = 0; kh < KH; ++kh) { long ih = top + kh * DH; r += %(row_ok)s; }
    if (r != last) {
      for (long ow = 0; ow < OW; ++ow) scale[ow] = 1.0f / ((float)r * cols[ow]);
      last = r;
    }
    for (long ow = 0; ow < OW; ++ow) {
      const float *bw = buf + ow * SW;
      float acc = PADV;
      for (long kw = 0; kw < KW; ++kw) { float v = bw[kw * DW]; STEP }
      o[oh * OW + ow] = %(final)s;
    }
  }
  (void)scale; (void)cols; (void)scanned;
  return nan;
}
"""
#: The row kernel's NaN scan: the input rows this output row reads first, as it reaches them (then in cache).
ROW_SCAN = """    if (hi > lo) {
      long need = top + (hi - 1) * DH + 1;
      for (long i = scanned * W; i < need * W; ++i) nan |= xp[i] != xp[i];
      if (need > scanned) scanned = need;
    }
"""


def pool2d_rows(g: ConvGeom, kind: str, count_include_pad: bool) -> Optional[CKernel]:
    """Max (``kind`` 'max') or average pooling an output row at a time; None where the padded row is too wide."""
    row = padded_row(g)
    if row > POOL_ROW_MAX or min(g.pt, g.pl, g.pb, g.pr) < 0:
        return None
    planes = g.n * g.c
    chunks = chunks_for(planes, g.oh * g.ow * g.kh * g.kw)
    per = -(-planes // chunks)
    enum = ENUM % _constants(g)
    fill = dict(_counts(count_include_pad), enum=enum, final="acc" if kind == "max" else "acc * scale[ow]")
    whole = g.h * g.w <= SCAN_WHOLE_MAX
    scans = {"SCAN_PLANE": PLANE_SCAN if whole else "", "SCAN_ROW": "" if whole else ROW_SCAN}
    body = _two_copies(kind, ROW_FUNCTION % fill, scans) + """
void KNAME(float *restrict out, const float *restrict x, int core_id) {
%(enum)s  long p0 = (long)core_id * %(per)d, p1 = p0 + %(per)d < %(planes)d ? p0 + %(per)d : %(planes)d;
  float buf[%(row)d], cols[OW];
%(counts)s  for (long i = 0; i < PL; ++i) buf[i] = %(pad)s;
  for (long i = PL + W; i < %(row)d; ++i) buf[i] = %(pad)s;
%(dispatch)s}
""" % dict(enum=enum, per=per, planes=planes, row=row, pad=KINDS[kind][0], counts=COLUMN_COUNTS % fill,
           dispatch=DISPATCH % _per_plane(kind, "xp, o, buf, cols"))  # fmt: skip
    return make_kernel("pool", body, [g.n * g.c * g.oh * g.ow, g.n * g.c * g.h * g.w], chunks)


PLANE_FUNCTION = """static __attribute__((noinline)) int FNAME(const float *restrict xp, float *restrict o, float *pp,
                                           float *vv, float *t, const float *restrict scale) {
%(enum)s  enum { PW = %(pw)d, QW = PW / SW, BR = %(br)d };
SCAN_PLANE#pragma clang loop vectorize(disable)
  for (long ih = 0; ih < H; ++ih) {
    long r = ih + PT;
    if (r / SH >= BR) continue;
    float *dst = pp + ((r %% SH) * BR + r / SH) * PW + PL;
    for (long iw = 0; iw < W; ++iw) dst[iw] = xp[ih * W + iw];
  }
  for (long j = 0; j < OH * PW; ++j) {
    float acc = PADV;
    for (long kh = 0; kh < KH; ++kh) { long tap = kh * DH; float v = pp[((tap %% SH) * BR + tap / SH) * PW + j]; STEP }
    vv[j] = acc;
  }
  for (long j = 0; j < OH * QW; ++j) {
    float acc = PADV;
    for (long kw = 0; kw < KW; ++kw) { float v = vv[j * SW + kw * DW]; STEP }
    %(along)s
  }
%(keep)s  (void)scale; (void)t;
  return 0;
}
"""
#: The NaN scan of a small plane, whole, before anything else (a scan per row costs more than it saves there).
PLANE_SCAN = """  {
    int found = 0;
    for (long i = 0; i < H * W; ++i) found |= xp[i] != xp[i];
    if (found) return 1;
  }
"""
#: Planes of at most this many elements are scanned whole, larger ones a row at a time (the scanned rows stay in
#: cache for the pool). At 1 thread on x86_64-v4: a scan per row ran 3x slower on 7x7 planes, 1.4x faster on 111x111.
SCAN_WHOLE_MAX = 4096


def _plane_passes(g: ConvGeom, kind: str, qw: int) -> Dict[str, str]:
    """What the plane kernel's pass along the rows writes: the output itself where the padded width holds no more
    outputs than a row has, else a buffer whose real columns are kept afterwards."""
    scaled = "acc" if kind == "max" else "acc * scale[j]"
    if qw == g.ow:
        return {"along": "o[j] = %s;" % scaled, "keep": ""}
    keep = """#pragma clang loop vectorize(disable)
  for (long oh = 0; oh < OH; ++oh)
    for (long ow = 0; ow < OW; ++ow) o[oh * OW + ow] = t[oh * QW + ow];
"""
    return {"along": "t[j] = %s;" % scaled, "keep": keep}


def pool2d_plane(g: ConvGeom, kind: str, count_include_pad: bool) -> Optional[CKernel]:
    """Max or average pooling of small planes, a whole plane at a time; None where the padded plane is too large.

    The padded plane holds its rows in SH blocks, block b the rows b, b + SH, b + 2 SH, ...: tap kh of output row
    oh is then row oh + (kh DH) / SH of block (kh DH) % SH, so that the pass down the window is one loop over
    OH x PW elements at every tap, whatever the row stride."""
    ph, pw = padded_plane(g)
    if ph * pw > POOL_PLANE_MAX or min(g.pt, g.pl, g.pb, g.pr) < 0:
        return None
    qw = pw // g.sw
    planes = g.n * g.c
    chunks = chunks_for(planes, g.oh * g.ow * g.kh * g.kw)
    per = -(-planes // chunks)
    enum = ENUM % _constants(g)
    fill = dict(_counts(count_include_pad), enum=enum, pw=pw, br=block_rows(g), **_plane_passes(g, kind, qw))
    body = _two_copies(kind, PLANE_FUNCTION % fill, {"SCAN_PLANE": PLANE_SCAN}) + """
void KNAME(float *restrict out, const float *restrict x, int core_id) {
%(enum)s  enum { PH = %(ph)d, PW = %(pw)d, QW = %(qw)d, VTAIL = (KW - 1) * DW };
  long p0 = (long)core_id * %(per)d, p1 = p0 + %(per)d < %(planes)d ? p0 + %(per)d : %(planes)d;
  float pp[PH * PW], vv[OH * PW + VTAIL], t[OH * QW], scale[OH * QW], cols[OW];
%(counts)s  for (long oh = 0; oh < OH; ++oh) {
    long r = 0;
    for (long kh = 0; kh < KH; ++kh) { long ih = oh * SH - PT + kh * DH; r += %(row_ok)s; }
    for (long q = 0; q < QW; ++q) scale[oh * QW + q] = q < OW ? 1.0f / ((float)r * cols[q]) : 0.0f;
  }
  for (long i = 0; i < PH * PW; ++i) pp[i] = %(pad)s;
  for (long i = OH * PW; i < OH * PW + VTAIL; ++i) vv[i] = %(pad)s;
%(dispatch)s}
""" % dict(enum=enum, ph=ph, pw=pw, qw=qw, per=per, planes=planes, pad=KINDS[kind][0], row_ok=fill["row_ok"],
           counts=COLUMN_COUNTS % fill, dispatch=DISPATCH % _per_plane(kind, "xp, o, pp, vv, t, scale"))  # fmt: skip
    return make_kernel("pool", body, [g.n * g.c * g.oh * g.ow, g.n * g.c * g.h * g.w], chunks)


#: The largest plane (elements) the same-size kernel takes: its column buffer and the average's scale table
#: (at most this many elements each) are on the stack.
POOL_SAME_MAX = 4096


def same_size(g: ConvGeom) -> bool:
    """A stride-1, undilated pool whose padding keeps the plane's size (Inception's branch pools), small enough."""
    return ((g.sh, g.sw, g.dh, g.dw) == (1, 1, 1, 1) and (g.oh, g.ow) == (g.h, g.w) and min(g.pt, g.pl, g.pb, g.pr) >= 0
            and g.pt + g.pb == g.kh - 1 and g.pl + g.pr == g.kw - 1 and g.h * g.w <= POOL_SAME_MAX)  # fmt: skip


SAME_FUNCTION = """static __attribute__((noinline)) int FNAME(const float *restrict xp, float *restrict o, float *col,
                                           const float *restrict scale) {
%(enum)s
SCAN_PLANE  for (long j = PT * W; j < (H - PB) * W; ++j) {
    float acc = PADV;
    for (long kh = 0; kh < KH; ++kh) { float v = xp[j + (kh - PT) * W]; STEP }
    col[j] = acc;
  }
  for (long oh = 0; oh < H; ++oh) {
    if (oh >= PT && oh < H - PB) continue;
    long lo = oh < PT ? PT - oh : 0, hi = H - 1 - oh + PT + 1 < KH ? H - 1 - oh + PT + 1 : KH;
    for (long iw = 0; iw < W; ++iw) col[oh * W + iw] = PADV;
    for (long kh = lo; kh < hi; ++kh) {
      const float *xr = xp + (oh - PT + kh) * W;
      for (long iw = 0; iw < W; ++iw) { float acc = col[oh * W + iw], v = xr[iw]; STEP col[oh * W + iw] = acc; }
    }
  }
  for (long j = 0; j < H * W; ++j) {
    float acc = PADV;
    for (long kw = 0; kw < KW; ++kw) { float v = col[j + kw - PL]; STEP }
    o[j] = %(final)s;
  }
#pragma clang loop vectorize(disable)
  for (long oh = 0; oh < H; ++oh)
    for (long e = 0; e < PL + PR; ++e) {
      long ow = e < PL ? e : W - PR + (e - PL), j = oh * W + ow;
      float acc = PADV;
      for (long kw = 0; kw < KW; ++kw) {
        long iw = ow + kw - PL;
        if (iw < 0 || iw >= W) continue;
        float v = col[oh * W + iw];
        STEP
      }
      o[j] = %(final)s;
    }
  (void)scale;
  return 0;
}
"""


def pool2d_same(g: ConvGeom, kind: str, count_include_pad: bool) -> Optional[CKernel]:
    """Max or average pooling of a stride-1 window whose padding keeps the plane's size, a whole plane at a time
    straight from the input: its rows flattened, the pass down the window is one loop over the rows whose window
    is inside, and the pass along it one loop over the whole plane; the few columns whose window crosses the
    row's edge (there the flat loop reads the next or previous row) are then computed again from their own row.
    None where the pool is not of that shape."""
    if not same_size(g):
        return None
    planes = g.n * g.c
    chunks = chunks_for(planes, g.oh * g.ow * g.kh * g.kw)
    per = -(-planes // chunks)
    enum = ENUM % _constants(g)
    counts = _counts(count_include_pad)
    fill = dict(enum=enum, final="acc" if kind == "max" else "acc * scale[j]")
    body = _two_copies(kind, SAME_FUNCTION % fill, {"SCAN_PLANE": PLANE_SCAN}) + """
void KNAME(float *restrict out, const float *restrict x, int core_id) {
%(enum)s  long p0 = (long)core_id * %(per)d, p1 = p0 + %(per)d < %(planes)d ? p0 + %(per)d : %(planes)d;
  float margins[PL + H * W + PR], scale[%(scale)d], cols[OW];
  float *col = margins + PL;
%(counts)s  for (long i = 0; i < PL; ++i) margins[i] = %(pad)s;
  for (long i = 0; i < PR; ++i) col[H * W + i] = %(pad)s;
  for (long oh = 0; oh < %(scale_rows)d; ++oh) {
    long r = 0;
    for (long kh = 0; kh < KH; ++kh) { long ih = oh - PT + kh; r += %(row_ok)s; }
    for (long ow = 0; ow < OW; ++ow) scale[oh * OW + ow] = 1.0f / ((float)r * cols[ow]);
  }
%(dispatch)s}
""" % dict(enum=enum, per=per, planes=planes, pad=KINDS[kind][0], row_ok=counts["row_ok"],
           scale=g.h * g.w if kind == "avg" else 1, scale_rows=g.h if kind == "avg" else 0,
           counts=COLUMN_COUNTS % counts, dispatch=DISPATCH % _per_plane(kind, "xp, o, col, scale"))  # fmt: skip
    return make_kernel("pool", body, [g.n * g.c * g.oh * g.ow, g.n * g.c * g.h * g.w], chunks)


def pool2d_taps(g: ConvGeom, kind: str, count_include_pad: bool) -> CKernel:
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
