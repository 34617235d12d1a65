"""The loader on real objects: behaviour vs ctypes.CDLL, relocation types, W^X, lifetime."""

from __future__ import annotations

import ctypes
import gc
import io
import math
import shutil
import subprocess
import threading

import pytest
from conftest import needs_cc
from support import loader_cases as loader_cases
from support.maps import executable_at

from svod_min.compiler import clang
from svod_min.error import RelocationRangeError, SymbolNotFoundError
from svod_min.jit_loader import PAGE, load_object, plan_layout, relocate
from svod_min.jit_loader.symbols import default_resolver

# The shared kitchen sink (tests/support/loader_cases.py; also run on arm64) plus a caller of its static helpers.
KITCHEN_SINK = loader_cases.KITCHEN_SINK + "float helper_user(float x) { return twice(x) + lookup(3); }\n"


def _build_shared(src: str, cc: str, opt: str, tmp_path) -> ctypes.CDLL:
    path = tmp_path / ("ref_%s%s.so" % (cc, opt))
    subprocess.run(
        [cc, "-shared", "-fPIC", opt, "-x", "c", "-", "-o", str(path), "-lm"],
        input=src.encode(),
        check=True,
        capture_output=True,
    )
    return ctypes.CDLL(str(path))


def _prototypes(lib) -> dict:
    f = ctypes.c_float
    protos = {
        "bump": (ctypes.c_int,),
        "lookup": (f, ctypes.c_int),
        "libm": (f, f),
        "jump": (ctypes.c_int, ctypes.c_int),
        "name_len": (ctypes.c_int, ctypes.c_int),
        "apply_op": (f, ctypes.c_int, f),
        "helper_user": (f, f),
    }
    out = {}
    for name, (res, *args) in protos.items():
        if isinstance(lib, ctypes.CDLL):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, list(args)
        else:
            fn = lib.function(name, res, *args)
        out[name] = fn
    return out


def _exercise(fns: dict) -> list:
    results = [fns["bump"]() for _ in range(3)]
    results += [fns["lookup"](i) for i in range(10)]
    results += [round(fns["libm"](x), 4) for x in (0.5, 1.0, 2.5)]
    results += [fns["jump"](i) for i in range(-1, 10)]
    results += [fns["name_len"](i) for i in range(3)]
    results += [fns["apply_op"](i, 3.0) for i in range(2)]
    results += [fns["helper_user"](1.5)]
    return results


@pytest.mark.parametrize("opt", ["-O0", "-O2"])
def test_kitchen_sink_matches_cdll(cc: str, opt: str, tmp_path) -> None:
    reference = _exercise(_prototypes(_build_shared(KITCHEN_SINK, cc, opt, tmp_path)))
    obj = clang.compile_c(KITCHEN_SINK, compiler=cc, extra_flags=[opt])
    with load_object(obj) as lo:
        ours = _exercise(_prototypes(lo))
    assert ours == reference
    # and against an independent pure-Python expectation for a few entries
    assert ours[:3] == [1101, 2102, 3103]
    assert ours[3:13] == [1, 2, 3, 5, 7, 11, 13, 17, 1, 2]


def test_bss_state_persists_and_objects_are_independent(cc: str) -> None:
    obj = clang.compile_c(KITCHEN_SINK, compiler=cc)
    a, b = load_object(obj), load_object(obj)
    try:
        bump_a = a.function("bump", ctypes.c_int)
        bump_b = b.function("bump", ctypes.c_int)
        assert [bump_a(), bump_a(), bump_b()] == [1101, 2102, 1101]
    finally:
        a.close()
        b.close()


def test_memcpy_memset_calls_resolve(cc: str) -> None:
    obj = clang.compile_c(KITCHEN_SINK, compiler=cc)
    src = ctypes.create_string_buffer(bytes(range(256)) * 64)
    dst = ctypes.create_string_buffer(16384)
    with load_object(obj) as lo:
        lo.function("big_copy", None, ctypes.c_void_p, ctypes.c_void_p)(dst, src)
    assert dst.raw[:100] == b"z" * 100
    assert dst.raw[100:16384] == src.raw[100:16384]


def test_libm_matches_python_math(cc: str) -> None:
    with load_object(clang.compile_c(KITCHEN_SINK, compiler=cc)) as lo:
        f = lo.function("libm", ctypes.c_float, ctypes.c_float)
        for x in (0.25, 1.0, 3.0):
            expect = math.exp(x) + math.log(x + 2.0) + x**1.5
            assert f(x) == pytest.approx(expect, rel=1e-6)


def _reloc_types(obj: bytes) -> set:
    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(obj))
    return {
        rel["r_info_type"]
        for sec in elf.iter_sections()
        if sec.header.sh_type == "SHT_RELA"
        for rel in sec.iter_relocations()
    }


# (name, type number, source, compiler, extra flags, entry, prototype, args, expected)
X86_CASES = [
    (
        "PC32",
        2,
        "static const int t[4]={4,3,2,1}; int f(int i){return t[i&3];}",
        None,
        [],
        "f",
        (ctypes.c_int, ctypes.c_int),
        (1,),
        3,
    ),
    (
        "PLT32",
        4,
        "#include <math.h>\nfloat f(float x){return expf(x)+1.0f;}",
        None,
        ["-fplt"],
        "f",
        (ctypes.c_float, ctypes.c_float),
        (0.0,),
        2.0,
    ),
    (
        "GOTPCRELX",
        41,
        "#include <math.h>\nfloat f(float x){return expf(x)+1.0f;}",
        "gcc",
        ["-fno-plt"],
        "f",
        (ctypes.c_float, ctypes.c_float),
        (0.0,),
        2.0,
    ),
    ("REX_GOTPCRELX", 42, "int g = 7; int f(void){ return g * 6; }", None, [], "f", (ctypes.c_int,), (), 42),
    (
        "GOTPCREL",
        9,
        "int g = 5; int f(void){ return g + 1; }",
        "gcc",
        ["-Wa,-mrelax-relocations=no"],
        "f",
        (ctypes.c_int,),
        (),
        6,
    ),
    (
        "R_X86_64_64",
        1,
        "static int a(void){return 1;} static int b(void){return 2;}\n"
        "static int (*const t[2])(void) = {a, b}; int f(int i){ return t[i&1]() * 10; }",
        None,
        [],
        "f",
        (ctypes.c_int, ctypes.c_int),
        (1,),
        20,
    ),
    (
        "PC64",
        24,
        '__asm__(".section .rodata.str,\\"a\\"\\ntarget_str: .asciz \\"pc64\\"\\n'
        '.section .rodata\\n.balign 8\\n.globl pc64_off\\npc64_off: .quad target_str - .\\n.text\\n");\n'
        "extern const long pc64_off;\n"
        "char f(void){ const char* p = (const char*)&pc64_off + pc64_off; return p[2]; }",
        None,
        [],
        "f",
        (ctypes.c_char,),
        (),
        b"6",
    ),
]


@pytest.mark.skipif(clang.host_arch() != "x86_64", reason="x86_64 relocation tests execute code")
@pytest.mark.parametrize("case", X86_CASES, ids=[c[0] for c in X86_CASES])
def test_x86_64_relocation_type_runs(case, tmp_path) -> None:
    name, rtype, src, cc, flags, entry, proto, args, expected = case
    cc = cc or ("clang" if shutil.which("clang") else "gcc")
    if not shutil.which(cc):
        pytest.skip("compiler %s not installed" % cc)
    obj = clang.compile_c(src, compiler=cc, extra_flags=flags)
    assert rtype in _reloc_types(obj), "snippet no longer produces %s" % name
    with load_object(obj) as lo:
        got = lo.function(entry, *proto)(*args)
    lib = _build_shared(src, cc, "-O2", tmp_path)
    ref = getattr(lib, entry)
    ref.restype, ref.argtypes = proto[0], list(proto[1:])
    assert got == ref(*args) == expected


@needs_cc
def test_two_entry_points_and_intra_object_calls() -> None:
    src = "int inner(int x){return x*3;} int outer(int x){return inner(x)+inner(1);}"
    with load_object(clang.compile_c(src, extra_flags=["-O0"])) as lo:
        assert lo.function("outer", ctypes.c_int, ctypes.c_int)(5) == 18
        assert lo.function("inner", ctypes.c_int, ctypes.c_int)(5) == 15
        assert lo.address("inner") != lo.address("outer")


@needs_cc
def test_relocate_is_pure_and_base_dependent_only_where_expected() -> None:
    obj = clang.compile_c(KITCHEN_SINK)
    one = relocate(obj, 0x10000000, default_resolver)
    again = relocate(obj, 0x10000000, default_resolver)
    other = relocate(obj, 0x20000000, default_resolver)
    assert one.image == again.image
    assert one.size == len(one.image) and one.size % PAGE == 0
    assert one.symbols["bump"] - one.base == other.symbols["bump"] - other.base
    assert set(one.sections) >= {".text", ".rodata", ".data", ".bss"}
    assert one.image != other.image  # the pointer table and GOT hold absolute addresses


# Over a page of constants: the rodata of this object cannot share the code's page.
BIG_TABLE = (
    "static const float big_table[2048] = {%s};\nfloat big_lookup(int i) { return big_table[i & 2047]; }\n"
    % ", ".join("%d.5f" % i for i in range(2048))
)


@needs_cc
def test_sections_are_placed_by_flags_with_the_right_protection() -> None:
    layout = plan_layout(clang.compile_c(KITCHEN_SINK + BIG_TABLE))
    segs = {s.name: s for s in layout.segments}
    assert segs["text"].prot == 5 and segs["rodata"].prot == 1 and segs["data"].prot == 3
    for name, off in layout.sections.items():
        seg = next(s for s in layout.segments if s.offset <= off < s.offset + max(s.size, 1))
        expected = {".text": "text", ".rodata": "rodata", ".data": "data", ".bss": "data"}.get(name)
        if expected:
            assert seg.name == expected, name


@needs_cc
def test_a_small_image_keeps_its_constants_on_its_one_read_execute_page() -> None:
    layout = plan_layout(clang.compile_c(KITCHEN_SINK))
    segs = {s.name: s for s in layout.segments}
    assert set(segs) == {"text", "data"}, segs  # no rodata page of its own
    text = segs["text"]
    assert text.prot == 5 and text.offset == 0 and text.size <= PAGE  # read+execute, never writable
    assert text.offset <= layout.sections[".rodata"] < text.offset + text.size
    assert segs["data"].offset >= PAGE and segs["data"].prot == 3
    # (test_kitchen_sink_matches_cdll runs this layout against the same source as a shared library)


@needs_cc
def test_constants_on_their_own_read_only_page_are_read_correctly() -> None:
    with load_object(clang.compile_c(BIG_TABLE)) as lo:
        assert [s.name for s in lo.segments] == ["text", "rodata"]
        big_lookup = lo.function("big_lookup", ctypes.c_float, ctypes.c_int)
        assert [big_lookup(i) for i in (0, 7, 2047, 2048 + 5)] == [0.5, 7.5, 2047.5, 5.5]


def _maps_with_wx() -> list:
    with open("/proc/self/maps") as fh:
        return [line for line in fh if line.split()[1][:3] in ("rwx", "-wx") or "wx" in line.split()[1]]


@needs_cc
def test_no_mapping_is_ever_writable_and_executable() -> None:
    objs = [clang.compile_c(KITCHEN_SINK.replace("bump", "bump%d" % i)) for i in range(3)]
    seen: list = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            seen.extend(_maps_with_wx())

    baseline = _maps_with_wx()
    t = threading.Thread(target=sampler)
    t.start()
    try:
        loaded = [load_object(o) for _ in range(40) for o in objs]
        for lo in loaded:
            lo.close()
    finally:
        stop.set()
        t.join()
    assert [m for m in seen if m not in baseline] == []
    assert _maps_with_wx() == baseline


@needs_cc
def test_memfd_mode_runs(monkeypatch) -> None:
    from svod_min.jit_loader import memory

    monkeypatch.setattr(memory, "_mode", "memfd")
    with load_object(clang.compile_c(KITCHEN_SINK)) as lo:
        assert lo.mode == "memfd"
        bump = lo.function("bump", ctypes.c_int)
        assert [bump(), bump()] == [1101, 2102]  # data segment stays writable (private COW)


@needs_cc
def test_anon_refusal_falls_back_to_memfd(monkeypatch) -> None:
    from svod_min.jit_loader import memory

    monkeypatch.setattr(memory, "_mode", "anon")
    real = memory._mprotect

    def refuse_exec(addr, size, prot):  # what SELinux deny_execmem / MDWE do
        if prot & 4:
            ctypes.set_errno(13)
            return -1
        return real(addr, size, prot)

    monkeypatch.setattr(memory, "_mprotect", refuse_exec)
    with load_object(clang.compile_c("int f(void){return 9;}")) as lo:
        assert lo.mode == "memfd"
        assert lo.function("f", ctypes.c_int)() == 9
    assert memory.wx_mode() == "memfd"


@needs_cc
def test_close_unmaps_and_gc_frees() -> None:
    obj = clang.compile_c("int f(void){return 1;}")
    lo = load_object(obj)
    base = lo.base
    assert executable_at(base)
    lo.close()
    lo.close()  # idempotent
    assert lo.closed
    assert not executable_at(base)
    with pytest.raises(Exception, match="closed"):
        lo.address("f")

    lo = load_object(obj)
    fn = lo.function("f", ctypes.c_int)
    base = lo.base
    del lo
    gc.collect()
    assert fn() == 1  # the function keeps its object mapped
    del fn
    gc.collect()
    assert not executable_at(base)


@needs_cc
def test_missing_symbol_and_missing_entry_point() -> None:
    obj = clang.compile_c("extern int nowhere_to_be_found(int); int f(int x){return nowhere_to_be_found(x);}")
    with pytest.raises(SymbolNotFoundError, match="nowhere_to_be_found"):
        load_object(obj)
    with load_object(obj, symbols={"nowhere_to_be_found": 0x1000}) as lo:
        with pytest.raises(SymbolNotFoundError, match="'g' is not defined.*f"):
            lo.address("g")


@needs_cc
def test_weak_undefined_symbol_resolves_to_null() -> None:
    src = "extern int maybe_there(void) __attribute__((weak)); int f(void){ return maybe_there ? 1 : 2; }"
    with load_object(clang.compile_c(src)) as lo:
        assert lo.function("f", ctypes.c_int)() == 2


@needs_cc
def test_user_symbols_override_and_far_targets_use_stubs() -> None:
    """An external 'function' placed far away still works: calls go through in-image stubs."""
    callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)
    # The callback lives in libffi's closure memory, typically far from our image.
    cb = callback_type(lambda x: x * 7)
    addr = ctypes.cast(cb, ctypes.c_void_p).value
    src = "extern int cb(int); int f(int x){ return cb(x) + 1; }"
    with load_object(clang.compile_c(src, extra_flags=["-fplt"]), symbols={"cb": addr}) as lo:
        assert lo.function("f", ctypes.c_int, ctypes.c_int)(6) == 43


@needs_cc
def test_pc32_to_far_external_data_is_refused_not_truncated() -> None:
    # -fvisibility=hidden makes the compiler assume `far` is near: a plain PC32.
    src = 'extern int far __attribute__((visibility("hidden"))); int f(void){ return far; }'
    obj = clang.compile_c(src)
    assert 2 in _reloc_types(obj)
    with pytest.raises(RelocationRangeError, match="PC32.*'far'.*32"):
        relocate(obj, 0x10000000, lambda name: 0x7F0000000000)
