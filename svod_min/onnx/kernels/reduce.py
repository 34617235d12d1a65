"""Reductions along one axis the library lacks (min, prod, sum of squares, L1, L2, log-sum-exp) and ArgMax/ArgMin,
rendered from ``templates/reduce.c.j2``."""

from __future__ import annotations

from .arith import DTYPES
from .ckernel import CKernel, make_kernel, render, share

#: The reductions reduce_axis computes (the template's kinds); sum, mean and max for float64 (the library's: float32);
#: any and all: ReduceMax and ReduceMin of bool.
KINDS = ("min", "prod", "sumsquare", "l1", "l2", "logsum", "sum", "mean", "max", "any", "all")
#: Running results a min or max along a contiguous axis keeps side by side (one AVX-512 vector of float32).
MINMAX_LANES = 16


def reduce_axis(outer: int, red: int, inner: int, kind: str, dtype: str = "float32") -> CKernel:
    """Reductions the library lacks (min, prod, sum of squares, L1, L2, log-sum-exp) over (outer, red, inner)."""
    if kind not in KINDS:
        raise KeyError(kind)
    items = outer * inner
    chunks, per = share(items, red)
    body = render(
        "reduce.c.j2",
        kernel="reduce",
        kind=kind,
        T=DTYPES[dtype].c,
        per=per,
        items=items,
        red=red,
        inner=inner,
        LANES=MINMAX_LANES,
    )
    return make_kernel("reduce", body, [items, outer * red * inner], chunks, rows_first=True)


def arg_reduce(outer: int, red: int, inner: int, largest: bool, last: bool, dtype: str = "float32") -> CKernel:
    """ArgMax/ArgMin over (outer, red, inner) as int64; ties go to the first index, or the last with ``last``."""
    items = outer * inner
    chunks, per = share(items, red)
    body = render(
        "reduce.c.j2",
        kernel="arg",
        largest=largest,
        last=last,
        T=DTYPES[dtype].c,
        per=per,
        items=items,
        red=red,
        inner=inner,
    )
    return make_kernel("arg", body, [items, outer * red * inner], chunks, rows_first=True)
