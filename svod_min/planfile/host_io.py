"""A model call's copies in and out of host buffers, made as numpy assignments through views built once.

``Model.run`` on a tiny model is mostly its own bookkeeping: per input a contiguous copy, a memoryview cast,
the name/dtype/shape checks of :meth:`LoadedPlan.set_input` formatted from the buffer, the mmap slice
assignment; per output a fresh ``np.empty`` filled through two memoryviews. For host buffers whose dtype numpy
has, :class:`HostIO` holds a numpy view of each input and output buffer (made on the first call, sharing the
buffer's mapping: no memory of its own), so that an input of exactly the buffer's dtype and shape is one
assignment into the view (strided inputs included: numpy gathers them as ``ascontiguousarray`` would) and an
output is one ``copy()`` of its view. Anything else (another dtype, shape or type, a device buffer, a name
the plan lacks) goes the general way, which converts nothing and refuses what it refused before. Outputs are
always new arrays: a returned array is never overwritten by a later call.

numpy has no bfloat16: a bfloat16 buffer's view is its uint16 bits, so a bfloat16 input takes uint16 arrays
(or ml_dtypes' bfloat16 arrays, viewed as their bits) and a bfloat16 output comes back as uint16 bits, as
``run --save`` writes it. A bool buffer holds bytes 0 and 1 only: a fed byte other than 0 is stored as 1 (numpy
reads any nonzero byte as true; a C kernel testing ``x == 1`` or computing ``a & b`` would not agree on a 2).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Tuple

from ..dtypes import bool_bytes
from ..error import PlanError

#: (numpy view of the buffer, its numpy dtype, its shape)
Slot = Tuple[Any, Any, Tuple[int, ...]]


def host_dtype_name(dtype_name: str) -> str:
    """The numpy dtype name of a host array holding a buffer of ``dtype_name`` (bfloat16: its uint16 bits)."""
    return "uint16" if dtype_name == "bfloat16" else dtype_name


def checked_feed(
    name: str, want: Tuple[str, Tuple[int, ...]], dtype_name: str, shape: Tuple[int, ...], payload: Any
) -> Any:
    """The bytes to copy into input ``name`` whose buffer is ``want`` (dtype name, shape) from a feed of
    ``dtype_name`` and ``shape``; PlanError naming the input, the feed and the buffer when they differ."""
    want_dtype, want_shape = want
    if dtype_name not in (want_dtype, host_dtype_name(want_dtype)) or tuple(shape) != want_shape:
        hint = " (fed as its uint16 bits or an ml_dtypes bfloat16 array)" if want_dtype == "bfloat16" else ""
        raise PlanError(
            "input %r: got %s %s, the plan's input is %s %s%s"
            % (name, dtype_name, list(shape), want_dtype, list(want_shape), hint)
        )
    if want_dtype == "bool":
        return bool_bytes(payload)
    return payload


def _slot(buf: Any) -> Optional[Slot]:
    """The buffer's view, or None where it is not host memory or numpy has no dtype for it."""
    if not getattr(buf, "on_host", False):
        return None
    if buf.nbytes == 0:  # numpy() gives a detached zeros array for an empty buffer: nothing to share
        return None
    name = getattr(buf.dtype, "name", None)
    if name == "bfloat16":  # its bits
        buf = buf.view(0, buf.nbytes, dtype="uint16", shape=tuple(buf.shape))
    elif getattr(buf.dtype, "numpy_name", None) is None:
        return None
    view = buf.numpy()
    return view, view.dtype, tuple(view.shape)


class HostIO:
    """The inputs' and outputs' views of one loaded plan (see the module docstring)."""

    def __init__(self, loaded: Any) -> None:
        import numpy as np

        self.ndarray = np.ndarray
        self.not_equal, self.uint8 = np.not_equal, np.uint8
        self.inputs: Dict[str, Slot] = {}
        for name in loaded.inputs:
            slot = _slot(loaded.buffers[name])
            if slot is not None:
                self.inputs[name] = slot
        self.outputs: Dict[str, Optional[Slot]] = {name: _slot(loaded.buffers[name]) for name in loaded.outputs}

    def copy_in(self, name: str, value: Any) -> bool:
        """Write ``value`` into input ``name``'s buffer when it is an ndarray of the buffer's dtype and shape;
        False (nothing written) otherwise: the caller takes the general path."""
        slot = self.inputs.get(name)
        if slot is None or type(value) is not self.ndarray:
            return False
        view, dtype, shape = slot
        if value.dtype != dtype or value.shape != shape:
            return False
        if dtype.kind == "b":  # stored as 0/1 whatever bytes the feed holds
            self.not_equal(value.view(self.uint8), 0, out=view)
        else:
            view[...] = value
        return True

    def copy_in_prefix(self, name: str, value: Any) -> bool:
        """Write ``value`` at the start of input ``name``'s buffer, C order (a ranged input fed at a bound shape,
        docs/plan-format.md "Ranged dims") when it is an ndarray of the buffer's dtype and rank that fits; False
        (nothing written) otherwise. The caller has checked the shape against the dims."""
        slot = self.inputs.get(name)
        if slot is None or type(value) is not self.ndarray:
            return False
        view, dtype, shape = slot
        if value.dtype != dtype or value.ndim != len(shape) or value.size > view.size:
            return False
        self._assign(view.reshape(-1)[: value.size].reshape(value.shape), value)
        return True

    def _assign(self, dst: Any, value: Any) -> None:
        if dst.dtype.kind == "b":  # stored as 0/1 whatever bytes the feed holds
            self.not_equal(value.view(self.uint8), 0, out=dst)
        else:
            dst[...] = value

    def copy_out_prefix(self, name: str, shape: Tuple[int, ...]) -> Optional[Any]:
        """A new array of ``shape`` from the start of output ``name``'s buffer (its bound shape); None where the
        buffer has no view."""
        slot = self.outputs[name]
        if slot is None:
            return None
        return slot[0].reshape(-1)[: math.prod(shape)].reshape(shape).copy()

    def copy_out(self, name: str) -> Optional[Any]:
        """A new array holding output ``name``'s contents; None where the buffer has no view."""
        slot = self.outputs[name]
        return None if slot is None else slot[0].copy()


__all__ = ["HostIO", "checked_feed", "host_dtype_name"]
