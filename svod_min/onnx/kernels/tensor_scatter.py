"""TensorScatter's kernel (``templates/tensor_scatter.c.j2``): rows moved as bits, any dtype; the write indices from
data checked against the cache and reported through the status buffer."""

from __future__ import annotations

from ...planfile.status import SLOT_WORDS
from .ckernel import CKernel, make_kernel, render, share
from .copy import move_type

#: The largest write index circular mode takes (any non-negative int64: it is taken modulo the cache's length).
CIRCULAR_HI = (1 << 63) - 1


def tensor_scatter(
    prefix: int, batch: int, cache: int, seq: int, inner: int, circular: bool, indexed: bool, dtype: str
) -> CKernel:
    """``out`` = past (prefix, cache, inner) with update (prefix, seq, inner) written along the cache axis at each
    batch element's write index (``batch`` of them, the outermost axis of prefix; 0 for all without ``indexed``).
    Buffers: out, past, update[, write_indices (int64), status]."""
    rows = prefix * cache
    chunks, per = share(rows, inner)
    hi = CIRCULAR_HI if circular else cache - seq
    body = render(
        "tensor_scatter.c.j2",
        T=move_type(dtype),
        per=per,
        rows=rows,
        cache=cache,
        seq=seq,
        inner=inner,
        per_batch=prefix // batch,
        circular=circular,
        indexed=indexed,
        hi=hi,
        words=SLOT_WORDS,
    )
    extents = [rows * inner, rows * inner, prefix * seq * inner]
    if indexed:
        extents += [batch, chunks * SLOT_WORDS]
    return make_kernel("tensor_scatter", body, extents, chunks)
