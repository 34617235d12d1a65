"""Elementwise kernels, casts and named fused kernels against numpy in extended precision.

Shapes include 1, primes and sizes that are not multiples of any tile; each kernel is checked for every
dtype it claims, and approximations are held to the ulp bounds stated in docs/kernels.md.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.kernel_check import (  # noqa: F401 - rng is a fixture
    REF,
    SIZES,
    ULP,
    bf16_bits,
    check_elementwise,
    empty,
    instances,
    op_inputs,
    reference_dtype,
    rng,
    store,
    ulps,
    value,
)

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.kernels.elementwise import OPS  # noqa: E402

ELEMENTWISE = [(op, inst["dtype"]) for op in sorted(OPS) if op != "cast" for inst in instances(op)]


# --- elementwise -----------------------------------------------------------------------------


@pytest.mark.parametrize("op, dt", ELEMENTWISE)
def test_elementwise_against_numpy(op: str, dt: str, rng: Any) -> None:
    k = kernels.get(op, dtype=dt)
    assert [b.role for b in k.buffers] == ["w"] + ["r"] * OPS[op].arity
    for n in SIZES:
        ins = op_inputs(rng, op, dt, n)
        out = empty(dt, n)
        k.run([out, *ins], n=n)
        check_elementwise(op, dt, out, ins)


@pytest.mark.parametrize("op", ["add", "exp", "gelu"])
def test_elementwise_threaded_matches_single(op: str, rng: Any) -> None:
    k = kernels.get(op, dtype="float32")
    n = 200003
    ins = op_inputs(rng, op, "float32", n)
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
    x = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            np.nan,
            1.0,
            -1.0,
            tiny,
            tiny / 8,
            -tiny,
            1e-30,
            1e30,
            -1e30,
            88.72,
            89.0,
            -87.3,
            -103.5,
            -104.5,
            709.7,
            710.0,
            -745.0,
            -746.0,
        ],
        dtype=dt,
    )
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


@pytest.mark.from_source_sample
def test_exp_log_dense_sweep_ulp_bounds(rng: Any) -> None:
    """The stated bounds over the whole float32 range of exp and log (dense sample)."""
    x = np.linspace(-103.0, 88.7, 400001).astype(np.float32)
    out = np.empty_like(x)
    kernels.get("exp").run([out, x], n=x.size)
    assert ulps(out, np.exp(x.astype(np.longdouble)), "float32").max() <= ULP["exp"]
    y = np.exp(rng.uniform(-87, 88, 400001)).astype(np.float32)
    kernels.get("log").run([out, y], n=y.size)
    assert ulps(out, np.log(y.astype(np.longdouble)), "float32").max() <= ULP["log"]


@pytest.mark.from_source_sample
def test_float16_conversions_exhaustive(rng: Any) -> None:
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    halves = bits.view(np.float16)
    out = np.empty(65536, dtype=np.float32)
    kernels.get("cast", dtype="float16", out_dtype="float32").run([out, halves], n=65536)
    want = halves.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(out[~nan].view(np.uint32), want[~nan].view(np.uint32)) and np.isnan(out[nan]).all()
    f = np.concatenate(
        [
            rng.integers(0, 2**32, 300000, dtype=np.uint64).astype(np.uint32).view(np.float32),
            want,
            np.array([65504, 65519.99, 65520, 5.96e-8, 2.98e-8, 2.99e-8, 1e-45], np.float32),
        ]
    )
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
def test_cast(src: str, dst: str, rng: Any) -> None:
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
def test_named_fused_kernels(name: str, dt: str, rng: Any) -> None:
    k = kernels.get(name, dtype=dt)
    n = 4099
    ins = [rng.uniform(-3, 3, n).astype(dt) for _ in k.buffers[1:]]
    out = np.empty(n, dtype=dt)
    k.run([out, *ins], n=n)
    a, *rest = [x.astype(np.longdouble) for x in ins]
    want = {
        "mul_add": lambda: a * rest[0] + rest[1],
        "relu_mul_add": lambda: np.maximum(a * rest[0] + rest[1], 0),
        "add_relu": lambda: np.maximum(a + rest[0], 0),
        "silu": lambda: a / (1 + np.exp(-a)),
    }[name]()
    eps = np.finfo(dt).eps
    scale = np.abs(a) * (np.abs(rest[0]) if rest else 1) + (np.abs(rest[1]) if len(rest) > 1 else np.abs(want))
    assert np.all(np.abs(out - want) <= 4 * eps * (scale + np.abs(want)))


# --- fused at run time -------------------------------------------------------------------------
