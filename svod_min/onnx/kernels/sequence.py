"""ReverseSequence's kernel (``templates/reverse_sequence.c.j2``): rows moved as bits, any dtype; the lengths from
data checked against the time axis and reported through the status buffer."""

from __future__ import annotations

from ...planfile.status import SLOT_WORDS
from .ckernel import CKernel, make_kernel, render, share
from .copy import move_type


def reverse_sequence(steps: int, batch: int, inner: int, time_major: bool, dtype: str) -> CKernel:
    """``out`` = x with each batch element's first ``lens[b]`` of ``steps`` time steps reversed; x is
    (steps, batch, inner) when ``time_major``, else (batch, steps, inner). Buffers: out, x, lens (int64), status."""
    rows = steps * batch
    chunks, per = share(rows, inner)
    body = render(
        "reverse_sequence.c.j2",
        T=move_type(dtype),
        per=per,
        rows=rows,
        steps=steps,
        batch=batch,
        inner=inner,
        time_major=time_major,
        words=SLOT_WORDS,
    )
    return make_kernel("revseq", body, [rows * inner, rows * inner, batch, chunks * SLOT_WORDS], chunks)
