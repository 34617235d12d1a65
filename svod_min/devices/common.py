"""Host-side buffer helpers shared by the devices: numpy detection, index and shape checks,
the memoryview/numpy format rule, nesting flat lists by shape."""

from __future__ import annotations

import struct
import sys
from typing import Any, List, Optional, Sequence, Tuple

from ..dtypes import DType
from ..error import BufferAllocationError

Shape = Tuple[int, ...]

_np_module: Any = None
_np_checked = False


def numpy_module() -> Any:
    """The numpy module, or None when it is not installed (imported once, lazily)."""
    global _np_module, _np_checked
    if not _np_checked:
        try:
            import numpy

            _np_module = numpy
        except ImportError:
            _np_module = None
        _np_checked = True
    return _np_module


def loaded_numpy() -> Any:
    """numpy if something already imported it, else None: an ndarray argument implies it is imported,
    and importing numpy (~0.1-0.3 s) just to learn that bytes are not an ndarray would slow every start."""
    return sys.modules.get("numpy")


def numpy_bytes(np: Any, arr: Any, dt: DType) -> Any:
    if arr.dtype.itemsize != dt.itemsize:
        raise BufferAllocationError(
            "array dtype %s (%d bytes/element) does not match buffer dtype %s (%d bytes/element)"
            % (arr.dtype, arr.dtype.itemsize, dt.name, dt.itemsize)
        )
    if not numpy_dtype_fits(arr.dtype, dt):  # same size is not the same numbers: float32 bits are not int32s
        raise BufferAllocationError(
            "array dtype %s%s does not match buffer dtype %s (convert first, e.g. arr.astype(...))"
            % (arr.dtype, "" if arr.dtype.isnative else " (not native byte order)", dt.name)
        )
    arr = np.ascontiguousarray(arr)
    return memoryview(arr.reshape(-1).view(np.uint8))


def numpy_dtype_fits(have: Any, dt: DType) -> bool:
    """The array's elements are the buffer's: :func:`format_fits` on its type code, in native order."""
    return not have.hasobject and (have.isnative or have.itemsize == 1) and format_fits(have.char, dt)


_RAW_FORMATS = ("B", "b", "c")  # bytes-like: copied as raw bytes into any buffer
_FORMAT_KINDS = dict(
    [(c, "int") for c in "bhilqn"] + [(c, "uint") for c in "BHILQN"] + [(c, "float") for c in "efd"] + [("?", "bool")]
)
_NATIVE_ORDER = "<" if sys.byteorder == "little" else ">"


def format_fits(fmt: str, dt: DType) -> bool:
    """A memoryview's struct format holds ``dt``'s numbers: same kind and size in native order
    (``l`` is ``q`` on LP64), raw bytes, uint16 bits for bfloat16, anything 1-byte for 1-byte types."""
    code = fmt[1:] if fmt[:1] in ("@", "=", _NATIVE_ORDER) else fmt
    if code in _RAW_FORMATS:
        return True
    if code not in _FORMAT_KINDS:
        return False  # another byte order, structs, arrays of arrays, pointers
    size = struct.calcsize(code)
    if dt.itemsize == 1 or (dt.name == "bfloat16" and code == "H"):
        return size == dt.itemsize
    return _FORMAT_KINDS[code] == _FORMAT_KINDS.get(dt.fmt) and size == dt.itemsize


def check_index(value: Any, what: str) -> int:
    try:
        number = value.__index__()
    except AttributeError:
        raise BufferAllocationError("%s must be an integer, got %r" % (what, value)) from None
    if number < 0:
        raise BufferAllocationError("%s must be >= 0, got %d" % (what, number))
    return number


def shape_for(nbytes: int, dt: DType, shape: Optional[Sequence[int]]) -> Shape:
    if nbytes % dt.itemsize:
        raise BufferAllocationError("%d bytes is not a whole number of %s elements" % (nbytes, dt.name))
    if shape is None:
        return (nbytes // dt.itemsize,)
    dims = tuple(check_index(d, "shape dimension") for d in shape)
    if product(dims) * dt.itemsize != nbytes:
        raise BufferAllocationError("shape %s of %s does not span %d bytes" % (list(dims), dt.name, nbytes))
    return dims


def dims_of(shape: Any) -> Shape:
    """A shape as a tuple of ints >= 0 (a hand-built buffer could claim [-1, -1] for 4 bytes)."""
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise BufferAllocationError("buffer shape must be a sequence of ints, got %r" % (shape,))
    return tuple(check_index(d, "buffer dimension") for d in shape)


def product(dims: Sequence[int]) -> int:
    total = 1
    for d in dims:
        total *= d
    return total


def nest(flat: List[Any], shape: Shape) -> Any:
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [nest(flat[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
