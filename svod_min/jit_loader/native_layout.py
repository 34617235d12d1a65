"""The native layout planner: :func:`.layout.plan_layout` in one C call, for the objects it can take.

A cold load spends most of its time turning ELF tables into a :class:`.layout.Layout` in Python.
``templates/c/layout.c.j2``, shipped prebuilt as ``kernels/prebuilt/x86_64-baseline/layout.o``, does
the same checks and the same placement for the usual kernel object: x86_64, relocations that are
PC-relative (PC32, PLT32, PC64, GOTPCREL and its relaxable forms) against the image, or through a
GOT slot or call stub to a named undefined symbol. It declines everything else, and anything it
doubts; the Python layout then lays the object out or names what is wrong with it. The tests hold
the two to identical layouts, object by object, on real and on mutated objects.

The planner object is mapped (by the Python layout: it is itself such an object) at the second load
of a process, so a process that loads one small object does not pay for it, or at the first load of
a large object, which it pays back at once. ``SVOD_NATIVE_LAYOUT=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import itertools
import struct
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from .. import resources
from ..config import env_flag
from ..error import LoaderError
from .arch import host_arch
from .layout import ARCHES, PAGE, Layout, Segment

NATIVE_LAYOUT_ENV = "SVOD_NATIVE_LAYOUT"
#: The architectures whose objects the planner reads (it ships for these hosts only).
NATIVE_ARCHES = ("x86_64",)
PLANNER_OBJECT = "kernels/prebuilt/%s-baseline/layout.o"
ENTRY = "svod_plan_layout"
#: An object this large maps the planner at once, even at the first load of a process.
EAGER_BYTES = 64 << 10

_OK, _DECLINE, _SMALL = 0, 1, 2
_HEADER = struct.Struct("<25q")
_KEPT_BYTES = 1 << 18  # each thread keeps an output buffer up to this size between plans
_SEGMENT_NAMES = {5: "text", 1: "rodata", 3: "data"}  # by protection, as layout.py makes them
_PLAN_TYPE = ctypes.CFUNCTYPE(
    ctypes.c_long, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64
)

Planner = Callable[[bytes], Optional[Layout]]


class NativePlanner:
    """The planner entry of a mapped ``layout.o``: ``plan(obj)`` gives the object's Layout, or None
    when it declines the object."""

    def __init__(self, loaded: Any, arch_name: str) -> None:
        self._owner = loaded  # keeps the mapping alive
        self._entry = _PLAN_TYPE(loaded.address(ENTRY))
        self.arch = next(a for a in ARCHES.values() if a.name == arch_name)
        self.page = max(PAGE, self.arch.page_size)
        self._local = threading.local()

    def plan(self, obj: bytes) -> Optional[Layout]:
        cap = 2 * len(obj) + 4 * self.page + 1024
        for _attempt in range(3):  # a large .bss or many symbols: the planner says how much it needs
            raw, view = self._buffer(cap)
            status = self._entry(obj, len(obj), self.page, view, cap)
            if status != _SMALL:
                return _layout(self.arch, raw) if status == _OK else None
            cap = max(_HEADER.unpack_from(raw)[0], 2 * cap)
        return None

    def _buffer(self, cap: int) -> Tuple[bytearray, Any]:
        """An output buffer of at least ``cap`` bytes: this thread's own when it is small enough (the
        planner writes every byte it reports, so nothing needs clearing between calls)."""
        kept = getattr(self._local, "buffer", None)
        if kept is not None and len(kept[0]) >= cap:
            return kept
        raw = bytearray(cap)
        made = raw, (ctypes.c_char * cap).from_buffer(raw)
        if cap <= _KEPT_BYTES:
            self._local.buffer = made
        return made


def _layout(arch: Any, raw: bytearray) -> Optional[Layout]:
    """The Layout the planner wrote into ``raw`` (see the layout of ``out`` in layout.c.j2)."""
    head = _HEADER.unpack_from(raw)
    size, nseg, segs, nsym, nsec, names_at, names_len, image_at, code_at = head[0], head[1], head[2:11], *head[11:17]
    next_, ngot, nstub, table_at, weak_at, got_base, stub_base, values_at = head[17:]
    values = memoryview(raw)[values_at : values_at + 8 * (nsym + nsec)].cast("q").tolist()
    names = raw[names_at : names_at + names_len].decode("ascii").split("\0")
    symbol_names = names[:nsym]
    symbols: Dict[str, int] = dict(zip(symbol_names, values))
    if len(symbols) != nsym:
        return None  # one name defined twice: the Python layout's precedence rules decide
    layout = Layout(
        arch=arch,
        size=size,
        template=bytes(raw[image_at : image_at + size]),
        segments=[
            Segment(_SEGMENT_NAMES[segs[3 * i + 2]], segs[3 * i], segs[3 * i + 1], segs[3 * i + 2]) for i in range(nseg)
        ],
        sections=dict(zip(names[nsym : nsym + nsec], values[nsym:])),
        symbols=symbols,
        externals=dict(zip(names[nsym + nsec : nsym + nsec + next_], map(bool, raw[weak_at : weak_at + next_]))),
        code=frozenset(itertools.compress(symbol_names, raw[code_at : code_at + nsym])),
    )
    if ngot or nstub:
        external = names[nsym + nsec : nsym + nsec + next_]
        pairs = memoryview(raw)[table_at : table_at + 16 * (ngot + nstub)].cast("q").tolist()
        refs = [("ext", external[pairs[i + 1]]) if pairs[i] else ("img", pairs[i + 1]) for i in range(0, len(pairs), 2)]
        for chosen in (refs[:ngot], refs[ngot:]):
            reached = [value for kind, value in chosen if kind == "ext"]
            if len(set(reached)) != len(reached):
                return None  # two undefined symbols of one name: the Python layout gives them one slot
        layout.got = [(got_base + 8 * i, ref, 0) for i, ref in enumerate(refs[:ngot])]
        layout.stubs = [(stub_base + arch.stub_size * i, ref, 0) for i, ref in enumerate(refs[ngot:])]
    return layout


_lock = threading.Lock()
_UNSEEN, _SEEN, _MAPPING, _READY = range(4)
_state = _UNSEEN
_planner: Optional[Planner] = None


def native_planner(load: Callable[[bytes], Any], nbytes: int = 0) -> Optional[Planner]:
    """This host's planner, or None. It is mapped with ``load`` at the second call of a process, or at
    the first for an object of ``nbytes`` >= 64 KiB (the Python layout of such an object costs more
    than mapping the planner)."""
    global _state, _planner
    if _state == _READY:
        return _planner
    with _lock:
        if _state == _UNSEEN and nbytes < EAGER_BYTES:
            _state = _SEEN
            return None
        if _state == _READY:
            return _planner  # another thread mapped it meanwhile
        if _state == _MAPPING:
            return None  # being mapped (this very load may be the planner's own)
        _state = _MAPPING
    try:
        planner = _map_planner(load)
    except BaseException:  # a bad SVOD_NATIVE_LAYOUT value (ConfigError): said again at the next load
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
    try:
        return NativePlanner(load(data), arch).plan
    except LoaderError as exc:  # a damaged or foreign layout.o must not stop loads
        import logging  # here: the only message of this module, and logging costs ~5 ms of a start

        logging.getLogger("svod_min.jit_loader.native_layout").warning(
            "the native layout planner could not be mapped (%s); the Python layout serves alone", exc
        )
        return None


def reset_native_planner() -> None:
    """Forget the planner (tests): the next two loads decide again."""
    global _state, _planner
    with _lock:
        _state, _planner = _UNSEEN, None


__all__ = [
    "EAGER_BYTES",
    "ENTRY",
    "NATIVE_ARCHES",
    "NATIVE_LAYOUT_ENV",
    "NativePlanner",
    "PLANNER_OBJECT",
    "Planner",
    "native_planner",
    "reset_native_planner",
]
