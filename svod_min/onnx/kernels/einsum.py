"""Einsum's kernel (:mod:`..ops.einsum` parses the equation): one loop per label, rendered from
``templates/einsum.c.j2``."""

from __future__ import annotations

import math
from typing import List, Sequence

from .arith import DTYPES
from .ckernel import CKernel, make_kernel, render, share


def einsum_kernel(
    out_dims: Sequence[int], summed_dims: Sequence[int], strides: List[List[int]], extents: Sequence[int], dtype: str
) -> CKernel:
    """out[o] = sum over the summed coordinates s of the product of every operand at its offset, the dot of (o, s)
    with its ``strides`` (one list per operand: the output's labels, then the summed ones). Floats sum in double,
    integers in their unsigned type of at least int's width (wrapping, as ONNX's integer arithmetic does)."""
    d = DTYPES[dtype]
    items = int(math.prod(out_dims))
    work = int(math.prod(summed_dims)) * len(strides)
    chunks, per = share(items, work)
    n_out = len(out_dims)
    body = render(
        "einsum.c.j2",
        T=d.c,
        ACC="double" if d.kind == "f" else d.wrap,
        per=per,
        items=items,
        # the output's coordinates, innermost first: (size, each operand's stride)
        out_dims=[(int(n), [int(s[k]) for s in strides]) for k, n in reversed(list(enumerate(out_dims)))],
        summed=[(int(n), [int(s[n_out + k]) for s in strides]) for k, n in enumerate(summed_dims)],
        operands=len(strides),
    )
    flops = items * work
    return make_kernel("einsum", body, [items] + [int(e) for e in extents], chunks, flops=flops)
