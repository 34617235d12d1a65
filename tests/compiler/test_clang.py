"""The compiler driver: both compilers, IR, flags, errors, probing, no files left behind."""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile

import pytest
from conftest import needs_cc, needs_clang

from svod_min.compiler import clang
from svod_min.error import CompilationError, CompilerNotFoundError
from svod_min.jit_loader import load_object

ADD = "int add3(int x) { return x + 3; }"


def _reloc_names(obj: bytes) -> set:
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(obj))
    names = set()
    symtab = elf.get_section_by_name(".symtab")
    for sec in elf.iter_sections():
        if sec.header.sh_type == "SHT_RELA":
            for rel in sec.iter_relocations():
                names.add(symtab.get_symbol(rel["r_info_sym"]).name)
    return names


def test_compile_c_returns_relocatable_elf(cc: str) -> None:
    obj = clang.compile_c(ADD, compiler=cc)
    assert obj[:4] == b"\x7fELF"
    assert int.from_bytes(obj[16:18], "little") == 1  # ET_REL
    with load_object(obj) as lo:
        assert lo.function("add3", ctypes.c_int, ctypes.c_int)(4) == 7


def test_loops_do_not_become_memcpy_or_memset_calls(cc: str) -> None:
    src = """
    void z(float* restrict a, const float* restrict b, int n) {
        for (int i = 0; i < n; i++) a[i] = 0;
        for (int i = 0; i < n; i++) a[i] += b[i];
        for (int i = 0; i < n; i++) a[i] = b[i];
    }
    float r(float x) { return __builtin_sqrtf(x); }
    """
    names = _reloc_names(clang.compile_c(src, compiler=cc))
    assert not names & {"memcpy", "memset", "memmove", "sqrtf"}, names


def test_sqrt_is_an_instruction_not_a_libm_call(cc: str) -> None:
    src = "#include <math.h>\nfloat r(float x) { return sqrtf(x); }"
    assert "sqrtf" not in _reloc_names(clang.compile_c(src, compiler=cc))


def test_compile_error_carries_diagnostics_and_offending_lines(cc: str) -> None:
    src = "int ok(void) { return 1; }\nint broken(void) { return undefined_name; }\n"
    with pytest.raises(CompilationError) as info:
        clang.compile_c(src, compiler=cc)
    err = info.value
    assert "undefined_name" in err.diagnostics
    assert (2, "int broken(void) { return undefined_name; }") in err.source_lines
    assert "offending source" in str(err) and "undefined_name" in str(err)


def test_extra_flags_are_passed(cc: str) -> None:
    src = "int f(void) { return VALUE; }"
    with load_object(clang.compile_c(src, extra_flags=["-DVALUE=41"], compiler=cc)) as lo:
        assert lo.function("f", ctypes.c_int)() == 41


def test_gcc_leaves_no_files_in_cwd_or_tmp(tmp_path, monkeypatch) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    monkeypatch.chdir(tmp_path)
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(private_tmp))
    tempfile.tempdir = None  # re-read TMPDIR
    try:
        clang.compile_c(ADD, compiler="gcc")
        with pytest.raises(CompilationError):
            clang.compile_c("int x(void) { return y; }", compiler="gcc")
    finally:
        tempfile.tempdir = None
    assert os.listdir(tmp_path) == ["tmp"]
    assert os.listdir(private_tmp) == []


def test_svod_cc_selects_compiler(monkeypatch) -> None:
    monkeypatch.setenv("SVOD_CC", "gcc")
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    assert clang.find_compiler().family == "gcc"
    monkeypatch.setenv("SVOD_CC", "definitely-not-a-compiler-xyz")
    with pytest.raises(CompilerNotFoundError, match="definitely-not-a-compiler-xyz"):
        clang.compile_c(ADD)


def test_no_compiler_on_path_is_a_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("SVOD_CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CompilerNotFoundError, match="no C compiler"):
        clang.compile_c(ADD)


@needs_cc
def test_probe_is_cached_and_identity_is_stable() -> None:
    info = clang.find_compiler()
    assert clang.find_compiler() is info
    assert info.family in ("clang", "gcc")
    assert info.version[0].isdigit()
    assert info.identity == "%s-%s-%s" % (info.family, info.version, info.target)


@needs_clang
def test_compile_ir_runs() -> None:
    ir = """
define i32 @twice(i32 %x) {
  %r = mul i32 %x, 2
  ret i32 %r
}
"""
    with load_object(clang.compile_ir(ir)) as lo:
        assert lo.function("twice", ctypes.c_int, ctypes.c_int)(21) == 42
    via_backend = clang.compile_source(ir, backend=clang.CpuBackend.LLVM)
    assert via_backend[:4] == b"\x7fELF"


@needs_clang
def test_bad_ir_is_a_compilation_error() -> None:
    with pytest.raises(CompilationError, match="failed to compile ir"):
        clang.compile_ir("define i32 @f( {")


def test_ir_needs_clang(monkeypatch) -> None:
    if not shutil.which("gcc"):
        pytest.skip("gcc not installed")
    monkeypatch.setenv("SVOD_CC", "gcc")
    with pytest.raises(CompilerNotFoundError, match="needs clang"):
        clang.compile_ir("define void @f() { ret void }")


def test_cpu_backend_from_env(monkeypatch, caplog) -> None:
    monkeypatch.setenv("SVOD_CPU_BACKEND", "LLVM")
    assert clang.CpuBackend.from_env() is clang.CpuBackend.LLVM
    monkeypatch.setenv("SVOD_CPU_BACKEND", "fortran")
    assert clang.CpuBackend.from_env() is clang.CpuBackend.CLANG
    assert "fortran" in caplog.text
    monkeypatch.delenv("SVOD_CPU_BACKEND")
    assert clang.CpuBackend.from_env() is clang.CpuBackend.CLANG


# --- regressions from the 2026-11-24 review -------------------------------------------------------


@needs_cc
@pytest.mark.parametrize("flags", [["-###"], ["--help"]])
def test_a_compiler_run_that_writes_no_object_is_a_compilation_error(flags: list) -> None:
    # gcc goes through a temp dir: exiting 0 without kernel.o leaked FileNotFoundError
    with pytest.raises(CompilationError, match="produced no ELF object"):
        clang.compile_c("int f(void) { return 1; }", extra_flags=flags)


@needs_cc
def test_source_with_a_lone_surrogate_is_a_compilation_error() -> None:
    with pytest.raises(
        CompilationError, match=r"the source is not valid Unicode text \(surrogates not allowed at position 3\)"
    ):
        clang.compile_c("// \udcff\nint f(void) { return 1; }")
    with pytest.raises(CompilationError, match=r"kernel 1 is not valid Unicode text"):
        clang.compile_many_c(["int f(void) { return 1; }", "// \udcff\n"])
    with pytest.raises(CompilationError, match=r"kernel 0 must be a str of C source, got bytes"):
        clang.compile_many_c([b"int f(void) { return 1; }"])  # type: ignore[list-item]
