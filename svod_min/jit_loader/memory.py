"""Executable memory without ever mapping a page writable and executable at once.

Two routes, probed in order (``SVOD_WX_MODE`` = auto | anon | memfd forces one):

* ``anon``: anonymous mapping read+write, copy the image in, then
  ``mprotect`` each segment to its final protection (text R+X, rodata R).
  Refused by SELinux ``deny_execmem``, PaX MPROTECT and ``PR_SET_MDWE``.
* ``memfd``: reserve the address range with a ``PROT_NONE`` mapping, write
  the image into a ``memfd``, then map each segment over the reservation
  straight from the memfd with its final protection (private mappings, so the
  data segment is copy-on-write). Code is never writable in this process;
  nothing touches the filesystem, so a noexec ``TMPDIR`` does not matter.

Once ``anon`` is refused, the process sticks to ``memfd``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import threading
from typing import List, Optional

from ..config import env_str
from ..error import ExecMemoryError, LoaderError
from .layout import PAGE, PROT_EXEC, PROT_READ, PROT_WRITE, Segment

MAP_SHARED, MAP_PRIVATE, MAP_FIXED = 0x01, 0x02, 0x10
MAP_ANONYMOUS = 0x20
MFD_CLOEXEC, MFD_EXEC = 0x0001, 0x0010
_MAP_FAILED = ctypes.c_void_p(-1).value

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_mprotect = _libc.mprotect
_mprotect.restype = ctypes.c_int
_mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_munmap = _libc.munmap
_munmap.restype = ctypes.c_int
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]

MODES = ("anon", "memfd")
_mode_lock = threading.Lock()
_mode: Optional[str] = None
_anon_refusal: Optional[str] = None


def _err(call: str) -> str:
    code = ctypes.get_errno()
    return "%s: %s (%s)" % (call, os.strerror(code), errno.errorcode.get(code, code))


def _map(addr: int, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> int:
    result = _mmap(addr or None, size, prot, flags, fd, offset)
    if result is None or result == _MAP_FAILED:
        raise OSError(ctypes.get_errno(), _err("mmap"))
    return result


def unmap(base: int, size: int) -> None:
    """Release a region made by :func:`map_image` (safe to call at shutdown)."""
    if _munmap is not None:
        _munmap(base, size)


def wx_mode() -> str:
    """How executable memory will be obtained: ``"anon"`` or ``"memfd"``."""
    global _mode
    mode = _mode
    if mode is not None:  # decided once per process (or pinned by the memfd fall-back)
        return mode
    with _mode_lock:
        if _mode is None:
            forced = (env_str("SVOD_WX_MODE") or "auto").lower()
            _mode = forced if forced in MODES else "anon"
        return _mode


def _fall_back_to_memfd(reason: str) -> None:
    global _mode, _anon_refusal
    with _mode_lock:
        if _mode != "memfd":
            import logging  # here: the only message of this module, and logging costs ~5 ms of a start

            logging.getLogger("svod_min.loader").info(
                "anonymous W->X refused (%s); using memfd mappings from now on", reason
            )
        _mode, _anon_refusal = "memfd", reason


def reserve(size: int) -> int:
    """Reserve ``size`` bytes of address space for an image; returns the base."""
    prot = PROT_READ | PROT_WRITE if wx_mode() == "anon" else 0
    try:
        return _map(0, size, prot, MAP_PRIVATE | MAP_ANONYMOUS)
    except OSError as exc:
        raise LoaderError("cannot reserve %d bytes for a kernel image: %s" % (size, exc.strerror)) from exc


class _AnonRefused(Exception):
    pass


def _commit_anon(base: int, image: bytes, segments: List[Segment]) -> None:
    ctypes.memmove(base, image, len(image))
    for seg in segments:
        if seg.prot == PROT_READ | PROT_WRITE:
            continue
        start, length = base + seg.offset, _page_span(seg)
        if _mprotect(start, length, seg.prot) != 0:
            raise _AnonRefused(_err("mprotect(%s)" % _prot_name(seg.prot)))


def _page_span(seg: Segment) -> int:
    return (seg.size + PAGE - 1) // PAGE * PAGE


def _prot_name(prot: int) -> str:
    return "".join(c if prot & bit else "-" for c, bit in (("r", PROT_READ), ("w", PROT_WRITE), ("x", PROT_EXEC)))


def _memfd() -> int:
    try:
        return os.memfd_create("svod_min-kernel", MFD_CLOEXEC | MFD_EXEC)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # kernels before 6.3 do not know MFD_EXEC
            raise
        return os.memfd_create("svod_min-kernel", MFD_CLOEXEC)


def _commit_memfd(base: int, image: bytes, segments: List[Segment]) -> None:
    fd = _memfd()
    try:
        os.ftruncate(fd, len(image))
        view = memoryview(image)
        written = 0
        while written < len(image):
            written += os.pwrite(fd, view[written:], written)
        for seg in segments:
            _map(base + seg.offset, _page_span(seg), seg.prot, MAP_PRIVATE | MAP_FIXED, fd, seg.offset)
    finally:
        os.close(fd)


def commit(base: int, image: bytes, segments: List[Segment]) -> str:
    """Place ``image`` at ``base`` (from :func:`reserve`) with final protections.

    Returns the mode used. Raises :class:`_AnonRefused` internally handled by
    the caller through :func:`map_image`.
    """
    if wx_mode() == "anon":
        _commit_anon(base, image, segments)
        return "anon"
    _commit_memfd(base, image, segments)
    return "memfd"


_COHERENT_ICACHE = os.uname().machine.lower() in ("x86_64", "amd64", "i386", "i686")


def flush_icache(base: int, size: int) -> None:
    """Make freshly written code visible to instruction fetch (no-op on x86, whose caches are coherent).

    Elsewhere (aarch64, riscv64, ppc64le, loongarch64) libgcc's ``__clear_cache`` does it.
    """
    if _COHERENT_ICACHE:
        return
    try:
        libgcc = ctypes.CDLL("libgcc_s.so.1")
        clear = libgcc.__clear_cache
    except (OSError, AttributeError) as exc:  # pragma: no cover - not on x86
        raise LoaderError("cannot flush the instruction cache: __clear_cache not found (%s)" % exc) from exc
    clear.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    clear.restype = None
    clear(base, base + size)


def map_image(size: int, build: "callable", segments: List[Segment]) -> tuple:
    """Reserve memory, build the image for its base (``build(base) -> bytes``), commit.

    If the anonymous route is refused, retry once through memfd (the image is
    rebuilt because the base changes). Returns ``(base, mode)``.
    """
    for _attempt in range(2):
        base = reserve(size)
        try:
            image = build(base)
            mode = commit(base, image, segments)
        except _AnonRefused as exc:
            unmap(base, size)
            _fall_back_to_memfd(str(exc))
            continue
        except OSError as exc:
            unmap(base, size)
            raise ExecMemoryError(_refusal_message(exc)) from exc
        except BaseException:
            unmap(base, size)
            raise
        flush_icache(base, size)
        return base, mode
    raise ExecMemoryError(_refusal_message(None))  # pragma: no cover - loop always returns or raises


def _refusal_message(exc: Optional[OSError]) -> str:
    parts = ["the host refuses executable memory"]
    if _anon_refusal:
        parts.append("anonymous W->X: %s" % _anon_refusal)
    if exc is not None:
        parts.append("memfd R+X mapping: %s" % (exc.strerror or exc))
    return "; ".join(parts) + " (SELinux deny_execmem, PaX MPROTECT, PR_SET_MDWE or a noexec memfd policy?)"
