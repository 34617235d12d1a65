"""Outputs against expected values: the vectorised (numpy) check and the pure-Python one give the same verdicts."""

from __future__ import annotations

import math
from typing import Any, List

import pytest

np = pytest.importorskip("numpy")

from svod_min import dtypes  # noqa: E402
from svod_min.planfile import verify  # noqa: E402
from svod_min.planfile.data import Expectation  # noqa: E402

NAN, INF = float("nan"), float("inf")


class FakeBuffer:
    """The slice of a device buffer verification reads: dtype, shape, copyout_into, tolist."""

    def __init__(self, values: List[Any], dtype: Any) -> None:
        self.dtype = dtype
        self.shape = (len(values),)
        self.array = np.array(values, dtype=dtype.numpy_name)

    def copyout_into(self, out: Any) -> Any:
        out[...] = self.array.reshape(out.shape)
        return out

    def tolist(self) -> List[Any]:
        return self.array.tolist()


CASES = [
    # (got, want, dtype, rtol, atol, ok)
    ([1.0, 2.0], [1.0, 2.0], dtypes.float32, 1e-5, 1e-6, True),
    ([1.0, 2.0001], [1.0, 2.0], dtypes.float32, 1e-5, 1e-6, False),
    ([1.0, 2.00001], [1.0, 2.0], dtypes.float32, 1e-5, 1e-6, True),
    ([NAN, 1.0], [NAN, 1.0], dtypes.float32, 1e-5, 1e-6, True),
    ([1.0, 1.0], [NAN, 1.0], dtypes.float32, 1e-5, 1e-6, False),
    ([NAN, 1.0], [0.0, 1.0], dtypes.float32, 1e-5, 1e9, False),
    ([-INF, INF], [-INF, INF], dtypes.float64, 1e-5, 1e-6, True),
    ([INF], [-INF], dtypes.float64, 1e-5, 1e-6, False),
    ([1e30], [INF], dtypes.float64, 1.0, 1e300, False),
    ([2**62 + 1], [2**62], dtypes.int64, 0.0, 0.0, False),  # float64 would round the two together
    ([2**62], [2**62], dtypes.int64, 0.0, 0.0, True),
    ([7, 9], [7, 10], dtypes.int32, 0.0, 1.0, True),
    ([True, False], [True, True], dtypes.bool_, 0.0, 0.0, False),
]


@pytest.mark.parametrize("got, want, dtype, rtol, atol, ok", CASES)
def test_numpy_and_pure_python_agree(got, want, dtype, rtol, atol, ok):
    expectation = Expectation("y", list(want), rtol, atol)
    fast = verify.verify_buffer(FakeBuffer(got, dtype), expectation)
    slow = verify._verify_values(FakeBuffer(got, dtype), expectation)
    assert fast[:2] == ("y", ok) and slow[:2] == ("y", ok)
    assert fast[2] == slow[2] or (math.isinf(fast[2]) and math.isinf(slow[2])) or abs(fast[2] - slow[2]) < 1e-9


def test_a_large_output_with_nans_verifies_in_one_pass():
    values = np.arange(1 << 19, dtype=np.float32)
    values[::3] = np.nan  # the pure-Python path rebuilt a set per element: minutes for this
    expectation = Expectation("y", values.astype(np.float64).tolist(), 1e-5, 1e-6)
    assert verify.verify_buffer(FakeBuffer(values.tolist(), dtypes.float32), expectation) == ("y", True, 0.0)
    values[5] = 0.5
    name, ok, worst = verify.verify_buffer(FakeBuffer(values.tolist(), dtypes.float32), expectation)
    assert not ok and worst == pytest.approx(4.5)


@pytest.mark.parametrize(
    "got, want, dtype, ok",
    [
        ([2**62 + 1, 5], np.array([2**62, 5], dtype=np.int64), dtypes.int64, False),
        ([2**62, 5], np.array([2**62, 5], dtype=np.int64), dtypes.int64, True),
        ([200, 5], np.array([200, 5], dtype=np.uint8), dtypes.int64, True),  # widened exactly
        ([-1, 5], np.array([2**64 - 1, 5], dtype=np.uint64), dtypes.int64, False),  # not castable: by value
        ([1.0, NAN], np.array([1.0, NAN], dtype=np.float32), dtypes.float32, True),
        ([1.0, 2.0], np.array([1.0, NAN], dtype=np.float32), dtypes.float32, False),
    ],
)
def test_expected_values_read_from_a_npy_stay_an_array(got, want, dtype, ok):
    """A bundle's expected values come from .npy entries as one array (no Python number per element)."""
    expectation = Expectation("y", want, 0.0 if dtype.name == "int64" else 1e-5, 0.0 if dtype.name == "int64" else 1e-6)
    assert verify.verify_buffer(FakeBuffer(got, dtype), expectation)[1] is ok
    assert verify._verify_values(FakeBuffer(got, dtype), expectation)[1] is ok
