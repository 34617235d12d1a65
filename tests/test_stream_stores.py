"""Streaming stores for large elementwise outputs (templates/c/elementwise.c.j2, prelude svod_stream64).

Outputs of at least STREAM_BYTES are written in 64-byte blocks with
non-temporal stores; the values must be exactly those of the regular path
(checked against numpy, and against the same kernel run in pieces below the
threshold).
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

from svod_min import clang, kernels
from svod_min.jit_loader import load_object
from svod_min.kernels import variants
from svod_min.kernels.elementwise import render_elementwise
from svod_min.kernels.sources import prelude

STREAM_BYTES = 16 << 20  # svod_stream_worth() in templates/c/prelude.h.j2
X86 = platform.machine() in ("x86_64", "AMD64")


def past_threshold(dtype: str) -> int:
    return STREAM_BYTES // np.dtype(dtype).itemsize + 1000 + 13  # a tail that is no whole block


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("threads", [1, 2])
def test_large_add_equals_numpy_at_any_alignment(dtype: str, threads: int) -> None:
    n = past_threshold(dtype)
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(n + 8).astype(dtype) for _ in range(2))
    out = np.full(n + 8, 7, dtype=dtype)
    for shift in (0, 3):  # 3: the output starts off a 64-byte line: a peeled head
        k = kernels.get("add", dtype=dtype).bind([out[shift:shift + n], a[shift:shift + n], b[shift:shift + n]],
                                                 n=n, threads=threads)  # fmt: skip
        k()
        assert np.array_equal(out[shift:shift + n], a[shift:shift + n] + b[shift:shift + n])
    assert out[-1] == 7  # nothing written past n


def test_large_compare_writes_bools_exactly() -> None:
    n = past_threshold("bool")
    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
    out = np.empty(n, dtype=np.bool_)
    kernels.fused("a < b", out_dtype="bool").bind([out, a, b], n=n, threads=2)()
    assert np.array_equal(out, a < b)


def _fused_entry(cc: str, expr: str, entry: str):
    src = prelude() + "\n" + render_elementwise(entry, expr, dtype="float32").function
    obj = clang.compile_c(src, compiler=cc, extra_flags=variants.compile_flags(variants.choose_variant()))
    loaded = load_object(obj)
    fn = loaded.function(entry, None, *[ctypes.c_void_p] * 4, ctypes.c_int, ctypes.c_int, ctypes.c_int)
    return loaded, fn


def test_streamed_values_are_those_of_regular_stores(cc: str) -> None:
    # One kernel, two paths: the whole array (streamed) vs pieces of 1 MiB (regular stores).
    loaded, fn = _fused_entry(cc, "relu(a*b+c)", "svod_stream_t")
    n = past_threshold("float32")
    rng = np.random.default_rng(3)
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    whole, pieces = np.empty_like(a), np.empty_like(a)
    fn(whole.ctypes.data, a.ctypes.data, b.ctypes.data, c.ctypes.data, n, 1, 0)
    step = 1 << 18
    for lo in range(0, n, step):
        m = min(step, n - lo)
        fn(*(x[lo:].ctypes.data for x in (pieces, a, b, c)), m, 1, 0)
    assert np.array_equal(whole, pieces)
    assert np.allclose(whole, np.maximum(a * b + c, 0), rtol=1e-6, atol=1e-6)
    loaded.close()


@pytest.mark.skipif(not X86 or shutil.which("objdump") is None, reason="x86-64 with objdump only")
@pytest.mark.parametrize("variant", ["x86_64-avx2", "x86_64-baseline"])
def test_prebuilt_add_has_streaming_stores(variant: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "library.o")
        with open(path, "wb") as fh:
            fh.write(open(variants.object_path(variant), "rb").read())
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True).stdout
    body = text.split("<svod_add_f32>:", 1)[1].split("\n\n", 1)[0]
    assert "movnt" in body and "sfence" in body
