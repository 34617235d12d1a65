"""NVRTC (optional): CUDA C source to PTX through ``libnvrtc``, found and loaded on first use.

:func:`find_nvrtc` looks at ``$SVOD_NVRTC_LIBRARY``, the toolkit, pip's
``nvidia-*`` wheels and the loader path; :func:`compile_cuda` compiles for a
GPU architecture. The kernel library ships PTX, so nothing needs NVRTC unless
a plan or a caller brings CUDA C.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...error import CompilationError, NotSupportedError
from .ptx import Version, parse_arch

NVRTC_MISSING = "NVRTC (libnvrtc) not found; ship PTX or install nvidia-cuda-nvrtc==13.0.*"
NVRTC_ENV = "SVOD_NVRTC_LIBRARY"
_P = ctypes.POINTER
_int, _size, _vp, _cp = ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p

_NVRTC_NAMES = ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so")
_nvrtc_cache: Dict[str, Any] = {}
_nvrtc_lock = threading.Lock()


def _nvrtc_dirs() -> List[str]:
    import glob
    import importlib.util

    dirs = []
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root:
            dirs += [os.path.join(root, "lib64"), os.path.join(root, "lib")]
    try:
        spec = importlib.util.find_spec("nvidia")  # pip wheels: nvidia/cu13/lib, nvidia/cuda_nvrtc/lib
    except (ImportError, ValueError):
        spec = None
    for location in list(getattr(spec, "submodule_search_locations", None) or []):
        dirs += sorted(glob.glob(os.path.join(location, "*", "lib")), reverse=True)
    return dirs


def find_nvrtc() -> Optional[str]:
    """Path (or soname) of libnvrtc: $SVOD_NVRTC_LIBRARY, the toolkit, pip's nvidia wheels, the loader path."""
    with _nvrtc_lock:
        if "path" not in _nvrtc_cache:
            _nvrtc_cache["path"] = _search_nvrtc()
        return _nvrtc_cache["path"]


def _search_nvrtc() -> Optional[str]:
    explicit = os.environ.get(NVRTC_ENV, "").strip()
    if explicit:
        return explicit if os.path.exists(explicit) else None
    for directory in _nvrtc_dirs():
        for name in _NVRTC_NAMES:
            path = os.path.join(directory, name)
            if os.path.exists(path):
                return path
    try:
        import ctypes.util

        return ctypes.util.find_library("nvrtc")
    except Exception:  # find_library shells out; a probe must never raise
        return None


# nvrtc.h entry points Nvrtc binds, (name, argtypes) like PROTOTYPES. Each returns nvrtcResult (an int,
# NVRTC_SUCCESS = 0) unless NVRTC_RESTYPES names another restype. nvrtcProgram is an opaque pointer (c_void_p).
NVRTC_PROTOTYPES: Tuple[Tuple[str, Tuple[Any, ...]], ...] = (
    ("nvrtcVersion", (_P(_int), _P(_int))),
    ("nvrtcCreateProgram", (_P(_vp), _cp, _cp, _int, _P(_cp), _P(_cp))),
    ("nvrtcCompileProgram", (_vp, _int, _P(_cp))),
    ("nvrtcGetProgramLogSize", (_vp, _P(_size))),
    ("nvrtcGetProgramLog", (_vp, _cp)),
    ("nvrtcGetPTXSize", (_vp, _P(_size))),
    ("nvrtcGetPTX", (_vp, _cp)),
    ("nvrtcDestroyProgram", (_P(_vp),)),
    ("nvrtcGetErrorString", (_int,)),
)
nvrtcResult = ctypes.c_int
NVRTC_RESTYPES: Dict[str, Any] = {"nvrtcGetErrorString": _cp}
NVRTC_SUCCESS = 0


class Nvrtc:
    """A loaded libnvrtc (:data:`NVRTC_PROTOTYPES` bound here; NVRTC returns ``nvrtcResult``, 0 = success)."""

    def __init__(self, path: str) -> None:
        self.path = path
        _preload_nvrtc_builtins(path)
        self._dll = ctypes.CDLL(path)
        for name, argtypes in NVRTC_PROTOTYPES:
            fn = getattr(self._dll, name)
            fn.restype, fn.argtypes = NVRTC_RESTYPES.get(name, nvrtcResult), list(argtypes)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check("nvrtcVersion", self._dll.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)))
        self.version: Version = (major.value, minor.value)

    def check(self, what: str, code: int) -> None:
        if code != NVRTC_SUCCESS:
            text = self._dll.nvrtcGetErrorString(code) or b"unknown"
            raise CompilationError(
                "%s failed: %s (%d)" % (what, text.decode("utf-8", "replace"), code), compiler="nvrtc"
            )

    def compile(self, source: str, options: Sequence[str], name: str) -> str:
        """CUDA C -> PTX text; CompilationError carries NVRTC's log."""
        prog = ctypes.c_void_p()
        lib = self._dll
        self.check(
            "nvrtcCreateProgram",
            lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
        )
        try:
            opts = (ctypes.c_char_p * max(1, len(options)))(*[o.encode() for o in options])
            code = lib.nvrtcCompileProgram(prog, len(options), opts)
            log = self._log(prog)
            if code != NVRTC_SUCCESS:
                raise CompilationError(
                    "NVRTC could not compile %s (%d)" % (name, code),
                    diagnostics=log,
                    compiler="nvrtc %d.%d" % self.version,
                )
            size = ctypes.c_size_t()
            self.check("nvrtcGetPTXSize", lib.nvrtcGetPTXSize(prog, ctypes.byref(size)))
            buf = ctypes.create_string_buffer(size.value)
            self.check("nvrtcGetPTX", lib.nvrtcGetPTX(prog, buf))
            return buf.value.decode("utf-8")
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))

    def _log(self, prog: ctypes.c_void_p) -> str:
        size = ctypes.c_size_t()
        if self._dll.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) or size.value <= 1:
            return ""
        buf = ctypes.create_string_buffer(size.value)
        self._dll.nvrtcGetProgramLog(prog, buf)
        return buf.value.decode("utf-8", "replace")


def _preload_nvrtc_builtins(path: str) -> None:
    # NVRTC 13.0 loaded by absolute path cannot find libnvrtc-builtins on its own.
    import glob

    directory = os.path.dirname(path)
    if not directory:
        return
    for builtins in sorted(glob.glob(os.path.join(directory, "libnvrtc-builtins.so*")), reverse=True):
        try:
            ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
            return
        except OSError:
            continue


def load_nvrtc() -> Nvrtc:
    """The process's :class:`Nvrtc`; NotSupportedError when libnvrtc cannot be found or loaded."""
    path = find_nvrtc()
    if path is None:
        raise NotSupportedError(NVRTC_MISSING)
    with _nvrtc_lock:
        lib = _nvrtc_cache.get(path)
        if lib is None:
            try:
                lib = _nvrtc_cache[path] = Nvrtc(path)
            except (OSError, AttributeError) as exc:
                raise NotSupportedError("%s (%s could not be loaded: %s)" % (NVRTC_MISSING, path, exc)) from exc
        return lib


def compile_cuda(source: str, arch: Any = "sm_75", *, options: Sequence[str] = (), name: str = "svod_kernel.cu") -> str:
    """CUDA C -> PTX through NVRTC (``--gpu-architecture=compute_XX``); NotSupportedError without libnvrtc.

    A newer NVRTC writes a newer ``.version`` than an older driver accepts:
    :meth:`CudaDevice.compile_cuda` lowers it to the driver's maximum.
    """
    nvrtc = load_nvrtc()
    number, suffix = parse_arch(arch)
    opts = ["--gpu-architecture=compute_%d%s" % (number, suffix)] + list(options)
    return nvrtc.compile(source, opts, name)
