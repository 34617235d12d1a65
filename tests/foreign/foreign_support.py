"""Run svod-relocated code on riscv64, ppc64le and loongarch64 under qemu user-mode emulation.

For one case (foreign_cases.py), compiler and optimisation level:

1. compile the case's source to a relocatable object for the architecture;
2. link it statically, with harness.c and the case's driver, by a real linker:
   the *reference* program;
3. link the *loaded* program (harness.c built with ``-DSVOD_LOADED``, the driver,
   and a table that keeps every external the object needs), run it with
   ``--symbols`` to learn those externals' run-time addresses, relocate the
   object on this host (``plan_layout`` + ``apply_layout``) for the fixed base ``BASE`` and
   those addresses, and write the image;
4. run both programs under qemu; their outputs must be identical. The object is
   the very same, so only relocation differs.

``bent(layout, arch)`` swaps in a deliberately wrong encoder (a HI20 one page off on
riscv64, TOC-relative low halves 8 bytes off on ppc64le, a B26 one instruction
off on loongarch64) to show that the comparison catches a wrong relocation;
``SVOD_FOREIGN_BREAK=<arch>`` applies it to a whole run (the CI stage must then fail).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple

from foreign_cases import ForeignCase

from svod_min.compiler.run import DEFAULT_FLAGS, FAMILY_FLAGS
from svod_min.jit_loader.layout import Layout, Patch, apply_layout, plan_layout

BASE = 0x40000000  # below 2 GiB, so non-PIC objects (absolute HI20/LO12) relocate too
HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT_S = 120


def _zig() -> Optional[List[str]]:
    try:
        import ziglang  # noqa: F401
    except ImportError:
        return None
    return [sys.executable, "-m", "ziglang"]


@dataclass(frozen=True)
class Toolchain:
    arch: str
    link_cc: Tuple[str, ...]  # builds the static programs
    compilers: Dict[str, Tuple[str, ...]]  # label -> command that compiles a kernel object
    qemu: str


def toolchain(arch: str) -> Tuple[Optional[Toolchain], str]:
    """The tools for ``arch``, or None and the reason they are missing."""
    if arch == "loongarch64":
        zig = _zig()
        if zig is None:
            return None, "the ziglang package (zig cc) is not installed"
        # la464 without the LSX/LASX vector units qemu lacks; generic_la64 would be soft-float.
        zcc = tuple(zig) + (
            "cc",
            "-target",
            "loongarch64-linux-musl",
            "-mcpu=la464-lsx-lasx",
            "-fno-sanitize=undefined",
        )
        compilers = {"zig": zcc}
        if shutil.which("clang-16"):
            compilers["clang16"] = ("clang-16", "--target=loongarch64-linux-gnu")
        tc = Toolchain(arch, zcc, compilers, "qemu-loongarch64-static")
    else:
        gnu = {"riscv64": "riscv64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu"}[arch]
        gcc = gnu + "-gcc"
        if not shutil.which(gcc):
            return None, "%s is not installed (Debian package gcc-%s, with libc6-dev-*-cross)" % (gcc, gnu)
        compilers = {"gcc": (gcc,)}
        if shutil.which("clang"):
            compilers["clang"] = ("clang", "--target=" + gnu)
        tc = Toolchain(arch, (gcc, "-no-pie"), compilers, "qemu-%s-static" % arch)
    if not shutil.which(tc.qemu):
        return None, "%s is not installed (Debian package qemu-user-static)" % tc.qemu
    return tc, ""


def run_tool(cmd: List[str], cwd: str, what: str, env: Optional[Dict[str, str]] = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    if proc.returncode != 0:
        raise RuntimeError(
            "%s failed (%d): %s\n%s" % (what, proc.returncode, " ".join(cmd), (proc.stderr or proc.stdout)[-3000:])
        )
    return proc.stdout


def symbol_table(name: str, count_name: str, symbols: List[str]) -> str:
    lines = ["struct svod_named { const char *name; void *addr; };"]
    # Asm labels keep the C names of builtins (expf, memcpy) out of this file's scope.
    lines += ['extern char svod_%s_%d[] __asm__("%s");' % (name, i, s) for i, s in enumerate(symbols)]
    rows = ", ".join('{"%s", svod_%s_%d}' % (s, name, i) for i, s in enumerate(symbols)) or "{0, 0}"
    lines.append("const struct svod_named %s[] = {%s};" % (name, rows))
    lines.append("const int %s = %d;" % (count_name, len(symbols)))
    return "\n".join(lines) + "\n"


def write_image(path: str, layout: Layout, image: bytes, symbols: Dict[str, int]) -> None:
    """Serialise a relocated image for harness.c (format in its header comment)."""
    write_segments_image(path, layout.size, [(s.offset, s.size, s.prot) for s in layout.segments], image, symbols)


def write_segments_image(
    path: str, size: int, segments: Sequence[Tuple[int, int, int]], image: bytes, symbols: Dict[str, int]
) -> None:
    """An image of ``size`` bytes at BASE with its (offset, size, prot) segments: one object or several side by side."""
    out = [b"SVODIMG1", struct.pack("<QQQ", BASE, size, len(segments))]
    for offset, nbytes, prot in segments:
        out.append(struct.pack("<QQQ", offset, nbytes, prot))
    out.append(struct.pack("<Q", len(symbols)))
    for name, address in sorted(symbols.items()):
        out.append(struct.pack("<Q56s", address, name.encode()))
    out.append(image)
    with open(path, "wb") as fh:
        fh.write(b"".join(out))


@dataclass
class Outcome:
    reference: str
    loaded: str
    externals: Dict[str, int]


def object_flags(compiler: str, opt: str) -> List[str]:
    """``-O0``; ``-O2`` with ``-fPIC``; or ``svod``: the runtime's own flags (``-fno-plt`` among them)."""
    if opt == "svod":
        family = "gcc" if compiler == "gcc" else "clang"
        return list(DEFAULT_FLAGS) + list(FAMILY_FLAGS[family])
    return [opt] + (["-fPIC"] if opt != "-O0" else [])


def compile_object(tc: Toolchain, compiler: str, opt: str, source: str, workdir: str) -> bytes:
    with open(os.path.join(workdir, "kernel.c"), "w") as fh:
        fh.write(source)
    run_tool(
        list(tc.compilers[compiler]) + ["-c", *object_flags(compiler, opt), "kernel.c", "-o", "kernel.o"],
        workdir,
        "compiling the kernel",
    )
    with open(os.path.join(workdir, "kernel.o"), "rb") as fh:
        return fh.read()


def run_case(tc: Toolchain, compiler: str, opt: str, case: ForeignCase, workdir: str, bend: bool = False) -> Outcome:
    obj = compile_object(tc, compiler, opt, case.source, workdir)
    return run_object(tc, obj, case.driver, case.entries(), workdir, provider=case.provider, bend=bend)


def run_object(
    tc: Toolchain,
    obj: bytes,
    driver: str,
    entries: List[str],
    workdir: str,
    provider: str = "",
    bend: bool = False,
    reference_ld: Sequence[str] = (),
) -> Outcome:
    """Run ``driver`` against ``obj`` linked in (the reference) and relocated by svod_min (the loaded image).

    ``reference_ld``: extra link flags of the reference program (choosing its linker).
    """
    with open(os.path.join(workdir, "kernel.o"), "wb") as fh:
        fh.write(obj)
    files = {
        "driver.c": driver,
        "provider.c": provider or "int svod_no_provider;\n",
        "entries.c": symbol_table("svod_entries", "svod_entries_n", entries),
    }
    for name, text in files.items():
        with open(os.path.join(workdir, name), "w") as fh:
            fh.write(text)
    shutil.copy(os.path.join(HERE, "harness.c"), workdir)
    common = ["-static", "-O1", "harness.c", "driver.c", "provider.c"]
    run_tool(
        list(tc.link_cc) + list(reference_ld) + common + ["entries.c", "kernel.o", "-lm", "-o", "reference"],
        workdir,
        "linking the reference",
    )

    externals = sorted(plan_layout(obj).externals)
    with open(os.path.join(workdir, "keep.c"), "w") as fh:
        fh.write(symbol_table("svod_keep", "svod_keep_n", externals))
    run_tool(
        list(tc.link_cc) + common + ["-DSVOD_LOADED", "keep.c", "-lm", "-o", "loaded"], workdir, "linking the harness"
    )
    addresses: Dict[str, int] = {}
    for line in run_tool([tc.qemu, "./loaded", "--symbols"], workdir, "reading the harness' symbols").splitlines():
        name, value = line.split()
        addresses[name] = int(value, 16)
    layout = plan_layout(obj)
    if bend:
        layout = bent(layout, tc.arch)
    image = apply_layout(layout, BASE, lambda name: addresses[name])
    symbols = {name: BASE + layout.symbols[name] for name in entries}
    write_image(os.path.join(workdir, "kernel.img"), layout, bytes(image), symbols)
    loaded = run_tool([tc.qemu, "./loaded", "kernel.img"], workdir, "running the relocated image")
    reference = run_tool([tc.qemu, "./reference"], workdir, "running the reference")
    return Outcome(reference, loaded, addresses)


# --- deliberate breakage ------------------------------------------------------------------

#: arch -> (relocation type names, (dS, dP) added to S and P by the bent encoder).
_BREAKS = {
    "riscv64": (("R_RISCV_PCREL_HI20", "R_RISCV_HI20"), (0x1000, 0)),  # a HI20 one page off
    "ppc64le": (("R_PPC64_TOC16_LO", "R_PPC64_TOC16_LO_DS"), (0, 8)),  # a TOC base 8 bytes off
    "loongarch64": (("R_LARCH_B26", "R_LARCH_CALL36"), (4, 0)),  # a B26 (or CALL36) one instruction off
}


def bent(layout: Layout, arch: str) -> Layout:
    """A copy of ``layout`` whose patches of the arch's chosen types are deliberately wrong."""
    names, (ds, dp) = _BREAKS[arch]

    def bend(apply: object) -> object:
        return lambda image, off, s, a, p: apply(image, off, s + ds, a, p + dp)  # type: ignore[operator]

    patches = [
        Patch(p.offset, replace(p.spec, apply=bend(p.spec.apply)), p.ref, p.addend, p.where, p.symbol, p.anchor)
        if p.spec.name in names
        else p
        for p in layout.patches
    ]
    return replace(layout, patches=patches)


def breaking(arch: str) -> bool:
    return os.environ.get("SVOD_FOREIGN_BREAK", "") in (arch, "all")
