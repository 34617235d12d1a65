"""Helpers of the kernel library's tests (tests/kernels/): dtype conversions, numpy references, inputs
and the checks that hold a kernel to the tolerances of docs/kernels.md.

Helpers that draw random inputs take the test's own generator (the ``rng`` fixture below, which a
test module imports), so a test's inputs never depend on which tests ran before it.
"""

from __future__ import annotations

import os
import shutil
import zlib
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.kernels.elementwise import OPS  # noqa: E402

HAVE_CC = any(shutil.which(c) for c in ("clang", "gcc", "cc")) or bool(os.environ.get("SVOD_CC"))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler (needed for kernels compiled on demand)")
HOST_VARIANT = kernels.host_variant()
needs_prebuilt = pytest.mark.skipif(HOST_VARIANT is None, reason="no prebuilt object fits this host")

FLOATS = ("float32", "float64", "float16", "bfloat16")
EXACT = ("add", "sub", "mul", "div", "max", "min", "neg", "abs", "relu", "where", "sqrt", "rsqrt")
#: documented error bounds in ulp of the result (docs/kernels.md)
ULP = {"exp": 2.0, "log": 2.0, "tanh": 4.0, "sigmoid": 4.0}
SIZES = (1, 13, 256, 4099)
#: Mixed into every test's seed: set it to run the tests on other random inputs than the usual ones.
SEED_ENV = "SVOD_KERNEL_TEST_SEED"


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> Any:
    """A generator of the test's own, seeded from its name (parameters included): a test draws the same
    inputs whichever tests ran before it, in one process or spread over pytest-xdist workers."""
    seed = zlib.crc32(request.node.name.encode()) ^ int(os.environ.get(SEED_ENV, "0"))
    return np.random.default_rng(seed)


# --- dtype helpers -------------------------------------------------------------------------


def bf16_bits(x: Any) -> Any:
    """float32 -> bfloat16 bits, round to nearest even (nan stays nan)."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def bf16_float(bits: Any) -> Any:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def store(dt: str, x: Any) -> Any:
    """Values (float64 or ints) -> the kernel's storage array for ``dt``."""
    if dt == "bfloat16":
        return bf16_bits(np.asarray(x, dtype=np.float32))
    if dt == "bool":
        return np.asarray(x).astype(np.bool_)
    with np.errstate(over="ignore"):  # float16 overflows to inf, like the kernels
        return np.asarray(x).astype(dt)


def value(dt: str, arr: Any) -> Any:
    """Storage array -> its values as float64 (int64 for int32)."""
    if dt == "bfloat16":
        return bf16_float(arr).astype(np.float64)
    if dt == "int32":
        return arr.astype(np.int64)
    return arr.astype(np.float64)


def math_dtype(dt: str) -> Any:
    return {"float64": np.float64, "int32": np.int32}.get(dt, np.float32)


def empty(dt: str, n: Any) -> Any:
    shape = n if isinstance(n, tuple) else (n,)
    if dt == "bfloat16":
        return np.full(shape, 0xFFFF, dtype=np.uint16)  # nan bits: a missed write shows
    arr = np.empty(shape, dtype=dt)
    if arr.dtype.kind == "f":
        arr.fill(np.nan)
    return arr


def ulps(got: Any, ref: Any, dt: str) -> Any:
    """|got - ref| in ulps of ref rounded to dt (ref: float64 / longdouble values)."""
    tgt = np.float64 if dt == "float64" else np.float32
    ref_t = np.asarray(ref).astype(tgt)
    spacing = np.spacing(np.abs(ref_t)).astype(np.longdouble)
    return np.abs(np.asarray(got).astype(np.longdouble) - np.asarray(ref, dtype=np.longdouble)) / spacing


# --- references ------------------------------------------------------------------------------


def reference_dtype(dt: str) -> Any:
    """longdouble where it has a wider exponent range than float64 (x87); float64 otherwise.

    IBM double-double (ppc64le's long double) keeps float64's exponent range and its exp flushes
    the subnormal exp(-745) = 2.8e-324 to 0, where float64's own exp (glibc) rounds it to 5e-324.
    """
    if dt == "float64" and np.finfo(np.longdouble).minexp >= np.finfo(np.float64).minexp:
        return np.float64
    return np.longdouble


def _gelu(x: Any) -> Any:
    u = np.sqrt(np.longdouble(2) / np.pi) * (x + np.longdouble(0.044715) * x**3)
    return x / (1 + np.exp(-2 * u))


REF: Dict[str, Callable[..., Any]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": np.maximum,
    "min": np.minimum,
    "neg": np.negative,
    "abs": np.abs,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda a: 1 / np.sqrt(a),
    "relu": lambda a: np.where(a < 0, np.zeros_like(a), a),
    "gelu": _gelu,
    "sigmoid": lambda a: 1 / (1 + np.exp(-a)),
    "tanh": np.tanh,
    "where": lambda c, a, b: np.where(c, a, b),
}


def op_inputs(rng: Any, op: str, dt: str, n: int) -> List[Any]:
    """Storage arrays for the op's operands (domains chosen so that the op is defined)."""
    if dt == "int32":
        out = [
            store(dt, rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32)) for _ in range(OPS[op].arity)
        ]
        if op == "where":
            out[0] = rng.random(n) < 0.5
        return out
    domains = {"log": (1e-3, 50.0), "sqrt": (0.0, 50.0), "rsqrt": (1e-3, 50.0), "exp": (-30.0, 30.0)}
    lo, hi = domains.get(op, (-8.0, 8.0))
    if dt == "float16" and op == "exp":
        lo, hi = -15.0, 11.0
    out = [store(dt, rng.uniform(lo, hi, n)) for _ in range(OPS[op].arity)]
    if op == "where":
        out[0] = rng.random(n) < 0.5
    if op == "div":
        out[1] = store(dt, np.where(np.abs(value(dt, out[1])) < 0.1, 0.5, value(dt, out[1])))
    return out


def check_elementwise(op: str, dt: str, got: Any, ins: Sequence[Any]) -> None:
    vals = [
        value("bool" if (op == "where" and i == 0) else dt, a) if i or op != "where" else a for i, a in enumerate(ins)
    ]
    if dt == "int32":
        with np.errstate(over="ignore"):
            want = REF[op](*[a.astype(np.int32) if hasattr(a, "astype") and a.dtype != np.bool_ else a for a in ins])
        assert np.array_equal(got, np.asarray(want, dtype=np.int32)), op
        return
    mdt = math_dtype(dt)
    if op in EXACT:
        args = [v.astype(mdt) if getattr(v, "dtype", None) != np.bool_ else v for v in vals]
        with np.errstate(all="ignore"):
            exact = np.asarray(REF[op](*args), dtype=mdt)
        want = store(dt, exact) if dt in ("float16", "bfloat16") else exact
        assert np.array_equal(got, want, equal_nan=True), "%s %s" % (op, dt)
        return
    with np.errstate(all="ignore"):
        ref = REF[op](*[v.astype(np.longdouble) for v in vals])
    if dt in ("float16", "bfloat16"):
        # float32 math, then one rounding to the storage type: within 1 storage ulp of the true value
        got_v, ref_v = value(dt, got), np.asarray(ref, dtype=np.float64)
        step = 2.0 ** (-10 if dt == "float16" else -7)
        tol = step * np.maximum(np.abs(ref_v), 6.2e-5 if dt == "float16" else 1.2e-38) * 1.01
        assert np.all(np.abs(got_v - ref_v) <= tol), (op, dt, np.max(np.abs(got_v - ref_v) / tol))
        return
    if op == "gelu":
        x = vals[0]
        spacing = np.spacing(np.maximum(np.abs(x), np.abs(np.asarray(ref, dtype=np.float64))).astype(mdt))
        err = np.abs(got.astype(np.longdouble) - ref) / spacing.astype(np.longdouble)
        assert err.max() <= 4.0, ("gelu", dt, float(err.max()))
        return
    err = ulps(got, ref, dt)
    assert float(np.max(err)) <= ULP[op], (op, dt, float(np.max(err)))


def instances(name: str) -> List[Dict[str, Any]]:
    return kernels.catalogue()[name]["instances"]


def check_matmul(rng: Any, k: Any, dt: str, m: int, n: int, kk: int, threads: Optional[int] = None) -> None:
    """Run matmul ``k`` on random (m, kk) @ (kk, n) and hold it to the standard bound 2 K eps (|A| @ |B|)."""
    a, b = rng.uniform(-1, 1, (m, kk)).astype(dt), rng.uniform(-1, 1, (kk, n)).astype(dt)
    c = np.full((m, n), np.nan, dtype=dt)
    k.run([c, a, b], M=m, N=n, K=kk, threads=threads)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2 * kk * np.finfo(dt).eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(c - want) <= bound + 1e-30), (dt, m, n, kk)
