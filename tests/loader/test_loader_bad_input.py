"""Malformed and hostile objects: every one is a LoaderError with a useful message."""

from __future__ import annotations

import random
import shutil
import struct

import pytest
from conftest import needs_cc

from svod_min.compiler import clang
from svod_min.error import ElfFormatError, LoaderError, SvodError, UnsupportedRelocationError
from svod_min.jit_loader import load_object, relocate
from svod_min.jit_loader.layout import plan_layout

SRC = r"""
#include <math.h>
static const float t[4] = {1, 2, 3, 4};
int g = 3;
float f(float x, int i) { return expf(x) + t[i & 3] + g; }
"""

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")


@pytest.fixture(scope="module")
def obj() -> bytes:
    if not shutil.which("clang") and not shutil.which("gcc"):
        pytest.skip("no C compiler")
    return clang.compile_c(SRC)


def _set_header(obj: bytes, index: int, value: int) -> bytes:
    fields = list(EHDR.unpack_from(obj))
    fields[index] = value
    return EHDR.pack(*fields) + obj[EHDR.size :]


def _sections(obj: bytes) -> list:
    shoff, shnum = EHDR.unpack_from(obj)[6], EHDR.unpack_from(obj)[12]
    return [list(SHDR.unpack_from(obj, shoff + i * SHDR.size)) for i in range(shnum)]


def _patch_section(obj: bytes, index: int, field: int, value: int) -> bytes:
    shoff = EHDR.unpack_from(obj)[6]
    fields = _sections(obj)[index]
    fields[field] = value
    buf = bytearray(obj)
    SHDR.pack_into(buf, shoff + index * SHDR.size, *fields)
    return bytes(buf)


def _first(obj: bytes, sh_type: int) -> int:
    return next(i for i, s in enumerate(_sections(obj)) if s[1] == sh_type)


def _patch_first_rela(obj: bytes, rtype: int) -> bytes:
    sec = _sections(obj)[_first(obj, 4)]
    buf = bytearray(obj)
    r_offset, r_info, addend = struct.unpack_from("<QQq", buf, sec[4])
    struct.pack_into("<QQq", buf, sec[4], r_offset, (r_info & ~0xFFFFFFFF) | rtype, addend)
    return bytes(buf)


def _cases(obj: bytes) -> list:
    rela = _first(obj, 4)
    symtab = _first(obj, 2)
    return [
        ("empty", b"", ElfFormatError, "truncated"),
        ("truncated header", obj[:40], ElfFormatError, "truncated"),
        ("truncated body", obj[: len(obj) // 2], ElfFormatError, "past the end"),
        ("not ELF", b"MZ" + obj[2:], ElfFormatError, "bad magic"),
        ("ELF32", obj[:4] + b"\x01" + obj[5:], ElfFormatError, "only 64-bit"),
        ("big endian", obj[:5] + b"\x02" + obj[6:], ElfFormatError, "little-endian"),
        ("shared object", _set_header(obj, 1, 3), ElfFormatError, "ET_DYN"),
        ("wrong machine (SPARC V9)", _set_header(obj, 2, 43), ElfFormatError, "unsupported machine.*SPARCV9"),
        ("section table past end", _set_header(obj, 6, len(obj) - 10), ElfFormatError, "past the end"),
        ("bad shentsize", _set_header(obj, 11, 40), ElfFormatError, "e_shentsize"),
        ("bad shstrndx", _set_header(obj, 13, 999), ElfFormatError, "out of range"),
        ("section offset past end", _patch_section(obj, 1, 4, len(obj) + 4096), ElfFormatError, "past the end"),
        ("section size huge", _patch_section(obj, 1, 5, 1 << 40), ElfFormatError, "past the end"),
        ("alignment not power of 2", _patch_section(obj, 1, 8, 24), ElfFormatError, "power of two"),
        ("section name offset", _patch_section(obj, 1, 0, 1 << 30), ElfFormatError, "name offset"),
        ("symtab entsize", _patch_section(obj, symtab, 9, 7), ElfFormatError, "entry size"),
        ("symtab strtab link", _patch_section(obj, symtab, 6, 0), ElfFormatError, "string table"),
        ("rela target", _patch_section(obj, rela, 7, 999), ElfFormatError, "targets section"),
        ("rela link", _patch_section(obj, rela, 6, 0), ElfFormatError, "symbol table"),
        (
            "unknown reloc type",
            _patch_first_rela(obj, 200),
            UnsupportedRelocationError,
            "unknown x86_64 relocation type 200",
        ),
        ("refused R_X86_64_32S", _patch_first_rela(obj, 11), UnsupportedRelocationError, "R_X86_64_32S.*-fPIC"),
        ("refused TLS", _patch_first_rela(obj, 23), UnsupportedRelocationError, "TPOFF32.*thread-local"),
        ("not bytes", "a string", ElfFormatError, "expected ELF object bytes"),
    ]


@pytest.mark.skipif(clang.host_arch() != "x86_64", reason="cases are built from an x86_64 object")
def test_bad_objects_raise_named_loader_errors(obj: bytes) -> None:
    for name, data, exc_type, pattern in _cases(obj):
        for fn in (lambda d: relocate(d, 0x10000000, lambda n: 0x1000), load_object):
            with pytest.raises(exc_type, match=pattern):
                fn(data)
                pytest.fail("case %r was accepted" % name)


@needs_cc
def test_real_non_pic_object_is_refused_by_name() -> None:
    obj = clang.compile_c(
        "int s[4]; int f(int i){ s[i & 3] = i; return s[(i + 1) & 3]; }", extra_flags=["-fno-pic", "-fno-pie"]
    )
    with pytest.raises(UnsupportedRelocationError, match=r"R_X86_64_32S? \(type 1[01]\).*-fPIC"):
        plan_layout(obj)


@needs_cc
def test_real_tls_object_is_refused() -> None:
    obj = clang.compile_c("__thread int tls; int f(void){ return tls; }")
    with pytest.raises(UnsupportedRelocationError, match="thread-local"):
        plan_layout(obj)


@needs_cc
def test_large_code_model_is_refused() -> None:
    obj = clang.compile_c("int g; int f(void){ return g; }", extra_flags=["-mcmodel=large"])
    with pytest.raises(UnsupportedRelocationError, match="large code model"):
        plan_layout(obj)


@pytest.mark.skipif(clang.host_arch() != "x86_64", reason="the mutated object is x86_64")
def test_random_byte_mutations_only_raise_loader_errors(obj: bytes) -> None:
    """A short mutation sweep: success or LoaderError, nothing else (the long fuzz run is separate)."""
    rng = random.Random(1234)
    outcomes = {"ok": 0, "error": 0}
    for _ in range(1500):
        buf = bytearray(obj)
        for _ in range(rng.randint(1, 8)):
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        try:
            # relocate only: running a randomly mutated kernel would be meaningless
            relocate(bytes(buf), 0x10000000, lambda n: 0x10002000)
            outcomes["ok"] += 1
        except LoaderError:
            outcomes["error"] += 1
        except SvodError as exc:  # pragma: no cover - would be a bug
            pytest.fail("unexpected %s: %s" % (type(exc).__name__, exc))
    assert outcomes["error"] > 0 and outcomes["ok"] > 0


# --- symbols and sections the loader cannot honour (found by review, 2026-11-24) ---------------------

DATA_AND_CODE = r"""
float table[4] = {1, 2, 3, 4};
const float ro[4] = {5, 6, 7, 8};
static float bss[4];
float *touch(void) { return bss; }
void code(float *out) { out[0] = table[0] + ro[0]; }
"""


@needs_cc
@pytest.mark.parametrize("name", ["table", "ro"])
def test_a_data_symbol_is_not_an_entry_point(name: str) -> None:
    from svod_min.error import SymbolNotFoundError

    with load_object(clang.compile_c(DATA_AND_CODE)) as lib:
        assert lib.address(name)  # defined, and its address is still available
        with pytest.raises(SymbolNotFoundError, match=r"symbol '%s' is defined but is not a function" % name):
            lib.function(name, None)  # calling it would jump into a non-executable page


@needs_cc
def test_a_function_is_still_an_entry_point() -> None:
    import ctypes

    with load_object(clang.compile_c(DATA_AND_CODE)) as lib:
        out = (ctypes.c_float * 1)()
        lib.function("code", None, ctypes.c_void_p)(ctypes.addressof(out))
        assert out[0] == 6.0


IFUNC = r"""
static void impl(float *restrict out, int n) { for (int i = 0; i < n; i++) out[i] = 2; }
static void (*resolve(void))(float *, int) { return impl; }
void scale2(float *restrict out, int n) __attribute__((ifunc("resolve")));
"""

CTOR = r"""
static float t[4];
__attribute__((constructor)) static void fill(void) {  /* volatile: clang would run a foldable one itself */
  volatile float one = 1;
  for (int i = 0; i < 4; i++) t[i] = one + i;
}
void get(float *out) { for (int i = 0; i < 4; i++) out[i] = t[i]; }
"""


@needs_cc
def test_an_ifunc_is_refused_since_calling_it_runs_its_resolver() -> None:
    with pytest.raises(UnsupportedRelocationError, match="symbol scale2 is a GNU indirect function"):
        load_object(clang.compile_c(IFUNC))


@needs_cc
def test_constructors_are_refused_since_they_would_never_run() -> None:
    with pytest.raises(LoaderError, match=r"section \.init_array holds constructors, which this loader never runs"):
        load_object(clang.compile_c(CTOR))
