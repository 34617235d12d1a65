"""The run-time check of an input pinned at build (``build --pin``): the fed tensor equals the pinned value."""

from __future__ import annotations

from ...dtypes import dtype as dtype_of
from ...planfile.status import SLOT_WORDS
from .ckernel import CKernel, make_kernel, render
from .copy import MOVE_TYPES


def pin_check(count: int, dtype: str) -> CKernel:
    """``[status slot, fed, pinned]``: the first of ``count`` elements where the fed tensor's bits differ from the
    pinned ones is reported in the slot (planfile/status.py, kind "pinned"). Bits, not values: a pinned NaN
    matches itself, and every dtype of one size shares one kernel."""
    body = render("pin_check.c.j2", T=MOVE_TYPES[dtype_of(dtype).itemsize], n=int(count))
    return make_kernel("pin_check", body, [SLOT_WORDS, count, count], 1)
