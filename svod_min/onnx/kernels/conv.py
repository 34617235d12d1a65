"""Generated convolutions where the library's do not apply: direct (grouped, any padding), depthwise on a padded
plane, im2col for a convolution as one matmul, and ConvTranspose's direct gather and col2im."""

from __future__ import annotations

from typing import Dict, Optional

from ..activations import activation
from ..geometry import ConvGeom
from .ckernel import CKernel, chunks_for, make_kernel, range_head

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


def col_rows(g: ConvGeom) -> int:
    """Rows of one group's col matrix: (output channel of the group, kh, kw)."""
    return g.oc // g.groups * g.kh * g.kw


def col2im(g: ConvGeom, bias: bool) -> CKernel:
    """out[n, oc, y, x] = bias + the sum of col[n, group, (oc % ocg, ky, kx), iy, ix] over the taps with
    y + pt = iy * sh + ky * dh and x + pl = ix * sw + kx * dw (iy, ix inside the input)."""
    ocg = g.oc // g.groups
    planes = g.n * g.oc
    chunks = chunks_for(planes, g.oh * g.ow * g.kh * g.kw)
    per = -(-planes // chunks)
    body = """void KNAME(float *restrict out, const float *restrict col%(bias_arg)s, int core_id) {
  long p0 = (long)core_id * %(per)d, p1 = p0 + %(per)d < %(planes)d ? p0 + %(per)d : %(planes)d;
  for (long p = p0; p < p1; ++p) {
    const long b = p / %(oc)d, o = p %% %(oc)d, grp = o / %(ocg)d, oo = o %% %(ocg)d;
    const float *cols = col + ((b * %(groups)d + grp) * %(rows)d + oo * %(taps)d) * %(pixels)dL;
    float *dst = out + p * %(plane)dL;
    for (long y = 0; y < %(oh)d; ++y) {
      for (long xx = 0; xx < %(ow)d; ++xx) {
        float acc = %(init)s;
        for (long ky = 0; ky < %(kh)d; ++ky) {
          const long ty = y + %(pt)d - ky * %(dh)d;
          if (ty < 0 || ty %% %(sh)d) continue;
          const long iy = ty / %(sh)d;
          if (iy >= %(h)d) continue;
          for (long kx = 0; kx < %(kw)d; ++kx) {
            const long tx = xx + %(pl)d - kx * %(dw)d;
            if (tx < 0 || tx %% %(sw)d) continue;
            const long ix = tx / %(sw)d;
            if (ix >= %(w)d) continue;
            acc += cols[(ky * %(kw)d + kx) * %(pixels)dL + iy * %(w)d + ix];
          }
        }
        dst[y * %(ow)d + xx] = acc;
      }
    }
  }
}
""" % {"bias_arg": ", const float *restrict bias" if bias else "", "per": per, "planes": planes, "oc": g.oc,
       "ocg": ocg, "groups": g.groups, "rows": col_rows(g), "taps": g.kh * g.kw, "pixels": g.h * g.w,
       "plane": g.oh * g.ow, "oh": g.oh, "ow": g.ow, "init": "bias[o]" if bias else "0.0f", "kh": g.kh, "kw": g.kw,
       "pt": g.pt, "pl": g.pl, "dh": g.dh, "dw": g.dw, "sh": g.sh, "sw": g.sw, "h": g.h, "w": g.w}  # fmt: skip
    extents = [planes * g.oh * g.ow, g.n * g.groups * col_rows(g) * g.h * g.w] + ([g.oc] if bias else [])
    return make_kernel("col2im", body, extents, chunks)
