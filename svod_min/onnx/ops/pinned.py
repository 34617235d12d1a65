"""The checks of inputs pinned at build (``build --pin``, :mod:`..frontend.pins`): each run compares the fed value
with the pinned one before any output is returned (planfile/status.py, kind "pinned")."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from ..frontend.pins import pin_text
from ..kernels.pinned import pin_check
from .lowering import Lowering


def check_pins(L: Lowering, pinned: Mapping[str, np.ndarray]) -> None:
    """One checking kernel per pinned input, and the pin as the input's example value (the bundle's own run and
    the expectations recorded from onnxruntime feed it)."""
    for name, data in pinned.items():
        L.examples[name] = data
        if data.size == 0:
            continue  # an empty input holds nothing to compare
        v = L.value(name)
        const = L.const(data, name + "~check")
        kernel = pin_check(data.size, v.dtype)
        status = L.status_slots("input %r" % name, name, v.shape, pin_text(name, data), 1, "pinned", v.dtype)
        L.source(kernel, [status, name, const], outputs=(0,))
