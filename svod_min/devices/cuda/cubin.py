"""A CUBIN's kernel parameter sizes, for :meth:`CudaDevice.load_cubin`'s check (no pyelftools: a few struct reads).

ptxas records each kernel's parameters in the ELF section ``.nv.info.<entry>`` as
``EIATTR_KPARAM_INFO`` attributes: ordinal, offset and size, but not the type (a
``.f32`` and a ``.u32`` look the same), so a CUBIN gets the size half of
:func:`~.ptx.check_entry_params`. Anything unexpected (not a 64-bit
little-endian ELF, no such section, an attribute format not known here) gives
None: the check is skipped, never guessed.
"""

from __future__ import annotations

import struct
from typing import Dict, List, Optional

from ...error import PtxError

_EIATTR_KPARAM_INFO = 0x17
#: Attribute formats: EIFMT_NVAL (no value), EIFMT_HVAL (a 2-byte value), EIFMT_SVAL (a sized payload).
_NVAL, _HVAL, _SVAL = 1, 3, 4


def cubin_entry_params(image: bytes, entry: str) -> Optional[List[int]]:
    """Byte size of each parameter of ``entry``, in ordinal order; None when the CUBIN does not say."""
    try:
        info = _section(bytes(image), ".nv.info." + entry)
        return None if info is None else _kparam_sizes(info)
    except (struct.error, IndexError, ValueError):  # a truncated or corrupt image: the driver will judge it
        return None


def check_cubin_params(image: bytes, entry: str, buf_count: int, var_count: int) -> None:
    """Raise :class:`PtxError` when the CUBIN's parameter sizes for ``entry`` are not ``buf_count`` 8-byte
    pointers then ``var_count`` 4-byte int32 (nothing is checked where the CUBIN does not say)."""
    have = cubin_entry_params(image, entry)
    want = [8] * buf_count + [4] * var_count
    if have is not None and have != want:
        raise PtxError(
            "CUBIN kernel %s declares parameters of %s bytes; svod passes %d pointers then %d int32 "
            "(%s bytes)" % (entry, have, buf_count, var_count, want)
        )


def _section(data: bytes, wanted: str) -> Optional[bytes]:
    """The bytes of section ``wanted`` of a 64-bit little-endian ELF image, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    entsize, count, names = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * entsize) for i in range(count)]
    strtab = headers[names][4]
    for name_offset, _type, _flags, _addr, offset, size in headers:
        end = data.index(b"\0", strtab + name_offset)
        if data[strtab + name_offset : end].decode("utf-8", "replace") == wanted:
            if offset + size > len(data):
                return None
            return data[offset : offset + size]
    return None


def _kparam_sizes(info: bytes) -> Optional[List[int]]:
    """Parameter sizes from the KPARAM_INFO attributes (size in bits 18.. of their last word), by ordinal."""
    sizes: Dict[int, int] = {}
    at = 0
    while at + 2 <= len(info):
        fmt, attr = info[at], info[at + 1]
        if fmt == _NVAL:
            at += 2
        elif fmt == _HVAL:
            at += 4
        elif fmt == _SVAL:
            (length,) = struct.unpack_from("<H", info, at + 2)
            payload = info[at + 4 : at + 4 + length]
            if attr == _EIATTR_KPARAM_INFO and len(payload) == 12:
                _index, ordinal, _offset, flags = struct.unpack("<IHHI", payload)
                sizes[ordinal] = flags >> 18
            at += 4 + length
        else:
            return None  # a format not known here: do not guess the rest
    if sorted(sizes) != list(range(len(sizes))):
        return None
    return [sizes[i] for i in range(len(sizes))]
