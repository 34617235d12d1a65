"""The integer-quantized ops' kernels: MatMulInteger and QLinearMatMul (``templates/qmatmul.c.j2``), ConvInteger and
QLinearConv (``templates/qconv.c.j2``), with int32 accumulation and, for the QLinear ops, the float requantization
of ``templates/requant.c.j2``. Simple loop nests: correct first, bit for bit onnxruntime's results."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from ..geometry import ConvGeom
from .ckernel import CKernel, make_kernel, render, share
from .quant import QUANT_TYPES

#: Output columns whose int32 sums one row keeps on the stack while k runs.
TILE = 256


@dataclass(frozen=True)
class MatMulShape:
    """One integer matmul: out[batch..., M, N] from a[..., M, K] and b[..., K, N]. ``bd``: the output's batch dims;
    per batch dim, the element strides of A, B, a's zero point, b's zero point and b's scale (0 where one repeats);
    ``azm``: a's zero point's stride per row m, ``bzn`` and ``bsn``: b's zero point's and scale's per column n
    (0: per tensor); ``sizes``: the element counts of a, b, a's zero point, b's zero point and b's scale."""

    m: int
    k: int
    n: int
    bd: Tuple[int, ...]
    sa: Tuple[int, ...]
    sb: Tuple[int, ...]
    saz: Tuple[int, ...]
    sbz: Tuple[int, ...]
    sbs: Tuple[int, ...]
    azm: int
    bzn: int
    bsn: int
    sizes: Tuple[int, int, int, int, int]


def _ctype(dtype: str) -> str:
    return QUANT_TYPES[dtype][0]


def int_matmul(s: MatMulShape, a: str, b: str, y: str) -> CKernel:
    """MatMulInteger (``y`` "int32": the sums) or QLinearMatMul (``y`` int8/uint8: requantized) of ``a`` and
    ``b`` (int8/uint8 dtypes). Buffers: out, a, b, a's zero point, b's zero point, then for QLinearMatMul a_scale,
    b_scale, y_scale, y's zero point (float32 scales)."""
    qlinear = y != "int32"
    batch = 1
    for d in s.bd:
        batch *= d
    rows = batch * s.m
    chunks, per = share(rows, s.k * s.n)
    _, lo, hi = QUANT_TYPES[y]
    body = render(
        "qmatmul.c.j2",
        A=_ctype(a),
        B=_ctype(b),
        Y=_ctype(y),
        qlinear=qlinear,
        lo=lo,
        hi=hi,
        M=s.m,
        K=s.k,
        N=s.n,
        rows=rows,
        per=per,
        tile=min(TILE, s.n),
        bd=list(s.bd),
        sa=list(s.sa),
        sb=list(s.sb),
        saz=list(s.saz),
        sbz=list(s.sbz),
        sbs=list(s.sbs),
        azm=s.azm,
        bzn=s.bzn,
        bsn=s.bsn,
    )
    extents = [rows * s.n] + list(s.sizes[:4]) + ([1, s.sizes[4], 1, 1] if qlinear else [])
    return make_kernel("qmatmul" if qlinear else "matmulint", body, extents, chunks, flops=2 * rows * s.n * s.k)


def int_conv(g: ConvGeom, x: str, w: str, y: str, wzp_per_channel: bool, wscale_per_channel: bool) -> CKernel:
    """ConvInteger (``y`` "int32") or QLinearConv (``y`` int8/uint8) over 2-D geometry ``g``. Buffers: out, x, w,
    x's zero point, w's zero point (one, or one per output channel), then for QLinearConv x_scale, w_scale (one or
    one per output channel), y_scale, y's zero point and the int32 bias (OC values)."""
    qlinear = y != "int32"
    cg, ocg = g.c // g.groups, g.oc // g.groups
    rows = g.n * g.oc * g.oh
    chunks, per = share(rows, g.ow * cg * g.kh * g.kw)
    _, lo, hi = QUANT_TYPES[y]
    body = render(
        "qconv.c.j2",
        X=_ctype(x),
        W=_ctype(w),
        Y=_ctype(y),
        qlinear=qlinear,
        lo=lo,
        hi=hi,
        rows=rows,
        per=per,
        cg=cg,
        ocg=ocg,
        c=g.c,
        **g.window(),
        oc=g.oc,
        wzn=int(wzp_per_channel),
        wsn=int(wscale_per_channel),
    )
    extents = _conv_extents(g, qlinear, wzp_per_channel, wscale_per_channel)
    flops = 2 * rows * g.ow * cg * g.kh * g.kw
    return make_kernel("qconv" if qlinear else "convint", body, extents, chunks, flops=flops)


def _conv_extents(g: ConvGeom, qlinear: bool, wzp_per_channel: bool, wscale_per_channel: bool) -> List[int]:
    """The element counts of an integer convolution's buffers, in :func:`int_conv`'s order."""
    extents = [g.n * g.oc * g.oh * g.ow, g.n * g.c * g.h * g.w, g.oc * (g.c // g.groups) * g.kh * g.kw, 1]
    extents.append(g.oc if wzp_per_channel else 1)
    if qlinear:
        extents += [1, g.oc if wscale_per_channel else 1, 1, 1, g.oc]
    return extents


#: The widest padded input line (int32s, on the stack) the depthwise kernel holds, and its widest output row.
DEPTHWISE_LINE_MAX = 4096


def depthwise_line(g: ConvGeom) -> int:
    """The padded input line of :func:`int_depthwise_conv`: the left padding, the row, and as far as the last
    output's last tap reaches."""
    return max(g.pl + g.w, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1)


#: The largest padded plane (int32s, on the stack, beside as many sums) the depthwise kernel takes whole.
DEPTHWISE_PLANE_MAX = 4096


def _padded_plane(g: ConvGeom) -> Dict[str, Any]:
    """The whole-plane form's sizes (``plane``: whether it applies, stride 1 and small enough): columns ``pw`` (the
    padded row and as far as the last output's last tap reaches) and the padded plane's int32s with the slack the
    last row's taps read past it."""
    pw = max(g.pl + g.w + g.pr, g.ow + (g.kw - 1) * g.dw)
    rows = max(g.pt + g.h + g.pb, g.oh + (g.kh - 1) * g.dh)
    padded = rows * pw + (g.kw - 1) * g.dw
    plane = (g.sh, g.sw) == (1, 1) and max(padded, g.oh * pw) <= DEPTHWISE_PLANE_MAX
    return {"plane": plane, "pw": pw, "padded": padded}


def takes_depthwise(g: ConvGeom) -> bool:
    """Whether a convolution runs :func:`int_depthwise_conv`: one filter per channel, lines that fit the stack."""
    return g.groups == g.c == g.oc > 1 and max(depthwise_line(g), g.ow) <= DEPTHWISE_LINE_MAX


def int_depthwise_conv(g: ConvGeom, x: str, w: str, y: str, wzp_per_channel: bool, wscale_per_channel: bool) -> CKernel:
    """A depthwise ConvInteger or QLinearConv (:func:`takes_depthwise`) row by row, each tap one loop along the row
    (``templates/qdwconv.c.j2``); the buffers of :func:`int_conv`."""
    qlinear = y != "int32"
    planes = g.n * g.c
    chunks, per = share(planes, g.oh * g.ow * g.kh * g.kw)
    _, lo, hi = QUANT_TYPES[y]
    body = render(
        "qdwconv.c.j2",
        X=_ctype(x),
        W=_ctype(w),
        Y=_ctype(y),
        qlinear=qlinear,
        lo=lo,
        hi=hi,
        planes=planes,
        per=per,
        c=g.c,
        line=depthwise_line(g),
        **_padded_plane(g),
        **g.window(),
        wzn=int(wzp_per_channel),
        wsn=int(wscale_per_channel),
    )
    extents = _conv_extents(g, qlinear, wzp_per_channel, wscale_per_channel)
    flops = 2 * planes * g.oh * g.ow * g.kh * g.kw
    return make_kernel("qdwconv" if qlinear else "dwconvint", body, extents, chunks, flops=flops, rows_first=True)
