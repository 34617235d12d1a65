"""Compiler probing: which C compiler to use and exactly what it is.

``SVOD_CC`` picks the compiler, else clang, gcc, cc on ``PATH``. Each
compiler's identity (family, version, target triple) is probed once per
process and remembered on disk under the cache root (keyed by the binary's
path, mtime and size), because ``--version`` costs ~60 ms and feeds every
cache key.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional

from ..config import cache_path, env_str
from ..error import CompilationError, CompilerNotFoundError

log = logging.getLogger("svod_min.compiler.clang")

#: File under the cache root where compiler probes persist.
PROBE_STORE_NAME = "compilers.json"


@dataclass(frozen=True)
class CompilerInfo:
    """A probed compiler: where it is and exactly what it is."""

    path: str
    family: str  # "clang" or "gcc"
    version: str
    target: str

    @property
    def identity(self) -> str:
        """Stable string for cache keys: family, version and target triple."""
        return "%s-%s-%s" % (self.family, self.version, self.target)


_probe_lock = threading.Lock()
_probed: Dict[str, CompilerInfo] = {}


def _run_probe(path: str, *args: str) -> str:
    try:
        out = subprocess.run([path, *args], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompilerNotFoundError("cannot run compiler %r: %s" % (path, exc)) from exc
    return out.stdout.strip() or out.stderr.strip()


def _probe(path: str) -> CompilerInfo:
    banner = _run_probe(path, "--version").splitlines()
    first = banner[0] if banner else ""
    family = "clang" if "clang" in first.lower() else "gcc"
    if family == "gcc" and not re.search(r"gcc|\bcc\b|GCC|Free Software", " ".join(banner)):
        raise CompilerNotFoundError("%r does not look like clang or gcc (--version said %r)" % (path, first))
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", first)
    version = match.group(1) if match else "unknown"
    target = _run_probe(path, "-dumpmachine").splitlines()[0:1]
    return CompilerInfo(path, family, version, target[0] if target else "unknown")


def probe_store() -> Optional[str]:
    """Where probe results persist across processes (None: do not persist)."""
    return cache_path(PROBE_STORE_NAME)


def _binary_fingerprint(path: str) -> str:
    # An upgraded compiler changes its binary, so (realpath, mtime, size) keys
    # a probe result safely without running the compiler (~60 ms for clang).
    real = os.path.realpath(path)
    st = os.stat(real)
    return "%s|%d|%d" % (real, st.st_mtime_ns, st.st_size)


def _load_probes(store: str) -> Dict[str, list]:
    try:
        with open(store) as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save_probe(store: str, fingerprint: str, info: CompilerInfo) -> None:
    data = _load_probes(store)
    data[fingerprint] = [info.path, info.family, info.version, info.target]
    try:
        os.makedirs(os.path.dirname(store), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(store), prefix=".compilers-")
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh)
        os.replace(tmp, store)
    except OSError as exc:  # a read-only cache only costs us the probe next time
        log.debug("cannot persist compiler probe to %s: %s", store, exc)


def _probe_persistent(path: str) -> CompilerInfo:
    store = probe_store()
    try:
        fingerprint = _binary_fingerprint(path)
    except OSError:
        return _probe(path)
    if store is not None:
        hit = _load_probes(store).get(fingerprint)
        if isinstance(hit, list) and len(hit) == 4 and all(isinstance(x, str) for x in hit):
            return CompilerInfo(path, hit[1], hit[2], hit[3])
    info = _probe(path)
    if store is not None:
        _save_probe(store, fingerprint, info)
    return info


def probe_compiler(path: str) -> CompilerInfo:
    """Identity of the compiler at ``path``: cached per process and on disk."""
    with _probe_lock:
        info = _probed.get(path)
        if info is None:
            info = _probe_persistent(path)
            _probed[path] = info
        return info


def _candidates(need_clang: bool) -> List[str]:
    override = env_str("SVOD_CC")
    if override:
        return [override]
    return ["clang"] if need_clang else ["clang", "gcc", "cc"]


_found: Dict[tuple, CompilerInfo] = {}


def find_compiler(*, need_clang: bool = False, compiler: Optional[str] = None) -> CompilerInfo:
    """The compiler to use: ``compiler`` if given, else ``SVOD_CC``, else clang, gcc, cc.

    Memoised per (request, PATH, SVOD_CC): cache keys ask for it on every lookup.
    """
    key = (need_clang, compiler, os.environ.get("PATH", ""), os.environ.get("SVOD_CC", ""))
    hit = _found.get(key)
    if hit is None:
        hit = _found[key] = _find_compiler(need_clang=need_clang, compiler=compiler)
    return hit


def _find_compiler(*, need_clang: bool = False, compiler: Optional[str] = None) -> CompilerInfo:
    names = [compiler] if compiler else _candidates(need_clang)
    for name in names:
        path = shutil.which(name)
        if path is None:
            continue
        info = probe_compiler(path)
        if need_clang and info.family != "clang":
            raise CompilerNotFoundError("LLVM IR needs clang, but the selected compiler %s is %s" % (path, info.family))
        return info
    what = "clang (needed for LLVM IR)" if need_clang else "C compiler"
    raise CompilerNotFoundError(
        "no %s found: tried %s on PATH; install clang or gcc, or set SVOD_CC" % (what, ", ".join(names))
    )


def missing_compiler() -> Optional[str]:
    """Why :func:`find_compiler` finds no C compiler here (None: a candidate is on PATH; probing it may still fail).

    Only absence counts: a compiler that is there but does not run is a failure to report, not a host without one.
    """
    names = _candidates(False)
    if any(shutil.which(name) for name in names):
        return None
    return "no C compiler found: tried %s on PATH" % ", ".join(names)


def available_compilers() -> List[CompilerInfo]:
    """Every distinct compiler reachable on PATH (for ``svod_min info``)."""
    found: Dict[str, CompilerInfo] = {}
    for name in ("clang", "gcc", "cc"):
        path = shutil.which(name)
        if path is None:
            continue
        real = os.path.realpath(path)
        if real in found:
            continue
        try:
            found[real] = probe_compiler(path)
        except CompilationError:
            continue
    return list(found.values())


__all__ = [
    "PROBE_STORE_NAME",
    "CompilerInfo",
    "available_compilers",
    "find_compiler",
    "missing_compiler",
    "probe_compiler",
    "probe_store",
]
