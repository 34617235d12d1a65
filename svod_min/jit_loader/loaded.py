"""A relocated object mapped into this process: :func:`load_object` and :class:`LoadedObject`."""

from __future__ import annotations

import ctypes
import sys
import threading
from typing import Any, Callable, Dict, List, Optional

from ..error import LoaderError, SymbolNotFoundError
from .arch import host_arch
from .layout import Layout, Segment, image_at, plan_layout
from .memory import map_image, unmap
from .native_layout import native_planner
from .rt_helpers import helper_address
from .symbols import default_resolver, lookup

Resolver = Callable[[str], int]
HOST_ARCH = host_arch()
# One lock for every object's close(): unmapping is rare and short, and a lock per object costs a
# noticeable share of a cold load.
_close_lock = threading.Lock()


class LoadedObject:
    """A relocated object mapped into this process.

    ``close()`` unmaps it; after that, functions obtained from it must not be
    called. Objects that are simply dropped are unmapped by the garbage
    collector once no function obtained from them is alive (each function
    keeps its object alive).
    """

    def __init__(self, layout: Layout, base: int, mode: str) -> None:
        self.base = base
        self.size = layout.size
        self.mode = mode
        self._layout = layout  # shared with the layout cache: read, never changed
        self._symbols = layout.symbols
        self._mapped = True  # unmapped once, by close() or when the object is collected

    @property
    def arch(self) -> str:
        return self._layout.arch.name

    @property
    def segments(self) -> List[Segment]:
        """The text, rodata and data segments: image offsets, sizes and protections."""
        return list(self._layout.segments)

    @property
    def closed(self) -> bool:
        return not self._mapped

    @property
    def symbols(self) -> Dict[str, int]:
        """Defined symbol -> absolute address."""
        return {name: self.base + off for name, off in self._symbols.items()}

    @property
    def sections(self) -> Dict[str, int]:
        """Loaded section name -> absolute address."""
        return {name: self.base + off for name, off in self._layout.sections.items()}

    def address(self, name: str) -> int:
        """Absolute address of a defined symbol (``name`` or ``_name``)."""
        if self.closed:
            raise LoaderError("object at 0x%x is closed" % self.base)
        for candidate in (name, "_" + name):
            off = self._symbols.get(candidate)
            if off is not None:
                return self.base + off
        known = ", ".join(sorted(self._symbols)) or "none"
        raise SymbolNotFoundError("symbol %r is not defined in this object (defined: %s)" % (name, known))

    def function(self, name: str, restype: Any, *argtypes: Any) -> Any:
        """A ctypes function for entry point ``name`` with the given prototype.

        ``name`` must be code: a function (or untyped label) in an executable
        section. Calling a data symbol would jump into a non-executable page.
        """
        address = self.address(name)
        code = self._layout.code
        if name not in code and "_" + name not in code:
            raise SymbolNotFoundError(
                "symbol %r is defined but is not a function in an executable section "
                "(data cannot be an entry point)" % name
            )
        prototype = ctypes.CFUNCTYPE(restype, *argtypes)
        fn = prototype(address)
        fn._svod_owner = self  # keep the mapping alive as long as the function
        return fn

    def close(self) -> None:
        """Unmap the object now (idempotent)."""
        with _close_lock:
            if self._mapped:
                self._mapped = False
                unmap(self.base, self.size)

    def __del__(
        self, _finalizing: Callable[[], bool] = sys.is_finalizing, _unmap: Callable[[int, int], None] = unmap
    ) -> None:
        # (A __del__ rather than weakref.finalize: a finalizer costs more than the rest of a warm load.)
        # At interpreter exit other threads may still be inside kernel code, and module globals may
        # already be gone (hence the defaults); the OS reclaims the pages anyway.
        if getattr(self, "_mapped", False) and not _finalizing():
            self._mapped = False
            _unmap(self.base, self.size)

    def __enter__(self) -> "LoadedObject":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "0x%x+0x%x" % (self.base, self.size)
        return "<LoadedObject %s %s mode=%s>" % (self.arch, state, self.mode)


def _check_host_arch(layout: Layout) -> None:
    if layout.arch.name != HOST_ARCH:
        raise LoaderError(
            "object is for %s but this host is %s: it can be relocated (relocate()) but not run here"
            % (layout.arch.name, HOST_ARCH)
        )


def resolve_with_helpers(name: str) -> int:
    """The default resolver: the host libraries, then the runtime helpers svod_min ships (rt_helpers)."""
    address = lookup(name) or helper_address(name, load_object)
    return address if address else default_resolver(name)  # raises, naming the symbol


def load_object(
    obj: bytes, *, resolve: Optional[Resolver] = None, symbols: Optional[Dict[str, int]] = None
) -> LoadedObject:
    """Relocate ``obj`` into fresh W^X memory and return the mapped object.

    ``resolve`` replaces the default dlsym resolver; ``symbols`` adds
    name -> address overrides on top of it.
    """
    nbytes = len(obj) if isinstance(obj, (bytes, bytearray, memoryview)) else 0  # plan_layout names a wrong type
    layout = plan_layout(obj, native_planner(load_object, nbytes))
    _check_host_arch(layout)
    resolver = resolve or resolve_with_helpers
    if symbols:
        base_resolver = resolver
        resolver = lambda name: symbols[name] if name in symbols else base_resolver(name)  # noqa: E731
    base, mode = map_image(layout.size, lambda b: image_at(layout, b, resolver), layout.segments)
    return LoadedObject(layout, base, mode)


__all__ = ["HOST_ARCH", "LoadedObject", "Resolver", "load_object"]
