"""Prebuilt kernel objects: which variant a CPU gets, lazy loading, running without any compiler, the
objects' size and self-containment, relocation against ld.lld, and the code of the matmul tiles."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from typing import Any, Dict

import pytest
from support.kernel_check import (  # noqa: F401 - rng is a fixture
    HAVE_CC,
    HOST_VARIANT,
    check_elementwise,
    check_matmul,
    needs_prebuilt,
    rng,
)

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.compiler.targets import TARGETS, cpu_features  # noqa: E402
from svod_min.error import CompilerNotFoundError  # noqa: E402
from svod_min.jit_loader import relocate  # noqa: E402
from svod_min.kernels import KernelParamError  # noqa: E402
from svod_min.kernels import variants as kprebuilt  # noqa: E402
from svod_min.kernels.lookup import generated  # noqa: E402


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
def test_every_x86_variant_this_cpu_runs_computes_correctly(monkeypatch: pytest.MonkeyPatch, rng: Any) -> None:
    have = cpu_features()
    variants = [
        name for name, v in sorted(generated().VARIANTS.items()) if v["arch"] == "x86_64" and set(v["requires"]) <= have
    ]
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
        check_matmul(rng, kernels.get("matmul", prebuilt=True), "float32", 37, 41, 300)
        check_matmul(rng, kernels.get("matmul", dtype="float64", prebuilt=True), "float64", 19, 23, 150)
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


_RUN_READING_NO_SOURCE = """
from svod_min.kernels import sources
def no_source(name):
    raise SystemExit("the default plan read kernel source %s" % name)
sources._read = no_source  # every C unit the library cuts (kernel_source, prelude) comes through here
from svod_min.__main__ import main
raise SystemExit(main(["run"]))
"""


@needs_prebuilt
def test_default_plan_runs_from_the_prebuilt_object_reading_no_kernel_source() -> None:
    """run's main job maps the prebuilt library: it needs no C source (issue 39 saw it ask for matmul.c
    only because the prebuilt object was not found). Prebuilt objects on, whatever this run's SVOD_KERNELS_PREBUILT
    says (a CI pass turns them off to test the compiled path): the case is the default, which uses them."""
    env = dict(os.environ, SVOD_KERNELS_PREBUILT="1")
    out = subprocess.run(
        [sys.executable, "-c", _RUN_READING_NO_SOURCE], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "verify y: ok" in out.stdout


def test_get_prebuilt_false_compiles_the_rendered_source(rng: Any) -> None:
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
VARIANT_BUDGET = 410_000  # +10 kB: conv2d_gemm's packed-weight entries (x86_64 objects reached ~401 kB)
TOTAL_BUDGET = 1_975_000  # +50 kB: matmul's unpacked path for batch-1 fully connected layers (~2.4 kB a variant);
# +10 kB: conv2d_gemm's stride-1 im2col by masked loads and pixel columns on x86_64-v4 (~4.6 kB);
# +15 kB: conv2d_gemm's even pixel blocks and its prefetch of the next weight block (~11 kB over the seven)


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


@pytest.mark.skipif(
    shutil.which("objdump") is None or not (HOST_VARIANT or "").startswith("x86_64"), reason="x86-64 with objdump only"
)
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


@pytest.mark.skipif(
    shutil.which("objdump") is None or not (HOST_VARIANT or "").startswith("x86_64"),
    reason="x86-64 with objdump only (another host's objdump may not read x86 code)",
)
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


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
def test_rendered_sources_compile_with_gcc_too(monkeypatch: pytest.MonkeyPatch, rng: Any) -> None:
    """The fallback path is not clang-only: gcc builds the same sources (clang pragmas are ignored)."""
    monkeypatch.setenv("SVOD_CC", "gcc")
    check_matmul(rng, kernels.get("matmul", prebuilt=False, mr=8, nr=8), "float32", 37, 29, 300)
    x = rng.uniform(-9, 9, 999).astype(np.float16)
    out = np.empty_like(x)
    kernels.get("tanh", dtype="float16", prebuilt=False).run([out, x], n=999)
    check_elementwise("tanh", "float16", out, [x])
