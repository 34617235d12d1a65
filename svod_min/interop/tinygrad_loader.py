"""svod_min as the loader of tinygrad's CPU programs: tinygrad on hosts that forbid W+X memory.

tinygrad 0.14's ``CPUProgram`` maps every kernel it compiles read+write+execute in one ``mmap``;
under the kernel's memory-deny-write-execute (``prctl(PR_SET_MDWE)``, systemd's
``MemoryDenyWriteExecute=yes``, SELinux ``deny_execmem``) that mapping is refused. With the hook
installed, every CPU program that is an ELF object (the kernels and the device's worker, signal,
wait and timestamp programs) is loaded by :func:`svod_min.jit_loader.load_object` (never W+X, the
memfd route when ``mprotect`` to exec is refused); tinygrad then calls it exactly as before::

    from svod_min.interop.tinygrad_loader import svod_loader
    with svod_loader():
        print((Tensor([1.0, 2.0]) * 3 + 1).numpy())

or unchanged scripts: ``python -m svod_min tinygrad SCRIPT [ARGS...]`` / ``-m MODULE``.
Programs that are not ELF (tinygrad's X86 and LVP renderers) stay with tinygrad, unless
``SVOD_TINYGRAD_STRICT=1`` makes them an error. Importing this module imports no tinygrad.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import threading
import weakref
from typing import Any, Callable, Dict, Iterator, NamedTuple, Optional, Tuple

from ..config import env_flag
from ..error import LoaderError, SymbolNotFoundError, TinygradHookError, TinygradProgramError, TinygradVersionError
from ..jit_loader import load_object

#: The tinygrad line this hook is written against (``0.14.x``).
SUPPORTED_LINE = "0.14"
STRICT_ENV = "SVOD_TINYGRAD_STRICT"
ELF_MAGIC = b"\x7fELF"

# What the hook relies on: the attributes CPUProgram.__init__ sets and __call__ reads (checked
# through the code objects' names), and the TinyELF fields it reads.
_INIT_ATTRIBUTES = ("dev", "name", "signature", "runtimevars", "lvp", "addr", "fxn")
_CALL_ATTRIBUTES = ("fxn", "lvp", "runtimevars")
_TINYELF_FIELDS = ("lib", "name", "target", "signature")


class LoaderStats(NamedTuple):
    """Counts since the process started (loads under the hook and tinygrad-loaded ELF objects)."""

    svod_loaded: int  # ELF programs loaded by svod_min
    svod_live: int  # of those, still mapped (tinygrad has not dropped them)
    tinygrad_non_elf: int  # programs that are not ELF objects, left to tinygrad
    tinygrad_elf: int  # ELF objects tinygrad's own loader relocated while the hook was installed
    refused: int  # ELF programs svod_min refused (each raised TinygradProgramError)


class _Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Dict[str, int] = {name: 0 for name in LoaderStats._fields if name != "svod_live"}
        self._live: "weakref.WeakSet[Any]" = weakref.WeakSet()  # cheaper than a finalizer per program

    def add(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def add_loaded(self, loaded: Any) -> None:
        with self._lock:
            self._counts["svod_loaded"] += 1
            self._live.add(loaded)

    def snapshot(self) -> LoaderStats:
        with self._lock:
            return LoaderStats(svod_live=len(self._live), **self._counts)


class _Hook:
    """What is installed: the class patched and its original methods (None when not installed)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.program_class: Any = None
        self.originals: Optional[Tuple[Callable[..., Any], Callable[..., Any]]] = None


_COUNTERS = _Counters()
_HOOK = _Hook()


def loader_stats() -> LoaderStats:
    """How many tinygrad CPU programs went each way (see :class:`LoaderStats`)."""
    return _COUNTERS.snapshot()


def is_installed() -> bool:
    return _HOOK.originals is not None


def installed_tinygrad_version() -> Optional[str]:
    """The installed tinygrad distribution's version; None when tinygrad has no package metadata."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python 3.8+ has it
        return None
    try:
        return metadata.version("tinygrad")
    except metadata.PackageNotFoundError:
        return None


def _supported(version: Optional[str]) -> bool:
    return version is not None and (version == SUPPORTED_LINE or version.startswith(SUPPORTED_LINE + "."))


def _version_error(version: Optional[str], problem: str) -> TinygradVersionError:
    return TinygradVersionError(
        "svod_min's tinygrad loader supports tinygrad %s.x; installed: %s (%s); nothing was installed"
        % (SUPPORTED_LINE, version or "unknown version", problem)
    )


def _tinygrad_program_class() -> Any:
    """tinygrad's CPUProgram, after checking the version and the shape the hook relies on."""
    version = installed_tinygrad_version()
    if version is None and importlib.util.find_spec("tinygrad") is None:
        raise _version_error("none", "tinygrad is not importable")
    if not _supported(version):
        raise _version_error(version, "outside the supported line")
    try:
        from tinygrad.device import TinyELF
        from tinygrad.runtime import ops_cpu
    except ImportError as exc:
        raise _version_error(version, "cannot import its CPU runtime: %s" % exc) from None
    program_class = getattr(ops_cpu, "CPUProgram", None)
    missing = _shape_problems(program_class, TinyELF)
    if missing:
        raise _version_error(version, "its CPU program class changed shape: %s" % "; ".join(missing))
    return program_class


def _code_names(cls: Any, method: str) -> Tuple[str, ...]:
    fn = cls.__dict__.get(method)
    return tuple(getattr(getattr(fn, "__code__", None), "co_names", ()))


def _shape_problems(program_class: Any, tinyelf: Any) -> Tuple[str, ...]:
    if not isinstance(program_class, type):
        return ("tinygrad.runtime.ops_cpu.CPUProgram is missing",)
    problems = []
    init_names, call_names = _code_names(program_class, "__init__"), _code_names(program_class, "__call__")
    lacking_init = [a for a in _INIT_ATTRIBUTES if a not in init_names]
    lacking_call = [a for a in _CALL_ATTRIBUTES if a not in call_names]
    if lacking_init:
        problems.append("CPUProgram.__init__ no longer sets %s" % ", ".join(lacking_init))
    if lacking_call:
        problems.append("CPUProgram.__call__ no longer reads %s" % ", ".join(lacking_call))
    if not callable(program_class.__dict__.get("_load")):
        problems.append("CPUProgram._load is missing")
    fields = getattr(tinyelf, "__dataclass_fields__", {})
    lacking_fields = [f for f in _TINYELF_FIELDS if f not in fields]
    if lacking_fields:
        problems.append("TinyELF lacks %s" % ", ".join(lacking_fields))
    return tuple(problems)


def use_svod_loader() -> None:
    """Load tinygrad's ELF CPU programs with svod_min from now on (programs already loaded stay).

    TinygradVersionError for an unsupported tinygrad (nothing is patched then); TinygradHookError
    when the hook is already installed.
    """
    with _HOOK.lock:
        if _HOOK.originals is not None:
            raise TinygradHookError("svod_min's tinygrad loader is already installed (restore_tinygrad_loader() first)")
        program_class = _tinygrad_program_class()
        original_init, original_load = program_class.__dict__["__init__"], program_class.__dict__["_load"]
        hooked_init, counting_load = _hooked_methods(original_init, original_load)
        _HOOK.program_class, _HOOK.originals = program_class, (original_init, original_load)
        program_class.__init__ = hooked_init
        program_class._load = counting_load


def restore_tinygrad_loader() -> None:
    """Give program loading back to tinygrad; programs svod_min loaded keep working until dropped."""
    with _HOOK.lock:
        if _HOOK.originals is None:
            raise TinygradHookError("svod_min's tinygrad loader is not installed: nothing to restore")
        original_init, original_load = _HOOK.originals
        _HOOK.program_class.__init__ = original_init
        _HOOK.program_class._load = original_load
        _HOOK.program_class, _HOOK.originals = None, None


@contextlib.contextmanager
def svod_loader() -> Iterator[None]:
    """``with svod_loader():`` installs the hook for the block and restores tinygrad's after it."""
    use_svod_loader()
    try:
        yield
    finally:
        restore_tinygrad_loader()


def _hooked_methods(
    original_init: Callable[..., Any], original_load: Callable[..., Any]
) -> Tuple[Callable[..., Any], ...]:
    def __init__(self: Any, dev: Any, obj: Any) -> None:
        if bytes(obj.lib[:4]) != ELF_MAGIC:
            if env_flag(STRICT_ENV, False):
                raise TinygradProgramError(
                    "tinygrad program %r (renderer %s) is not an ELF object and %s=1 forbids tinygrad's own "
                    "(read+write+execute) loader" % (obj.name, _renderer(obj), STRICT_ENV)
                )
            _COUNTERS.add("tinygrad_non_elf")
            original_init(self, dev, obj)
            return
        _init_svod_program(self, dev, obj)

    def _load(self: Any, lib: Any, base: int = 0) -> Any:
        if bytes(lib[:4]) == ELF_MAGIC:
            _COUNTERS.add("tinygrad_elf")
        return original_load(self, lib, base)

    return __init__, _load


def _renderer(obj: Any) -> str:
    return str(getattr(getattr(obj, "target", None), "renderer", "?"))


def _init_svod_program(program: Any, dev: Any, obj: Any) -> None:
    """Set what tinygrad's CPUProgram.__init__ sets, with the code mapped by svod_min."""
    lvp = getattr(obj.target, "renderer", None) == "LVP"
    loaded, fxn = _load_program(obj, (ctypes.c_void_p,) if lvp else ())
    program.dev, program.name, program.signature = dev, obj.name, obj.signature
    program.runtimevars = {name: slot for name, slot, *_ in obj.signature if name == "core_id"}
    program.lvp = lvp
    program.addr = ctypes.cast(fxn, ctypes.c_void_p).value
    # The function keeps the mapping alive; the program keeps the function. Once tinygrad drops
    # the program (and nobody holds its fxn) the collector unmaps the code.
    program.fxn = fxn
    program.svod_object = loaded


def _load_program(obj: Any, argtypes: Tuple[Any, ...]) -> Tuple[Any, Any]:
    """Map ``obj`` with svod_min; (the loaded object, its entry function). TinygradProgramError naming the kernel."""
    try:
        loaded = load_object(bytes(obj.lib))
        fxn = _entry_function(loaded, obj.name, argtypes)
    except LoaderError as exc:
        _COUNTERS.add("refused")
        raise TinygradProgramError(
            "tinygrad kernel %r: svod_min's loader refused its object: %s (tinygrad is unchanged; the other "
            "programs still load)" % (obj.name, exc)
        ) from exc
    _COUNTERS.add_loaded(loaded)
    return loaded, fxn


def _entry_function(loaded: Any, name: str, argtypes: Tuple[Any, ...]) -> Any:
    """The kernel's function: its own name, else a function at the start of .text (what tinygrad runs)."""
    try:
        return loaded.function(name, None, *argtypes)
    except SymbolNotFoundError:
        pass
    text = loaded.sections.get(".text")
    for candidate in sorted(s for s, address in loaded.symbols.items() if address == text):
        try:
            return loaded.function(candidate, None, *argtypes)
        except SymbolNotFoundError:
            continue
    loaded.close()
    raise SymbolNotFoundError(
        "the object defines no function %r nor one at the start of .text (defined: %s)"
        % (name, ", ".join(sorted(loaded.symbols)) or "none")
    )


__all__ = [
    "LoaderStats",
    "STRICT_ENV",
    "SUPPORTED_LINE",
    "installed_tinygrad_version",
    "is_installed",
    "loader_stats",
    "restore_tinygrad_loader",
    "svod_loader",
    "use_svod_loader",
]
