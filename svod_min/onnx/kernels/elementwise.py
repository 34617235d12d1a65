"""The elementwise kernel: ``out = expr(x0, x1, ...)`` with numpy broadcasting, any element types."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from ..geometry import broadcast_strides, collapse, contiguous_strides
from .ckernel import CKernel, make_kernel, render, share


def elementwise(
    out_shape: Sequence[int],
    in_shapes: Sequence[Sequence[int]],
    expr: str,
    *,
    inplace: bool = False,
    tag: str = "ew",
    in_types: Optional[Sequence[str]] = None,
    out_type: str = "float",
) -> CKernel:
    """``out = expr(x0, x1, ...)`` with numpy broadcasting; ``inplace``: x0 is ``out`` itself (one buffer fewer);
    ``out_type``: the C type stored (``unsigned char`` for a bool result)."""
    n_out = max(1, int(math.prod(out_shape)))
    arrays = [contiguous_strides(out_shape)] + [broadcast_strides(s, out_shape) for s in in_shapes]
    shape, strides = collapse(out_shape, arrays)
    last = int(shape[-1])
    block = min(last, 4096)
    nblocks = -(-last // block)
    outer = [int(n) for n in shape[:-1]]
    rows = int(math.prod(outer)) * nblocks
    chunks, per = share(rows, block)
    first = 1 if inplace else 0
    body = render(
        "elementwise.c.j2",
        out_type=out_type,
        in_types=list(in_types or ["float"] * len(in_shapes)),
        n_in=len(in_shapes),
        first=first,
        inplace=inplace,
        expr=expr,
        rows=rows,
        per=per,
        nblocks=nblocks,
        block=block,
        last=last,
        outer=outer,
        out_strides=[int(v) for v in strides[0][:-1]],
        in_strides=[[int(v) for v in s[:-1]] for s in strides[1:]],
        steps=[int(s[-1]) for s in strides[1:]],
    )
    extents = [n_out] + [max(1, int(math.prod(s))) for s in in_shapes[first:]]
    return make_kernel(tag, body, extents, chunks)
