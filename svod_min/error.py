"""The project's exception hierarchy: one tree, single inheritance.

Every error svod_min raises on purpose derives from :class:`SvodError`, so a
caller can catch one type; a branch names the stage that failed. Each class
has exactly one base (no builtin mix-ins: catch a branch of this tree, not
``ValueError``), and an ``exit_code`` class attribute that the command line
returns: 0 ok, 1 verification failed, 2 bad input, 3 device or compile failure.

    SvodError                          3
    ├── CompilationError               3  compiler failed; carries diagnostics
    │   └── CompilerNotFoundError      3  no usable C compiler / clang for IR
    ├── LoaderError                    3  ELF parsing, relocation, mapping
    │   ├── ElfFormatError             3  malformed or foreign object file
    │   ├── UnsupportedRelocationError 3
    │   ├── RelocationRangeError       3  a field would be truncated
    │   │   └── FieldOverflow          3  internal: an architecture's encoder refused a value
    │   ├── SymbolNotFoundError        3  undefined symbol / missing entry point
    │   ├── ExecMemoryError            3  host refuses executable memory (W^X)
    │   └── TinygradProgramError       3  a tinygrad CPU program the hook cannot load
    ├── DeviceError                    3  device creation / use failed
    │   ├── InvalidDeviceError         2  unparsable device spec
    │   ├── UnsupportedDeviceError     3  no factory for this device type
    │   ├── CudaError                  3  a driver call failed (CUresult)
    │   ├── CudaSymbolError            3  the driver lacks an entry point
    │   ├── PtxError                   2  PTX (or a CUBIN's parameters) that breaks the rules
    │   ├── LaunchConfigError          2  grid / block / shared memory out of limits
    │   ├── ForkedChildError           3  CUDA used in a forked child
    │   └── ReleasedError              3  used after close() / unload()
    │       └── FreedBufferError       2  a buffer whose storage was freed
    ├── BufferAllocationError          2  bad buffer size / dtype / allocation
    │   └── MemoryBudgetError          2  a plan whose peak memory exceeds the budget (refused before allocating)
    ├── CacheError                     3  disk cache misuse (never raised for I/O trouble)
    ├── ConfigError                    2  a bad setting (environment variable, BenchmarkConfig field)
    ├── IndexOutOfRangeError           2  an index outside its op's range (constant: at build; data: at run)
    ├── PinnedInputError               2  an input fed another value than the one the bundle was built for (--pin)
    ├── SignatureError                 2  a malformed Ed25519 key or signature, or one that does not verify
    ├── PlanError                      2  plan building / plan file problems
    │   ├── VariableBoundsError        2  a variable outside [min, max]
    │   │   ├── ArgumentRangeError     2  a kernel argument that does not fit its slot
    │   │   └── KernelVariableError    2  a library kernel's variable below its minimum
    │   ├── KernelParamError           2  a library kernel request that cannot be served
    │   │   └── KernelNotFoundError    2  no kernel of that name
    │   ├── PlanFileError              2  with the JSON path of the offending value
    │   ├── BundleError                2  a bad model bundle (.svod), naming the entry
    │   │   └── BundleSignatureError   2  refused by the trust policy: unsigned, untrusted or bad signature
    │   ├── UnsupportedModelError      2  an ONNX node (op, attribute, dtype) svod_min cannot lower
    │   └── ModelFileError             2  not ONNX, truncated, external data missing, bad dims
    ├── ExecutionError                 3  a dispatch failed
    │   ├── PlanPoisonedError          3  plan failed earlier and refuses to run
    │   └── KernelArgumentError        2  buffers / variables that do not match a kernel
    ├── NotSupportedError              3  feature deliberately not implemented
    ├── NoUsableTargetError            3  no bundled object runs here, and no compiler
    ├── ZooFetchError                  3  a zoo model that could not be fetched (perf/zoo.py)
    ├── ExportError                    2  a model that cannot be exported as a plan
    └── TinygradHookError              2  tinygrad loader hook misused (installed twice, ...)
        └── TinygradVersionError       2  tinygrad outside 0.14.x or of another shape

A class sits where its *stage* is; ``exit_code`` says what the failure means
to a user, so a bad-input leaf under a device branch (``PtxError``) still
exits 2.
"""

from __future__ import annotations

from typing import Optional, Sequence

EXIT_OK, EXIT_VERIFY, EXIT_BAD_INPUT, EXIT_DEVICE = 0, 1, 2, 3


class SvodError(Exception):
    """Base class of every error raised by svod_min."""

    exit_code = EXIT_DEVICE


# --- compilation -----------------------------------------------------------


class CompilationError(SvodError):
    """The C/IR compiler rejected the source or could not be run.

    ``diagnostics`` is the compiler's stderr; ``source_lines`` holds
    ``(line_number, text)`` for each line the diagnostics point at.
    """

    exit_code = EXIT_DEVICE

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

    exit_code = EXIT_DEVICE

    def __init__(self, message: str) -> None:
        super().__init__(message)


# --- loading ---------------------------------------------------------------


class LoaderError(SvodError):
    """The ELF object could not be parsed, relocated or mapped."""

    exit_code = EXIT_DEVICE


class ElfFormatError(LoaderError):
    """The bytes are not a well-formed relocatable ELF object for this loader."""

    exit_code = EXIT_DEVICE


class UnsupportedRelocationError(LoaderError):
    """A relocation type the loader does not (or will not) handle."""

    exit_code = EXIT_DEVICE


class RelocationRangeError(LoaderError):
    """A relocated value does not fit its field; refused instead of truncated."""

    exit_code = EXIT_DEVICE


class FieldOverflow(RelocationRangeError):
    """A value does not fit its field (raised by an architecture's encoder).

    Internal: the relocator catches it and raises a :class:`RelocationRangeError`
    that names the relocation, the symbol and the place.
    """

    exit_code = EXIT_DEVICE

    def __init__(self, value: int, detail: str) -> None:
        super().__init__(detail)
        self.value = value
        self.detail = detail


class SymbolNotFoundError(LoaderError):
    """An undefined symbol could not be resolved, or an entry point is missing."""

    exit_code = EXIT_DEVICE


class ExecMemoryError(LoaderError):
    """The host refused to give us executable memory by every route we know."""

    exit_code = EXIT_DEVICE


# --- devices and buffers ---------------------------------------------------


class DeviceError(SvodError):
    """A device could not be created or failed while in use."""

    exit_code = EXIT_DEVICE


class InvalidDeviceError(DeviceError):
    """A device spec string that cannot be parsed (``CUDA:x``, ``""`` ...)."""

    exit_code = EXIT_BAD_INPUT


class UnsupportedDeviceError(DeviceError):
    """No factory is registered (or available here) for this device type."""

    exit_code = EXIT_DEVICE


class BufferAllocationError(SvodError):
    """A buffer of that size/dtype cannot be allocated or does not fit."""

    exit_code = EXIT_BAD_INPUT


class MemoryBudgetError(BufferAllocationError):
    """A plan or bundle whose estimated peak memory exceeds the memory budget, refused before anything is
    allocated; the message names the peak, the budget, where the budget came from and the largest items."""

    exit_code = EXIT_BAD_INPUT


class IndexOutOfRangeError(SvodError):
    """An index outside the range its op allows (ONNX: ``[-n, n-1]`` where negatives wrap): a constant one refused
    at build, one read from data at run reported by the checking kernel; the message names the node, the index,
    its position and the bound. Nothing was read or written outside a buffer."""

    exit_code = EXIT_BAD_INPUT


class PinnedInputError(SvodError):
    """A graph input fed a value other than the one the bundle was built for (``build --pin``: the value decides
    shapes, which a bundle fixes); the message names the input, the first differing position, the fed and the
    pinned value. No output of that run is returned: the bundle must be rebuilt for other values."""

    exit_code = EXIT_BAD_INPUT


class CacheError(SvodError):
    """Misuse of the kernel/object cache API (I/O trouble is never an error)."""

    exit_code = EXIT_DEVICE


class ConfigError(SvodError):
    """A setting svod_min cannot understand: an environment variable (named) or a configuration object's field."""

    exit_code = EXIT_BAD_INPUT


# --- plans and execution ---------------------------------------------------


class PlanError(SvodError):
    """An execution plan (builder or plan file) is malformed."""

    exit_code = EXIT_BAD_INPUT


class VariableBoundsError(PlanError):
    """A variable value outside its declared ``[min, max]`` bounds."""

    exit_code = EXIT_BAD_INPUT


class ExecutionError(SvodError):
    """A kernel, copy or custom function failed while executing."""

    exit_code = EXIT_DEVICE


class PlanPoisonedError(ExecutionError):
    """The plan failed part-way earlier; its buffers are suspect, so it refuses to run."""

    exit_code = EXIT_DEVICE


class NotSupportedError(SvodError):
    """A feature that svod_min deliberately does not implement (yet)."""

    exit_code = EXIT_DEVICE


class ZooFetchError(SvodError):
    """A zoo model could not be fetched: no way to the package registry, or the wheel lacks the file."""

    exit_code = EXIT_DEVICE


class ExportError(SvodError):
    """A model from another framework could not be exported as a plan (says what and why)."""

    exit_code = EXIT_BAD_INPUT


# --- tinygrad loader hook (interop/tinygrad_loader.py) ---------------------


class TinygradHookError(SvodError):
    """The tinygrad loader hook was misused: installed twice, restored without being installed."""

    exit_code = EXIT_BAD_INPUT


class TinygradVersionError(TinygradHookError):
    """The installed tinygrad is outside the supported line, or its CPU program class changed shape."""

    exit_code = EXIT_BAD_INPUT


class TinygradProgramError(LoaderError):
    """A tinygrad CPU program the hook cannot load (names the kernel and the loader's reason)."""

    exit_code = EXIT_DEVICE


# --- kernel library -------------------------------------------------------


class KernelParamError(PlanError):
    """A kernel parameter, dtype, variable or expression the library cannot serve."""

    exit_code = EXIT_BAD_INPUT


class KernelNotFoundError(KernelParamError):
    """No kernel of that name in the catalogue."""

    exit_code = EXIT_BAD_INPUT


class KernelArgumentError(ExecutionError):
    """Buffers or variables passed to a library kernel do not match its signature; nothing ran."""

    exit_code = EXIT_BAD_INPUT


class SignatureError(SvodError):
    """An Ed25519 key or signature that is malformed or does not verify (svod_min.ed25519)."""

    exit_code = EXIT_BAD_INPUT


# --- plan files -----------------------------------------------------------


class PlanFileError(PlanError):
    """A plan file problem, with the JSON path of the offending value."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: str, message: str) -> None:
        super().__init__("%s: %s" % (path, message) if path else message)
        self.json_path = path


# --- model bundles and targets ----------------------------------------------


class BundleError(PlanError):
    """A model bundle (``.svod``) that is refused before anything runs; the message names the entry."""

    exit_code = EXIT_BAD_INPUT


class BundleSignatureError(BundleError):
    """A bundle refused by a trust policy before anything is mapped: unsigned, signed by a key the policy does
    not trust, or a signature that does not verify; the message names the bundle and what failed."""

    exit_code = EXIT_BAD_INPUT


class UnsupportedModelError(PlanError):
    """A model (ONNX) that svod_min cannot lower: the message names the node, op, opset and what is unsupported."""

    exit_code = EXIT_BAD_INPUT


class ModelFileError(PlanError):
    """A model file that is not ONNX, is truncated or corrupt, lacks its external data or contradicts a given shape."""

    exit_code = EXIT_BAD_INPUT


class NoUsableTargetError(SvodError):
    """No precompiled object fits this host and nothing here can compile the kernel's source."""

    exit_code = EXIT_DEVICE


# --- CUDA -----------------------------------------------------------------

# CUresult codes a kernel leaves behind in its context: every later call in the process fails the same way
# (illegal address, launch timeout, hardware stack error, illegal instruction, misaligned address,
# invalid address space, invalid PC, launch failed).
STICKY_ERRORS = frozenset({700, 702, 714, 715, 716, 717, 718, 719})
STICKY_HINT = (
    "a kernel fault; the GPU context is now unusable and every later CUDA call in this process will "
    "fail: restart the process"
)


class CudaError(DeviceError):
    """A driver call returned a non-zero ``CUresult``.

    ``code`` is the number, ``name`` what ``cuGetErrorName`` says
    (``CUDA_ERROR_OUT_OF_MEMORY``), ``description`` what ``cuGetErrorString``
    says, ``function`` the driver entry point, ``log`` a JIT log when there
    is one (module loads), ``sticky`` whether it is a kernel fault that leaves
    the context unusable (the message then says to restart the process).
    """

    exit_code = EXIT_DEVICE

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

    exit_code = EXIT_DEVICE


class PtxError(DeviceError):
    """PTX text that breaks svod's rules, or that this driver cannot load; a CUBIN whose recorded kernel
    parameters are not svod's convention."""

    exit_code = EXIT_BAD_INPUT


class LaunchConfigError(DeviceError):
    """A grid / block / shared-memory request outside the device's limits (raised before launch)."""

    exit_code = EXIT_BAD_INPUT


class ArgumentRangeError(VariableBoundsError):
    """A kernel argument that does not fit its slot (int32 scalar, 64-bit pointer)."""

    exit_code = EXIT_BAD_INPUT


class KernelVariableError(VariableBoundsError):
    """A library kernel's variable below its declared minimum (nothing ran)."""

    exit_code = EXIT_BAD_INPUT


class ForkedChildError(DeviceError):
    """CUDA initialised in a parent process was used in a forked child."""

    exit_code = EXIT_DEVICE


class ReleasedError(DeviceError):
    """A device, module or graph used after its explicit ``close()`` / ``unload()``."""

    exit_code = EXIT_DEVICE


class FreedBufferError(ReleasedError):
    """A buffer whose storage was freed with ``CudaStorage.free()``."""

    exit_code = EXIT_BAD_INPUT


__all__ = [
    "ExportError",
    "ZooFetchError",
    "TinygradHookError",
    "TinygradProgramError",
    "TinygradVersionError",
    "SvodError",
    "CompilationError",
    "CompilerNotFoundError",
    "LoaderError",
    "ElfFormatError",
    "UnsupportedRelocationError",
    "RelocationRangeError",
    "FieldOverflow",
    "SymbolNotFoundError",
    "ExecMemoryError",
    "DeviceError",
    "InvalidDeviceError",
    "UnsupportedDeviceError",
    "BufferAllocationError",
    "MemoryBudgetError",
    "CacheError",
    "ConfigError",
    "IndexOutOfRangeError",
    "PinnedInputError",
    "PlanError",
    "VariableBoundsError",
    "ExecutionError",
    "PlanPoisonedError",
    "NotSupportedError",
    "KernelParamError",
    "KernelNotFoundError",
    "KernelArgumentError",
    "PlanFileError",
    "BundleError",
    "BundleSignatureError",
    "SignatureError",
    "UnsupportedModelError",
    "ModelFileError",
    "NoUsableTargetError",
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
