"""The on-disk object cache's keys and file format.

An entry file is a fixed header (magic, schema, sha256 of the key, sha256 of
the payload, payload length) followed by the payload (relocatable ELF bytes).
Reading never follows a symlink or blocks on a FIFO, and a file that fails
any check is reported, never trusted.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from typing import Optional, Tuple, Union

from ..error import CacheError

MAGIC = b"SVODOBJCACHE"
SCHEMA_VERSION = 1
# magic, schema, sha256(key), sha256(payload), payload length
HEADER = struct.Struct("<12sI32s32sQ")
MAX_ENTRY_BYTES = 1 << 30  # an object maps into at most 256 MiB; anything bigger is not ours
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
ENTRY_SUFFIX = ".svodobj"
TMP_PREFIX = ".svodtmp-"


def content_key(*parts: Union[str, bytes]) -> str:
    """sha256 hex over length-prefixed parts, so ("ab", "c") != ("a", "bc")."""
    h = hashlib.sha256()
    h.update(struct.pack("<Q", len(parts)))
    for part in parts:
        if isinstance(part, str):
            raw = part.encode("utf-8", "surrogatepass")
        elif isinstance(part, (bytes, bytearray, memoryview)):
            raw = bytes(part)
        else:
            raise CacheError("content_key parts must be str or bytes, got %s" % type(part).__name__)
        h.update(struct.pack("<Q", len(raw)))
        h.update(raw)
    return h.hexdigest()


def hash_key(key: str) -> bytes:
    """sha256 of an object cache key (the entry's file name and its header field)."""
    if not isinstance(key, str):
        raise CacheError("object cache keys must be str, got %s" % type(key).__name__)
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def entry_header(key_hash: bytes, data: bytes) -> bytes:
    """The header stored before ``data`` for the key whose sha256 is ``key_hash``."""
    return HEADER.pack(MAGIC, SCHEMA_VERSION, key_hash, hashlib.sha256(data).digest(), len(data))


def encode_entry(key: str, data: bytes) -> bytes:
    """Header + payload exactly as stored on disk."""
    return entry_header(hash_key(key), data) + data


def read_entry(path: str) -> Tuple[os.stat_result, Optional[bytes]]:
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


def entry_problem(raw: Optional[bytes], key_hash: bytes) -> Optional[str]:
    """What is wrong with the entry file ``raw`` read for ``key_hash``; None when it is sound.

    ``raw`` None stands for a file :func:`read_entry` refused (not a regular file, or too big).
    The payload of a sound entry is ``raw[HEADER.size:]``.
    """
    if raw is None:
        return "not a regular file of at most %d bytes" % MAX_ENTRY_BYTES
    if len(raw) < HEADER.size:
        return "truncated header (%d bytes)" % len(raw)
    magic, schema, stored_key, digest, length = HEADER.unpack_from(raw)
    if magic != MAGIC:
        return "bad magic %r" % magic
    if schema != SCHEMA_VERSION:
        return "schema %d, expected %d" % (schema, SCHEMA_VERSION)
    if stored_key != key_hash:
        return "key hash mismatch"
    if len(raw) - HEADER.size != length:
        return "payload is %d bytes, header says %d" % (len(raw) - HEADER.size, length)
    if hashlib.sha256(raw[HEADER.size :]).digest() != digest:
        return "payload hash mismatch"
    return None


def unlink_quiet(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


__all__ = [
    "ENTRY_SUFFIX",
    "HEADER",
    "MAGIC",
    "MAX_ENTRY_BYTES",
    "SCHEMA_VERSION",
    "TMP_PREFIX",
    "content_key",
    "encode_entry",
    "entry_header",
    "entry_problem",
    "hash_key",
    "read_entry",
    "unlink_quiet",
]
