"""A real linker as the oracle for the relocator, on x86_64 and aarch64.

For each snippet below (which, together, produce every relocation type the
loader supports on both architectures), the object is relocated with
``relocate()`` at a fixed base and linked with ``ld.lld`` under a linker
script that places every input section at exactly the address ``relocate()``
chose. Every relocated field is then decoded in both images into the final
address it refers to, following GOT slots, call stubs / veneers / lld thunks
and ADRP + LO12 pairs independently in each image (see support/oracle.py),
and the two must agree. Some externals live > 4 GiB away from the image, so
our stubs, veneers and GOT slots (and lld's thunks and GOT) are exercised.

On the host architecture, the loaded code is also run and compared with the
same source built ``-shared`` and loaded by ``ctypes.CDLL``.

A type-coverage test fails when the loader gains a relocation type that no
snippet here produces, and each (snippet, type) test fails when its snippet
stops producing the type it is there for.
"""

from __future__ import annotations

import ctypes
import math
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import pytest

pytest.importorskip("elftools")

from support import oracle as osup  # noqa: E402  (tests/ is on sys.path, like conftest)
from support.loader_cases import A64_DIRECT, A64_GOT, EXEC_SOURCE  # noqa: E402  (shared with tests/aarch64/)

from svod_min.compiler import clang as svod_clang  # noqa: E402
from svod_min.jit_loader import load_object, relocate  # noqa: E402
from svod_min.jit_loader.aarch64 import AARCH64  # noqa: E402
from svod_min.jit_loader.x86_64 import X86_64  # noqa: E402

HAVE_CLANG = shutil.which("clang") is not None
HAVE_LLD = shutil.which("ld.lld") is not None

pytestmark = [
    pytest.mark.oracle,
    pytest.mark.python_independent,
    pytest.mark.skipif(not HAVE_CLANG, reason="clang is not installed (needed to build the oracle objects)"),
]
needs_lld = pytest.mark.skipif(not HAVE_LLD, reason="ld.lld is not installed (the oracle linker)")

# --- addresses -----------------------------------------------------------------------

BASE = {"x86_64": 0x10000000, "aarch64": 0x40000000}
# "near" externals: within rel32 reach of the image on x86_64 (+512 MiB) and
# within ADRP reach but beyond B/BL's +-128 MiB on aarch64 (+256 MiB). The
# low 12 bits are non-zero on purpose (LO12 fields), 16-byte aligned (LDST128).
NEAR = {"x86_64": 0x30000000 + 0x7F0, "aarch64": 0x50000000 + 0x7F0}
# "far" externals: > 4 GiB away; only GOT slots, stubs/veneers/thunks and
# 64-bit fields reach them. The low 12 bits are non-zero on purpose.
FAR = 0x7F5500000000 + 0x7F0
SMALL = 0x1230  # for R_AARCH64_MOVW_UABS_G0, which needs a 16-bit address
STEP = 0x10000


# --- snippets -------------------------------------------------------------------------

X86_CALLS = r"""
float expf(float);
void *memcpy(void *, const void *, unsigned long);
extern int ext_data;
extern void ext_fn(void);
int gvar[4] = {5, 6, 7, 8};
static const float consts[4] = {1.5f, 2.5f, 3.5f, 4.75f};
__attribute__((noinline)) int helper(int i) { return gvar[i & 3] * 3; }
float call_expf(float x) { return expf(x) + 1.0f; }
float tail_expf(float x) { return expf(x); }
int call_helper(int i) { return helper(i) + 1; }
int read_ext(void) { return ext_data + gvar[1]; }
void *addr_fn(void) { return (void *)&ext_fn; }
void copy(char *d, const char *s) { memcpy(d, s, 4096); }
float pick(int i) { return consts[i & 3]; }
"""

X86_DATA = r"""
float expf(float);
extern int ext_data;
extern int near_data __attribute__((visibility("hidden")));
extern void ext_fn(void);
int gvar = 1;
__attribute__((noinline)) int helper(int i) { return i * 3 + gvar; }
void *const ptrs[5] = {(void *)&ext_fn, (void *)&ext_data, (void *)helper, (void *)&gvar, (void *)expf};
int read_near(void) { return near_data; }
__asm__(".pushsection .data.rel.ro.pcrel,\"aw\",@progbits\n"
        ".p2align 3\n"
        ".globl pc_tab\n"
        "pc_tab:\n"
        "  .quad ext_data - .\n"
        "  .quad helper - .\n"
        "  .quad gvar - . + 8\n"
        "  .long helper - .\n"
        "  .long near_data - . - 4\n"
        ".popsection\n");
"""

A64_ASM = r"""
__asm__(
    ".pushsection .text.asm_a,\"ax\",%progbits\n"
    ".globl asm_branches\n"
    "asm_branches:\n"
    "  cmp x0, #0\n"
    "  b.eq asm_target\n"
    "  cbz x1, asm_target\n"
    "  tbz x0, #3, asm_target\n"
    "  ldr x2, asm_literal\n"
    "  adr x3, asm_target\n"
    "  adrp x4, :pg_hi21_nc:asm_literal\n"
    "  add x4, x4, :lo12:asm_literal\n"
    "  movz x5, #:abs_g3:far_sym\n"
    "  movk x5, #:abs_g2_nc:far_sym\n"
    "  movk x5, #:abs_g1_nc:far_sym\n"
    "  movk x5, #:abs_g0_nc:far_sym\n"
    "  movz x6, #:abs_g2:mid_sym\n"
    "  movk x6, #:abs_g1_nc:mid_sym\n"
    "  movk x6, #:abs_g0_nc:mid_sym\n"
    "  movz x7, #:abs_g1:asm_target\n"
    "  movk x7, #:abs_g0_nc:asm_target\n"
    "  movz x8, #:abs_g0:small_abs\n"
    "  ret\n"
    ".popsection\n"
    ".pushsection .text.asm_b,\"ax\",%progbits\n"
    ".globl asm_target\n"
    "asm_target:\n"
    "  mov x0, #1\n"
    "  ret\n"
    ".popsection\n"
    ".pushsection .rodata.asm_lit,\"a\",%progbits\n"
    ".p2align 3\n"
    ".globl asm_literal\n"
    "asm_literal:\n"
    "  .xword far_sym\n"
    "  .word near_data\n"
    "  .word asm_target - .\n"
    "  .xword far_sym - .\n"
    "  .word near_data - .\n"
    ".popsection\n");
"""

X86_TARGET = ("--target=x86_64-linux-gnu",)
A64_FLAGS = ("--target=aarch64-linux-gnu", "-O2", "-fPIC", "-fno-asynchronous-unwind-tables", "-fno-unwind-tables")


@dataclass(frozen=True)
class Case:
    name: str
    arch: str
    source: str
    flags: Tuple[str, ...]
    expect: Tuple[str, ...]  # relocation types this snippet is here to produce
    far: Tuple[str, ...] = ()  # externals placed > 4 GiB away
    small: Tuple[str, ...] = ()  # externals at a 16-bit address
    compiler: str = "clang"  # gcc: host x86_64 only, through svod_min.compiler.clang.compile_c


CASES = [
    Case(
        "x86_plt",
        "x86_64",
        X86_CALLS,
        X86_TARGET + ("-fplt",),
        ("R_X86_64_PLT32", "R_X86_64_PC32", "R_X86_64_REX_GOTPCRELX"),
        far=("expf", "ext_data", "ext_fn"),
    ),
    Case(
        "x86_noplt",
        "x86_64",
        X86_CALLS,
        X86_TARGET,
        ("R_X86_64_GOTPCRELX", "R_X86_64_REX_GOTPCRELX", "R_X86_64_PC32", "R_X86_64_PLT32"),
        far=("expf", "ext_data", "memcpy"),
    ),
    Case(
        "x86_gotpcrel",
        "x86_64",
        X86_CALLS,
        X86_TARGET + ("-Wa,-mrelax-relocations=no",),
        ("R_X86_64_GOTPCREL", "R_X86_64_PC32"),
        far=("expf", "ext_fn", "memcpy"),
    ),
    # gcc's objects differ in shape (section symbols + addends, other instruction choices).
    Case(
        "x86_gcc_noplt",
        "x86_64",
        X86_CALLS,
        (),
        ("R_X86_64_GOTPCRELX", "R_X86_64_REX_GOTPCRELX", "R_X86_64_PC32"),
        far=("expf", "ext_data", "memcpy"),
        compiler="gcc",
    ),
    Case(
        "x86_gcc_gotpcrel",
        "x86_64",
        X86_CALLS,
        ("-fplt", "-Wa,-mrelax-relocations=no"),
        ("R_X86_64_GOTPCREL", "R_X86_64_PLT32", "R_X86_64_PC32"),
        far=("expf", "ext_fn", "ext_data"),
        compiler="gcc",
    ),
    Case(
        "x86_data",
        "x86_64",
        X86_DATA,
        X86_TARGET,
        ("R_X86_64_64", "R_X86_64_PC64", "R_X86_64_PC32", "R_X86_64_REX_GOTPCRELX"),
        far=("expf", "ext_data", "ext_fn"),
    ),
    Case(
        "a64_got",
        "aarch64",
        A64_GOT,
        A64_FLAGS,
        (
            "R_AARCH64_CALL26",
            "R_AARCH64_JUMP26",
            "R_AARCH64_ADR_GOT_PAGE",
            "R_AARCH64_LD64_GOT_LO12_NC",
            "R_AARCH64_ABS64",
        ),
        far=("expf", "ext_data", "ext_fn"),
    ),
    Case(
        "a64_direct",
        "aarch64",
        A64_DIRECT,
        A64_FLAGS + ("-fvisibility=hidden", "-ffunction-sections", "-fdata-sections"),
        (
            "R_AARCH64_ADR_PREL_PG_HI21",
            "R_AARCH64_ADD_ABS_LO12_NC",
            "R_AARCH64_LDST8_ABS_LO12_NC",
            "R_AARCH64_LDST16_ABS_LO12_NC",
            "R_AARCH64_LDST32_ABS_LO12_NC",
            "R_AARCH64_LDST64_ABS_LO12_NC",
            "R_AARCH64_LDST128_ABS_LO12_NC",
            "R_AARCH64_CALL26",
            "R_AARCH64_JUMP26",
        ),
    ),
    Case(
        "a64_asm",
        "aarch64",
        A64_ASM,
        A64_FLAGS,
        (
            "R_AARCH64_CONDBR19",
            "R_AARCH64_TSTBR14",
            "R_AARCH64_LD_PREL_LO19",
            "R_AARCH64_ADR_PREL_LO21",
            "R_AARCH64_ADR_PREL_PG_HI21_NC",
            "R_AARCH64_ADD_ABS_LO12_NC",
            "R_AARCH64_MOVW_UABS_G0",
            "R_AARCH64_MOVW_UABS_G0_NC",
            "R_AARCH64_MOVW_UABS_G1",
            "R_AARCH64_MOVW_UABS_G1_NC",
            "R_AARCH64_MOVW_UABS_G2",
            "R_AARCH64_MOVW_UABS_G2_NC",
            "R_AARCH64_MOVW_UABS_G3",
            "R_AARCH64_ABS64",
            "R_AARCH64_ABS32",
            "R_AARCH64_PREL32",
            "R_AARCH64_PREL64",
        ),
        far=("far_sym", "mid_sym"),
        small=("small_abs",),
    ),
]
CASES_BY_NAME = {c.name: c for c in CASES}

# Loader bugs found by the oracle: case name -> xfail reason (strict).
KNOWN_BUGS: Dict[str, str] = {}


def _type_num(arch: str, name: str) -> int:
    return (osup.X86_TYPES if arch == "x86_64" else osup.A64_TYPES)[name]


# --- building and running one case ----------------------------------------------------

_A64_OK: Optional[str] = None


def _aarch64_unavailable() -> Optional[str]:
    """Why clang cannot build aarch64 objects here, or None."""
    global _A64_OK
    if _A64_OK is None:
        proc = subprocess.run(
            ["clang", "--target=aarch64-linux-gnu", "-c", "-x", "c", "-", "-o", os.devnull],
            input=b"int f(void) { return 1; }\n",
            capture_output=True,
            timeout=120,
        )
        _A64_OK = (
            ""
            if proc.returncode == 0
            else "clang cannot target aarch64-linux-gnu: %s" % (proc.stderr.decode(errors="replace").strip()[:200])
        )
    return _A64_OK or None


def compile_case(case: Case) -> bytes:
    if case.compiler == "gcc":
        return svod_clang.compile_c(case.source, extra_flags=case.flags, compiler="gcc")
    if case.arch == "x86_64":
        # svod_min's own driver (its DEFAULT_FLAGS) with an explicit target,
        # so the x86_64 cases also build on an aarch64 host.
        return svod_clang.compile_c(case.source, extra_flags=case.flags, compiler="clang")
    proc = subprocess.run(
        ["clang", *case.flags, "-c", "-x", "c", "-", "-o", "-"],
        input=case.source.encode(),
        capture_output=True,
        timeout=300,
    )
    if proc.returncode != 0:
        raise RuntimeError("clang failed: %s" % proc.stderr.decode(errors="replace"))
    return proc.stdout


def external_addresses(case: Case, names: List[str]) -> Dict[str, int]:
    out = {}
    for i, name in enumerate(sorted(names)):
        if name in case.small:
            out[name] = SMALL + i * 0x10
        elif name in case.far:
            out[name] = FAR + i * STEP
        else:
            out[name] = NEAR[case.arch] + i * STEP
    return out


def lld_external_addresses(case: Case, info: osup.ObjectInfo, ours: Dict[str, int]) -> Dict[str, int]:
    """lld gets the same addresses, except where a real static link cannot reach them.

    x86_64 has no range-extension thunks: a PLT32 / PC32 field against a far
    external cannot be linked, while our loader sends the call through a
    stub. There lld gets a near alias; the comparison is by symbol
    (``support.oracle.canonical``), so both must still reach that external.
    """
    out = dict(ours)
    if case.arch == "x86_64":
        direct = {r.sym for r in info.relocs if r.external and r.type in (2, 4)}
        for i, name in enumerate(sorted(direct)):
            if name in case.far:
                out[name] = NEAR[case.arch] + 0x08000000 + i * STEP
    return out


@dataclass
class CaseResult:
    case: Case
    obj: bytes
    info: osup.ObjectInfo
    comparisons: Dict[str, osup.Comparison]  # "relax" / "no-relax" -> result
    ours_ext: Dict[str, int]
    lld_ext: Dict[str, int]


class Oracle:
    def __init__(self, workdir: str) -> None:
        self.workdir = workdir
        self.cache: Dict[str, CaseResult] = {}
        self.objects: Dict[str, bytes] = {}

    @staticmethod
    def unavailable(case: Case) -> Optional[str]:
        """Why ``case`` cannot be built here, or None."""
        if case.compiler == "gcc" and (shutil.which("gcc") is None or svod_clang.host_arch() != case.arch):
            return "gcc for %s is not available on this host" % case.arch
        if case.arch == "aarch64":
            return _aarch64_unavailable()
        return None

    def obj(self, case: Case) -> bytes:
        why = self.unavailable(case)
        if why:
            pytest.skip(why)
        if case.name not in self.objects:
            self.objects[case.name] = compile_case(case)
        return self.objects[case.name]

    def run(self, case: Case) -> CaseResult:
        if case.name in self.cache:
            return self.cache[case.name]
        obj = self.obj(case)
        info = osup.parse_object(obj)
        assert info.arch == case.arch
        ours_ext = external_addresses(case, info.externals)
        lld_ext = lld_external_addresses(case, info, ours_ext)

        def resolve(name: str) -> int:
            return ours_ext[name]

        image = relocate(obj, BASE[case.arch], resolve)
        assert image.base == BASE[case.arch]
        assert len(image.image) == image.size
        sec_addr = {name: image.sections[name] for name in info.sections}
        ours_mem = osup.Memory([(image.base, image.image)], "ours")
        comparisons = {}
        for label, relax in (("relax", True), ("no-relax", False)):
            linked = osup.link_with_lld(
                obj, info, sec_addr, lld_ext, self.workdir, "%s-%s" % (case.name, label), relax=relax
            )
            comparisons[label] = osup.compare(info, ours_mem, image.symbols, sec_addr, ours_ext, linked, lld_ext)
        result = CaseResult(case, obj, info, comparisons, ours_ext, lld_ext)
        self.cache[case.name] = result
        return result


@pytest.fixture(scope="module")
def oracle(tmp_path_factory: pytest.TempPathFactory) -> Oracle:
    return Oracle(str(tmp_path_factory.mktemp("linker-oracle")))


def _maybe_xfail(case: Case):
    reason = KNOWN_BUGS.get(case.name)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return marks


# --- tests --------------------------------------------------------------------------------


def test_cases_cover_every_supported_relocation_type() -> None:
    """Adding a relocation type to the loader requires adding a snippet for it here."""
    for arch, spec in (("x86_64", X86_64), ("aarch64", AARCH64)):
        covered = {_type_num(arch, t) for c in CASES if c.arch == arch for t in c.expect}
        missing = sorted(set(spec.relocs) - covered)
        assert not missing, "%s relocation types without an oracle snippet: %s" % (
            arch,
            [spec.type_name(t) for t in missing],
        )


_TYPE_PARAMS = [
    pytest.param(c.name, t, id="%s-%s" % (c.name, t), marks=_maybe_xfail(c)) for c in CASES for t in c.expect
]


@needs_lld
@pytest.mark.parametrize("case_name,type_name", _TYPE_PARAMS)
def test_relocation_type_agrees_with_lld(oracle: Oracle, case_name: str, type_name: str) -> None:
    """The snippet still produces ``type_name``, and every such field reaches lld's target."""
    case = CASES_BY_NAME[case_name]
    result = oracle.run(case)
    rtype = _type_num(case.arch, type_name)
    produced = result.info.relocs_of(rtype)
    assert produced, "%s no longer produces %s (it produces: %s)" % (
        case_name,
        type_name,
        [osup.type_name(case.arch, t) for t in result.info.types()],
    )
    for label, comp in result.comparisons.items():
        bad = comp.failures(rtype)
        assert not bad, "%s, lld %s: %d of %d %s field(s) disagree:\n  %s" % (
            case_name,
            label,
            len(bad),
            len(produced),
            type_name,
            "\n  ".join(bad),
        )


@needs_lld
@pytest.mark.parametrize("case_name", [pytest.param(c.name, marks=_maybe_xfail(c)) for c in CASES])
def test_whole_object_agrees_with_lld(oracle: Oracle, case_name: str) -> None:
    """Every relocation of the object (whatever its type), symbol placement, untouched bytes."""
    result = oracle.run(CASES_BY_NAME[case_name])
    unknown = [
        osup.type_name(result.info.arch, t) for t in result.info.types() if (result.info.arch, t) not in osup.TYPE_NAMES
    ]
    assert not unknown, "the oracle cannot decode: %s" % unknown
    for label, comp in result.comparisons.items():
        bad = comp.failures()
        assert not bad, "%s, lld %s:\n  %s" % (case_name, label, "\n  ".join(bad))
        assert len(comp.results) == len(result.info.relocs)


@needs_lld
def test_far_externals_are_reached_through_indirections(oracle: Oracle) -> None:
    """At least one far external is reached via our stub/GOT/veneer and via lld's GOT/thunk."""
    seen = {"x86_64": set(), "aarch64": set()}
    for case in CASES:
        if oracle.unavailable(case):
            continue
        result = oracle.run(case)
        for comp in result.comparisons.values():
            for res in comp.results:
                r = res.reloc
                if not (r.external and r.sym in case.far and res.ok):
                    continue
                assert res.ours is not None and res.theirs is not None
                for v in res.ours.value:
                    if abs(v - result.ours_ext[r.sym]) < 0x8000 and abs(v - BASE[case.arch]) > 1 << 32:
                        seen[case.arch].add((osup.type_name(case.arch, r.type), res.ours.path))
    assert any("jmp *slot" in p for _, p in seen["x86_64"]), seen["x86_64"]
    assert any(p.startswith("got load") for _, p in seen["x86_64"]), seen["x86_64"]
    if not _aarch64_unavailable():
        assert any("ldr lit" in p for _, p in seen["aarch64"]), seen["aarch64"]
        assert any("adrp+ldr got" in p for _, p in seen["aarch64"]), seen["aarch64"]


# --- execution: the loaded code vs the same source as a ctypes.CDLL shared object ---------


EXEC_VARIANTS = {
    "x86_64": [
        ("fno-plt", (), ("R_X86_64_GOTPCRELX", "R_X86_64_REX_GOTPCRELX", "R_X86_64_64")),
        ("fplt", ("-fplt",), ("R_X86_64_PLT32", "R_X86_64_REX_GOTPCRELX", "R_X86_64_64")),
        ("gotpcrel", ("-Wa,-mrelax-relocations=no",), ("R_X86_64_GOTPCREL", "R_X86_64_64")),
    ],
    "aarch64": [
        (
            "default",
            (),
            (
                "R_AARCH64_CALL26",
                "R_AARCH64_JUMP26",
                "R_AARCH64_ADR_GOT_PAGE",
                "R_AARCH64_LD64_GOT_LO12_NC",
                "R_AARCH64_ABS64",
            ),
        ),
    ],
}


def _exec_params():
    arch = svod_clang.host_arch()
    variants = EXEC_VARIANTS.get(arch)
    if not variants:
        return [pytest.param(None, (), (), marks=pytest.mark.skip("no execution variants for host %s" % arch))]
    return [pytest.param(name, flags, expect, id=name) for name, flags, expect in variants]


def _bind(get, name: str, restype, *argtypes):
    fn = get(name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


@pytest.mark.skipif(shutil.which("ld") is None, reason="no system linker (ld) to build the reference shared object")
@pytest.mark.parametrize("variant,flags,expect", _exec_params())
def test_execution_matches_shared_object(tmp_path, variant, flags, expect) -> None:
    arch = svod_clang.host_arch()
    obj = svod_clang.compile_c(EXEC_SOURCE, extra_flags=flags, compiler="clang")
    info = osup.parse_object(obj)
    types = set(info.types())
    for t in expect:
        assert _type_num(arch, t) in types, "%s: %s not produced (got %s)" % (
            variant,
            t,
            [osup.type_name(arch, x) for x in sorted(types)],
        )

    info_cc = svod_clang.find_compiler(compiler="clang")
    so_path = str(tmp_path / ("oracle_%s.so" % variant))
    src_path = str(tmp_path / "exec.c")
    with open(src_path, "w") as fh:
        fh.write(EXEC_SOURCE)
    family_flags = getattr(svod_clang, "_FAMILY_FLAGS", {}).get(info_cc.family, ())
    flags_so = [*svod_clang.DEFAULT_FLAGS, *family_flags, *flags]
    proc = subprocess.run(
        [info_cc.path, "-shared", *flags_so, "-o", so_path, src_path, "-lm"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    lib = ctypes.CDLL(so_path)

    with load_object(obj) as lo:

        def ours(name, restype, *argtypes):
            return lo.function(name, restype, *argtypes)

        def theirs(name, restype, *argtypes):
            return _bind(lambda n: getattr(lib, n), name, restype, *argtypes)

        sides = {}
        for label, get in (("ours", ours), ("so", theirs)):
            call_expf = get("call_expf", ctypes.c_float, ctypes.c_float)
            tail_expf = get("tail_expf", ctypes.c_float, ctypes.c_float)
            via_table = get("via_table", ctypes.c_float, ctypes.c_int, ctypes.c_float)
            read_table = get("read_table", ctypes.c_int, ctypes.c_int)
            copy = get("copy", None, ctypes.c_void_p, ctypes.c_void_p)
            out = []
            for x in (-2.0, 0.0, 0.5, 3.25):
                out.append(("call_expf", x, call_expf(x)))
                out.append(("tail_expf", x, tail_expf(x)))
                for i in range(3):
                    out.append(("via_table", i, x, via_table(i, x)))
            out.extend(("read_table", i, read_table(i)) for i in range(10))
            src = (ctypes.c_char * 4096)(*[(i * 7 + 3) % 256 for i in range(4096)])
            dst = (ctypes.c_char * 4096)()
            copy(ctypes.addressof(dst), ctypes.addressof(src))
            out.append(("copy", bytes(dst) == bytes(src)))
            sides[label] = out

    assert sides["ours"] == sides["so"]
    # And the values are the real libm's, not merely equal to each other.
    for entry in sides["ours"]:
        if entry[0] == "tail_expf":
            assert math.isclose(entry[2], math.exp(entry[1]), rel_tol=1e-6)
    assert ("copy", True) in sides["ours"]
