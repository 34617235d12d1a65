"""Compiler driver: C source or LLVM IR text -> relocatable ELF object bytes.

clang reads stdin and writes the object to stdout, so nothing touches the
disk. gcc cannot write an object into a pipe (it silently writes 0 bytes),
so for gcc the object goes through a private temporary directory that is
always removed. ``SVOD_CC`` picks the compiler; each compiler's identity
(family, version, target triple) is probed once per process and feeds the
cache keys.
"""

from __future__ import annotations

import concurrent.futures
import enum
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .config import cache_path
from .error import CompilationError, CompilerNotFoundError
from .jit_loader.arch import host_arch  # re-exported: callers and tests use clang.host_arch

log = logging.getLogger("svod_min.clang")

#: File under the cache root where compiler probes persist.
PROBE_STORE_NAME = "compilers.json"

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


# "<stdin>"/"-" for a piped source; "kernel N" for a source of a batch (see compile_many_c).
_DIAG_LINE = re.compile(r"^(?:<stdin>|-|kernel \d+):(\d+):(?:\d+:)?\s*(?:fatal )?error", re.MULTILINE)


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


def _run_compiler(
    cmd: List[str], source: str, info: CompilerInfo, cwd: Optional[str] = None
) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            cmd,
            input=_source_bytes(source, "the source"),
            capture_output=True,
            timeout=COMPILE_TIMEOUT_S,
            check=False,
            cwd=cwd,
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
        try:
            with open(out_path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:  # exited 0 without an object (-###, --help, a "compiler" that is not one)
            return b""  # _check_object reports it


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


# --- many sources, one compiler run ------------------------------------------
#
# A compiler process costs ~30-65 ms to start here, a tiny kernel ~1-10 ms to
# compile, so a plan's kernels are compiled together. Each source stays its
# own translation unit (kernels may repeat helper or entry-point names) and
# gets its own object, exactly as compile_c would build it.
#
# clang: `clang -c a.c b.c` runs one cc1 *process* per file (the driver turns
# in-process cc1 off for more than one job), so it saves nothing. cc1 itself
# takes any number of inputs, so we ask the driver once (`-###`) for the cc1
# command line it would run for one file and hand cc1 every file at once.
# gcc: cc1 takes one file, so one `gcc -c` driver run compiles them all
# (one cc1 + as per file); `jobs` spreads the files over parallel drivers.

#: Below this many sources per job, splitting a batch over processes costs more than it saves.
MIN_SOURCES_PER_JOB = 8
# Flags whose value is a path: made absolute, because a batch compiles in its temp dir.
_PATH_FLAGS = ("-iquote", "-isystem", "-idirafter", "-include", "-imacros", "-isysroot", "-I", "-B")
_BATCH_NAME = re.compile(r"(?<![\w/.-])k(\d+)\.c(?![\w.])")
_ERROR_WORD = re.compile(r"\b(?:fatal )?error\b:")
_DIR_FLAGS = ("-fcoverage-compilation-dir=", "-fdebug-compilation-dir=")
_cc1_lock = threading.Lock()
_cc1_argv: Dict[Tuple[str, Tuple[str, ...]], Optional[List[str]]] = {}


def _absolute_flag(flag: str, base: str) -> str:
    if flag.startswith("--sysroot="):
        return "--sysroot=" + os.path.join(base, flag[len("--sysroot=") :])
    for prefix in _PATH_FLAGS:
        value = flag[len(prefix) :]
        if flag.startswith(prefix) and value and value != "-":
            return prefix + os.path.join(base, value)  # join keeps an absolute value as is
    return flag


def _absolute_paths(flags: Sequence[str], base: str) -> List[str]:
    """``flags`` with relative path values resolved against ``base`` (the caller's cwd)."""
    out: List[str] = []
    pending = False
    for flag in flags:
        if pending:
            out.append(os.path.join(base, flag))
        else:
            out.append(_absolute_flag(flag, base))
        pending = not pending and flag in _PATH_FLAGS
    return out


def _batch_flags(info: CompilerInfo, extra_flags: Sequence[str]) -> List[str]:
    # A piped source finds `#include "x.h"` in the cwd; a file in the temp dir
    # would not, so the caller's cwd becomes the first quote-include directory.
    cwd = os.getcwd()
    return ["-iquote", cwd, *_absolute_paths(_flags_for(info, extra_flags), cwd)]


def _strip_io(argv: List[str], src: str, obj: str) -> Optional[List[str]]:
    """A one-file cc1 command line without its input, output and file-specific flags."""
    out: List[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-main-file-name", "-o"):
            i += 2
            continue
        # -disable-free would keep every unit's memory until exit (~0.5 MB each)
        if arg != "-disable-free" and not arg.startswith(_DIR_FLAGS):
            out.append(arg)
        i += 1
    if out[-3:] != ["-x", "c", src]:
        return None
    out = out[:-3]
    return None if src in out or obj in out else out


def _parse_cc1(listing: str, src: str, obj: str) -> Optional[List[str]]:
    jobs = [line for line in listing.splitlines() if line.startswith(' "')]
    if len(jobs) != 1:
        return None  # more than a single cc1 job (an assembler step...): use the driver
    try:
        argv = shlex.split(jobs[0])
    except ValueError:
        return None
    if len(argv) < 2 or argv[1] != "-cc1":
        return None
    return _strip_io(argv, src, obj)


def _probe_cc1(info: CompilerInfo, flags: List[str], tmp: str) -> Optional[List[str]]:
    """clang's cc1 command line for ``flags`` (cached per process); None: use the driver."""
    key = (info.path, tuple(flags))
    with _cc1_lock:
        if key in _cc1_argv:
            return _cc1_argv[key]
    cmd = [info.path, "-###", "-c", *flags, "-x", "c", "k0.c", "-o", "k0.o"]
    result = _run_compiler(cmd, "", info, cwd=tmp)
    listing = result.stderr.decode(errors="replace")
    argv = _parse_cc1(listing, "k0.c", "k0.o") if result.returncode == 0 else None
    if argv is None:
        log.debug("cannot drive %s's cc1 directly; batches go through the driver", info.path)
    with _cc1_lock:
        _cc1_argv[key] = argv
    return argv


def _batch_command(info: CompilerInfo, flags: List[str], files: List[str], tmp: str) -> List[str]:
    if info.family != "clang":
        return [info.path, "-c", "-pipe", *flags, "-x", "c", *files]
    # One file: the clang driver runs cc1 in-process anyway, and needs no probe.
    cc1 = _probe_cc1(info, flags, tmp) if len(files) > 1 else None
    if cc1 is not None:
        return [*cc1, "-x", "c", *files]
    return [info.path, "-c", *flags, "-x", "c", *files]


def _split(count: int, jobs: int) -> List[List[int]]:
    """Source indices in at most ``jobs`` contiguous, near-equal chunks."""
    parts = max(1, min(jobs, count // MIN_SOURCES_PER_JOB))
    base, extra = divmod(count, parts)
    chunks, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        chunks.append(list(range(lo, hi)))
        lo = hi
    return chunks


def _default_jobs() -> int:
    """``SVOD_COMPILE_JOBS`` if set, else the CPU count."""
    raw = os.environ.get("SVOD_COMPILE_JOBS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return os.cpu_count() or 1


def _split_diagnostics(stderr: str) -> Tuple[Dict[int, List[str]], List[int]]:
    """Diagnostics per batch index (the lines after each ``k<i>.c``) and the indices with errors."""
    blocks: Dict[int, List[str]] = {}
    failing: List[int] = []
    current: Optional[int] = None
    for line in stderr.splitlines():
        match = _BATCH_NAME.search(line)
        if match and (match.start() == 0 or line.startswith("In file included from")):
            current = int(match.group(1))
        if current is None:
            continue
        blocks.setdefault(current, []).append(line)
        if _ERROR_WORD.search(line) and current not in failing:
            failing.append(current)
    return blocks, failing


_Retry = Callable[[int], Optional[str]]  # batch index -> its diagnostics when it fails alone


def _chunk_failures(
    info: CompilerInfo, chunk: List[int], result: subprocess.CompletedProcess, retry: _Retry
) -> Dict[int, str]:
    """Index -> diagnostics for the sources of a failed chunk (re-run one by one if unclear)."""
    stderr = result.stderr.decode(errors="replace")
    blocks, failing = _split_diagnostics(stderr)
    found = {i: "\n".join(blocks[i]) for i in failing if i in chunk}
    if found:
        return found
    for i in chunk:  # nothing attributable (a crash, a driver error): pinpoint
        diagnostics = retry(i)
        if diagnostics is not None:
            found[i] = diagnostics
    if not found:
        raise CompilationError(
            "%s failed on a batch of %d sources" % (os.path.basename(info.path), len(chunk)),
            diagnostics=stderr,
            compiler=info.identity,
        )
    return found


@dataclass(frozen=True)
class _Labels:
    """How a batch reports its sources: ``kernel <number> (<name>)``."""

    numbers: Sequence[int]
    names: Optional[Sequence[str]]

    def __call__(self, i: int) -> str:
        if self.names is None:
            return "kernel %d" % self.numbers[i]
        return "kernel %d (%s)" % (self.numbers[i], self.names[i])

    def relabel(self, text: str) -> str:
        """``k<i>.c`` in compiler output -> ``kernel <number>``."""
        return _BATCH_NAME.sub(lambda m: "kernel %d" % self.numbers[int(m.group(1))], text)


def _batch_error(
    info: CompilerInfo, sources: List[str], failures: Dict[int, str], label: _Labels
) -> CompilationError:
    order = sorted(failures)
    texts = {i: label.relabel(failures[i]) for i in order}
    return CompilationError(
        "%s failed to compile %s (%d of %d sources)"
        % (os.path.basename(info.path), ", ".join(label(i) for i in order), len(order), len(sources)),
        diagnostics="\n".join(texts[i] for i in order),
        source_lines=_offending_lines(sources[order[0]], texts[order[0]]),
        compiler=info.identity,
    )


def _read_object(tmp: str, i: int, info: CompilerInfo, label: _Labels) -> bytes:
    try:
        with open(os.path.join(tmp, "k%d.o" % i), "rb") as fh:
            data = fh.read()
    except OSError:
        data = b""
    if not data:
        raise CompilationError(
            "%s produced no object for %s" % (info.path, label(i)), compiler=info.identity
        )
    return _check_object(data, info)


def _run_chunks(
    info: CompilerInfo, flags: List[str], tmp: str, chunks: List[List[int]]
) -> List[subprocess.CompletedProcess]:
    def run(chunk: List[int]) -> subprocess.CompletedProcess:
        cmd = _batch_command(info, flags, ["k%d.c" % i for i in chunk], tmp)
        return _run_compiler(cmd, "", info, cwd=tmp)

    if len(chunks) == 1:
        return [run(chunks[0])]
    if info.family == "clang":
        _probe_cc1(info, flags, tmp)  # once, before the threads race to it
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(chunks)) as pool:
        return list(pool.map(run, chunks))


def _source_bytes(source: Any, what: str) -> bytes:
    """C source text as UTF-8; a non-string or text with lone surrogates is a CompilationError."""
    if not isinstance(source, str):
        raise CompilationError("%s must be a str of C source, got %s" % (what, type(source).__name__))
    try:
        return source.encode("utf-8")
    except UnicodeEncodeError as exc:  # e.g. "\udcff" from JSON: no encoding can hand it to a compiler
        raise CompilationError("%s is not valid Unicode text (%s at position %d)" % (what, exc.reason, exc.start)) from None


def _write_sources(tmp: str, sources: List[str], label: "_Labels") -> None:
    for i, source in enumerate(sources):
        data = _source_bytes(source, label(i))
        with open(os.path.join(tmp, "k%d.c" % i), "wb") as fh:
            fh.write(data)


def compile_many_c(
    sources: Sequence[str],
    *,
    extra_flags: Sequence[str] = (),
    compiler: Optional[str] = None,
    jobs: Optional[int] = None,
    names: Optional[Sequence[str]] = None,
    numbers: Optional[Sequence[int]] = None,
) -> List[bytes]:
    """Compile many C sources in one compiler run (or ``jobs`` parallel runs); one object each.

    Each source is its own translation unit and yields the object
    :func:`compile_c` would. The sources go to a private temporary directory
    that is always removed; nothing is written to the working directory.
    ``jobs`` (default ``SVOD_COMPILE_JOBS``, else the CPU count) caps the
    parallel compiler processes; batches under :data:`MIN_SOURCES_PER_JOB`
    per job are not split. On failure raises :class:`CompilationError`
    naming every failing source as ``kernel i`` (``kernel i (name)`` with
    ``names``; ``numbers`` renumbers ``i``, default the position), with its
    diagnostics relabelled the same way.
    """
    sources = list(sources)
    label = _Labels(range(len(sources)) if numbers is None else list(numbers), names)
    for what, given in (("names", names), ("numbers", numbers)):
        if given is not None and len(given) != len(sources):
            raise ValueError("%s has %d entries for %d sources" % (what, len(given), len(sources)))
    if jobs is not None and (not isinstance(jobs, int) or jobs < 1):
        raise ValueError("jobs must be a positive int, got %r" % (jobs,))
    if not sources:
        return []
    info = find_compiler(compiler=compiler)
    flags = _batch_flags(info, extra_flags)
    chunks = _split(len(sources), jobs or _default_jobs())
    with tempfile.TemporaryDirectory(prefix="svod_min-cc-") as tmp:
        _write_sources(tmp, sources, label)
        results = _run_chunks(info, flags, tmp, chunks)
        _raise_failures(info, sources, chunks, results, extra_flags, label)
        return [_read_object(tmp, i, info, label) for i in range(len(sources))]


def _raise_failures(
    info: CompilerInfo,
    sources: List[str],
    chunks: List[List[int]],
    results: List[subprocess.CompletedProcess],
    extra_flags: Sequence[str],
    label: _Labels,
) -> None:
    def retry(i: int) -> Optional[str]:
        try:
            compile_c(sources[i], extra_flags=extra_flags, compiler=info.path)
        except CompilationError as exc:
            return exc.diagnostics.replace("<stdin>:", "k%d.c:" % i) or exc.message
        return None

    failures: Dict[int, str] = {}
    for chunk, result in zip(chunks, results):
        if result.returncode != 0:
            failures.update(_chunk_failures(info, chunk, result, retry))
    if failures:
        raise _batch_error(info, sources, failures, label)


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
    "compile_many_c",
    "compile_source",
    "find_compiler",
    "host_arch",
    "probe_compiler",
]
