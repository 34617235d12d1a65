"""The ctypes bindings of libcuda and libnvrtc (svod_min.devices.cuda.driver, .nvrtc, .enums) checked against ``cuda.h``
and ``nvrtc.h``.

The bindings are written by hand: exported symbol names, argument and result
types, two struct layouts and a block of integer constants. CI has no GPU, and
the stand-in driver the other tests load (``tests/support/fake_libcuda.c``) was written
by the same hands, so a wrong argtype, offset or value would never show up
there - on a real driver it means corrupted arguments or memory. NVRTC does
run in CI, but a wrong argtype there can go unnoticed on x86-64 (an ``int``
passed where a ``size_t`` is read works until it does not). The headers are
the independent reference: these tests preprocess them and compile small C
programs against them with the host C compiler, then compare what the compiler
says with what ctypes says. Both headers go through the same code path, each
described by an :class:`Api`.

``cuda.h`` is looked for in $CUDA_HOME/include, $CUDA_PATH/include and
/usr/local/cuda/include. ``nvrtc.h`` is looked for beside the libnvrtc the
binding loads ($SVOD_NVRTC_LIBRARY or ``find_nvrtc()``; ``<lib dir>/../include``
in the toolkit and in pip's nvidia wheels), then in those toolkit include
directories. A header that is missing, or no C compiler ($CC, gcc, cc,
clang), skips that header's tests. The reference is whatever header is found:
one older than the binding's newest entry point (cuEventElapsedTime_v2 is
CUDA 12.8) fails the name check, naming it.
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
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

import pytest
from support.cuda_emu import find_cc

from svod_min.devices import cuda
from svod_min.devices.cuda import (
    CUDA_KERNEL_NODE_PARAMS,
    CUDA_MEMCPY3D,
    DRIVER_API,
    NVRTC_PROTOTYPES,
    NVRTC_RESTYPES,
    PROTOTYPES,
    enums,
    nvrtc,
)

# v1 entry points the table keeps on purpose, beside their current version, for drivers that lack it.
LEGACY_FALLBACKS = frozenset(symbol for proto in DRIVER_API for symbol in proto.symbols[1:])

# Our ctypes structs and the cuda.h types they mirror exactly.
STRUCTS = ((CUDA_KERNEL_NODE_PARAMS, "CUDA_KERNEL_NODE_PARAMS_v2"), (CUDA_MEMCPY3D, "CUDA_MEMCPY3D"))
# cuda.h types that legacy entry points read as a leading part of one of our structs.
PREFIX_STRUCTS = ((CUDA_KERNEL_NODE_PARAMS, "CUDA_KERNEL_NODE_PARAMS_v1"),)

# Module-level ints with these prefixes are cuda.h constants (ATTR_X is CU_DEVICE_ATTRIBUTE_X, ...).
CONSTANT_PREFIXES = ("CUDA_SUCCESS", "CUDA_ERROR_", "ATTR_", "FUNC_ATTR_", "CU_")
CONSTANT_RENAMES = (("FUNC_ATTR_", "CU_FUNC_ATTRIBUTE_"), ("ATTR_", "CU_DEVICE_ATTRIBUTE_"))


# --- finding the headers -----------------------------------------------------------------------------


def find_cuda_include(header: str = "cuda.h") -> Optional[str]:
    """The toolkit include directory that holds ``header``."""
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.isfile(os.path.join(root, "include", header)):
            return os.path.join(root, "include")
    return None


def find_nvrtc_include() -> Optional[str]:
    """The ``nvrtc.h`` of the libnvrtc the binding loads (``<lib dir>/../include``), else the toolkit's."""
    for library in (os.environ.get(nvrtc.NVRTC_ENV, "").strip(), cuda.find_nvrtc() or ""):
        if not os.path.dirname(library):  # unset, or a bare soname from the loader path
            continue
        for directory in (os.path.dirname(library), os.path.dirname(os.path.realpath(library))):
            include = os.path.normpath(os.path.join(directory, os.pardir, "include"))
            if os.path.isfile(os.path.join(include, "nvrtc.h")):
                return include
    return find_cuda_include("nvrtc.h")


# --- the two APIs ------------------------------------------------------------------------------------


@dataclass(eq=False)
class Api:
    """One library's part of the binding, and the header that is its reference."""

    header: str  # "cuda.h"
    where: str  # where find_include looks, for the skip reason
    find_include: Callable[[], Optional[str]]
    table: str  # the name of the prototype table in svod_min.devices.cuda, for messages
    prototypes: Tuple[Tuple[str, Tuple[Any, ...]], ...]  # (exported name, argtypes)
    restype: Any  # what the binding sets as restype ...
    restypes: Dict[str, Any]  # ... unless named here
    legacy: FrozenSet[str] = frozenset()  # entries declared only with internal_flags
    internal_flags: Tuple[str, ...] = ()  # preprocessor flags that make the legacy declarations visible
    version_macro: Optional[str] = None
    constants: Any = None  # the module whose module-level ints named with constant_prefixes are the header's
    constant_prefixes: Tuple[str, ...] = ()
    constant_renames: Tuple[Tuple[str, str], ...] = ()  # (our prefix, the header's prefix)

    @property
    def names(self) -> List[str]:
        return [name for name, _ in self.prototypes]

    @property
    def argtypes(self) -> Dict[str, Tuple[Any, ...]]:
        return dict(self.prototypes)

    def restype_of(self, symbol: str) -> Any:
        return self.restypes.get(symbol, self.restype)


CUDA = Api(
    header="cuda.h",
    where="in $CUDA_HOME/include, $CUDA_PATH/include or /usr/local/cuda/include",
    find_include=find_cuda_include,
    table="PROTOTYPES",
    prototypes=PROTOTYPES,
    restype=cuda.CUresult,
    restypes={},
    legacy=LEGACY_FALLBACKS,
    internal_flags=("-D__CUDA_API_VERSION_INTERNAL",),
    version_macro="CUDA_VERSION",
    constants=enums,
    constant_prefixes=CONSTANT_PREFIXES,
    constant_renames=CONSTANT_RENAMES,
)
NVRTC = Api(
    header="nvrtc.h",
    where="beside libnvrtc (<lib dir>/../include of $%s or find_nvrtc()) nor in the toolkit include "
    "directories ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda)" % nvrtc.NVRTC_ENV,
    find_include=find_nvrtc_include,
    table="NVRTC_PROTOTYPES",
    prototypes=NVRTC_PROTOTYPES,
    restype=cuda.nvrtcResult,
    restypes=NVRTC_RESTYPES,
    constants=nvrtc,
    constant_prefixes=("NVRTC_",),
)
APIS = (CUDA, NVRTC)


# --- toolchain ---------------------------------------------------------------------------------------


def find_c_compiler() -> Optional[List[str]]:
    env = shlex.split(os.environ.get("CC", ""))
    if env and shutil.which(env[0]):
        return env
    path = find_cc()
    return [path] if path else None


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


def make_toolchain(api: Api) -> Toolchain:
    include = api.find_include()
    if include is None:
        pytest.skip("no %s %s" % (api.header, api.where))
    cc = find_c_compiler()
    if cc is None:
        pytest.skip("no C compiler ($CC, gcc, cc, clang) to read %s with" % api.header)
    return Toolchain(cc, include)


@pytest.fixture(scope="module", params=APIS, ids=lambda api: api.header)
def api(request: pytest.FixtureRequest) -> Api:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def toolchain(api: Api) -> Toolchain:
    return make_toolchain(api)


@pytest.fixture(scope="module")
def cuda_toolchain() -> Toolchain:
    return make_toolchain(CUDA)


# --- the preprocessed header -------------------------------------------------------------------------


def api_name(symbol: str) -> str:
    """``cuMemAlloc_v2`` -> ``cuMemAlloc``: the name a C program writes."""
    return re.sub(r"_v\d+\Z", "", symbol)


@dataclass(frozen=True)
class Declaration:
    result: str  # the return type, attributes and storage class dropped: "CUresult", "const char *"
    params: str  # the parameter list, whitespace normalized


@dataclass(frozen=True)
class Header:
    api: Api
    include: str  # the directory it was read from
    public: str  # the header as an application sees it (cuda.h: no per-thread default stream)
    internal: str  # with api.internal_flags (cuda.h: the legacy v1 declarations are visible too)
    expansion: Dict[str, str]  # API name -> what the header's #define makes of it
    macros: Dict[str, str]  # every #define in effect after the #include
    enums: FrozenSet[str]  # typedef names of enum types

    def __str__(self) -> str:
        version = self.api.version_macro
        if version:
            return "%s (%s %s, in %s)" % (self.api.header, version, self.macros.get(version, "?"), self.include)
        return "%s (in %s)" % (self.api.header, self.include)

    def has_constant(self, name: str) -> bool:
        """A macro, or an identifier of the preprocessed text (an enumerator)."""
        return name in self.macros or re.search(r"\b%s\b" % re.escape(name), self.public) is not None

    def declarations(self, symbol: str) -> List[Declaration]:
        """The distinct declarations the header makes of the exported ``symbol``."""
        text = self.internal if symbol in self.api.legacy else self.public
        found = set()
        for m in re.finditer(r"(?<![\w$])%s\s*\(" % re.escape(symbol), text):
            result = result_type(text, m.start())
            if result:
                found.add(Declaration(result, " ".join(balanced(text, m.end()).split())))
        return sorted(found, key=lambda d: (d.result, d.params))


def balanced(text: str, start: int) -> str:
    """The text from ``start`` up to the ``)`` closing the ``(`` just before it."""
    depth = 1
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i]
    raise AssertionError("unbalanced parentheses after offset %d" % start)


_NOT_TYPE = frozenset("extern static inline __inline __inline__ __extension__".split())


def result_type(text: str, end: int) -> Optional[str]:
    """The return type written before the function name at ``end`` (back to the previous declaration),
    without ``__attribute__((...))`` or storage class; None where the name is not declared there
    (inside parentheses, or with nothing before it)."""
    depth, start = 0, end
    while start > 0 and not (depth == 0 and text[start - 1] in ";{}"):
        depth += {")": 1, "(": -1}.get(text[start - 1], 0)
        if depth < 0:
            return None
        start -= 1
    decl = text[start:end]
    while True:
        attr = re.search(r"\b(?:__attribute__|__declspec)\s*\(", decl)
        if attr is None:
            break
        decl = decl[: attr.start()] + " " + decl[attr.end() + len(balanced(decl, attr.end())) + 1 :]
    words = [w for w in re.findall(r"\w+|\*", decl) if w not in _NOT_TYPE]
    return re.sub(r"\* (?=\*)", "*", " ".join(words)) or None


@pytest.fixture(scope="module")
def header(api: Api, toolchain: Toolchain, tmp_path_factory: pytest.TempPathFactory) -> Header:
    """The header preprocessed three ways; ``svod_expand__X X ;`` lines show what each API name becomes."""
    tmp, include = tmp_path_factory.mktemp(api.header.replace(".", "_")), "#include <%s>\n" % api.header
    names = api.names
    markers = "".join("svod_expand__%s %s ;\n" % (a, a) for a in sorted({api_name(n) for n in names} | set(names)))
    public = toolchain.preprocess(include + markers, tmp / "public.c", "-P")
    internal = toolchain.preprocess(include, tmp / "internal.c", "-P", *api.internal_flags)
    defines = toolchain.preprocess(include, tmp / "defines.c", "-dM")
    expansion = dict(re.findall(r"^svod_expand__(\w+)\s+(.*?)\s*;\s*$", public, re.M))
    macros = dict(re.findall(r"^#define[ \t]+(\w+)(?:\([^)]*\))?[ \t]*(.*)$", defines, re.M))
    enums = frozenset(re.findall(r"\btypedef\s+enum\s+\w*\s*(?:\{[^{}]*\})?\s*(\w+)\s*;", internal))
    return Header(api, toolchain.include, public, internal, expansion, macros, enums)


# --- 1. symbol names ---------------------------------------------------------------------------------


def test_every_symbol_is_declared_by_the_header(api: Api, header: Header) -> None:
    """Each table name is a function the header declares (cuda.h's legacy v1: with __CUDA_API_VERSION_INTERNAL)."""
    missing = [name for name in api.names if not header.declarations(name)]
    assert not missing, "%s declares no function with these exported names: %s" % (header, ", ".join(missing))


def test_every_symbol_is_the_current_version(api: Api, header: Header) -> None:
    """The header's #define for each API name must give our symbol (cuMemAlloc -> cuMemAlloc_v2)."""
    problems = [p for p in (version_problem(name, api, header.expansion) for name in api.names) if p]
    stale = sorted(api.legacy - set(api.names))
    problems += ["%s is listed as a legacy fallback but is not in %s" % (name, api.table) for name in stale]
    assert not problems, "%s:\n%s" % (header, "\n".join(problems))


def version_problem(name: str, api: Api, expansion: Dict[str, str]) -> Optional[str]:
    short = api_name(name)
    current = expansion.get(short, "?")
    if name not in api.legacy:
        if current == name:
            return None
        return "%s: a call to %s compiles to %s, not %s (an outdated entry point?)" % (name, short, current, name)
    if current == name:
        return "%s is listed as a legacy fallback but is %s's current %s" % (name, api.header, short)
    if current not in api.argtypes:
        return "%s is a legacy fallback, but its current version %s is not in %s" % (name, current, api.table)
    return None


# --- 2. argument lists and results -------------------------------------------------------------------

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
class Value:
    """A parameter (``index`` >= 0) or the result (``index`` -1) as the header declares it, beside
    our ctypes type for it (None: a parameter past the end of our argtypes)."""

    symbol: str
    index: int
    text: str  # "const CUgraphNode *dependencies"; for the result the type alone: "const char *"
    ours: Any

    @property
    def name(self) -> str:
        return "" if self.index < 0 else param_name(self.text) or "?"

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
        if self.index < 0:
            return "%s result (%s)" % (self.symbol, self.text)
        return "%s argument %d (%s)" % (self.symbol, self.index, self.text)


@dataclass(frozen=True)
class Call:
    """One declaration of a table entry: every parameter, and the result of a call with them."""

    symbol: str
    params: Tuple[Value, ...]
    result: Value

    def __str__(self) -> str:
        return "%s %s(%s)" % (self.result.text, self.symbol, ", ".join(p.text for p in self.params))


def collect_calls(header: Header) -> Tuple[List[Call], List[str]]:
    """Every declaration of every table entry, and the problems found without a compiler:
    a parameter count that differs from ours, an unnamed parameter (that declaration is not probed)."""
    api, calls, problems = header.api, [], []
    for symbol in api.names:
        argtypes = api.argtypes[symbol]
        for decl in header.declarations(symbol):
            texts = split_params(decl.params)
            if len(texts) != len(argtypes):
                problems.append(
                    "%s: %s declares %d parameters (%s), %s has %d"
                    % (symbol, api.header, len(texts), decl.params, api.table, len(argtypes))
                )
            unnamed = [
                "%s: cannot probe the unnamed parameter %d (%s)" % (symbol, index, text)
                for index, text in enumerate(texts)
                if param_name(text) is None
            ]
            if unnamed:
                problems += unnamed
                continue
            params = tuple(Value(symbol, i, t, argtypes[i] if i < len(argtypes) else None) for i, t in enumerate(texts))
            calls.append(Call(symbol, params, Value(symbol, -1, decl.result, api.restype_of(symbol))))
    return calls, problems


PROBE_PRELUDE = r"""
int printf(const char *, ...);
#define SVOD_SIGNED(x) _Generic((x), signed char: 1, short: 1, int: 1, long: 1, long long: 1, \
                                char: ((char)-1 < 0), default: 0)
#define SVOD_DESCRIBE(tag, x) \
    printf("%s %d %d %d\n", tag, __builtin_classify_type(x), (int)sizeof(x), SVOD_SIGNED(x))
int main(void) {
"""


def describe(key: str, value: Value, expr: str) -> str:
    """C statements printing what ``expr`` is (key ``key``) and, for a POINTER(T), what ``*expr`` is (``key*``)."""
    text = 'SVOD_DESCRIBE("%s", %s);' % (key, expr)
    if is_pointer_type(value.ours):
        text += ' SVOD_DESCRIBE("%s*", *(%s));' % (key, expr)
    return text


def probe_calls(calls: List[Call], header: Header, toolchain: Toolchain, tmp: Path) -> Dict[str, CType]:
    """What the compiler says of parameter ``j`` of call ``i`` (key ``"i.j"``), of its result (``"i.r"``)
    and, where ours is POINTER(T), of what it points to (``"i.j*"``, ``"i.r*"``).

    Each declaration becomes a block declaring its parameters as local variables and describing
    them and a call with them; sizeof, _Generic and __builtin_classify_type never evaluate them (the
    call is never made, nor linked). Compiled against the preprocessed header, so no macro touches
    the text again (the internal text also has the v1 structs). A POINTER(T) for a C pointer to void
    or to an opaque struct (a handle) does not compile: the failure quotes the block, which names
    the entry and the argument.
    """
    body = []
    for i, call in enumerate(calls):
        statements = [describe("%d.%d" % (i, j), p, p.name) for j, p in enumerate(call.params) if p.ours is not None]
        invocation = "%s(%s)" % (call.symbol, ", ".join(p.name for p in call.params))
        statements.append(describe("%d.r" % i, call.result, invocation))
        locals_ = "".join("%s; " % p.as_local() for p in call.params)
        body.append("    { %s%s }  /* %s */" % (locals_, " ".join(statements), call))
    out = toolchain.run(header.internal + PROBE_PRELUDE + "\n".join(body) + "\n    return 0;\n}\n", tmp, "calls")
    result = {}
    for key, kind, size, signed in (line.split() for line in out.splitlines()):
        result[key] = CType(_C_KINDS.get(int(kind), "type class %s" % kind), int(size), signed == "1")
    return result


def type_problem(c: CType, ours: CType, enum: bool) -> Optional[str]:
    mismatch = c.kind != ours.kind or (c.kind != "pointer" and c.size != ours.size)
    if mismatch or (c.kind == "int" and not enum and c.signed != ours.signed):
        return "C has %s, ctypes %s" % (c, ours)
    return None


def value_problem(v: Value, value: CType, pointee: Optional[CType], header: Header) -> Optional[str]:
    problem = type_problem(value, ctypes_ctype(v.ours), v.is_enum(header, pointee=False))
    if problem:
        return "%s: %s" % (v, problem)
    if pointee is None:
        return None
    problem = type_problem(pointee, ctypes_ctype(v.ours._type_), v.is_enum(header, pointee=True))
    if problem and not reads_a_prefix(v, pointee, header.api):
        return "%s, what it points to: %s" % (v, problem)
    return None


def reads_a_prefix(v: Value, pointee: CType, api: Api) -> bool:
    """A legacy entry point may take the v1 struct that leads ours (see test_legacy_structs_lead_ours)."""
    if v.symbol not in api.legacy or pointee.kind != "struct" or pointee.size > ctypes.sizeof(v.ours._type_):
        return False
    return any(v.ours._type_ is ours and v.type_words() == [c_name] for ours, c_name in PREFIX_STRUCTS)


def test_argument_lists_and_results_match_the_header(header: Header, toolchain: Toolchain, tmp_path: Path) -> None:
    """Count, and per parameter and result: pointer or not, scalar size and signedness (enums: size only), pointee."""
    calls, problems = collect_calls(header)
    c = probe_calls(calls, header, toolchain, tmp_path)
    for i, call in enumerate(calls):
        for j, p in enumerate(call.params):
            if p.ours is not None:
                problems.append(value_problem(p, c["%d.%d" % (i, j)], c.get("%d.%d*" % (i, j)), header) or "")
        problems.append(value_problem(call.result, c["%d.r" % i], c.get("%d.r*" % i), header) or "")
    problems = [line for line in problems if line]
    assert not problems, "%s: argument lists or results that differ:\n%s" % (header, "\n".join(problems))


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
            problems.append(
                "%s.%s: cuda.h has offset %d size %d, ctypes %s offset %d size %d"
                % (c_name, field, *c[(c_name, field)], ours.__name__, *mine)
            )
    return problems


def field_names(ours: Any) -> List[str]:
    return [f[0] for f in ours._fields_]


def field_end(ours: Any, field: str) -> int:
    return getattr(ours, field).offset + getattr(ours, field).size


def test_struct_layouts_match_cuda_h(cuda_toolchain: Toolchain, tmp_path: Path) -> None:
    """sizeof, alignment and every field's offset and size of each ctypes struct equal cuda.h's."""
    c = c_layout(cuda_toolchain, tmp_path, "layout", {c_name: field_names(ours) for ours, c_name in STRUCTS})
    problems = []
    for ours, c_name in STRUCTS:
        mine = (ctypes.sizeof(ours), ctypes.alignment(ours))
        if c[(c_name, ".")] != mine:
            problems.append(
                "sizeof/alignof(%s) is %d/%d in cuda.h, ctypes %s has %d/%d"
                % (c_name, *c[(c_name, ".")], ours.__name__, *mine)
            )
        problems += layout_problems(ours, c_name, c, field_names(ours))
    assert not problems, "\n".join(problems)


def test_legacy_structs_lead_ours(cuda_toolchain: Toolchain, tmp_path: Path) -> None:
    """The v1 structs legacy entry points read are exactly the leading fields of ours."""
    sizes = c_layout(cuda_toolchain, tmp_path, "sizes", {c_name: () for _, c_name in PREFIX_STRUCTS})
    fields, problems = {}, []
    for ours, c_name in PREFIX_STRUCTS:
        size, align = sizes[(c_name, ".")]
        fields[c_name] = [f for f in field_names(ours) if field_end(ours, f) <= size]
        end = max([field_end(ours, f) for f in fields[c_name]] or [0])
        if -(-end // align) * align != size:
            problems.append(
                "%s (%d bytes) is more than the leading fields %s of %s" % (c_name, size, fields[c_name], ours.__name__)
            )
    c = c_layout(cuda_toolchain, tmp_path, "prefix", fields)
    for ours, c_name in PREFIX_STRUCTS:
        problems += layout_problems(ours, c_name, c, fields[c_name])
    assert not problems, "\n".join(problems)


# --- 4. constants ------------------------------------------------------------------------------------


def our_constants(api: Api) -> Dict[str, int]:
    """Every constant of the header the module defines, found by name so a new one is checked too."""
    return {
        k: v for k, v in sorted(vars(api.constants).items()) if type(v) is int and k.startswith(api.constant_prefixes)
    }


def c_constant_name(name: str, api: Api) -> str:
    for ours, theirs in api.constant_renames:
        if name.startswith(ours):
            return theirs + name[len(ours) :]
    return name


CONSTANT_PRELUDE = r"""
#include <stdint.h>
#include <stdio.h>
#include <%s>
#define SVOD_SIGNED(x) _Generic((x), signed char: 1, short: 1, int: 1, long: 1, long long: 1, default: 0)
#define SVOD_VALUE(name, x) printf("%%s %%d %%lld %%llu\n", name, SVOD_SIGNED(x), (long long)(intptr_t)(x), \
                                   (unsigned long long)(uintptr_t)(x))
int main(void) {
"""


def test_constants_match_the_header(api: Api, header: Header, toolchain: Toolchain, tmp_path: Path) -> None:
    """Every module-level int named like a constant of the header (cuda.h: CUDA_ERROR_*, ATTR_*,
    FUNC_ATTR_*, CU_*; nvrtc.h: NVRTC_*) equals its enumerator or macro there."""
    ours = our_constants(api)
    if not ours:
        names = ", ".join(prefix + "*" for prefix in api.constant_prefixes)
        pytest.skip(
            "%s defines no %s constants (module-level ints named %s)" % (api.constants.__name__, api.header, names)
        )
    known = {n for n in ours if header.has_constant(c_constant_name(n, api))}
    problems = ["%s: %s has no %s" % (n, header, c_constant_name(n, api)) for n in ours if n not in known]
    body = ['    SVOD_VALUE("%s", %s);' % (n, c_constant_name(n, api)) for n in sorted(known)]
    source = CONSTANT_PRELUDE % api.header + "\n".join(body) + "\n    return 0;\n}\n"
    out = toolchain.run(source, tmp_path, "constants")
    for name, signed, as_signed, as_unsigned in (line.split() for line in out.splitlines()):
        value = int(as_signed) if signed == "1" else int(as_unsigned)
        if value != ours[name]:
            theirs = c_constant_name(name, api)
            problems.append("%s = %d, but %s's %s is %d" % (name, ours[name], api.header, theirs, value))
    assert not problems, "\n".join(problems)
