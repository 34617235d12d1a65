"""Compiler driver: C source or LLVM IR text -> relocatable ELF object bytes.

The public face of :mod:`svod_min.compiler`: probing (:mod:`.probe`,
``SVOD_CC``), one source (:mod:`.run`: clang through pipes, gcc
through a private temp dir) and many sources in one run
(:mod:`.batch`). This module adds the CPU backend choice
(``SVOD_CPU_BACKEND``) and re-exports the names callers import from here.
"""

from __future__ import annotations

import enum
import logging
from typing import Sequence

from ..config import env_str
from .batch import MIN_SOURCES_PER_JOB, compile_many_c, default_jobs
from .probe import PROBE_STORE_NAME, CompilerInfo, available_compilers, find_compiler, probe_compiler
from .run import COMPILE_TIMEOUT_S, DEFAULT_FLAGS, FAMILY_FLAGS, compile_c, compile_ir, compiler_flags, family_flags
from ..jit_loader.arch import host_arch  # re-exported: callers and tests use clang.host_arch

log = logging.getLogger("svod_min.compiler.clang")

class CpuBackend(enum.Enum):
    """Which front end compiles CPU kernels: C via a C compiler, or LLVM IR via clang."""

    CLANG = "clang"
    LLVM = "llvm"

    @classmethod
    def from_env(cls) -> "CpuBackend":
        """``SVOD_CPU_BACKEND`` (clang|llvm); unknown values warn and fall back to CLANG."""
        raw = (env_str("SVOD_CPU_BACKEND") or "").lower()
        if not raw:
            return cls.CLANG
        for member in cls:
            if member.value == raw:
                return member
        log.warning("SVOD_CPU_BACKEND=%r is not one of clang, llvm; using clang", raw)
        return cls.CLANG


def compile_source(
    source: str, *, backend: CpuBackend = CpuBackend.CLANG, extra_flags: Sequence[str] = ()
) -> bytes:
    """Compile ``source`` as C (CLANG backend) or LLVM IR (LLVM backend)."""
    if backend is CpuBackend.LLVM:
        return compile_ir(source, extra_flags=extra_flags)
    return compile_c(source, extra_flags=extra_flags)


__all__ = [
    "COMPILE_TIMEOUT_S",
    "CpuBackend",
    "CompilerInfo",
    "DEFAULT_FLAGS",
    "FAMILY_FLAGS",
    "family_flags",
    "MIN_SOURCES_PER_JOB",
    "PROBE_STORE_NAME",
    "available_compilers",
    "compile_c",
    "compile_ir",
    "compile_many_c",
    "compile_source",
    "compiler_flags",
    "default_jobs",
    "find_compiler",
    "host_arch",
    "probe_compiler",
]
