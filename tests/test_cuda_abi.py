"""The ctypes binding of libcuda (svod_min.devices.cuda_api) checked against the real ``cuda.h``.

The binding is written by hand: exported symbol names, argument types, two
struct layouts and a block of integer constants. CI has no GPU, and the
stand-in driver the other tests load (``tests/fake_libcuda.c``) was written
by the same hands, so a wrong argtype, offset or value would never show up
there - on a real driver it means corrupted arguments or memory. The toolkit
header is the independent reference: these tests preprocess ``cuda.h`` and
compile small C programs against it with the host C compiler, then compare
what the compiler says with what ctypes says.

Skipped when no ``cuda.h`` ($CUDA_HOME/include, $CUDA_PATH/include,
/usr/local/cuda/include) or no C compiler ($CC, cc, gcc, clang) is found. The
reference is whatever header is found: one older than the binding's newest
entry point (cuEventElapsedTime_v2 is CUDA 12.8) fails the name check, naming it.
"""

from __future__ import annotations

import ctypes
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Tuple

import pytest

from svod_min.devices import cuda_api
from svod_min.devices.cuda_api import CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, PROTOTYPES

# v1 entry points the table keeps on purpose, beside their current version, for drivers that lack it.
LEGACY_FALLBACKS = frozenset({"cuGraphAddKernelNode", "cuGraphExecKernelNodeSetParams", "cuEventElapsedTime"})

# Our ctypes structs and the cuda.h types they mirror exactly.
STRUCTS = ((CUDA_KERNEL_NODE_PARAMS, "CUDA_KERNEL_NODE_PARAMS_v2"), (CUDA_MEMCPY3D, "CUDA_MEMCPY3D"))
# cuda.h types that legacy entry points read as a leading part of one of our structs.
PREFIX_STRUCTS = ((CUDA_KERNEL_NODE_PARAMS, "CUDA_KERNEL_NODE_PARAMS_v1"),)

# Module-level ints with these prefixes are cuda.h constants (ATTR_X is CU_DEVICE_ATTRIBUTE_X, ...).
CONSTANT_PREFIXES = ("CUDA_SUCCESS", "CUDA_ERROR_", "ATTR_", "FUNC_ATTR_", "CU_")
CONSTANT_RENAMES = (("FUNC_ATTR_", "CU_FUNC_ATTRIBUTE_"), ("ATTR_", "CU_DEVICE_ATTRIBUTE_"))

NAMES = [name for name, _ in PROTOTYPES]
ARGTYPES = dict(PROTOTYPES)


# --- toolchain ---------------------------------------------------------------------------------------


def find_cuda_include() -> Optional[str]:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "include", "cuda.h")):
            return os.path.join(root, "include")
    return None


def find_c_compiler() -> Optional[List[str]]:
    env = shlex.split(os.environ.get("CC", ""))
    if env and shutil.which(env[0]):
        return env
    for name in ("cc", "gcc", "clang"):
        path = shutil.which(name)
        if path:
            return [path]
    return None


@dataclass(frozen=True)
class Toolchain:
    cc: List[str]
    include: str

    def _cc(self, args: Sequence[str], source: Path) -> str:
        proc = subprocess.run(self.cc + ["-I" + self.include] + list(args), capture_output=True, text=True)
        if proc.returncode:
            details = errors(proc.stderr, source)
            pytest.fail("%s on %s failed (exit %d):\n%s" % (self.cc[0], source, proc.returncode, details))
        return proc.stdout

    def preprocess(self, source: str, path: Path, *flags: str) -> str:
        path.write_text(source)
        return self._cc(["-E", *flags, str(path)], path)

    def run(self, source: str, tmp: Path, name: str) -> str:
        """Compile ``source`` to ``tmp/name`` (C11 + GNU builtins), run it, return its stdout."""
        src, exe = tmp / (name + ".c"), tmp / name
        src.write_text(source)
        self._cc(["-std=gnu11", "-w", "-o", str(exe), str(src)], src)
        return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def errors(stderr: str, source: Path) -> str:
    """The compiler's error lines, each followed by the line of ``source`` it points at."""
    lines, shown = source.read_text().splitlines(), []
    for line in stderr.splitlines():
        if "error" in line:
            shown.append(line)
            at = re.search(r"%s:(\d+):" % re.escape(source.name), line)
            if at and int(at.group(1)) <= len(lines):
                shown.append("    > " + lines[int(at.group(1)) - 1].strip())
    return "\n".join(shown)[:6000] or stderr[-6000:]


@pytest.fixture(scope="module")
def toolchain() -> Toolchain:
    include = find_cuda_include()
    if include is None:
        pytest.skip("no cuda.h in $CUDA_HOME/include, $CUDA_PATH/include or /usr/local/cuda/include")
    cc = find_c_compiler()
    if cc is None:
        pytest.skip("no C compiler ($CC, cc, gcc, clang) to read cuda.h with")
    return Toolchain(cc, include)


# --- the preprocessed header -------------------------------------------------------------------------


def api_name(symbol: str) -> str:
    """``cuMemAlloc_v2`` -> ``cuMemAlloc``: the name a C program writes."""
    return re.sub(r"_v\d+\Z", "", symbol)


@dataclass(frozen=True)
class Header:
    public: str  # cuda.h as an application sees it (no per-thread default stream)
    internal: str  # with __CUDA_API_VERSION_INTERNAL: the legacy v1 declarations are visible too
    expansion: Dict[str, str]  # API name -> what cuda.h's #define makes of it
    macros: Dict[str, str]  # every #define in effect after #include <cuda.h>
    enums: FrozenSet[str]  # typedef names of enum types

    def __str__(self) -> str:
        return "cuda.h (CUDA_VERSION %s)" % self.macros.get("CUDA_VERSION", "?")

    def has_constant(self, name: str) -> bool:
        """A macro, or an identifier of the preprocessed text (an enumerator)."""
        return name in self.macros or re.search(r"\b%s\b" % re.escape(name), self.public) is not None

    def declarations(self, symbol: str) -> List[str]:
        """The distinct parameter lists cuda.h declares for the exported ``symbol``."""
        text = self.internal if symbol in LEGACY_FALLBACKS else self.public
        pattern = r"\bCUresult\s+(?:__attribute__\s*\(\(.*?\)\)\s*)*%s\s*\(" % re.escape(symbol)
        found = {" ".join(balanced(text, m.end()).split()) for m in re.finditer(pattern, text)}
        return sorted(found)


def balanced(text: str, start: int) -> str:
    """The text from ``start`` up to the ``)`` closing the ``(`` just before it."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    raise AssertionError("unbalanced parentheses after offset %d" % start)


@pytest.fixture(scope="module")
def header(toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Header:
    """cuda.h preprocessed three ways; ``svod_expand__X X ;`` lines show what each API name becomes."""
    tmp, include = tmp_path_factory.mktemp("cuda_h"), "#include <cuda.h>\n"
    markers = "".join("svod_expand__%s %s ;\n" % (a, a) for a in sorted({api_name(n) for n in NAMES} | set(NAMES)))
    public = toolchain.preprocess(include + markers, tmp / "public.c", "-P")
    internal = toolchain.preprocess(include, tmp / "internal.c", "-P", "-D__CUDA_API_VERSION_INTERNAL")
    defines = toolchain.preprocess(include, tmp / "defines.c", "-dM")
    expansion = dict(re.findall(r"^svod_expand__(\w+)\s+(.*?)\s*;\s*$", public, re.M))
    macros = dict(re.findall(r"^#define[ \t]+(\w+)(?:\([^)]*\))?[ \t]*(.*)$", defines, re.M))
    enums = frozenset(re.findall(r"\btypedef\s+enum\s+\w*\s*(?:\{[^{}]*\})?\s*(\w+)\s*;", internal))
    return Header(public, internal, expansion, macros, enums)


# --- 1. symbol names ---------------------------------------------------------------------------------


def test_every_symbol_is_declared_by_cuda_h(header: Header) -> None:
    """Each table name is a function cuda.h declares (legacy v1 forms: with __CUDA_API_VERSION_INTERNAL)."""
    missing = [name for name in NAMES if not header.declarations(name)]
    assert not missing, "%s declares no function with these exported names: %s" % (header, ", ".join(missing))


def test_every_symbol_is_the_current_version(header: Header) -> None:
    """cuda.h's #define for each API name must give our symbol (cuMemAlloc -> cuMemAlloc_v2)."""
    problems = [p for p in (version_problem(name, header.expansion) for name in NAMES) if p]
    stale = sorted(LEGACY_FALLBACKS - set(NAMES))
    problems += ["%s is listed as a legacy fallback but is not in PROTOTYPES" % name for name in stale]
    assert not problems, "%s:\n%s" % (header, "\n".join(problems))


def version_problem(name: str, expansion: Dict[str, str]) -> Optional[str]:
    api = api_name(name)
    current = expansion.get(api, "?")
    if name not in LEGACY_FALLBACKS:
        if current == name:
            return None
        return "%s: a call to %s compiles to %s, not %s (an outdated entry point?)" % (name, api, current, name)
    if current == name:
        return "%s is listed as a legacy fallback but is cuda.h's current %s" % (name, api)
    if current not in ARGTYPES:
        return "%s is a legacy fallback, but its current version %s is not in PROTOTYPES" % (name, current)
    return None


# --- 2. argument lists -------------------------------------------------------------------------------

_TYPE_WORDS = frozenset("void char short int long float double signed unsigned _Bool const volatile".split())
_QUALIFIERS = frozenset("const volatile restrict __restrict struct enum union".split())
# __builtin_classify_type: 1 integer, 2 char, 3 enum, 4 boolean, 5 pointer, 8 real, 12 record, 13 union.
_C_KINDS = {1: "int", 2: "int", 3: "int", 4: "int", 5: "pointer", 8: "float", 12: "struct", 13: "struct"}


@dataclass(frozen=True)
class CType:
    """One value as far as the ABI goes: kind ('pointer', 'int', 'float', 'struct'), size, signedness."""

    kind: str
    size: int
    signed: bool = False

    def __str__(self) -> str:
        if self.kind == "pointer":
            return "a pointer"
        sign = ("signed " if self.signed else "unsigned ") if self.kind == "int" else ""
        return "%s%d-byte %s" % (sign, self.size, self.kind)


def is_pointer_type(t: Any) -> bool:
    """``POINTER(T)`` (the only argtypes whose pointee the tests also compare)."""
    return isinstance(t, type) and issubclass(t, ctypes._Pointer)  # type: ignore[attr-defined]


def ctypes_ctype(t: Any) -> CType:
    size = ctypes.sizeof(t)
    if t in (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_wchar_p) or is_pointer_type(t):
        return CType("pointer", size)
    if issubclass(t, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        return CType("pointer", size)
    if issubclass(t, (ctypes.Structure, ctypes.Union)):
        return CType("struct", size)
    if t in (ctypes.c_float, ctypes.c_double, ctypes.c_longdouble):
        return CType("float", size, True)
    return CType("int", size, t(-1).value < 0)


def split_params(params: str) -> List[str]:
    """A C parameter list split at its top-level commas; ``(void)`` is no parameter."""
    parts, depth, current = [], 0, ""
    for ch in params:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return [] if parts in ([""], ["void"]) else parts


def param_name(param: str) -> Optional[str]:
    """``const CUgraphNode *dependencies`` -> ``dependencies``; None for an unnamed parameter."""
    match = re.search(r"\(\s*\*\s*(\w+)\s*\)", param) or re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*\Z", param)
    if match is None or match.group(1) in _TYPE_WORDS or len(re.findall(r"\w+", param)) < 2:
        return None
    return match.group(1)


@dataclass(frozen=True)
class Param:
    """One parameter as cuda.h declares it, beside our argtype for it."""

    symbol: str
    index: int
    text: str
    argtype: Any

    @property
    def name(self) -> str:
        return param_name(self.text) or "?"

    def type_words(self) -> List[str]:
        """The identifiers naming its type (``const CUjit_option *options`` -> ``[CUjit_option]``)."""
        return [w for w in re.findall(r"\w+", self.text) if w != self.name and w not in _QUALIFIERS]

    def is_enum(self, header: Header, pointee: bool) -> bool:
        """Whether the (pointed-to) type is an enum. C makes an enum compatible with its underlying
        integer type and gcc's __builtin_classify_type sees it promoted, so no C expression tells
        them apart: the typedef name is looked up among the header's ``typedef enum``s."""
        words = self.type_words()
        stars = self.text.count("*")
        return len(words) == 1 and words[0] in header.enums and stars == (1 if pointee else 0)

    def as_local(self) -> str:
        """The declaration as a local variable: ``T a[]`` becomes ``T (*a)``, as C adjusts a parameter."""
        name = re.escape(self.name)
        return re.sub(r"\b%s\s*\[[^\]]*\]" % name, "(*%s)" % self.name, self.text, count=1)

    def __str__(self) -> str:
        return "%s argument %d (%s)" % (self.symbol, self.index, self.text)


def collect_params(header: Header) -> Tuple[List[Param], List[str]]:
    """Every parameter of every table entry cuda.h declares, and the entries whose count differs."""
    params, problems = [], []
    for symbol in NAMES:
        argtypes = ARGTYPES[symbol]
        for decl in header.declarations(symbol):
            texts = split_params(decl)
            if len(texts) != len(argtypes):
                problems.append("%s: cuda.h declares %d parameters (%s), PROTOTYPES has %d"
                                % (symbol, len(texts), decl, len(argtypes)))  # fmt: skip
            for index, (text, argtype) in enumerate(zip(texts, argtypes)):
                if param_name(text) is None:
                    problems.append("%s: cannot probe the unnamed parameter %d (%s)" % (symbol, index, text))
                else:
                    params.append(Param(symbol, index, text, argtype))
    return params, problems


PROBE_PRELUDE = r"""
int printf(const char *, ...);
#define SVOD_SIGNED(x) _Generic((x), signed char: 1, short: 1, int: 1, long: 1, long long: 1, \
                                char: ((char)-1 < 0), default: 0)
#define SVOD_DESCRIBE(tag, x) \
    printf("%s %d %d %d\n", tag, __builtin_classify_type(x), (int)sizeof(x), SVOD_SIGNED(x))
int main(void) {
"""


def probe_params(params: List[Param], header: Header, toolchain: Toolchain, tmp: Path) -> Dict[str, CType]:
    """What the compiler says of parameter ``k`` (key ``"k"``) and, for POINTER(T) argtypes, of ``*p`` (``"k*"``).

    Each parameter becomes a local variable in a block of its own; sizeof, _Generic and
    __builtin_classify_type never evaluate it. Compiled against the preprocessed header, so no
    macro touches the parameter text again (the internal text also has the v1 structs). A
    POINTER(T) argtype for a C pointer to void or to an opaque struct (a handle) does not
    compile: the failure quotes the block, which names the entry and argument.
    """
    body = []
    for k, p in enumerate(params):
        describe = 'SVOD_DESCRIBE("%d", %s);' % (k, p.name)
        if is_pointer_type(p.argtype):
            describe += ' SVOD_DESCRIBE("%d*", *%s);' % (k, p.name)
        body.append("    { %s; %s }  /* %s */" % (p.as_local(), describe, p))
    out = toolchain.run(header.internal + PROBE_PRELUDE + "\n".join(body) + "\n    return 0;\n}\n", tmp, "params")
    result = {}
    for key, kind, size, signed in (line.split() for line in out.splitlines()):
        result[key] = CType(_C_KINDS.get(int(kind), "type class %s" % kind), int(size), signed == "1")
    return result


def type_problem(c: CType, ours: CType, enum: bool) -> Optional[str]:
    mismatch = c.kind != ours.kind or (c.kind != "pointer" and c.size != ours.size)
    if mismatch or (c.kind == "int" and not enum and c.signed != ours.signed):
        return "C has %s, ctypes %s" % (c, ours)
    return None


def arg_problem(p: Param, value: CType, pointee: Optional[CType], header: Header) -> Optional[str]:
    problem = type_problem(value, ctypes_ctype(p.argtype), p.is_enum(header, pointee=False))
    if problem:
        return "%s: %s" % (p, problem)
    if pointee is None:
        return None
    problem = type_problem(pointee, ctypes_ctype(p.argtype._type_), p.is_enum(header, pointee=True))
    if problem and not reads_a_prefix(p, pointee):
        return "%s, what it points to: %s" % (p, problem)
    return None


def reads_a_prefix(p: Param, pointee: CType) -> bool:
    """A legacy entry point may take the v1 struct that leads ours (see test_legacy_structs_lead_ours)."""
    if p.symbol not in LEGACY_FALLBACKS or pointee.kind != "struct" or pointee.size > ctypes.sizeof(p.argtype._type_):
        return False
    return any(p.argtype._type_ is ours and p.type_words() == [c_name] for ours, c_name in PREFIX_STRUCTS)


def test_argument_lists_match_cuda_h(header: Header, toolchain: Toolchain, tmp_path: Path) -> None:
    """Count, and per parameter: pointer or not, scalar size and signedness (enums: size only), pointee."""
    params, problems = collect_params(header)
    c = probe_params(params, header, toolchain, tmp_path)
    for k, p in enumerate(params):
        problems.append(arg_problem(p, c["%d" % k], c.get("%d*" % k), header) or "")
    problems = [line for line in problems if line]
    assert not problems, "argument lists that differ from cuda.h:\n" + "\n".join(problems)


# --- 3. struct layouts -------------------------------------------------------------------------------

STRUCT_PRELUDE = r"""
#include <stddef.h>
#include <stdio.h>
#include <cuda.h>
#define SVOD_SIZE(T) printf("%s . %d %d\n", #T, (int)sizeof(T), (int)_Alignof(T))
#define SVOD_FIELD(T, f) printf("%s %s %d %d\n", #T, #f, (int)offsetof(T, f), (int)sizeof(((T *)0)->f))
int main(void) {
"""


Layout = Dict[Tuple[str, str], Tuple[int, int]]


def c_layout(toolchain: Toolchain, tmp: Path, name: str, fields: Dict[str, Sequence[str]]) -> Layout:
    """``{(C type, field): (offset, size)}`` and ``{(C type, "."): (sizeof, alignof)}`` from the compiler."""
    body = ["    SVOD_SIZE(%s);" % t for t in fields]
    body += ["    SVOD_FIELD(%s, %s);" % (t, f) for t, names in fields.items() for f in names]
    out = toolchain.run(STRUCT_PRELUDE + "\n".join(body) + "\n    return 0;\n}\n", tmp, name)
    return {(t, f): (int(a), int(b)) for t, f, a, b in (line.split() for line in out.splitlines())}


def layout_problems(ours: Any, c_name: str, c: Layout, fields: Sequence[str]) -> List[str]:
    problems = []
    for field in fields:
        mine = (getattr(ours, field).offset, getattr(ours, field).size)
        if c[(c_name, field)] != mine:
            problems.append("%s.%s: cuda.h has offset %d size %d, ctypes %s offset %d size %d"
                            % (c_name, field, *c[(c_name, field)], ours.__name__, *mine))  # fmt: skip
    return problems


def field_names(ours: Any) -> List[str]:
    return [f[0] for f in ours._fields_]


def field_end(ours: Any, field: str) -> int:
    return getattr(ours, field).offset + getattr(ours, field).size


def test_struct_layouts_match_cuda_h(toolchain: Toolchain, tmp_path: Path) -> None:
    """sizeof, alignment and every field's offset and size of each ctypes struct equal cuda.h's."""
    c = c_layout(toolchain, tmp_path, "layout", {c_name: field_names(ours) for ours, c_name in STRUCTS})
    problems = []
    for ours, c_name in STRUCTS:
        mine = (ctypes.sizeof(ours), ctypes.alignment(ours))
        if c[(c_name, ".")] != mine:
            problems.append("sizeof/alignof(%s) is %d/%d in cuda.h, ctypes %s has %d/%d"
                            % (c_name, *c[(c_name, ".")], ours.__name__, *mine))  # fmt: skip
        problems += layout_problems(ours, c_name, c, field_names(ours))
    assert not problems, "\n".join(problems)


def test_legacy_structs_lead_ours(toolchain: Toolchain, tmp_path: Path) -> None:
    """The v1 structs legacy entry points read are exactly the leading fields of ours."""
    sizes = c_layout(toolchain, tmp_path, "sizes", {c_name: () for _, c_name in PREFIX_STRUCTS})
    fields, problems = {}, []
    for ours, c_name in PREFIX_STRUCTS:
        size, align = sizes[(c_name, ".")]
        fields[c_name] = [f for f in field_names(ours) if field_end(ours, f) <= size]
        end = max([field_end(ours, f) for f in fields[c_name]] or [0])
        if -(-end // align) * align != size:
            problems.append("%s (%d bytes) is more than the leading fields %s of %s"
                            % (c_name, size, fields[c_name], ours.__name__))  # fmt: skip
    c = c_layout(toolchain, tmp_path, "prefix", fields)
    for ours, c_name in PREFIX_STRUCTS:
        problems += layout_problems(ours, c_name, c, fields[c_name])
    assert not problems, "\n".join(problems)


# --- 4. constants ------------------------------------------------------------------------------------


def our_constants() -> Dict[str, int]:
    """Every cuda.h constant the module defines, found by name so a new one is checked too."""
    return {k: v for k, v in sorted(vars(cuda_api).items()) if type(v) is int and k.startswith(CONSTANT_PREFIXES)}


def c_constant_name(name: str) -> str:
    for ours, theirs in CONSTANT_RENAMES:
        if name.startswith(ours):
            return theirs + name[len(ours):]
    return name


CONSTANT_PRELUDE = r"""
#include <stdint.h>
#include <stdio.h>
#include <cuda.h>
#define SVOD_SIGNED(x) _Generic((x), signed char: 1, short: 1, int: 1, long: 1, long long: 1, default: 0)
#define SVOD_VALUE(name, x) printf("%s %d %lld %llu\n", name, SVOD_SIGNED(x), (long long)(intptr_t)(x), \
                                   (unsigned long long)(uintptr_t)(x))
int main(void) {
"""


def test_constants_match_cuda_h(header: Header, toolchain: Toolchain, tmp_path: Path) -> None:
    """Every CUDA_ERROR_*, ATTR_*, FUNC_ATTR_*, CU_* int equals its cuda.h enumerator or macro."""
    ours = our_constants()
    known = {n for n in ours if header.has_constant(c_constant_name(n))}
    problems = ["%s: %s has no %s" % (n, header, c_constant_name(n)) for n in ours if n not in known]
    body = ['    SVOD_VALUE("%s", %s);' % (n, c_constant_name(n)) for n in sorted(known)]
    out = toolchain.run(CONSTANT_PRELUDE + "\n".join(body) + "\n    return 0;\n}\n", tmp_path, "constants")
    for name, signed, as_signed, as_unsigned in (line.split() for line in out.splitlines()):
        value = int(as_signed) if signed == "1" else int(as_unsigned)
        if value != ours[name]:
            problems.append("%s = %d, but cuda.h's %s is %d" % (name, ours[name], c_constant_name(name), value))
    assert not problems, "\n".join(problems)
