"""MaxUnpool's kernel: x's elements scattered into a zeroed output at the flat positions of MaxPool's Indices,
rendered from ``templates/max_unpool.c.j2`` (indices from data checked there: docs/onnx.md, "Indices")."""

from __future__ import annotations

from ...planfile.status import SLOT_WORDS
from .ckernel import CKernel, make_kernel, render
from .copy import move_type


def max_unpool(total: int, count: int, dtype: str, checked: bool) -> CKernel:
    """out (``total`` elements) zeroed, then out[idx[e]] = x[e] for the ``count`` elements of x in order; one call
    (the order decides which of two elements at one position stays). ``checked``: idx comes from data, so the kernel
    takes the status buffer last and skips (and reports) an index outside [0, total-1]."""
    body = render("max_unpool.c.j2", T=move_type(dtype), total=int(total), count=int(count), checked=checked)
    extents = [total, count, count] + ([SLOT_WORDS] if checked else [])
    return make_kernel("max_unpool", body, extents, 1)
