"""The native layout planner: :func:`.layout.plan_layout` in one C call, for the objects it can take.

A cold load spends most of its time turning ELF tables into a :class:`.layout.Layout` in Python.
``templates/c/layout.c.j2``, shipped prebuilt as ``kernels/prebuilt/x86_64-baseline/layout.o``, does
the same checks and the same placement for the common kernel object: x86_64, every relocation
PC-relative against a section of the image, nothing undefined, no COMMON, GOT or stub. Its image is
then the same at every load address, so the Layout it gives is a *fixed* one (a template and names).
It declines everything else, and everything it doubts; the Python layout then lays the object out or
names what is wrong with it. The tests hold the two to identical layouts, object by object.

The planner object is mapped (by the Python layout: it is itself such an object) at the second load
of a process: a process that loads one object does not pay for it. ``SVOD_NATIVE_LAYOUT=0`` turns it
off.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
import threading
from typing import Any, Callable, Dict, Optional

from .. import resources
from ..config import env_flag
from .arch import host_arch
from .layout import ARCHES, PAGE, Layout, Segment

NATIVE_LAYOUT_ENV = "SVOD_NATIVE_LAYOUT"
#: The architectures whose objects the planner reads (it ships for these hosts only).
NATIVE_ARCHES = ("x86_64",)
PLANNER_OBJECT = "kernels/prebuilt/%s-baseline/layout.o"
ENTRY = "svod_plan_layout"

_OK, _DECLINE, _SMALL = 0, 1, 2
_HEADER = struct.Struct("<17q")
_VALUES_AT = 256  # SVL_HEADER: the header's room
_SEGMENT_NAMES = {5: "text", 1: "rodata", 3: "data"}  # by protection, as layout.py makes them
_PLAN_TYPE = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_char_p,
                              ctypes.c_uint64)  # fmt: skip

Planner = Callable[[bytes], Optional[Layout]]


class NativePlanner:
    """The planner entry of a mapped ``layout.o``: ``plan(obj)`` gives a fixed Layout or None (declined)."""

    def __init__(self, loaded: Any, arch_name: str) -> None:
        self._owner = loaded  # keeps the mapping alive
        self._entry = _PLAN_TYPE(loaded.address(ENTRY))
        self.arch = next(a for a in ARCHES.values() if a.name == arch_name)
        self.page = max(PAGE, self.arch.page_size)

    def plan(self, obj: bytes) -> Optional[Layout]:
        cap = 2 * len(obj) + 4 * self.page + 1024
        out = ctypes.create_string_buffer(cap)
        status = self._entry(obj, len(obj), self.page, out, cap)
        if status == _SMALL:  # a large .bss, or many symbols: the planner said how much it needs
            cap = _HEADER.unpack_from(out)[0]
            out = ctypes.create_string_buffer(cap)
            status = self._entry(obj, len(obj), self.page, out, cap)
        return _layout(self.arch, out.raw) if status == _OK else None


def _layout(arch: Any, raw: bytes) -> Optional[Layout]:
    head = _HEADER.unpack_from(raw)
    size, nseg, segs = head[0], head[1], head[2:11]
    nsym, nsec, names_at, names_len, image_at, code_at = head[11:]
    values = memoryview(raw)[_VALUES_AT : _VALUES_AT + 8 * (nsym + nsec)].cast("q").tolist()
    names = raw[names_at : names_at + names_len].decode("ascii").split("\0")
    symbol_names = names[:nsym]
    symbols: Dict[str, int] = dict(zip(symbol_names, values))
    if len(symbols) != nsym:
        return None  # one name defined twice: the Python layout's precedence rules decide
    sections = dict(zip(names[nsym : nsym + nsec], values[nsym:]))
    segments = [Segment(_SEGMENT_NAMES[segs[3 * i + 2]], segs[3 * i], segs[3 * i + 1], segs[3 * i + 2]) for i in range(nseg)]
    code = frozenset(itertools.compress(symbol_names, raw[code_at : code_at + nsym]))
    return Layout(arch=arch, size=size, template=raw[image_at : image_at + size], segments=segments,
                  sections=sections, symbols=symbols, externals={}, code=code)  # fmt: skip


_lock = threading.Lock()
_UNSEEN, _SEEN, _MAPPING, _READY = range(4)
_state = _UNSEEN
_planner: Optional[Planner] = None


def native_planner(load: Callable[[bytes], Any]) -> Optional[Planner]:
    """This host's planner (mapped with ``load`` at the second call of a process), or None."""
    global _state, _planner
    if _state == _READY:
        return _planner
    with _lock:
        if _state == _UNSEEN:
            _state = _SEEN
            return None
        if _state != _SEEN:
            return _planner  # being mapped (this very load may be the planner's own)
        _state = _MAPPING
    try:
        planner = _map_planner(load)
    except BaseException:  # a bad SVOD_NATIVE_LAYOUT value: said again at the next load
        with _lock:
            _state = _SEEN
        raise
    with _lock:
        _planner, _state = planner, _READY
    return planner


def _map_planner(load: Callable[[bytes], Any]) -> Optional[Planner]:
    arch = host_arch()
    if arch not in NATIVE_ARCHES or not env_flag(NATIVE_LAYOUT_ENV, True):
        return None
    try:
        data = resources.read_bytes(PLANNER_OBJECT % arch)
    except OSError:
        return None  # a tree without prebuilt objects: the Python layout serves alone
    return NativePlanner(load(data), arch).plan


def reset_native_planner() -> None:
    """Forget the planner (tests): the next two loads decide again."""
    global _state, _planner
    with _lock:
        _state, _planner = _UNSEEN, None


__all__ = ["ENTRY", "NATIVE_ARCHES", "NATIVE_LAYOUT_ENV", "NativePlanner", "PLANNER_OBJECT", "Planner",
           "native_planner", "reset_native_planner"]
