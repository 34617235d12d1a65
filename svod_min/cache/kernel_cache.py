"""Kernel specs, the in-memory kernel cache and the on-disk object cache.

Three layers, cheapest first (their parts live in :mod:`svod_min.cache`):

* :class:`KernelCache` (:mod:`.memory`) - an in-process LRU map
  ``key -> compiled thing`` whose concurrent misses compile once.
* :class:`ObjectCache` (:mod:`.disk`, format in :mod:`.disk_format`)
  - one file per key holding relocatable ELF bytes, shared between
  processes, under ``<cache root>/objects``; I/O trouble means "no cache".
* :func:`compile_cached` - C / LLVM IR source -> object bytes through both;
  :func:`compile_many_cached` - the same for many sources, the misses
  compiled together in one batch (:func:`svod_min.compiler.clang.compile_many_c`).

Every public name of the parts is re-exported here; this is the import path.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from ..error import NotSupportedError
from .disk_format import (
    ENTRY_SUFFIX,
    HEADER,
    MAGIC,
    MAX_ENTRY_BYTES,
    SCHEMA_VERSION,
    TMP_PREFIX,
    content_key,
    encode_entry,
)
from .memory import GLOBAL_KERNEL_CACHE, KernelCache, KernelCacheStats, get_or_compile_kernel
from .spec import CachedKernel, CompiledSpec, Size3, SymSize

if TYPE_CHECKING:  # at run time the module __getattr__ below provides these (kept in step with _DISK_NAMES)
    from .disk import (
        DEFAULT_BUDGET,
        LOW_WATER,
        OBJECTS_DIR,
        STALE_TMP_S,
        ObjectCache,
        ObjectCacheEntry,
        default_cache_dir,
        object_cache,
        parse_budget,
    )

#: The on-disk cache's names, re-exported on first use (PEP 562): plans import this module for
#: :class:`CachedKernel`, and a load that compiles nothing never opens the disk cache.
_DISK_NAMES = (
    "DEFAULT_BUDGET",
    "LOW_WATER",
    "OBJECTS_DIR",
    "STALE_TMP_S",
    "ObjectCache",
    "ObjectCacheEntry",
    "default_cache_dir",
    "object_cache",
    "parse_budget",
)


def __getattr__(name: str) -> Any:
    if name in _DISK_NAMES:
        from . import disk

        value = getattr(disk, name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def _object_cache() -> "ObjectCache":
    from .disk import object_cache

    return object_cache()


def _driver() -> ModuleType:
    """:mod:`svod_min.compiler.clang`, imported on first use.

    Importing it costs ~50 ms (the loader, subprocess, a thread pool), and
    plans import this module for :class:`CachedKernel` alone; called as
    ``clang.X`` so that tests can stand in for the compiler.
    """
    from ..compiler import clang

    return clang


#: In-process level of :func:`compile_cached`: dedups concurrent identical
#: compiles and keeps a few recent objects (useful when the disk cache is off).
OBJECT_MEMORY_CACHE = KernelCache(max_entries=64)
_KINDS = ("c", "ir")


def object_key(source: str, *, kind: str = "c", extra_flags: Sequence[str] = ()) -> str:
    """Content key of an object: source, kind, flags, compiler identity, host arch."""
    clang = _driver()
    if kind not in _KINDS:
        raise NotSupportedError("compile kind %r is not supported (expected 'c' or 'ir')" % kind)
    info = clang.find_compiler(need_clang=(kind == "ir"))
    return content_key(
        "svod-obj-v1",
        kind,
        source,
        "\0".join(extra_flags),
        info.identity,
        clang.host_arch(),
        # the driver's built-in flags shape the object too (its own and this compiler family's):
        # a change must miss
        "\0".join(clang.DEFAULT_FLAGS),
        "\0".join(clang.family_flags(info)),
    )


def compile_cached(
    source: str,
    *,
    kind: str = "c",
    extra_flags: Sequence[str] = (),
    cache: Optional[ObjectCache] = None,
) -> bytes:
    """Object bytes for ``source``: memory, then disk, then the compiler (and store)."""
    clang = _driver()
    flags = tuple(extra_flags)
    key = object_key(source, kind=kind, extra_flags=flags)
    disk = cache if cache is not None else _object_cache()

    def build() -> bytes:
        data = disk.get(key)
        if data is not None:
            return data
        if kind == "ir":
            data = clang.compile_ir(source, extra_flags=flags)
        else:
            data = clang.compile_c(source, extra_flags=flags)
        disk.put(key, data)
        return data

    return OBJECT_MEMORY_CACHE.get_or_compile(key, build)


def _cached_objects(keys: List[str], disk: ObjectCache) -> Dict[str, bytes]:
    """Objects already in the memory or disk cache, by key."""
    found: Dict[str, bytes] = {}
    for key in keys:
        data = OBJECT_MEMORY_CACHE.get(key)
        if data is None:
            data = disk.get(key)
            if data is not None:
                _remember(key, data)
        if data is not None:
            found[key] = data
    return found


def _remember(key: str, data: bytes) -> None:
    OBJECT_MEMORY_CACHE.get_or_compile(key, lambda: data)


def compile_many_cached(
    sources: Sequence[str],
    *,
    kind: str = "c",
    extra_flags: Sequence[str] = (),
    cache: Optional[ObjectCache] = None,
    jobs: Optional[int] = None,
    names: Optional[Sequence[str]] = None,
) -> List[bytes]:
    """Object bytes for each source, like :func:`compile_cached`, compiling the misses together.

    Same keys as :func:`compile_cached`: memory, then disk, then one
    :func:`clang.compile_many_c` run for every distinct miss (``jobs`` and
    ``names`` go to it), whose objects are stored in both caches. LLVM IR
    (``kind="ir"``) compiles source by source.
    """
    clang = _driver()
    flags = tuple(extra_flags)
    sources = list(sources)
    if names is not None and len(names) != len(sources):
        raise ValueError("names has %d entries for %d sources" % (len(names), len(sources)))
    if kind == "ir":
        return [compile_cached(s, kind="ir", extra_flags=flags, cache=cache) for s in sources]
    keys = [object_key(s, kind=kind, extra_flags=flags) for s in sources]
    disk = cache if cache is not None else _object_cache()
    found = _cached_objects(keys, disk)
    first: Dict[str, int] = {}  # each distinct miss once, at its first position
    for i, key in enumerate(keys):
        if key not in found:
            first.setdefault(key, i)
    misses = list(first.values())
    if misses:
        built = clang.compile_many_c(
            [sources[i] for i in misses],
            extra_flags=flags,
            jobs=jobs,
            names=None if names is None else [names[i] for i in misses],
            numbers=misses,  # errors name each kernel by its position in ``sources``
        )
        for i, data in zip(misses, built):
            disk.put(keys[i], data)
            _remember(keys[i], data)
            found[keys[i]] = data
    return [found[k] for k in keys]


__all__ = [
    "CachedKernel",
    "CompiledSpec",
    "DEFAULT_BUDGET",
    "ENTRY_SUFFIX",
    "GLOBAL_KERNEL_CACHE",
    "HEADER",
    "KernelCache",
    "KernelCacheStats",
    "LOW_WATER",
    "MAGIC",
    "MAX_ENTRY_BYTES",
    "OBJECTS_DIR",
    "OBJECT_MEMORY_CACHE",
    "ObjectCache",
    "ObjectCacheEntry",
    "SCHEMA_VERSION",
    "STALE_TMP_S",
    "Size3",
    "SymSize",
    "TMP_PREFIX",
    "compile_cached",
    "compile_many_cached",
    "content_key",
    "default_cache_dir",
    "encode_entry",
    "get_or_compile_kernel",
    "object_cache",
    "object_key",
    "parse_budget",
]
