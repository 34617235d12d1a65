"""Reductions, softmax and layernorm against numpy: strided views, wrap-around, nan, stability, error bounds."""

from __future__ import annotations

from typing import Any

import pytest
from support.kernel_check import FLOATS, empty, instances, rng, store, value  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.kernels import KernelParamError  # noqa: E402

# the emulated arches compile this file's kernels from source with their own gcc (.ci/*-stage)
pytestmark = pytest.mark.from_source_sample

# --- reductions ---------------------------------------------------------------------------------

REDUCE_SHAPES = [(1, 1, 1), (1, 17, 1), (3, 1, 5), (5, 7, 3), (2, 1000, 1), (13, 31, 37), (1, 70001, 1), (4, 3, 200)]


def _reduce_ref(op: str, v: Any) -> Any:
    return {"sum": np.sum, "max": np.max, "mean": np.mean}[op](v, axis=1)


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_reductions(op: str, rng: Any) -> None:
    for inst in instances("reduce_" + op):
        dt = inst["dtype"]
        k = kernels.get("reduce_" + op, dtype=dt)
        for shape in REDUCE_SHAPES:
            base = store(dt, rng.integers(-50, 50, shape) if dt == "int32" else rng.uniform(0, 1, shape))
            for view in (base, base.transpose(2, 1, 0)) if shape[0] * shape[2] > 1 else (base,):
                _check_reduce(k, op, dt, base, view)


def _check_reduce(k: Any, op: str, dt: str, base: Any, view: Any) -> None:
    item = base.itemsize
    shape, strides = view.shape, tuple(s // item for s in view.strides)
    var = kernels.reduce_vars(shape, strides, 1)
    out = empty(dt, shape[0] * shape[2])
    k.run([out, base], **var)
    got = value(dt, out).reshape(shape[0], shape[2])
    want = _reduce_ref(op, value(dt, view))
    if op == "max" or dt == "int32":
        assert np.array_equal(got, want), (op, dt, shape)
        return
    rtol = {"float32": 2e-6, "float64": 1e-14, "float16": 2.0**-10, "bfloat16": 2.0**-7}[dt]
    assert np.allclose(got, want, rtol=rtol * 1.01, atol=0), (op, dt, shape, np.max(np.abs(got - want) / want))


def test_reduce_int32_sum_wraps_and_max_of_negatives() -> None:
    x = np.full(5, 2**30, dtype=np.int32)
    out = np.empty(1, np.int32)
    kernels.get("reduce_sum", dtype="int32").run([out, x], **kernels.reduce_vars((5,), (1,), 0))
    assert out[0] == np.int32(np.int64(5 * 2**30) - 2**32)
    y = -np.arange(1, 40, dtype=np.int32)
    kernels.get("reduce_max", dtype="int32").run([out, y], **kernels.reduce_vars((39,), (1,), 0))
    assert out[0] == -1


def test_reduce_max_propagates_nan() -> None:
    x = np.arange(100, dtype=np.float32)
    x[37] = np.nan
    out = np.empty(1, np.float32)
    kernels.get("reduce_max").run([out, x], **kernels.reduce_vars((100,), (1,), 0))
    assert np.isnan(out[0])


def test_reduce_vars_collapses_or_refuses() -> None:
    a = np.zeros((2, 3, 4, 5), np.float32)
    assert kernels.reduce_vars(a.shape, [s // 4 for s in a.strides], 2) == {
        "outer": 6,
        "red": 4,
        "inner": 5,
        "so": 20,
        "sr": 5,
        "si": 1,
    }
    t = a.transpose(0, 2, 1, 3)
    with pytest.raises(KernelParamError, match="collapse"):
        kernels.reduce_vars(t.shape, [s // 4 for s in t.strides], 3)


# --- softmax / layernorm -----------------------------------------------------------------------

ROWS = [(1, 1), (1, 7), (3, 17), (5, 1000), (64, 257), (2, 4099)]
RTOL = {"float32": 1e-5, "float64": 1e-13, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize("dt", FLOATS)
def test_softmax(dt: str, rng: Any) -> None:
    k = kernels.get("softmax", dtype=dt)
    for rows, cols in ROWS:
        x = store(dt, rng.normal(0, 4, (rows, cols)))
        out = empty(dt, (rows, cols))
        k.run([out, x], rows=rows, cols=cols)
        v = value(dt, x).astype(np.longdouble)
        e = np.exp(v - v.max(axis=1, keepdims=True))
        want = (e / e.sum(axis=1, keepdims=True)).astype(np.float64)
        got = value(dt, out)
        atol = 6e-8 if dt == "float16" else RTOL[dt] * 1e-3 / cols  # float16: subnormal spacing
        assert np.allclose(got, want, rtol=RTOL[dt], atol=atol), (dt, rows, cols)
        assert np.allclose(got.sum(axis=1), 1, rtol=max(RTOL[dt], 1e-6) * 4)


def test_softmax_is_stable_for_large_inputs() -> None:
    x = np.array([[1000.0, 1001.0, 999.0], [-1e30, 0.0, -1e30]], np.float32)
    out = np.empty_like(x)
    kernels.get("softmax").run([out, x], rows=2, cols=3)
    e = np.exp(np.array([0.0, 1.0, -1.0]))
    assert np.allclose(out[0], e / e.sum(), rtol=1e-6) and np.allclose(out[1], [0, 1, 0])


def layernorm_bound(dt: str, v: Any, w: Any, b: Any, eps: float) -> Any:
    """The largest error a correct layernorm kernel may make on each output, and the reference.

    The kernel works in its math type (u: half its eps): a row's sum in 16 lane accumulators, so a
    term passes through at most k = cols//16 + 31 roundings (its lane, the 16 lanes, up to 15 tail
    columns); the mean is off by at most (k+1) u mean|x|. That error is one absolute shift of the
    whole row, scaled by rstd |w|: near xhat = 0 (and b = 0) it dwarfs any relative bound, which is
    why a bound of a few eps times |xhat w| + |b| alone fails on ~2% of random rows. The variance
    (the same lanes over squares, then /cols, +eps, sqrt, 1/x) gives rstd a relative error of at most
    (k/2 + 5) u, the products and the last addition a few u more. Each term below is about twice its
    first-order bound, which also covers the float64 reference's own rounding; float16 and bfloat16
    add one rounding to the storage type (relative down to the smallest normal).
    """
    math_eps = np.finfo(np.float64 if dt == "float64" else np.float32).eps
    rstd = 1 / np.sqrt(v.var(1, keepdims=True) + float(np.float32(eps)))  # eps travels as float32 bits
    xhat = (v - v.mean(1, keepdims=True)) * rstd
    want = xhat * w + b
    k = v.shape[1] // 16 + 31
    mean_abs = np.abs(v).mean(1, keepdims=True)
    tol = math_eps * ((k + 1) * mean_abs * rstd * np.abs(w) + (k / 2 + 9) * np.abs(xhat * w) + 2 * np.abs(b))
    storage, tiny = {"float16": (2.0**-10, 6.2e-5), "bfloat16": (2.0**-7, 1.2e-38)}.get(dt, (0.0, 0.0))
    return want, tol + storage * np.maximum(np.abs(want), tiny)


@pytest.mark.parametrize("dt", FLOATS)
def test_layernorm(dt: str, rng: Any) -> None:
    k = kernels.get("layernorm", dtype=dt)
    assert k.var_names == ["rows", "cols", "eps", "core_id_count", "core_id"]
    for rows, cols in ROWS[1:]:
        for eps in (1e-5, 0.1):
            x = store(dt, rng.normal(1, 3, (rows, cols)))
            w, b = store(dt, rng.normal(0, 1, cols)), store(dt, rng.normal(0, 1, cols))
            out = empty(dt, (rows, cols))
            k.run([out, x, w, b], rows=rows, cols=cols, eps=eps)
            want, tol = layernorm_bound(dt, value(dt, x), value(dt, w), value(dt, b), eps)
            err = np.abs(value(dt, out) - want)
            assert np.all(err <= tol), (dt, rows, cols, eps, float(np.max(err / tol)))


def test_layernorm_bound_catches_a_shifted_mean() -> None:
    """The bound is tight enough to see a mean off by 1e-4 of the row's spread, or a dropped eps."""
    v = np.random.default_rng(7).normal(1, 3, (2, 257))
    w, b = np.ones(257), np.zeros(257)
    want, tol = layernorm_bound("float32", v, w, b, 0.1)
    shifted = (v - v.mean(1, keepdims=True) - 3e-4) / np.sqrt(v.var(1, keepdims=True) + np.float32(0.1))
    assert np.all(np.abs(want - want) <= tol) and not np.all(np.abs(shifted - want) <= tol)
    no_eps = (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True))
    assert not np.all(np.abs(no_eps - want) <= tol)


def test_reduce_vars_accepts_numpy_integers() -> None:
    view = np.zeros((3, 4), np.float32)[:, ::2]
    strides = [s // view.itemsize for s in view.strides]
    assert kernels.reduce_vars(view.shape, strides, np.int64(1)) == kernels.reduce_vars([3, 2], [4, 2], 1)
