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
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

#: (numpy view of the buffer, its numpy dtype, its shape)
Slot = Tuple[Any, Any, Tuple[int, ...]]


def _slot(buf: Any) -> Optional[Slot]:
    """The buffer's view, or None where it is not host memory or numpy has no dtype for it."""
    if not getattr(buf, "on_host", False) or getattr(buf.dtype, "numpy_name", None) is None:
        return None
    if buf.nbytes == 0:  # numpy() gives a detached zeros array for an empty buffer: nothing to share
        return None
    view = buf.numpy()
    return view, view.dtype, tuple(view.shape)


class HostIO:
    """The inputs' and outputs' views of one loaded plan (see the module docstring)."""

    def __init__(self, loaded: Any) -> None:
        import numpy as np

        self.ndarray = np.ndarray
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
        view[...] = value
        return True

    def copy_out(self, name: str) -> Optional[Any]:
        """A new array holding output ``name``'s contents; None where the buffer has no view."""
        slot = self.outputs[name]
        return None if slot is None else slot[0].copy()


__all__ = ["HostIO"]
