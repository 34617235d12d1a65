"""Prebuilt library objects: picking the variant for this CPU and loading it once.

Variants (see ``VARIANTS`` in the generated signature module) are keyed by
architecture and the ``/proc/cpuinfo`` feature flags they need; the highest
priority variant whose flags are all present wins (AVX2+FMA+F16C over the
x86-64 baseline). ``SVOD_KERNELS_VARIANT`` forces one (or ``none``: always
compile). Each object is relocated and mapped on first use only, once per
process, and stays mapped: every kernel of the library shares the mapping.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, FrozenSet, List, Optional

from .. import resources
from ..compiler.targets import cpu_features
from ..config import env_str
from ..error import KernelParamError, LoaderError
from ..jit_loader.arch import host_arch

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANT_ENV = "SVOD_KERNELS_VARIANT"

_lock = threading.Lock()
_objects: Dict[str, "SharedObject"] = {}


def _variants() -> Dict[str, Dict[str, Any]]:
    from ._generated.signatures import VARIANTS

    return VARIANTS


def choose_variant(arch: Optional[str] = None, features: Optional[FrozenSet[str]] = None) -> Optional[str]:
    """The prebuilt variant for this host (None: no prebuilt objects fit; compile instead)."""
    forced = env_str(VARIANT_ENV) or ""
    variants = _variants()
    if forced:
        if forced.lower() == "none":
            return None
        if forced not in variants:
            raise KernelParamError(
                "%s=%r is not a prebuilt variant (known: %s, none)" % (VARIANT_ENV, forced, ", ".join(sorted(variants)))
            )
        return forced
    arch = arch or host_arch()
    have = cpu_features() if features is None else features
    fits = [
        (v["priority"], name)
        for name, v in variants.items()
        if v["arch"] == arch and set(v["requires"]) <= have and resources.exists(object_member(name))
    ]
    return max(fits)[1] if fits else None


def object_path(variant: str) -> str:
    return os.path.join(HERE, *_variants()[variant]["object"].split("/"))


def object_member(variant: str) -> str:
    """The variant's object as a package resource name (read from the archive in a one-file runtime)."""
    return "kernels/" + _variants()[variant]["object"]


def has_entry(variant: str, entry: str) -> bool:
    return entry not in _variants()[variant]["exclude"]


def compile_flags(variant: Optional[str]) -> List[str]:
    """Flags to compile a library kernel with on a host of ``variant`` (its ISA, no cross target)."""
    if variant is None:
        return []
    return [f for f in _variants()[variant]["flags"] if not f.startswith("--target=")]


class SharedObject:
    """A process-lifetime LoadedObject: ``close()`` is a no-op (other kernels still use the pages)."""

    def __init__(self, loaded: Any, variant: str) -> None:
        self._loaded = loaded
        self.variant = variant

    def function(self, name: str, restype: Any, *argtypes: Any) -> Any:
        return self._loaded.function(name, restype, *argtypes)

    def address(self, name: str) -> int:
        return self._loaded.address(name)

    def close(self) -> None:
        """Kept mapped on purpose: closing one kernel must not unmap the whole library."""

    def __repr__(self) -> str:
        return "<SharedObject %s %r>" % (self.variant, self._loaded)


def load_variant(variant: str) -> SharedObject:
    """Relocate and map ``variant``'s object on first use; later calls return the same mapping."""
    with _lock:
        obj = _objects.get(variant)
        if obj is None:
            from ..jit_loader import load_object  # on first map, so that importing the library stays cheap

            path = object_path(variant)
            try:
                data = resources.read_bytes(object_member(variant))
            except OSError as exc:
                raise LoaderError("prebuilt kernel object %s cannot be read: %s" % (path, exc)) from exc
            obj = _objects[variant] = SharedObject(load_object(data), variant)
        return obj


def loaded_variants() -> List[str]:
    """Variants mapped so far in this process (for tests and diagnostics)."""
    with _lock:
        return sorted(_objects)


__all__ = [
    "SharedObject",
    "choose_variant",
    "compile_flags",
    "cpu_features",
    "has_entry",
    "load_variant",
    "loaded_variants",
    "object_path",
]
