"""Kernel specs, the in-memory kernel cache and the on-disk object cache.

Three layers, cheapest first:

* :class:`KernelCache` - an in-process LRU map ``key -> compiled thing``.
  Concurrent misses on one key compile **once** (svod compiles twice and
  lets the first insert win); a failure is handed to every waiter and not
  cached. Bounded, so evicted kernels (and their executable pages) can be
  freed - svod never evicts.
* :class:`ObjectCache` - one file per key holding relocatable ELF bytes,
  shared between processes. Writes are atomic (temp file + ``os.replace``),
  reads verify a sha256 of the payload, and any I/O trouble degrades to
  "no cache" instead of an error.
* :func:`compile_cached` - C / LLVM IR source -> object bytes through both;
  :func:`compile_many_cached` - the same for many sources, the misses
  compiled together in one batch (:func:`svod_min.clang.compile_many_c`).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import stat
import struct
import tempfile
import threading
import time
from builtins import bytes as _bytes  # the dataclass field ``bytes`` shadows it in the class body
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import (
    Any,
    Callable,
    Dict,
    Hashable,
    Iterable,
    List,
    Optional,
    Sequence,
    Tuple,
    TypeVar,
    Union,
)

from .config import CACHE_ENV_VARS, cache_root, disk_cache_enabled
from .error import CacheError, NotSupportedError, PlanError

log = logging.getLogger("svod_min.cache")

T = TypeVar("T")
Size3 = Tuple[int, int, int]
SymSize = Tuple[Union[int, str], ...]


# --- kernel specs ----------------------------------------------------------


def _size3(value: Optional[Iterable[int]], what: str) -> Optional[Size3]:
    """Normalise a launch size to a 3-tuple of positive ints (or None)."""
    if value is None:
        return None
    dims = tuple(value)
    if len(dims) != 3 or not all(isinstance(d, int) and d > 0 for d in dims):
        raise PlanError("%s must be three positive ints, got %r" % (what, value))
    return dims  # type: ignore[return-value]


@dataclass
class CompiledSpec:
    """Compilation result carrying source (JIT backends) or bytes (AOT backends).

    Mirrors svod's ``CompiledSpec`` minus the AST (the cache key is built from
    content instead, see :func:`content_key`).
    """

    name: str  # entry point
    src: Optional[str] = None
    bytes: _bytes = b""
    var_names: List[str] = field(default_factory=list)
    global_size: Optional[Size3] = None
    local_size: Optional[Size3] = None
    buf_count: int = 0

    def __post_init__(self) -> None:
        self.var_names = list(self.var_names)
        self.global_size = _size3(self.global_size, "global_size")
        self.local_size = _size3(self.local_size, "local_size")
        if self.buf_count < 0:
            raise PlanError("buf_count must be >= 0, got %d" % self.buf_count)

    @classmethod
    def from_source(
        cls,
        name: str,
        src: str,
        buf_count: int,
        *,
        var_names: Sequence[str] = (),
        global_size: Optional[Size3] = None,
        local_size: Optional[Size3] = None,
    ) -> "CompiledSpec":
        """Spec for a JIT backend: the runtime compiles ``src`` itself."""
        return cls(name, src, b"", list(var_names), global_size, local_size, buf_count)

    @classmethod
    def from_bytes(
        cls,
        name: str,
        data: _bytes,
        *,
        var_names: Sequence[str] = (),
        global_size: Optional[Size3] = None,
        local_size: Optional[Size3] = None,
        buf_count: int = 0,
    ) -> "CompiledSpec":
        """Spec for an AOT backend: ``data`` is already compiled."""
        return cls(name, None, _bytes(data), list(var_names), global_size, local_size, buf_count)

    @classmethod
    def from_source_with_sizes(
        cls,
        name: str,
        src: str,
        global_size: Optional[Size3],
        local_size: Optional[Size3],
        buf_count: int,
        *,
        var_names: Sequence[str] = (),
    ) -> "CompiledSpec":
        """JIT spec with explicit work sizes (CPU threading: ``(threads, 1, 1)``)."""
        return cls(name, src, b"", list(var_names), global_size, local_size, buf_count)

    @property
    def is_source(self) -> bool:
        """True for a JIT spec (source present), False for precompiled bytes."""
        return self.src is not None


@dataclass(eq=False)  # identity semantics: ``program`` owns native resources
class CachedKernel:
    """A compiled, loaded kernel that plans share (svod's ``CachedKernel``).

    ``global_size`` / ``local_size`` entries are ints or size expressions
    (strings) that the plan evaluates with runtime variables before dispatch.
    """

    program: Any
    device: str
    code: str
    entry_point: str
    var_names: List[str] = field(default_factory=list)
    globals: List[int] = field(default_factory=list)
    outs: List[int] = field(default_factory=list)
    ins: List[int] = field(default_factory=list)
    host_parallel_safe: bool = False
    global_size: SymSize = (1, 1, 1)
    local_size: Optional[SymSize] = None

    def __post_init__(self) -> None:
        self.global_size = tuple(self.global_size)
        if len(self.global_size) != 3:
            raise PlanError("global_size must have 3 entries, got %r" % (self.global_size,))
        if self.local_size is not None:
            self.local_size = tuple(self.local_size)
            if len(self.local_size) != 3:
                raise PlanError("local_size must have 3 entries, got %r" % (self.local_size,))


# --- content keys ----------------------------------------------------------


def content_key(*parts: Union[str, _bytes]) -> str:
    """sha256 hex over length-prefixed parts, so ("ab", "c") != ("a", "bc")."""
    h = hashlib.sha256()
    h.update(struct.pack("<Q", len(parts)))
    for part in parts:
        if isinstance(part, str):
            raw = part.encode("utf-8", "surrogatepass")
        elif isinstance(part, (_bytes, bytearray, memoryview)):
            raw = _bytes(part)
        else:
            raise CacheError("content_key parts must be str or bytes, got %s" % type(part).__name__)
        h.update(struct.pack("<Q", len(raw)))
        h.update(raw)
    return h.hexdigest()


# --- in-memory kernel cache -----------------------------------------------

_MISSING = object()


class _InFlight:
    """One running compile that other threads can wait on."""

    __slots__ = ("done", "value", "error", "retry", "owner")

    def __init__(self, owner: int) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.retry = False  # leader was interrupted (KeyboardInterrupt...): waiters compile themselves
        self.owner = owner


@dataclass(frozen=True)
class KernelCacheStats:
    """Counters since construction (``clear`` keeps them)."""

    hits: int
    misses: int
    compiles: int
    failures: int
    waits: int  # callers that found the key being compiled and waited for it
    evictions: int
    entries: int


class KernelCache:
    """Thread-safe LRU cache whose misses compile once per key.

    ``max_entries=None`` is unbounded; ``0`` keeps nothing and only
    de-duplicates concurrent compiles.
    """

    def __init__(self, max_entries: Optional[int] = 4096) -> None:
        if max_entries is not None and max_entries < 0:
            raise CacheError("max_entries must be >= 0 or None, got %r" % (max_entries,))
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._entries: "OrderedDict[Hashable, Any]" = OrderedDict()
        self._inflight: Dict[Hashable, _InFlight] = {}
        self._counts = dict(hits=0, misses=0, compiles=0, failures=0, waits=0, evictions=0)

    def get_or_compile(self, key: Hashable, compile_fn: Callable[[], T]) -> T:
        """The cached value for ``key``, compiling it with ``compile_fn`` on a miss.

        ``compile_fn`` runs outside the lock. Threads that miss while it runs
        wait and receive the same object, or the same exception.
        """
        while True:
            found, flight, leader = self._claim(key)
            if found is not _MISSING:
                return found  # type: ignore[return-value]
            assert flight is not None
            if leader:
                return self._run(key, flight, compile_fn)
            value = self._wait(flight)
            if value is not _MISSING:
                return value  # type: ignore[return-value]

    def _claim(self, key: Hashable) -> Tuple[Any, Optional[_InFlight], bool]:
        with self._lock:
            value = self._entries.get(key, _MISSING)
            if value is not _MISSING:
                self._entries.move_to_end(key)
                self._counts["hits"] += 1
                return value, None, False
            flight = self._inflight.get(key)
            if flight is None:
                flight = self._inflight[key] = _InFlight(threading.get_ident())
                self._counts["misses"] += 1
                return _MISSING, flight, True
            if flight.owner == threading.get_ident():
                # Waiting on ourselves would deadlock.
                raise CacheError("recursive compile of cache key %r" % (key,))
            self._counts["waits"] += 1
            return _MISSING, flight, False

    def _run(self, key: Hashable, flight: _InFlight, compile_fn: Callable[[], T]) -> T:
        try:
            value = compile_fn()
        except BaseException as exc:
            with self._lock:
                self._inflight.pop(key, None)
                self._counts["failures"] += 1
            if isinstance(exc, Exception):
                flight.error = exc
            else:
                flight.retry = True
            flight.done.set()
            raise
        flight.value = value
        with self._lock:
            self._inflight.pop(key, None)
            self._counts["compiles"] += 1
            evicted = self._store(key, value)
        flight.done.set()
        del evicted  # dropped outside the lock: finalisers may be slow or re-enter
        return value

    def _store(self, key: Hashable, value: Any) -> List[Any]:
        """Insert under the lock; returns the evicted values."""
        if self.max_entries == 0:
            return []
        self._entries[key] = value
        self._entries.move_to_end(key)
        evicted: List[Any] = []
        while self.max_entries is not None and len(self._entries) > self.max_entries:
            evicted.append(self._entries.popitem(last=False)[1])
            self._counts["evictions"] += 1
        return evicted

    @staticmethod
    def _wait(flight: _InFlight) -> Any:
        flight.done.wait()
        if flight.error is not None:
            raise flight.error
        return _MISSING if flight.retry else flight.value

    def get(self, key: Hashable, default: Any = None) -> Any:
        """Peek without compiling (does not touch LRU order or stats)."""
        with self._lock:
            return self._entries.get(key, default)

    def discard(self, key: Hashable) -> bool:
        """Drop one entry; True if it was present."""
        with self._lock:
            value = self._entries.pop(key, _MISSING)
        return value is not _MISSING

    def clear(self) -> None:
        """Drop every entry (compiles in flight still deliver to their waiters)."""
        with self._lock:
            old = self._entries
            self._entries = OrderedDict()
        old.clear()  # outside the lock, for the same reason as in _run

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    @property
    def stats(self) -> KernelCacheStats:
        with self._lock:
            return KernelCacheStats(entries=len(self._entries), **self._counts)


#: Process-wide cache of loaded kernels.
GLOBAL_KERNEL_CACHE = KernelCache(max_entries=4096)


def get_or_compile_kernel(key: Hashable, compile_fn: Callable[[], T]) -> T:
    """:meth:`KernelCache.get_or_compile` on :data:`GLOBAL_KERNEL_CACHE`."""
    return GLOBAL_KERNEL_CACHE.get_or_compile(key, compile_fn)


# --- disk object cache -----------------------------------------------------

MAGIC = b"SVODOBJCACHE"
SCHEMA_VERSION = 1
# magic, schema, sha256(key), sha256(payload), payload length
HEADER = struct.Struct("<12sI32s32sQ")
DEFAULT_BUDGET = 1 << 30
MAX_ENTRY_BYTES = 1 << 30  # an object maps into at most 256 MiB; anything bigger is not ours
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
ENTRY_SUFFIX = ".svodobj"
#: The object cache's folder under the cache root.
OBJECTS_DIR = "objects"
TMP_PREFIX = ".svodtmp-"
#: A temp file this old belongs to a writer that died; a scan removes it.
STALE_TMP_S = 600.0
#: After an over-budget scan, evict down to this fraction so the next put does not rescan.
LOW_WATER = 0.9
# errno values that mean "this directory is not ours to write": stop trying.
_FATAL_WRITE_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR}


class _BadEntry(Exception):
    """An entry file that fails validation (internal; never escapes)."""


@dataclass(frozen=True)
class ObjectCacheEntry:
    """One entry file as seen by a directory scan."""

    path: str
    size: int
    mtime: float


def _key_hash(key: str) -> _bytes:
    if not isinstance(key, str):
        raise CacheError("object cache keys must be str, got %s" % type(key).__name__)
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def encode_entry(key: str, data: _bytes) -> _bytes:
    """Header + payload exactly as stored on disk."""
    digest = hashlib.sha256(data).digest()
    return HEADER.pack(MAGIC, SCHEMA_VERSION, _key_hash(key), digest, len(data)) + data


def _read_entry(path: str) -> Tuple[os.stat_result, Optional[_bytes]]:
    """(stat, bytes) of a cache entry; bytes None when it is not a regular file of a sane size.

    No symlinks followed, no blocking open: a FIFO or a link to /dev/zero planted at an entry's
    path must not hang a lookup or fill memory.
    """
    fd = os.open(path, _READ_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_ENTRY_BYTES:
            return st, None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return st, fh.read(st.st_size)
    finally:
        os.close(fd)


def _decode(raw: _bytes, key_hash: _bytes) -> _bytes:
    """The payload of an entry file, or raise _BadEntry saying what is wrong."""
    if len(raw) < HEADER.size:
        raise _BadEntry("truncated header (%d bytes)" % len(raw))
    magic, schema, stored_key, digest, length = HEADER.unpack_from(raw)
    if magic != MAGIC:
        raise _BadEntry("bad magic %r" % magic)
    if schema != SCHEMA_VERSION:
        raise _BadEntry("schema %d, expected %d" % (schema, SCHEMA_VERSION))
    if stored_key != key_hash:
        raise _BadEntry("key hash mismatch")
    if len(raw) - HEADER.size != length:
        raise _BadEntry("payload is %d bytes, header says %d" % (len(raw) - HEADER.size, length))
    payload = raw[HEADER.size :]
    if hashlib.sha256(payload).digest() != digest:
        raise _BadEntry("payload hash mismatch")
    return payload


def _unlink_quiet(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


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
        budget = _parse_budget(os.environ.get("SVOD_OBJECT_CACHE_BUDGET"))
        return cls(default_cache_dir(), budget_bytes=budget, enabled=enabled)

    @property
    def enabled(self) -> bool:
        return self._enabled

    @property
    def directory(self) -> Optional[str]:
        return self._directory

    def __repr__(self) -> str:
        return "ObjectCache(%r, enabled=%s, budget_bytes=%d)" % (
            self._directory, self._enabled, self.budget_bytes,
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

    def _path_for(self, key_hash: _bytes) -> str:
        assert self._directory is not None
        return os.path.join(self._directory, key_hash.hex() + ENTRY_SUFFIX)

    def path_for(self, key: str) -> Optional[str]:
        """File that holds (or would hold) ``key``; None without a directory."""
        key_hash = _key_hash(key)
        return self._path_for(key_hash) if self._directory else None

    # -- read

    def get(self, key: str) -> Optional[_bytes]:
        """Payload stored under ``key``, or None (miss, disabled, or a bad entry)."""
        key_hash = _key_hash(key)
        if not self._enabled:
            return None
        path = self._path_for(key_hash)
        try:
            st, raw = _read_entry(path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.debug("object cache read of %s failed: %s", path, exc)
            return None
        try:
            if raw is None:
                raise _BadEntry("not a regular file of at most %d bytes" % MAX_ENTRY_BYTES)
            payload = _decode(raw, key_hash)
        except _BadEntry as exc:
            log.debug("object cache: discarding bad entry %s: %s", path, exc)
            self._discard_if_same(path, st)
            return None
        self._touch(path)
        return payload

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

    def put(self, key: str, data: _bytes) -> bool:
        """Store ``data`` under ``key`` atomically; False when not stored."""
        key_hash = _key_hash(key)
        if not isinstance(data, (_bytes, bytearray, memoryview)):
            raise CacheError("object cache payloads must be bytes, got %s" % type(data).__name__)
        if not self._enabled:
            return False
        data = _bytes(data)
        size = HEADER.size + len(data)
        if size > self.budget_bytes:
            log.debug("object cache: %d-byte entry exceeds the budget, not stored", size)
            return False
        digest = hashlib.sha256(data).digest()
        header = HEADER.pack(MAGIC, SCHEMA_VERSION, key_hash, digest, len(data))
        path = self._path_for(key_hash)
        if not self._write_with_retry(path, header, data):
            return False
        self._account(size, path)
        return True

    def _write_with_retry(self, path: str, header: _bytes, data: _bytes) -> bool:
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

    def _write_atomic(self, path: str, header: _bytes, data: _bytes) -> None:
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
            _unlink_quiet(tmp)
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
            _unlink_quiet(de.path)
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
            removed += _unlink_quiet(entry.path)
        try:
            names = os.listdir(self._directory)
        except OSError:
            names = []
        for name in names:
            if name.startswith(TMP_PREFIX):
                _unlink_quiet(os.path.join(self._directory, name))
        with self._lock:
            self._total = 0
        return removed

    def verify(self) -> List[str]:
        """Paths of entry files that fail validation (nothing is deleted)."""
        bad: List[str] = []
        for entry in self.entries():
            stem = os.path.basename(entry.path)[:64]
            try:
                raw = _read_entry(entry.path)[1]  # a FIFO or a link planted here: bad, not a hang
                if raw is None:
                    raise _BadEntry("not a regular file")
                _decode(raw, bytes.fromhex(stem))
            except FileNotFoundError:
                continue
            except (OSError, ValueError, _BadEntry):
                bad.append(entry.path)
        return bad


def _parse_budget(raw: Optional[str]) -> int:
    """Bytes from e.g. "1073741824", "512M", "2GiB"; default on absent or bad input."""
    if raw is None or not raw.strip():
        return DEFAULT_BUDGET
    m = re.match(r"^\s*(\d+)\s*([kmgt]?)(?:i?b)?\s*$", raw, re.IGNORECASE)
    if m is None:
        log.warning("SVOD_OBJECT_CACHE_BUDGET=%r is not a byte count; using %d", raw, DEFAULT_BUDGET)
        return DEFAULT_BUDGET
    scale = 1024 ** " kmgt".index(m.group(2).lower() or " ")
    return int(m.group(1)) * scale


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


# --- compile through both caches ------------------------------------------

#: In-process level of :func:`compile_cached`: dedups concurrent identical
#: compiles and keeps a few recent objects (useful when the disk cache is off).
OBJECT_MEMORY_CACHE = KernelCache(max_entries=64)
_KINDS = ("c", "ir")


def object_key(source: str, *, kind: str = "c", extra_flags: Sequence[str] = ()) -> str:
    """Content key of an object: source, kind, flags, compiler identity, host arch."""
    from . import clang  # lazy: keeps this module importable without the compiler driver

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
        # the driver's built-in flags shape the object too; a change must miss
        "\0".join(getattr(clang, "DEFAULT_FLAGS", ())),
    )


def compile_cached(
    source: str,
    *,
    kind: str = "c",
    extra_flags: Sequence[str] = (),
    cache: Optional[ObjectCache] = None,
) -> _bytes:
    """Object bytes for ``source``: memory, then disk, then the compiler (and store)."""
    from . import clang

    flags = tuple(extra_flags)
    key = object_key(source, kind=kind, extra_flags=flags)
    disk = cache if cache is not None else object_cache()

    def build() -> _bytes:
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


def _cached_objects(keys: List[str], disk: ObjectCache) -> Dict[str, _bytes]:
    """Objects already in the memory or disk cache, by key."""
    found: Dict[str, _bytes] = {}
    for key in keys:
        data = OBJECT_MEMORY_CACHE.get(key)
        if data is None:
            data = disk.get(key)
            if data is not None:
                _remember(key, data)
        if data is not None:
            found[key] = data
    return found


def _remember(key: str, data: _bytes) -> None:
    OBJECT_MEMORY_CACHE.get_or_compile(key, lambda: data)


def compile_many_cached(
    sources: Sequence[str],
    *,
    kind: str = "c",
    extra_flags: Sequence[str] = (),
    cache: Optional[ObjectCache] = None,
    jobs: Optional[int] = None,
    names: Optional[Sequence[str]] = None,
) -> List[_bytes]:
    """Object bytes for each source, like :func:`compile_cached`, compiling the misses together.

    Same keys as :func:`compile_cached`: memory, then disk, then one
    :func:`clang.compile_many_c` run for every distinct miss (``jobs`` and
    ``names`` go to it), whose objects are stored in both caches. LLVM IR
    (``kind="ir"``) compiles source by source.
    """
    from . import clang

    flags = tuple(extra_flags)
    sources = list(sources)
    if names is not None and len(names) != len(sources):
        raise ValueError("names has %d entries for %d sources" % (len(names), len(sources)))
    if kind == "ir":
        return [compile_cached(s, kind="ir", extra_flags=flags, cache=cache) for s in sources]
    keys = [object_key(s, kind=kind, extra_flags=flags) for s in sources]
    disk = cache if cache is not None else object_cache()
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
    "GLOBAL_KERNEL_CACHE",
    "KernelCache",
    "KernelCacheStats",
    "OBJECT_MEMORY_CACHE",
    "ObjectCache",
    "ObjectCacheEntry",
    "compile_cached",
    "compile_many_cached",
    "content_key",
    "default_cache_dir",
    "encode_entry",
    "get_or_compile_kernel",
    "object_cache",
    "object_key",
]
