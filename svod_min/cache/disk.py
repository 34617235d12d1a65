"""The on-disk object cache: content-addressed, multi-process-safe, never an error for I/O.

One file per key holding relocatable ELF bytes (:mod:`.disk_format`),
shared between processes. Writes are atomic (temp file + ``os.replace``),
reads verify a sha256 of the payload, and any I/O trouble degrades to "no
cache" instead of an error. A byte budget evicts least recently used
entries. The folder is ``objects`` under :func:`svod_min.config.cache_root`.
"""

from __future__ import annotations

import errno
import logging
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..config import CACHE_ENV_VARS, cache_root, disk_cache_enabled, parse_size
from ..error import CacheError, ConfigError
from .disk_format import (
    ENTRY_SUFFIX,
    HEADER,
    TMP_PREFIX,
    entry_header,
    entry_problem,
    hash_key,
    read_entry,
    unlink_quiet,
)

log = logging.getLogger("svod_min.cache")

DEFAULT_BUDGET = 1 << 30
#: The object cache's folder under the cache root.
OBJECTS_DIR = "objects"
#: A temp file this old belongs to a writer that died; a scan removes it.
STALE_TMP_S = 600.0
#: After an over-budget scan, evict down to this fraction so the next put does not rescan.
LOW_WATER = 0.9
# errno values that mean "this directory is not ours to write": stop trying.
_FATAL_WRITE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR}


@dataclass(frozen=True)
class ObjectCacheEntry:
    """One entry file as seen by a directory scan."""

    path: str
    size: int
    mtime: float


class ObjectCache:
    """Content-addressed, multi-process-safe disk cache of object bytes.

    Never raises for I/O trouble: an unusable directory disables the cache
    for this instance (``enabled`` False, ``get`` -> None, ``put`` -> False).
    """

    def __init__(
        self,
        directory: Optional[str],
        *,
        budget_bytes: int = DEFAULT_BUDGET,
        enabled: bool = True,
        fsync: bool = False,
    ) -> None:
        if budget_bytes < 0:
            raise CacheError("budget_bytes must be >= 0, got %r" % (budget_bytes,))
        self._directory = os.path.abspath(directory) if directory else None
        self.budget_bytes = budget_bytes
        self.fsync = fsync
        self._lock = threading.Lock()
        self._evict_lock = threading.Lock()
        self._total: Optional[int] = None  # running estimate; None until the first scan
        self._enabled = bool(enabled and self._directory and self._prepare_dir())

    @classmethod
    def from_env(cls) -> "ObjectCache":
        """Build from SVOD_OBJECT_CACHE, SVOD_OBJECT_CACHE_DIR, SVOD_OBJECT_CACHE_BUDGET."""
        enabled = disk_cache_enabled()
        budget = parse_budget(os.environ.get("SVOD_OBJECT_CACHE_BUDGET"))
        return cls(default_cache_dir(), budget_bytes=budget, enabled=enabled)

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def directory(self) -> Optional[str]:
        return self._directory

    def __repr__(self) -> str:
        return "ObjectCache(%r, enabled=%s, budget_bytes=%d)" % (
            self._directory,
            self._enabled,
            self.budget_bytes,
        )

    # -- setup / failure handling

    def _prepare_dir(self) -> bool:
        assert self._directory is not None
        try:
            os.makedirs(self._directory, mode=0o700, exist_ok=True)
        except OSError as exc:
            log.debug("object cache disabled: cannot create %s: %s", self._directory, exc)
            return False
        if not os.path.isdir(self._directory):
            log.debug("object cache disabled: %s is not a directory", self._directory)
            return False
        if not os.access(self._directory, os.W_OK | os.X_OK):
            log.debug("object cache disabled: %s is not writable", self._directory)
            return False
        return True

    def _disable(self, why: object) -> None:
        if self._enabled:
            log.debug("object cache %s disabled for this process: %s", self._directory, why)
        self._enabled = False

    def _path_for(self, key_hash: bytes) -> str:
        assert self._directory is not None
        return os.path.join(self._directory, key_hash.hex() + ENTRY_SUFFIX)

    def path_for(self, key: str) -> Optional[str]:
        """File that holds (or would hold) ``key``; None without a directory."""
        key_hash = hash_key(key)
        return self._path_for(key_hash) if self._directory else None

    # -- read

    def get(self, key: str) -> Optional[bytes]:
        """Payload stored under ``key``, or None (miss, disabled, or a bad entry)."""
        key_hash = hash_key(key)
        if not self._enabled:
            return None
        path = self._path_for(key_hash)
        try:
            st, raw = read_entry(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.debug("object cache read of %s failed: %s", path, exc)
            return None
        problem = entry_problem(raw, key_hash)
        if problem is not None:
            log.debug("object cache: discarding bad entry %s: %s", path, problem)
            self._discard_if_same(path, st)
            return None
        self._touch(path)
        return raw[HEADER.size :]  # type: ignore[index]  # entry_problem: raw is a sound entry

    @staticmethod
    def _discard_if_same(path: str, st: os.stat_result) -> None:
        """Delete ``path`` unless another process already replaced it with a new file."""
        try:
            now = os.stat(path)
            if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                os.unlink(path)
        except OSError:
            pass

    @staticmethod
    def _touch(path: str) -> None:
        # mtime = last use, so budget eviction is LRU-ish across processes.
        try:
            os.utime(path, None)
        except OSError:
            pass

    # -- write

    def put(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` atomically; False when not stored."""
        key_hash = hash_key(key)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CacheError("object cache payloads must be bytes, got %s" % type(data).__name__)
        if not self._enabled:
            return False
        data = bytes(data)
        size = HEADER.size + len(data)
        if size > self.budget_bytes:
            log.debug("object cache: %d-byte entry exceeds the budget, not stored", size)
            return False
        header = entry_header(key_hash, data)
        path = self._path_for(key_hash)
        if not self._write_with_retry(path, header, data):
            return False
        self._account(size, path)
        return True

    def _write_with_retry(self, path: str, header: bytes, data: bytes) -> bool:
        for attempt in (0, 1):
            try:
                self._write_atomic(path, header, data)
                return True
            except FileNotFoundError as exc:
                # Directory removed under us (rm -rf of the cache): recreate once.
                if attempt or not self._prepare_dir():
                    self._disable(exc)
                    return False
            except OSError as exc:
                if exc.errno in _FATAL_WRITE_ERRNOS:
                    self._disable(exc)
                else:
                    log.debug("object cache write of %s failed: %s", path, exc)
                return False
        return False

    def _write_atomic(self, path: str, header: bytes, data: bytes) -> None:
        # Unique temp file in the same directory, then rename: readers see the
        # old file or the complete new one, never a partial write.
        fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX, suffix=".part", dir=self._directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(header)
                fh.write(data)
                if self.fsync:
                    fh.flush()
                    os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            unlink_quiet(tmp)
            raise

    # -- budget

    def _account(self, size: int, fresh: str) -> None:
        """Add a write to the running total; rescan only when it may be over budget."""
        with self._lock:
            if self._total is not None:
                self._total += size  # an overwrite double-counts: errs towards rescanning
            need_scan = self._total is None or self._total > self.budget_bytes
        if need_scan:
            self._enforce_budget(keep=fresh)

    def _enforce_budget(self, keep: Optional[str] = None) -> None:
        if not self._evict_lock.acquire(blocking=False):
            return  # another thread of ours is already scanning
        try:
            entries = self._scan()
            total = sum(e.size for e in entries)
            if total > self.budget_bytes:
                total = self._evict(entries, total, keep)
            with self._lock:
                self._total = total
        finally:
            self._evict_lock.release()

    def _evict(self, entries: List[ObjectCacheEntry], total: int, keep: Optional[str]) -> int:
        target = int(self.budget_bytes * LOW_WATER)
        for entry in sorted(entries, key=lambda e: e.mtime):
            if total <= target:
                break
            if entry.path == keep:
                continue
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass  # another process evicted it first: it is gone all the same
            except OSError as exc:
                log.debug("object cache: cannot evict %s: %s", entry.path, exc)
                continue
            log.debug("object cache: evicted %s (%d bytes)", entry.path, entry.size)
            total -= entry.size
        return total

    def _scan(self) -> List[ObjectCacheEntry]:
        """Entry files in the directory; also removes temp files of dead writers."""
        if self._directory is None:
            return []
        out: List[ObjectCacheEntry] = []
        now = time.time()
        try:
            it = os.scandir(self._directory)
        except OSError as exc:
            log.debug("object cache: cannot scan %s: %s", self._directory, exc)
            return out
        with it:
            for de in it:
                entry = self._scan_one(de, now)
                if entry is not None:
                    out.append(entry)
        return out

    @staticmethod
    def _scan_one(de: "os.DirEntry[str]", now: float) -> Optional[ObjectCacheEntry]:
        name = de.name
        is_entry = name.endswith(ENTRY_SUFFIX) and len(name) == 64 + len(ENTRY_SUFFIX)
        if not is_entry and not name.startswith(TMP_PREFIX):
            return None  # not ours: never touch foreign files
        try:
            st = de.stat(follow_symlinks=False)
        except OSError:
            return None  # vanished (ENOENT race with another process)
        if is_entry:
            return ObjectCacheEntry(de.path, st.st_size, st.st_mtime)
        if now - st.st_mtime > STALE_TMP_S:
            unlink_quiet(de.path)
        return None

    # -- inspection / maintenance

    def entries(self) -> List[ObjectCacheEntry]:
        """Entry files, least recently used first."""
        return sorted(self._scan(), key=lambda e: e.mtime) if self._enabled else []

    def size_bytes(self) -> int:
        """Bytes used by entry files right now (a fresh scan)."""
        return sum(e.size for e in self.entries())

    def clear(self) -> int:
        """Remove every entry and temp file of ours; returns how many entries went."""
        if not self._enabled or self._directory is None:
            return 0
        removed = 0
        for entry in self._scan():
            removed += unlink_quiet(entry.path)
        try:
            names = os.listdir(self._directory)
        except OSError:
            names = []
        for name in names:
            if name.startswith(TMP_PREFIX):
                unlink_quiet(os.path.join(self._directory, name))
        with self._lock:
            self._total = 0
        return removed

    def verify(self) -> List[str]:
        """Paths of entry files that fail validation (nothing is deleted)."""
        bad: List[str] = []
        for entry in self.entries():
            stem = os.path.basename(entry.path)[:64]
            try:
                raw = read_entry(entry.path)[1]  # a FIFO or a link planted here: bad, not a hang
                sound = entry_problem(raw, bytes.fromhex(stem)) is None
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                sound = False
            if not sound:
                bad.append(entry.path)
        return bad


def parse_budget(raw: Optional[str]) -> int:
    """Bytes from e.g. "1073741824", "512M", "2GiB"; default on absent or bad input."""
    if raw is None or not raw.strip():
        return DEFAULT_BUDGET
    try:
        return parse_size(raw, "SVOD_OBJECT_CACHE_BUDGET")
    except ConfigError:  # the cache never fails a run over its own setting: said, and the default used
        log.warning("SVOD_OBJECT_CACHE_BUDGET=%r is not a byte count; using %d", raw, DEFAULT_BUDGET)
        return DEFAULT_BUDGET


def default_cache_dir() -> Optional[str]:
    """The object cache's folder: ``objects`` under :func:`svod_min.config.cache_root`.

    None when no home directory can be found.
    """
    root = cache_root()
    return None if root is None else os.path.join(root, OBJECTS_DIR)


_ENV_VARS = (*CACHE_ENV_VARS, "SVOD_OBJECT_CACHE_BUDGET")
_env_lock = threading.Lock()
_env_instance: Optional[Tuple[Tuple[Optional[str], ...], ObjectCache]] = None


def object_cache() -> ObjectCache:
    """The process-wide object cache; rebuilt whenever its environment changes."""
    global _env_instance
    snapshot = tuple(os.environ.get(name) for name in _ENV_VARS)
    with _env_lock:
        if _env_instance is None or _env_instance[0] != snapshot:
            _env_instance = (snapshot, ObjectCache.from_env())
        return _env_instance[1]


__all__ = [
    "DEFAULT_BUDGET",
    "LOW_WATER",
    "OBJECTS_DIR",
    "STALE_TMP_S",
    "ObjectCache",
    "ObjectCacheEntry",
    "default_cache_dir",
    "object_cache",
    "parse_budget",
]
