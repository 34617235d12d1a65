"""Generated convolutions where the library's do not apply: direct (grouped, any padding), depthwise on a padded
plane, im2col for a convolution as one matmul, and ConvTranspose's direct gather and col2im.

Each kernel's C is a template of ``templates/conv*.c.j2``; the functions here compute its constants."""

from __future__ import annotations

from typing import Dict, Optional

from ..activations import activation
from ..ctext import C_TYPES
from ..geometry import ConvGeom
from .ckernel import CKernel, make_kernel, render, share


def _window(g: ConvGeom) -> Dict[str, int]:
    """The geometry's sizes as template constants."""
    return {
        "c": g.c,
        "h": g.h,
        "w": g.w,
        "oc": g.oc,
        "oh": g.oh,
        "ow": g.ow,
        "kh": g.kh,
        "kw": g.kw,
        "sh": g.sh,
        "sw": g.sw,
        "pt": g.pt,
        "pl": g.pl,
        "dh": g.dh,
        "dw": g.dw,
    }


def conv2d(
    g: ConvGeom, bias: bool, act: Optional[str], act_params: Dict[str, float], dtype: str = "float32"
) -> CKernel:
    """Direct grouped convolution with any padding; bias and activation in the store."""
    cg, ocg = g.c // g.groups, g.oc // g.groups
    planes = g.n * g.oc
    chunks, per = share(planes, g.oh * g.ow * cg * g.kh * g.kw)
    body = render(
        "conv.c.j2",
        T=C_TYPES[dtype],
        planes=planes,
        per=per,
        cg=cg,
        ocg=ocg,
        store=activation(act, act_params, "acc"),
        bias=bias,
        **_window(g),
    )
    extents = [g.n * g.oc * g.oh * g.ow, g.n * g.c * g.h * g.w, g.oc * cg * g.kh * g.kw] + ([g.oc] if bias else [])
    return make_kernel("conv", body, extents, chunks, rows_first=True)


def im2col(g: ConvGeom, dtype: str = "float32") -> CKernel:
    """col[(c, kh, kw), (oh, ow)] = x[c, ih, iw] (0 in the padding) for N = 1: a convolution becomes one matmul."""
    rows = g.c * g.kh * g.kw
    chunks, per = share(rows, g.oh * g.ow)
    body = render("conv_im2col.c.j2", T=C_TYPES[dtype], rows=rows, per=per, **_window(g))
    return make_kernel("im2col", body, [rows * g.oh * g.ow, g.c * g.h * g.w], chunks)


#: The largest padded input plane (elements, on the stack) depthwise2d copies each plane into.
DEPTHWISE_PAD_MAX = 16384


def _padded_sides(g: ConvGeom) -> Dict[str, int]:
    """Rows and columns of a plane padded to hold every tap of every output."""
    return {
        "ph": max(g.h + g.pt, (g.oh - 1) * g.sh + (g.kh - 1) * g.dh + 1),
        "pw": max(g.w + g.pl, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1),
    }


def depthwise_padded_plane(g: ConvGeom) -> int:
    """Elements of a plane padded to hold every tap of every output (0 past the pads)."""
    sides = _padded_sides(g)
    return sides["ph"] * sides["pw"]


def depthwise2d(
    g: ConvGeom, bias: bool, act: Optional[str], act_params: Dict[str, float], dtype: str = "float32"
) -> CKernel:
    """Depthwise convolution (groups = C = OC) of planes up to DEPTHWISE_PAD_MAX padded elements: each input plane
    copied into a zero-padded one (the borders filled once), then every output's fixed taps in (kh, kw) order from
    the bias, without bounds tests, so the outputs vectorise; activation in the store. The taps in the padding add
    0 x w: the sums are those of a conv that skips them."""
    planes = g.n * g.c
    chunks, per = share(planes, g.oh * g.ow * g.kh * g.kw)
    body = render(
        "conv_depthwise.c.j2",
        T=C_TYPES[dtype],
        planes=planes,
        per=per,
        store=activation(act, act_params, "acc"),
        bias=bias,
        **_padded_sides(g),
        **_window(g),
    )
    extents = [g.n * g.c * g.oh * g.ow, g.n * g.c * g.h * g.w, g.c * g.kh * g.kw] + ([g.c] if bias else [])
    return make_kernel("dwconv", body, extents, chunks, rows_first=True)


def conv_transpose(
    n: int,
    c: int,
    h: int,
    w: int,
    oc: int,
    oh: int,
    ow: int,
    kh: int,
    kw: int,
    sh: int,
    sw: int,
    pt: int,
    pl: int,
    dh: int,
    dw: int,
    groups: int,
    bias: bool,
    dtype: str = "float32",
) -> CKernel:
    """ConvTranspose as a gather: out[n, oc, y, x] = bias + sum of x[n, c, iy, ix] * w[c, oc % ocg, ky, kx] over
    the taps with y + pt = iy * sh + ky * dh (and the same for x)."""
    cg, ocg = c // groups, oc // groups
    planes = n * oc
    chunks, per = share(planes, oh * ow * cg * kh * kw)
    body = render(
        "conv_transpose.c.j2",
        T=C_TYPES[dtype],
        planes=planes,
        per=per,
        cg=cg,
        ocg=ocg,
        c=c,
        h=h,
        w=w,
        oc=oc,
        oh=oh,
        ow=ow,
        kh=kh,
        kw=kw,
        sh=sh,
        sw=sw,
        pt=pt,
        pl=pl,
        dh=dh,
        dw=dw,
        bias=bias,
    )
    extents = [n * oc * oh * ow, n * c * h * w, c * ocg * kh * kw] + ([oc] if bias else [])
    return make_kernel("convt", body, extents, chunks)


def col_rows(g: ConvGeom) -> int:
    """Rows of one group's col matrix: (output channel of the group, kh, kw)."""
    return g.oc // g.groups * g.kh * g.kw


def col2im(g: ConvGeom, bias: bool, dtype: str = "float32") -> CKernel:
    """out[n, oc, y, x] = bias + the sum of col[n, group, (oc % ocg, ky, kx), iy, ix] over the taps with
    y + pt = iy * sh + ky * dh and x + pl = ix * sw + kx * dw (iy, ix inside the input)."""
    planes = g.n * g.oc
    chunks, per = share(planes, g.oh * g.ow * g.kh * g.kw)
    body = render(
        "conv_col2im.c.j2",
        T=C_TYPES[dtype],
        planes=planes,
        per=per,
        ocg=g.oc // g.groups,
        groups=g.groups,
        rows=col_rows(g),
        bias=bias,
        **_window(g),
    )
    extents = [planes * g.oh * g.ow, g.n * g.groups * col_rows(g) * g.h * g.w] + ([g.oc] if bias else [])
    return make_kernel("col2im", body, extents, chunks)


#: Output pixels summed in place per span of :func:`conv_one_out`: 1 KiB of float32, in L1 beside an input row's.
ONE_OUT_SPAN = 256


def conv_one_out(g: ConvGeom, bias: bool, act: Optional[str], act_params: Dict[str, float]) -> CKernel:
    """A one-group float32 convolution with one output channel: each tap adds a scaled input row to the output row."""
    rows = g.n * g.oh
    chunks, per = share(rows, g.ow * g.c * g.kh * g.kw)
    body = render(
        "conv_one_out.c.j2",
        T=C_TYPES["float32"],
        rows=rows,
        per=per,
        span=ONE_OUT_SPAN,
        store=activation(act, act_params, "acc"),
        bias=bias,
        **_window(g),
    )
    extents = [g.n * g.oh * g.ow, g.n * g.c * g.h * g.w, g.c * g.kh * g.kw] + ([1] if bias else [])
    return make_kernel("conv_one_out", body, extents, chunks, rows_first=True)
