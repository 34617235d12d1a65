"""Running the compiler on one source: C or LLVM IR text -> relocatable ELF object bytes.

clang reads stdin and writes the object to stdout, so nothing touches the
disk. gcc cannot write an object into a pipe (it silently writes 0 bytes),
so for gcc the object goes through a private temporary directory that is
always removed. The flags keep the object within what the loader handles.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..config import sanitizers
from ..error import CompilationError, CompilerNotFoundError
from .probe import CompilerInfo, find_compiler

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
FAMILY_FLAGS: Dict[str, Tuple[str, ...]] = {
    "clang": ("-fno-builtin-memcpy", "-fno-builtin-memset", "-fno-builtin-memmove"),
    # gcc -O2's "very cheap" vectoriser model skips any loop that needs a
    # remainder loop, i.e. every elementwise kernel over n; clang vectorises them.
    "gcc": ("-fno-tree-loop-distribute-patterns", "-fvect-cost-model=dynamic"),
}
# -fno-trapping-math is clang's default (floating-point exception flags are not
# observed): without it gcc keeps the selects of exp/log/tanh... as branches and
# vectorises none of those loops (several times slower than clang). Only where the whole
# kernel suite has checked it: gcc 12 on ppc64le computes tanh wrongly with it.
ARCH_FAMILY_FLAGS: Dict[Tuple[str, str], Tuple[str, ...]] = {
    ("gcc", "x86_64"): ("-fno-trapping-math",),
    ("gcc", "aarch64"): ("-fno-trapping-math",),
}


# SVOD_SANITIZE's flags per compiler family. UBSan traps (ud2: SIGILL at the faulty instruction) instead of
# calling its runtime, which the loader could not resolve; ASan's checks call the ASan runtime, which the process
# must have loaded (LD_PRELOAD, docs/fuzzing.md).
SANITIZER_FLAGS: Dict[Tuple[str, str], Tuple[str, ...]] = {
    ("clang", "undefined"): ("-fsanitize=undefined", "-fsanitize-trap=undefined"),
    ("gcc", "undefined"): ("-fsanitize=undefined", "-fsanitize-undefined-trap-on-error"),
    ("clang", "address"): ("-fsanitize=address", "-mllvm", "-asan-globals=0", "-mllvm", "-asan-constructor-kind=none"),
    ("gcc", "address"): ("-fsanitize=address",),
}


def family_flags(info: CompilerInfo) -> Tuple[str, ...]:
    """The driver's own flags for this compiler family (and its target architecture), and the sanitizers'
    that ``SVOD_SANITIZE`` asks for (none by default: the default objects do not change)."""
    arch = info.target.split("-", 1)[0]
    flags = FAMILY_FLAGS.get(info.family, ()) + ARCH_FAMILY_FLAGS.get((info.family, arch), ())
    for name in sanitizers():
        flags += SANITIZER_FLAGS.get((info.family, name), ())
    return flags


def compiler_flags(info: CompilerInfo, extra_flags: Sequence[str]) -> List[str]:
    """The full flag list for ``info``'s compiler: the defaults, its family's, then ``extra_flags``."""
    return [*DEFAULT_FLAGS, *family_flags(info), *extra_flags]


# "<stdin>"/"-" for a piped source; "kernel N" for a source of a batch (see compile_many_c).
DIAG_LINE = re.compile(r"^(?:<stdin>|-|kernel \d+):(\d+):(?:\d+:)?\s*(?:fatal )?error", re.MULTILINE)


def offending_lines(source: str, diagnostics: str) -> List[Tuple[int, str]]:
    """``(line number, text)`` of each source line the diagnostics report an error on (at most 20)."""
    lines = source.splitlines()
    numbers = sorted({int(m.group(1)) for m in DIAG_LINE.finditer(diagnostics)})
    return [(n, lines[n - 1]) for n in numbers[:20] if 0 < n <= len(lines)]


def _fail(info: CompilerInfo, source: str, stderr: str, what: str) -> CompilationError:
    return CompilationError(
        "%s failed to compile %s" % (os.path.basename(info.path), what),
        diagnostics=stderr,
        source_lines=offending_lines(source, stderr),
        compiler=info.identity,
    )


def run_compiler(
    cmd: List[str], source: str, info: CompilerInfo, cwd: Optional[str] = None
) -> subprocess.CompletedProcess:
    """Run ``cmd`` with ``source`` on stdin; a timeout or a missing binary is a svod error."""
    try:
        return subprocess.run(
            cmd,
            input=source_bytes(source, "the source"),
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
    result = run_compiler(cmd, source, info)
    if result.returncode != 0:
        raise _fail(info, source, result.stderr.decode(errors="replace"), lang)
    return result.stdout


def _compile_via_tempdir(info: CompilerInfo, lang: str, source: str, flags: List[str]) -> bytes:
    # A private directory (mode 0700) under TMPDIR, never the working
    # directory; removed whatever happens. Only a .o is written: noexec is fine.
    with tempfile.TemporaryDirectory(prefix="svod_min-cc-") as tmp:
        out_path = os.path.join(tmp, "kernel.o")
        cmd = [info.path, "-c", "-x", lang, *flags, "-", "-o", out_path]
        result = run_compiler(cmd, source, info)
        if result.returncode != 0:
            raise _fail(info, source, result.stderr.decode(errors="replace"), lang)
        try:
            with open(out_path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:  # exited 0 without an object (-###, --help, a "compiler" that is not one)
            return b""  # check_object reports it


def check_object(data: bytes, info: CompilerInfo) -> bytes:
    """``data`` when it is an ELF object; otherwise a CompilationError naming the compiler."""
    if not data.startswith(b"\x7fELF"):
        raise CompilationError(
            "%s produced no ELF object (%d bytes of output)" % (info.path, len(data)),
            compiler=info.identity,
        )
    return data


def compile_c(source: str, *, extra_flags: Sequence[str] = (), compiler: Optional[str] = None) -> bytes:
    """Compile C source to relocatable ELF object bytes (clang via pipes, gcc via a temp dir)."""
    info = find_compiler(compiler=compiler)
    flags = compiler_flags(info, extra_flags)
    if info.family == "clang":
        data = _compile_via_pipe(info, "c", source, flags)
    else:
        data = _compile_via_tempdir(info, "c", source, flags)
    return check_object(data, info)


def compile_ir(ir_text: str, *, extra_flags: Sequence[str] = ()) -> bytes:
    """Compile LLVM IR text (svod's ``Llvm`` CPU backend) to ELF object bytes; clang only."""
    info = find_compiler(need_clang=True)
    # IR carries its own semantics: C-language flags would only warn.
    flags = ["-O2", "-fPIC", "-Wno-override-module", *extra_flags]
    return check_object(_compile_via_pipe(info, "ir", ir_text, flags), info)


def source_bytes(source: Any, what: str) -> bytes:
    """C source text as UTF-8; a non-string or text with lone surrogates is a CompilationError."""
    if not isinstance(source, str):
        raise CompilationError("%s must be a str of C source, got %s" % (what, type(source).__name__))
    try:
        return source.encode("utf-8")
    except UnicodeEncodeError as exc:  # e.g. "\udcff" from JSON: no encoding can hand it to a compiler
        raise CompilationError(
            "%s is not valid Unicode text (%s at position %d)" % (what, exc.reason, exc.start)
        ) from None


__all__ = [
    "COMPILE_TIMEOUT_S",
    "DEFAULT_FLAGS",
    "FAMILY_FLAGS",
    "family_flags",
    "check_object",
    "compile_c",
    "compile_ir",
    "compiler_flags",
    "offending_lines",
    "run_compiler",
    "source_bytes",
]
