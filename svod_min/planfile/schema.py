"""Plan-file schema checks: typed readers of JSON values that name the offending path, and the document reader.

Every check raises :class:`PlanFileError` with the JSON path of the value
(``ops[3].buffers[1]: unknown buffer 'h2'``); :func:`read_plan_document` reads
a file with size, encoding, syntax and duplicate-key checks.
"""

from __future__ import annotations

import json
import math
import os
import struct
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..error import PlanFileError

FORMAT_VERSION = 1
MAX_PLAN_BYTES = 64 * 1024 * 1024
_FLOAT32_MAX = 3.4028234663852886e38


# --- small validators ----------------------------------------------------------------


def need(cond: bool, path: str, message: str) -> None:
    if not cond:
        raise PlanFileError(path, message)


# The readers below build their message only on failure: a model's plan calls them tens of
# thousands of times at each load, and formatting every message cost ~10 ms of a cold start.


def as_object(value: Any, path: str) -> Dict[str, Any]:
    if not isinstance(value, dict):
        raise PlanFileError(path, "expected an object, got %s" % describe(value))
    return value


def as_list(value: Any, path: str) -> List[Any]:
    if not isinstance(value, list):
        raise PlanFileError(path, "expected a list, got %s" % describe(value))
    return value


def as_int(value: Any, path: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    if type(value) is not int:
        raise PlanFileError(path, "expected an integer, got %s" % describe(value))
    if lo is not None and value < lo:
        raise PlanFileError(path, "must be >= %d, got %d" % (lo, value))
    if hi is not None and value > hi:
        raise PlanFileError(path, "must be <= %d, got %d" % (hi, value))
    return value


def as_number(value: Any, path: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise PlanFileError(path, "expected a number, got %s" % describe(value))
    return float(value)


def float32_bits(value: Any, path: str) -> int:
    """A number as the int32 holding its float32 bits (what an ``f32`` kernel variable receives)."""
    number = as_number(value, path)
    need(math.isfinite(number) and abs(number) <= _FLOAT32_MAX, path, "%r is not a finite float32 value" % (value,))
    return struct.unpack("<i", struct.pack("<f", number))[0]


def as_sha256(value: Any, path: str) -> str:
    """A sha256 digest as the plan writes it: 64 lowercase hex digits."""
    digest = as_text(value, path)
    need(len(digest) == 64 and all(c in "0123456789abcdef" for c in digest), path, "expected 64 lowercase hex digits")
    return digest


def var_bounds(value: Any, path: str) -> Tuple[int, int, int]:
    """A plan variable's (min, max, default): ``[min, max, default]`` or ``{"min", "max"[, "default"]}`` (default:
    max), each an int32, min <= default <= max."""
    int32 = (-(1 << 31), (1 << 31) - 1)
    if isinstance(value, list):
        need(len(value) == 3, path, "expected [min, max, default]")
        lo, hi, default = (as_int(x, "%s[%d]" % (path, i), *int32) for i, x in enumerate(value))
    else:
        value = as_object(value, path)
        known_keys(value, {"min", "max", "default"}, path)
        lo = as_int(value.get("min"), path + ".min", *int32)
        hi = as_int(value.get("max"), path + ".max", *int32)
        default = as_int(value.get("default", hi), path + ".default")
    need(lo <= hi, path, "min %d > max %d" % (lo, hi))
    need(lo <= default <= hi, path, "default %d is outside [%d, %d]" % (default, lo, hi))
    return lo, hi, default


def as_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise PlanFileError(path, "expected true or false, got %s" % describe(value))
    return value


def as_text(value: Any, path: str) -> str:
    if not isinstance(value, str) or value == "":
        raise PlanFileError(path, "expected a non-empty string, got %s" % describe(value))
    return value


def describe(value: Any) -> str:
    if isinstance(value, str):
        return "string %r" % (value[:40],)
    return {dict: "an object", list: "a list", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def known_keys(obj: Mapping[str, Any], allowed: set, path: str) -> None:
    if not allowed.issuperset(obj):
        extra = sorted(set(obj) - allowed)
        raise PlanFileError(path, "unknown key(s) %s (allowed: %s)" % (extra, sorted(allowed)))


# --- reading the document --------------------------------------------------------------


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_plan_document(path: str) -> Dict[str, Any]:
    """Read and parse a plan file with size and syntax checks."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise PlanFileError("", "cannot read plan file %s: %s" % (path, exc.strerror or exc)) from None
    need(not os.path.isdir(path), "", "cannot read plan file %s: it is a directory" % path)
    need(size <= MAX_PLAN_BYTES, "", "plan file %s is %d bytes; the limit is %d" % (path, size, MAX_PLAN_BYTES))
    need(size > 0, "", "plan file %s is empty" % path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise PlanFileError("", "cannot read plan file %s: %s" % (path, exc.strerror or exc)) from None
    return parse_plan_bytes(raw, "plan file %s" % path)


def parse_plan_bytes(raw: bytes, what: str) -> Dict[str, Any]:
    """A plan document from bytes (a file's, or a bundle entry's); ``what`` names them in errors."""
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError:
        raise PlanFileError("", "%s is not UTF-8 text" % what) from None
    except _DuplicateKey as exc:  # json keeps the last one silently: a second "expect" would hide the first
        raise PlanFileError("", "%s repeats the key %r in one object" % (what, exc.key)) from None
    except ValueError as exc:
        raise PlanFileError("", "%s is not valid JSON: %s" % (what, exc)) from None
    except RecursionError:
        raise PlanFileError("", "%s nests too deeply" % what) from None
    return as_object(doc, "$")


def missing(key: str) -> Any:
    raise PlanFileError(key, "missing (a plan file needs %s)" % key)


def three(value: Any, path: str) -> List[Any]:
    dims = as_list(value, path)
    need(len(dims) == 3, path, "expected 3 entries, got %d" % len(dims))
    return dims


def product(dims: Sequence[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def flatten(values: List[Any], path: str, booleans: bool = False) -> List[Any]:
    """Nested lists of numbers -> flat list, checking every element; ``booleans``: true and false are numbers
    too (the values of a bool buffer)."""
    out: List[Any] = []
    for j, v in enumerate(values):
        if isinstance(v, list):
            out.extend(flatten(v, "%s[%d]" % (path, j), booleans))
        else:
            need(
                isinstance(v, (int, float)) and (booleans or not isinstance(v, bool)),
                "%s[%d]" % (path, j),
                "expected a number, got %s" % describe(v),
            )
            out.append(v)
    return out


__all__ = [
    "FORMAT_VERSION",
    "MAX_PLAN_BYTES",
    "as_bool",
    "as_int",
    "as_list",
    "as_number",
    "as_object",
    "as_text",
    "describe",
    "flatten",
    "float32_bits",
    "known_keys",
    "missing",
    "need",
    "parse_plan_bytes",
    "product",
    "read_plan_document",
    "three",
]
