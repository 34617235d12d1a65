"""The elementwise op table, the C dtype table and the fused-expression renderer.

This module is the single source of elementwise semantics: codegen renders
the library's unary/binary/ternary/cast/fused kernels through
:func:`render_elementwise`, and :func:`svod_min.kernels.fused` uses the very
same function at run time. It is pure Python (no jinja2): the loop skeleton
it fills in was rendered from ``templates/c/elementwise.c.j2`` at build time
and ships as ``_generated/skeletons.py``.

Expression spec: a Python-syntax expression over input names, numeric
constants, ``+ - * /``, unary ``-``, one comparison (``< <= > >= == !=``,
giving 0/1) and calls of the ops in :data:`OPS`, e.g. ``relu(a*b+c)`` or
``where(x > 0, x, 0.1*x)``. Everything is computed in the math type of the
kernel's dtype (float for float16/bfloat16 storage).
"""

from __future__ import annotations

import ast
import hashlib
import re
import struct
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Mapping, Optional, Sequence, Set, Tuple

from ..error import KernelParamError

# --- dtypes as C sees them ------------------------------------------------------


@dataclass(frozen=True)
class CDType:
    """How one dtype is stored, loaded and computed on in the generated C."""

    name: str  # svod_min.dtypes name
    short: str  # suffix in entry points: f32, f16, ...
    storage: str  # C element type in memory
    math: str  # C type arithmetic happens in
    kind: str  # "float", "int" or "bool"
    sfx: str  # prelude function suffix: "f" (float), "" (double), "i" (int)
    load: str  # "{}" -> math value
    store: str  # math value -> storage
    itemsize: int

    @property
    def is_float(self) -> bool:
        return self.kind == "float"


C_DTYPES: Dict[str, CDType] = {
    d.name: d
    for d in (
        CDType("float32", "f32", "float", "float", "float", "f", "{}", "{}", 4),
        CDType("float64", "f64", "double", "double", "float", "", "{}", "{}", 8),
        CDType("float16", "f16", "svod_f16", "float", "float", "f", "svod_h2f({})", "svod_f2h({})", 2),
        CDType("bfloat16", "bf16", "svod_bf16", "float", "float", "f", "svod_bf2f({})", "svod_f2bf({})", 2),
        CDType("int32", "i32", "svod_i32", "svod_i32", "int", "i", "{}", "{}", 4),
        CDType("bool", "b8", "svod_u8", "svod_i32", "bool", "i", "({} != 0)", "(svod_u8)(({}) != 0)", 1),
    )
}
_DTYPE_ALIASES = {
    "f32": "float32",
    "float": "float32",
    "f64": "float64",
    "double": "float64",
    "f16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "i32": "int32",
    "int": "int32",
    "bool_": "bool",
}


def c_dtype(value: object) -> CDType:
    """A :class:`CDType` from a name, alias, svod_min DType or numpy dtype."""
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if isinstance(value, type) and getattr(value, "__module__", "") == "numpy":
        name = value.__name__
    key = name.strip().lower() if isinstance(name, str) else None
    key = _DTYPE_ALIASES.get(key, key) if key else None
    found = C_DTYPES.get(key) if key else None
    if found is None:
        raise KernelParamError(
            "dtype %r is not supported by the kernel library (supported: %s)" % (value, ", ".join(C_DTYPES))
        )
    return found


def c_literal(value: float, math: str) -> str:
    """``value`` as a C literal of the math type (exactly the float the C compiler would pick)."""
    if math == "svod_i32":
        if isinstance(value, float) and not value.is_integer():
            raise KernelParamError("constant %r is not an integer, but the kernel computes in int32" % (value,))
        if not -(2**31) <= int(value) < 2**31:
            raise KernelParamError("constant %r does not fit int32, the kernel's compute type" % (value,))
        return str(int(value))
    try:
        value = float(value)
    except OverflowError:
        raise KernelParamError("constant %r does not fit a double" % (value,)) from None
    if value != value or value in (float("inf"), float("-inf")):
        raise KernelParamError("constant %r is not finite" % (value,))
    if math == "float":
        try:
            rounded = struct.unpack("f", struct.pack("f", value))[0]
        except OverflowError:
            rounded = float("inf")
        if rounded in (float("inf"), float("-inf")):  # past FLT_MAX: the C compiler would make it inf
            raise KernelParamError("constant %r does not fit float32, the kernel's compute type" % (value,))
        text = "%.9g" % rounded
    else:
        text = repr(value)
    if not any(ch in text for ch in ".en"):
        text += ".0"
    return text + ("f" if math == "float" else "")


# --- the op table -----------------------------------------------------------------


@dataclass(frozen=True)
class Op:
    """One elementwise op: C text per math kind, ``{0}..`` operands, ``{s}`` prelude suffix."""

    name: str
    arity: int
    float_c: str
    int_c: Optional[str]  # None: float-only
    flops: int = 1
    doc: str = ""


OPS: Dict[str, Op] = {
    op.name: op
    for op in (
        Op("add", 2, "({0} + {1})", "(svod_i32)((svod_u32)({0}) + (svod_u32)({1}))", doc="a + b"),
        Op("sub", 2, "({0} - {1})", "(svod_i32)((svod_u32)({0}) - (svod_u32)({1}))", doc="a - b"),
        Op("mul", 2, "({0} * {1})", "(svod_i32)((svod_u32)({0}) * (svod_u32)({1}))", doc="a * b"),
        Op("div", 2, "({0} / {1})", None, doc="a / b (float only: int division by zero traps)"),
        Op("max", 2, "svod_max{s}({0}, {1})", "svod_maxi({0}, {1})", doc="numpy.maximum (nan propagates)"),
        Op("min", 2, "svod_min{s}({0}, {1})", "svod_mini({0}, {1})", doc="numpy.minimum (nan propagates)"),
        Op("neg", 1, "(-{0})", "(svod_i32)(0u - (svod_u32)({0}))", doc="-a"),
        Op("abs", 1, "svod_abs{s}({0})", "svod_absi({0})", doc="|a|"),
        Op("exp", 1, "svod_exp{s}({0})", None, 20, doc="e^a (polynomial, libm-free)"),
        Op("log", 1, "svod_log{s}({0})", None, 20, doc="natural log (polynomial, libm-free)"),
        Op("sqrt", 1, "svod_sqrt{s}({0})", None, doc="square root (one instruction)"),
        Op("rsqrt", 1, "svod_rsqrt{s}({0})", None, 2, doc="1 / sqrt(a)"),
        Op("relu", 1, "svod_relu{s}({0})", "svod_relui({0})", doc="max(a, 0); nan stays nan"),
        Op("gelu", 1, "svod_gelu{s}({0})", None, 30, doc="tanh-form gelu, computed as a*sigmoid(2u)"),
        Op("sigmoid", 1, "svod_sigmoid{s}({0})", None, 22, doc="1 / (1 + e^-a)"),
        Op("tanh", 1, "svod_tanh{s}({0})", None, 25, doc="tanh(a) via expm1"),
        Op("where", 3, "({0} ? {1} : {2})", "({0} ? {1} : {2})", doc="c ? a : b (c nonzero)"),
        Op("cast", 1, "{0}", "{0}", 0, doc="dtype conversion (C semantics; float->int truncates)"),
    )
}

_COMPARE = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
#: Ops a fused expression may call (``cast`` is expressed through dtypes instead).
EXPR_FUNCTIONS = tuple(sorted(n for n in OPS if n != "cast"))
_NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
_MAX_EXPR_CHARS = 4096
_MAX_NODES = 512
_MAX_DEPTH = 64  # also bounds the recursion of rendering


def _op_c(op: Op, math: CDType, args: Sequence[str]) -> str:
    template = op.int_c if math.kind != "float" else op.float_c
    if template is None:
        raise KernelParamError("op %r needs a float dtype, not %s" % (op.name, math.name))
    return template.format(*args, s=math.sfx)


# --- parsing fused expressions -------------------------------------------------------


@dataclass(frozen=True)
class ParsedExpr:
    """A validated expression: its AST, input names (first appearance), op count and the ops it calls."""

    text: str
    tree: ast.AST
    names: Tuple[str, ...]
    flops: int
    calls: FrozenSet[str] = frozenset()


def parse_expr(text: str) -> ParsedExpr:
    """Parse and validate a fused-expression spec (see the module docstring)."""
    if not isinstance(text, str) or not text.strip():
        raise KernelParamError("a fused expression must be a non-empty string, got %r" % (text,))
    if len(text) > _MAX_EXPR_CHARS:
        raise KernelParamError("fused expression is longer than %d characters" % _MAX_EXPR_CHARS)
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise KernelParamError("cannot parse fused expression %r: %s" % (text, exc.msg)) from None
    except (RecursionError, MemoryError, ValueError) as exc:  # absurd nesting, NUL bytes
        raise KernelParamError("cannot parse fused expression %r: %s" % (text, exc)) from None
    counter = [0]
    names: List[str] = []
    calls: Set[str] = set()
    try:
        flops = _check(tree, text, names, calls, counter, 0)
    except RecursionError:
        raise KernelParamError("fused expression is nested too deeply") from None
    if not names:
        raise KernelParamError("fused expression %r uses no input" % text)
    return ParsedExpr(text.strip(), tree, tuple(names), flops, frozenset(calls))


def _check(node: ast.AST, text: str, names: List[str], calls: Set[str], counter: List[int], depth: int) -> int:
    """Validate ``node`` recursively (reading order); collect input names and called ops; return flops."""
    counter[0] += 1
    if counter[0] > _MAX_NODES:
        raise KernelParamError("fused expression has more than %d nodes" % _MAX_NODES)
    if depth > _MAX_DEPTH:
        raise KernelParamError("fused expression is nested more than %d deep" % _MAX_DEPTH)
    if isinstance(node, ast.Name):
        if not _NAME_RE.match(node.id) or node.id in OPS:
            raise KernelParamError(
                "%r: input name %r must be lower-case [a-z][a-z0-9_]* and not an op name" % (text, node.id)
            )
        if node.id not in names:
            names.append(node.id)
        return 0
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return 0
    if isinstance(node, ast.Call):
        flops, children = _check_call(node, text), list(node.args)
        calls.add(node.func.id)  # type: ignore[attr-defined]  # a Name: _check_call made sure
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        flops, children = 1, [node.left, node.right]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        flops, children = int(isinstance(node.op, ast.USub)), [node.operand]
    elif isinstance(node, ast.Compare):
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            raise KernelParamError("%r: only single comparisons (a < b) are supported" % text)
        flops, children = 1, [node.left, node.comparators[0]]
    else:
        raise KernelParamError(
            "%r: %s is not allowed in a fused expression (use + - * /, comparisons, numbers, input names and %s)"
            % (text, type(node).__name__, ", ".join(EXPR_FUNCTIONS))
        )
    for child in children:
        flops += _check(child, text, names, calls, counter, depth + 1)
    return flops


def _check_call(node: ast.Call, text: str) -> int:
    fn = node.func.id if isinstance(node.func, ast.Name) else None
    op = OPS.get(fn) if fn in EXPR_FUNCTIONS else None
    if op is None:
        raise KernelParamError("%r: unknown function %r (known: %s)" % (text, fn, ", ".join(EXPR_FUNCTIONS)))
    if node.keywords or len(node.args) != op.arity:
        raise KernelParamError("%r: %s takes %d positional argument(s)" % (text, fn, op.arity))
    return op.flops


def _emit(node: ast.AST, math: CDType, values: Mapping[str, str]) -> str:
    """C text of ``node`` computed in ``math``'s type; ``values`` maps input -> C variable."""
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.Constant):
        return c_literal(node.value, math.math)
    if isinstance(node, ast.UnaryOp):
        inner = _emit(node.operand, math, values)
        return _op_c(OPS["neg"], math, [inner]) if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.BinOp):
        args = [_emit(node.left, math, values), _emit(node.right, math, values)]
        return _op_c(OPS[_BINOPS[type(node.op)]], math, args)
    if isinstance(node, ast.Compare):
        left, right = _emit(node.left, math, values), _emit(node.comparators[0], math, values)
        return "(%s)(%s %s %s)" % (math.math, left, _COMPARE[type(node.ops[0])], right)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return _op_c(OPS[node.func.id], math, [_emit(a, math, values) for a in node.args])


# --- rendering one elementwise kernel -------------------------------------------------


@dataclass(frozen=True)
class ElementwiseKernel:
    """One rendered elementwise kernel (a C function, BEGIN/END-delimited)."""

    entry: str
    expr: str
    function: str
    inputs: Tuple[Tuple[str, CDType], ...]
    out: CDType
    compute: CDType
    flops_per_item: int

    @property
    def bytes_per_item(self) -> int:
        return self.out.itemsize + sum(dt.itemsize for _, dt in self.inputs)


SKELETON_KEYS = ("@ENTRY@", "@PARAMS@", "@LOADS@", "@VALUE@", "@LINE_UNROLL@")
#: Before the loop over one 64-byte line of streamed output, for memory-bound expressions: clang
#: unrolls it and its SLP vectoriser keeps the line in registers up to the streaming store (rolled,
#: the line goes through a stack copy: ~10% of an add of 2^24 floats). Only where that pays and
#: SLP is sure to take it: no float16 value (its hand-written conversions defeat SLP) and no
#: polynomial op (compute-bound anyway; tanh's defeats SLP) -- otherwise the unrolled line would
#: run element by element.
LINE_UNROLL = "#if defined(__clang__)\n#pragma clang loop unroll(full)\n#endif"
_POLYNOMIAL_OPS = frozenset(op.name for op in OPS.values() if op.flops >= 20)


def _line_unroll(parsed: ParsedExpr, dtypes: Sequence[CDType]) -> str:
    """``LINE_UNROLL`` for a memory-bound expression without float16, else nothing."""
    if parsed.calls & _POLYNOMIAL_OPS or any(dt.name == "float16" for dt in dtypes):
        return ""
    return LINE_UNROLL


def _skeleton() -> str:
    from ._generated.skeletons import ELEMENTWISE  # generated: imported only when rendering

    return ELEMENTWISE


def elementwise_parts(
    expr: str,
    *,
    dtype: object = "float32",
    out_dtype: object = None,
    input_dtypes: Optional[Mapping[str, object]] = None,
    inputs: Optional[Sequence[str]] = None,
) -> Tuple[ParsedExpr, CDType, CDType, Tuple[Tuple[str, CDType], ...], str]:
    """Validate an elementwise spec: (parsed, compute, out, inputs, C value of ``out[i]``).

    The C value reads ``v_<name>`` locals (see :func:`load_line`) and is
    already converted to ``out``'s storage.
    """
    parsed = parse_expr(expr)
    compute = c_dtype(dtype)
    if compute.kind == "bool":
        raise KernelParamError("bool is a storage dtype only; compute in int32 or a float dtype")
    out = c_dtype(out_dtype if out_dtype is not None else dtype)
    order = _input_order(parsed, inputs)
    overrides = {k: c_dtype(v) for k, v in (input_dtypes or {}).items()}
    unknown = sorted(set(overrides) - set(order))
    if unknown:
        raise KernelParamError("input_dtypes names %s, which the expression does not use" % unknown)
    ins = tuple((name, overrides.get(name, compute)) for name in order)
    value = _emit(parsed.tree, compute, {name: "v_" + name for name in order})
    if out.math != compute.math and out.kind != "bool":  # bool tests != 0 in the compute type: 0.5 is true
        value = "(%s)(%s)" % (out.math, value)
    return parsed, compute, out, ins, out.store.format(value)


def render_elementwise(
    entry: str,
    expr: str,
    *,
    dtype: object = "float32",
    out_dtype: object = None,
    input_dtypes: Optional[Mapping[str, object]] = None,
    inputs: Optional[Sequence[str]] = None,
    skeleton: Optional[str] = None,
) -> ElementwiseKernel:
    """Render ``out[i] = expr(inputs[i]...)`` as a ``core_id``-threaded C function.

    ``dtype``: storage of the inputs and the compute type (its math type);
    ``out_dtype`` (default ``dtype``) and ``input_dtypes`` override storage
    per buffer; ``inputs`` fixes the buffer order (default: first appearance).
    """
    parsed, compute, out, ins, value = elementwise_parts(
        expr, dtype=dtype, out_dtype=out_dtype, input_dtypes=input_dtypes, inputs=inputs
    )
    fields = {
        "@ENTRY@": entry,
        "@PARAMS@": ", ".join(param_list(out, ins) + ["int n", "int core_id_count", "int core_id"]),
        "@LOADS@": "\n".join("        " + load_line(name, dt, compute) for name, dt in ins),
        "@VALUE@": value,
        "@LINE_UNROLL@": _line_unroll(parsed, (compute, out, *(d for _, d in ins))),
    }
    text = skeleton if skeleton is not None else _skeleton()
    for key in SKELETON_KEYS:
        text = text.replace(key, fields[key])
    return ElementwiseKernel(entry, parsed.text, text, ins, out, compute, parsed.flops)


def _input_order(parsed: ParsedExpr, inputs: Optional[Sequence[str]]) -> Tuple[str, ...]:
    if inputs is None:
        return parsed.names
    order = tuple(inputs)
    if sorted(order) != sorted(parsed.names) or len(set(order)) != len(order):
        raise KernelParamError(
            "inputs=%r must list each input of %r exactly once (%s)" % (list(order), parsed.text, list(parsed.names))
        )
    return order


def param_list(out: CDType, ins: Sequence[Tuple[str, CDType]], restrict: str = "restrict") -> List[str]:
    """C parameters ``out, in_<name>...`` (buffers only)."""
    parts = ["%s *%s out" % (out.storage, restrict)]
    parts += ["const %s *%s in_%s" % (dt.storage, restrict, name) for name, dt in ins]
    return parts


def load_line(name: str, dt: CDType, compute: CDType, index: str = "i") -> str:
    """``const T v_<name> = <load of in_<name>[index]>;`` in the compute type."""
    value = dt.load.format("in_%s[%s]" % (name, index))
    if dt.math != compute.math:
        value = "(%s)%s" % (compute.math, value)
    return "const %s v_%s = %s;" % (compute.math, name, value)


def fused_entry(
    expr: str, dtype: object, out_dtype: object, input_dtypes: Mapping[str, object], inputs: Optional[Sequence[str]]
) -> str:
    """A deterministic entry point name for a run-time fused kernel."""
    parsed = parse_expr(expr)
    key = "|".join(
        [
            ast.dump(parsed.tree),
            c_dtype(dtype).name,
            c_dtype(out_dtype if out_dtype is not None else dtype).name,
            ",".join("%s=%s" % (k, c_dtype(v).name) for k, v in sorted(input_dtypes.items())),
            ",".join(_input_order(parsed, inputs)),
        ]
    )
    return "svod_fused_" + hashlib.sha256(key.encode()).hexdigest()[:16]


__all__ = [
    "C_DTYPES",
    "CDType",
    "EXPR_FUNCTIONS",
    "ElementwiseKernel",
    "KernelParamError",
    "OPS",
    "Op",
    "ParsedExpr",
    "c_dtype",
    "c_literal",
    "elementwise_parts",
    "load_line",
    "param_list",
    "fused_entry",
    "parse_expr",
    "render_elementwise",
]
