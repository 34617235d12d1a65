"""A run's outputs against a plan's expected values (``expect``): NaN where NaN is expected counts as equal.

With numpy the comparison is vectorised (an output of millions of elements verifies in a fraction of a second);
without it, pure Python compares element by element (:func:`data.check_expectation`), the same rule either way:
equal is ok (an infinity equals itself), integers against integers exactly unless the entry gives a tolerance,
else ``|got - want| <= atol + rtol * |want|``, and a NaN or an unequal infinity is never within a tolerance.
"""

from __future__ import annotations

import math
from typing import Any, List, Tuple

from .data import Expectation, check_expectation


class _Values:
    """Plain values standing in for a buffer in :func:`check_expectation`."""

    def __init__(self, values: List[Any]) -> None:
        self.values = values

    def tolist(self) -> List[Any]:
        return self.values


def verify_buffer(buf: Any, e: Expectation) -> Tuple[str, bool, float]:
    """(buffer name, ok, max abs error) of ``buf`` against ``e``."""
    got = _as_array(buf)
    if got is not None:
        return e.buffer, *_verify_array(got, e)
    return _verify_values(buf, e)


def _as_array(buf: Any) -> Any:
    """The buffer's values as a numpy array (one copy), or None without numpy or for a dtype numpy lacks."""
    try:
        import numpy as np
    except ImportError:
        return None
    name = getattr(buf.dtype, "numpy_name", None)
    if name is None:
        return None
    return buf.copyout_into(np.empty(tuple(buf.shape), dtype=name)).reshape(-1)


def _verify_array(got: Any, e: Expectation) -> Tuple[bool, float]:
    """The first ``len(e.values)`` elements (an expectation may cover a prefix of its buffer, as in pure Python)."""
    import numpy as np

    got = got[: len(e.values)]
    if isinstance(e.values, np.ndarray):  # read from a .npy: compared in its own type
        return _verify_typed(got, e.values[: got.size], e)
    if got.dtype.kind in "iub" and all(type(v) is int or type(v) is bool for v in e.values):
        try:  # in the buffer's own integer type: numpy would infer float64 or object for values past int64
            want = np.array(e.values, dtype=got.dtype)
        except OverflowError:  # a value the buffer's type cannot hold: never equal
            return False, float("inf")
        return _verify_integers(got, want[: got.size], e)
    return _verify_floats(got, np.asarray(e.values, dtype=np.float64)[: got.size], e)


def _verify_typed(got: Any, want: Any, e: Expectation) -> Tuple[bool, float]:
    """Expected values held as an array (of the buffer's type, or of another one the ``.npy`` gave)."""
    import numpy as np

    if got.dtype.kind in "iub" and want.dtype.kind in "iub":
        if want.dtype != got.dtype and not np.can_cast(want.dtype, got.dtype):
            return _verify_array(got, Expectation(e.buffer, want.tolist(), e.rtol, e.atol))
        return _verify_integers(got, want.astype(got.dtype), e)
    return _verify_floats(got, want, e)


def _verify_floats(got: Any, want: Any, e: Expectation) -> Tuple[bool, float]:
    import numpy as np

    g = got.astype(np.float64)
    w = want.astype(np.float64)
    equal = (g == w) | (np.isnan(g) & np.isnan(w))
    if bool(np.all(equal)):
        return True, 0.0
    g, w = g[~equal], w[~equal]
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(g - w)
        within = (err <= e.atol + e.rtol * np.abs(w)) & ~np.isnan(g) & ~np.isinf(w)
    worst = float(np.max(np.where(np.isnan(err), np.inf, err)))
    return bool(np.all(within)), worst


def _verify_integers(got: Any, want: Any, e: Expectation) -> Tuple[bool, float]:
    """Integers exactly: the differing elements' errors in Python integers (int64 differences could wrap)."""
    import numpy as np

    differ = np.nonzero(got != want)[0]
    if differ.size == 0:
        return True, 0.0
    errors = [abs(int(got[i]) - int(want[i])) for i in differ[:4096]]
    worst = float(max(errors))
    if e.atol == 0 and e.rtol == 0:
        return False, worst
    if differ.size > len(errors):  # a tolerance on integers: the rest in float64 (a figure, not a bit-exact rule)
        rest = np.abs(got[differ].astype(np.float64) - want[differ].astype(np.float64))
        worst = max(worst, float(np.max(rest)))
        return bool(np.all(rest <= e.atol + e.rtol * np.abs(want[differ].astype(np.float64)))), worst
    ok = all(err <= e.atol + e.rtol * abs(int(want[i])) for err, i in zip(errors, differ))
    return ok, worst


def _verify_values(buf: Any, e: Expectation) -> Tuple[str, bool, float]:
    """The pure-Python path: :func:`check_expectation` with NaN == NaN at the same position."""
    if not isinstance(e.values, list):  # an array, for a buffer of a type numpy lacks
        e = Expectation(e.buffer, [v if type(v) is int else float(v) for v in e.values.tolist()], e.rtol, e.atol)
    nan_at = [i for i, w in enumerate(e.values) if isinstance(w, float) and math.isnan(w)]
    if not nan_at:
        return check_expectation(buf, e)
    flat: List[Any] = []
    stack = [buf.tolist()]
    while stack:  # flatten without recursion limits
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    if any(not math.isnan(float(flat[i])) for i in nan_at if i < len(flat)):
        return e.buffer, False, float("inf")
    skip = set(nan_at)
    keep = [i for i in range(len(e.values)) if i not in skip]
    rest = Expectation(e.buffer, [e.values[i] for i in keep], e.rtol, e.atol)
    return check_expectation(_Values([flat[i] for i in keep]), rest)
