"""Errors of the kernel library (all derive from svod_min.error classes)."""

from __future__ import annotations

from ..error import ExecutionError, PlanError


class KernelParamError(PlanError):
    """A kernel parameter, dtype, variable or expression the library cannot serve (a ValueError)."""


class KernelNotFoundError(KernelParamError, LookupError):
    """No kernel of that name in the catalogue."""


class KernelArgumentError(ExecutionError, ValueError):
    """Buffers or variables passed to a library kernel do not match its signature; nothing ran."""


__all__ = ["KernelArgumentError", "KernelNotFoundError", "KernelParamError"]
