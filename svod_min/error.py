"""The project's exception hierarchy.

Every error svod_min raises on purpose derives from :class:`SvodError`, so a
caller can catch one type. Subclasses name the stage that failed; several also
derive from a builtin (``ValueError``, ``LookupError``) where that is what
the error semantically is, so generic handlers keep working.

    SvodError
    ├── CompilationError            compiler failed; carries diagnostics
    │   └── CompilerNotFoundError   no usable C compiler / clang for IR
    ├── LoaderError                 anything in ELF parsing, relocation, mapping
    │   ├── ElfFormatError          malformed or foreign object file
    │   ├── UnsupportedRelocationError
    │   ├── RelocationRangeError    a field would be truncated
    │   ├── SymbolNotFoundError     undefined symbol / missing entry point
    │   └── ExecMemoryError         host refuses executable memory (W^X)
    ├── DeviceError                 device creation / use failed
    │   ├── InvalidDeviceError      unparsable device spec
    │   └── UnsupportedDeviceError  no factory for this device type
    ├── BufferAllocationError       bad buffer size / dtype / allocation
    ├── CacheError                  disk cache misuse (never raised for I/O trouble)
    ├── PlanError                   plan building / plan file problems
    │   └── VariableBoundsError     a variable outside [min, max]
    ├── ExecutionError              a dispatch failed
    │   └── PlanPoisonedError       plan failed earlier and refuses to run
    └── NotSupportedError           feature deliberately not implemented
"""

from __future__ import annotations

from typing import Optional, Sequence


class SvodError(Exception):
    """Base class of every error raised by svod_min."""


# --- compilation -----------------------------------------------------------


class CompilationError(SvodError):
    """The C/IR compiler rejected the source or could not be run.

    ``diagnostics`` is the compiler's stderr; ``source_lines`` holds
    ``(line_number, text)`` for each line the diagnostics point at.
    """

    def __init__(
        self,
        message: str,
        *,
        diagnostics: str = "",
        source_lines: Sequence[tuple] = (),
        compiler: Optional[str] = None,
    ) -> None:
        self.diagnostics = diagnostics
        self.source_lines = list(source_lines)
        self.compiler = compiler
        parts = [message]
        if self.source_lines:
            parts.append("offending source:")
            parts.extend("  %5d | %s" % (n, text) for n, text in self.source_lines)
        if diagnostics:
            parts.append("compiler said:")
            parts.append(diagnostics.rstrip())
        super().__init__("\n".join(parts))
        self.message = message


class CompilerNotFoundError(CompilationError):
    """No usable compiler (no C compiler on PATH, or clang needed for IR)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)


# --- loading ---------------------------------------------------------------


class LoaderError(SvodError):
    """The ELF object could not be parsed, relocated or mapped."""


class ElfFormatError(LoaderError, ValueError):
    """The bytes are not a well-formed relocatable ELF object for this loader."""


class UnsupportedRelocationError(LoaderError):
    """A relocation type the loader does not (or will not) handle."""


class RelocationRangeError(LoaderError):
    """A relocated value does not fit its field; refused instead of truncated."""


class SymbolNotFoundError(LoaderError, LookupError):
    """An undefined symbol could not be resolved, or an entry point is missing."""


class ExecMemoryError(LoaderError, OSError):
    """The host refused to give us executable memory by every route we know."""


# --- devices and buffers ---------------------------------------------------


class DeviceError(SvodError):
    """A device could not be created or failed while in use."""


class InvalidDeviceError(DeviceError, ValueError):
    """A device spec string that cannot be parsed (``CUDA:x``, ``""`` ...)."""


class UnsupportedDeviceError(DeviceError):
    """No factory is registered (or available here) for this device type."""


class BufferAllocationError(SvodError, ValueError):
    """A buffer of that size/dtype cannot be allocated or does not fit."""


class CacheError(SvodError):
    """Misuse of the kernel/object cache API (I/O trouble is never an error)."""


# --- plans and execution ---------------------------------------------------


class PlanError(SvodError, ValueError):
    """An execution plan (builder or plan file) is malformed."""


class VariableBoundsError(PlanError):
    """A variable value outside its declared ``[min, max]`` bounds."""


class ExecutionError(SvodError):
    """A kernel, copy or custom function failed while executing."""


class PlanPoisonedError(ExecutionError):
    """The plan failed part-way earlier; its buffers are suspect, so it refuses to run."""


class NotSupportedError(SvodError, NotImplementedError):
    """A feature that svod_min deliberately does not implement (yet)."""


class ExportError(SvodError):
    """A model from another framework could not be exported as a plan (says what and why)."""


__all__ = [
    "ExportError",
    "SvodError",
    "CompilationError",
    "CompilerNotFoundError",
    "LoaderError",
    "ElfFormatError",
    "UnsupportedRelocationError",
    "RelocationRangeError",
    "SymbolNotFoundError",
    "ExecMemoryError",
    "DeviceError",
    "InvalidDeviceError",
    "UnsupportedDeviceError",
    "BufferAllocationError",
    "CacheError",
    "PlanError",
    "VariableBoundsError",
    "ExecutionError",
    "PlanPoisonedError",
    "NotSupportedError",
]
