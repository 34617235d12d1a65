"""Many C sources, one compiler run: :func:`compile_many_c`.

A compiler process costs ~30-65 ms to start here, a tiny kernel ~1-10 ms to
compile, so a plan's kernels are compiled together. Each source stays its
own translation unit (kernels may repeat helper or entry-point names) and
gets its own object, exactly as compile_c would build it.

A job's eligible sources go through the compiler as one translation unit
whose object is cut back per source (:mod:`.batch_unit`, gcc and clang
alike): one process start and one set-up per job, not per source. Sources
the unit cannot take, or a unit that fails, are compiled one per file:
clang: `clang -c a.c b.c` runs one cc1 *process* per file (the driver turns
in-process cc1 off for more than one job), so it saves nothing. cc1 itself
takes any number of inputs, so we ask the driver once (`-###`) for the cc1
command line it would run for one file and hand cc1 every file at once.
gcc: one `gcc -c` driver run (one cc1 + as per file). `jobs` spreads the
sources over parallel jobs.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import shlex
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..config import env_str
from ..error import CompilationError
from . import batch_unit
from .probe import CompilerInfo, find_compiler
from .run import check_object, compile_c, compiler_flags, offending_lines, run_compiler, source_bytes

log = logging.getLogger("svod_min.compiler.clang")

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
    return ["-iquote", cwd, *_absolute_paths(compiler_flags(info, extra_flags), cwd)]


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
    """clang's cc1 command line for ``flags`` (cached per process); None: use the driver.

    Probed under the lock, so parallel jobs that need it probe once.
    """
    key = (info.path, tuple(flags))
    with _cc1_lock:
        if key not in _cc1_argv:
            cmd = [info.path, "-###", "-c", *flags, "-x", "c", "k0.c", "-o", "k0.o"]
            result = run_compiler(cmd, "", info, cwd=tmp)
            listing = result.stderr.decode(errors="replace")
            argv = _parse_cc1(listing, "k0.c", "k0.o") if result.returncode == 0 else None
            if argv is None:
                log.debug("cannot drive %s's cc1 directly; batches go through the driver", info.path)
            _cc1_argv[key] = argv
        return _cc1_argv[key]


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


def default_jobs() -> int:
    """``SVOD_COMPILE_JOBS`` if set, else the CPU count."""
    raw = env_str("SVOD_COMPILE_JOBS") or ""
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return os.cpu_count() or 1  # an unusable value is ignored


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


def _batch_error(info: CompilerInfo, sources: List[str], failures: Dict[int, str], label: _Labels) -> CompilationError:
    order = sorted(failures)
    texts = {i: label.relabel(failures[i]) for i in order}
    return CompilationError(
        "%s failed to compile %s (%d of %d sources)"
        % (os.path.basename(info.path), ", ".join(label(i) for i in order), len(order), len(sources)),
        diagnostics="\n".join(texts[i] for i in order),
        source_lines=offending_lines(sources[order[0]], texts[order[0]]),
        compiler=info.identity,
    )


def _read_object(tmp: str, i: int, info: CompilerInfo, label: _Labels) -> bytes:
    try:
        with open(os.path.join(tmp, "k%d.o" % i), "rb") as fh:
            data = fh.read()
    except OSError:
        data = b""
    if not data:
        raise CompilationError("%s produced no object for %s" % (info.path, label(i)), compiler=info.identity)
    return check_object(data, info)


def _unit_first(
    info: CompilerInfo, flags: List[str], tmp: str, chunk: List[int], sources: Sequence[str], built: Dict[int, bytes]
) -> List[int]:
    """Build what one unit can (see :mod:`.batch_unit`) into ``built``; the indices still to compile."""
    if info.family not in batch_unit.UNIT_FLAGS or not batch_unit.flags_allow_unit(flags):
        return chunk
    ready = {i: sources[i] for i in chunk if batch_unit.unit_ready(sources[i])}
    if len(ready) < 2:
        return chunk
    objects = batch_unit.compile_unit(info, flags, tmp, ready)
    built.update(objects)  # distinct indices per job: no lock needed
    return [i for i in chunk if i not in objects]


def _run_chunks(
    info: CompilerInfo,
    flags: List[str],
    tmp: str,
    chunks: List[List[int]],
    sources: Sequence[str],
    built: Dict[int, bytes],
) -> List[subprocess.CompletedProcess]:
    def run(chunk: List[int]) -> subprocess.CompletedProcess:
        rest = _unit_first(info, flags, tmp, chunk, sources, built)
        if not rest:
            return subprocess.CompletedProcess([], 0, b"", b"")
        cmd = _batch_command(info, flags, ["k%d.c" % i for i in rest], tmp)
        return run_compiler(cmd, "", info, cwd=tmp)

    if len(chunks) == 1:
        return [run(chunks[0])]
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(chunks)) as pool:
        return list(pool.map(run, chunks))


def _write_sources(tmp: str, sources: List[str], label: "_Labels") -> None:
    for i, source in enumerate(sources):
        data = source_bytes(source, label(i))
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
    chunks = _split(len(sources), jobs or default_jobs())
    with tempfile.TemporaryDirectory(prefix="svod_min-cc-") as tmp:
        _write_sources(tmp, sources, label)
        built: Dict[int, bytes] = {}  # objects cut from units, never written to disk
        results = _run_chunks(info, flags, tmp, chunks, sources, built)
        _raise_failures(info, sources, chunks, results, extra_flags, label)
        return [built[i] if i in built else _read_object(tmp, i, info, label) for i in range(len(sources))]


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


__all__ = ["MIN_SOURCES_PER_JOB", "compile_many_c", "default_jobs"]
