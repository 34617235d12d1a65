"""LpPool over 1-, 2- or 3-D windows (``templates/lp_pool.c.j2``): each output the p-th root of the sum of |x|^p
over its window's taps inside the input (padding adds nothing)."""

from __future__ import annotations

import math
from typing import Sequence

from .ckernel import CKernel, make_kernel, render, share


def lp_pool(
    planes: int,
    in_shape: Sequence[int],
    out_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    begin: Sequence[int],
    p: int,
) -> CKernel:
    """LpPool of ``planes`` (N x C) float32 planes of ``in_shape`` into ``out_shape``; ``begin``: the leading pads.
    The sum runs in float in the taps' order and the root is powf(sum, 1/p) (sqrt for p 2), as onnxruntime's."""
    n_in, n_out = int(math.prod(in_shape)), int(math.prod(out_shape))
    chunks, per = share(planes, n_out * int(math.prod(kernel)))
    dims = [
        dict(i=int(i), o=int(o), k=int(k), s=int(s), d=int(d), b=int(b))
        for i, o, k, s, d, b in zip(in_shape, out_shape, kernel, strides, dilations, begin)
    ]
    body = render("lp_pool.c.j2", per=per, planes=planes, n_in=n_in, n_out=n_out, dims=dims, p=int(p))
    return make_kernel("lppool", body, [planes * n_out, planes * n_in], chunks)
