"""Read and write ``.npy`` files without numpy (little-endian, C order, plain dtypes).

Plan files may reference ``.npy`` data; a vendored svod_min must read it even
where numpy is not installed.
"""

from __future__ import annotations

import ast
import struct
from typing import Tuple

from .dtypes import DType, dtype as to_dtype
from .error import PlanError

_MAGIC = b"\x93NUMPY"
_DESCR = {
    "<f4": "float32", "<f8": "float64", "<f2": "float16", "<i4": "int32", "<i8": "int64", "<i2": "int16",
    "|i1": "int8", "|u1": "uint8", "<u2": "uint16", "<u4": "uint32", "<u8": "uint64", "|b1": "bool",
}
_NAME_TO_DESCR = {v: k for k, v in _DESCR.items()}


def read_npy(path: str) -> Tuple[DType, Tuple[int, ...], bytes]:
    """(dtype, shape, raw little-endian bytes) of an ``.npy`` file."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise PlanError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    if not data.startswith(_MAGIC) or len(data) < 10:
        raise PlanError("%s is not an .npy file" % path)
    major = data[6]
    if major == 1:
        (hlen,), start = struct.unpack_from("<H", data, 8), 10
    elif major in (2, 3):
        (hlen,), start = struct.unpack_from("<I", data, 8), 12
    else:
        raise PlanError("%s: unsupported .npy version %d" % (path, major))
    try:
        header = ast.literal_eval(data[start : start + hlen].decode("latin1"))
    except (ValueError, SyntaxError) as exc:
        raise PlanError("%s: malformed .npy header (%s)" % (path, exc)) from None
    if not isinstance(header, dict) or header.get("fortran_order"):
        raise PlanError("%s: only C-order .npy arrays are supported" % path)
    descr = header.get("descr")
    if not isinstance(descr, str) or descr not in _DESCR:
        raise PlanError("%s: unsupported .npy dtype %r" % (path, descr))
    shape = header.get("shape", ())
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise PlanError("%s: malformed .npy shape %r" % (path, shape))
    dt = to_dtype(_DESCR[descr])
    count = 1
    for d in shape:
        count *= d
    payload = data[start + hlen :]
    if len(payload) != count * dt.itemsize:
        raise PlanError("%s: expected %d bytes of data, found %d" % (path, count * dt.itemsize, len(payload)))
    return dt, shape, payload


def write_npy(path: str, dt: DType, shape: Tuple[int, ...], payload: bytes) -> None:
    """Write raw little-endian ``payload`` as an ``.npy`` file."""
    descr = _NAME_TO_DESCR.get(dt.name)
    if descr is None:
        raise PlanError("cannot save dtype %s as .npy" % dt.name)
    shape_txt = "(%s)" % "".join("%d, " % d for d in shape) if len(shape) != 1 else "(%d,)" % shape[0]
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    pad = 64 - (10 + len(header) + 1) % 64
    header_bytes = (header + " " * pad + "\n").encode("latin1")
    with open(path, "wb") as fh:
        fh.write(_MAGIC + b"\x01\x00" + struct.pack("<H", len(header_bytes)) + header_bytes + payload)
