"""Streaming stores for large elementwise outputs (templates/c/elementwise.c.j2, prelude svod_stream64).

Outputs of at least the machine's threshold (``svod_stream_bytes``, set per process by
jit_loader/rt_helpers.py) are written in 64-byte blocks with non-temporal stores; the values must
be exactly those of the regular path (checked against numpy, and against the same kernel run in
pieces below the threshold). The tests lower the threshold to STREAM_BYTES so arrays stay small.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

from svod_min import kernels
from svod_min.compiler import clang
from svod_min.jit_loader import load_object, rt_helpers
from svod_min.kernels import variants
from svod_min.kernels.elementwise import render_elementwise
from svod_min.kernels.lookup import generated
from svod_min.kernels.sources import prelude

STREAM_BYTES = 1 << 20  # the threshold these tests set (the machine's is about half its last-level cache)
X86 = platform.machine() in ("x86_64", "AMD64")
X86_VARIANTS = sorted(name for name, v in generated().VARIANTS.items() if v["arch"] == "x86_64")


@pytest.fixture(autouse=True)
def _small_threshold():
    before = rt_helpers.stream_bytes()
    rt_helpers.set_stream_bytes(STREAM_BYTES)
    yield
    rt_helpers.set_stream_bytes(before)


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
        k = kernels.get("add", dtype=dtype).bind(
            [out[shift : shift + n], a[shift : shift + n], b[shift : shift + n]], n=n, threads=threads
        )
        k()
        assert np.array_equal(out[shift : shift + n], a[shift : shift + n] + b[shift : shift + n])
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
    step = STREAM_BYTES // 4 // 4  # float32 pieces a quarter of the threshold: regular stores
    for lo in range(0, n, step):
        m = min(step, n - lo)
        fn(*(x[lo:].ctypes.data for x in (pieces, a, b, c)), m, 1, 0)
    assert np.array_equal(whole, pieces)
    assert np.allclose(whole, np.maximum(a * b + c, 0), rtol=1e-6, atol=1e-6)
    loaded.close()


@pytest.mark.skipif(not X86 or shutil.which("objdump") is None, reason="x86-64 with objdump only")
@pytest.mark.parametrize("variant", X86_VARIANTS)
def test_prebuilt_add_has_streaming_stores(variant: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "library.o")
        with open(path, "wb") as fh:
            fh.write(open(variants.object_path(variant), "rb").read())
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True, text=True).stdout
    body = text.split("<svod_add_f32>:", 1)[1].split("\n\n", 1)[0]
    assert "movnt" in body and "sfence" in body


#: Streaming loops that no compiler vectorises (a float64 -> float16 conversion element by element).
SCALAR_STREAMING = {"svod_cast_f64_f16"}


@pytest.mark.skipif(not X86 or shutil.which("objdump") is None, reason="x86-64 with objdump only")
@pytest.mark.parametrize("variant", ["x86_64-avx2", "x86_64-v4"])
def test_every_streaming_loop_of_the_library_is_vectorised(variant: str, tmp_path) -> None:
    """The line loop before each streaming store is vectorised (unrolled or not): a line that fell back to
    element-by-element code would run several times slower than the regular-store path."""
    import re

    path = tmp_path / "library.o"
    path.write_bytes(open(variants.object_path(variant), "rb").read())
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(path)], capture_output=True, text=True).stdout
    streaming = {}
    for body in re.split(r"\n(?=[0-9a-f]+ <)", text):
        name = re.match(r"[0-9a-f]+ <(\w+)>:", body)
        if name and "movnt" in body and "sfence" in body:
            head = body.split("sfence", 1)[0]
            streaming[name.group(1)] = (len(re.findall(r"%[yz]mm", head)), len(re.findall(r"\bv?\w+s[sd]\b", head)))
    assert len(streaming) > 100 and "svod_add_f32" in streaming
    scalar = {n for n, (vector, scalar_ops) in streaming.items() if vector <= scalar_ops}
    assert scalar <= SCALAR_STREAMING, sorted(scalar - SCALAR_STREAMING)


def test_only_memory_bound_lines_without_float16_are_unrolled() -> None:
    unrolled = lambda expr, **kw: "unroll(full)" in render_elementwise("f", expr, **kw).function  # noqa: E731
    assert unrolled("a+b") and unrolled("where(a>b, a, b*2)") and unrolled("a*b", dtype="float64")
    assert not unrolled("tanh(a)+b") and not unrolled("exp(a)")
    assert not unrolled("a+b", dtype="float16") and not unrolled("a+b", out_dtype="float16")


WORTH = "int worth(long long n) { return svod_stream_worth(n); }\n"


@pytest.mark.skipif(not X86, reason="streaming stores are x86-64 only")
def test_kernels_read_the_threshold_this_process_sets(cc: str) -> None:
    with load_object(clang.compile_c(prelude() + WORTH, compiler=cc)) as lo:
        worth = lo.function("worth", ctypes.c_int, ctypes.c_longlong)
        assert (worth(STREAM_BYTES - 1), worth(STREAM_BYTES)) == (0, 1)
        rt_helpers.set_stream_bytes(5000)  # read at every call: no reload needed
        assert (worth(4999), worth(5000)) == (0, 1)


@pytest.mark.skipif(not X86, reason="streaming stores are x86-64 only")
def test_without_svod_min_the_weak_threshold_falls_back_to_16_mib(cc: str, tmp_path) -> None:
    src, lib = tmp_path / "w.c", tmp_path / "w.so"
    src.write_text(prelude() + WORTH)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", str(src), "-o", str(lib)], check=True, capture_output=True)
    worth = ctypes.CDLL(str(lib)).worth
    worth.argtypes, worth.restype = [ctypes.c_longlong], ctypes.c_int
    assert (worth((16 << 20) - 1), worth(16 << 20)) == (0, 1)


@pytest.mark.skipif(not X86, reason="streaming stores are x86-64 only")
@pytest.mark.parametrize("variant", X86_VARIANTS)
def test_prebuilt_objects_ask_the_loader_for_the_threshold(variant: str) -> None:
    from svod_min.jit_loader import relocate

    asked = []

    def resolve(name: str) -> int:
        asked.append(name)
        return 0x1000

    with open(variants.object_path(variant), "rb") as fh:
        relocate(fh.read(), 0x10000000, resolve)
    assert "svod_stream_bytes" in asked


def _cache_dir(root, index: int, kind: str, size: str) -> None:
    d = root / ("index%d" % index)
    d.mkdir()
    (d / "type").write_text(kind + "\n")
    (d / "size").write_text(size + "\n")


def test_the_default_threshold_is_half_the_last_level_cache(tmp_path, monkeypatch) -> None:
    _cache_dir(tmp_path, 0, "Data", "32K")
    _cache_dir(tmp_path, 1, "Instruction", "32K")
    _cache_dir(tmp_path, 2, "Unified", "1024K")
    _cache_dir(tmp_path, 3, "Unified", "32768K")
    (tmp_path / "uevent").write_text("")  # not a cache: skipped
    monkeypatch.setattr(rt_helpers, "CACHE_DIR", str(tmp_path))
    assert rt_helpers.default_stream_bytes() == 16 << 20
    monkeypatch.setattr(rt_helpers, "CACHE_DIR", str(tmp_path / "absent"))
    assert rt_helpers.default_stream_bytes() == rt_helpers.DEFAULT_STREAM_BYTES  # unknown: the measured 16 MiB


def test_the_threshold_comes_from_the_environment_and_bad_values_are_named() -> None:
    code = "from svod_min.jit_loader import rt_helpers; print(rt_helpers.stream_bytes())"
    env = dict(os.environ, SVOD_STREAM_BYTES="123456")
    assert (
        subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip() == "123456"
    )
    env["SVOD_STREAM_BYTES"] = "lots"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "SVOD_STREAM_BYTES='lots' is not an integer" in proc.stderr
    with pytest.raises(ValueError, match=">= 0"):
        rt_helpers.set_stream_bytes(-1)
