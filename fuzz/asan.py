"""Redzones after svod_min's CPU buffers, for a child running under AddressSanitizer (``--sanitize address``).

svod_min's CPU buffers are anonymous mappings, which ASan does not track: a kernel reading past one reads the
mapping's slack or the next mapping unseen. In a child whose process has the ASan runtime (the fuzzer started
under ``LD_PRELOAD``), :func:`install` makes every storage's mapping one guard region longer and poisons that
region, so an instrumented kernel's read or write past the end of a storage is reported (and aborts the child).
Buffers that share one storage (an arena's views) have no redzones between them.
"""

from __future__ import annotations

import ctypes
import mmap
import weakref
from typing import Any

#: Bytes of poisoned guard after each storage.
GUARD = 4096


def asan_loaded() -> bool:
    return _symbol("__asan_poison_memory_region") is not None


def _symbol(name: str) -> Any:
    try:
        return getattr(ctypes.CDLL(None), name)
    except AttributeError:
        return None


def install() -> bool:
    """Patch :class:`svod_min.devices.cpu.buffer.CpuStorage` in this process; False without the ASan runtime."""
    poison, unpoison = _symbol("__asan_poison_memory_region"), _symbol("__asan_unpoison_memory_region")
    if poison is None or unpoison is None:
        return False
    for fn in (poison, unpoison):
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        fn.restype = None
    from svod_min.devices.cpu import buffer

    storage_cls = buffer.CpuStorage
    original = storage_cls.__init__

    def guarded_init(self: Any, nbytes: int) -> None:
        original(self, nbytes)
        # the same mapping again, GUARD bytes longer; the tail poisoned while the storage lives
        self._anchor = None
        self.mm = mmap.mmap(-1, self.capacity + GUARD, flags=mmap.MAP_PRIVATE)
        self._anchor = ctypes.c_char.from_buffer(self.mm)
        self.address = ctypes.addressof(self._anchor)
        poison(self.address + self.capacity, GUARD)
        weakref.finalize(self, unpoison, self.address + self.capacity, GUARD)

    storage_cls.__init__ = guarded_init  # type: ignore[method-assign]
    return True


def runtime_for(cc: str) -> str:
    """The ASan runtime matching the compiler ``cc`` (clang's ``libclang_rt.asan``), or "" when it has none."""
    import platform
    import subprocess

    name = "libclang_rt.asan-%s.so" % platform.machine()
    try:
        found = subprocess.run([cc, "-print-file-name=%s" % name], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    found = found.strip()
    return found if found.startswith("/") else ""


def compiler_takes_asan(cc: str) -> bool:
    """Whether ``cc`` builds ASan code without a constructor (clang 15+): the loader maps no constructors."""
    import subprocess

    from svod_min.compiler.run import SANITIZER_FLAGS

    flags = list(SANITIZER_FLAGS[("clang", "address")])
    try:
        done = subprocess.run(
            [cc, *flags, "-x", "c", "-c", "-", "-o", "/dev/null"],
            input="int f(int *p) { return *p; }\n",
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def relaunch(argv: list) -> str:
    """Start ``python3 -m fuzz ARGV`` again with the ASan runtime preloaded (execv: no return), or say why not."""
    import os
    import sys

    cc = os.environ.get("SVOD_CC") or "clang"
    if not compiler_takes_asan(cc):
        return (
            "--sanitize address needs clang 15 or newer as the kernel compiler (its ASan code without a "
            "constructor); name one with SVOD_CC=clang-16"
        )
    runtime = runtime_for(cc)
    if not runtime:
        return "--sanitize address: %s names no ASan runtime (-print-file-name=libclang_rt.asan-*.so)" % cc
    env = dict(os.environ)
    env["LD_PRELOAD"] = runtime
    env["SVOD_CC"] = cc
    env.setdefault("ASAN_OPTIONS", "detect_leaks=0")
    env["SVOD_FUZZ_ASAN_RELAUNCHED"] = "1"
    os.execve(sys.executable, [sys.executable, "-m", "fuzz", *argv], env)
    return "execve returned"  # pragma: no cover
