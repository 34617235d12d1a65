"""Kernels on the last two axes as matrices: Trilu's triangle (any dtype, moved as bits) and Det's LU
factorisation; their C is ``templates/trilu.c.j2`` and ``templates/det.c.j2``."""

from __future__ import annotations

from typing import Optional

from .ckernel import CKernel, make_kernel, render, share
from .copy import move_type

#: The element types Det takes.
C_TYPES_DET = {"float32": "float", "float64": "double"}


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


def det(items: int, m: int, dtype: str = "float32") -> CKernel:
    """The determinant of each of ``items`` ``m x m`` matrices (LU with partial pivoting, in double). Buffers: out,
    x, and a double work buffer of ``items * m * m`` elements (written: each matrix's factorisation)."""
    chunks, per = share(items, m * m * m)
    body = render("det.c.j2", T=C_TYPES_DET[dtype], per=per, items=items, m=m)
    return make_kernel("det", body, [items, items * m * m, items * m * m], chunks, flops=items * 2 * m**3 // 3)
