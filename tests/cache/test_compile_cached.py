"""compile_cached: the memory and disk levels in front of the compiler, keyed by source, flags and the
compiler's identity."""

from __future__ import annotations

import hashlib
import shutil
import time

import pytest
from support.cache_races import isolated_cache, run_in_threads  # noqa: F401 - isolated_cache is a fixture

from svod_min.cache import kernel_cache as kc
from svod_min.error import CompilationError, NotSupportedError

# --- compile_cached --------------------------------------------------------


@pytest.fixture()
def fake_clang(monkeypatch):
    """svod_min.compiler.clang with a fake compiler: records calls, returns a fake object."""
    clang = pytest.importorskip("svod_min.compiler.clang")
    state = {"calls": [], "identity": "1.0", "fail": False}

    def find_compiler(*, need_clang=False, compiler=None):
        state.setdefault("need_clang", []).append(need_clang)
        return clang.CompilerInfo("/fake/clang", "clang", state["identity"], "x86_64-fake")

    def fake_compile(kind):
        def compile_fn(source, *, extra_flags=(), **_):
            if state["fail"]:
                raise CompilationError("must not compile (expected a cache hit)")
            state["calls"].append((kind, source, tuple(extra_flags)))
            time.sleep(0.02)
            return b"\x7fELF" + hashlib.sha256((kind + source).encode()).digest()

        return compile_fn

    monkeypatch.setattr(clang, "find_compiler", find_compiler)
    monkeypatch.setattr(clang, "compile_c", fake_compile("c"))
    monkeypatch.setattr(clang, "compile_ir", fake_compile("ir"))
    return state


def test_compile_cached_hits_disk_then_misses_on_new_flags(tmp_path, fake_clang):
    disk = kc.ObjectCache(str(tmp_path))
    obj = kc.compile_cached("int f;", cache=disk)
    assert obj.startswith(b"\x7fELF") and len(fake_clang["calls"]) == 1
    assert len(disk.entries()) == 1
    kc.OBJECT_MEMORY_CACHE.clear()  # force the disk level
    fake_clang["fail"] = True
    assert kc.compile_cached("int f;", cache=disk) == obj
    with pytest.raises(CompilationError):
        kc.compile_cached("int f;", extra_flags=["-O3"], cache=disk)
    fake_clang["identity"] = "2.0"  # a compiler upgrade must miss too
    kc.OBJECT_MEMORY_CACHE.clear()
    with pytest.raises(CompilationError):
        kc.compile_cached("int f;", cache=disk)


def test_compile_cached_ir_uses_clang(tmp_path, fake_clang):
    disk = kc.ObjectCache(str(tmp_path))
    c_obj = kc.compile_cached("same text", cache=disk)
    ir_obj = kc.compile_cached("same text", kind="ir", cache=disk)
    assert c_obj != ir_obj and [c[0] for c in fake_clang["calls"]] == ["c", "ir"]
    assert fake_clang["need_clang"][-1] is True
    with pytest.raises(NotSupportedError):
        kc.compile_cached("x", kind="ptx", cache=disk)


def test_compile_cached_dedups_concurrent_compiles(tmp_path, fake_clang):
    disk = kc.ObjectCache(str(tmp_path))
    results, errors = run_in_threads(8, lambda i: kc.compile_cached("int g;", cache=disk))
    assert errors == [None] * 8 and len(set(results)) == 1
    assert len(fake_clang["calls"]) == 1


def test_compile_cached_works_with_disk_disabled(tmp_path, fake_clang, monkeypatch):
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "off")
    obj = kc.compile_cached("int h;")
    assert obj.startswith(b"\x7fELF") and not kc.object_cache().enabled


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_object_key_changes_with_the_drivers_own_flags(monkeypatch):
    """The driver's built-in flags (shared and per compiler family) shape the object: a change must miss."""
    from svod_min.compiler import run

    family = pytest.importorskip("svod_min.compiler.clang").find_compiler().family
    before = kc.object_key("int k;")
    monkeypatch.setitem(run.FAMILY_FLAGS, family, (*run.FAMILY_FLAGS.get(family, ()), "-fno-common"))
    assert kc.object_key("int k;") != before
    monkeypatch.undo()
    assert kc.object_key("int k;") == before
    monkeypatch.setattr(run, "DEFAULT_FLAGS", (*run.DEFAULT_FLAGS, "-fno-common"))
    monkeypatch.setattr(pytest.importorskip("svod_min.compiler.clang"), "DEFAULT_FLAGS", run.DEFAULT_FLAGS)
    assert kc.object_key("int k;") != before


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_compile_cached_real_compiler(tmp_path, monkeypatch):
    clang = pytest.importorskip("svod_min.compiler.clang")
    disk = kc.ObjectCache(str(tmp_path))
    src = "int add1(int x) { return x + 1; }\n"
    obj = kc.compile_cached(src, cache=disk)
    assert obj[:4] == b"\x7fELF" and len(disk.entries()) == 1

    def refuse(*args, **kwargs):
        raise CompilationError("should have been a disk hit")

    monkeypatch.setattr(clang, "compile_c", refuse)
    kc.OBJECT_MEMORY_CACHE.clear()
    assert kc.compile_cached(src, cache=disk) == obj
    with pytest.raises(CompilationError, match="disk hit"):
        kc.compile_cached(src, extra_flags=["-O1"], cache=disk)
