"""Plan-file data: files beside the plan, buffer declarations and their initial contents, expectations.

:class:`PlanData` reads what a plan names by path (kernel text, ``.npy``
arrays, relative to the plan's folder), allocates or views each declared
buffer with its ``init`` data and reads the ``expect`` section;
:func:`check_expectation` compares a buffer with one expectation.
"""

from __future__ import annotations

import ctypes
import math
import os
from functools import partial
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, Union

from ..dtypes import DType, bool_bytes, pack_values, unpack_values
from ..dtypes import dtype as to_dtype
from ..error import BufferAllocationError, PlanError, PlanFileError, SvodError
from ..npy import holds, parse_npy
from .schema import as_int, as_list, as_number, as_object, as_text, flatten, known_keys, need, product

MAX_BUFFER_BYTES = 1 << 34
INIT_CHUNK = 1 << 16  # elements packed at a time: a Python list of every element would need ~8x the buffer


class Expectation:
    """An ``expect`` entry: the values a buffer should hold after a run, within ``rtol``/``atol``.

    ``values`` is a list of numbers or a numpy array. An entry read from a ``.npy`` file decodes its values at first
    use: a run that does not verify (its inputs replaced, ``--once``) never pays for numpy's import or the decoding.
    """

    __slots__ = ("buffer", "rtol", "atol", "_values", "_decode")

    def __init__(self, buffer: str, values: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
        self.buffer = buffer
        self.rtol = rtol
        self.atol = atol
        self._values = values
        self._decode: Optional[Callable[[], Any]] = None

    @classmethod
    def deferred(cls, buffer: str, decode: Callable[[], Any], rtol: float, atol: float) -> "Expectation":
        """An entry whose values ``decode()`` makes when they are first read."""
        e = cls(buffer, None, rtol, atol)
        e._decode = decode
        return e

    @property
    def values(self) -> Any:
        if self._decode is not None:
            self._values, self._decode = self._decode(), None
        return self._values

    def __repr__(self) -> str:
        return "Expectation(%r, rtol=%g, atol=%g)" % (self.buffer, self.rtol, self.atol)


class DirectoryFiles:
    """The files a plan names, read from the folder it lies in (a bundle reads them from its zip instead)."""

    def __init__(self, base_dir: str) -> None:
        self.base_dir = base_dir

    def read_bytes(self, rel: str, path: str) -> bytes:
        """The bytes of ``rel``; PlanFileError naming ``path`` (the JSON path that named it) when unreadable."""
        full = os.path.normpath(os.path.join(self.base_dir, rel))
        need(os.path.isfile(full), path, "file %r not found (relative to %s)" % (rel, self.base_dir))
        try:
            with open(full, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise PlanFileError(path, "cannot read %r: %s" % (rel, exc.strerror or exc)) from None


class PlanData:
    """Files the plan names and the buffers it declares (allocated on ``device``).

    ``files`` reads what the plan names by relative path: a :class:`DirectoryFiles` of ``base_dir`` by
    default, or a model bundle's entries (:class:`svod_min.planfile.bundle.BundleFiles`).
    """

    def __init__(self, base_dir: str, device: Any, files: Any = None) -> None:
        self.base_dir = base_dir
        self.device = device
        self.files = files if files is not None else DirectoryFiles(base_dir)

    def shape(self, b: Dict[str, Any], path: str) -> Tuple[DType, Tuple[int, ...], int]:
        """A buffer declaration's dtype, shape and element count (within :data:`MAX_BUFFER_BYTES`)."""
        try:
            dt = to_dtype(as_text(b.get("dtype", "float32"), path + ".dtype"))
        except SvodError as exc:
            raise PlanFileError(path + ".dtype", str(exc)) from None
        dims = as_list(b.get("shape"), path + ".shape")
        if not all(type(d) is int and 0 <= d <= 1 << 40 for d in dims):  # name the first bad one (paths cost a load)
            for i, d in enumerate(dims):
                as_int(d, "%s.shape[%d]" % (path, i), 0, 1 << 40)
        shape = tuple(dims)
        count = product(shape)
        if count * dt.itemsize > MAX_BUFFER_BYTES:  # each message is made only on failure: a plan has hundreds
            raise PlanFileError(
                path + ".shape",
                "buffer of %d bytes exceeds the %d-byte limit" % (count * dt.itemsize, MAX_BUFFER_BYTES),
            )
        return dt, shape, count

    def allocate(self, b: Dict[str, Any], path: str) -> Any:
        """A new buffer on the device, filled from its ``init``."""
        dt, shape, count = self.shape(b, path)
        try:
            direct = self._npy_into(b.get("init"), dt, shape, path + ".init.npy")
            if direct is not None:
                return direct
            data = self._init(b.get("init", "zeros"), dt, shape, count, path + ".init")
            buf = self.device.allocate(list(shape), dt.name)
            if data is not None:
                buf.copyin(data)
        except MemoryError:
            raise BufferAllocationError(
                "%s: not enough host memory for %d bytes" % (path, count * dt.itemsize)
            ) from None
        return buf

    def view(self, name: str, b: Dict[str, Any], path: str, buffers: Mapping[str, Any]) -> Any:
        """A ``view_of`` declaration: a window of an earlier buffer in ``buffers``."""
        base_name = as_text(b["view_of"], path + ".view_of")
        if base_name not in buffers:
            raise PlanFileError(path + ".view_of", "unknown buffer %r (views must come after their base)" % base_name)
        dt, shape, count = self.shape(b, path)
        offset = as_int(b.get("offset", 0), path + ".offset", 0)
        base = buffers[base_name]
        if offset + count * dt.itemsize > base.nbytes:
            raise PlanFileError(
                path, "view [%d, +%d) is outside %r (%d bytes)" % (offset, count * dt.itemsize, base_name, base.nbytes)
            )
        need("init" not in b, path + ".init", "views share their base's data and take no init")
        return base.view(offset, count * dt.itemsize, dtype=dt.name, shape=shape)

    def _init(
        self, init: Any, dt: DType, shape: Tuple[int, ...], count: int, path: str
    ) -> Optional[Union[bytes, memoryview]]:
        if init == "zeros":
            return None
        if init == "ones":
            return pack_values(dt, [1]) * count
        if init == "arange":
            return packed_chunks(dt, count, lambda lo, hi: range(lo, hi))
        init = as_object(init, path)
        need(len(init) == 1, path, "expected one of zeros, ones, arange, {random}, {values}, {npy}")
        kind, arg = next(iter(init.items()))
        if kind == "values":
            values = flatten(as_list(arg, path + ".values"), path + ".values", dt.name == "bool")
            need(len(values) == count, path + ".values", "%d values for a buffer of %d elements" % (len(values), count))
            return pack_values(dt, values)
        if kind == "random":
            arg = as_object(arg, path + ".random")
            known_keys(arg, {"seed", "low", "high"}, path + ".random")
            import random  # on use: ~7 ms of every start otherwise

            rng = random.Random(as_int(arg.get("seed", 0), path + ".random.seed"))
            low, high = (
                as_number(arg.get("low", -1.0), path + ".random.low"),
                as_number(arg.get("high", 1.0), path + ".random.high"),
            )

            def draw(lo: int, hi: int) -> List[Any]:
                values = [rng.uniform(low, high) for _ in range(lo, hi)]
                return values if dt.is_float else [int(v) for v in values]

            return packed_chunks(dt, count, draw)
        if kind == "npy":
            return self._npy(as_text(arg, path + ".npy"), dt, shape, path + ".npy")
        raise PlanFileError(path, "unknown init %r (zeros, ones, arange, random, values, npy)" % kind)

    def _npy_into(self, init: Any, dt: DType, shape: Tuple[int, ...], path: str) -> Any:
        """The buffer of an ``{"npy": ...}`` init that the files can read straight into it (a bundle's large
        stored arrays: no copy of the weights in between), or None: read it the usual way."""
        read_into = getattr(self.files, "read_npy_into", None)
        if dt.name == "bool":  # its bytes are made 0/1 on the way in: read the usual way
            return None
        if read_into is None or not isinstance(init, dict) or len(init) != 1 or not isinstance(init.get("npy"), str):
            return None
        rel, made = init["npy"], []

        def destination(file_dt: DType, file_shape: Tuple[int, ...]) -> Any:
            need(holds(file_dt, dt), path, "%s holds %s, the buffer is %s" % (rel, file_dt.name, dt.name))
            need(
                product(file_shape) == product(shape),
                path,
                "%s has shape %s, the buffer %s" % (rel, list(file_shape), list(shape)),
            )
            buf = self.device.allocate(list(shape), dt.name)
            made.append(buf)
            if getattr(buf, "on_host", False) and buf.nbytes:  # a host pointer: filled in place
                return (ctypes.c_char * buf.nbytes).from_address(buf.address)
            made.append(bytearray(buf.nbytes))  # elsewhere: through host memory, copied in after the check
            return made[-1]

        if not read_into(as_text(rel, path), path, destination):
            return None
        if len(made) > 1:
            made[0].copyin(made[1])
        return made[0]

    def _npy(self, rel: str, dt: DType, shape: Tuple[int, ...], path: str) -> memoryview:
        file_dt, file_shape, payload = self.read_npy_file(rel, path)
        need(holds(file_dt, dt), path, "%s holds %s, the buffer is %s" % (rel, file_dt.name, dt.name))
        need(
            product(file_shape) == product(shape),
            path,
            "%s has shape %s, the buffer %s" % (rel, list(file_shape), list(shape)),
        )
        return memoryview(bool_bytes(payload)) if dt.name == "bool" else payload

    def read_npy_file(self, rel: str, path: str) -> Tuple[DType, Tuple[int, ...], memoryview]:
        """A ``.npy`` file the plan names: (dtype, shape, raw little-endian payload)."""
        data = self.files.read_bytes(rel, path)
        try:
            return parse_npy(data, rel)
        except PlanError as exc:
            raise PlanFileError(path, str(exc)) from None

    def read_bytes(self, rel: str, path: str) -> bytes:
        """A file the plan names (a precompiled object), as bytes."""
        return self.files.read_bytes(rel, path)

    def read_text(self, rel: str, path: str) -> str:
        """A UTF-8 text file the plan names (kernel source, IR, CUDA C, PTX)."""
        try:
            return self.files.read_bytes(rel, path).decode("utf-8")
        except UnicodeDecodeError:
            raise PlanFileError(path, "file %r is not UTF-8 text" % rel) from None

    def expectations(self, spec: Dict[str, Any], buffers: Mapping[str, Any]) -> List[Expectation]:
        """The ``expect`` section, checked against the declared ``buffers``."""
        return [self._expectation(name, as_object(e, "expect.%s" % name), buffers) for name, e in spec.items()]

    def _expectation(self, name: str, e: Dict[str, Any], buffers: Mapping[str, Any]) -> Expectation:
        """One entry: its size checked now, a ``.npy`` file's values decoded when a verification reads them."""
        path = "expect.%s" % name
        need(name in buffers, path, "unknown buffer %r" % name)
        known_keys(e, {"values", "npy", "rtol", "atol", "count"}, path)
        buf = buffers[name]
        buf_dt = to_dtype(buf.dtype)
        decode: Optional[Callable[[], Any]] = None
        if "npy" in e:
            dt, shape, payload = self.read_npy_file(as_text(e["npy"], path + ".npy"), path + ".npy")
            # a bfloat16 buffer's expected values may be stored as its uint16 bits
            decode = partial(_npy_values, buf_dt if holds(dt, buf_dt) else dt, payload, buf_dt.name == "bool")
            given = product(shape)
        else:
            values = flatten(as_list(e.get("values"), path + ".values"), path + ".values", buf_dt.name == "bool")
            given = len(values)
        # count: only the leading elements are described (a buffer sized for a variable's maximum)
        count = as_int(e["count"], path + ".count", 1, len(buf)) if "count" in e else len(buf)
        need(
            given == count,
            path,
            "%d expected values for %s of %d elements" % (given, "a count" if "count" in e else "a buffer", count),
        )
        rtol_default, atol_default = _TOLERANCE.get(buf_dt.name, (1e-5, 1e-6))
        rtol = as_number(e.get("rtol", rtol_default), path + ".rtol")
        atol = as_number(e.get("atol", atol_default), path + ".atol")
        if decode is not None:
            return Expectation.deferred(name, decode, rtol, atol)
        return Expectation(name, _listed(values, buf_dt.name == "bool"), rtol, atol)


def _listed(values: List[Any], as_bool: bool) -> List[Any]:
    """Inline expected values as numbers; a bool buffer holds 0 and 1, so nonzero is true."""
    if as_bool:
        return [1 if v else 0 for v in values]
    return [_number(v) for v in values]


def _npy_values(dt: DType, payload: Any, as_bool: bool) -> Any:
    """A ``.npy`` file's values: a numpy array where numpy is installed and has the dtype (millions of expected
    values stay one array: as Python numbers they take seconds to make and 32 bytes each), else Python numbers;
    for a bool buffer (``as_bool``) 1 where nonzero."""
    if dt.numpy_name is not None:
        try:
            import numpy as np
        except ImportError:
            pass
        else:
            values = np.frombuffer(bytes(payload), dtype=np.dtype(dt.numpy_name).newbyteorder("<"))
            return (values != 0).astype(np.uint8) if dt.name == "bool" else values
    return _listed(unpack_values(dt, payload), as_bool)


#: ``expect``'s default (rtol, atol) by the buffer's dtype: integers and bool compare exactly; float16 and
#: bfloat16 hold 11 and 8 significant bits, so values written in decimal match within a rounding of theirs
_TOLERANCE = {"float16": (1e-3, 1e-6), "bfloat16": (8e-3, 1e-6)}
_TOLERANCE.update(
    (name, (0.0, 0.0)) for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")
)


def packed_chunks(dt: DType, count: int, values: Callable[[int, int], Iterable[Any]]) -> bytes:
    """``values(lo, hi)`` for consecutive chunks of ``range(count)``, packed as ``dt``."""
    return b"".join(
        pack_values(dt, list(values(lo, min(lo + INIT_CHUNK, count)))) for lo in range(0, count, INIT_CHUNK)
    )


def _number(value: Any) -> Any:
    """A value to compare: integers (bools as 0/1) stay exact, anything else is a float."""
    return int(value) if type(value) in (int, bool) else float(value)


def _flat_values(got: Any) -> List[Any]:
    """A buffer's nested ``tolist()`` as a flat list of numbers (bool buffers give 0/1)."""
    if not isinstance(got, list):
        return [_number(got)]
    out: List[Any] = []
    for item in got:
        out.extend(_flat_values(item) if isinstance(item, list) else [_number(item)])
    return out


def check_expectation(buf: Any, e: Expectation) -> Tuple[str, bool, float]:
    """(buffer name, ok, max abs error) of ``buf`` against ``e``; NaN is never ok."""
    flat = _flat_values(buf.tolist())
    worst, ok = 0.0, True
    for g, w in zip(flat, e.values):
        if g == w:  # equal is ok at any size: an infinity equals itself (a ReduceMax over nothing is -inf)
            continue
        # ints against ints exactly: float() would round int64 values above 2**53 together
        err = abs(g - w) if type(g) is int and type(w) is int else abs(float(g) - w)
        infinite = isinstance(w, float) and math.isinf(w)  # unequal to an infinity is wrong, whatever rtol says
        if not err <= e.atol + e.rtol * abs(w) or math.isnan(float(g)) or infinite:
            ok = False
        worst = max(worst, float(err)) if not math.isnan(err) else float("inf")
    return e.buffer, ok, worst


__all__ = [
    "DirectoryFiles",
    "INIT_CHUNK",
    "MAX_BUFFER_BYTES",
    "Expectation",
    "PlanData",
    "check_expectation",
    "packed_chunks",
]
