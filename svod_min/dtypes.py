"""A tiny dtype table: element size, ctypes type, struct code and numpy name.

numpy is optional, so every dtype is described without it; ``numpy_name`` is
``None`` where numpy has no equivalent (bfloat16: storage only, handled as
raw ``uint16`` bits on the host).
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Union

from .error import BufferAllocationError


@dataclass(frozen=True)
class DType:
    """One element type. ``fmt`` is a native ``struct`` code of the storage."""

    name: str
    itemsize: int
    ctype: Any  # a ctypes simple type of the same size (storage view)
    fmt: str
    numpy_name: Optional[str]
    is_float: bool = False

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return "dtypes.%s" % self.name


float16 = DType("float16", 2, ctypes.c_uint16, "e", "float16", True)
# bfloat16: no numpy / struct / ctypes type, so it is kept as raw uint16 bits.
bfloat16 = DType("bfloat16", 2, ctypes.c_uint16, "H", None, True)
float32 = DType("float32", 4, ctypes.c_float, "f", "float32", True)
float64 = DType("float64", 8, ctypes.c_double, "d", "float64", True)
int8 = DType("int8", 1, ctypes.c_int8, "b", "int8")
int16 = DType("int16", 2, ctypes.c_int16, "h", "int16")
int32 = DType("int32", 4, ctypes.c_int32, "i", "int32")
int64 = DType("int64", 8, ctypes.c_int64, "q", "int64")
uint8 = DType("uint8", 1, ctypes.c_uint8, "B", "uint8")
uint16 = DType("uint16", 2, ctypes.c_uint16, "H", "uint16")
uint32 = DType("uint32", 4, ctypes.c_uint32, "I", "uint32")
uint64 = DType("uint64", 8, ctypes.c_uint64, "Q", "uint64")
bool_ = DType("bool", 1, ctypes.c_bool, "?", "bool")

ALL_DTYPES = (
    float16,
    bfloat16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
    uint16,
    uint32,
    uint64,
    bool_,
)

_BY_NAME: Dict[str, DType] = {d.name: d for d in ALL_DTYPES}
_ALIASES = {
    "half": "float16",
    "f16": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "float": "float32",
    "f32": "float32",
    "fp32": "float32",
    "double": "float64",
    "f64": "float64",
    "fp64": "float64",
    "i8": "int8",
    "char": "int8",
    "i16": "int16",
    "short": "int16",
    "int": "int32",
    "i32": "int32",
    "long": "int64",
    "i64": "int64",
    "u8": "uint8",
    "uchar": "uint8",
    "u16": "uint16",
    "ushort": "uint16",
    "u32": "uint32",
    "uint": "uint32",
    "u64": "uint64",
    "ulong": "uint64",
    "bool_": "bool",
}
_BY_NAME.update({alias: _BY_NAME[target] for alias, target in _ALIASES.items()})

DTypeLike = Union[str, DType, Any]  # Any: a numpy dtype / scalar type also works


def dtype(value: DTypeLike) -> DType:
    """Resolve a name, alias, :class:`DType` or numpy dtype to a :class:`DType`."""
    if isinstance(value, DType):
        return value
    # numpy dtypes and scalar types both expose a ``name`` via np.dtype(x);
    # avoid importing numpy: duck-type on the attribute instead.
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if name is None and _is_numpy_type(value):
        name = getattr(value, "__name__", None)
    found = _BY_NAME.get(name.strip().lower()) if isinstance(name, str) else None
    if found is None:
        raise BufferAllocationError("unknown dtype %r (known: %s)" % (value, ", ".join(d.name for d in ALL_DTYPES)))
    return found


def _is_numpy_type(value: Any) -> bool:
    # np.float32 (a type, not a dtype); Python's own float/int are refused on
    # purpose: "float" means float32 here but float64 to numpy.
    return isinstance(value, type) and value.__module__ == "numpy"


def bf16_bits_to_float(bits: int) -> float:
    """bfloat16 bit pattern -> Python float (bfloat16 is the top half of a float32)."""
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def float_to_bf16_bits(value: float) -> int:
    """Python float -> bfloat16 bits, rounding to nearest even (NaN stays NaN)."""
    (u,) = struct.unpack("<I", struct.pack("<f", value))
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return ((u >> 16) | 0x0040) & 0xFFFF  # quiet NaN, keep the sign
    u += 0x7FFF + ((u >> 16) & 1)
    return (u >> 16) & 0xFFFF


def unpack_values(dt: DType, data: Union[bytes, memoryview]) -> List[Any]:
    """Decode raw native-endian bytes into a flat list of Python scalars."""
    count = len(data) // dt.itemsize
    values = list(struct.unpack("=%d%s" % (count, dt.fmt), data))
    if dt is bfloat16:
        values = [bf16_bits_to_float(v) for v in values]
    return values


#: a bool byte as given -> as stored
_BOOL_BYTES = bytes([0] + [1] * 255)


def bool_bytes(data: Union[bytes, bytearray, memoryview]) -> bytes:
    """Bool data as stored: one byte, 0 or 1, per element. numpy reads any nonzero byte of a bool array as
    true, C kernels test a bool byte as 0 or 1 (``x == 1``, ``a & b``): a 2 or a 255 becomes 1."""
    return bytes(data).translate(_BOOL_BYTES)


def _refuse_text(values: Sequence[Any]) -> None:
    for v in values:
        if v is None or isinstance(v, (str, bytes, bytearray)):
            raise TypeError("%r is not a number" % (v,))


def pack_values(dt: DType, values: Sequence[Any]) -> bytes:
    """Encode Python scalars as native-endian bytes of ``dt``."""
    try:
        if dt is bfloat16 or dt is bool_:  # float() and "?" would take "1.5", b"0" or None without a word
            _refuse_text(values)
        if dt is bfloat16:
            values = [float_to_bf16_bits(float(v)) for v in values]
        return struct.pack("=%d%s" % (len(values), dt.fmt), *values)
    except (struct.error, OverflowError, TypeError, ValueError) as exc:
        raise BufferAllocationError("cannot pack values as %s: %s" % (dt.name, exc)) from exc


__all__ = [
    "ALL_DTYPES",
    "DType",
    "DTypeLike",
    "bf16_bits_to_float",
    "bfloat16",
    "bool_",
    "bool_bytes",
    "dtype",
    "float16",
    "float32",
    "float64",
    "float_to_bf16_bits",
    "int16",
    "int32",
    "int64",
    "int8",
    "pack_values",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
    "unpack_values",
]
