"""Resolve a kernel's undefined symbols (libm, memcpy, ...) through dlsym.

Search order: libm, the process's global namespace (libc and everything
already loaded), libmvec (gcc's vector math under -ffast-math), libgcc_s
(compiler helpers). Results are cached per process.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Dict, List, Optional

from ..error import SymbolNotFoundError

_dl = ctypes.CDLL(None)
_dlsym = _dl.dlsym
_dlsym.restype = ctypes.c_void_p
_dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]

_LIBRARIES = ("m", "c", "mvec", "gcc_s")

_lock = threading.Lock()
_handles: Optional[List[int]] = None
_cache: Dict[str, int] = {}


def _open_handles() -> List[int]:
    handles = []
    for short in _LIBRARIES:
        handle = _dlopen("lib%s.so.6" % short if short in ("m", "c") else "lib%s.so.1" % short)
        if handle is None:  # not glibc's soname (musl, odd hosts): ask the system, which may run ldconfig
            import ctypes.util  # here: it imports subprocess, ~6 ms of every start on glibc hosts otherwise

            name = ctypes.util.find_library(short)
            handle = _dlopen(name) if name else None
        if handle is not None:
            handles.append(handle)
    handles.append(0)  # RTLD_DEFAULT: the global namespace
    return handles


def _dlopen(name: str) -> Optional[int]:
    """The library's dlopen handle, or None when the loader cannot find it by this name."""
    try:
        return ctypes.CDLL(name)._handle
    except OSError:
        return None


def lookup(name: str) -> int:
    """Address of ``name`` in the host's libraries, or 0 when it has none."""
    global _handles
    with _lock:
        hit = _cache.get(name)
        if hit is not None:
            return hit
        if _handles is None:
            _handles = _open_handles()
        raw = name.encode()
        address = 0
        for handle in _handles:
            address = _dlsym(handle, raw) or 0
            if address:
                break
        if address:
            _cache[name] = address
        return address


def default_resolver(name: str) -> int:
    """Resolver for :func:`load_object`: host libraries; raises when missing."""
    address = lookup(name)
    if not address:
        raise SymbolNotFoundError("undefined symbol %r is not in libm, libc, libmvec or libgcc_s" % name)
    return address


def chain_resolvers(overrides: Dict[str, int]) -> "callable":
    """A resolver that prefers ``overrides`` (name -> address) over the host libraries."""

    def resolve(name: str) -> int:
        if name in overrides:
            return overrides[name]  # validated by the relocator
        return default_resolver(name)

    return resolve
