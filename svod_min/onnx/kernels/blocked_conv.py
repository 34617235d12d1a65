"""The convolution of the blocked channel layout (NCHWc): generated C, weights packed here.

A float32 tensor of logical shape [N, C, H, W] is stored blocked as [N, CB, H, W, 16], CB = ceil(C / 16):
sixteen channels of one pixel sit side by side, so a convolution is a direct loop whose inner step is one
input value broadcast against sixteen output channels' weights. Each call of the kernel's body keeps a
register tile of two output-channel blocks by a run of output pixels in one row (14 pixels where the target
has 32 vector registers, fewer elsewhere; the width is chosen by the target's predefined macros, so one source
serves every target the bundle compiles for). Weights are packed once, at build time, as
[OCB, ICB, KH, KW, 16 input channels, 16 output channels], zero beyond the real channels; the bias is padded
the same way. Only real input channels are read, so a producer's padding channels never reach a sum.

The epilogue ``act(conv + bias + residual)`` runs in the store; padding output channels get act(0 + residual).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from ...error import NotSupportedError
from ..activations import activation
from ..geometry import LANES, ConvGeom, blocks
from .ckernel import CKernel, chunks_for, flt, make_kernel

#: Multiply-adds one core_id call does at least: smaller convolutions run in fewer calls.
GRAIN_MACS = 1 << 21
#: Products summed in registers (whole input-channel blocks, at least this many) before the running sum in the
#: output takes them: one sequential sum of all C*KH*KW float32 products (4,608 in VGG's deep layers) loses 2.5x
#: the accuracy of conv2d_gemm's blocked sums on VGG-19's logits; at 256 it matches it, and costs no speed.
PARTIAL_TERMS = 256
#: The register tile is kept only where the compiler unrolls the pixel and block loops fully: at -O2 clang keeps
#: them as loops and the kernel runs at a quarter of its speed.
OPT_FLAGS = ("-O3",)


def pack_weights(w: np.ndarray) -> np.ndarray:
    """[OC, IC, KH, KW] -> [OCB, ICB, KH, KW, 16 (in), 16 (out)], zero-padded, float32."""
    oc, ic, kh, kw = w.shape
    ocb, icb = blocks(oc), blocks(ic)
    padded = np.zeros((ocb * LANES, icb * LANES, kh, kw), np.float32)
    padded[:oc, :ic] = w
    tiles = padded.reshape(ocb, LANES, icb, LANES, kh, kw)
    return np.ascontiguousarray(tiles.transpose(0, 2, 4, 5, 3, 1))


#: ``KNAME_ld`` loads a vector by value: a memcpy into a local or a may_alias pointer load makes clang spill
#: the register tile, at a third of the speed.
_BODY = """%(TABLES)stypedef float svod_v16 __attribute__((vector_size(64), aligned(4)));
#if defined(__AVX512F__)
#define SVOD_BC_ACC 28
#elif defined(__aarch64__)
#define SVOD_BC_ACC 6
#else
#define SVOD_BC_ACC 4
#endif
#define SVOD_BC_PIX (SVOD_BC_ACC / %(OT)d > 0 ? SVOD_BC_ACC / %(OT)d : 1)
#pragma GCC diagnostic ignored "-Wpsabi"
static inline __attribute__((always_inline)) svod_v16 KNAME_ld(const float *p) { svod_v16 v; __builtin_memcpy(&v, p, 64); return v; }
static inline __attribute__((always_inline)) void KNAME_tile(float *restrict out, const float *restrict x,
    const float *restrict w, const float *restrict bias, const float *restrict res,
    long n, long ocb, long oh, long ow0, const int ot, const int tn, const int edge) {
  svod_v16 acc[%(OT)d][SVOD_BC_PIX];
  const float *xn = x + n * %(XN)dL;
  for (long icg = 0; icg < %(ICB)d; icg += %(IG)d) {
  for (int o = 0; o < ot; o++) {
    const svod_v16 b = icg ? (svod_v16){0} : KNAME_ld(bias + (ocb + o) * 16);
    for (int p = 0; p < tn; p++) acc[o][p] = b;
  }
  for (long icb = icg; icb < icg + %(IG)d && icb < %(ICB)d; icb++) {
    const int icn = icb == %(ICB)d - 1 ? %(LASTN)d : 16;
    for (long kh = 0; kh < %(KH)d; kh++) {
      const long ih = oh * %(SH)d - %(PT)d + kh * %(DH)d;
      if (ih < 0 || ih >= %(H)d) continue;
      const float *xr = xn + %(XROW)s;
      const float *w0 = w + ((ocb * %(ICB)d + icb) * %(KH)d + kh) * (%(KW)dL * 256);
      for (long kw = 0; kw < %(KW)d; kw++) {
        for (int ic = 0; ic < icn; ic++) {
%(WLOADS)s
          for (int p = 0; p < tn; p++) {
            const long iw = (ow0 + p) * %(SW)d - %(PL)d + kw * %(DW)d;
            const float xv = edge ? ((iw >= 0 && iw < %(W)d) ? %(XAT)s : 0.0f) : %(XAT)s;
%(FMAS)s
          }
        }
      }
    }
  }
  for (int o = 0; o < ot; o++)
    for (int p = 0; p < tn; p++) {
      const long at = (((n * %(OCB)d + ocb + o) * %(OH)d + oh) * %(OW)d + ow0 + p) * 16;
      if (icg) acc[o][p] += KNAME_ld(out + at);
      if (icg + %(IG)d < %(ICB)d) {
        __builtin_memcpy(out + at, &acc[o][p], 64);
        continue;
      }
      float t[16];
      __builtin_memcpy(t, &acc[o][p], 64);
      for (int j = 0; j < 16; j++) {
        const float v = t[j]%(RES)s;
        out[at + j] = %(ACT)s;
      }
    }
  }
}
static inline __attribute__((always_inline)) void KNAME_row(float *restrict out, const float *restrict x,
    const float *restrict w, const float *restrict bias, const float *restrict res, long n, long ocb, long oh, const int ot) {
  long ow0 = 0;
  for (; ow0 + SVOD_BC_PIX <= %(OW)d; ow0 += SVOD_BC_PIX) {
    if (!%(EDGES)d || (ow0 * %(SW)d - %(PL)d >= 0 && (ow0 + SVOD_BC_PIX - 1) * %(SW)d - %(PL)d + %(KWSPAN)d < %(W)d))
      KNAME_tile(out, x, w, bias, res, n, ocb, oh, ow0, ot, SVOD_BC_PIX, 0);
    else
      KNAME_tile(out, x, w, bias, res, n, ocb, oh, ow0, ot, SVOD_BC_PIX, 1);
  }
  if (%(OW)d %% SVOD_BC_PIX) KNAME_tile(out, x, w, bias, res, n, ocb, oh, ow0, ot, %(OW)d %% SVOD_BC_PIX, %(EDGES)d);
}
void KNAME(float *restrict out, const float *restrict x, const float *restrict w, const float *restrict bias%(RESPARAM)s, int core_id) {
  const long items = %(ITEMS)d, per = %(PER)d;
  const long i0 = (long)core_id * per, i1 = i0 + per < items ? i0 + per : items;
  for (long i = i0; i < i1; i++) {
    const long oh = i %% %(OH)d, group = (i / %(OH)d) %% %(GROUPS)d, n = i / (%(OH)dL * %(GROUPS)d);
    if (%(LASTOT)d == %(OT)d || (group + 1) * %(OT)d <= %(OCB)d)
      KNAME_row(out, x, w, bias, %(RESARG)s, n, group * %(OT)d, oh, %(OT)d);
    else
      KNAME_row(out, x, w, bias, %(RESARG)s, n, group * %(OT)d, oh, %(LASTOT)d);
  }
}
#undef SVOD_BC_PIX
#undef SVOD_BC_ACC
"""


def oc_tile(g: ConvGeom) -> int:
    """Output-channel blocks per register tile: four where rows are short (a 7-pixel row fills the tile's other
    dimension only half), else two."""
    return 4 if g.ow <= 7 and blocks(g.oc) >= 4 else 2


def _epilogue(act: Optional[str], act_params: Dict[str, Any], ocb: int) -> Dict[str, str]:
    """The store's activation of ``v`` and the tables it reads: a per-channel PRelu's slopes, one per blocked channel."""
    if act != "PRelu":
        return {"ACT": activation(act, act_params, "v"), "TABLES": ""}
    slopes = list(act_params["slope"]) + [0.0] * (ocb * LANES - len(act_params["slope"]))
    table = "static const float KNAME_slope[%d] = {%s};\n" % (len(slopes), ", ".join(flt(v) for v in slopes))
    return {"ACT": "(v < 0.0f ? v * KNAME_slope[(ocb + o) * 16 + j] : v)", "TABLES": table}


def _weight_loads(ot: int, block_stride: int) -> str:
    """One named vector per output-channel block of the tile (an array of them is kept in memory, not registers)."""
    lines = ["          const svod_v16 wv0 = KNAME_ld(w0 + (kw * 16 + ic) * 16);"]
    for o in range(1, ot):
        lines.append("          const svod_v16 wv%d = ot > %d ? KNAME_ld(w0 + %dL + (kw * 16 + ic) * 16) : wv0;" % (o, o, o * block_stride))
    return "\n".join(lines)


def _fmas(ot: int) -> str:
    return "\n".join("            %sacc[%d][p] += xv * wv%d;" % ("if (ot > %d) " % o if o else "", o, o) for o in range(ot))


def _has_edges(g: ConvGeom) -> bool:
    """Whether some output column's window reaches past the input row (padding): without, no tile tests its taps,
    and the kernel is compiled without the testing variant."""
    return g.pl > 0 or (g.ow - 1) * g.sw + (g.kw - 1) * g.dw >= g.w


def _input_layout(g: ConvGeom, plain_input: bool) -> Tuple[Dict[str, Any], int]:
    """How the kernel addresses its input (an image's offset, a row's, a pixel's channel) and its size."""
    if plain_input:
        return {"XN": g.c * g.h * g.w, "XROW": "(icb * 16 * %dL + ih) * %d" % (g.h, g.w),
                "XAT": "xr[ic * %dL + iw]" % (g.h * g.w)}, g.n * g.c * g.h * g.w  # fmt: skip
    icb = blocks(g.c)
    return {"XN": icb * g.h * g.w * LANES, "XROW": "(icb * %d + ih) * %dL" % (g.h, g.w * LANES),
            "XAT": "xr[iw * 16 + ic]"}, g.n * icb * g.h * g.w * LANES  # fmt: skip


def blocked_conv(g: ConvGeom, act: Optional[str], act_params: Dict[str, Any], residual: bool, plain_input: bool = False) -> CKernel:
    """``out = act(conv(x, w) + bias (+ residual))`` for a group-1 2-D convolution, every tensor blocked (the input
    plain [N, C, H, W] with ``plain_input``: a first layer with few channels writes blocked without a reorder).

    Buffers: out [N, OCB, OH, OW, 16], x, w packed (:func:`pack_weights`), bias [OCB * 16] (:func:`.csrc_blocked.pad_channels`),
    and residual shaped like out when ``residual``.
    """
    if g.groups != 1:
        raise NotSupportedError("the blocked convolution takes one group, not %d" % g.groups)
    icb, ocb, ot = blocks(g.c), blocks(g.oc), oc_tile(g)
    groups = -(-ocb // ot)
    items = g.n * groups * g.oh
    macs = g.n * g.oc * g.oh * g.ow * g.c * g.kh * g.kw
    chunks = chunks_for(items, macs // items, GRAIN_MACS)
    layout, x_size = _input_layout(g, plain_input)
    values = dict(layout, ICB=icb, OCB=ocb, OT=ot, GROUPS=groups, LASTOT=ocb - (groups - 1) * ot, H=g.h, W=g.w,
                  KH=g.kh, KW=g.kw, SH=g.sh, SW=g.sw, PT=g.pt, PL=g.pl, DH=g.dh, DW=g.dw, OH=g.oh, OW=g.ow,
                  IG=-(-PARTIAL_TERMS // (LANES * g.kh * g.kw)), EDGES=int(_has_edges(g)), LASTN=g.c - LANES * (icb - 1), KWSPAN=(g.kw - 1) * g.dw,
                  WLOADS=_weight_loads(ot, icb * g.kh * g.kw * LANES * LANES), FMAS=_fmas(ot),
                  ITEMS=items, PER=-(-items // chunks), RES=" + res[at + j]" if residual else "",
                  RESPARAM=", const float *restrict res" if residual else "", RESARG="res" if residual else "0",
                  **_epilogue(act, act_params, ocb))  # fmt: skip
    out_size = g.n * ocb * g.oh * g.ow * LANES
    extents = [out_size, x_size, ocb * icb * g.kh * g.kw * LANES * LANES, ocb * LANES]
    if residual:
        extents.append(out_size)
    return make_kernel("bconv", _BODY % values, extents, chunks, OPT_FLAGS, flops=2 * macs)
