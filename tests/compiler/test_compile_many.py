"""Batch compilation: clang.compile_many_c (svod_min.compiler.batch) and kernel_cache.compile_many_cached."""

from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from typing import List

import pytest
from conftest import needs_cc, needs_clang

from svod_min.cache import kernel_cache as kc
from svod_min.compiler import batch, clang
from svod_min.error import CompilationError
from svod_min.jit_loader import load_object

# Every source repeats the names `k` and `helper`: each must stay its own unit.
KERNEL = """
static float helper(float v) { return v * 2.0f + %s; }
void k(float* restrict out, const float* restrict x) {
    for (int i = 0; i < 8; i++) out[i] = helper(x[i]);
}
"""
BAD = "void k(float* out) {\n  out[0] = undefined_thing;\n}\n"


def kernel(c: float) -> str:
    return KERNEL % ("%rf" % float(c))


def run(obj: bytes) -> List[float]:
    x = (ctypes.c_float * 8)(*range(8))
    out = (ctypes.c_float * 8)()
    with load_object(obj) as lo:
        lo.function("k", None, ctypes.c_void_p, ctypes.c_void_p)(out, x)
    return list(out)


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "object-cache"))
    monkeypatch.delenv("SVOD_OBJECT_CACHE", raising=False)
    monkeypatch.delenv("SVOD_COMPILE_JOBS", raising=False)
    kc.OBJECT_MEMORY_CACHE.clear()
    yield
    kc.OBJECT_MEMORY_CACHE.clear()


class Counter:
    """Wraps a function and counts its calls (and the sources it was given)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, *args, **kwargs):
        self.calls.append(args)
        return self.fn(*args, **kwargs)


# --- compile_many_c ------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_objects_behave_like_compile_c(cc: str, jobs: int) -> None:
    sources = [kernel(c) for c in range(17)]
    objs = clang.compile_many_c(sources, compiler=cc, jobs=jobs)
    assert len(objs) == len(sources)
    for c, obj in enumerate(objs):
        assert obj[:4] == b"\x7fELF"
        assert run(obj) == [x * 2.0 + c for x in range(8)]
    assert run(clang.compile_c(sources[5], compiler=cc)) == run(objs[5])


def test_extra_flags_reach_every_source(cc: str) -> None:
    objs = clang.compile_many_c([kernel(0).replace("0.0f", "OFFSET")] * 3, extra_flags=["-DOFFSET=4.0f"], compiler=cc)
    assert [run(o)[1] for o in objs] == [6.0, 6.0, 6.0]


def test_empty_batch_runs_no_compiler(monkeypatch) -> None:
    monkeypatch.setattr(batch, "find_compiler", None)  # would raise if called
    assert clang.compile_many_c([]) == []


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError, match="jobs"):
        clang.compile_many_c([kernel(1)], jobs=0)
    with pytest.raises(ValueError, match="names"):
        clang.compile_many_c([kernel(1)], names=["a", "b"])


def test_one_compiler_run_for_a_batch(cc: str, monkeypatch) -> None:
    clang.find_compiler(compiler=cc)  # the identity probe is not part of a batch
    counter = Counter(subprocess.run)
    monkeypatch.setattr(subprocess, "run", counter)
    objs = clang.compile_many_c([kernel(c) for c in range(12)], compiler=cc, jobs=1)
    assert len(counter.calls) == 1, counter.calls  # one unit, one object (compiler/batch_unit.py)
    assert [run(o)[0] for o in objs] == [float(c) for c in range(12)]


def test_sources_outside_a_unit_are_still_one_run(cc: str, monkeypatch) -> None:
    clang.find_compiler(compiler=cc)
    flags = ["-DPROBE_%s_%d" % (cc, os.getpid())]  # a fresh flag set: clang must probe cc1 once
    sources = ["#define UNIT_CANNOT_TAKE_ME\n" + kernel(c) for c in range(12)]
    counter = Counter(subprocess.run)
    monkeypatch.setattr(subprocess, "run", counter)
    clang.compile_many_c(sources, compiler=cc, jobs=1, extra_flags=flags)
    runs = [call[0] for call in counter.calls]
    assert len(runs) == (2 if cc == "clang" else 1), runs  # clang: `-###` once, then cc1; gcc: one driver run
    counter.calls.clear()
    clang.compile_many_c(sources, compiler=cc, jobs=1, extra_flags=flags)
    assert len(counter.calls) == 1  # the cc1 command line is remembered


def test_a_single_source_needs_no_cc1_probe(cc: str, monkeypatch) -> None:
    clang.find_compiler(compiler=cc)
    counter = Counter(subprocess.run)
    monkeypatch.setattr(subprocess, "run", counter)
    (obj,) = clang.compile_many_c([kernel(2)], compiler=cc, extra_flags=["-DSINGLE_%d" % os.getpid()])
    assert len(counter.calls) == 1 and "-###" not in counter.calls[0][0]
    assert run(obj)[0] == 2.0


def test_jobs_split_the_batch(cc: str, monkeypatch) -> None:
    clang.compile_many_c([kernel(0), kernel(1)], compiler=cc)  # probe outside the count
    counter = Counter(batch.run_compiler)
    monkeypatch.setattr(batch, "run_compiler", counter)
    monkeypatch.setattr(batch.batch_unit, "run_compiler", counter)
    objs = clang.compile_many_c([kernel(c) for c in range(20)], compiler=cc, jobs=2)
    # one unit per job, named after its first source, each compiled straight to its object
    units = sorted(os.path.basename(a) for call in counter.calls for a in call[0] if a.endswith(".c"))
    assert units == ["unit0.c", "unit10.c"] and len(counter.calls) == 2
    assert [run(o)[0] for o in objs] == [float(c) for c in range(20)]


def test_split_keeps_small_batches_whole() -> None:
    assert [len(c) for c in batch._split(100, 2)] == [50, 50]
    assert [len(c) for c in batch._split(21, 4)] == [11, 10]
    assert batch._split(5, 4) == [[0, 1, 2, 3, 4]]
    assert [i for c in batch._split(37, 3) for i in c] == list(range(37))


def test_failing_source_is_named(cc: str) -> None:
    sources = [kernel(c) for c in range(9)]
    sources[6] = BAD
    with pytest.raises(CompilationError) as info:
        clang.compile_many_c(sources, compiler=cc, jobs=1)
    err = info.value
    assert "kernel 6" in err.message and "(1 of 9 sources)" in err.message
    assert "kernel 5" not in err.message and "kernel 7" not in err.message
    assert (2, "  out[0] = undefined_thing;") in err.source_lines
    assert "kernel 6:2:" in err.diagnostics and "k6.c" not in err.diagnostics
    assert err.compiler == clang.find_compiler(compiler=cc).identity


def test_every_failure_is_named_across_jobs(cc: str) -> None:
    sources = [kernel(c) for c in range(20)]
    sources[2] = BAD
    sources[13] = BAD.replace("undefined_thing", "other_missing")
    with pytest.raises(CompilationError) as info:
        clang.compile_many_c(sources, compiler=cc, jobs=2, names=["n%d" % i for i in range(20)])
    err = info.value
    assert "kernel 2 (n2), kernel 13 (n13)" in err.message
    assert "undefined_thing" in err.diagnostics and "other_missing" in err.diagnostics
    assert "kernel 13:2:" in err.diagnostics


def test_unattributed_failure_reruns_sources_one_by_one(cc: str, monkeypatch) -> None:
    # A compiler crash names no file: each source is compiled alone to find the culprit.
    monkeypatch.setattr(batch, "_split_diagnostics", lambda stderr: ({}, []))
    sources = [kernel(0), kernel(1), BAD, kernel(3)]
    with pytest.raises(CompilationError) as info:
        clang.compile_many_c(sources, compiler=cc, numbers=[10, 11, 12, 13])
    assert "kernel 12" in info.value.message and "kernel 11" not in info.value.message
    assert (2, "  out[0] = undefined_thing;") in info.value.source_lines


def test_leaves_no_files_in_cwd_or_tmp(cc: str, tmp_path, monkeypatch) -> None:
    work = tmp_path / "work"
    private_tmp = tmp_path / "tmp"
    work.mkdir()
    private_tmp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TMPDIR", str(private_tmp))
    tempfile.tempdir = None  # re-read TMPDIR
    try:
        clang.compile_many_c([kernel(c) for c in range(10)], compiler=cc, jobs=2)
        with pytest.raises(CompilationError):
            clang.compile_many_c([kernel(0), BAD], compiler=cc)
    finally:
        tempfile.tempdir = None
    assert os.listdir(work) == []
    assert os.listdir(private_tmp) == []


def test_includes_resolve_against_the_callers_cwd(cc: str, tmp_path, monkeypatch) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SCALE 3.0f\n")
    (tmp_path / "offset.h").write_text("#define OFFSET 1.0f\n")
    monkeypatch.chdir(tmp_path)
    src = '#include "scale.h"\n#include "offset.h"\n' + KERNEL.replace("v * 2.0f + %s", "v * SCALE + OFFSET")
    flags = ["-I", "inc"]
    objs = clang.compile_many_c([src, src], extra_flags=flags, compiler=cc)
    expect = [x * 3.0 + 1.0 for x in range(8)]
    assert run(objs[1]) == expect == run(clang.compile_c(src, extra_flags=flags, compiler=cc))


def test_path_flags_are_made_absolute() -> None:
    flags = ["-Iinc", "-I", "a/b", "-isystem/abs", "-include", "p.h", "-I-", "-O2", "--sysroot=sr", "-DX=inc"]
    assert batch._absolute_paths(flags, "/base") == [
        "-I/base/inc",
        "-I",
        "/base/a/b",
        "-isystem/abs",
        "-include",
        "/base/p.h",
        "-I-",
        "-O2",
        "--sysroot=/base/sr",
        "-DX=inc",
    ]


def test_cc1_listing_is_parsed_or_declined() -> None:
    line = (
        ' "/usr/bin/clang" "-cc1" "-main-file-name" "k0.c" "-disable-free" "-O2"'
        ' "-fdebug-compilation-dir=/t" "-o" "k0.o" "-x" "c" "k0.c"'
    )
    assert batch._parse_cc1("clang version 14\n" + line, "k0.c", "k0.o") == ["/usr/bin/clang", "-cc1", "-O2"]
    assert batch._parse_cc1(line + "\n" + ' "/usr/bin/as" "-o" "k0.o"', "k0.c", "k0.o") is None
    assert batch._parse_cc1(line.replace('"-x" "c" "k0.c"', '"k0.c"'), "k0.c", "k0.o") is None


@needs_clang
def test_clang_falls_back_to_the_driver_without_cc1(monkeypatch) -> None:
    monkeypatch.setattr(batch, "_parse_cc1", lambda *a: None)
    flags = ["-DFALLBACK_PROBE"]
    sources = ["#define OUTSIDE_THE_UNIT\n" + kernel(c) for c in (1, 2)]  # the per-source path
    counter = Counter(subprocess.run)
    monkeypatch.setattr(subprocess, "run", counter)
    objs = clang.compile_many_c(sources, compiler="clang", extra_flags=flags)
    assert [run(o)[0] for o in objs] == [1.0, 2.0]
    assert counter.calls[-1][0][1] == "-c"  # the driver, not cc1


# --- compile_many_cached --------------------------------------------------------


def _no_compiler(*args, **kwargs):
    raise AssertionError("the compiler ran although every source was cached")


@needs_cc
def test_cached_batch_skips_the_compiler(monkeypatch) -> None:
    sources = [kernel(c + 0.5) for c in range(6)]
    counter = Counter(clang.compile_many_c)
    monkeypatch.setattr(clang, "compile_many_c", counter)
    first = kc.compile_many_cached(sources)
    assert len(counter.calls) == 1 and len(counter.calls[0][0]) == 6
    monkeypatch.setattr(clang, "compile_many_c", _no_compiler)
    monkeypatch.setattr(clang, "compile_c", _no_compiler)
    assert kc.compile_many_cached(sources) == first  # memory hits
    kc.OBJECT_MEMORY_CACHE.clear()
    assert kc.compile_many_cached(sources) == first  # disk hits
    assert kc.compile_cached(sources[3]) == first[3]  # the keys are compile_cached's
    assert [run(o)[0] for o in first] == [c + 0.5 for c in range(6)]


@needs_cc
def test_only_misses_are_compiled_once_each(monkeypatch) -> None:
    old = [kernel(c + 0.25) for c in range(3)]
    kc.compile_many_cached(old)
    counter = Counter(clang.compile_many_c)
    monkeypatch.setattr(clang, "compile_many_c", counter)
    new = [kernel(10.25), kernel(11.25)]
    objs = kc.compile_many_cached([old[0], new[0], old[1], new[1], new[0]])
    assert [list(call[0]) for call in counter.calls] == [new]
    assert [run(o)[0] for o in objs] == [0.25, 10.25, 1.25, 11.25, 10.25]


@needs_cc
def test_cached_batch_errors_name_positions_in_the_whole_batch() -> None:
    cached = [kernel(0.75), kernel(1.75)]
    kc.compile_many_cached(cached)
    with pytest.raises(CompilationError) as info:
        kc.compile_many_cached([cached[0], kernel(9.75), cached[1], BAD], names=["a", "b", "c", "d"])
    assert "kernel 3 (d)" in info.value.message and "(1 of 2 sources)" in info.value.message


@needs_cc
def test_disabled_disk_cache_still_works(monkeypatch) -> None:
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "0")
    objs = kc.compile_many_cached([kernel(4.5), kernel(5.5)])
    assert [run(o)[0] for o in objs] == [4.5, 5.5]


@needs_clang
def test_ir_batches_compile_source_by_source(monkeypatch) -> None:
    monkeypatch.setattr(clang, "compile_many_c", _no_compiler)
    ir = "define i32 @f(i32 %%x) {\n  %%r = add i32 %%x, %d\n  ret i32 %%r\n}\n"
    objs = kc.compile_many_cached([ir % 1, ir % 2], kind="ir")
    for add, obj in zip((1, 2), objs):
        with load_object(obj) as lo:
            assert lo.function("f", ctypes.c_int, ctypes.c_int)(40) == 40 + add
