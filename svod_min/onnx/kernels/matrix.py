"""Kernels on the last two axes as matrices: Trilu's triangle (any dtype, moved as bits) and Det's LU
factorisation; their C is ``templates/trilu.c.j2`` and ``templates/det.c.j2``."""

from __future__ import annotations

from typing import Optional

from .ckernel import CKernel, make_kernel, render, share
from .copy import move_type


def trilu(batch: int, rows: int, cols: int, upper: bool, k: Optional[int], dtype: str) -> CKernel:
    """``out = triu(x, k)`` or ``tril(x, k)`` of each of ``batch`` matrices ``rows x cols``; ``k`` None: read from
    the kernel's third buffer (one int64) at run time."""
    total = batch * rows
    chunks, per = share(total, cols)
    if k is not None:  # beyond the matrix every k keeps all or nothing: a small literal says the same
        k = max(-rows - 1, min(cols + 1, int(k)))
    body = render("trilu.c.j2", T=move_type(dtype), per=per, total=total, rows=rows, cols=cols, upper=upper, k=k)
    extents = [total * cols, total * cols] + ([] if k is not None else [1])
    return make_kernel("trilu", body, extents, chunks)
