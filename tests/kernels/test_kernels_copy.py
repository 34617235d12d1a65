"""Data movement kernels: transpose, permute (expand, slices), fill and arange, bit-exact for every dtype."""

from __future__ import annotations

from typing import Any

import pytest
from support.kernel_check import empty, rng, store  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402

# --- data movement -------------------------------------------------------------------------------

COPY_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "bool")


def _random(rng: Any, dt: str, shape: Any) -> Any:
    if dt == "bool":
        return rng.random(shape) < 0.5
    if dt == "int32":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    return store(dt, rng.standard_normal(shape))


@pytest.mark.parametrize("dt", COPY_DTYPES)
def test_transpose(dt: str, rng: Any) -> None:
    k = kernels.get("transpose", dtype=dt)
    for rows, cols in [(1, 1), (1, 37), (37, 1), (33, 65), (100, 3), (64, 64)]:
        x = _random(rng, dt, (rows, cols))
        out = np.empty((cols, rows), dtype=x.dtype)
        k.run([out, x], rows=rows, cols=cols)
        assert np.array_equal(out, x.T)


@pytest.mark.parametrize("dt", COPY_DTYPES)
def test_permute_expand_and_slices(dt: str, rng: Any) -> None:
    k = kernels.get("permute", dtype=dt)
    base = _random(rng, dt, (3, 5, 7, 2))
    item = base.itemsize
    views = [
        base.transpose(2, 0, 3, 1),
        base.transpose(3, 2, 1, 0),
        base[:, ::2, 1:, :],
        base[1],
        np.broadcast_to(base[:1, :1, :1], (4, 5, 1, 2)),
        base.reshape(-1)[::3],
    ]
    for view in views:
        var = kernels.permute_vars(view.shape, [s // item for s in view.strides])
        out = np.empty(view.shape, dtype=base.dtype)
        start = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
        src = base.reshape(-1)[start:]
        k.run([out, src], **var)
        assert np.array_equal(out, view)


@pytest.mark.parametrize("dt", COPY_DTYPES)
def test_fill(dt: str, rng: Any) -> None:
    for n in (0, 1, 4099, 100003):
        v = _random(rng, dt, 1)
        out = _random(rng, dt, max(n, 1))
        kernels.get("fill", dtype=dt).run([out, v], n=n)
        assert n == 0 or np.array_equal(out[:n], np.repeat(v, n))


@pytest.mark.parametrize("dt", ["float32", "float64", "float16", "bfloat16", "int32"])
def test_arange(dt: str) -> None:
    for n, start, step in [(1, 5, 3), (4099, -7, 2), (1000, 100, -3), (70001, 0, 1)]:
        out = empty(dt, n)
        kernels.get("arange", dtype=dt).run([out], n=n, start=start, step=step)
        want = start + np.arange(n, dtype=np.float64) * step
        assert np.array_equal(out, store(dt, want.astype(np.float32) if dt == "bfloat16" else want))


# --- the run-time API ----------------------------------------------------------------------------
