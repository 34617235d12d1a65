"""GridSample's kernel: sampling positions read from the grid at run time; its C is ``templates/grid_sample.c.j2``."""

from __future__ import annotations

import math
from typing import Sequence

from ..geometry import contiguous_strides
from .ckernel import CKernel, make_kernel, render, share

#: Taps per axis and the offset of the first from floor(coordinate), per mode.
TAPS = {"nearest": (1, 0), "linear": (2, 0), "cubic": (4, 1)}


def grid_sample(
    batch: int, channels: int, dims: Sequence[int], points: int, mode: str, padding: str, align_corners: bool
) -> CKernel:
    """``out[n, c, p] = sample(x[n, c], grid[n, p])`` over ``points`` output points, x's spatial axes ``dims`` (1 to
    3); ``mode`` nearest, linear or cubic, ``padding`` zeros, border or reflection."""
    taps, first = TAPS[mode]
    items = batch * points
    volume = int(math.prod(dims))
    chunks, per = share(items, channels * taps ** len(dims))
    # the coordinates' range per axis: pixel centres (align_corners) or pixel edges; reflection folds into it
    lo = [0.0 if align_corners else -0.5 for _ in dims]
    hi = [float(d - 1) if align_corners else d - 0.5 for d in dims]
    body = render(
        "grid_sample.c.j2",
        per=per,
        items=items,
        points=points,
        channels=channels,
        volume=volume,
        dims=[int(d) for d in dims],
        strides=contiguous_strides(dims),
        taps=taps,
        first_tap=first,
        lo=lo,
        hi=hi,
        mode=mode,
        padding=padding,
        align_corners=align_corners,
    )
    extents = [batch * channels * points, batch * channels * volume, items * len(dims)]
    return make_kernel("grid_sample", body, extents, chunks, flops=2 * batch * channels * points * taps ** len(dims))
