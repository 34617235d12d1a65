"""The native layout planner (jit_loader/native_layout.py, templates/c/layout.c.j2) against the Python layout.

The planner may decline any object; what it accepts must be laid out exactly as the Python layout
does (image, segments, names, entry points), for real objects and for mutated ones alike.
"""

from __future__ import annotations

import ctypes
import os
import random
import shutil
import struct
import subprocess
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest
from support.fuzz import ENGINE, fuzz_engine

from svod_min import resources
from svod_min.compiler import clang
from svod_min.error import LoaderError
from svod_min.jit_loader import layout as layout_mod
from svod_min.jit_loader import load_object, native_layout
from svod_min.jit_loader.elf import parse_object

HOST = clang.host_arch()
pytestmark = pytest.mark.skipif(HOST not in native_layout.NATIVE_ARCHES, reason="the planner ships for x86_64 only")
COMPILERS = [cc for cc in ("clang", "gcc") if shutil.which(cc)]
needs_cc = pytest.mark.skipif(not COMPILERS, reason="no C compiler")

# Kernels of the kind the planner is for; all but "externs" need no GOT, stub or external (their image
# is the same at every base).
SOURCES: Dict[str, str] = {
    "table": """
static const float scale[4] = {1.0f, 2.0f, 3.0f, 4.0f};
void kern(float* restrict out, const float* restrict a, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] * scale[i & 3];
}""",
    "switch": """
static int helper(int x) { return x * 3 + 1; }
int kern(int op, int x) {
    switch (op) { case 0: return helper(x); case 1: return x - 7; case 2: return x * x; case 3: return x ^ 5;
                  case 4: return x << 2; case 5: return -x; default: return 0; }
}
int other(int x) { return helper(x & 7) + x; }""",
    "data": """
static double acc[64];
static int counter = 5;
static const char label[] = "svod";
double kern(const double* a, int n) {
    for (int i = 0; i < n; i++) acc[i & 63] += a[i];
    counter++;
    return acc[0] + label[1] + counter;
}""",
    "externs": """
#include <math.h>
extern float table_scale;
extern __attribute__((weak)) long optional_count;
static float helper(float x) { return logf(x) + table_scale; }
float kern(float x) { return expf(x) * helper(x) + (float)(&optional_count ? optional_count : 0); }""",
    "bss": """
static char big[3 << 20];
long kern(long i) { big[i] = 1; return (long)big[i / 2]; }""",
}
OPT_LEVELS = ("-O0", "-O2", "-O3")


def python_layout(obj: bytes) -> layout_mod.Layout:
    """The Python layout, bypassing the cache."""
    parsed = parse_object(obj, tuple(layout_mod.ARCHES))
    return layout_mod._Builder(parsed, layout_mod.ARCHES[parsed.machine]).build()


FIELDS = ("arch", "size", "template", "segments", "sections", "symbols", "externals", "code", "got", "stubs", "patches")


def differences(native: layout_mod.Layout, python: layout_mod.Layout) -> List[str]:
    return [f for f in FIELDS if getattr(native, f) != getattr(python, f)]


@pytest.fixture(scope="module")
def planner() -> native_layout.NativePlanner:
    data = resources.read_bytes(native_layout.PLANNER_OBJECT % HOST)
    return native_layout.NativePlanner(load_object(data), HOST)


@pytest.fixture(scope="module")
def objects() -> List[Tuple[str, bytes]]:
    if not COMPILERS:
        pytest.skip("no C compiler")
    return [
        ("%s-%s%s" % (name, cc, opt), clang.compile_c(src, compiler=cc, extra_flags=[opt]))
        for name, src in SOURCES.items()
        for cc in COMPILERS
        for opt in OPT_LEVELS
    ]


def test_the_planner_object_is_self_contained_and_plans_itself(planner: native_layout.NativePlanner) -> None:
    data = resources.read_bytes(native_layout.PLANNER_OBJECT % HOST)
    undefined = [s.name for s in parse_object(data, tuple(layout_mod.ARCHES)).symbols if s.name and s.shndx == 0]
    assert undefined == []  # it is mapped before any resolver could be asked
    mine = planner.plan(data)
    assert mine is not None and differences(mine, python_layout(data)) == []


@needs_cc
def test_kernels_are_planned_natively_and_exactly_as_in_python(planner, objects) -> None:
    for label, obj in objects:
        mine = planner.plan(obj)
        assert mine is not None, "the planner declined %s" % label
        assert differences(mine, python_layout(obj)) == [], label
        assert mine.fixed != label.startswith("externs"), label


@needs_cc
def test_a_large_bss_takes_a_second_call_with_the_size_the_planner_asked_for(planner, objects) -> None:
    obj = dict(objects)["bss-%s-O2" % COMPILERS[0]]
    mine = planner.plan(obj)
    assert mine is not None and mine.size > 3 << 20
    assert mine.segments[-1].name == "data" and mine.segments[-1].size >= 3 << 20


def _prebuilt(path: str) -> Optional[bytes]:
    try:
        return resources.read_bytes(path)
    except OSError:
        return None


@needs_cc
def test_a_global_reached_through_the_got_gets_a_slot_as_in_python(planner) -> None:
    obj = clang.compile_c("int kern(int x) { return x + 1; }\nint (*entry(void))(int) { return kern; }\n")
    mine = planner.plan(obj)
    assert mine is not None and mine.got and not mine.externals
    assert differences(mine, python_layout(obj)) == []


def test_prebuilt_objects_with_got_slots_and_stubs_are_planned_as_in_python(planner) -> None:
    # The libraries read the weak svod_stream_bytes through the GOT; the runtime calls pthreads.
    paths = ["kernels/prebuilt/%s/library.o" % v for v in ("x86_64-baseline", "x86_64-avx2", "x86_64-v4")]
    found = [
        data for data in map(_prebuilt, paths + ["kernels/prebuilt/x86_64-baseline/runtime.o"]) if data is not None
    ]
    if not found:
        pytest.skip("no prebuilt objects in this tree")
    for data in found:
        mine = planner.plan(data)
        assert mine is not None and (mine.got or mine.stubs) and mine.externals
        assert differences(mine, python_layout(data)) == []


@needs_cc
def test_external_calls_and_globals_go_through_stubs_and_got_slots(planner, objects) -> None:
    for label, obj in objects:
        if label.startswith("externs"):
            mine = planner.plan(obj)
            assert mine is not None and {"expf", "logf"} <= set(mine.externals), label
            assert mine.externals["optional_count"] is True and mine.externals["table_scale"] is False
            assert differences(mine, python_layout(obj)) == [], label


@needs_cc
def test_an_absolute_address_is_declined(planner) -> None:
    obj = clang.compile_c("extern int answer;\nint* const where = &answer;\nint* kern(void) { return where; }\n")
    assert planner.plan(obj) is None
    assert python_layout(obj).patches


@needs_cc
def test_cross_objects_are_declined(planner) -> None:
    if "clang" not in COMPILERS:
        pytest.skip("clang cross-compiles the aarch64 object")
    obj = clang.compile_c(SOURCES["table"], extra_flags=["--target=aarch64-linux-gnu"])
    assert planner.plan(obj) is None
    assert python_layout(obj).arch.name == "aarch64"


def _symbol_offsets(obj: bytes) -> Dict[str, Tuple[int, int]]:
    """Symbol name -> (file offset of its entry, its st_name)."""
    parsed = parse_object(obj, tuple(layout_mod.ARCHES))
    symtab = next(s for s in parsed.sections if s.type == 2)
    return {
        sym.name: (symtab.offset + 24 * sym.index, struct.unpack_from("<I", obj, symtab.offset + 24 * sym.index)[0])
        for sym in parsed.symbols
        if sym.name
    }


@needs_cc
def test_a_name_defined_twice_is_left_to_the_python_precedence_rules(planner, objects) -> None:
    original = dict(objects)["switch-%s-O0" % COMPILERS[0]]
    obj = bytearray(original)
    offsets = _symbol_offsets(original)
    helper_entry, kern_name = offsets["helper"][0], offsets["kern"][1]
    struct.pack_into("<I", obj, helper_entry, kern_name)  # the local helper is now also called "kern"
    assert planner.plan(bytes(obj)) is None
    global_kern = python_layout(original).symbols["kern"]
    assert python_layout(bytes(obj)).symbols["kern"] == global_kern  # the global wins
    with load_object(bytes(obj)) as lo:
        assert lo.address("kern") == lo.base + global_kern


# --- mutated objects: whatever the planner accepts, Python accepts identically -------------------


@needs_cc
@pytest.mark.skipif(not os.path.isfile(ENGINE), reason="bench/fuzz_loader_long.py (the mutation engine) is missing")
def test_mutated_objects_planned_natively_match_python_or_are_declined(planner, objects) -> None:
    fz = fuzz_engine()
    rng = random.Random(20261126)
    accepted = declined = 0
    for _ in range(3000):
        label, seed = objects[rng.randrange(len(objects))]
        data = fz.apply_mutations(seed, fz.random_mutations(rng))
        mine = planner.plan(data)
        if mine is None:
            declined += 1
            continue
        try:
            python = python_layout(data)
        except LoaderError as exc:
            pytest.fail("the planner accepted a mutation of %s that Python refuses (%s)" % (label, exc))
        assert differences(mine, python) == [], label
        accepted += 1
    assert accepted > 100 and declined > 100  # both sides of the planner were exercised


@needs_cc
def test_every_truncation_is_declined(planner, objects) -> None:
    seed = dict(objects)["table-%s-O2" % COMPILERS[0]]
    for cut in range(len(seed)):
        assert planner.plan(seed[:cut]) is None


# --- when the planner is used ---------------------------------------------------------------------


@pytest.fixture
def fresh_process() -> Iterator[Tuple[Callable[[bytes], Any], List[bytes]]]:
    """The planner forgotten, as in a new process; a load function that records what it maps."""
    loaded: List[bytes] = []

    def load(data: bytes) -> Any:
        loaded.append(data)
        return load_object(data)

    native_layout.reset_native_planner()
    try:
        yield load, loaded
    finally:
        native_layout.reset_native_planner()


def test_the_planner_is_mapped_at_the_second_load_of_a_process(fresh_process) -> None:
    load, loaded = fresh_process
    assert native_layout.native_planner(load) is None and loaded == []
    mine = native_layout.native_planner(load)
    assert mine is not None and len(loaded) == 1
    assert native_layout.native_planner(load) is mine and len(loaded) == 1


def test_a_large_object_maps_the_planner_at_its_first_load(fresh_process) -> None:
    load, loaded = fresh_process
    assert native_layout.native_planner(load, native_layout.EAGER_BYTES) is not None and len(loaded) == 1


def test_a_bad_svod_native_layout_value_is_named_at_every_load(monkeypatch, fresh_process) -> None:
    from svod_min.error import ConfigError

    load, _loaded = fresh_process
    monkeypatch.setenv(native_layout.NATIVE_LAYOUT_ENV, "maybe")
    assert native_layout.native_planner(load) is None
    for _ in range(2):
        with pytest.raises(ConfigError, match="SVOD_NATIVE_LAYOUT='maybe'"):
            native_layout.native_planner(load)


@pytest.mark.parametrize("damage", [b"not an object", b"\x7fELF" + b"\0" * 60])
def test_a_damaged_planner_object_leaves_loads_to_the_python_layout(monkeypatch, fresh_process, damage, caplog) -> None:
    monkeypatch.setattr(native_layout.resources, "read_bytes", lambda path: damage)
    load, _loaded = fresh_process
    assert native_layout.native_planner(load) is None
    assert native_layout.native_planner(load) is None  # declined for good, with a warning
    assert "could not be mapped" in caplog.text
    assert native_layout.native_planner(load) is None


_CHILD = r"""
import sys
from svod_min.jit_loader import load_object, native_layout
obj = bytes.fromhex(sys.argv[1])
for _ in range(3):
    load_object(obj).close()
print(native_layout.native_planner(load_object) is not None)
"""


@needs_cc
@pytest.mark.parametrize("setting, expected", [("1", "True"), ("0", "False")])
def test_svod_native_layout_turns_the_planner_off(objects, setting: str, expected: str) -> None:
    env = dict(os.environ, **{native_layout.NATIVE_LAYOUT_ENV: setting})
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, objects[0][1].hex()], env=env, check=True, capture_output=True, text=True
    ).stdout.split()
    assert out == [expected]


@needs_cc
def test_kernels_loaded_through_the_planner_compute_what_numpy_does(objects, fresh_process) -> None:
    np = pytest.importorskip("numpy")
    obj = dict(objects)["table-%s-O2" % COMPILERS[0]]
    load_object(objects[-1][1]).close()  # the first load of the "process" maps no planner
    layout_mod._layout_cache.clear()
    with load_object(obj) as lo:  # the second maps it, and it plans this object
        planner = native_layout.native_planner(load_object)
        assert planner is not None and planner(obj) is not None
        fn = lo.function("kern", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        a = np.arange(37, dtype=np.float32)
        out = np.zeros_like(a)
        fn(out.ctypes.data, a.ctypes.data, a.size)
    np.testing.assert_array_equal(out, a * np.tile(np.float32([1, 2, 3, 4]), 10)[:37])
