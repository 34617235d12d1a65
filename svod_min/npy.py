"""Read and write ``.npy`` files without numpy (little-endian, C order, plain dtypes).

Plan files may reference ``.npy`` data; a vendored svod_min must read it even
where numpy is not installed.
"""

from __future__ import annotations

import io
import os
import re
import struct
from typing import Any, BinaryIO, Dict, Optional, Tuple

from .dtypes import DType
from .dtypes import dtype as to_dtype
from .error import PlanError

_MAGIC = b"\x93NUMPY"
_DESCR = {
    "<f4": "float32",
    "<f8": "float64",
    "<f2": "float16",
    "<i4": "int32",
    "<i8": "int64",
    "<i2": "int16",
    "|i1": "int8",
    "|u1": "uint8",
    "<u2": "uint16",
    "<u4": "uint32",
    "<u8": "uint64",
    "|b1": "bool",
    # numpy has no bfloat16: ml_dtypes' bfloat16 arrays are saved by np.save as 2-byte void
    "<V2": "bfloat16",
    "|V2": "bfloat16",
}
_NAME_TO_DESCR = {v: k for k, v in _DESCR.items()}
#: numpy's own descr of each dtype that has one; bfloat16's bits are written as uint16 (np.load reads them)
_NAME_TO_DESCR["bfloat16"] = "<u2"


def holds(file_dtype: DType, want: DType) -> bool:
    """``.npy`` data of ``file_dtype`` fills a buffer of ``want``: the same dtype, or uint16 bits for bfloat16
    (how write_npy and numpy users store bfloat16; ``<V2``, ml_dtypes' np.save, reads as bfloat16 itself)."""
    return file_dtype.name == want.name or (want.name == "bfloat16" and file_dtype.name == "uint16")


_MAX_HEADER = 1 << 16  # numpy's own headers are a few hundred bytes
#: The header as numpy writes it (``{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`` and
#: padding): read by this pattern, any other spelling by ``ast.literal_eval``. A model's hundred weights
#: would otherwise cost ~5 ms of literal_eval and the ast import.
_NUMPY_HEADER = re.compile(
    r"\{'descr': '([<|>=][a-zV][0-9]+)', 'fortran_order': (False|True), "
    r"'shape': \(((?:[0-9]+, )*[0-9]+,?)?\), \}[ ]*\n?\Z"
)


def read_npy(path: str) -> Tuple[DType, Tuple[int, ...], bytes]:
    """(dtype, shape, raw little-endian bytes) of an ``.npy`` file.

    The header is read and checked first; the payload is read only when the
    file holds exactly the bytes the header announces.
    """
    try:
        with open(path, "rb") as fh:
            header, start = _read_header(fh, path)
            dt, shape, count = _parse_header(header, path)
            found = os.fstat(fh.fileno()).st_size - start
            if found != count * dt.itemsize:
                raise PlanError("%s: expected %d bytes of data, found %d" % (path, count * dt.itemsize, found))
            payload = fh.read(found)
    except OSError as exc:
        raise PlanError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    if len(payload) != count * dt.itemsize:  # the file shrank under us
        raise PlanError("%s: expected %d bytes of data, found %d" % (path, count * dt.itemsize, len(payload)))
    return dt, shape, payload


def parse_npy(data: bytes, what: str) -> Tuple[DType, Tuple[int, ...], memoryview]:
    """(dtype, shape, payload) of ``.npy`` bytes already in memory (a bundle entry); ``what`` names them.

    The payload is a view into ``data``, not a copy: a model's weights are then held once while they are
    copied into their buffers, not twice."""
    header, start = _read_header(io.BytesIO(data), what)
    dt, shape, count = _parse_header(header, what)
    found = len(data) - start
    if found != count * dt.itemsize:
        raise PlanError("%s: expected %d bytes of data, found %d" % (what, count * dt.itemsize, found))
    return dt, shape, memoryview(data)[start:]


def parse_npy_header(data: bytes, what: str) -> Tuple[DType, Tuple[int, ...], int, int]:
    """(dtype, shape, element count, payload offset) from the first bytes of an ``.npy`` file (``what``
    names it); PlanError when they do not hold a whole, valid header."""
    header, start = _read_header(io.BytesIO(data), what)
    dt, shape, count = _parse_header(header, what)
    return dt, shape, count, start


def _read_header(fh: BinaryIO, path: str) -> Tuple[str, int]:
    """The header text and the payload's offset."""
    lead = fh.read(12)
    if not lead.startswith(_MAGIC) or len(lead) < 10:
        raise PlanError("%s is not an .npy file" % path)
    major = lead[6]
    if major == 1:
        (hlen,), start = struct.unpack_from("<H", lead, 8), 10
    elif major in (2, 3):
        (hlen,), start = struct.unpack_from("<I", lead, 8), 12
    else:
        raise PlanError("%s: unsupported .npy version %d" % (path, major))
    if hlen > _MAX_HEADER:
        raise PlanError("%s: .npy header of %d bytes is over the %d-byte limit" % (path, hlen, _MAX_HEADER))
    fh.seek(start)
    raw = fh.read(hlen)
    if len(raw) != hlen:
        raise PlanError("%s: truncated .npy header" % path)
    return raw.decode("latin1"), start + hlen


def _parse_header(text: str, path: str) -> Tuple[DType, Tuple[int, ...], int]:
    header = _numpy_spelling(text)
    return _checked_header(_literal(text, path) if header is None else header, path)


def _numpy_spelling(text: str) -> Optional[Dict[str, Any]]:
    """The header's dict when it is spelled as numpy writes it (what ``literal_eval`` would return), else None."""
    m = _NUMPY_HEADER.match(text)
    if m is None:
        return None
    shape = tuple(int(d) for d in m.group(3).split(",") if d.strip()) if m.group(3) else ()
    return {"descr": m.group(1), "fortran_order": m.group(2) == "True", "shape": shape}


def _literal(text: str, path: str) -> Any:
    import ast  # here: numpy's own spelling never needs it

    try:
        return ast.literal_eval(text)
    except Exception as exc:  # literal_eval raises ValueError, TypeError, MemoryError, RecursionError ...
        why = "%s: %s" % (type(exc).__name__, exc) if str(exc) else type(exc).__name__
        raise PlanError("%s: malformed .npy header (%s)" % (path, why)) from None


def _checked_header(header: Any, path: str) -> Tuple[DType, Tuple[int, ...], int]:
    if not isinstance(header, dict):
        raise PlanError("%s: malformed .npy header (not a dict)" % path)
    if header.get("fortran_order"):
        raise PlanError("%s: only C-order .npy arrays are supported" % path)
    descr = header.get("descr")
    if not isinstance(descr, str) or descr not in _DESCR:
        raise PlanError("%s: unsupported .npy dtype %r" % (path, descr))
    shape = header.get("shape", ())
    if not isinstance(shape, tuple) or not all(type(d) is int and d >= 0 for d in shape):
        raise PlanError("%s: malformed .npy shape %r" % (path, shape))
    count = 1
    for d in shape:
        count *= d
    return to_dtype(_DESCR[descr]), shape, count


def write_npy(path: str, dt: DType, shape: Tuple[int, ...], payload: Any) -> None:
    """Write raw little-endian ``payload`` as an ``.npy`` file.

    numpy has no bfloat16: its bits are written as ``<u2`` (``uint16``), the
    form the kernel library accepts for bfloat16 buffers.
    """
    descr = _NAME_TO_DESCR.get(dt.name)
    if descr is None:
        raise PlanError("cannot save dtype %s as .npy" % dt.name)
    shape_txt = "(%s)" % "".join("%d, " % d for d in shape) if len(shape) != 1 else "(%d,)" % shape[0]
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape_txt)
    pad = 64 - (10 + len(header) + 1) % 64
    header_bytes = (header + " " * pad + "\n").encode("latin1")
    with open(path, "wb") as fh:
        fh.write(_MAGIC + b"\x01\x00" + struct.pack("<H", len(header_bytes)) + header_bytes)
        fh.write(payload)  # on its own: joined to the header it would be copied whole once more
