"""Variables of the view kernels: ``reduce_*`` over one axis and ``permute`` of a strided view."""

from __future__ import annotations

import operator
from typing import Any, Dict, List, Sequence, Tuple

from ..error import KernelParamError


def _collapse(shape: Sequence[int], strides: Sequence[int], what: str) -> Tuple[int, int]:
    """One (size, stride) for consecutive dims, or KernelParamError when they do not form one stride."""
    size, stride = 1, 0
    for n, s in zip(reversed(list(shape)), reversed(list(strides))):
        if n == 1:
            continue
        if size == 1:
            size, stride = n, s
        elif s == stride * size:
            size *= n
        else:
            raise KernelParamError(
                "the %s dimensions %s (strides %s) do not collapse into one strided axis"
                % (what, list(shape), list(strides))
            )
    return size, stride


def reduce_vars(shape: Sequence[int], strides: Sequence[int], axis: int) -> Dict[str, int]:
    """Variables of ``reduce_*`` for reducing ``axis`` of a view (``strides`` in elements, not bytes)."""
    shape, strides = _ints(shape, "shape"), _ints(strides, "strides")
    nd = len(shape)
    axis = _ints([axis], "axis")[0]
    if len(strides) != nd or not -nd <= axis < nd:
        raise KernelParamError("bad view: shape %s, strides %s, axis %r" % (shape, strides, axis))
    axis %= nd
    outer, so = _collapse(shape[:axis], strides[:axis], "leading")
    inner, si = _collapse(shape[axis + 1 :], strides[axis + 1 :], "trailing")
    return {"outer": outer, "red": int(shape[axis]), "inner": inner, "so": so, "sr": int(strides[axis]), "si": si}


def permute_vars(shape: Sequence[int], strides: Sequence[int]) -> Dict[str, int]:
    """Variables of ``permute`` that copy a view (rank <= 4, element strides >= 0) into contiguous memory."""
    shape, strides = _ints(shape, "shape"), _ints(strides, "strides")
    if len(shape) > 4 or len(strides) != len(shape):
        raise KernelParamError(
            "permute copies views of rank <= 4 (got shape %s, strides %s)" % (list(shape), list(strides))
        )
    pad = 4 - len(shape)
    dims = [1] * pad + [int(d) for d in shape]
    steps = [0] * pad + [int(s) for s in strides]
    out = {"e%d" % i: d for i, d in enumerate(dims)}
    out.update({"t%d" % i: s for i, s in enumerate(steps)})
    return out


def _ints(values: Any, what: str) -> List[int]:
    """A view's shape or strides as plain ints (numpy integers welcome)."""
    try:
        out = [operator.index(v) for v in values]
    except TypeError:
        raise KernelParamError("%s must be a sequence of integers, got %r" % (what, values)) from None
    return out


__all__ = ["permute_vars", "reduce_vars"]
