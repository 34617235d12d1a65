"""How Python values are written in generated C: float32 literals and the C element type of each run-time dtype."""

from __future__ import annotations

import math

#: C type of each run-time dtype a generated kernel reads or writes.
C_TYPES = {
    "float32": "float",
    "bool": "unsigned char",
    "int64": "long long",
    "int32": "int",
    "int8": "signed char",
    "uint8": "unsigned char",
}


def flt(value: float) -> str:
    """A float32 C literal (infinities as huge constants the compiler folds to inf)."""
    if math.isinf(value):
        return "(%s1e39f)" % ("-" if value < 0 else "")
    if math.isnan(value):
        return "(0.0f/0.0f)"
    return "%.9gf" % value if "e" in "%.9g" % value or "." in "%.9g" % value else "%.9g.0f" % value
