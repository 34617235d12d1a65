"""Compiler driver: C source or LLVM IR text -> relocatable ELF object bytes.

The public face of :mod:`svod_min.compiler`: probing (:mod:`.probe`,
``SVOD_CC``), one source (:mod:`.run`: clang through pipes, gcc
through a private temp dir) and many sources in one run
(:mod:`.batch`). This module re-exports the names callers import from here,
the CPU backend choice (``SVOD_CPU_BACKEND``, :mod:`.backend`) among them.
"""

from __future__ import annotations

from typing import Sequence

from ..jit_loader.arch import host_arch  # re-exported: callers and tests use clang.host_arch
from .backend import CpuBackend
from .batch import MIN_SOURCES_PER_JOB, compile_many_c, default_jobs
from .probe import PROBE_STORE_NAME, CompilerInfo, available_compilers, find_compiler, probe_compiler
from .run import COMPILE_TIMEOUT_S, DEFAULT_FLAGS, FAMILY_FLAGS, compile_c, compile_ir, compiler_flags, family_flags


def compile_source(source: str, *, backend: CpuBackend = CpuBackend.CLANG, extra_flags: Sequence[str] = ()) -> bytes:
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
