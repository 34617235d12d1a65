"""Builds the stand-in driver (tests/support/fake_libcuda.c) and the host emulation of svod_min's CUDA kernel
library (tests/support/cuda_host_emu.*).

The shipped ``.cu`` sources (the ones the shipped PTX was compiled from) are
compiled as C++ for the host, each entry point wrapped by ``SVOD_EMU_ENTRY``,
into one shared library. Loaded into the fake driver (``fake_load_emulator``),
a launch of a library entry then runs that entry's real code, all of its
threads and barriers, on the CPU: the kernels' index math, grid-stride loops
and shared-memory reductions get checked against numpy without a GPU.

What it cannot check: the PTX itself (ptxas and a real GPU do), warp-level
timing, and GPU floating-point rounding (the host's libm stands in).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from typing import List, Optional, Sequence

from svod_min.kernels import GEN_DIR

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_SOURCES = os.path.join(GEN_DIR, "cuda")  # of the svod_min under test, beside the PTX it loads
_ENTRY = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(')


FAKE_SOURCE = os.path.join(HERE, "fake_libcuda.c")


def _first_on_path(names: Sequence[str]) -> Optional[str]:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def find_cc() -> Optional[str]:
    """A C compiler, or None."""
    return _first_on_path(("gcc", "cc", "clang"))


def build_fake_libcuda(out: str, cc: str) -> str:
    """Compile the stand-in driver (tests/support/fake_libcuda.c) to the shared library ``out``."""
    cmd = [cc, "-shared", "-fPIC", "-O1", "-o", out, FAKE_SOURCE, "-ldl", "-pthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError("building the fake libcuda failed:\n%s" % proc.stderr[-4000:])
    return out


def find_cxx() -> Optional[str]:
    """A C++17 compiler, or None."""
    return _first_on_path(("g++", "clang++", "c++"))


def cuda_sources() -> List[str]:
    return sorted(glob.glob(os.path.join(CUDA_SOURCES, "*.cu")))


def entries(source: str) -> List[str]:
    with open(source, "r", encoding="utf-8") as fh:
        return _ENTRY.findall(fh.read())


def _wrapper(source: str, out_dir: str) -> str:
    """A translation unit: the .cu source followed by one SVOD_EMU_ENTRY per kernel."""
    path = os.path.join(out_dir, os.path.basename(source) + ".emu.cpp")
    lines = ['#include "%s"' % os.path.abspath(source)]
    lines += ["SVOD_EMU_ENTRY(%s)" % name for name in entries(source)]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def build_emulator(out_dir: str, cxx: str, sources: Optional[List[str]] = None) -> str:
    """Compile ``sources`` (default: every shipped .cu) plus the runtime into ``out_dir/libsvod_cuda_emu.so``."""
    header = os.path.join(HERE, "cuda_host_emu.h")
    units = [_wrapper(src, out_dir) for src in (cuda_sources() if sources is None else sources)]
    units.append(os.path.join(HERE, "cuda_host_emu.cpp"))
    out = os.path.join(out_dir, "libsvod_cuda_emu.so")
    cmd = [
        cxx,
        "-std=c++17",
        "-O1",
        "-shared",
        "-fPIC",
        "-pthread",
        "-Wno-unknown-pragmas",
        "-include",
        header,
        "-I",
        HERE,
        "-o",
        out,
    ] + units
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError("building the CUDA host emulator failed:\n%s" % proc.stderr[-4000:])
    return out
