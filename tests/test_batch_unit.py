"""gcc batches as one unit (svod_min.compiler.gcc_unit): renaming, the assembly cut, fallbacks."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from typing import List

import pytest

from svod_min import clang
from svod_min.compiler import batch, gcc_unit
from svod_min.jit_loader import load_object

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

# Each source repeats the names, a constant and a string the others use too.
KERNEL = """
static const char tag[] = "same";
static float helper(float v) { return v * 2.5f + %s; }
float scale = 0.5f;
void k(float* restrict out, const float* restrict x, int n) {
    for (int i = 0; i < n; i++) out[i] = helper(x[i]) * scale + (float)(tag[0] == 's');
}
"""


def kernel(c: int) -> str:
    return KERNEL % ("%d.0f" % c)


def run(obj: bytes, n: int = 13) -> List[float]:
    x = (ctypes.c_float * n)(*range(n))
    out = (ctypes.c_float * n)()
    with load_object(obj) as lo:
        lo.function("k", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)(out, x, n)
    return list(out)


def expect(c: int, n: int = 13) -> List[float]:
    return [float(ctypes.c_float((x * 2.5 + c) * 0.5 + 1.0).value) for x in range(n)]


class Calls:
    def __init__(self, fn):
        self.fn, self.cmds = fn, []

    def __call__(self, cmd, *args, **kwargs):
        self.cmds.append(cmd)
        return self.fn(cmd, *args, **kwargs)


def test_defined_names_are_definitions_only() -> None:
    src = """
    typedef long long i64;
    struct pair { int a, b; };
    extern float outside;
    float sqrtf(float);
    static const float table[4] = {1, 2, 3, 4};
    int a, b = 2;
    static inline float f(float x) { float local = x; return local; }
    void __attribute__((noinline)) g(int n) __asm__("g_asm") ;
    void h(float* restrict o) __attribute__((hot)) { o[0] = sqrtf(table[0]); }
    """
    assert gcc_unit.defined_names(src) == {"i64", "pair", "table", "a", "b", "f", "h"}


def test_unit_ready_takes_only_include_directives() -> None:
    assert gcc_unit.unit_ready("#include <math.h>\nvoid k(void) {}\n")
    assert not gcc_unit.unit_ready("#define N 4\nvoid k(void) {}\n")
    assert not gcc_unit.unit_ready("#if 1\nvoid k(void) {}\n#endif\n")
    assert gcc_unit.unit_ready("void k(int *o) {\n#pragma GCC unroll 4\n  for (int i = 0; i < 8; i++) o[i] = i;\n}\n")
    assert not gcc_unit.unit_ready("#pragma GCC optimize(\"O0\")\nvoid k(void) {}\n")
    assert not gcc_unit.unit_ready("void k__svu1__(void) {}\n")
    # conditionals inside a body (the prelude's streaming stores) are fine; at file scope they could hide definitions
    assert gcc_unit.unit_ready("void k(int *o) {\n#if defined(__x86_64__)\n  o[0] = 1;\n#else\n  o[0] = 2;\n#endif\n}\n")
    assert not gcc_unit.unit_ready("#if 1\nvoid k(void) {}\n#endif\n")
    assert gcc_unit.unit_ready("void k(int *o) {\n#pragma GCC unroll 4\n  for (int i = 0; i < 8; i++) o[i] = i;\n}\n")
    assert not gcc_unit.unit_ready("#pragma GCC optimize(\"O0\")\nvoid k(void) {}\n")
    assert not gcc_unit.unit_ready("void k(void) {\n#define X 1\n}\n")
    assert gcc_unit.flags_allow_unit(["-O2", "-g0", "-DX=1"])
    assert not gcc_unit.flags_allow_unit(["-O2", "-g"]) and not gcc_unit.flags_allow_unit(["-flto"])


@needs_gcc
def test_a_batch_is_one_unit_and_objects_match_compile_c(monkeypatch) -> None:
    clang.find_compiler(compiler="gcc")
    calls = Calls(batch.run_compiler)
    monkeypatch.setattr(batch, "run_compiler", calls)
    monkeypatch.setattr(gcc_unit, "run_compiler", calls)
    objs = clang.compile_many_c([kernel(c) for c in range(10)], compiler="gcc", jobs=1)
    assert [c[1] for c in calls.cmds] == ["-S", "-c"]  # one unit, one assembler driver; no per-file cc1 run
    for c, obj in enumerate(objs):
        assert run(obj) == expect(c)
    assert run(clang.compile_c(kernel(7), compiler="gcc")) == run(objs[7])


def test_command_line_macros_are_never_renamed() -> None:
    assert gcc_unit.flag_macros(["-O2", "-DK=k7", "-D", "N=4", "-UX", "-DF(a)=a", "-I", "inc"]) == {"K", "N", "X", "F"}
    unit = gcc_unit.build_unit({0: "void K(void) {}\nint other;\n"}, {"K"})
    assert "#define K " not in unit and "#define other other__svu0__" in unit


@needs_gcc
def test_a_name_set_by_a_flag_keeps_its_meaning() -> None:
    # K expands to k: renaming K in the unit would name the symbol K
    objs = clang.compile_many_c([kernel(3).replace("void k(", "void K("), kernel(1)], compiler="gcc", jobs=1,
                                extra_flags=["-DK=k"])  # fmt: skip
    assert run(objs[0]) == expect(3) and run(objs[1]) == expect(1)


@needs_gcc
def test_library_kernels_share_one_unit(monkeypatch) -> None:
    from svod_min.kernels.sources import kernel_source

    entries = [("elementwise", "svod_add_f32"), ("elementwise", "svod_gelu_f16"), ("matmul", "svod_matmul_f32_4x8"),
               ("softmax", "svod_softmax_f32")]  # fmt: skip
    sources = [kernel_source(family, entry) for family, entry in entries]
    assert all(gcc_unit.unit_ready(s) for s in sources)  # the prelude's and matmul's directives sit in bodies
    calls = Calls(batch.run_compiler)
    monkeypatch.setattr(batch, "run_compiler", calls)
    monkeypatch.setattr(gcc_unit, "run_compiler", calls)
    objs = clang.compile_many_c(sources, compiler="gcc", jobs=1, extra_flags=["-mavx2", "-mfma", "-mf16c"])
    assert [c[1] for c in calls.cmds] == ["-S", "-c"]
    a, b = (ctypes.c_float * 100)(*range(100)), (ctypes.c_float * 100)(*range(100, 200))
    out = (ctypes.c_float * 100)()
    with load_object(objs[0]) as lo:
        lo.function("svod_add_f32", None, *[ctypes.c_void_p] * 3, ctypes.c_int, ctypes.c_int, ctypes.c_int)(out, a, b, 100, 1, 0)
    assert list(out) == [float(2 * i + 100) for i in range(100)]


@needs_gcc
def test_the_cut_keeps_the_machine_code_of_compile_c() -> None:
    from svod_min.kernels.elementwise import render_elementwise
    from svod_min.kernels.sources import prelude

    srcs = [prelude() + render_elementwise("svod_t%d" % i, "gelu(a)+b*%d" % i, dtype="float16").function for i in range(3)]
    objs = clang.compile_many_c(srcs, compiler="gcc", jobs=1)
    alone = clang.compile_c(srcs[1], compiler="gcc")
    if shutil.which("objdump") is None:
        pytest.skip("objdump is not installed")

    def code(obj: bytes, tmp: str) -> List[str]:
        with open(tmp, "wb") as fh:
            fh.write(obj)
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", tmp], capture_output=True, text=True).stdout
        # (the unit puts each function in a section of its own: compare the code, not section names)
        return [line.split("\t", 1)[-1] for line in out.splitlines()[4:] if not line.startswith("Disassembly of")]

    import tempfile
    import os

    with tempfile.TemporaryDirectory() as tmp:
        assert code(objs[1], os.path.join(tmp, "u.o")) == code(alone, os.path.join(tmp, "a.o"))


@needs_gcc
def test_sources_the_unit_cannot_take_are_compiled_alone() -> None:
    odd = "#define SCALE 3.0f\n" + kernel(4).replace("* scale", "* SCALE")
    local_static = kernel(5).replace("return v * 2.5f", "static int once; once++; return v * 2.5f")
    objs = clang.compile_many_c([kernel(1), odd, kernel(2), local_static], compiler="gcc", jobs=1)
    assert run(objs[0]) == expect(1) and run(objs[2]) == expect(2)
    assert run(objs[1]) == [float(ctypes.c_float((x * 2.5 + 4) * 3.0 + 1.0).value) for x in range(13)]
    assert run(objs[3]) == expect(5)


@needs_gcc
def test_an_object_that_cannot_be_cut_falls_back_to_the_assembly_cut(monkeypatch) -> None:
    calls = Calls(batch.run_compiler)
    monkeypatch.setattr(batch, "run_compiler", calls)
    monkeypatch.setattr(gcc_unit, "run_compiler", calls)
    monkeypatch.setattr(gcc_unit, "split_object", lambda obj, suffix, indices: None)
    objs = clang.compile_many_c([kernel(c) for c in range(4)], compiler="gcc", jobs=1)
    assert [run(o) for o in objs] == [expect(c) for c in range(4)]
    assert [c[1] for c in calls.cmds] == ["-S", "-c", "-c"]  # the unit, its one object, then the pieces


@needs_gcc
def test_an_uncuttable_unit_falls_back(monkeypatch) -> None:
    monkeypatch.setattr(gcc_unit, "split_object", lambda obj, suffix, indices: None)
    monkeypatch.setattr(gcc_unit, "split_assembly", lambda asm, indices: None)
    objs = clang.compile_many_c([kernel(c) for c in range(4)], compiler="gcc", jobs=1)
    assert [run(o) for o in objs] == [expect(c) for c in range(4)]


def test_split_refuses_foreign_symbols_and_missing_labels() -> None:
    asm = "\t.text\n\t.globl\tk__svu0__\nk__svu0__:\n\tcall\thelper__svu1__\n\tret\n"
    assert gcc_unit.split_assembly(asm, [0, 1]) is None
    asm = "\t.text\n\t.globl\tk__svu0__\nk__svu0__:\n\tmovss\t.LC9(%rip), %xmm0\n\tret\n"
    assert gcc_unit.split_assembly(asm, [0]) is None
    asm = "\t.text\n\t.globl\tk\nk:\n\tret\n"
    assert gcc_unit.split_assembly(asm, [0]) is None  # a symbol no renaming covers
