"""A batch job as one translation unit: one compiler run, its object cut per source.

A compiler process costs ~10-30 ms to start and set up its first function,
against a few ms to compile a small kernel inside a unit that is already
running (gcc's cc1 takes one file; clang's cc1 takes many but pays its
per-unit set-up for each). So the eligible sources of a job are compiled
together as one unit, into one object, and :mod:`.object_split` cuts that
object back into one object per source. Both compilers take this path;
only the flags differ (:data:`UNIT_FLAGS`).

Keeping the sources apart inside one unit:

* every name a source *defines* at file scope is renamed with a per-source
  suffix (``#define name name__svuN__``) for its part of the unit, and the
  suffix is removed again from that source's object, so each object has
  the symbol names :func:`compile_c` would give it;
* the sources' ``#include`` lines are hoisted to the top of the unit, so
  a header is read once and never under a renaming;
* conditionals and pragmas are allowed inside function bodies only; a
  source with any other preprocessor directive, or that spells the suffix
  itself, is not eligible (the caller compiles it alone);
* an object the cut refuses (a section no single source owns, a reference
  from one source into another's) falls back: for gcc to cutting the unit's
  assembly by owner (gcc's shared constant pool ``.LC`` copied into every
  piece that uses it), which knows gcc's assembly only; for clang, and for
  assembly that cannot be cut either, to one compile per source.

Anything the unit cannot handle falls back; it never guesses.
"""

from __future__ import annotations

import os
import re
from typing import AbstractSet, Dict, List, Optional, Sequence, Set, Tuple

from .object_split import split_object
from .probe import CompilerInfo
from .run import run_compiler, source_bytes

# Each function and datum in a section of its own, so the unit's object can be cut per source
# (object_split). gcc: identical functions of two sources must not be folded into one (it would make
# one piece call into another). clang -O2 folds none (its MergeFunctions pass is off unless asked
# for); its address-significance table (.llvm_addrsig, a non-allocated section naming symbols of every
# source) is left out: the loader does not need it and the cut does not take it.
UNIT_FLAGS: Dict[str, Tuple[str, ...]] = {
    "gcc": ("-fno-ipa-icf", "-ffunction-sections", "-fdata-sections"),
    "clang": ("-ffunction-sections", "-fdata-sections", "-fno-addrsig"),
}
SUFFIX = "__svu%d__"
_SUFFIX_RE = re.compile(r"__svu(\d+)__")
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w*)(.*)$", re.MULTILINE)
_TOKEN = re.compile(
    r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|[A-Za-z_]\w*|\d[\w.]*|\S""",
    re.DOTALL,
)
_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "asm typeof _Bool _Complex _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert _Thread_local".split()
)
_DECL_END = frozenset(("=", ";", ",", "[", "{", ")"))


# Flags whose output the cut does not understand (debug info, profiling, dumps...): compile alone.
_ALONE_FLAGS = (
    "-g",
    "-flto",
    "-fprofile",
    "-M",
    "-save-temps",
    "-fsanitize",
    "-pg",
    "-fdump",
    "-fopenmp",
    "-fsection-anchors",
    "-fcallgraph-info",
    "-Wa,",
    "-x",
    "-S",
    "-E",
    "-emit-llvm",
    "-fembed-bitcode",
    "-Xclang",
    "-mllvm",
    "-fmerge-functions",
    "-fcoverage",
    "-ftime-trace",
    "-fxray",
)


def flags_allow_unit(flags: Sequence[str]) -> bool:
    """True unless a flag changes the compiler's output in a way the cut does not handle."""
    return not any(f.startswith(_ALONE_FLAGS) and f != "-g0" for f in flags)


# Allowed inside function bodies only: a conditional there cannot hide a file-scope definition, and a
# pragma there is loop-local (`#pragma clang loop ...`, `#pragma GCC unroll`) or refused by gcc.
_IN_BODY = frozenset(("if", "ifdef", "ifndef", "elif", "else", "endif", "pragma"))


def unit_ready(source: str) -> bool:
    """True when ``source`` can share a unit.

    Its directives are ``#include`` lines at file scope, and conditionals
    and pragmas inside function bodies only (there every branch defines the
    same file-scope names, so the renaming is right whichever branch is
    taken, and a pragma applies to the next loop).
    """
    if "__svu" in source or "\\\n" in source:
        return False
    depth, done = 0, 0
    for match in _DIRECTIVE.finditer(source):
        for tok in _TOKEN.findall(source, done, match.start()):
            depth += (tok == "{") - (tok == "}")
        done = match.end()
        kind = match.group(1)
        if not (kind == "include" and depth == 0 or kind in _IN_BODY and depth > 0):
            return False
    return True


def _tokens(source: str) -> List[str]:
    body = _DIRECTIVE.sub("", source)
    return [t for t in _TOKEN.findall(body) if not t.startswith(("//", "/*"))]


def _close(tokens: List[str], i: int) -> int:
    """Index just past the bracket group that opens at ``tokens[i]``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    want, depth = [pairs[tokens[i]]], 1
    i += 1
    while i < len(tokens) and depth:
        if tokens[i] in pairs:
            want.append(pairs[tokens[i]])
            depth += 1
        elif tokens[i] == want[-1]:
            want.pop()
            depth -= 1
        i += 1
    return i


def _is_definition(tokens: List[str], after: int) -> bool:
    """After a function's parameter list: a body follows (past attributes and asm labels)."""
    i = after
    while i < len(tokens) and (tokens[i].startswith("__") or tokens[i] in ("asm",)):
        i += 1
        if i < len(tokens) and tokens[i] == "(":
            i = _close(tokens, i)
    return i < len(tokens) and tokens[i] == "{"


def defined_names(source: str) -> Set[str]:
    """Names ``source`` defines at file scope: functions with a body, variables, typedefs, tags."""
    tokens = _tokens(source)
    names: Set[str] = set()
    extern = False
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in (";", "}"):
            extern = False
        elif tok == "extern":
            extern = True
        ident = (tok[0].isalpha() or tok[0] == "_") and tok not in _KEYWORDS and not tok.startswith("__")
        if ident and nxt == "(":
            end = _close(tokens, i + 1)
            if _is_definition(tokens, end):
                names.add(tok)
                i = _close(tokens, end + _skip_to_brace(tokens, end))
                extern = False
                continue
            i = end
            continue
        if ident and nxt in _DECL_END and not extern and nxt != ")":
            names.add(tok)
        if tok in ("(", "[", "{"):
            i = _close(tokens, i)  # nothing inside a bracket group is at file scope
            continue
        i += 1
    return names


def _skip_to_brace(tokens: List[str], i: int) -> int:
    j = i
    while j < len(tokens) and tokens[j] != "{":
        j += 1
    return j - i


def flag_macros(flags: Sequence[str]) -> Set[str]:
    """Names the command line defines or undefines (``-DNAME=...``, ``-D NAME``, ``-UNAME``)."""
    names: Set[str] = set()
    for flag, nxt in zip(flags, [*flags[1:], ""]):
        if flag in ("-D", "-U"):
            flag = flag + nxt
        if flag.startswith(("-D", "-U")) and len(flag) > 2:
            names.add(re.split(r"[=(]", flag[2:], maxsplit=1)[0])
    return names


def build_unit(sources: Dict[int, str], macros: AbstractSet[str] = frozenset()) -> str:
    """One C unit holding every source, each with its defined names suffixed by its index.

    ``macros`` (the command line's, see :func:`flag_macros`) are never renamed: a ``#define``
    of ours would replace them.
    """
    includes: List[str] = []
    parts: List[str] = []
    for index, source in sources.items():
        for match in _DIRECTIVE.finditer(source):
            line = match.group(0).strip()
            if match.group(1) == "include" and line not in includes:
                includes.append(line)
        names = sorted(defined_names(source) - macros)
        parts.extend("#define %s %s%s" % (n, n, SUFFIX % index) for n in names)
        parts.append('#line 1 "k%d.c"' % index)
        parts.append(_DIRECTIVE.sub(lambda m: "" if m.group(1) == "include" else m.group(0), source))
        parts.extend("#undef %s" % n for n in names)
    return "\n".join(includes + parts) + "\n"


# --- cutting the unit's assembly per source ----------------------------------------------------

_SECTION = re.compile(r"^\s*(\.text|\.data|\.bss|\.section\s.*)$")
_ALIGN = re.compile(r"^\s*\.(p2align|balign|align)\b")
_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):")
_SYMBOL_DIRECTIVE = re.compile(
    r"^\s*\.(globl|global|local|type|size|comm|lcomm|weak|hidden|protected|internal|set)\s+([\w.$]+)"
)
_POOL_DATA = re.compile(
    r"^\s*\.(long|quad|value|short|word|byte|string|ascii|asciz|zero|float|double|4byte|8byte|2byte)\b"
)
_POOL_LABEL = re.compile(r"^\.LC\d+$")
_LOCAL_REF = re.compile(r"(?<![\w.$])(\.L\w+)")
_UNSUPPORTED = re.compile(r"^\s*\.(previous|pushsection|popsection|subsection|symver|ident)\b")


class _Pieces:
    """Lines of the unit's assembly, sorted to the source (or the constant pool) that owns them."""

    def __init__(self) -> None:
        self.lines: Dict[int, List[str]] = {}
        self.last_section: Dict[int, str] = {}
        self.pool: Dict[str, List[str]] = {}

    def add(self, owner: int, section: str, line: str) -> None:
        out = self.lines.setdefault(owner, [])
        if self.last_section.get(owner) != section:
            out.append("\t" + section)
            self.last_section[owner] = section
        out.append(line)


def _owner(name: str) -> Optional[int]:
    found = _SUFFIX_RE.search(name)
    return int(found.group(1)) if found else None


def _full_sections(lines: List[str]) -> Dict[str, str]:
    """Section name -> its directive with attributes: gcc names a section's flags only the first
    time, which may be in another source's piece, and as refuses a piece that first sees it bare."""
    full: Dict[str, str] = {}
    for line in lines:
        stripped = line.strip()
        if stripped.startswith(".section") and "," in stripped:
            full.setdefault(stripped.split(",", 1)[0].split()[1], stripped)
    return full


def _cut(asm: str) -> Optional[_Pieces]:
    pieces = _Pieces()
    lines = asm.splitlines()
    full = _full_sections(lines)
    section = ".text"
    owner: Optional[int] = None
    pending: List[str] = []
    pool: Optional[List[str]] = None
    for line in lines:
        stripped = line.strip()
        if not stripped or stripped.startswith(".file") or stripped.startswith(".section\t.note.GNU-stack"):
            continue
        if _UNSUPPORTED.match(line):
            return None
        if _SECTION.match(line):
            words = stripped.split()
            section = full.get(words[1], stripped) if words[0] == ".section" and len(words) == 2 else stripped
            pool = None
            continue
        label = _LABEL.match(line)
        if label and _POOL_LABEL.match(label.group(1)):
            pool = pieces.pool.setdefault(label.group(1), ["\t" + section, *pending, line])
            pending = []
            continue
        if pool is not None and (_POOL_DATA.match(line) and not pending):
            pool.append(line)
            continue
        if _ALIGN.match(line):
            pending.append(line)
            continue
        pool = None
        symbol = _SYMBOL_DIRECTIVE.match(line)
        name = (
            symbol.group(2) if symbol else (label.group(1) if label and not label.group(1).startswith(".L") else None)
        )
        if name is not None:
            owner = _owner(name)
            if owner is None:
                return None  # a symbol no source's renaming covers: cannot be placed
        if owner is None:
            return None
        for held in pending:
            pieces.add(owner, section, held)
        pending = []
        pieces.add(owner, section, line)
    return pieces


def _with_pool(lines: List[str], pool: Dict[str, List[str]]) -> Optional[List[str]]:
    """``lines`` plus the constant-pool entries they refer to; None if a local label is missing."""
    out = list(lines)
    defined = {m.group(1) for m in (_LABEL.match(line) for line in out) if m}
    scanned = 0
    while scanned < len(out):
        for ref in _LOCAL_REF.findall(out[scanned]):
            if ref in defined:
                continue
            entry = pool.get(ref)
            if entry is None:
                return None
            out.extend(entry)
            defined.add(ref)
        scanned += 1
    return out


def split_assembly(asm: str, indices: Sequence[int]) -> Optional[Dict[int, str]]:
    """Index -> that source's assembly (names restored), or None when the unit cannot be cut safely."""
    pieces = _cut(asm)
    if pieces is None or set(pieces.lines) - set(indices):
        return None
    out: Dict[int, str] = {}
    for index in indices:
        lines = _with_pool(pieces.lines.get(index, []), pieces.pool)
        if lines is None:
            return None
        text = "\n".join(lines)
        if any(int(n) != index for n in _SUFFIX_RE.findall(text)):
            return None  # refers to another source's symbol
        text = text.replace(SUFFIX % index, "")
        out[index] = '\t.file\t"k%d.c"\n%s\n\t.section\t.note.GNU-stack,"",@progbits\n' % (index, text)
    return out


def _read_pieces(tmp: str, indices: Set[int]) -> Dict[int, bytes]:
    out: Dict[int, bytes] = {}
    for index in indices:
        with open(os.path.join(tmp, "k%d.o" % index), "rb") as fh:
            out[index] = fh.read()
    return out


def _cut_assembly(
    info: CompilerInfo, flags: List[str], tmp: str, unit_path: str, indices: List[int]
) -> Dict[int, bytes]:
    """gcc's fallback: the unit's assembly cut per source and assembled in one driver run; the objects built."""
    result = run_compiler(
        [info.path, "-S", "-pipe", *flags, *UNIT_FLAGS["gcc"], "-x", "c", unit_path, "-o", "-"], "", info, cwd=tmp
    )
    split = split_assembly(result.stdout.decode(errors="replace"), indices) if result.returncode == 0 else None
    if split is None:
        return {}
    for index, text in split.items():
        with open(os.path.join(tmp, "k%d.s" % index), "w") as fh:
            fh.write(text)
    files = ["k%d.s" % i for i in sorted(split)]
    assembled = run_compiler([info.path, "-c", *flags, "-x", "assembler", *files], "", info, cwd=tmp)
    return _read_pieces(tmp, set(split)) if assembled.returncode == 0 else {}


def compile_unit(info: CompilerInfo, flags: List[str], tmp: str, sources: Dict[int, str]) -> Dict[int, bytes]:
    """Compile ``sources`` (index -> text) as one unit, in ``tmp``; index -> object for the sources built.

    One driver run compiles the unit to one object (clang: one process;
    gcc: cc1 piped into as), which is cut per source. An empty dict means
    nothing was built (the unit failed to compile or to be cut): the caller
    compiles those sources one by one, which also gives each failing source
    its own diagnostics.
    """
    unit_flags = UNIT_FLAGS.get(info.family)
    if unit_flags is None:
        return {}
    first, indices = min(sources), sorted(sources)
    unit_path, obj_path = os.path.join(tmp, "unit%d.c" % first), os.path.join(tmp, "unit%d.o" % first)
    with open(unit_path, "wb") as fh:
        fh.write(source_bytes(build_unit(sources, flag_macros(flags)), "the batch unit"))
    cmd = [info.path, "-c", "-pipe", *flags, *unit_flags, "-x", "c", unit_path, "-o", obj_path]
    if run_compiler(cmd, "", info, cwd=tmp).returncode != 0:
        return {}
    with open(obj_path, "rb") as fh:
        pieces = split_object(fh.read(), SUFFIX, indices)
    if pieces is not None:
        return pieces
    # The assembly cut reads gcc's assembly only; clang's sources go one by one.
    return _cut_assembly(info, flags, tmp, unit_path, indices) if info.family == "gcc" else {}


__all__ = [
    "SUFFIX",
    "UNIT_FLAGS",
    "build_unit",
    "compile_unit",
    "defined_names",
    "flag_macros",
    "flags_allow_unit",
    "split_assembly",
    "unit_ready",
]
