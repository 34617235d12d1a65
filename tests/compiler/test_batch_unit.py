"""Batches as one unit per job, gcc and clang (svod_min.compiler.batch_unit): renaming, the cut, fallbacks."""

from __future__ import annotations

import ctypes
import shutil
from typing import List

import pytest
from conftest import needs_clang
from support.unit_oracle import differences

from svod_min.compiler import batch, batch_unit, clang
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
    assert batch_unit.defined_names(src) == {"i64", "pair", "table", "a", "b", "f", "h"}


def test_unit_ready_takes_only_include_directives() -> None:
    assert batch_unit.unit_ready("#include <math.h>\nvoid k(void) {}\n")
    assert not batch_unit.unit_ready("#define N 4\nvoid k(void) {}\n")
    assert not batch_unit.unit_ready("#if 1\nvoid k(void) {}\n#endif\n")
    assert batch_unit.unit_ready("void k(int *o) {\n#pragma GCC unroll 4\n  for (int i = 0; i < 8; i++) o[i] = i;\n}\n")
    assert not batch_unit.unit_ready('#pragma GCC optimize("O0")\nvoid k(void) {}\n')
    assert not batch_unit.unit_ready("void k__svu1__(void) {}\n")
    # conditionals inside a body (the prelude's streaming stores) are fine; at file scope they could hide definitions
    assert batch_unit.unit_ready(
        "void k(int *o) {\n#if defined(__x86_64__)\n  o[0] = 1;\n#else\n  o[0] = 2;\n#endif\n}\n"
    )
    assert not batch_unit.unit_ready("void k(void) {\n#define X 1\n}\n")
    assert batch_unit.flags_allow_unit(["-O2", "-g0", "-DX=1"])
    assert not batch_unit.flags_allow_unit(["-O2", "-g"]) and not batch_unit.flags_allow_unit(["-flto"])
    assert not batch_unit.flags_allow_unit(["-Xclang", "-fmerge-functions"]) and not batch_unit.flags_allow_unit(
        ["-mllvm", "-x"]
    )


def unit_runs(monkeypatch) -> Calls:
    """Every compiler command of the batch and its unit, in order."""
    calls = Calls(batch.run_compiler)
    monkeypatch.setattr(batch, "run_compiler", calls)
    monkeypatch.setattr(batch_unit, "run_compiler", calls)
    return calls


def test_both_compilers_have_unit_flags() -> None:
    # clang -O2 folds no identical functions (MergeFunctions is off unless asked for): no flag for that
    assert "-fno-ipa-icf" in batch_unit.UNIT_FLAGS["gcc"] and "-fno-addrsig" in batch_unit.UNIT_FLAGS["clang"]
    assert all({"-ffunction-sections", "-fdata-sections"} <= set(f) for f in batch_unit.UNIT_FLAGS.values())


def test_a_batch_is_one_compiler_run(cc: str, monkeypatch) -> None:
    clang.find_compiler(compiler=cc)
    calls = unit_runs(monkeypatch)
    objs = clang.compile_many_c([kernel(c) for c in range(10)], compiler=cc, jobs=1)
    assert len(calls.cmds) == 1 and calls.cmds[0][1] == "-c" and calls.cmds[0][-3].endswith("unit0.c")
    for c, obj in enumerate(objs):
        assert run(obj) == expect(c)
        assert b"__svu" not in obj
    assert run(clang.compile_c(kernel(7), compiler=cc)) == run(objs[7])


def test_a_name_set_by_a_flag_keeps_its_meaning(cc: str) -> None:
    # K expands to k: renaming K in the unit would name the symbol K
    objs = clang.compile_many_c(
        [kernel(3).replace("void k(", "void K("), kernel(1)], compiler=cc, jobs=1, extra_flags=["-DK=k"]
    )
    assert run(objs[0]) == expect(3) and run(objs[1]) == expect(1)


def test_library_kernels_share_one_unit(cc: str, monkeypatch) -> None:
    from svod_min.kernels.sources import kernel_source

    entries = [
        ("elementwise", "svod_add_f32"),
        ("elementwise", "svod_gelu_f16"),
        ("matmul", "svod_matmul_f32_4x8"),
        ("softmax", "svod_softmax_f32"),
    ]
    sources = [kernel_source(family, entry) for family, entry in entries]
    assert all(batch_unit.unit_ready(s) for s in sources)  # the prelude's and matmul's directives sit in bodies
    clang.find_compiler(compiler=cc)
    calls = unit_runs(monkeypatch)
    objs = clang.compile_many_c(sources, compiler=cc, jobs=1, extra_flags=["-mavx2", "-mfma", "-mf16c"])
    assert [c[1] for c in calls.cmds] == ["-c"]
    a, b = (ctypes.c_float * 100)(*range(100)), (ctypes.c_float * 100)(*range(100, 200))
    out = (ctypes.c_float * 100)()
    with load_object(objs[0]) as lo:
        lo.function("svod_add_f32", None, *[ctypes.c_void_p] * 3, ctypes.c_int, ctypes.c_int, ctypes.c_int)(
            out, a, b, 100, 1, 0
        )
    assert list(out) == [float(2 * i + 100) for i in range(100)]


def test_the_cut_keeps_the_machine_code_of_compile_c(cc: str) -> None:
    from svod_min.kernels.elementwise import render_elementwise
    from svod_min.kernels.sources import prelude

    # gcc may allocate registers of a large kernel (float16 gelu) otherwise inside a unit than alone: it
    # is held to compile_c's code on smaller kernels and to compile_c's results below
    expr, dtype = ("gelu(a)+b*%d", "float16") if cc == "clang" else ("exp(a)+b*%d", "float32")
    srcs = [prelude() + render_elementwise("svod_t%d" % i, expr % i, dtype=dtype).function for i in range(3)]
    objs = clang.compile_many_c(srcs, compiler=cc, jobs=1)
    for i, src in enumerate(srcs):
        assert differences(objs[i], clang.compile_c(src, compiler=cc)) == [], i
    assert differences(objs[0], clang.compile_c(srcs[1], compiler=cc))  # the oracle can fail


def test_the_cut_computes_what_compile_c_computes(cc: str) -> None:
    """Large float16 kernels: the unit's pieces give compile_c's results, bit for bit."""
    np = pytest.importorskip("numpy")
    from svod_min.kernels.elementwise import render_elementwise
    from svod_min.kernels.sources import prelude

    srcs = [
        prelude() + render_elementwise("svod_t%d" % i, expr % i, dtype="float16").function
        for i, expr in enumerate(["gelu(a)+b*%d", "gelu(a)+b*%d", "tanh(a)*b+%d"])
    ]
    objs = clang.compile_many_c(srcs, compiler=cc, jobs=1)
    rng = np.random.default_rng(7)
    a, b = (rng.uniform(-8, 8, 4099).astype(np.float16) for _ in range(2))
    for i, src in enumerate(srcs):
        outs = []
        for obj in (objs[i], clang.compile_c(src, compiler=cc)):
            out = np.empty_like(a)
            with load_object(obj) as lo:
                fn = lo.function("svod_t%d" % i, None, *[ctypes.c_void_p] * 3, ctypes.c_int, ctypes.c_int, ctypes.c_int)
                fn(out.ctypes.data, a.ctypes.data, b.ctypes.data, a.size, 1, 0)
            outs.append(out.view(np.uint16))
        assert np.array_equal(outs[0], outs[1]), i


def library_sources() -> List[str]:
    """Every kernel of the library as compile_c would get it (prelude + its block)."""
    import os

    from svod_min.kernels.sources import C_DIR, kernel_source, split_blocks

    out = []
    for name in sorted(f for f in os.listdir(C_DIR) if f.endswith(".c")):
        with open(os.path.join(C_DIR, name)) as fh:
            blocks = split_blocks(fh.read())
        # The convolutions' blocks each inline their shared code: every 8th keeps each shape of block
        # in the unit without making one clang run of the whole library take minutes.
        step = 8 if name[:-2] in SELF_CONTAINED_BLOCKS else 1
        out.extend(kernel_source(name[:-2], entry) for entry in list(blocks)[::step])
    return out


#: Library sources whose blocks carry their own copy of the shared code (one compile per block).
SELF_CONTAINED_BLOCKS = ("conv_gemm", "depthwise")


@needs_clang
@pytest.mark.slow
@pytest.mark.python_independent  # ~10-50 s: 154 compile_c runs
def test_every_library_kernel_cut_from_a_clang_unit_is_compile_cs(monkeypatch) -> None:
    """All library sources in a clang batch (two units): each piece has compile_c's machine code.

    (gcc is held to its results instead: its unit may choose other spill slots, or keep a scalar
    constant as the head of another source's vector constant.)
    """
    import concurrent.futures

    sources = library_sources()
    assert len(sources) > 100
    built: List[int] = []
    real = batch_unit.compile_unit
    monkeypatch.setattr(batch_unit, "compile_unit", lambda *a: _record(built, real(*a)))
    objs = clang.compile_many_c(sources, compiler="clang", jobs=2)
    assert built == [len(sources) // 2, len(sources) - len(sources) // 2]  # every source from a unit, none alone
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        alone = list(pool.map(lambda s: clang.compile_c(s, compiler="clang"), sources))
    assert [i for i in range(len(sources)) if differences(objs[i], alone[i])] == []


@needs_clang
@pytest.mark.parametrize("target", ["aarch64-linux-gnu", "powerpc64le-linux-gnu"])
def test_cross_target_pieces_are_compile_cs(target: str) -> None:
    # bundle_build compiles every target's kernels through compile_many_c
    flags = ["--target=" + target]
    sources = library_sources()[::40]
    objs = clang.compile_many_c(sources, compiler="clang", jobs=1, extra_flags=flags)
    for i, src in enumerate(sources):
        assert differences(objs[i], clang.compile_c(src, compiler="clang", extra_flags=flags)) == [], i


def _record(built: List[int], indices):
    built.append(len(indices))
    return indices


def test_sources_the_unit_cannot_take_are_compiled_alone(cc: str) -> None:
    odd = "#define SCALE 3.0f\n" + kernel(4).replace("* scale", "* SCALE")
    local_static = kernel(5).replace("return v * 2.5f", "static int once; once++; return v * 2.5f")
    objs = clang.compile_many_c([kernel(1), odd, kernel(2), local_static], compiler=cc, jobs=1)
    assert run(objs[0]) == expect(1) and run(objs[2]) == expect(2)
    assert run(objs[1]) == [float(ctypes.c_float((x * 2.5 + 4) * 3.0 + 1.0).value) for x in range(13)]
    assert run(objs[3]) == expect(5)


@needs_gcc
def test_gcc_object_that_cannot_be_cut_falls_back_to_the_assembly_cut(monkeypatch) -> None:
    clang.find_compiler(compiler="gcc")
    calls = unit_runs(monkeypatch)
    monkeypatch.setattr(batch_unit, "split_object", lambda obj, suffix, indices: None)
    objs = clang.compile_many_c([kernel(c) for c in range(4)], compiler="gcc", jobs=1)
    assert [run(o) for o in objs] == [expect(c) for c in range(4)]
    assert [c[1] for c in calls.cmds] == ["-c", "-S", "-c"]  # the unit's object, its assembly, the pieces


@needs_clang
def test_clang_object_that_cannot_be_cut_is_compiled_per_source(monkeypatch) -> None:
    clang.find_compiler(compiler="clang")
    calls = unit_runs(monkeypatch)
    monkeypatch.setattr(batch_unit, "split_object", lambda obj, suffix, indices: None)
    monkeypatch.setattr(batch_unit, "split_assembly", lambda asm, indices: pytest.fail("gcc's assembly cut for clang"))
    objs = clang.compile_many_c([kernel(c) for c in range(4)], compiler="clang", jobs=1)
    assert [run(o) for o in objs] == [expect(c) for c in range(4)]
    assert calls.cmds[0][-3].endswith("unit0.c")  # the unit was tried, then one run takes k0.c .. k3.c
    assert sorted(a for a in calls.cmds[-1] if a.endswith(".c")) == ["k0.c", "k1.c", "k2.c", "k3.c"]


def test_an_uncuttable_unit_falls_back(cc: str, monkeypatch) -> None:
    monkeypatch.setattr(batch_unit, "split_object", lambda obj, suffix, indices: None)
    monkeypatch.setattr(batch_unit, "split_assembly", lambda asm, indices: None)
    objs = clang.compile_many_c([kernel(c) for c in range(4)], compiler=cc, jobs=1)
    assert [run(o) for o in objs] == [expect(c) for c in range(4)]


def test_a_failing_source_in_a_unit_is_named(cc: str, monkeypatch) -> None:
    from svod_min.error import CompilationError

    clang.find_compiler(compiler=cc)
    calls = unit_runs(monkeypatch)
    sources = [kernel(c) for c in range(6)]
    sources[4] = kernel(4).replace("* scale", "* missing_scale")
    with pytest.raises(CompilationError) as info:
        clang.compile_many_c(sources, compiler=cc, jobs=1, names=["n%d" % i for i in range(6)], numbers=range(20, 26))
    assert calls.cmds[0][-3].endswith("unit0.c")  # it was in the unit, which failed as a whole
    err = info.value
    assert "kernel 24 (n4)" in err.message and "(1 of 6 sources)" in err.message and "kernel 23" not in err.message
    assert "missing_scale" in err.diagnostics and "kernel 24:" in err.diagnostics and "__svu" not in err.diagnostics
    assert any("missing_scale" in text for _, text in err.source_lines)


def test_split_refuses_foreign_symbols_and_missing_labels() -> None:
    asm = "\t.text\n\t.globl\tk__svu0__\nk__svu0__:\n\tcall\thelper__svu1__\n\tret\n"
    assert batch_unit.split_assembly(asm, [0, 1]) is None
    asm = "\t.text\n\t.globl\tk__svu0__\nk__svu0__:\n\tmovss\t.LC9(%rip), %xmm0\n\tret\n"
    assert batch_unit.split_assembly(asm, [0]) is None
    asm = "\t.text\n\t.globl\tk\nk:\n\tret\n"
    assert batch_unit.split_assembly(asm, [0]) is None  # a symbol no renaming covers


LOCAL_CALL_SRC = r"""
__attribute__((noinline)) static float %(name)s_helper(const float *x, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += x[i] * (float)(i + %(k)d);
    return s;
}
void %(name)s(float *out, const float *x, int n) { out[0] = %(name)s_helper(x, n) + 1.0f; }
"""


@needs_clang
@pytest.mark.python_independent
def test_a_call_to_a_local_function_is_the_same_resolved_or_relocated() -> None:
    """In a unit the call to a static helper is a relocation (each function has its own section); alone the
    assembler resolves it in place. The oracle takes both as the same only where the displacement reaches the
    same helper: a displacement moved by one byte is a difference."""
    import io

    from elftools.elf.elffile import ELFFile

    sources = [LOCAL_CALL_SRC % {"name": "lc_one", "k": 1}, LOCAL_CALL_SRC % {"name": "lc_two", "k": 2}]
    objs = clang.compile_many_c(sources, compiler="clang", jobs=1)
    alone = clang.compile_c(sources[0], compiler="clang")
    assert differences(objs[0], alone) == []
    elf = ELFFile(io.BytesIO(alone))
    text = elf.get_section_by_name(".text")
    caller = next(s for s in elf.get_section_by_name(".symtab").iter_symbols() if s.name == "lc_one")
    code = text.data()[caller["st_value"] : caller["st_value"] + caller["st_size"]]
    at = text["sh_offset"] + caller["st_value"] + code.index(b"\xe8") + 1  # the call's displacement
    moved = bytearray(alone)
    moved[at] = (moved[at] + 1) % 256
    assert differences(objs[0], bytes(moved))
