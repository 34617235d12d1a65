"""TopK along one axis, rendered from ``templates/topk.c.j2``."""

from __future__ import annotations

from .arith import DTYPES
from .ckernel import CKernel, make_kernel, render, share


def topk(outer: int, red: int, inner: int, k: int, largest: bool, dtype: str = "float32") -> CKernel:
    """The k largest (or smallest) of each (outer, ., inner) line of ``red`` elements, best first, as values and
    int64 indices: NaN ranks above every number and the lower index comes first among equals (onnxruntime's order).
    Buffers: values, indices, data; ``0 < k <= red``."""
    items = outer * inner
    chunks, per = share(items, red)
    body = render(
        "topk.c.j2",
        largest=largest,
        floating=dtype in ("float32", "float64"),
        T=DTYPES[dtype].c,
        per=per,
        items=items,
        red=red,
        inner=inner,
        k=k,
    )
    return make_kernel("topk", body, [outer * k * inner, outer * k * inner, outer * red * inner], chunks)
