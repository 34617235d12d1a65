"""Normalisations: Softmax and LogSoftmax along an axis, LRN across channels, InstanceNormalization.

Each kernel's C is a template (``templates/softmax.c.j2``, ``lrn.c.j2``, ``instance_norm.c.j2``); the functions
here compute its constants."""

from __future__ import annotations

from ..ctext import C_TYPES
from .ckernel import CKernel, make_kernel, render, share

#: Softmax over a middle axis runs this many inner positions side by side (one vector loop each step).
SOFTMAX_BLOCK = 64

#: Pixels per block of LRN's running sums (on the stack).
LRN_BLOCK = 1024


def softmax_axis(outer: int, red: int, inner: int, log: bool, dtype: str = "float32") -> CKernel:
    """Softmax (or LogSoftmax) along an axis: x viewed as (outer, red, inner); rows (inner 1) or blocks of
    inner positions, each pass a contiguous loop: the max, exp and its sum, then the scale (or x - max - log sum)."""
    if inner == 1:
        return _softmax_rows(outer, red, log, dtype)
    block = min(inner, SOFTMAX_BLOCK)
    blocks = -(-inner // block)
    items = outer * blocks
    chunks, per = share(items, red * block * 3)
    body = render(
        "softmax.c.j2",
        T=C_TYPES[dtype],
        shape="blocks",
        log=log,
        per=per,
        items=items,
        block=block,
        blocks=blocks,
        red=red,
        inner=inner,
    )
    return make_kernel("softmax", body, [outer * red * inner, outer * red * inner], chunks, rows_first=True)


def _softmax_rows(rows: int, cols: int, log: bool, dtype: str = "float32") -> CKernel:
    """Softmax (or LogSoftmax) of contiguous rows: the max and the sum of exps in 16 lane accumulators (vector
    loops, a fixed summation order), the exps stored in the same pass as their sum, then scaled."""
    chunks, per = share(rows, cols * 3)
    body = render("softmax.c.j2", T=C_TYPES[dtype], shape="rows", rows=rows, log=log, per=per, cols=cols)
    return make_kernel("softmax", body, [rows * cols, rows * cols], chunks, rows_first=True)


def lrn(n: int, c: int, hw: int, size: int, alpha: float, beta: float, bias: float, dtype: str = "float32") -> CKernel:
    """ONNX LRN across channels: x / (bias + alpha / size * sum of squares in the window) ** beta.

    Per plane, a block of pixels at a time: the window's channels squared and summed into the block in
    channel order (the loops over pixels vectorise), then each output; the power as square roots where
    beta allows (0.5, 0.75, 1), powf otherwise."""
    planes = n * c
    chunks, per = share(planes, hw * size)
    body = render(
        "lrn.c.j2",
        T=C_TYPES[dtype],
        per=per,
        planes=planes,
        block=LRN_BLOCK,
        c=c,
        before=(size - 1) // 2,
        after=-(-(size - 1) // 2),
        last=c - 1,
        hw=hw,
        bias=bias,
        scale=alpha / size,
        beta=beta,
    )
    return make_kernel("lrn", body, [planes * hw, planes * hw], chunks, rows_first=True)


def instance_norm(planes: int, channels: int, size: int, epsilon: float, dtype: str = "float32") -> CKernel:
    """InstanceNormalization: each (n, c) plane normalised by its own mean and variance, then scale[c], bias[c]."""
    chunks, per = share(planes, size * 3)
    body = render(
        "instance_norm.c.j2", T=C_TYPES[dtype], per=per, planes=planes, channels=channels, size=size, epsilon=epsilon
    )
    return make_kernel("instnorm", body, [planes * size, planes * size, channels, channels], chunks, rows_first=True)
