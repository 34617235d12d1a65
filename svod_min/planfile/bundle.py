"""Model bundles (``.svod``): one zip holding a plan, its data, precompiled objects and a manifest.

    manifest.json   {"svod_bundle": 1, "svod_min": version, "entries": {name: {size, sha256}}, "objects": ...}
    plan.json       the plan; kernels name their objects per target ("objects": [{target, file, sha256}])
    objects/K/T.o   relocatable objects, one per kernel and target
    data/, expect/, kernels/ ...   the files the plan names, at the paths it names them by

:func:`open_bundle` reads the bundle in place (nothing is extracted to disk), from a path or from its bytes
in memory (a bundle shipped to a worker), and refuses a bad one
before anything runs, naming the entry: a corrupt or truncated zip, an unknown format version, an
entry path that escapes the bundle, an entry over the size limits (declared or actual: zip bombs),
a hash mismatch, an entry the manifest does not list or lists but the zip lacks, an object whose ELF
machine is not its target's, a file the plan names that the bundle does not hold.
:func:`write_bundle` writes one byte-identically for the same inputs (fixed timestamps and order).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import posixpath
import struct
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ..compiler.targets import object_target_mismatch
from ..error import BundleError, PlanError, PlanFileError
from ..npy import parse_npy_header
from .schema import parse_plan_bytes
from .status import pinned_inputs

BUNDLE_FORMAT = 1
MANIFEST = "manifest.json"
PLAN = "plan.json"
#: The manifest's signature (planfile/signing.py); the one entry the manifest does not list, as it signs it.
SIGNATURE = "manifest.sig"
MAX_SIGNATURE_BYTES = 4096
ZIP_MAGIC = b"PK\x03\x04"
#: .npy entries above this size are stored, not deflated: weights barely deflate, and inflating them costs a cold start.
STORE_ABOVE = 1 << 16
#: A smaller .npy entry is stored too when deflate would save less than this share of it (random weights).
MIN_DEFLATE_SAVING = 1 / 8
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the zip epoch: the same inputs give the same bytes
#: A zip local file header: signature, versions, flags, method, time, date, CRC-32, sizes, name and extra lengths.
LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")
_EXTRA_SLACK = 64  # bytes read past a local header's name in the same read: zip extra fields are rarely longer
_NPY_PREFIX = 4096  # bytes of a deferred array read first: its .npy header lies in them


@dataclass(frozen=True)
class Limits:
    """What a bundle may hold: entries, bytes per entry and in all (declared and as read)."""

    max_entries: int = 100_000
    max_entry_bytes: int = 4 << 30
    max_total_bytes: int = 16 << 30
    max_manifest_bytes: int = 64 << 20
    #: Why ``max_total_bytes`` is what it is, when it is not the default (the memory budget), for the refusal.
    total_source: str = ""


DEFAULT_LIMITS = Limits()

#: What a bundle is read from: a path, or the bundle's bytes in memory.
BundleSource = Union[str, bytes, bytearray, memoryview]


def is_bundle_bytes(source: Any) -> bool:
    """Whether ``source`` is a bundle held in memory: bytes (or a bytearray, memoryview) starting as a zip does."""
    return isinstance(source, (bytes, bytearray, memoryview)) and bytes(source[:4]) == ZIP_MAGIC


def bundle_digest(source: BundleSource) -> str:
    """The sha256 of a bundle's bytes (read from ``source``, a path or the bytes): one name for one content,
    wherever it lies (workers key their loaded models by it)."""
    if not isinstance(source, str):
        return sha256(bytes(source))
    digest = hashlib.sha256()
    try:
        with open(source, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise BundleError("%s: cannot read the bundle (%s)" % (source, exc.strerror or exc)) from None
    return digest.hexdigest()


def is_bundle(path: str) -> bool:
    """Whether ``path`` is meant as a bundle: a ``.svod`` name, or a file that starts as a zip does."""
    if path.endswith(".svod"):
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == ZIP_MAGIC
    except OSError:
        return False


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_entry_name(name: str) -> str:
    """``name`` when it is a plain relative path inside the bundle; BundleError otherwise."""
    parts = name.split("/")
    bad = (
        not name
        or name.startswith("/")
        or "\\" in name
        or "\0" in name
        or ":" in parts[0]
        or any(p in ("", ".", "..") for p in parts)
    )
    if bad:
        raise BundleError("entry %r: the path escapes the bundle or is not a plain relative path" % name)
    return name


def plan_file_entry(rel: str, json_path: str) -> str:
    """The bundle entry a plan's relative file name refers to (the plan lies at the bundle's root)."""
    try:
        return _entry_name(rel) if type(rel) is str else _entry_name.__wrapped__(rel)
    except BundleError:
        raise BundleError("%s names %r: the path escapes the bundle" % (json_path, rel)) from None


@functools.lru_cache(maxsize=4096)
def _entry_name(rel: str) -> str:
    # cached: a load resolves each weight's file name three or four times (listing, budget, read); a refusal
    # raises, and lru_cache keeps no exception
    name = posixpath.normpath(rel.replace("\\", "/")) if rel else rel
    return check_entry_name(name)


def file_references(doc: Mapping[str, Any]) -> Iterator[Tuple[str, str]]:
    """``(json path, relative file name)`` of every file a plan document names."""
    for name, b in _items(doc.get("buffers")):
        init = b.get("init") if isinstance(b, dict) else None
        if isinstance(init, dict) and isinstance(init.get("npy"), str):
            yield "buffers.%s.init.npy" % name, init["npy"]
    for name, e in _items(doc.get("expect")):
        if isinstance(e, dict) and isinstance(e.get("npy"), str):
            yield "expect.%s.npy" % name, e["npy"]
    for name, k in _items(doc.get("kernels")):
        if not isinstance(k, dict):
            continue
        for form in ("file", "ir_file"):
            if isinstance(k.get(form), str):
                yield "kernels.%s.%s" % (name, form), k[form]
        cuda = k.get("cuda")
        for form in ("file", "ptx_file"):
            if isinstance(cuda, dict) and isinstance(cuda.get(form), str):
                yield "kernels.%s.cuda.%s" % (name, form), cuda[form]
        for key in ("objects", "library_objects"):
            records = k.get(key)
            for i, o in enumerate(records if isinstance(records, list) else []):
                if isinstance(o, dict) and isinstance(o.get("file"), str):
                    yield "kernels.%s.%s[%d].file" % (name, key, i), o["file"]


def _items(section: Any) -> List[Tuple[str, Any]]:
    return list(section.items()) if isinstance(section, dict) else []


# --- writing -----------------------------------------------------------------------------


def write_bundle(
    out_path: str,
    files: Mapping[str, bytes],
    manifest: Dict[str, Any],
    *,
    sign: Optional[Callable[[bytes], bytes]] = None,
) -> Dict[str, Any]:
    """Write ``files`` (entry name -> bytes, ``plan.json`` among them) and the manifest as one zip; ``sign``
    (the manifest's bytes -> the signature entry, :mod:`svod_min.planfile.signing`) adds its signature.

    ``manifest`` gets ``svod_bundle`` and ``entries`` (size and sha256 of each file); entries are written
    in name order with fixed timestamps and modes, so the same inputs give the same bytes. The file is
    replaced atomically. Returns the manifest written.
    """
    if PLAN not in files:
        raise PlanError("a bundle needs %s" % PLAN)
    if SIGNATURE in files:
        raise PlanError("%r is the bundle's signature entry, not a plan file's name" % SIGNATURE)
    names = sorted(check_entry_name(n) for n in files if n != MANIFEST)
    full = dict(manifest)
    full["svod_bundle"] = BUNDLE_FORMAT
    full["entries"] = {n: {"size": len(files[n]), "sha256": sha256(files[n])} for n in names}
    payload = {MANIFEST: json.dumps(full, indent=1, sort_keys=True).encode("utf-8") + b"\n"}
    head = [MANIFEST]
    if sign is not None:
        payload[SIGNATURE] = sign(payload[MANIFEST])
        head.append(SIGNATURE)
    payload.update((n, files[n]) for n in names)
    write_fixed_zip(out_path, [(n, payload[n]) for n in head + names])
    return full


def write_fixed_zip(
    out_path: str,
    members: Sequence[Tuple[str, bytes]],
    *,
    prefix: bytes = b"",
    mode: int = 0o644,
    store: Callable[[str], bool] = lambda name: False,
) -> int:
    """Write ``members`` in the given order as a deflated zip with fixed timestamps (the same bytes for the
    same members), after ``prefix`` (a zipapp's ``#!`` line); atomically. Returns the size written.
    Stored rather than deflated: the members ``store`` names, and ``.npy`` arrays over :data:`STORE_ABOVE`
    bytes or that deflate would shrink by less than :data:`MIN_DEFLATE_SAVING`."""
    import tempfile  # here: a load only reads bundles, and tempfile brings random with it

    directory = os.path.dirname(os.path.abspath(out_path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".svod-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(prefix)
            with zipfile.ZipFile(fh, "w") as zf:
                for name, data in members:
                    info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
                    info.compress_type = (
                        zipfile.ZIP_STORED if store(name) or _weights(name, data) else zipfile.ZIP_DEFLATED
                    )
                    info.external_attr = 0o644 << 16
                    info.create_system = 3  # Unix, whatever the writing host
                    zf.writestr(info, data, compresslevel=6)
            size = fh.tell()
        os.chmod(tmp, mode)
        os.replace(tmp, out_path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return size


def _weights(name: str, data: bytes) -> bool:
    """Whether ``data`` is an array to store: large arrays (model weights) barely deflate and would cost seconds
    per 100 MB to inflate; a small one is stored when it barely deflates (each inflate costs a load too)."""
    if not name.endswith(".npy"):
        return False
    return len(data) > STORE_ABOVE or len(zlib.compress(data, 6)) > len(data) * (1 - MIN_DEFLATE_SAVING)


# --- reading ------------------------------------------------------------------------------


@dataclass
class Bundle:
    """A bundle read and checked whole: its manifest, plan document and entries (in memory).

    Opened with ``defer_arrays``, its large stored ``.npy`` entries are checked in the directory and
    manifest but read later, each straight into the buffer it fills and checked against its sha256
    there (:meth:`BundleFiles.read_npy_into`); :meth:`verify_rest` reads and checks any left unread,
    and :meth:`close` lets the file go. ``deferred`` maps such an entry to its zip record and sha256."""

    path: str
    manifest: Dict[str, Any]
    plan: Dict[str, Any]
    entries: Dict[str, bytes] = field(repr=False)
    deferred: Dict[str, Tuple[zipfile.ZipInfo, str]] = field(default_factory=dict, repr=False)
    source: Any = field(default=None, repr=False)  # the open bundle file while entries are deferred
    signature: Optional[bytes] = field(default=None, repr=False)  # the SIGNATURE entry's bytes, if signed

    def files(self) -> "BundleFiles":
        return BundleFiles(self)

    def read_deferred(self, name: str) -> bytes:
        """A deferred entry's bytes, read and checked against its sha256 now (then held like the others)."""
        info, digest = self.deferred.pop(name)
        data = _read_listed_entry(self.source, info, self.path, info.file_size)
        if sha256(data) != digest:
            raise BundleError("%s: entry %r does not match its sha256 in the manifest" % (self.path, name))
        self.entries[name] = data
        return data

    def read_rest(self) -> None:
        """Read and check every deferred entry now and hold it (a trust policy: all verified before any code)."""
        for name in list(self.deferred):
            self.read_deferred(name)

    def verify_rest(self) -> None:
        """Read and check every deferred entry nothing read (a bundle is checked whole, used or not)."""
        for name in list(self.deferred):
            self.read_deferred(name)
            del self.entries[name]

    def close(self) -> None:
        if self.source is not None:
            self.source.close()
            self.source = None

    def kernel_targets(self) -> Dict[str, List[str]]:
        """Kernel name -> the targets it has objects for (kernels with only source or a library form: [])."""
        kernels = self.plan.get("kernels") or {}
        return {name: [o.get("target") for o in (k.get("objects") or [])] for name, k in kernels.items()}

    def targets(self) -> List[str]:
        """Every target some kernel has an object for, in the manifest's order."""
        found = {t for ts in self.kernel_targets().values() for t in ts}
        listed = [t for t in self.manifest.get("targets", []) if t in found]
        return listed + sorted(found - set(listed))


class BundleFiles:
    """The files a bundle's plan names, read from its entries (the plan data's file reader)."""

    def __init__(self, bundle: Bundle) -> None:
        self.bundle = bundle

    def read_bytes(self, rel: str, path: str) -> bytes:
        name = plan_file_entry(rel, path)
        data = self.bundle.entries.get(name)
        if data is None and name in self.bundle.deferred:
            return self.bundle.read_deferred(name)
        if data is None:
            raise BundleError("%s: %s names %r, which the bundle does not hold" % (self.bundle.path, path, rel))
        return data

    def read_npy_into(self, rel: str, path: str, destination: Callable[[Any, Tuple[int, ...]], Any]) -> bool:
        """Fill a deferred ``.npy`` entry's payload straight into ``destination(dtype, shape)`` (a writable
        buffer of exactly the payload's size, which the caller checks the header against and allocates),
        then check the entry's sha256; False when ``rel`` is not deferred (read it with :meth:`read_bytes`).
        A model's weights are then read once, into their buffers, with no copy in between."""
        bundle = self.bundle
        name = plan_file_entry(rel, path)
        if name not in bundle.deferred:
            return False
        info, digest = bundle.deferred[name]
        raw, offset = bundle.source, _data_offset(bundle.source, info, _unreadable(bundle.path, info))
        prefix = _read_at(raw, offset, min(_NPY_PREFIX, info.file_size), bundle.path, info)
        try:
            dt, shape, count, start = parse_npy_header(prefix, rel)
        except PlanError as exc:
            if len(prefix) < info.file_size:  # a header longer than the prefix read: read it all the usual way
                return False
            raise PlanFileError(path, str(exc)) from None
        if count * dt.itemsize != info.file_size - start:
            raise PlanFileError(
                path, "%s: expected %d bytes of data, found %d" % (rel, count * dt.itemsize, info.file_size - start)
            )
        target = memoryview(destination(dt, shape)).cast("B")
        head = len(prefix) - start
        target[:head] = prefix[start:]
        _read_at(raw, offset + len(prefix), len(target) - head, bundle.path, info, into=target[head:])
        hasher = hashlib.sha256(prefix)
        hasher.update(target[head:])
        if hasher.hexdigest() != digest:
            raise BundleError("%s: entry %r does not match its sha256 in the manifest" % (bundle.path, name))
        del bundle.deferred[name]
        return True


def describe_bundle(bundle: Bundle) -> List[str]:
    """What ``info MODEL.svod`` prints: the bundle, its targets, this host's choice, each kernel's."""
    from ..compiler.targets import choose_target, host_target
    from ..jit_loader.arch import host_arch

    m = bundle.manifest
    compiler = m.get("compiler") or {}
    lines = [
        "bundle: %s (format %d, built by svod_min %s%s)"
        % (
            bundle.path,
            BUNDLE_FORMAT,
            m.get("svod_min", "?"),
            " with %s %s" % (compiler.get("family"), compiler.get("version")) if compiler else "",
        )
    ]
    if bundle.plan.get("description"):
        lines.append("description: %s" % bundle.plan["description"])
    targets = bundle.targets()
    lines.append("targets: %s" % (", ".join(targets) or "none (no precompiled kernels)"))
    chosen = choose_target(targets) if targets else None
    lines.append(
        "this host: %s, target %s; would use %s"
        % (host_arch(), host_target() or "unknown", chosen or ("nothing here" if targets else "-"))
    )
    lines.extend(_io_lines(bundle.plan))
    tuned = m.get("tuned")
    if isinstance(tuned, dict):
        lines.append(
            "tuned: for %s (%s) at %s thread(s): %s op shape(s), %s with a non-default tile; other hosts use "
            "the defaults"
            % (
                tuned.get("variant"),
                tuned.get("cpu"),
                tuned.get("threads"),
                tuned.get("shapes"),
                tuned.get("non_default"),
            )
        )
    for name, kts in bundle.kernel_targets().items():
        k = bundle.plan["kernels"][name]
        form = (
            "library %s" % k["library"] if "library" in k else "objects %s" % ", ".join(kts) if kts else "source only"
        )
        pick = choose_target(kts) if kts else None
        source = any(f in k for f in ("source", "file", "llvm_ir", "ir_file"))
        use = pick or ("compile the source" if source and "library" not in k else "-" if not kts else "NONE")
        lines.append("kernel %s: %s; uses %s%s" % (name, form, use, _tuned_text(k)))
    return lines


def _io_lines(plan: Mapping[str, Any]) -> List[str]:
    """``input NAME: DTYPE [SHAPE]`` and ``output ...`` of the plan's buffers (what ``run --input`` takes and
    ``--save`` writes; ranged dims; bfloat16 as its uint16 bits, numpy having no bfloat16; a pinned input's pin)."""
    buffers = plan.get("buffers")
    pins = pinned_inputs(plan)  # build --pin: the value the input must be fed
    lines = []
    for role in ("input", "output"):
        for name, b in buffers.items() if isinstance(buffers, dict) else ():
            if isinstance(b, dict) and b.get(role) is True:
                bits = " (.npy: its uint16 bits)" if b.get("dtype") == "bfloat16" else ""
                pin = (
                    "; pinned at build (%s): it must be fed that value" % pins[name]
                    if role == "input" and name in pins
                    else ""
                )
                dims = b.get("dims")  # ranged dims: the size follows the variables, shape is the largest
                ranged = " dims [%s]" % ", ".join(str(d) for d in dims) if isinstance(dims, list) else ""
                lines.append("%s %s: %s %s%s%s%s" % (role, name, b.get("dtype"), b.get("shape"), ranged, bits, pin))
    return lines


def _tuned_text(kernel: Mapping[str, Any]) -> str:
    """``; tuned x86_64-v4 mr=4 nr=8; objects for x86_64-v4`` for a library kernel ('' when it records neither)."""
    tuned = kernel.get("tuned")
    parts = []
    if isinstance(tuned, dict) and tuned:
        tiles = (
            " ".join("%s=%s" % kv for kv in sorted(c.items())) if isinstance(c, dict) else "?" for c in tuned.values()
        )
        parts.append("tuned " + ", ".join("%s %s" % (v, t) for v, t in zip(tuned, tiles)))
    records = kernel.get("library_objects")
    variants = sorted({o.get("variant") for o in records if isinstance(o, dict)}) if isinstance(records, list) else []
    if variants:
        parts.append("objects for " + ", ".join(str(v) for v in variants))
    return "".join("; " + p for p in parts)


def open_bundle(
    source: BundleSource, limits: Limits = DEFAULT_LIMITS, *, defer_arrays: bool = False, trust: Any = None
) -> Bundle:
    """Read and check the bundle at ``source`` (a path, or the bundle's bytes) whole; BundleError (naming the
    entry) for anything wrong. A bundle read from bytes is named ``<bundle in memory, N bytes>`` in messages.
    ``defer_arrays`` (a path only): large stored arrays are read later, into their buffers (:class:`Bundle`);
    the caller closes the bundle. ``trust`` (a :class:`~svod_min.planfile.signing.TrustPolicy`) checks the
    manifest's signature before the manifest is parsed; the manifest then pins every other entry."""
    path, opened = _zip_source(source)
    try:
        raw = open(opened, "rb") if isinstance(opened, str) else opened
    except FileNotFoundError:
        raise BundleError("%s: no such bundle" % path) from None
    except OSError as exc:
        raise BundleError("%s: not a readable bundle (truncated or corrupt zip: %s)" % (path, exc)) from None
    defer = defer_arrays and isinstance(source, str)
    try:
        try:
            zf = zipfile.ZipFile(raw)
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
            raise BundleError("%s: not a readable bundle (truncated or corrupt zip: %s)" % (path, exc)) from None
        with zf:
            infos = _checked_infos(zf, path, limits)
            raw_manifest = _manifest_bytes(zf, infos, path, limits)
            signature = _read_entry(zf, infos[SIGNATURE], path, MAX_SIGNATURE_BYTES) if SIGNATURE in infos else None
            if trust is not None:  # the bytes checked are the bytes parsed: the manifest is read once
                trust.check(path, raw_manifest, signature)
            manifest = _manifest(raw_manifest, path)
            deferred: Dict[str, Tuple[zipfile.ZipInfo, str]] = {}
            entries = _entries(raw, infos, manifest, path, limits, deferred if defer else None)
        plan = _plan(entries, path)
        _check_plan_files(plan, entries, path, deferred)
    except BaseException:
        raw.close()
        raise
    if not deferred:
        raw.close()
    return Bundle(path, manifest, plan, entries, deferred, raw if deferred else None, signature)


def _zip_source(source: BundleSource) -> Tuple[str, Any]:
    """The name messages give the bundle, and what :class:`zipfile.ZipFile` opens (the path, or a buffer)."""
    if isinstance(source, str):
        return source, source
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = bytes(source)
        return "<bundle in memory, %d bytes>" % len(data), io.BytesIO(data)
    raise BundleError("a bundle is a path or its bytes, not %s" % type(source).__name__)


def _checked_infos(zf: zipfile.ZipFile, path: str, limits: Limits) -> Dict[str, zipfile.ZipInfo]:
    """The zip's entries by name, every name plain and unique, every declared size within the limits."""
    infos: Dict[str, zipfile.ZipInfo] = {}
    listed = zf.infolist()
    if len(listed) > limits.max_entries:
        raise BundleError("%s: %d entries; the limit is %d" % (path, len(listed), limits.max_entries))
    total = 0
    for info in listed:
        name = _named(path, info.filename)
        if name in infos:
            raise BundleError("%s: entry %r appears twice" % (path, name))
        if info.flag_bits & 0x1:
            raise BundleError("%s: entry %r is encrypted" % (path, name))
        if info.file_size > limits.max_entry_bytes:
            raise BundleError(
                "%s: entry %r declares %d bytes; the limit is %d" % (path, name, info.file_size, limits.max_entry_bytes)
            )
        total += info.file_size
        infos[name] = info
    if total > limits.max_total_bytes:
        raise BundleError(
            "%s: entries declare %d bytes in all; the limit is %d%s"
            % (path, total, limits.max_total_bytes, " (%s)" % limits.total_source if limits.total_source else "")
        )
    return infos


def _named(path: str, name: str) -> str:
    try:
        return check_entry_name(name)
    except BundleError as exc:
        raise BundleError("%s: %s" % (path, exc)) from None


def _read_entry(zf: zipfile.ZipFile, info: zipfile.ZipInfo, path: str, limit: int) -> bytes:
    """The entry's bytes, read at most ``limit`` + 1 so that an entry larger than it says is caught."""
    try:
        with zf.open(info) as fh:
            data = fh.read(limit + 1)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        raise BundleError("%s: entry %r cannot be read (%s)" % (path, info.filename, exc)) from None
    if len(data) > limit:
        raise BundleError("%s: entry %r holds more than %d bytes" % (path, info.filename, limit))
    if len(data) != info.file_size:
        raise BundleError(
            "%s: entry %r holds %d bytes, not the %d it declares" % (path, info.filename, len(data), info.file_size)
        )
    return data


def _deferrable(info: zipfile.ZipInfo) -> bool:
    """A stored array large enough to be read straight into its buffer (what :func:`write_bundle` stores)."""
    return info.compress_type == zipfile.ZIP_STORED and info.filename.endswith(".npy") and info.file_size > STORE_ABOVE


def _data_offset(raw: Any, info: zipfile.ZipInfo, bad: Callable[[str], BundleError]) -> int:
    """Where the entry's data starts in ``raw``: after its local header, name and extra field, read in one
    read (an extra field of the usual size included); the name must be the directory's."""
    try:
        raw.seek(info.header_offset)
        head = raw.read(LOCAL_HEADER.size + len(info.orig_filename.encode("utf-8")) + _EXTRA_SLACK)
    except (OSError, ValueError) as exc:
        raise bad(str(exc)) from None
    if len(head) < LOCAL_HEADER.size or head[:4] != ZIP_MAGIC:
        raise bad("no local file header where the directory says")
    fields = LOCAL_HEADER.unpack_from(
        head
    )  # signature, version, system, flags, method, time, date, crc, sizes, lengths
    name = head[LOCAL_HEADER.size : LOCAL_HEADER.size + fields[10]]
    if name.decode("utf-8" if fields[3] & 0x800 else "cp437", "replace") != info.orig_filename:
        raise bad("the local header names %r" % name)
    return info.header_offset + LOCAL_HEADER.size + fields[10] + fields[11]


def _unreadable(path: str, info: zipfile.ZipInfo) -> Callable[[str], BundleError]:
    return lambda why: BundleError("%s: entry %r cannot be read (%s)" % (path, info.filename, why))


def _read_at(
    raw: Any, offset: int, size: int, path: str, info: zipfile.ZipInfo, into: Optional[memoryview] = None
) -> bytes:
    """``size`` bytes of the stored entry at ``offset`` of ``raw``: returned, or read into ``into``."""
    bad = _unreadable(path, info)
    try:
        raw.seek(offset)
        got = (raw.readinto(into) if size else 0) if into is not None else raw.read(size)
    except (OSError, ValueError) as exc:
        raise bad(str(exc)) from None
    if (got if into is not None else len(got)) != size:
        raise bad("truncated: the file ends inside it")
    return b"" if into is not None else got


def _read_listed_entry(raw: Any, info: zipfile.ZipInfo, path: str, limit: int) -> bytes:
    """An entry the manifest gives a sha256, its bytes read in one piece, without the zip's CRC-32: the
    sha256 that the caller checks next finds every change the CRC would (for 100 MB of weights the CRC
    costs ~60 ms of a load, and reading through zipfile's stream another ~40 ms)."""
    bad = _unreadable(path, info)
    try:
        raw.seek(_data_offset(raw, info, bad))
        packed = raw.read(info.compress_size)
    except (OSError, ValueError, struct.error) as exc:
        raise bad(str(exc)) from None
    if len(packed) != info.compress_size:
        raise bad("truncated: %d of %d bytes" % (len(packed), info.compress_size))
    data = _unpacked(packed, info, limit, bad)
    if len(data) > limit:
        raise BundleError("%s: entry %r holds more than %d bytes" % (path, info.filename, limit))
    if len(data) != info.file_size:
        raise BundleError(
            "%s: entry %r holds %d bytes, not the %d it declares" % (path, info.filename, len(data), info.file_size)
        )
    return data


def _unpacked(packed: bytes, info: zipfile.ZipInfo, limit: int, bad: Any) -> bytes:
    """An entry's bytes from its stored or deflated form, at most ``limit`` + 1 of them (zip bombs stop there)."""
    if info.compress_type == zipfile.ZIP_STORED:
        return packed
    if info.compress_type != zipfile.ZIP_DEFLATED:
        raise bad("compression method %d: a bundle's entries are stored or deflated" % info.compress_type)
    try:
        return zlib.decompressobj(-zlib.MAX_WBITS).decompress(packed, limit + 1)
    except zlib.error as exc:
        raise bad(str(exc)) from None


def _manifest_bytes(zf: zipfile.ZipFile, infos: Dict[str, zipfile.ZipInfo], path: str, limits: Limits) -> bytes:
    info = infos.get(MANIFEST)
    if info is None:
        raise BundleError("%s: entry %r is missing (not a svod_min bundle)" % (path, MANIFEST))
    return _read_entry(zf, info, path, limits.max_manifest_bytes)


def _manifest(raw: bytes, path: str) -> Dict[str, Any]:
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BundleError("%s: entry %r is not valid JSON (%s)" % (path, MANIFEST, exc)) from None
    if not isinstance(manifest, dict):
        raise BundleError("%s: entry %r is not a JSON object" % (path, MANIFEST))
    version = manifest.get("svod_bundle")
    if type(version) is not int or version != BUNDLE_FORMAT:
        raise BundleError(
            "%s: entry %r: unknown bundle format version %r (this svod_min reads %d)"
            % (path, MANIFEST, version, BUNDLE_FORMAT)
        )
    if not isinstance(manifest.get("entries"), dict):
        raise BundleError('%s: entry %r has no "entries" object' % (path, MANIFEST))
    return manifest


def _entries(
    raw: Any,
    infos: Dict[str, zipfile.ZipInfo],
    manifest: Dict[str, Any],
    path: str,
    limits: Limits,
    deferred: Optional[Dict[str, Tuple[zipfile.ZipInfo, str]]] = None,
) -> Dict[str, bytes]:
    """Every entry the manifest lists, read from ``raw`` (the bundle as a binary file) and checked against
    its listed size and sha256; into ``deferred`` instead (when given), large stored arrays, read later."""
    listed: Dict[str, Any] = manifest["entries"]
    for name in infos:
        if name not in (MANIFEST, SIGNATURE) and name not in listed:
            raise BundleError("%s: entry %r is not listed in the manifest" % (path, name))
    out: Dict[str, bytes] = {}
    for name, meta in listed.items():
        _named(path, name)
        if name not in infos:
            raise BundleError("%s: entry %r is listed in the manifest but missing from the bundle" % (path, name))
        size, digest = (meta.get("size"), meta.get("sha256")) if isinstance(meta, dict) else (None, None)
        if type(size) is not int or not isinstance(digest, str):
            raise BundleError("%s: the manifest's record of entry %r lacks its size or sha256" % (path, name))
        if size != infos[name].file_size:
            raise BundleError(
                "%s: entry %r declares %d bytes; the manifest says %d" % (path, name, infos[name].file_size, size)
            )
        if deferred is not None and _deferrable(infos[name]) and size <= limits.max_entry_bytes:
            deferred[name] = (infos[name], digest)
            continue
        data = _read_listed_entry(raw, infos[name], path, min(size, limits.max_entry_bytes))
        if sha256(data) != digest:
            raise BundleError("%s: entry %r does not match its sha256 in the manifest" % (path, name))
        out[name] = data
    return out


def _plan(entries: Dict[str, bytes], path: str) -> Dict[str, Any]:
    raw = entries.get(PLAN)
    if raw is None:
        raise BundleError("%s: entry %r is missing" % (path, PLAN))
    try:
        return parse_plan_bytes(raw, "%s entry %s" % (path, PLAN))
    except PlanError as exc:
        raise BundleError(str(exc)) from None


def _check_plan_files(
    plan: Dict[str, Any], entries: Dict[str, bytes], path: str, deferred: Mapping[str, Any] = {}
) -> None:
    """Every file the plan names is an entry (read, or ``deferred``); every object is for its target's machine
    and matches its hash."""
    for json_path, rel in file_references(plan):
        name = plan_file_entry(rel, "%s: %s %s" % (path, PLAN, json_path))
        if name not in entries and name not in deferred:
            raise BundleError("%s: %s %s names %r, which the bundle does not hold" % (path, PLAN, json_path, rel))
    for kname, k in _items(plan.get("kernels")):
        objects = k.get("objects") if isinstance(k, dict) else None
        for i, o in enumerate(objects if isinstance(objects, list) else []):
            if not isinstance(o, dict) or not isinstance(o.get("file"), str):
                continue  # the plan reader names the malformed record
            name = plan_file_entry(o["file"], "kernels.%s.objects[%d].file" % (kname, i))
            if name not in entries:
                raise BundleError("%s: entry %r (kernel %s) is an array, not an object" % (path, name, kname))
            problem = object_target_mismatch(entries[name], str(o.get("target")))
            if problem is not None:
                raise BundleError(
                    "%s: entry %r (kernel %s, target %s): %s" % (path, name, kname, o.get("target"), problem)
                )
            if o.get("sha256") != sha256(entries[name]):
                raise BundleError("%s: entry %r does not match the sha256 kernel %s gives it" % (path, name, kname))


__all__ = [
    "BUNDLE_FORMAT",
    "Bundle",
    "BundleFiles",
    "BundleSource",
    "DEFAULT_LIMITS",
    "Limits",
    "MANIFEST",
    "PLAN",
    "SIGNATURE",
    "check_entry_name",
    "bundle_digest",
    "describe_bundle",
    "file_references",
    "is_bundle",
    "is_bundle_bytes",
    "open_bundle",
    "plan_file_entry",
    "sha256",
    "write_bundle",
    "write_fixed_zip",
]
