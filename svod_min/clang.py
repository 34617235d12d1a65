"""Compiler driver: C source or LLVM IR text -> relocatable ELF object bytes.

clang reads stdin and writes the object to stdout, so nothing touches the
disk. gcc cannot write an object into a pipe (it silently writes 0 bytes),
so for gcc the object goes through a private temporary directory that is
always removed. ``SVOD_CC`` picks the compiler; each compiler's identity
(family, version, target triple) is probed once per process and feeds the
cache keys.
"""

from __future__ import annotations

import enum
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from .error import CompilationError, CompilerNotFoundError

log = logging.getLogger("svod_min.clang")

#: Seconds a single compiler run may take before we give up on it.
COMPILE_TIMEOUT_S = 300.0

# Flags shared by both compilers. Each one removes something the loader would
# otherwise have to handle or that a hardened distro compiler adds by default.
DEFAULT_FLAGS: Tuple[str, ...] = (
    "-O2",
    "-fPIC",  # position-independent: PC-relative data access, no 32S relocations
    "-fno-plt",  # external calls go through the GOT (we build it inside the image)
    "-fno-stack-protector",  # no __stack_chk_fail / TLS canary reads
    "-fcf-protection=none",  # no endbr64 / CET notes
    "-fno-asynchronous-unwind-tables",  # no .eh_frame to lay out and relocate
    "-fno-unwind-tables",
    "-fno-math-errno",  # sqrt becomes an instruction, not a libm call
    "-fno-ident",
)

# "Freestanding" in effect but not in name: -ffreestanding also disables math
# builtins (sqrtf becomes a libm call), so we only forbid the idioms that turn
# loops into memcpy/memset calls. The spelling differs per compiler.
_FAMILY_FLAGS: Dict[str, Tuple[str, ...]] = {
    "clang": ("-fno-builtin-memcpy", "-fno-builtin-memset", "-fno-builtin-memmove"),
    "gcc": ("-fno-tree-loop-distribute-patterns",),
}


class CpuBackend(enum.Enum):
    """Which front end compiles CPU kernels: C via a C compiler, or LLVM IR via clang."""

    CLANG = "clang"
    LLVM = "llvm"

    @classmethod
    def from_env(cls) -> "CpuBackend":
        """``SVOD_CPU_BACKEND`` (clang|llvm); unknown values warn and fall back to CLANG."""
        raw = os.environ.get("SVOD_CPU_BACKEND", "").strip().lower()
        if not raw:
            return cls.CLANG
        for member in cls:
            if member.value == raw:
                return member
        log.warning("SVOD_CPU_BACKEND=%r is not one of clang, llvm; using clang", raw)
        return cls.CLANG


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


def host_arch() -> str:
    """The loader's name for this machine's architecture."""
    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def _run_probe(path: str, *args: str) -> str:
    try:
        out = subprocess.run(
            [path, *args], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompilerNotFoundError("cannot run compiler %r: %s" % (path, exc)) from exc
    return out.stdout.strip() or out.stderr.strip()


def _probe(path: str) -> CompilerInfo:
    banner = _run_probe(path, "--version").splitlines()
    first = banner[0] if banner else ""
    family = "clang" if "clang" in first.lower() else "gcc"
    if family == "gcc" and not re.search(r"gcc|\bcc\b|GCC|Free Software", " ".join(banner)):
        raise CompilerNotFoundError(
            "%r does not look like clang or gcc (--version said %r)" % (path, first)
        )
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", first)
    version = match.group(1) if match else "unknown"
    target = _run_probe(path, "-dumpmachine").splitlines()[0:1]
    return CompilerInfo(path, family, version, target[0] if target else "unknown")


def _probe_store() -> Optional[str]:
    """Where probe results persist across processes (None: do not persist)."""
    if os.environ.get("SVOD_OBJECT_CACHE", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    root = os.environ.get("SVOD_OBJECT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "svod_min"
    )
    return os.path.join(root, "compilers.json")


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
    store = _probe_store()
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
    override = os.environ.get("SVOD_CC", "").strip()
    if override:
        return [override]
    return ["clang"] if need_clang else ["clang", "gcc", "cc"]


def find_compiler(*, need_clang: bool = False, compiler: Optional[str] = None) -> CompilerInfo:
    """The compiler to use: ``compiler`` if given, else ``SVOD_CC``, else clang, gcc, cc."""
    names = [compiler] if compiler else _candidates(need_clang)
    for name in names:
        path = shutil.which(name)
        if path is None:
            continue
        info = probe_compiler(path)
        if need_clang and info.family != "clang":
            raise CompilerNotFoundError(
                "LLVM IR needs clang, but the selected compiler %s is %s" % (path, info.family)
            )
        return info
    what = "clang (needed for LLVM IR)" if need_clang else "C compiler"
    raise CompilerNotFoundError(
        "no %s found: tried %s on PATH; install clang or gcc, or set SVOD_CC"
        % (what, ", ".join(names))
    )


def _flags_for(info: CompilerInfo, extra_flags: Sequence[str]) -> List[str]:
    return [*DEFAULT_FLAGS, *_FAMILY_FLAGS.get(info.family, ()), *extra_flags]


_DIAG_LINE = re.compile(r"^(?:<stdin>|-):(\d+):(?:\d+:)?\s*(?:fatal )?error", re.MULTILINE)


def _offending_lines(source: str, diagnostics: str) -> List[Tuple[int, str]]:
    lines = source.splitlines()
    numbers = sorted({int(m.group(1)) for m in _DIAG_LINE.finditer(diagnostics)})
    return [(n, lines[n - 1]) for n in numbers[:20] if 0 < n <= len(lines)]


def _fail(info: CompilerInfo, source: str, stderr: str, what: str) -> CompilationError:
    return CompilationError(
        "%s failed to compile %s" % (os.path.basename(info.path), what),
        diagnostics=stderr,
        source_lines=_offending_lines(source, stderr),
        compiler=info.identity,
    )


def _run_compiler(cmd: List[str], source: str, info: CompilerInfo) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            cmd,
            input=source.encode(),
            capture_output=True,
            timeout=COMPILE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CompilationError(
            "%s did not finish within %.0f s" % (info.path, COMPILE_TIMEOUT_S), compiler=info.identity
        ) from exc
    except OSError as exc:
        raise CompilerNotFoundError("cannot run %s: %s" % (info.path, exc)) from exc


def _compile_via_pipe(info: CompilerInfo, lang: str, source: str, flags: List[str]) -> bytes:
    cmd = [info.path, "-c", "-x", lang, *flags, "-", "-o", "-"]
    result = _run_compiler(cmd, source, info)
    if result.returncode != 0:
        raise _fail(info, source, result.stderr.decode(errors="replace"), lang)
    return result.stdout


def _compile_via_tempdir(info: CompilerInfo, lang: str, source: str, flags: List[str]) -> bytes:
    # A private directory (mode 0700) under TMPDIR, never the working
    # directory; removed whatever happens. Only a .o is written: noexec is fine.
    with tempfile.TemporaryDirectory(prefix="svod_min-cc-") as tmp:
        out_path = os.path.join(tmp, "kernel.o")
        cmd = [info.path, "-c", "-x", lang, *flags, "-", "-o", out_path]
        result = _run_compiler(cmd, source, info)
        if result.returncode != 0:
            raise _fail(info, source, result.stderr.decode(errors="replace"), lang)
        with open(out_path, "rb") as fh:
            return fh.read()


def _check_object(data: bytes, info: CompilerInfo) -> bytes:
    if not data.startswith(b"\x7fELF"):
        raise CompilationError(
            "%s produced no ELF object (%d bytes of output)" % (info.path, len(data)),
            compiler=info.identity,
        )
    return data


def compile_c(
    source: str, *, extra_flags: Sequence[str] = (), compiler: Optional[str] = None
) -> bytes:
    """Compile C source to relocatable ELF object bytes (clang via pipes, gcc via a temp dir)."""
    info = find_compiler(compiler=compiler)
    flags = _flags_for(info, extra_flags)
    if info.family == "clang":
        data = _compile_via_pipe(info, "c", source, flags)
    else:
        data = _compile_via_tempdir(info, "c", source, flags)
    return _check_object(data, info)


def compile_ir(ir_text: str, *, extra_flags: Sequence[str] = ()) -> bytes:
    """Compile LLVM IR text (svod's ``Llvm`` CPU backend) to ELF object bytes; clang only."""
    info = find_compiler(need_clang=True)
    # IR carries its own semantics: C-language flags would only warn.
    flags = ["-O2", "-fPIC", "-Wno-override-module", *extra_flags]
    return _check_object(_compile_via_pipe(info, "ir", ir_text, flags), info)


def compile_source(
    source: str, *, backend: CpuBackend = CpuBackend.CLANG, extra_flags: Sequence[str] = ()
) -> bytes:
    """Compile ``source`` as C (CLANG backend) or LLVM IR (LLVM backend)."""
    if backend is CpuBackend.LLVM:
        return compile_ir(source, extra_flags=extra_flags)
    return compile_c(source, extra_flags=extra_flags)


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
    "CpuBackend",
    "CompilerInfo",
    "DEFAULT_FLAGS",
    "available_compilers",
    "compile_c",
    "compile_ir",
    "compile_source",
    "find_compiler",
    "host_arch",
    "probe_compiler",
]
