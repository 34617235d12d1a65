"""compiler/object_split.py: a batch unit's one object (gcc or clang) cut into one object per source."""

from __future__ import annotations

import ctypes
import random
import shutil
import subprocess
from typing import List

import pytest

from svod_min.compiler import batch_unit, clang
from svod_min.compiler.object_split import split_object
from svod_min.jit_loader import load_object

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
N = 301  # not a multiple of any vector width: the tails run too
SIGNATURE = (None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int)


def library_style_sources() -> List[str]:
    """Kernels with constant pools (gelu's polynomial), shared by every source, and different dtypes."""
    from svod_min.kernels.elementwise import render_elementwise
    from svod_min.kernels.sources import prelude

    exprs = ["gelu(a)+b*%d", "exp(a)*b+%d", "a*b+%d", "sqrt(a*a+b*b)+%d"]
    return [
        prelude() + render_elementwise("svod_t%d" % i, exprs[i % 4] % i, dtype="float32").function for i in range(8)
    ]


def call(fn, seed: int) -> bytes:
    rng = random.Random(seed)
    a = (ctypes.c_float * N)(*[rng.uniform(-4, 4) for _ in range(N)])
    b = (ctypes.c_float * N)(*[rng.uniform(-4, 4) for _ in range(N)])
    out = (ctypes.c_float * N)()
    fn(out, a, b, N, 1, 0)
    return bytes(out)


def run_loaded(obj: bytes, name: str, seed: int) -> bytes:
    with load_object(obj) as lo:
        return call(lo.function(name, *SIGNATURE), seed)


def compile_unit_text(text: str, tmp, cc: str) -> bytes:
    info = clang.find_compiler(compiler=cc)
    flags = clang.compiler_flags(info, ())
    (tmp / "unit.c").write_text(text)
    subprocess.run(
        [info.path, "-c", *flags, *batch_unit.UNIT_FLAGS[info.family], str(tmp / "unit.c"), "-o", str(tmp / "unit.o")],
        check=True,
    )
    return (tmp / "unit.o").read_bytes()


def unit_object(sources: List[str], tmp, cc: str) -> bytes:
    macros = batch_unit.flag_macros(clang.compiler_flags(clang.find_compiler(compiler=cc), ()))
    return compile_unit_text(batch_unit.build_unit(dict(enumerate(sources)), macros), tmp, cc)


def test_each_piece_computes_what_the_source_compiled_alone_computes(cc: str, tmp_path) -> None:
    sources = library_style_sources()
    pieces = split_object(unit_object(sources, tmp_path, cc), batch_unit.SUFFIX, list(range(len(sources))))
    assert pieces is not None and sorted(pieces) == list(range(len(sources)))
    for i, src in enumerate(sources):
        alone = clang.compile_c(src, compiler=cc)
        assert run_loaded(pieces[i], "svod_t%d" % i, i) == run_loaded(alone, "svod_t%d" % i, i), i  # bit for bit
        assert b"__svu" not in pieces[i]  # every name restored


@needs_gcc
def test_a_real_linker_takes_every_piece(cc: str, tmp_path) -> None:
    sources = library_style_sources()[:4]
    pieces = split_object(unit_object(sources, tmp_path, cc), batch_unit.SUFFIX, list(range(len(sources))))
    assert pieces is not None
    for i, piece in pieces.items():
        obj, lib = tmp_path / ("p%d.o" % i), tmp_path / ("p%d.so" % i)
        obj.write_bytes(piece)
        subprocess.run(["gcc", "-shared", str(obj), "-o", str(lib), "-lm"], check=True, capture_output=True)
        fn = getattr(ctypes.CDLL(str(lib)), "svod_t%d" % i)
        fn.restype, fn.argtypes = SIGNATURE[0], list(SIGNATURE[1:])
        assert call(fn, 7) == run_loaded(piece, "svod_t%d" % i, 7)


def test_pieces_keep_data_and_statics_of_their_own_source(cc: str, tmp_path) -> None:
    src = (
        "static const float table[4] = {1.5f, 2.5f, 3.5f, %d.0f};\nfloat bias = %d.25f;\n"
        "float k(int i) { return table[i & 3] + bias; }\n"
    )
    sources = [src % (i, i) for i in range(3)]
    pieces = split_object(unit_object(sources, tmp_path, cc), batch_unit.SUFFIX, [0, 1, 2])
    assert pieces is not None
    for i, piece in pieces.items():
        with load_object(piece) as lo:
            k = lo.function("k", ctypes.c_float, ctypes.c_int)
            assert [k(j) for j in range(4)] == [1.5 + i + 0.25, 2.5 + i + 0.25, 3.5 + i + 0.25, 2 * i + 0.25]


@pytest.mark.parametrize(
    "source",
    [
        # source 0 calls source 1's function: its piece would not resolve
        "__attribute__((noinline)) float g__svu1__(float x) { return x * 2; }\n"
        "float k__svu0__(float x) { return g__svu1__(x) + 1; }\n",
        # a definition no source's suffix covers
        "int orphan = 3;\nint k__svu0__(void) { return orphan; }\nint k__svu1__(void) { return 1; }\n",
    ],
    ids=["cross-source call", "unowned definition"],
)
def test_what_cannot_be_cut_safely_is_refused(source: str, cc: str, tmp_path) -> None:
    def cut(text: str):
        return split_object(compile_unit_text(text, tmp_path, cc), batch_unit.SUFFIX, [0, 1])

    assert cut("float k__svu0__(float x) { return x + 1; }\nfloat g__svu1__(float x) { return x * 2; }\n") is not None
    assert cut(source) is None


def test_garbage_is_refused_not_raised() -> None:
    assert split_object(b"\x7fELF" + bytes(60), batch_unit.SUFFIX, [0]) is None
    assert split_object(b"", batch_unit.SUFFIX, [0]) is None


def test_a_batch_is_one_compiler_run_for_the_whole_unit(cc: str, monkeypatch) -> None:
    from svod_min.compiler import batch

    seen: List[List[str]] = []
    real = batch.run_compiler

    def spy(cmd, *args, **kwargs):
        seen.append(list(cmd))
        return real(cmd, *args, **kwargs)

    monkeypatch.setattr(batch, "run_compiler", spy)
    monkeypatch.setattr(batch_unit, "run_compiler", spy)
    sources = library_style_sources()[:6]
    clang.find_compiler(compiler=cc)
    objs = clang.compile_many_c(sources, compiler=cc, jobs=1)
    assert (
        len(seen) == 1 and seen[0][-3].endswith("unit0.c") and seen[0][-1].endswith("unit0.o")
    )  # one unit in, one object out
    for i, obj in enumerate(objs):  # the objects come back in source order
        assert run_loaded(obj, "svod_t%d" % i, 3) == run_loaded(
            clang.compile_c(sources[i], compiler=cc), "svod_t%d" % i, 3
        )
