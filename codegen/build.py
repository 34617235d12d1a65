"""Build steps that need tools: prebuilt objects (clang) and PTX (nvcc, ptxas).

Objects: one translation unit per (arch, variant), compiled with
svod_min.compiler.clang's own flags plus the variant's target flags, so a prebuilt
kernel is exactly what the run-time compiler would have produced. PTX: one
module per CUDA family via ``nvcc -ptx -arch=compute_75``; nvcc stamps its
own ISA version into ``.version``, which a older driver refuses even when
the code uses nothing new, so the header is lowered to the lowest version
that ptxas accepts for every target in PTX_TARGETS.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from svod_min.compiler import clang as svod_clang
from svod_min.compiler.targets import TARGETS
from svod_min.error import CompilationError
from svod_min.jit_loader.elf import parse_object
from svod_min.jit_loader.layout import ARCHES

#: (arch, variant) -> (extra clang flags, /proc/cpuinfo flags required, priority: higher wins)
VARIANTS: Dict[str, Tuple[str, Tuple[str, ...], Tuple[str, ...], int]] = {
    "x86_64-baseline": ("x86_64", ("--target=x86_64-linux-gnu", "-march=x86-64", "-fno-unroll-loops"), (), 0),
    "x86_64-avx2": (
        "x86_64",
        ("--target=x86_64-linux-gnu", "-march=x86-64", "-mavx2", "-mfma", "-mf16c", "-fno-unroll-loops"),
        ("avx", "avx2", "fma", "f16c"),
        1,
    ),
    # The bundles' x86_64-v4 target (AVX-512 F/BW/CD/DQ/VL): 512-bit vectors preferred, so matmul's
    # 8x32 tile is 16 zmm accumulators (measured 1.2x OpenBLAS at 1024^2 on an AVX-512 Xeon).
    "x86_64-v4": (
        "x86_64",
        ("--target=x86_64-linux-gnu", "-march=x86-64-v4", "-mprefer-vector-width=512", "-fno-unroll-loops"),
        tuple(sorted(TARGETS["x86_64-v4"].requires)),
        2,
    ),
    "aarch64-baseline": ("aarch64", ("--target=aarch64-linux-gnu", "-fno-unroll-loops"), (), 0),
    "riscv64-baseline": (
        "riscv64",
        ("--target=riscv64-linux-gnu", "-march=rv64gc", "-mabi=lp64d", "-fno-unroll-loops"),
        (),
        0,
    ),
    "ppc64le-baseline": ("ppc64le", ("--target=powerpc64le-linux-gnu", "-mcpu=power8", "-fno-unroll-loops"), (), 0),
    "loongarch64-baseline": (
        "loongarch64",
        ("--target=loongarch64-linux-gnu", "-march=loongarch64", "-mabi=lp64d", "-fno-unroll-loops"),
        (),
        0,
    ),
}
#: The compiler of each variant (clang on PATH unless named): clang 14 cannot target loongarch64.
COMPILERS: Dict[str, str] = {"loongarch64-baseline": "clang-16"}
DEFAULT_COMPILER = "clang"
#: Symbols a linker defines and the loader's layout provides (so an object may leave them undefined).
LINKER_DEFINED = frozenset({".TOC."})
OBJECT_NAME = "library.o"
#: The runtime object (the native replay runner) of each architecture's baseline variant.
RUNTIME_NAME = "runtime.o"
RUNTIME_VARIANTS = (
    "x86_64-baseline",
    "aarch64-baseline",
    "riscv64-baseline",
    "ppc64le-baseline",
    "loongarch64-baseline",
)
#: The native layout planner (svod_min.jit_loader.native_layout), for the architectures it reads.
PLANNER_NAME = "layout.o"
PLANNER_VARIANTS = ("x86_64-baseline",)
PTX_ARCH = "compute_75"
PTX_TARGETS = ("sm_75", "sm_80", "sm_90")
#: PTX ISA versions to try, lowest first (7.0 is the first that knows sm_80; sm_90 needs 7.8).
PTX_VERSIONS = (
    "7.0",
    "7.1",
    "7.2",
    "7.3",
    "7.4",
    "7.5",
    "7.6",
    "7.7",
    "7.8",
    "8.0",
    "8.1",
    "8.2",
    "8.3",
    "8.4",
    "8.5",
    "8.6",
    "8.7",
    "8.8",
    "9.0",
    "9.1",
    "9.2",
)


def variants_table(excluded: Dict[str, List[str]]) -> Dict[str, Dict[str, object]]:
    """The VARIANTS entry of the generated signature module."""
    return {
        name: {
            "arch": arch,
            "flags": flags,
            "requires": req,
            "priority": prio,
            "object": "prebuilt/%s/%s" % (name, OBJECT_NAME),
            "exclude": tuple(excluded[name]),
        }
        for name, (arch, flags, req, prio) in sorted(VARIANTS.items())
    }


# --- objects ------------------------------------------------------------------------


def variant_compiler(name: str) -> str:
    """The compiler program that builds variant ``name``."""
    return COMPILERS.get(name, DEFAULT_COMPILER)


def clang_version(program: str = DEFAULT_COMPILER) -> Optional[str]:
    """``clang <version>`` of ``program`` on PATH, or None."""
    if shutil.which(program) is None:
        return None
    info = svod_clang.find_compiler(compiler=program)
    return "%s %s" % (info.family, info.version) if info.family == "clang" else None


def compile_variant(name: str, source: str) -> bytes:
    from svod_min.config import SANITIZE_ENV, sanitizers

    if sanitizers():  # the prebuilt objects ship to every user: never with a fuzzing build's sanitizers
        raise SystemExit(
            "codegen: %s is set; the prebuilt library is built without sanitizers (unset it)" % SANITIZE_ENV
        )
    _arch, flags, _req, _prio = VARIANTS[name]
    return svod_clang.compile_c(source, extra_flags=flags, compiler=variant_compiler(name))


def compile_objects(sources: Dict[str, str], names: Sequence[str], jobs: int) -> Dict[str, bytes]:
    """Variant -> object bytes for ``names`` (compiled in parallel; each is one clang process)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {name: pool.submit(compile_variant, name, sources[name]) for name in sorted(names)}
        return {name: fut.result() for name, fut in futures.items()}


def runtime_source() -> str:
    """The runtime object's C: the native replay runner and the compiler-runtime helpers."""
    from svod_min.jit_loader.rt_helpers import HELPERS_C
    from svod_min.plan.native_replay import RUNNER_C

    return RUNNER_C + "\n" + HELPERS_C


def compile_support(names: Sequence[str], source: str, jobs: int) -> Dict[str, bytes]:
    """Baseline variant -> ``source`` compiled for its architecture (for ``names``): the runtime and
    planner objects."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {name: pool.submit(compile_variant, name, source) for name in names}
        return {name: fut.result() for name, fut in futures.items()}


def check_object(name: str, obj: bytes, entries: Sequence[str]) -> None:
    """Every entry point defined and global; nothing undefined (no libm, no compiler-rt) but names the
    linker defines (ppc64le's .TOC.) and the weak per-machine values svod_min's loader supplies
    (rt_helpers.TUNABLE_NAMES)."""
    from svod_min.jit_loader.elf import STB_WEAK
    from svod_min.jit_loader.rt_helpers import TUNABLE_NAMES

    elf = parse_object(obj, tuple(ARCHES))
    undefined = sorted(
        s.name
        for s in elf.symbols
        if s.name
        and s.shndx == 0
        and s.name not in LINKER_DEFINED
        and not (s.bind == STB_WEAK and s.name in TUNABLE_NAMES)
    )
    if undefined:
        raise CompilationError(
            "prebuilt %s references external symbols %s: kernels must be self-contained" % (name, undefined)
        )
    defined = {s.name for s in elf.symbols if s.name and s.shndx != 0 and s.bind != 0}
    missing = sorted(set(entries) - defined)
    if missing:
        raise CompilationError("prebuilt %s lacks entry points %s" % (name, missing[:10]))


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- PTX ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CudaTools:
    nvcc: str
    ptxas: str
    version: str  # "13.0.88"


def find_cuda() -> Optional[CudaTools]:
    """nvcc and ptxas from $CUDA_HOME, /usr/local/cuda or PATH (None when absent)."""
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(os.path.join(os.environ["CUDA_HOME"], "bin"))
    candidates.append("/usr/local/cuda/bin")
    for d in candidates:
        nvcc, ptxas = os.path.join(d, "nvcc"), os.path.join(d, "ptxas")
        if os.access(nvcc, os.X_OK) and os.access(ptxas, os.X_OK):
            return CudaTools(nvcc, ptxas, _nvcc_version(nvcc))
    nvcc, ptxas = shutil.which("nvcc"), shutil.which("ptxas")
    if nvcc and ptxas:
        return CudaTools(nvcc, ptxas, _nvcc_version(nvcc))
    return None


def _nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=120).stdout
    match = re.search(r"V(\d+\.\d+\.\d+)", out)
    return match.group(1) if match else "unknown"


def nvcc_ptx(tools: CudaTools, source: str, name: str) -> str:
    with tempfile.TemporaryDirectory(prefix="svod-codegen-") as tmp:
        cu, ptx = os.path.join(tmp, name + ".cu"), os.path.join(tmp, name + ".ptx")
        with open(cu, "w") as fh:
            fh.write(source)
        cmd = [tools.nvcc, "-ptx", "-arch=" + PTX_ARCH, "-O3", "-o", ptx, cu]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp)
        if proc.returncode != 0:
            raise CompilationError("nvcc failed on %s.cu" % name, diagnostics=proc.stderr)
        with open(ptx) as fh:
            return fh.read()


def ptxas_check(tools: CudaTools, ptx: str, target: str) -> Optional[str]:
    """None when ptxas accepts ``ptx`` for ``target``, else its diagnostics."""
    with tempfile.TemporaryDirectory(prefix="svod-ptxas-") as tmp:
        src, out = os.path.join(tmp, "m.ptx"), os.path.join(tmp, "m.cubin")
        with open(src, "w") as fh:
            fh.write(ptx)
        proc = subprocess.run(
            [tools.ptxas, "-arch=" + target, src, "-o", out], capture_output=True, text=True, timeout=300
        )
        return None if proc.returncode == 0 else (proc.stderr or proc.stdout).strip()


_VERSION_RE = re.compile(r"^\.version (\d+\.\d+)$", re.MULTILINE)


def lower_ptx_version(tools: CudaTools, ptx: str, name: str) -> Tuple[str, str]:
    """(ptx with the lowest accepted .version, nvcc's original version)."""
    match = _VERSION_RE.search(ptx)
    if match is None:
        raise CompilationError("nvcc output for %s has no .version line" % name)
    original = match.group(1)
    errors: List[str] = []
    for version in PTX_VERSIONS:
        if tuple(map(int, version.split("."))) > tuple(map(int, original.split("."))):
            break
        candidate = _VERSION_RE.sub(".version " + version, ptx, count=1)
        problems = [p for p in (ptxas_check(tools, candidate, t) for t in PTX_TARGETS) if p]
        if not problems:
            return candidate, original
        errors.append("%s: %s" % (version, problems[0].splitlines()[0] if problems[0] else "?"))
    raise CompilationError(
        "no PTX version accepted for %s by ptxas for %s" % (name, PTX_TARGETS), diagnostics="\n".join(errors)
    )


def build_ptx(
    tools: CudaTools, sources: Dict[str, str], banner: str, jobs: int, finish: Callable[[str], str] = lambda ptx: ptx
) -> Dict[str, str]:
    """family -> PTX text (first line: the GENERATED banner); ``finish`` edits nvcc's output before ptxas checks it."""

    def one(name: str) -> str:
        ptx, original = lower_ptx_version(tools, finish(nvcc_ptx(tools, sources[name], name)), name)
        note = "// nvcc %s emitted .version %s; lowered to the lowest that ptxas accepts for %s\n" % (
            tools.version,
            original,
            ", ".join(PTX_TARGETS),
        )
        return "// %s\n%s%s" % (banner % ("templates/cuda/%s.cu.j2" % name), note, ptx)

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {name: pool.submit(one, name) for name in sorted(sources)}
        return {name: fut.result() for name, fut in futures.items()}
