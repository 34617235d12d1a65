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


class ConfigError(SvodError, ValueError):
    """An environment variable with a value svod_min cannot understand (names the variable)."""


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


# --- kernel library -------------------------------------------------------


class KernelParamError(PlanError):
    """A kernel parameter, dtype, variable or expression the library cannot serve (a ValueError)."""


class KernelNotFoundError(KernelParamError, LookupError):
    """No kernel of that name in the catalogue."""


class KernelArgumentError(ExecutionError, ValueError):
    """Buffers or variables passed to a library kernel do not match its signature; nothing ran."""


# --- plan files -----------------------------------------------------------


class PlanFileError(PlanError):
    """A plan file problem, with the JSON path of the offending value."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__("%s: %s" % (path, message) if path else message)
        self.json_path = path


# --- CUDA -----------------------------------------------------------------

# CUresult codes a kernel leaves behind in its context: every later call in the process fails the same way
# (illegal address, launch timeout, hardware stack error, illegal instruction, misaligned address,
# invalid address space, invalid PC, launch failed).
STICKY_ERRORS = frozenset({700, 702, 714, 715, 716, 717, 718, 719})
STICKY_HINT = ("a kernel fault; the GPU context is now unusable and every later CUDA call in this process will "
               "fail: restart the process")  # fmt: skip


class CudaError(DeviceError):
    """A driver call returned a non-zero ``CUresult``.

    ``code`` is the number, ``name`` what ``cuGetErrorName`` says
    (``CUDA_ERROR_OUT_OF_MEMORY``), ``description`` what ``cuGetErrorString``
    says, ``function`` the driver entry point, ``log`` a JIT log when there
    is one (module loads), ``sticky`` whether it is a kernel fault that leaves
    the context unusable (the message then says to restart the process).
    """

    def __init__(self, function: str, code: int, name: str, description: str, log: str = "") -> None:
        self.function, self.code, self.name, self.description, self.log = function, code, name, description, log
        self.sticky = code in STICKY_ERRORS  # the context is lost: only a new process can use the GPU again
        message = "%s failed: %s (%d): %s" % (function, name, code, description)
        if self.sticky:
            message += " (%s)" % STICKY_HINT
        if log:
            message += "\nJIT log:\n" + log.rstrip()
        super().__init__(message)

    def with_log(self, log: str, context: str = "") -> "CudaError":
        """The same error, its message extended with ``context`` and a JIT log."""
        err = CudaError(self.function, self.code, self.name, self.description, log)
        if context:
            err.args = ("%s: %s" % (context, err.args[0]),)
        return err


class CudaSymbolError(DeviceError):
    """The loaded driver library lacks an entry point (a driver older than the call needs)."""


class PtxError(DeviceError, ValueError):
    """PTX text that breaks svod's rules, or that this driver cannot load."""


class LaunchConfigError(DeviceError, ValueError):
    """A grid / block / shared-memory request outside the device's limits (raised before launch)."""


class ArgumentRangeError(DeviceError, VariableBoundsError):
    """A kernel argument that does not fit its slot (int32 scalar, 64-bit pointer)."""


class KernelVariableError(ExecutionError, VariableBoundsError):
    """A library kernel's variable below its declared minimum (an ExecutionError, as before, and a VariableBoundsError)."""


class ForkedChildError(DeviceError):
    """CUDA initialised in a parent process was used in a forked child."""


class ReleasedError(DeviceError):
    """A device, module or graph used after its explicit ``close()`` / ``unload()``."""


class FreedBufferError(ReleasedError, BufferAllocationError):
    """A buffer whose storage was freed with ``CudaStorage.free()``."""


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
    "ConfigError",
    "PlanError",
    "VariableBoundsError",
    "ExecutionError",
    "PlanPoisonedError",
    "NotSupportedError",
    "KernelParamError",
    "KernelNotFoundError",
    "KernelArgumentError",
    "PlanFileError",
    "CudaError",
    "CudaSymbolError",
    "PtxError",
    "LaunchConfigError",
    "ArgumentRangeError",
    "KernelVariableError",
    "ForkedChildError",
    "ReleasedError",
    "FreedBufferError",
]
