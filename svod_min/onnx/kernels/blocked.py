"""The blocked channel layout's reorders: NCHW to NCHWc (16 lanes) and back (:mod:`svod_min.onnx.geometry` has the
layout). ``to_blocked`` writes zeros into the padding channels. The C is ``templates/blocked_reorder.c.j2``; its
16 x 16 vector transpose is float-only by nature (16-float vectors), so the reorders take no dtype."""

from __future__ import annotations

import functools
from typing import Tuple

from ..geometry import LANES, blocks
from .ckernel import CKernel, make_kernel, render, share


@functools.lru_cache(maxsize=None)
def transpose16_swaps() -> Tuple[Tuple[int, int, Tuple[int, ...], Tuple[int, ...]], ...]:
    """The swaps that transpose 16 vectors of 16 floats in place: for each block size (8, 4, 2, 1), each pair of
    vectors (i, j = i + size) and the indices of the two-source shuffles (of r[i] and r[j]) that swap their
    off-diagonal blocks of that size."""
    swaps = []
    for size in (8, 4, 2, 1):
        for i in (i for i in range(16) if not i & size):
            top = tuple(16 + j - size if j & size else j for j in range(16))
            bottom = tuple(16 + j if j & size else j + size for j in range(16))
            swaps.append((i, i + size, top, bottom))
    return tuple(swaps)


def _reorder(tag: str, to_blocked: bool, n: int, c: int, h: int, w: int) -> CKernel:
    """A reorder, one (n, block, row) item at a time."""
    cb, items = blocks(c), n * blocks(c) * h
    chunks, per = share(items, LANES * w)
    sizes = dict(c=c, cb=cb, h=h, w=w, per=per, items=items)
    body = render("blocked_reorder.c.j2", to_blocked=to_blocked, swaps=transpose16_swaps(), **sizes)
    blocked, nchw = n * cb * h * w * LANES, n * c * h * w
    return make_kernel(tag, body, [blocked, nchw] if to_blocked else [nchw, blocked], chunks, rows_first=True)


def to_blocked(n: int, c: int, h: int, w: int) -> CKernel:
    """NCHW -> blocked (buffers: out blocked, in NCHW); padding channels 0. One work item per (n, block, row)."""
    return _reorder("to_blocked", True, n, c, h, w)


def from_blocked(n: int, c: int, h: int, w: int) -> CKernel:
    """Blocked -> NCHW (buffers: out NCHW, in blocked): the real channels only. One work item per (n, block, row)."""
    return _reorder("from_blocked", False, n, c, h, w)
