"""Lazy package exports (PEP 562): a package names what it exports and where it lives; each name is
imported on first use and then cached in the package, so importing the package itself stays cheap."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, List, Mapping, Sequence, Tuple


def lazy_exports(
    package: str, names: Mapping[str, str], submodules: Sequence[str] = ()
) -> Tuple[Callable[[str], Any], Callable[[], List[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``names`` maps an exported name to its submodule
    (relative to the package); ``submodules`` are subpackages reachable as attributes."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module("." + name, package)
        module = names.get(name)
        if module is None:
            raise AttributeError("module %r has no attribute %r" % (package, name))
        value = getattr(importlib.import_module("." + module, package), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(names) | set(submodules))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
