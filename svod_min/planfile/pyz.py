"""``python -m svod_min zipapp -o svod_min.pyz``: the whole runtime as one file a bare Python runs.

The archive is a stdlib-style zipapp (a ``#!`` line, then a zip with ``__main__.py``)
holding the ``svod_min`` package with its data (prebuilt objects, PTX, kernel C
sources, signatures) and pyelftools. ``python3 -I svod_min.pyz run MODEL.svod``
needs no site-packages; package data is read from inside the archive
(:mod:`svod_min.resources`). Built from an installed or source svod_min, or from a
running ``.pyz`` itself; the same inputs give the same bytes.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
import zipfile
from typing import Dict, List, Tuple

from ..error import NotSupportedError
from ..resources import PACKAGE_DIR, archive_path, in_archive
from .bundle import write_fixed_zip

MAIN = b"""# svod_min one-file runtime: python3 svod_min.pyz run [PLAN.json | MODEL.svod]
import os
import sys

# Python 3.8 puts the archive on sys.path as typed (3.9+: absolute): a relative entry would leave every
# later import from the archive relative to a working directory that may have changed by then.
if sys.path and sys.path[0] == os.path.dirname(__file__) and not os.path.isabs(sys.path[0]):
    sys.path[0] = os.path.abspath(sys.path[0])

from svod_min.__main__ import main

sys.exit(main())
"""
_SKIP_DIRS = {"__pycache__"}
_SKIP_SUFFIXES = (".pyc", ".pyo")


def package_members(package_dir: str, name: str) -> List[Tuple[str, bytes]]:
    """Every file of the package at ``package_dir`` as (archive name under ``name/``, bytes), sorted."""
    out = []
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(_SKIP_SUFFIXES):
                continue
            full = os.path.join(root, f)
            rel = os.path.relpath(full, package_dir).replace(os.sep, "/")
            with open(full, "rb") as fh:
                out.append(("%s/%s" % (name, rel), fh.read()))
    return out


def _members_of_running_archive() -> List[Tuple[str, bytes]]:
    """svod_min and elftools as held by the ``.pyz`` this process runs from."""
    with zipfile.ZipFile(str(archive_path())) as zf:
        names = [n for n in zf.namelist() if n.split("/", 1)[0] in ("svod_min", "elftools") and not n.endswith("/")]
        # bytecode of the interpreter that built it is kept as it is (this one may be another version)
        return [(n, zf.read(n)) for n in sorted(names)]


def _elftools_dir() -> str:
    spec = importlib.util.find_spec("elftools")
    if spec is None or not spec.submodule_search_locations:
        raise NotSupportedError(
            "pyelftools is not installed here: the one-file runtime carries it; "
            "pip install pyelftools, then build again"
        )
    return list(spec.submodule_search_locations)[0]


#: Compiles in a fresh interpreter with a fixed hash seed: marshal's output depends on the process's
#: state (reference counts of interned strings, set order under hash randomisation), so bytecode made
#: in a long-lived process would differ from build to build.
_COMPILE_CHILD = r"""
import importlib.util, marshal, pickle, sys
out = []
for name, source in pickle.load(sys.stdin.buffer):
    code = compile(source, name, "exec", dont_inherit=True)
    flags = (1).to_bytes(4, "little")  # PEP 552: hash-based, source not checked
    out.append(importlib.util.MAGIC_NUMBER + flags + importlib.util.source_hash(source) + marshal.dumps(code))
pickle.dump(out, sys.stdout.buffer)
"""


def bytecode(sources: List[Tuple[str, bytes]]) -> List[bytes]:
    """Unchecked hash-based ``.pyc`` files (PEP 552) of ``sources`` for this interpreter, in order.

    zipimport compiles every ``.py`` afresh at each start (it cannot write a cache); it takes a
    ``.pyc`` beside the ``.py`` instead, and falls back to the source when the magic number is
    another interpreter version's. Unchecked: the archive is immutable, its sources cannot drift.
    """
    env = {"PYTHONHASHSEED": "0", "PATH": os.environ.get("PATH", "")}
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", _COMPILE_CHILD],
        input=pickle.dumps(sources),
        env=env,
        capture_output=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise NotSupportedError(
            "compiling the runtime's bytecode failed: %s" % proc.stderr.decode(errors="replace")[-400:]
        )
    return pickle.loads(proc.stdout)


def pyz_members(compiled: bool = True) -> List[Tuple[str, bytes]]:
    """What the archive holds: ``__main__.py``, ``svod_min/...``, ``elftools/...`` (sorted, de-duplicated),
    with this interpreter's bytecode beside each module when ``compiled``."""
    if in_archive():
        members = _members_of_running_archive()
    else:
        members = package_members(PACKAGE_DIR, "svod_min") + package_members(_elftools_dir(), "elftools")
    unique: Dict[str, bytes] = dict(members)
    if compiled and not in_archive():
        sources = [(n, unique[n]) for n in sorted(unique) if n.endswith(".py")]
        unique.update((n + "c", pyc) for (n, _), pyc in zip(sources, bytecode(sources)))
    return [("__main__.py", MAIN)] + sorted(unique.items())


def build_pyz(out: str, python: str = "/usr/bin/env python3", compiled: bool = True) -> int:
    """Write the one-file runtime to ``out`` (executable); returns its size in bytes.

    ``compiled`` adds bytecode for this interpreter (``sys.version_info``): faster starts there,
    source everywhere else. A ``.pyz`` rebuilt from a running ``.pyz`` copies its members as they are.
    """
    prefix = b"#!" + python.encode("utf-8") + b"\n" if python else b""
    return write_fixed_zip(out, pyz_members(compiled), prefix=prefix, mode=0o755, store=stored_member)


def stored_member(name: str) -> bool:
    """Members the archive stores rather than deflates: what every start reads (bytecode, the prebuilt
    objects); inflating them cost a cold start ~10 ms, storing them ~3 MB of archive."""
    return name.endswith((".pyc", ".o"))


__all__ = ["MAIN", "build_pyz", "package_members", "pyz_members", "stored_member"]
