"""DeformConv's kernel (2-D): taps sampled bilinearly at offset positions, then a small matrix product per output
pixel; its C is ``templates/deform_conv.c.j2``."""

from __future__ import annotations

from typing import Sequence

from .ckernel import CKernel, make_kernel, render, share


def deform_conv(
    batch: int,
    channels: int,
    image: Sequence[int],
    out_channels: int,
    out_image: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
    groups: int,
    offset_groups: int,
    bias: bool,
    mask: bool,
) -> CKernel:
    """x (batch, channels, h, w), weights (out_channels, channels / groups, kh, kw), offsets (batch, offset_groups *
    kh * kw * 2, oh, ow); ``pads``: the leading pad of each axis. Buffers: out, x, w, offset[, bias][, mask]."""
    (h, w), (oh, ow), (kh, kw) = image, out_image, kernel
    taps, icg, ocg = kh * kw, channels // groups, out_channels // groups
    items = batch * oh * ow
    chunks, per = share(items, out_channels * icg * taps)
    body = render(
        "deform_conv.c.j2",
        per=per,
        items=items,
        ic=channels,
        oc=out_channels,
        h=h,
        w=w,
        oh=oh,
        ow=ow,
        kh=kh,
        kw=kw,
        taps=taps,
        sh=strides[0],
        sw=strides[1],
        pt=pads[0],
        pl=pads[1],
        dh=dilations[0],
        dw=dilations[1],
        groups=groups,
        icg=icg,
        ocg=ocg,
        offset_groups=offset_groups,
        icog=channels // offset_groups,
        bias=bias,
        mask=mask,
    )
    extents = [batch * out_channels * oh * ow, batch * channels * h * w, out_channels * icg * taps]
    extents.append(batch * offset_groups * taps * 2 * oh * ow)
    if bias:
        extents.append(out_channels)
    if mask:
        extents.append(batch * offset_groups * taps * oh * ow)
    return make_kernel("deform_conv", body, extents, chunks, flops=2 * items * out_channels * icg * taps)
