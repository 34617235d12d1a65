"""Device specs: ``DeviceSpec.parse("cuda:1")`` turns a user string into a canonical, hashable name.

A leaf module (it imports only the error tree), so devices, kernels and the
registry can all name a spec without importing each other. Kinds registered at run time
(a factory in a ``DeviceRegistry``) parse like the built-in ones.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import List, Optional, Tuple, Union

from ..error import InvalidDeviceError

#: The built-in kinds ``DeviceSpec.parse`` understands (whether or not a factory exists); kinds
#: registered at run time (:func:`add_kind`, called by ``DeviceRegistry.register_factory``) join them.
KNOWN_KINDS = ("CPU", "CUDA", "METAL", "WEBGPU", "DISK", "AMD")
_ALIASES = {"GPU": "CUDA"}
_INDEXED = {"CUDA", "METAL", "AMD"}  # kinds printed as KIND:N
_ADDED: List[str] = []  # run-time kinds, in registration order
_ADDED_LOCK = threading.Lock()
_KIND_RE = re.compile(r"[A-Z][A-Z0-9_]{0,31}\Z")
_INDEX_RE = re.compile(r"[0-9]+\Z")  # ASCII digits only: no sign, no "²"
_MAX_INDEX = 2**31 - 1

SpecLike = Union[str, "DeviceSpec"]


@dataclass(frozen=True)
class DeviceSpec:
    """A canonical device name: ``kind`` upper-case, ``index`` for GPUs, ``path`` for DISK."""

    kind: str
    index: int = 0
    path: Optional[str] = None

    def __post_init__(self) -> None:
        # Normalise so DeviceSpec("gpu") == DeviceSpec.parse("CUDA") (same cache slot).
        kind = str(self.kind).strip().upper()
        object.__setattr__(self, "kind", _ALIASES.get(kind, kind))
        if not isinstance(self.index, int) or self.index < 0:
            raise InvalidDeviceError("device index must be a non-negative int, got %r" % (self.index,))
        if (self.kind == "DISK") != bool(self.path):
            raise InvalidDeviceError("a path goes with DISK and only DISK, got %r for %s" % (self.path, self.kind))

    @classmethod
    def parse(cls, text: str) -> "DeviceSpec":
        """Parse ``CPU``, ``CUDA[:N]``/``GPU[:N]``, ``METAL[:N]``, ``WEBGPU``, ``DISK:<path>``, ``AMD[:N]``."""
        if not isinstance(text, str):
            raise InvalidDeviceError("device spec must be a string, got %r" % (text,))
        stripped = text.strip()
        if not stripped:
            raise InvalidDeviceError("invalid device %r: empty device spec" % (text,))
        head, sep, rest = stripped.partition(":")
        kind = _ALIASES.get(head.strip().upper(), head.strip().upper())
        if kind == "DISK":
            return cls._parse_disk(text, rest)
        if kind not in KNOWN_KINDS and kind not in _ADDED:
            raise InvalidDeviceError(
                "invalid device %r: unknown kind %r (expected one of %s, GPU)" % (text, head, ", ".join(known_kinds()))
            )
        if not sep:
            return cls(kind)
        return cls(kind, _parse_index(text, kind, rest.strip()))

    @classmethod
    def _parse_disk(cls, text: str, rest: str) -> "DeviceSpec":
        # The path keeps its case (and inner spaces); only the whole spec was stripped.
        if not rest:
            raise InvalidDeviceError("invalid device %r: DISK needs a path (DISK:<path>)" % (text,))
        return cls("DISK", 0, rest)

    def __str__(self) -> str:
        if self.kind == "DISK":
            return "DISK:%s" % (self.path,)
        if self.kind in _INDEXED:
            return "%s:%d" % (self.kind, self.index)
        return self.kind


def _parse_index(text: str, kind: str, raw: str) -> int:
    if not _INDEX_RE.match(raw) or int(raw) > _MAX_INDEX:
        raise InvalidDeviceError("invalid device %r: index %r is not a non-negative integer" % (text, raw))
    index = int(raw)
    if kind not in _INDEXED and index != 0:
        # CPU and WEBGPU are single devices; "CPU:0" is tolerated, "CPU:1" is a typo.
        raise InvalidDeviceError("invalid device %r: %s takes no device index" % (text, kind))
    return index


def known_kinds() -> Tuple[str, ...]:
    """The kinds :meth:`DeviceSpec.parse` accepts: the built-in ones, then those added at run time."""
    return KNOWN_KINDS + tuple(_ADDED)


def add_kind(kind: str, indexed: bool = False) -> str:
    """Make ``kind`` a valid spec name for this process (``indexed``: ``KIND:N`` names several devices).

    Returns the normalised kind. A kind stays known once added: without a factory, asking a
    registry for it is an :class:`UnsupportedDeviceError` there, not a parse error here.
    """
    key = normalise_kind(kind)
    if not _KIND_RE.match(key):
        raise InvalidDeviceError("device kind %r: expected a letter, then letters, digits or _ (32 at most)" % (kind,))
    with _ADDED_LOCK:  # parse reads without the lock: it sees a kind whole or not at all
        if key not in KNOWN_KINDS and key not in _ADDED:
            _ADDED.append(key)
        if indexed:
            _INDEXED.add(key)
    return key


def as_spec(spec: SpecLike) -> DeviceSpec:
    """A :class:`DeviceSpec` from a spec or a string."""
    return spec if isinstance(spec, DeviceSpec) else DeviceSpec.parse(spec)


def normalise_kind(kind: str) -> str:
    """A device kind as the registry keys it: upper-case, ``GPU`` meaning ``CUDA``."""
    key = str(kind).strip().upper()
    return _ALIASES.get(key, key)
