"""The elementwise kernel: ``out = expr(x0, x1, ...)`` with numpy broadcasting, any element types."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from ..geometry import broadcast_strides, collapse, contiguous_strides
from .arith import DT, Arith
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
    in_dtypes: Optional[Sequence[DT]] = None,
    out_dtype: Optional[DT] = None,
    arith: Optional[Arith] = None,
) -> CKernel:
    """``out = expr(x0, x1, ...)`` with numpy broadcasting; ``inplace``: x0 is ``out`` itself (one buffer fewer);
    ``out_type``: the C type stored (``unsigned char`` for a bool result). With ``in_dtypes``/``out_dtype``
    (:mod:`.arith`'s), each input loads as its dtype's compute type and the result stores as ``out_dtype``;
    ``arith`` brings the helpers and libm prototypes ``expr`` calls."""
    n = len(in_shapes)
    if in_dtypes is not None:
        in_types = [d.c for d in in_dtypes]
        load_types = [d.compute for d in in_dtypes]
        loads = [d.load for d in in_dtypes]
    else:
        load_types, loads = ["float"] * n, [("(float)", "")] * n
    store = ("", "")
    if out_dtype is not None:
        out_type, store = out_dtype.c, out_dtype.store
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
        load_types=load_types,
        load_wraps=loads,
        store=store,
        prototypes=arith.prototypes if arith else [],
        helpers=arith.helpers() if arith else "",
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
    return make_kernel(tag, body, extents, chunks, rows_first=True)
