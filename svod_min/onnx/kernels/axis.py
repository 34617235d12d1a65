"""Kernels along one axis of x viewed as (outer, n, inner), one (outer, inner) line per item: CumSum (a running sum,
exclusive and/or reversed; its axis compiled in or fed at run time and checked), Hardmax (1 at the first largest
element, 0 elsewhere) and LpNormalization (x over its L1 or L2 norm), rendered from ``templates/cumsum.c.j2``,
``hardmax.c.j2`` and ``lp_norm.c.j2``."""

from __future__ import annotations

import math
from typing import Sequence, Tuple

from ...planfile.status import SLOT_WORDS
from .arith import DTYPES
from .ckernel import CKernel, chunks_for, make_kernel, render, share


def cumsum(outer: int, n: int, inner: int, exclusive: bool, reverse: bool, dtype: str) -> CKernel:
    """CumSum along the axis in the element type, in the axis' order (reversed with ``reverse``) as onnxruntime
    sums, so float sums round alike; integers wrap (through their unsigned type); ``exclusive`` leaves each element
    out of its own sum (the first one is 0)."""
    d = DTYPES[dtype]
    items = outer * inner
    chunks, per = share(items, n)
    body = render(
        "cumsum.c.j2",
        T=d.c,
        U=d.wrap if d.kind in "su" else "",
        per=per,
        items=items,
        n=n,
        inner=inner,
        exclusive=exclusive,
        reverse=reverse,
    )
    return make_kernel("cumsum", body, [outer * n * inner, outer * n * inner], chunks)


def cumsum_any_axis(shape: Sequence[int], exclusive: bool, reverse: bool, dtype: str, axis_type: str) -> CKernel:
    """CumSum whose axis is fed at run time (the kernel's third pointer, one ``axis_type`` value): each call reads it,
    checks it against ``[-rank, rank-1]`` through prelude's ``index_check`` (a bad one is reported in the status
    buffer, the fourth pointer, and nothing is written) and runs :func:`cumsum`'s loop with that axis' (outer, n,
    inner), taken from tables of every axis' sizes. The calls share the lines of whichever axis it is."""
    d = DTYPES[dtype]
    rank = len(shape)
    splits = [split_sizes(shape, a) for a in range(rank)]
    chunks = min(chunks_for(outer * inner, n) for outer, n, inner in splits)
    total = int(math.prod(shape))
    body = render(
        "cumsum.c.j2",
        T=d.c,
        U=d.wrap if d.kind in "su" else "",
        axis_type=axis_type,
        rank=rank,
        chunks=chunks,
        outers=[s[0] for s in splits],
        ns=[s[1] for s in splits],
        inners=[s[2] for s in splits],
        exclusive=exclusive,
        reverse=reverse,
        words=SLOT_WORDS,
    )
    return make_kernel("cumsum", body, [total, total, 1, chunks * SLOT_WORDS], chunks)


def split_sizes(shape: Sequence[int], axis: int) -> Tuple[int, int, int]:
    """(outer, n, inner): ``shape`` seen as the dims before ``axis``, ``axis`` itself and the dims after it."""
    if not shape:
        return 1, 1, 1
    return int(math.prod(shape[:axis])), int(shape[axis]), int(math.prod(shape[axis + 1 :]))


def hardmax(outer: int, n: int, inner: int, dtype: str) -> CKernel:
    """Hardmax: 1 at the first index of each line's largest element, 0 elsewhere; a NaN never wins, and a line that
    starts with one is all 0 (onnxruntime's rule: its running max stays NaN and no element equals it)."""
    d = DTYPES[dtype]
    items = outer * inner
    chunks, per = share(items, n)
    body = render("hardmax.c.j2", T=d.c, per=per, items=items, n=n, inner=inner)
    return make_kernel("hardmax", body, [outer * n * inner, outer * n * inner], chunks)


def lp_norm(outer: int, n: int, inner: int, p: int, dtype: str) -> CKernel:
    """LpNormalization: each line over its L1 (``p`` 1) or L2 (``p`` 2) norm, summed in double; a line of zeros
    gives zeros (onnxruntime's rule, where x / 0 would give NaN)."""
    d = DTYPES[dtype]
    items = outer * inner
    chunks, per = share(items, 2 * n)
    body = render("lp_norm.c.j2", T=d.c, p=p, per=per, items=items, n=n, inner=inner)
    return make_kernel("lpnorm", body, [outer * n * inner, outer * n * inner], chunks)
