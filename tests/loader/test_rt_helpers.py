"""Compiler-runtime helpers shipped in runtime.o: clang's __fp16 calls on baseline x86-64, against numpy."""

from __future__ import annotations

import ctypes

import pytest
from conftest import needs_clang

from svod_min.jit_loader import load_object
from svod_min.jit_loader.rt_helpers import HELPER_NAMES

np = pytest.importorskip("numpy")

SOURCE = r"""
void to_half(__fp16 *out, const float *in, int n) { for (int i = 0; i < n; ++i) out[i] = (__fp16)in[i]; }
void to_float(float *out, const __fp16 *in, int n) { for (int i = 0; i < n; ++i) out[i] = (float)in[i]; }
"""


@pytest.fixture(scope="module")
def half_kernels():  # type: ignore[no-untyped-def]
    import os

    if os.uname().machine != "x86_64":
        pytest.skip("the helpers are called by x86-64 objects built without F16C")
    from svod_min.compiler.clang import compile_c
    from svod_min.jit_loader.elf import parse_object

    obj = compile_c(SOURCE, extra_flags=["-march=x86-64", "-O1", "-fno-vectorize"], compiler="clang")
    undefined = {s.name for s in parse_object(obj).symbols if s.shndx == 0 and s.name}
    assert undefined & HELPER_NAMES, "clang no longer calls the helpers: %s" % undefined
    lib = load_object(obj)
    args = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
    return lib, lib.function("to_half", None, *args), lib.function("to_float", None, *args)


@needs_clang
def test_every_half_widens_exactly(half_kernels) -> None:  # type: ignore[no-untyped-def]
    _, _, to_float = half_kernels
    bits = np.arange(65536, dtype=np.uint16)
    out = np.empty(65536, dtype=np.float32)
    to_float(out.ctypes.data, bits.ctypes.data, 65536)
    want = bits.view(np.float16).astype(np.float32)
    same = (out.view(np.uint32) == want.view(np.uint32)) | (np.isnan(out) & np.isnan(want))
    assert same.all(), bits[~same][:10]


@needs_clang
def test_floats_narrow_to_nearest_even_as_numpy_does(half_kernels) -> None:  # type: ignore[no-untyped-def]
    _, to_half, _ = half_kernels
    rng = np.random.default_rng(7)
    special = np.array(
        [
            0.0,
            -0.0,
            np.inf,
            -np.inf,
            65504,
            65519.99,
            65520,
            1e9,
            2.0**-24,
            2.0**-25,
            2.0**-25 * 1.0001,
            3 * 2.0**-25,
            2.0**-14,
            2.0**-14 * (1 - 2.0**-11),
            1 + 2.0**-11,
            1 + 3 * 2.0**-11,
            1e-8,
            -1e-30,
        ],
        dtype=np.float32,
    )
    every_exponent = (rng.random(200000) * 2 - 1).astype(np.float32) * np.float32(2.0) ** rng.integers(-30, 18, 200000)
    raw = rng.integers(0, 2**32, 200000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    values = np.concatenate([special, every_exponent.astype(np.float32), raw])
    finite = values[~np.isnan(values)]
    out = np.empty(finite.size, dtype=np.uint16)
    to_half(out.ctypes.data, finite.ctypes.data, finite.size)
    with np.errstate(over="ignore"):  # large values overflow to infinity, as the helper must too
        want = finite.astype(np.float16).view(np.uint16)
    bad = out != want
    assert not bad.any(), list(zip(finite[bad][:5], out[bad][:5], want[bad][:5]))
    nans = np.array([np.nan, -np.nan], dtype=np.float32)
    got = np.empty(2, dtype=np.uint16)
    to_half(got.ctypes.data, nans.ctypes.data, 2)
    assert np.isnan(got.view(np.float16)).all()


def test_the_runner_and_the_helpers_share_one_runtime_mapping() -> None:
    from svod_min.jit_loader.rt_helpers import loaded_runtime
    from svod_min.plan import native_replay

    runtime = loaded_runtime(load_object)
    if runtime is None:
        pytest.skip("no prebuilt runtime object for this architecture")
    assert native_replay.prebuilt_runtime(load_object) is runtime
    assert runtime.address("svod_replay") and runtime.address("__gnu_f2h_ieee")
