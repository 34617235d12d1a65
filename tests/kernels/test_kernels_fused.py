"""Kernels fused at run time (``kernels.fused``): expressions, dtypes, constants and what is refused."""

from __future__ import annotations

from typing import Any, Dict

import pytest
from support.kernel_check import needs_cc, rng  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.kernels import KernelParamError  # noqa: E402
from svod_min.kernels.elementwise import parse_expr  # noqa: E402


@needs_cc
def test_fused_expression_matches_numpy(rng: Any) -> None:
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
def test_fused_where_compare_constants_and_dtypes(rng: Any) -> None:
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    out = np.empty(n, np.float32)
    kernels.fused("where(x > 0, x, 0.01*x) - -2").run([out, x], n=n)
    assert np.allclose(out, np.where(x > 0, x, 0.01 * x) + 2, rtol=1e-6)
    h = x.astype(np.float16)
    i = rng.integers(-5, 5, n).astype(np.int32)
    k = kernels.fused(
        "h * i + 1",
        dtype="float32",
        out_dtype="float64",
        input_dtypes={"h": "float16", "i": "int32"},
        inputs=["i", "h"],
    )
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
    body = lambda s, e: s[s.index("/* BEGIN " + e) :].replace(e, "ENTRY")  # noqa: E731
    assert body(lib, "svod_add_f32") == body(run, kernels.fused("add(a, b)").entry_point)


@pytest.mark.parametrize(
    "expr, why",
    [
        ("", "non-empty"),
        ("a +", "cannot parse"),
        ("a.b", "Attribute"),
        ("foo(a)", "unknown function"),
        ("exp(a, b)", "takes 1"),
        ("A + b", "lower-case"),
        ("a if b else c", "IfExp"),
        ("1 + 2", "uses no input"),
        ("a < b < c", "single comparison"),
        ("a ** 2", "BinOp"),
        ("exp(x=a)", "takes 1"),
        ("__import__('os')", "unknown"),
        ("a[0]", "Subscript"),
        ("(" * 300 + "a" + ")" * 300, "cannot parse"),
        ("+".join(["a"] * 600), "more than"),
        ("+".join(["a"] * 100), "deep"),
    ],
    ids=lambda v: v[:24],
)
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


@needs_cc
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fused_bool_output_tests_nonzero_in_the_compute_type(dtype: str) -> None:
    x = np.array([0.5, -0.25, 0.0, 3.0, np.nan], dtype=dtype)
    out = np.zeros(5, dtype=np.bool_)
    kernels.fused("a", dtype=dtype, out_dtype="bool").run([out, x], n=5)
    assert out.tolist() == (x != 0).tolist()  # numpy: 0.5 and nan are true; an int cast made 0.5 false


@pytest.mark.parametrize(
    "expr, dtype, message",
    [
        ("max(a, 3000000000)", "int32", "constant 3000000000 does not fit int32"),
        ("a * 1099511627776", "int32", "constant 1099511627776 does not fit int32"),
        ("a * 1e39", "float32", r"constant 1e\+39 does not fit float32"),
        ("a + 1e39", "float16", r"constant 1e\+39 does not fit float32"),
        ("a + " + "9" * 400, "float64", "does not fit a double"),
    ],
)
def test_fused_constants_outside_the_compute_type_are_refused(expr: str, dtype: str, message: str) -> None:
    with pytest.raises(KernelParamError, match=message):
        kernels.fused(expr, dtype=dtype)


@needs_cc
def test_fused_int32_constants_at_the_limits_still_work() -> None:
    a = np.array([0, -5, 7], dtype=np.int32)
    out = np.zeros(3, dtype=np.int32)
    kernels.fused("max(a, -2147483647) + min(a, 2147483647) - a", dtype="int32").run([out, a], n=3)
    assert out.tolist() == a.tolist()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"input_dtypes": [("a", "float16")]}, "input_dtypes must map input names to dtypes"),
        ({"inputs": 5}, "inputs must be a sequence of input names"),
        ({"inputs": "ab"}, "inputs must be a sequence of input names"),
    ],
)
def test_fused_argument_shapes_are_checked(kwargs: Dict[str, Any], message: str) -> None:
    with pytest.raises(KernelParamError, match=message):
        kernels.fused("a + b", **kwargs)
