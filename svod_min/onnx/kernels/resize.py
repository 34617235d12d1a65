"""Resize's kernels: per-axis taps (linear, cubic, nearest) from tables of source indices and weights, and a 2-D
nearest; their C is ``templates/resize.c.j2``.

Tables a kernel needs are compiled in as ``static const`` arrays: they are small (one entry per output position
of one axis) and known at build time."""

from __future__ import annotations

from typing import List, Optional, Sequence

from ..ctext import C_TYPES
from .ckernel import CKernel, make_kernel, render, share


def taps(
    outer: int,
    n_in: int,
    n_out: int,
    inner: int,
    index: Sequence[int],
    weight: Sequence[float],
    per_out: int,
    fill: Optional[Sequence[float]] = None,
    dtype: str = "float32",
) -> CKernel:
    """One axis of a separable resize: ``out[o, j, i] = fill[j] + sum_t weight[j, t] * x[o, index[j, t], i]`` with
    ``per_out`` taps per output position (1 for nearest, 2 for linear, 4 for cubic)."""
    if inner == 1:
        return taps_last_axis(outer, n_in, n_out, index, weight, per_out, fill, dtype)
    rows = outer * n_out
    chunks, per = share(rows, inner * per_out)
    body = render(
        "resize.c.j2",
        kernel="taps",
        T=C_TYPES[dtype],
        per=per,
        rows=rows,
        n_in=n_in,
        n_out=n_out,
        inner=inner,
        per_out=per_out,
        index=[int(v) for v in index],
        weight=[float(v) for v in weight],
        fill=_floats(fill),
    )
    return make_kernel("resize", body, [rows * inner, outer * n_in * inner], chunks, rows_first=True)


def taps_last_axis(
    outer: int,
    n_in: int,
    n_out: int,
    index: Sequence[int],
    weight: Sequence[float],
    per_out: int,
    fill: Optional[Sequence[float]] = None,
    dtype: str = "float32",
) -> CKernel:
    """:func:`taps` on the last axis: per row, a loop over output positions reading its taps from the row by
    table (a vector gather), rather than one output element per row of a one-element inner loop."""
    chunks, per = share(outer, n_out * per_out)
    # Tap t's indices and weights are contiguous tables of n_out entries, so a loop over positions loads vectors.
    tap_index = [[int(index[j * per_out + t]) for j in range(n_out)] for t in range(per_out)]
    tap_weight = [[float(weight[j * per_out + t]) for j in range(n_out)] for t in range(per_out)]
    body = render(
        "resize.c.j2",
        kernel="taps_last",
        T=C_TYPES[dtype],
        per=per,
        outer=outer,
        n_in=n_in,
        n_out=n_out,
        per_out=per_out,
        tap_index=tap_index,
        tap_weight=tap_weight,
        fill=_floats(fill),
    )
    return make_kernel("resize", body, [outer * n_out, outer * n_in], chunks, rows_first=True)


def nearest_2d(
    outer: int, h_in: int, w_in: int, rows_at: Sequence[int], cols_at: Sequence[int], dtype: str = "float32"
) -> CKernel:
    """Nearest Resize of the last two axes in one pass: ``out[o, y, x] = x[o, rows_at[y], cols_at[x]]``; an output
    row whose source row is the previous one's copies that output row (contiguous) instead of gathering again."""
    h_out, w_out = len(rows_at), len(cols_at)
    rows = outer * h_out
    chunks, per = share(rows, w_out)
    body = render(
        "resize.c.j2",
        kernel="nearest_2d",
        T=C_TYPES[dtype],
        per=per,
        rows=rows,
        h_in=h_in,
        w_in=w_in,
        h_out=h_out,
        w_out=w_out,
        rows_at=[int(v) for v in rows_at],
        cols_at=[int(v) for v in cols_at],
    )
    return make_kernel("resize", body, [rows * w_out, outer * h_in * w_in], chunks, rows_first=True)


def _floats(values: Optional[Sequence[float]]) -> Optional[List[float]]:
    """``values`` as Python floats (the template writes them as float32 literals), or None."""
    return None if values is None else [float(v) for v in values]
