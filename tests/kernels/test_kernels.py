"""The kernel library (svod_min.kernels): every kernel against numpy, the run-time API, prebuilt objects.

Shapes include 1, primes and sizes that are not multiples of any tile; each
kernel is checked for every dtype it claims. Approximations are held to the
tolerances stated in docs/kernels.md (ulp bounds). Prebuilt objects are
also checked without any compiler (subprocess with an empty PATH), for the
aarch64 variant by relocation against ld.lld, and the PTX with ptxas.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from typing import Any, Callable, Dict, List, Optional, Sequence

import pytest
from support.paths import REPO_DIR

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.error import CompilerNotFoundError, ExecutionError, PlanError, SvodError, UnsupportedDeviceError
from svod_min.jit_loader import relocate  # noqa: E402
from svod_min.kernels import KernelArgumentError, KernelNotFoundError, KernelParamError  # noqa: E402
from svod_min.kernels import variants as kprebuilt  # noqa: E402
from svod_min.kernels.elementwise import OPS, parse_expr  # noqa: E402
from svod_min.kernels.lookup import generated  # noqa: E402
from svod_min.compiler.targets import TARGETS, cpu_features  # noqa: E402

REPO = REPO_DIR
HAVE_CC = any(shutil.which(c) for c in ("clang", "gcc", "cc")) or bool(os.environ.get("SVOD_CC"))
needs_cc = pytest.mark.skipif(not HAVE_CC, reason="no C compiler (needed for kernels compiled on demand)")
HOST_VARIANT = kernels.host_variant()
needs_prebuilt = pytest.mark.skipif(HOST_VARIANT is None, reason="no prebuilt object fits this host")

FLOATS = ("float32", "float64", "float16", "bfloat16")
EXACT = ("add", "sub", "mul", "div", "max", "min", "neg", "abs", "relu", "where", "sqrt", "rsqrt")
#: documented error bounds in ulp of the result (docs/kernels.md)
ULP = {"exp": 2.0, "log": 2.0, "tanh": 4.0, "sigmoid": 4.0}
SIZES = (1, 13, 256, 4099)
rng = np.random.default_rng(20261122)


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
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "max": np.maximum, "min": np.minimum, "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log,
    "sqrt": np.sqrt, "rsqrt": lambda a: 1 / np.sqrt(a), "relu": lambda a: np.where(a < 0, np.zeros_like(a), a),
    "gelu": _gelu, "sigmoid": lambda a: 1 / (1 + np.exp(-a)), "tanh": np.tanh,
    "where": lambda c, a, b: np.where(c, a, b),
}  # fmt: skip


def op_inputs(op: str, dt: str, n: int) -> List[Any]:
    """Storage arrays for the op's operands (domains chosen so that the op is defined)."""
    if dt == "int32":
        out = [store(dt, rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32))
               for _ in range(OPS[op].arity)]  # fmt: skip
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
    vals = [value("bool" if (op == "where" and i == 0) else dt, a) if i or op != "where" else a
            for i, a in enumerate(ins)]  # fmt: skip
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


ELEMENTWISE = [(op, inst["dtype"]) for op in sorted(OPS) if op != "cast" for inst in instances(op)]


# --- elementwise -----------------------------------------------------------------------------


@pytest.mark.parametrize("op, dt", ELEMENTWISE)
def test_elementwise_against_numpy(op: str, dt: str) -> None:
    k = kernels.get(op, dtype=dt)
    assert [b.role for b in k.buffers] == ["w"] + ["r"] * OPS[op].arity
    for n in SIZES:
        ins = op_inputs(op, dt, n)
        out = empty(dt, n)
        k.run([out, *ins], n=n)
        check_elementwise(op, dt, out, ins)


@pytest.mark.parametrize("op", ["add", "exp", "gelu"])
def test_elementwise_threaded_matches_single(op: str) -> None:
    k = kernels.get(op, dtype="float32")
    n = 200003
    ins = op_inputs(op, "float32", n)
    one, two = empty("float32", n), empty("float32", n)
    k.run([one, *ins], n=n, threads=1)
    k.run([two, *ins], n=n, threads=2)
    assert np.array_equal(one, two)
    check_elementwise(op, "float32", two, ins)
    vals, gsize = k.launch(n=n)
    assert gsize[0] == vals[k.var_names.index("core_id_count")] >= 1


def test_threaded_kernels_get_several_core_ids_per_thread_each_a_grain_of_work() -> None:
    gelu = kernels.get("gelu", dtype="float32")
    per = gelu.sig.ids_per_thread
    assert per > 1  # elementwise ids cost only their share: threads claim them to balance
    assert gelu.launch(n=1 << 22, threads=2)[1][0] == 2 * per
    grain = gelu.sig.grain
    assert gelu.launch(n=3 * grain, threads=2)[1][0] == 3  # no id below a grain of work ...
    assert gelu.launch(n=grain, threads=2)[1][0] == 2  # ... but never fewer ids than threads
    assert gelu.launch(n=1 << 22, threads=1)[1][0] == 1
    mm = kernels.get("matmul", dtype="float32")  # each id packs all of B: one id per thread
    assert mm.sig.ids_per_thread == 1 and mm.launch(M=600, N=600, K=600, threads=2)[1][0] == 2
    x = (np.arange(1 << 20) / (1 << 18)).astype(np.float32)
    one, two = np.empty_like(x), np.empty_like(x)
    gelu.run([one, x], n=x.size, threads=1)
    gelu.run([two, x], n=x.size, threads=2)
    assert np.array_equal(one, two)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_transcendentals_special_values(dt: str) -> None:
    tiny = np.finfo(dt).tiny
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, tiny, tiny / 8, -tiny, 1e-30, 1e30, -1e30,
                  88.72, 89.0, -87.3, -103.5, -104.5, 709.7, 710.0, -745.0, -746.0], dtype=dt)  # fmt: skip
    for op in ("exp", "log", "tanh", "sigmoid"):
        out = np.empty_like(x)
        kernels.get(op, dtype=dt).run([out, x], n=x.size)
        with np.errstate(all="ignore"):
            want = REF[op](x.astype(reference_dtype(dt))).astype(dt)
        assert np.array_equal(np.isnan(out), np.isnan(want)), op
        fin = np.isfinite(want) & (want != 0)
        assert np.array_equal(out[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)]), op
        # subnormal results: within 2 ulp of the subnormal spacing; normal ones: the stated bound
        ref = REF[op](x[fin].astype(np.longdouble))
        assert np.all(ulps(out[fin], ref, dt) <= max(ULP[op], 2.0)), (op, out[fin], ref)
    out = np.empty_like(x)
    kernels.get("gelu", dtype=dt).run([out, x], n=x.size)
    assert np.isnan(out[4]) and out[2] == np.inf and out[3] == 0 and out[0] == 0


def test_exp_log_dense_sweep_ulp_bounds() -> None:
    """The stated bounds over the whole float32 range of exp and log (dense sample)."""
    x = np.linspace(-103.0, 88.7, 400001).astype(np.float32)
    out = np.empty_like(x)
    kernels.get("exp").run([out, x], n=x.size)
    assert ulps(out, np.exp(x.astype(np.longdouble)), "float32").max() <= ULP["exp"]
    y = np.exp(rng.uniform(-87, 88, 400001)).astype(np.float32)
    kernels.get("log").run([out, y], n=y.size)
    assert ulps(out, np.log(y.astype(np.longdouble)), "float32").max() <= ULP["log"]


def test_float16_conversions_exhaustive() -> None:
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    halves = bits.view(np.float16)
    out = np.empty(65536, dtype=np.float32)
    kernels.get("cast", dtype="float16", out_dtype="float32").run([out, halves], n=65536)
    want = halves.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(out[~nan].view(np.uint32), want[~nan].view(np.uint32)) and np.isnan(out[nan]).all()
    f = np.concatenate([rng.integers(0, 2**32, 300000, dtype=np.uint64).astype(np.uint32).view(np.float32), want,
                        np.array([65504, 65519.99, 65520, 5.96e-8, 2.98e-8, 2.99e-8, 1e-45], np.float32)])  # fmt: skip
    h = np.empty(f.size, dtype=np.float16)
    kernels.get("cast", dtype="float32", out_dtype="float16").run([h, f], n=f.size)
    with np.errstate(over="ignore"):
        ref = f.astype(np.float16)
    same = (h.view(np.uint16) == ref.view(np.uint16)) | (np.isnan(ref) & np.isnan(h))
    assert same.all(), f[~same][:5]
    b = np.empty(f.size, dtype=np.uint16)
    kernels.get("cast", dtype="float32", out_dtype="bfloat16").run([b, f], n=f.size)
    assert np.array_equal(b, bf16_bits(f))


CASTS = [(i["dtype"], i["out_dtype"]) for i in instances("cast")]


@pytest.mark.parametrize("src, dst", CASTS)
def test_cast(src: str, dst: str) -> None:
    n = 1001
    if src == "int32":
        vals = rng.integers(-70000, 70000, n)
    else:
        lim = 60000 if src == "float16" else (2e9 if dst == "int32" else 70000)
        vals = rng.uniform(-lim, lim, n)
        vals[:5] = [0.5, -0.5, 1.5, -2.5, 0.0]
    x = store(src, vals)
    out = empty(dst, n)
    kernels.get("cast", dtype=src, out_dtype=dst).run([out, x], n=n)
    v = value(src, x)
    if dst == "int32":
        assert np.array_equal(out, np.trunc(v).astype(np.int32))
    elif dst == "bfloat16":
        want = bf16_bits(v.astype(np.float32))
        if src == "float64":  # rounds via float32: at most 1 ulp from a direct rounding
            assert np.all(np.abs(out.astype(np.int64) - bf16_bits(v).astype(np.int64)) <= 1)
        else:
            assert np.array_equal(out, want)
    elif dst == "float16":
        with np.errstate(over="ignore"):
            direct = v.astype(np.float16)
        if src == "float64":
            assert np.all(np.abs(out.view(np.uint16).astype(np.int64) - direct.view(np.uint16).astype(np.int64)) <= 1)
        else:
            with np.errstate(over="ignore"):
                assert np.array_equal(out, v.astype(np.float32).astype(np.float16))
    else:
        assert np.array_equal(out, v.astype(dst))


@pytest.mark.parametrize("name", ["mul_add", "relu_mul_add", "add_relu", "silu"])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_named_fused_kernels(name: str, dt: str) -> None:
    k = kernels.get(name, dtype=dt)
    n = 4099
    ins = [rng.uniform(-3, 3, n).astype(dt) for _ in k.buffers[1:]]
    out = np.empty(n, dtype=dt)
    k.run([out, *ins], n=n)
    a, *rest = [x.astype(np.longdouble) for x in ins]
    want = {"mul_add": lambda: a * rest[0] + rest[1], "relu_mul_add": lambda: np.maximum(a * rest[0] + rest[1], 0),
            "add_relu": lambda: np.maximum(a + rest[0], 0), "silu": lambda: a / (1 + np.exp(-a))}[name]()  # fmt: skip
    eps = np.finfo(dt).eps
    scale = np.abs(a) * (np.abs(rest[0]) if rest else 1) + (np.abs(rest[1]) if len(rest) > 1 else np.abs(want))
    assert np.all(np.abs(out - want) <= 4 * eps * (scale + np.abs(want)))


# --- fused at run time -------------------------------------------------------------------------


@needs_cc
def test_fused_expression_matches_numpy() -> None:
    k = kernels.fused("relu(a*b+c)")
    assert k.name == "fused" and not k.prebuilt and [b.name for b in k.buffers] == ["out", "a", "b", "c"]
    assert "svod_reluf(((v_a * v_b) + v_c))" in k.source
    n = 4099
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    out = np.empty(n, np.float32)
    k.run([out, a, b, c], n=n)
    want = np.maximum(a.astype(np.float64) * b + c, 0)
    assert np.allclose(out, want, rtol=2e-7, atol=1e-7)
    assert kernels.fused("relu(a*b+c)") is k  # cached


@needs_cc
def test_fused_where_compare_constants_and_dtypes() -> None:
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.empty(n, np.float32)
    kernels.fused("where(x > 0, x, 0.01*x) - -2").run([out, x], n=n)
    assert np.allclose(out, np.where(x > 0, x, 0.01 * x) + 2, rtol=1e-6)
    h = x.astype(np.float16)
    i = rng.integers(-5, 5, n).astype(np.int32)
    k = kernels.fused("h * i + 1", dtype="float32", out_dtype="float64", input_dtypes={"h": "float16", "i": "int32"},
                      inputs=["i", "h"])  # fmt: skip
    assert [(b.name, b.dtype) for b in k.buffers] == [("out", "float64"), ("i", "int32"), ("h", "float16")]
    o64 = np.empty(n, np.float64)
    k.run({"out": o64, "i": i, "h": h}, n=n)
    assert np.array_equal(o64, (h.astype(np.float32) * i.astype(np.float32) + 1).astype(np.float64))
    ik = kernels.fused("max(a, b) * 3 - a", dtype="int32")
    a, b = rng.integers(-1000, 1000, n).astype(np.int32), rng.integers(-1000, 1000, n).astype(np.int32)
    oi = np.empty(n, np.int32)
    ik.run([oi, a, b], n=n)
    assert np.array_equal(oi, np.maximum(a, b) * 3 - a)


@needs_cc
def test_fused_shares_the_library_loop() -> None:
    """fused() renders through the same skeleton and op table as the prebuilt kernels."""
    lib = kernels.get("add").source
    run = kernels.fused("add(a, b)").source
    body = lambda s, e: s[s.index("/* BEGIN " + e):].replace(e, "ENTRY")  # noqa: E731
    assert body(lib, "svod_add_f32") == body(run, kernels.fused("add(a, b)").entry_point)


@pytest.mark.parametrize("expr, why", [
    ("", "non-empty"), ("a +", "cannot parse"), ("a.b", "Attribute"), ("foo(a)", "unknown function"),
    ("exp(a, b)", "takes 1"), ("A + b", "lower-case"), ("a if b else c", "IfExp"), ("1 + 2", "uses no input"),
    ("a < b < c", "single comparison"), ("a ** 2", "BinOp"), ("exp(x=a)", "takes 1"), ("__import__('os')", "unknown"),
    ("a[0]", "Subscript"), ("(" * 300 + "a" + ")" * 300, "cannot parse"), ("+".join(["a"] * 600), "more than"),
    ("+".join(["a"] * 100), "deep"),
], ids=lambda v: v[:24])  # fmt: skip
def test_fused_rejects_bad_expressions(expr: str, why: str) -> None:
    with pytest.raises(KernelParamError, match=why):
        kernels.fused(expr)


def test_fused_rejects_bad_dtypes() -> None:
    with pytest.raises(KernelParamError, match="float dtype"):
        kernels.fused("exp(a)", dtype="int32")
    with pytest.raises(KernelParamError, match="not an integer"):
        kernels.fused("a * 0.5", dtype="int32")
    with pytest.raises(KernelParamError, match="storage dtype only"):
        kernels.fused("a", dtype="bool")
    with pytest.raises(KernelParamError, match="does not use"):
        kernels.fused("a", input_dtypes={"b": "float16"})
    with pytest.raises(KernelParamError, match="exactly once"):
        kernels.fused("a + b", inputs=["a"])
    with pytest.raises(KernelParamError, match="not supported"):
        kernels.fused("a", dtype="complex64")


def test_parse_expr_orders_inputs_by_first_use() -> None:
    assert parse_expr("where(c > 0, x * w, b)").names == ("c", "x", "w", "b")
    assert parse_expr("gelu(a) + exp(a)").flops == 51


# --- reductions ---------------------------------------------------------------------------------

REDUCE_SHAPES = [(1, 1, 1), (1, 17, 1), (3, 1, 5), (5, 7, 3), (2, 1000, 1), (13, 31, 37), (1, 70001, 1), (4, 3, 200)]


def _reduce_ref(op: str, v: Any) -> Any:
    return {"sum": np.sum, "max": np.max, "mean": np.mean}[op](v, axis=1)


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_reductions(op: str) -> None:
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
        "outer": 6, "red": 4, "inner": 5, "so": 20, "sr": 5, "si": 1}  # fmt: skip
    t = a.transpose(0, 2, 1, 3)
    with pytest.raises(KernelParamError, match="collapse"):
        kernels.reduce_vars(t.shape, [s // 4 for s in t.strides], 3)


# --- softmax / layernorm -----------------------------------------------------------------------

ROWS = [(1, 1), (1, 7), (3, 17), (5, 1000), (64, 257), (2, 4099)]
RTOL = {"float32": 1e-5, "float64": 1e-13, "float16": 2e-3, "bfloat16": 1.6e-2}


@pytest.mark.parametrize("dt", FLOATS)
def test_softmax(dt: str) -> None:
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


@pytest.mark.parametrize("dt", FLOATS)
def test_layernorm(dt: str) -> None:
    k = kernels.get("layernorm", dtype=dt)
    assert k.var_names == ["rows", "cols", "eps", "core_id_count", "core_id"]
    for rows, cols in ROWS[1:]:
        for eps in (1e-5, 0.1):
            x = store(dt, rng.normal(1, 3, (rows, cols)))
            w, b = store(dt, rng.normal(0, 1, cols)), store(dt, rng.normal(0, 1, cols))
            out = empty(dt, (rows, cols))
            k.run([out, x, w, b], rows=rows, cols=cols, eps=eps)
            v = value(dt, x)
            eps32 = float(np.float32(eps))
            xhat = (v - v.mean(1, keepdims=True)) / np.sqrt(v.var(1, keepdims=True) + eps32)
            want = xhat * value(dt, w) + value(dt, b)
            # one rounding to the storage type + the math type's error on the terms (documented bound)
            storage = {"float16": 2.0**-10, "bfloat16": 2.0**-7}.get(dt, 0.0)
            math_eps = np.finfo(np.float64 if dt == "float64" else np.float32).eps
            tol = storage * np.abs(want) + 64 * math_eps * (np.abs(xhat * value(dt, w)) + np.abs(value(dt, b)))
            assert np.all(np.abs(value(dt, out) - want) <= tol), (dt, rows, cols, eps)


# --- matmul --------------------------------------------------------------------------------------

MM_SHAPES = [(1, 1, 1), (1, 17, 1), (7, 5, 3), (13, 29, 31), (97, 101, 103), (64, 35, 259), (50, 260, 7)]


def _check_matmul(k: Any, dt: str, m: int, n: int, kk: int, threads: Optional[int] = None) -> None:
    a, b = rng.uniform(-1, 1, (m, kk)).astype(dt), rng.uniform(-1, 1, (kk, n)).astype(dt)
    c = np.full((m, n), np.nan, dtype=dt)
    k.run([c, a, b], M=m, N=n, K=kk, threads=threads)
    want = a.astype(np.float64) @ b.astype(np.float64)
    bound = 2 * kk * np.finfo(dt).eps * (np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64))
    assert np.all(np.abs(c - want) <= bound + 1e-30), (dt, m, n, kk)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_matmul_default_tile(dt: str) -> None:
    k = kernels.get("matmul", dtype=dt)
    for m, n, kk in MM_SHAPES:
        _check_matmul(k, dt, m, n, kk)
    _check_matmul(k, dt, 301, 131, 300, threads=2)
    _check_matmul(k, dt, 5, 9, 11, threads=2)  # fewer rows than core ids x tile


_SMALL_STACK = """
import sys, threading
import numpy as np
from svod_min import kernels
ok = []
def run():
    for dt in ("float32", "float64"):
        a, b = np.ones((70, 900), dt), np.full((900, 90), 0.5, dt)
        c = np.empty((70, 90), dt)
        kernels.get("matmul", dtype=dt).bind([c, a, b], M=70, N=90, K=900, threads=1)()
        ok.append(bool(np.all(c == 450.0)))
threading.stack_size(1 << 20)  # what runtimes that make 1 MiB threads give a kernel
t = threading.Thread(target=run)
t.start()
t.join()
print(ok)
"""


def test_matmul_fits_a_one_mib_thread_stack() -> None:
    # The pack buffers live on the stack (docs/kernels.md): an overflow would kill the process.
    proc = subprocess.run([sys.executable, "-c", _SMALL_STACK], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))  # fmt: skip
    assert proc.returncode == 0 and proc.stdout.strip() == "[True, True]", (proc.returncode, proc.stderr[-2000:])


@needs_cc
@pytest.mark.parametrize("inst", instances("matmul"), ids=lambda p: "%s-%dx%d" % (p["dtype"], p["mr"], p["nr"]))
def test_matmul_every_tile(inst: Dict[str, Any]) -> None:
    k = kernels.get("matmul", **inst)
    assert (k.params["mr"], k.params["nr"]) == (inst["mr"], inst["nr"])
    for m, n, kk in MM_SHAPES[2:5]:
        _check_matmul(k, inst["dtype"], m, n, kk)


# --- data movement -------------------------------------------------------------------------------

COPY_DTYPES = ("float32", "float64", "float16", "bfloat16", "int32", "bool")


def _random(dt: str, shape: Any) -> Any:
    if dt == "bool":
        return rng.random(shape) < 0.5
    if dt == "int32":
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    return store(dt, rng.standard_normal(shape))


@pytest.mark.parametrize("dt", COPY_DTYPES)
def test_transpose(dt: str) -> None:
    k = kernels.get("transpose", dtype=dt)
    for rows, cols in [(1, 1), (1, 37), (37, 1), (33, 65), (100, 3), (64, 64)]:
        x = _random(dt, (rows, cols))
        out = np.empty((cols, rows), dtype=x.dtype)
        k.run([out, x], rows=rows, cols=cols)
        assert np.array_equal(out, x.T)


@pytest.mark.parametrize("dt", COPY_DTYPES)
def test_permute_expand_and_slices(dt: str) -> None:
    k = kernels.get("permute", dtype=dt)
    base = _random(dt, (3, 5, 7, 2))
    item = base.itemsize
    views = [base.transpose(2, 0, 3, 1), base.transpose(3, 2, 1, 0), base[:, ::2, 1:, :], base[1],
             np.broadcast_to(base[:1, :1, :1], (4, 5, 1, 2)), base.reshape(-1)[::3]]  # fmt: skip
    for view in views:
        var = kernels.permute_vars(view.shape, [s // item for s in view.strides])
        out = np.empty(view.shape, dtype=base.dtype)
        start = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // item
        src = base.reshape(-1)[start:]
        k.run([out, src], **var)
        assert np.array_equal(out, view)


def _conv_ref(x: Any, w: Any, bias: Any, s: Any, p: Any, d: Any) -> Any:
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    xp = np.zeros((n, c, h + 2 * p[0], wd + 2 * p[1]), dtype=np.float64)
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + wd] = x
    out = np.zeros((n, oc, oh, ow)) + (0 if bias is None else bias.reshape(1, -1, 1, 1))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * d[0], i * d[0] + s[0] * (oh - 1) + 1, s[0])
            cols = slice(j * d[1], j * d[1] + s[1] * (ow - 1) + 1, s[1])
            patch = xp[:, :, rows, cols]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


CONVS = [  # N, C, H, W, OC, KH, KW, stride, pad, dilation
    (1, 1, 1, 1, 1, 1, 1, (1, 1), (0, 0), (1, 1)), (2, 3, 7, 5, 4, 3, 3, (1, 1), (1, 1), (1, 1)),
    (1, 2, 13, 11, 3, 3, 2, (2, 3), (1, 0), (1, 1)), (3, 4, 9, 17, 5, 2, 3, (1, 2), (2, 2), (2, 1)),
    (1, 1, 5, 5, 2, 5, 5, (1, 1), (0, 0), (1, 1)), (1, 3, 31, 29, 2, 1, 1, (3, 3), (0, 0), (1, 1)),
]  # fmt: skip


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(dt: str, bias: bool) -> None:
    k = kernels.get("conv2d", dtype=dt, bias=bias)
    for n, c, h, wd, oc, kh, kw, s, p, d in CONVS:
        x = rng.standard_normal((n, c, h, wd)).astype(dt)
        w = rng.standard_normal((oc, c, kh, kw)).astype(dt)
        bvec = rng.standard_normal(oc).astype(dt) if bias else None
        want = _conv_ref(x, w, bvec, s, p, d)
        out = np.full(want.shape, np.nan, dtype=dt)
        var = dict(N=n, C=c, H=h, W=wd, OC=oc, KH=kh, KW=kw, sh=s[0], sw=s[1], ph=p[0], pw=p[1], dh=d[0], dw=d[1])
        k.run([out, x, w] + ([bvec] if bias else []), **var)
        bound = _conv_ref(np.abs(x), np.abs(w), None if bvec is None else np.abs(bvec), s, p, d)
        assert np.all(np.abs(out - want) <= 2 * c * kh * kw * np.finfo(dt).eps * bound + 1e-30), (dt, x.shape, w.shape)


def test_conv2d_refuses_a_kernel_larger_than_the_padded_input() -> None:
    k = kernels.get("conv2d")
    x, w, out = np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 3, 3), np.float32), np.zeros(1, np.float32)
    with pytest.raises(KernelArgumentError, match="violate"):
        k.run([out, x, w], N=1, C=1, H=2, W=2, OC=1, KH=3, KW=3, sh=1, sw=1, ph=0, pw=0, dh=1, dw=1)


@pytest.mark.parametrize("dt", COPY_DTYPES)
def test_fill(dt: str) -> None:
    for n in (0, 1, 4099, 100003):
        v = _random(dt, 1)
        out = _random(dt, max(n, 1))
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


def test_catalogue_lists_every_kernel_with_params() -> None:
    cat = kernels.catalogue()
    required = {"add", "sub", "mul", "div", "max", "min", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "relu",
                "gelu", "sigmoid", "tanh", "where", "cast", "reduce_sum", "reduce_max", "reduce_mean", "softmax",
                "layernorm", "matmul", "transpose", "permute", "conv2d", "fill", "arange"}  # fmt: skip
    assert required <= set(cat)
    for name, info in cat.items():
        assert info["instances"], name
        assert "dtype" in info["params"] and info["doc"], name
        kernels.find_sig(name)  # defaults resolve


def test_every_instance_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every catalogue instance the host's prebuilt object holds loads without compiling."""
    if HOST_VARIANT is None:
        pytest.skip("no prebuilt object for this host")
    import svod_min.cache.kernel_cache as kc

    def no_compile(*a: Any, **k: Any) -> bytes:
        raise AssertionError("compiled although the kernel is prebuilt")

    monkeypatch.setattr(kc, "compile_cached", no_compile)
    n = 0
    for name, info in kernels.catalogue().items():
        for params in info["instances"]:
            sig = kernels.find_sig(name, HOST_VARIANT, **params)
            if kprebuilt.has_entry(HOST_VARIANT, sig.entry):
                k = kernels.get(name, prebuilt=True, **params)
                assert k.prebuilt and k.variant == HOST_VARIANT and k.program.address
                n += 1
    assert n > 100


def test_kernel_object_describes_itself() -> None:
    k = kernels.get("matmul", dtype="f32")
    assert k.entry_point.startswith("svod_matmul_f32_") and k.global_size == ("core_id_count", 1, 1)
    assert [(b.name, b.role, b.count) for b in k.buffers] == [("c", "w", "M*N"), ("a", "r", "M*K"), ("b", "r", "K*N")]
    assert k.var_names == ["M", "N", "K", "core_id_count", "core_id"] and k.core_id_index == 4
    assert k.flops == "2*M*N*K" and k.counts(M=2, N=3, K=4) == {"c": 6, "a": 8, "b": 12}
    assert "svod_matmul_f32" in k.source and "#include" not in k.source
    assert len(k.sig.prototype._argtypes_) == 8
    vals, gsize = k.launch(M=600, N=600, K=600, threads=2)
    assert vals[:3] == [600, 600, 600] and gsize == (2, 1, 1) and vals[3] == 2
    assert kernels.get("matmul", dtype="float32") is k


def test_run_validates_before_dispatch() -> None:
    k = kernels.get("add")
    a, b, out = np.ones(8, np.float32), np.ones(8, np.float32), np.zeros(8, np.float32)
    cases = [
        (lambda: k.run([out, a, b], n=9), "holds 8 float32 elements"),
        (lambda: k.run([out, a, b.astype(np.float64)], n=8), "must be float32"),
        (lambda: k.run([out, a], n=8), "takes 3 buffers"),
        (lambda: k.run([out, a, b]), "needs variables"),
        (lambda: k.run([out, a, b], n=8, m=1), "unexpected"),
        (lambda: k.run([out, a, b], n=-1), "outside"),
        (lambda: k.run([out, a, b], n=2**31), "outside"),
        (lambda: k.run([out, a, b], n=8, core_id=1), "unexpected"),
        (lambda: k.run([out, a, b], n=8, core_id_count=2), "threads="),
        (lambda: k.run([out, a, b], n=8.5), "not an integer"),
        (lambda: k.run([out.ctypes.data, a, b], n=8), "raw addresses"),
        (lambda: k.run([np.zeros(16, np.float32)[::2], a, b], n=8), "C-contiguous"),
        (lambda: k.run([a[:0].reshape(0), a, b], n=1), "holds 0"),
        (lambda: k.run([out, a, b], n=8, threads=0), "positive"),
        (lambda: k.run({"out": out, "a": a}, n=8), "missing"),
        (lambda: k.run([out, a, "b"], n=8), "cannot pass str"),
        (lambda: k.run([out, a, b.astype(">f4")], n=8), "byte order"),
    ]
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    cases.append((lambda: k.run([ro, a, b], n=8), "read-only"))
    for call, msg in cases:
        with pytest.raises(KernelArgumentError, match=msg):
            call()
        assert not out.any()  # nothing ran
    assert issubclass(KernelArgumentError, ExecutionError) and KernelArgumentError.__bases__ == (ExecutionError,)


def test_run_refuses_overlap_but_allows_exact_inplace() -> None:
    k = kernels.get("add")
    buf = np.arange(16, dtype=np.float32)
    with pytest.raises(KernelArgumentError, match="overlap"):
        k.run([buf[1:9], buf[0:8], buf[8:16]], n=8)
    k.run([buf[0:8], buf[0:8], buf[8:16]], n=8)  # out is a: allowed elementwise
    assert np.array_equal(buf[:8], np.arange(8) + np.arange(8, 16))
    k.run([buf[0:4], buf[4:8], buf[8:12]], n=4)  # disjoint parts of one array
    mm = kernels.get("matmul")
    m = np.ones((4, 4), np.float32)
    with pytest.raises(KernelArgumentError, match="overlap"):
        mm.run([m, m, np.ones((4, 4), np.float32)], M=4, N=4, K=4)


def test_run_accepts_cpu_buffers_and_mappings() -> None:
    from svod_min.devices.cpu.device import create_cpu_device

    dev = create_cpu_device()
    a, b, out = dev.allocate((100,), "float32"), dev.allocate((100,), "float32"), dev.allocate((100,), "float32")
    import ctypes

    for buf, vals in ((a, range(100)), (b, [2.0] * 100)):
        arr = (ctypes.c_float * 100).from_address(buf.address)
        arr[:] = list(vals)
    kernels.get("mul").run({"out": out, "a": a, "b": b}, n=100)
    got = (ctypes.c_float * 100).from_address(out.address)
    assert list(got) == [2.0 * i for i in range(100)]
    with pytest.raises(KernelArgumentError, match="holds 100"):
        kernels.get("mul").run([out, a, b], n=101)
    call = kernels.get("add").bind([out, a, b], n=100)
    call()
    assert got[3] == 5.0


def test_bad_names_params_and_devices() -> None:
    with pytest.raises(KernelNotFoundError, match="did you mean matmul"):
        kernels.get("matmull")
    with pytest.raises(KernelParamError, match="no parameter"):
        kernels.get("add", tile=3)
    with pytest.raises(KernelParamError, match="not supported"):
        kernels.get("exp", dtype="int32")
    with pytest.raises(KernelParamError, match="not supported"):
        kernels.get("add", dtype="int8")
    with pytest.raises(KernelParamError, match="mr=5"):
        kernels.get("matmul", mr=5)
    with pytest.raises(KernelParamError, match="no instance"):
        kernels.get("matmul", mr=4, nr=16)
    with pytest.raises(KernelParamError, match="no instance"):
        kernels.get("cast", dtype="float32", out_dtype="float32")
    with pytest.raises(KernelParamError, match="bias=1"):
        kernels.get("conv2d", bias=1)
    with pytest.raises(UnsupportedDeviceError, match="PTX"):
        kernels.get("add", device="CUDA")
    with pytest.raises(UnsupportedDeviceError):
        kernels.get("add", device="METAL")
    with pytest.raises(SvodError):
        kernels.get("add", device="TPU")
    assert issubclass(KernelParamError, PlanError) and KernelNotFoundError.__bases__ == (KernelParamError,)


def test_dtype_aliases_resolve_to_one_instance() -> None:
    assert kernels.get("add", dtype="f32") is kernels.get("add", dtype=np.float32) is kernels.get("add")
    assert kernels.get("exp", dtype="half").params["dtype"] == "float16"


# --- prebuilt selection and loading --------------------------------------------------------------


def test_variant_choice_follows_cpu_features(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.delenv(kprebuilt.VARIANT_ENV, raising=False)
    avx2 = frozenset({"sse2", "avx", "avx2", "fma", "f16c"})
    assert kprebuilt.choose_variant("x86_64", avx2) == "x86_64-avx2"
    v4 = TARGETS["x86_64-v4"].requires | {"sse2"}
    assert kprebuilt.choose_variant("x86_64", v4) == "x86_64-v4"
    assert kprebuilt.choose_variant("x86_64", avx2 | {"avx512f"}) == "x86_64-avx2"  # AVX-512 F alone is not v4
    assert kprebuilt.choose_variant("x86_64", frozenset({"sse2", "avx2"})) == "x86_64-baseline"
    assert kprebuilt.choose_variant("aarch64", frozenset()) == "aarch64-baseline"
    for arch in ("riscv64", "ppc64le", "loongarch64"):
        assert kprebuilt.choose_variant(arch, frozenset()) == arch + "-baseline"
    assert kprebuilt.choose_variant("mips64", frozenset()) is None
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: X\nflags\t\t: fpu sse2 avx avx2 fma f16c\n\nprocessor\t: 1\n")
    assert {"avx2", "fma"} <= kprebuilt.cpu_features(str(info))
    monkeypatch.setenv(kprebuilt.VARIANT_ENV, "none")
    assert kprebuilt.choose_variant() is None
    monkeypatch.setenv(kprebuilt.VARIANT_ENV, "bogus")
    with pytest.raises(KernelParamError, match="bogus"):
        kprebuilt.choose_variant()


@pytest.mark.skipif(not (HOST_VARIANT or "").startswith("x86_64"), reason="x86_64 prebuilt objects only run here")
def test_every_x86_variant_this_cpu_runs_computes_correctly(monkeypatch: pytest.MonkeyPatch) -> None:
    have = cpu_features()
    variants = [name for name, v in sorted(generated().VARIANTS.items())
                if v["arch"] == "x86_64" and set(v["requires"]) <= have]  # fmt: skip
    assert HOST_VARIANT in variants and "x86_64-baseline" in variants
    n = 4099
    a = rng.uniform(0.1, 4, n).astype(np.float32)
    h = rng.uniform(-9, 9, n).astype(np.float16)
    for v in variants:
        monkeypatch.setenv(kprebuilt.VARIANT_ENV, v)
        assert kernels.host_variant() == v
        k = kernels.get("log", dtype="float32", prebuilt=True)
        assert k.variant == v
        out = np.empty(n, np.float32)
        k.run([out, a], n=n)
        check_elementwise("log", "float32", out, [a])
        oh = np.empty(n, np.float16)
        kernels.get("gelu", dtype="float16", prebuilt=True).run([oh, h], n=n)
        check_elementwise("gelu", "float16", oh, [h])
        _check_matmul(kernels.get("matmul", prebuilt=True), "float32", 37, 41, 300)
        _check_matmul(kernels.get("matmul", dtype="float64", prebuilt=True), "float64", 19, 23, 150)
        assert v in kprebuilt.loaded_variants()


def test_import_is_lazy() -> None:
    code = textwrap.dedent("""
        import sys
        from svod_min import kernels
        from svod_min.kernels import variants as prebuilt
        assert prebuilt.loaded_variants() == []
        assert "svod_min.kernels._generated.signatures" not in sys.modules
        assert "jinja2" not in sys.modules
        k = kernels.get("add")
        assert "jinja2" not in sys.modules
        print(prebuilt.loaded_variants())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str([HOST_VARIANT] if HOST_VARIANT else [])


@needs_prebuilt
def test_prebuilt_kernels_work_without_any_compiler(tmp_path: Any) -> None:
    """PATH without clang/gcc and SVOD_CC unset: library kernels still run; fused() says why it cannot."""
    code = textwrap.dedent("""
        import numpy as np
        from svod_min import kernels
        from svod_min.error import CompilerNotFoundError
        a = np.arange(1000, dtype=np.float32); b = np.full(1000, 2, np.float32); out = np.empty_like(a)
        kernels.get("add").run([out, a, b], n=1000)
        assert np.array_equal(out, a + b)
        x = np.random.default_rng(0).random((33, 47), dtype=np.float32)
        y = np.random.default_rng(1).random((47, 29), dtype=np.float32)
        c = np.empty((33, 29), np.float32)
        kernels.get("matmul").run([c, x, y], M=33, N=29, K=47)
        assert np.allclose(c, x @ y, rtol=1e-5)
        s = np.empty_like(x)
        kernels.get("softmax").run([s, x], rows=33, cols=47)
        assert np.allclose(s.sum(1), 1, rtol=1e-5)
        e = np.empty_like(a)
        kernels.get("exp", dtype="float32").run([e, a / 100], n=1000)
        assert np.allclose(e, np.exp(a / 100), rtol=1e-6)
        try:
            kernels.fused("relu(a*b+c)")
        except CompilerNotFoundError as exc:
            assert "no C compiler" in str(exc), exc
            print("no-compiler-ok")
        else:
            raise SystemExit("fused() compiled without a compiler")
    """)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "SVOD_CC"}
    env["PATH"] = str(empty)
    env["SVOD_OBJECT_CACHE_DIR"] = str(tmp_path / "cache")  # a warm cache must not hide the missing compiler
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no-compiler-ok" in out.stdout


def test_get_prebuilt_false_compiles_the_rendered_source() -> None:
    if not HAVE_CC:
        with pytest.raises(CompilerNotFoundError):
            kernels.get("add", prebuilt=False)
        return
    k = kernels.get("sigmoid", prebuilt=False)
    assert not k.prebuilt
    x = rng.uniform(-20, 20, 999).astype(np.float32)
    out = np.empty_like(x)
    k.run([out, x], n=999)
    check_elementwise("sigmoid", "float32", out, [x])


# --- the objects and PTX themselves ----------------------------------------------------------------

def _manifest() -> Dict[str, Any]:
    path = os.path.join(os.path.dirname(kernels.__file__), "prebuilt", "manifest.json")
    with open(path) as fh:
        return json.load(fh)


#: Size budget of one prebuilt library object (the largest today: x86_64 baseline, ~350 KiB; x86_64-v4
#: ~346 KiB), and of all of them together (seven variants, ~1.69 MB today), which every wheel carries.
VARIANT_BUDGET = 400_000
TOTAL_BUDGET = 1_900_000


def test_prebuilt_objects_are_self_contained_and_small() -> None:
    import hashlib

    from svod_min.jit_loader.elf import STB_WEAK, parse_object
    from svod_min.jit_loader.layout import ARCHES
    from svod_min.jit_loader.rt_helpers import TUNABLE_NAMES

    total = 0
    objects = _manifest()["objects"]
    assert len(objects) == 7, sorted(objects)
    for name, desc in objects.items():
        with open(kprebuilt.object_path(name), "rb") as fh:
            data = fh.read()
        total += len(data)
        assert hashlib.sha256(data).hexdigest() == desc["sha256"] and len(data) == desc["size"]
        assert len(data) <= VARIANT_BUDGET, (name, len(data))
        elf = parse_object(data, tuple(ARCHES))
        undefined = {s.name: s.bind for s in elf.symbols if s.name and s.shndx == 0 and s.name != ".TOC."}
        # no libm, no compiler-rt (ppc64le's .TOC. is the loader's own): only the weak per-machine values
        # the loader supplies
        assert all(n in TUNABLE_NAMES and bind == STB_WEAK for n, bind in undefined.items()), (name, undefined)
    assert total <= TOTAL_BUDGET, total


def _aarch64_object() -> bytes:
    with open(kprebuilt.object_path("aarch64-baseline"), "rb") as fh:
        return fh.read()


def test_aarch64_prebuilt_relocates() -> None:
    obj = _aarch64_object()
    image = relocate(obj, 0x40000000, lambda name: pytest.fail("unexpected external %s" % name))
    assert image.symbols["svod_add_f32"] >= 0x40000000 and len(image.image) == image.size
    assert len([s for s in image.symbols if s.startswith("svod_")]) > 100


@pytest.mark.skipif(shutil.which("objdump") is None or not (HOST_VARIANT or "").startswith("x86_64"),
                    reason="x86-64 with objdump only")
@pytest.mark.parametrize("compiler", ["clang", "gcc"])
def test_matmul_tile_is_a_register_tile_with_either_compiler(compiler: str, tmp_path: Any) -> None:
    """The 6x16 float32 tile compiled for AVX2 keeps its 12 accumulators in 12 ymm registers (gcc once
    took the tile through memory and ran at a tenth of clang's speed)."""
    if shutil.which(compiler) is None:
        pytest.skip("%s is not installed" % compiler)
    from svod_min.compiler import clang

    source = kernels.get("matmul", dtype="float32", mr=6, nr=16).source
    path = tmp_path / "mm.o"
    path.write_bytes(clang.compile_c(source, compiler=compiler, extra_flags=["-march=x86-64", "-mavx2", "-mfma"]))
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True).stdout
    body = text.split("<svod_matmul_f32_6x16>:", 1)[1].split("\n\n", 1)[0]
    accumulators = {line.rsplit(",", 1)[1].strip() for line in body.splitlines() if "vfmadd" in line and "ymm" in line}
    assert len(accumulators) >= 12, sorted(accumulators)


@pytest.mark.skipif(shutil.which("objdump") is None or not (HOST_VARIANT or "").startswith("x86_64"),
                    reason="x86-64 with objdump only (another host's objdump may not read x86 code)")
def test_x86_64_v4_matmul_tile_is_avx512_code(tmp_path: Any) -> None:
    """The v4 variant's default matmul tiles keep their accumulators in 512-bit registers (FMA on zmm)."""
    path = tmp_path / "library.o"
    path.write_bytes(open(kprebuilt.object_path("x86_64-v4"), "rb").read())
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True).stdout
    for dt, short in (("float32", "f32"), ("float64", "f64")):
        tile = generated().PREFERRED["x86_64-v4"]["matmul"][dt]
        body = text.split("<svod_matmul_%s_%dx%d>:" % (short, tile["mr"], tile["nr"]), 1)[1].split("\n\n", 1)[0]
        fmas = [line for line in body.splitlines() if "vfmadd" in line]
        assert len(fmas) >= tile["mr"] * 2 and all("zmm" in line for line in fmas), (dt, fmas[:4])
        accumulators = {line.rsplit(",", 1)[1].strip() for line in fmas}
        assert len(accumulators) >= tile["mr"] * 2, (dt, sorted(accumulators))  # a register tile: no spills


@pytest.mark.skipif(shutil.which("ld.lld") is None, reason="ld.lld (the linker oracle) is not installed")
@pytest.mark.parametrize("variant", ["aarch64-baseline", "x86_64-avx2", "x86_64-v4"])
def test_prebuilt_relocation_matches_lld(variant: str, tmp_path: Any) -> None:
    sys.path.insert(0, os.path.join(REPO, "tests"))
    osup = pytest.importorskip("support.oracle")
    with open(kprebuilt.object_path(variant), "rb") as fh:
        obj = fh.read()
    info = osup.parse_object(obj)
    base = 0x40000000
    externals = {"svod_stream_bytes": 0x7F1234560000}  # the loader's per-machine value (rt_helpers), and nothing else
    image = relocate(obj, base, lambda name: externals.get(name) or pytest.fail("unexpected external %s" % name))
    sec_addr = {name: image.sections[name] for name in info.sections}
    ours = osup.Memory([(image.base, image.image)], "ours")
    # lld -O0: keep SHF_MERGE constant pools as they are (lld dedupes them from -O1 on; the loader does not)
    wrapper = tmp_path / "ld.lld-O0"
    wrapper.write_text('#!/bin/sh\nexec %s -O0 "$@"\n' % shutil.which("ld.lld"))
    wrapper.chmod(0o755)
    linked = osup.link_with_lld(obj, info, sec_addr, externals, str(tmp_path), variant, lld=str(wrapper))
    result = osup.compare(info, ours, image.symbols, sec_addr, externals, linked, externals)
    assert not result.failures(), result.failures()[:5]
    assert len(result.results) > 100


def _ptxas() -> Optional[str]:
    for d in filter(None, [os.path.join(os.environ["CUDA_HOME"], "bin") if os.environ.get("CUDA_HOME") else None,
                           "/usr/local/cuda/bin"]):  # fmt: skip
        if os.access(os.path.join(d, "ptxas"), os.X_OK):
            return os.path.join(d, "ptxas")
    return shutil.which("ptxas")


PTX_MODULES = ["elementwise", "reduce", "softmax", "transpose", "matmul"]


@pytest.mark.parametrize("module", PTX_MODULES)
def test_ptx_modules_exist_with_low_version(module: str) -> None:
    with open(kernels.ptx_path(module)) as fh:
        text = fh.read()
    assert text.startswith("// GENERATED by python -m codegen")
    version = [line for line in text.splitlines() if line.startswith(".version ")][0].split()[1]
    assert tuple(map(int, version.split("."))) <= (7, 8), version
    assert ".target sm_75" in text
    entries = {s.entry for s in kernels.cuda_kernels() if s.module == module}
    assert entries and all(".entry %s(" % e in text for e in entries)


@pytest.mark.skipif(_ptxas() is None, reason="ptxas not found (CUDA toolkit: CUDA_HOME or /usr/local/cuda)")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_ptx_passes_ptxas(arch: str, tmp_path: Any) -> None:
    for module in PTX_MODULES:
        proc = subprocess.run([_ptxas(), "-arch=" + arch, kernels.ptx_path(module), "-o", str(tmp_path / "m.cubin")],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert proc.returncode == 0, (module, arch, proc.stderr)


def test_cuda_signatures_have_launch_expressions() -> None:
    from svod_min.kernels.sig import eval_dim

    sigs = kernels.cuda_kernels()
    names = {s.name for s in sigs}
    assert {"add", "exp", "reduce_sum", "softmax", "transpose", "matmul"} <= names
    mm = [s for s in sigs if s.name == "matmul" and dict(s.params)["tile"] == 16][0]
    env = {"M": 100, "N": 33, "K": 7}
    assert tuple(eval_dim(d, env) for d in mm.grid) == (3, 7, 1) and mm.block == (16, 16, 1)


def test_generated_files_say_so() -> None:
    gen = os.path.join(os.path.dirname(kernels.__file__), "_generated")
    for dirpath, _dirs, files in os.walk(gen):
        for name in files:
            if name.endswith((".c", ".h", ".cu", ".ptx", ".py")):
                with open(os.path.join(dirpath, name)) as fh:
                    assert "GENERATED by python -m codegen" in fh.readline(), name
    with open(os.path.join(os.path.dirname(kernels.__file__), "prebuilt", "manifest.json")) as fh:
        assert "GENERATED by python -m codegen" in fh.readline()


def _split_cases() -> List[Any]:
    x = rng.standard_normal((37, 301)).astype(np.float32)
    w, b = rng.standard_normal(301).astype(np.float32), rng.standard_normal(301).astype(np.float32)
    cases = [
        ("reduce_sum", [x], dict(kernels.reduce_vars((37, 301), (301, 1), 1)), (37,)),
        ("reduce_max", [x], dict(kernels.reduce_vars((37, 301), (301, 1), 0)), (301,)),
        ("softmax", [x], dict(rows=37, cols=301), (37, 301)),
        ("layernorm", [x, w, b], dict(rows=37, cols=301, eps=1e-5), (37, 301)),
        ("transpose", [x], dict(rows=37, cols=301), (301, 37)),
        ("permute", [x], kernels.permute_vars((301, 37), (1, 301)), (301, 37)),
        ("matmul", [x[:, :37].copy(), x[:37, :].copy()], dict(M=37, N=301, K=37), (37, 301)),
        ("exp", [x.reshape(-1)], dict(n=x.size), (x.size,)),
        ("arange", [], dict(n=5000, start=3, step=7), (5000,)),
    ]
    xc = rng.standard_normal((2, 3, 19, 17)).astype(np.float32)
    wc = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    conv = dict(N=2, C=3, H=19, W=17, OC=5, KH=3, KW=3, sh=2, sw=1, ph=1, pw=1, dh=1, dw=1)
    cases.append(("conv2d", [xc, wc], conv, (2, 5, 10, 17)))
    return cases


@pytest.mark.parametrize("name, ins, var, shape", _split_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_thread_split_is_invisible(name: str, ins: List[Any], var: Dict[str, int], shape: Any) -> None:
    """Splitting over core ids changes no bit of the result (each output is computed the same way)."""
    k = kernels.get(name)
    outs = []
    for threads in (1, 2, 3, 7):
        out = np.full(shape, np.nan, np.float32)
        k.run([out, *ins], threads=threads, **var)
        outs.append(out)
    assert not np.isnan(outs[0]).any()
    for other in outs[1:]:
        assert np.array_equal(outs[0], other)


def test_device_argument_accepts_a_cpu_device() -> None:
    from svod_min.devices.cpu.device import CpuDevice

    dev = CpuDevice(threads=3)
    k = kernels.get("add", device=dev)
    assert k.program.device is dev and k is not kernels.get("add")
    vals, gsize = k.launch(n=10**7)
    assert k.threads_for({"n": 10**7}) == 3 and gsize == (3 * k.sig.ids_per_thread, 1, 1)
    with pytest.raises(KernelParamError, match="device must be"):
        kernels.get("add", device=3.5)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_rendered_sources_compile_with_gcc_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback path is not clang-only: gcc builds the same sources (clang pragmas are ignored)."""
    monkeypatch.setenv("SVOD_CC", "gcc")
    _check_matmul(kernels.get("matmul", prebuilt=False, mr=8, nr=8), "float32", 37, 29, 300)
    x = rng.uniform(-9, 9, 999).astype(np.float16)
    out = np.empty_like(x)
    kernels.get("tanh", dtype="float16", prebuilt=False).run([out, x], n=999)
    check_elementwise("tanh", "float16", out, [x])


def test_closing_a_program_does_not_break_the_library() -> None:
    k = kernels.get("neg")
    k.program.close()  # e.g. a plan releasing its programs
    with pytest.raises(ExecutionError, match="closed"):
        k.program.execute([0, 0], [0, 1, 0])
    again = kernels.get("neg")
    assert again is not k
    x = np.arange(5, dtype=np.float32)
    out = np.empty_like(x)
    again.run([out, x], n=5)
    kernels.get("abs").run([out, x], n=5)  # the shared mapping is still there
    assert np.array_equal(out, x)


# --- regressions from the 2026-11-24 review -------------------------------------------------------


@needs_cc
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_bool_output_tests_nonzero_in_the_compute_type(dtype: str) -> None:
    x = np.array([0.5, -0.25, 0.0, 3.0, np.nan], dtype=dtype)
    out = np.zeros(5, dtype=np.bool_)
    kernels.fused("a", dtype=dtype, out_dtype="bool").run([out, x], n=5)
    assert out.tolist() == (x != 0).tolist()  # numpy: 0.5 and nan are true; an int cast made 0.5 false


@pytest.mark.parametrize("expr, dtype, message", [
    ("max(a, 3000000000)", "int32", "constant 3000000000 does not fit int32"),
    ("a * 1099511627776", "int32", "constant 1099511627776 does not fit int32"),
    ("a * 1e39", "float32", r"constant 1e\+39 does not fit float32"),
    ("a + 1e39", "float16", r"constant 1e\+39 does not fit float32"),
    ("a + " + "9" * 400, "float64", "does not fit a double"),
])  # fmt: skip
def test_fused_constants_outside_the_compute_type_are_refused(expr: str, dtype: str, message: str) -> None:
    with pytest.raises(KernelParamError, match=message):
        kernels.fused(expr, dtype=dtype)


@needs_cc
def test_fused_int32_constants_at_the_limits_still_work() -> None:
    a = np.array([0, -5, 7], dtype=np.int32)
    out = np.zeros(3, dtype=np.int32)
    kernels.fused("max(a, -2147483647) + min(a, 2147483647) - a", dtype="int32").run([out, a], n=3)
    assert out.tolist() == a.tolist()


@pytest.mark.parametrize("kwargs, message", [
    ({"input_dtypes": [("a", "float16")]}, "input_dtypes must map input names to dtypes"),
    ({"inputs": 5}, "inputs must be a sequence of input names"),
    ({"inputs": "ab"}, "inputs must be a sequence of input names"),
])  # fmt: skip
def test_fused_argument_shapes_are_checked(kwargs: Dict[str, Any], message: str) -> None:
    with pytest.raises(KernelParamError, match=message):
        kernels.fused("a + b", **kwargs)


@pytest.mark.parametrize("call", [
    lambda: kernels.reduce_vars([4, 4], [4, 1], 0.5),
    lambda: kernels.reduce_vars([4, 4], [4, 1], None),
    lambda: kernels.reduce_vars(None, [4, 1], 0),
    lambda: kernels.permute_vars(None, None),
    lambda: kernels.get("add", variant="x"),
    lambda: kernels.ptx_path(None),
    lambda: kernels.ptx_path("../../etc/passwd"),
], ids=["axis-float", "axis-none", "shape-none", "permute-none", "variant-param", "ptx-none", "ptx-path"])  # fmt: skip
def test_helpers_refuse_bad_arguments_with_library_errors(call: Callable[[], Any]) -> None:
    with pytest.raises(KernelParamError):
        call()


def test_reduce_vars_accepts_numpy_integers() -> None:
    view = np.zeros((3, 4), np.float32)[:, ::2]
    strides = [s // view.itemsize for s in view.strides]
    assert kernels.reduce_vars(view.shape, strides, np.int64(1)) == kernels.reduce_vars([3, 2], [4, 2], 1)


def test_a_boolean_is_not_a_size() -> None:
    a = np.ones(4, np.float32)
    with pytest.raises(KernelArgumentError, match="variable n=True is a boolean, not an integer"):
        kernels.get("add").run([np.zeros(4, np.float32), a, a], n=True)


def test_threads_takes_numpy_integers_as_variables_do() -> None:
    a = np.ones(1 << 17, np.float32)
    out = np.zeros_like(a)
    kernels.get("add").run([out, a, a], n=a.size, threads=np.int64(2))
    assert float(out.min()) == float(out.max()) == 2.0
    for bad in (True, 0, 1.5, "2"):
        with pytest.raises(KernelArgumentError, match="threads must be a positive int"):
            kernels.get("add").run([out, a, a], n=a.size, threads=bad)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_matmul_default_tile_exists_without_a_variant(dt: str) -> None:
    """No prebuilt variant (an arch without objects, SVOD_KERNELS_VARIANT=none): the default tile has an instance."""
    sig = kernels.find_sig("matmul", None, dtype=dt)
    assert (sig.param_dict["mr"], sig.param_dict["nr"]) == ((4, 8) if dt == "float32" else (4, 4))
