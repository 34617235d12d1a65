"""Package data (prebuilt objects, PTX, kernel C sources) read from wherever svod_min was imported.

An installed or source-tree svod_min reads plain files; inside a one-file
runtime (``svod_min.pyz``, see :mod:`svod_min.planfile.pyz`) there is no path on disk, so
the bytes come through the import loader (``zipimporter.get_data``). Callers
name data by its path relative to the package, with ``/`` separators.
"""

from __future__ import annotations

import os
import sys
import threading
import zipfile
from typing import Any, Dict, FrozenSet, Optional

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

_lock = threading.Lock()
_archive_names: Optional[FrozenSet[str]] = None
_members_found: Dict[str, bool] = {}


def _loader() -> Any:
    return getattr(sys.modules[__package__ or "svod_min"], "__loader__", None)


def _full_path(rel: str) -> str:
    return os.path.join(PACKAGE_DIR, *rel.split("/"))


def in_archive() -> bool:
    """Whether svod_min was imported from a zip archive (the one-file runtime)."""
    return _ARCHIVE is not None


def archive_path() -> Optional[str]:
    """The zip archive svod_min was imported from (absolute), or None."""
    return _ARCHIVE


def _find_archive() -> Optional[str]:
    # read once, at import: zipimport may hold a relative path, and the working directory may change later
    loader = _loader()
    if os.path.isdir(PACKAGE_DIR) or not hasattr(loader, "archive"):
        return None
    return os.path.abspath(loader.archive)


def _zip_loader() -> Any:
    """The zipimporter svod_min came from, when its reads do not depend on the working directory; else None.

    A zipimporter keeps its archive path as it was on sys.path: Python 3.8 puts a zipapp there as typed
    (``python3.8 svod_min.pyz``, 3.9+ make it absolute), and PYTHONPATH may name it relatively. Such a
    loader opens that relative path at each read, so a later chdir would send it elsewhere: those
    reads go through zipfile and the absolute path taken at import instead.
    """
    loader = _loader()
    if hasattr(loader, "get_data") and os.path.isabs(getattr(loader, "archive", "")):
        return loader
    return None


def read_bytes(rel: str) -> bytes:
    """The package file ``rel`` (``kernels/prebuilt/x86_64-baseline/library.o``); OSError when absent."""
    if _ARCHIVE is None:
        with open(_full_path(rel), "rb") as fh:
            return fh.read()
    member = _archive_member(rel)
    loader = _zip_loader()
    if loader is not None:  # zipimport already holds the archive's directory: no second parse of it
        try:
            # named under the loader's own archive path: get_data strips only that prefix, as spelled
            return loader.get_data(os.path.join(loader.archive, *member.split("/")))
        except OSError:
            raise FileNotFoundError("%s has no member %s" % (_ARCHIVE, member)) from None
    try:
        with zipfile.ZipFile(_ARCHIVE) as zf:
            return zf.read(member)
    except KeyError:
        raise FileNotFoundError("%s has no member %s" % (_ARCHIVE, member)) from None


def read_text(rel: str) -> str:
    return read_bytes(rel).decode("utf-8")


def exists(rel: str) -> bool:
    """Whether the package holds ``rel`` (checked without reading it, except in an archive zipimport reads:
    asking it for the member costs less than parsing the archive's directory a second time)."""
    if not in_archive():
        return os.path.isfile(_full_path(rel))
    if _zip_loader() is None:
        return _archive_member(rel) in _names_in_archive()
    with _lock:
        found = _members_found.get(rel)
    if found is None:  # the archive does not change under a running process: asked once per member
        try:
            read_bytes(rel)
            found = True
        except OSError:
            found = False
        with _lock:
            _members_found[rel] = found
    return found


def _archive_member(rel: str) -> str:
    inner = os.path.relpath(PACKAGE_DIR, str(_ARCHIVE)).replace(os.sep, "/")
    return "%s/%s" % (inner, rel)


def _names_in_archive() -> FrozenSet[str]:
    global _archive_names
    with _lock:
        if _archive_names is None:
            with zipfile.ZipFile(str(_ARCHIVE)) as zf:
                _archive_names = frozenset(zf.namelist())
        return _archive_names


__all__ = ["PACKAGE_DIR", "archive_path", "exists", "in_archive", "read_bytes", "read_text"]


_ARCHIVE = _find_archive()
