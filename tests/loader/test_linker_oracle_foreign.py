"""A real linker as the oracle for the relocator on riscv64, ppc64le and loongarch64.

Every object below (the loader's C cases of tests/support/loader_cases.py and
the kernel library's C families, from two compilers per architecture, at svod's
own flags (``-O2 -fPIC -fno-plt`` ...), and with ``SVOD_FOREIGN=1`` also
``-O0``, ``-O2 -fPIC``, ``-O3 -fPIC`` and ``-O2``; plus assembly for the types
compilers do not emit) is relocated by ``relocate()`` at a fixed base and linked
by ``ld.lld`` (16 for riscv64 and ppc64le, zig's for loongarch64, which Debian's
lld 16 cannot link) with every input section at the address ``relocate()``
chose, every external at the same address, and relaxation off (also ppc64le's
TOC optimisation). Then, field by field (oracle_foreign_support.py): directly
reached fields must be identical bytes, GOT loads, external calls and
TOC-relative fields must reach the same final address, every defined symbol must
sit where ``relocate()`` put it, and no byte outside a relocated field may
change.

A coverage test fails when a relocation type the loader supports is produced
by no object here, unless the type is listed in ``NOT_PRODUCED`` with the
reason (assembler-only forms, non-PIC forms no compiler here emits).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

import pytest

pytest.importorskip("elftools")

from support import oracle as osup  # noqa: E402
from support import oracle_foreign as ofs  # noqa: E402
from support import oracle_foreign_asm as asm  # noqa: E402
from support.loader_cases import (
    A64_DIRECT,
    A64_GOT,
    EXEC_SOURCE,
    KITCHEN_SINK,
    PROVIDER,
    VECTOR_SOURCE,
    big_function_source,
)  # noqa: E402

from svod_min.compiler.run import DEFAULT_FLAGS, FAMILY_FLAGS  # noqa: E402
from svod_min.jit_loader import relocate  # noqa: E402
from svod_min.jit_loader.layout import ARCHES  # noqa: E402
from svod_min.kernels.sources import C_DIR  # noqa: E402

# test_supported_types_are_produced reads what this module's object tests saw: under pytest-xdist the
# module must stay in one worker (tox runs --dist loadfile).
pytestmark = [pytest.mark.oracle, pytest.mark.python_independent]

BASE = 0x40000000
EXTERNAL = BASE + 0x00C00000  # within every branch's reach (ppc64le's 32 MiB), so lld links directly
SOURCES = {
    "calls": EXEC_SOURCE,
    "got": A64_GOT,
    "direct": A64_DIRECT,
    "vector": VECTOR_SOURCE,
    "kitchen": KITCHEN_SINK,
    "big": big_function_source(200),
    "provider": PROVIDER,
}
# conv_gemm.c and depthwise.c are compiled block by block (each block inlines its shared code, so the
# whole file is not one unit); their prebuilt objects are held to lld and qemu by tests/foreign.
PER_BLOCK_SOURCES = ("conv_gemm", "depthwise")
LIBRARY = (
    sorted(f[:-2] for f in os.listdir(C_DIR) if f.endswith(".c") and f[:-2] not in PER_BLOCK_SOURCES)
    if os.path.isdir(C_DIR)
    else []
)
FLAGS = {
    "O0": ("-O0",),
    "svod": (),
    "O2pic": ("-O2", "-fPIC"),
    "O3pic": ("-O3", "-fPIC"),
    "O2": ("-O2",),
}  # svod: the runtime's flags
COMMON = ("-fno-asynchronous-unwind-tables", "-fno-unwind-tables")


def _zig() -> Optional[Tuple[str, ...]]:
    try:
        import ziglang  # noqa: F401
    except ImportError:
        return None
    return (sys.executable, "-m", "ziglang")


def compilers(arch: str) -> Dict[str, Tuple[str, ...]]:
    """label -> command prefix producing an object for ``arch``, for those installed."""
    out: Dict[str, Tuple[str, ...]] = {}
    if arch == "loongarch64":
        if shutil.which("clang-16"):
            out["clang16"] = ("clang-16", "--target=loongarch64-linux-gnu")
        zig = _zig()
        if zig:
            out["zig"] = zig + (
                "cc",
                "-target",
                "loongarch64-linux-musl",
                "-mcpu=la464-lsx-lasx",
                "-fno-sanitize=undefined",
            )
        return out
    gnu = {"riscv64": "riscv64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu"}[arch]
    if shutil.which("clang"):
        out["clang"] = ("clang", "--target=" + gnu)
    if shutil.which(gnu + "-gcc"):
        out["gcc"] = (gnu + "-gcc",)
    return out


def linker(arch: str) -> Optional[Tuple[str, ...]]:
    if arch == "loongarch64":
        zig = _zig()
        return zig + ("ld.lld",) if zig else None
    found = shutil.which("ld.lld-16")  # lld 14 cannot link riscv64 objects that carry R_RISCV_ALIGN
    return (found,) if found else None


ARCH_NAMES = ("riscv64", "ppc64le", "loongarch64")
COMPILER_LABELS = {"riscv64": ("clang", "gcc"), "ppc64le": ("clang", "gcc"), "loongarch64": ("clang16", "zig")}
#: arch -> (assembly source, the compilers whose assembler takes it, extra flags)
ASM = {
    "riscv64": (asm.RISCV64, ("clang", "gcc"), ()),
    "ppc64le": (asm.PPC64LE, ("gcc",), ()),
    "loongarch64": (asm.LOONGARCH64, ("zig",), ("-mrelax",)),
}
OBJECTS = [
    (arch, cc, src, opt)
    for arch in ARCH_NAMES
    for cc in COMPILER_LABELS[arch]
    for src in list(SOURCES) + ["lib-" + f for f in LIBRARY]
    for opt in FLAGS
]
OBJECTS += [(arch, cc, "asm", "O2") for arch in ARCH_NAMES for cc in ASM[arch][1]]

_objects: Dict[Tuple[str, str, str, str], bytes] = {}


def build(arch: str, cc: str, src: str, opt: str, workdir: str) -> bytes:
    key = (arch, cc, src, opt)
    if key not in _objects:
        command = compilers(arch).get(cc)
        if command is None:
            pytest.skip("%s: compiler %s is not installed" % (arch, cc))
        if src.startswith("lib-"):
            inputs = ["-I", C_DIR, os.path.join(C_DIR, src[4:] + ".c")]
        else:
            path = os.path.join(workdir, "%s.c" % src)
            with open(path, "w") as fh:
                fh.write(ASM[arch][0] if src == "asm" else SOURCES[src])
            inputs = list(ASM[arch][2]) + [path] if src == "asm" else [path]
        out = os.path.join(workdir, "%s-%s-%s-%s.o" % key)
        flags = list(FLAGS[opt]) + list(COMMON)
        if opt == "svod":
            flags = list(DEFAULT_FLAGS) + list(FAMILY_FLAGS["gcc" if cc == "gcc" else "clang"])
        proc = subprocess.run(
            list(command) + ["-c", *flags, *inputs, "-o", out], capture_output=True, text=True, timeout=300
        )
        if proc.returncode != 0:
            raise RuntimeError("compiling %s failed: %s" % (key, proc.stderr[-2000:]))
        with open(out, "rb") as fh:
            _objects[key] = fh.read()
    return _objects[key]


def check(arch: str, obj: bytes, workdir: str, tag: str) -> ofs.Comparison:
    lld = linker(arch)
    if lld is None:
        pytest.skip("%s: no linker oracle (ld.lld-16, or the ziglang package for loongarch64)" % arch)
    info = osup.parse_object(obj)
    assert info.arch == arch
    externals = {
        name: (0x1230 if name.endswith("_small") else EXTERNAL + 0x1000 * i + 0x7F0)
        for i, name in enumerate(sorted(info.externals))
        if name
    }
    externals.pop(".TOC.", None)  # defined by the linker (and by the loader's layout)
    image = relocate(obj, BASE, lambda name: externals[name])
    sec_addr = {name: image.sections[name] for name in info.sections}
    extra = ["-O0"] + (["--no-toc-optimize"] if arch == "ppc64le" else [])  # -O0: no merging of SHF_MERGE constants
    got_addr = None
    if arch == "ppc64le":  # lld's .TOC. (its .got + 0x8000) within 16-bit reach of the data, like ours
        writable = [a for n, a in sec_addr.items() if n.startswith((".data", ".toc", ".bss", ".sdata"))]
        got_addr = min(writable) - 0x2000 if writable else None
    linked = osup.link_with_lld(
        obj, info, sec_addr, externals, workdir, tag, relax=False, lld=lld, extra=extra, got_addr=got_addr
    )
    ours = osup.Memory([(image.base, image.image)], "ours")
    return ofs.compare(info, obj, sec_addr, ours, linked.memory, linked.symbols, image.symbols)


_types_seen: Dict[str, set] = {a: set() for a in ARCH_NAMES}


FULL = os.environ.get("SVOD_FOREIGN", "") == "1"  # the CI stage (.ci/foreign-arch-stage) runs every flag set
_LATER = pytest.mark.skip(reason="-O0, -O2/-O3 -fPIC and -O2: full matrix only (SVOD_FOREIGN=1)")
PARAMS = [
    pytest.param(*o, id="-".join(o), marks=[] if FULL or o[3] == "svod" or o[2] == "asm" else [_LATER]) for o in OBJECTS
]


@pytest.mark.parametrize("arch, compiler, src, opt", PARAMS)
def test_object_agrees_with_lld(arch: str, compiler: str, src: str, opt: str, tmp_path) -> None:
    if (arch, compiler, opt) == ("ppc64le", "gcc", "svod"):
        pytest.skip(_NO_PLTSEQ)
    obj = build(arch, compiler, src, opt, str(tmp_path))
    comparison = check(arch, obj, str(tmp_path), "oracle")
    _types_seen[arch].update(r.reloc.type for r in comparison.results)
    failures = comparison.failures()
    assert not failures, "%d disagreement(s) with lld:\n%s" % (len(failures), "\n".join(failures[:20]))


_NO_PLTSEQ = (
    "ld.lld 16 cannot link gcc's -fno-plt inline PLT sequences (PLT16_*, PLTSEQ, PLTCALL); "
    "they run under qemu against GNU ld instead (tests/foreign)"
)
_CFI = "emitted only in call-frame information (.eh_frame/.debug_frame), which lld rewrites"

#: Types the loader supports that no object here produces in a form lld can be compared on, and why.
NOT_PRODUCED = {
    "riscv64": {
        "R_RISCV_32_PCREL": "neither GNU as 2.40 nor LLVM 14 emits it (label differences become ADD32/SUB32)",
        "R_RISCV_SUB6": _CFI,
        "R_RISCV_SET6": _CFI,
        "R_RISCV_SET8": _CFI,
        "R_RISCV_SET16": _CFI,
        "R_RISCV_SET32": _CFI,
    },
    "ppc64le": {
        "R_PPC64_REL14_BRTAKEN": "only from branch-prediction suffixes on external targets, which no compiler emits",
        "R_PPC64_REL14_BRNTAKEN": "only from branch-prediction suffixes on external targets, which no compiler emits",
        "R_PPC64_REL16": "no assembler syntax here produces the unsuffixed form",
        "R_PPC64_ADDR16_HIGH": "ld.lld 16 does not link it (unknown relocation 110)",
        "R_PPC64_ADDR16_HIGHA": "ld.lld 16 does not link it (unknown relocation 111)",
        "R_PPC64_PLT16_HA": _NO_PLTSEQ,
        "R_PPC64_PLT16_HI": _NO_PLTSEQ,
        "R_PPC64_PLT16_LO": _NO_PLTSEQ,
        "R_PPC64_PLT16_LO_DS": _NO_PLTSEQ,
    },
    "loongarch64": {
        "R_LARCH_ADD24": "no data directive of 3 bytes",
        "R_LARCH_SUB24": "no data directive of 3 bytes",
        "R_LARCH_ADD6": _CFI,
        "R_LARCH_SUB6": _CFI,
    },
}


def test_supported_types_are_produced() -> None:
    """Run after the objects above (same module): every supported type met in some object, or listed."""
    ran = {a for a in ARCH_NAMES if _types_seen[a]}
    if not ran:
        pytest.skip("no object was compared (tools missing, or run alone)")
    missing: List[str] = []
    for arch in sorted(ran):
        spec = next(a for a in ARCHES.values() if a.name == arch)
        seen = {spec.relocs[t].name for t in _types_seen[arch] if t in spec.relocs}
        missing += sorted(set(s.name for s in spec.relocs.values()) - seen - set(NOT_PRODUCED[arch]))
    assert not missing, "supported but never compared against lld: %s" % missing


@pytest.mark.parametrize("arch", ARCH_NAMES)
def test_prebuilt_library_object_agrees_with_lld(arch: str, tmp_path) -> None:
    """The committed library object of the arch (the one its hosts load), field by field against lld."""
    from svod_min.kernels import variants

    with open(variants.object_path(arch + "-baseline"), "rb") as fh:
        obj = fh.read()
    comparison = check(arch, obj, str(tmp_path), "prebuilt")
    failures = comparison.failures()
    assert not failures, "%d disagreement(s) with lld:\n%s" % (len(failures), "\n".join(failures[:20]))
    assert len(comparison.results) > 900  # every PC-relative / TOC-relative pair of 150 kernels
