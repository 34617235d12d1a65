"""Elementwise ops: library kernels where shapes match and the library has the op, generated C otherwise
(broadcasting, fused activations, ops the library lacks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from ..activations import ACTIVATIONS, activation
from ..ctext import flt
from ..frontend.ir import Graph, Node
from ..frontend.passes import AFFINE, activation_params_of
from ..frontend.table import ANY, one_of, register
from ..kernels.arith import COMPARISONS, DTYPES, EVERY, FLOATS, INTEGERS, LOGIC, NUMERIC, SIGNED, UNSIGNED, Arith
from ..kernels.elementwise import elementwise
from .lowering import F32, Lowering


@dataclass(frozen=True)
class Unary:
    """A unary op that is not an activation: its C expression (``{x}`` the value, ``{alpha}``... its float
    attributes as literals, with their defaults in ``attrs``) and the library kernel that runs it alone, if any."""

    c: str
    attrs: Tuple[Tuple[str, float], ...] = ()
    library: str = ""


#: The unary ops besides the activations. Adding one: an entry here (its attributes register with it) and its test.
UNARY: Dict[str, Unary] = {
    "Exp": Unary("svod_expf({x})", library="exp"),
    "Log": Unary("svod_logf({x})", library="log"),
    "Sqrt": Unary("__builtin_sqrtf({x})", library="sqrt"),
    "Neg": Unary("(-{x})", library="neg"),
    "Abs": Unary("__builtin_fabsf({x})", library="abs"),
    "Reciprocal": Unary("(1.0f / {x})"),
    "Floor": Unary("floorf({x})"),
    "Ceil": Unary("ceilf({x})"),
    "Erf": Unary("svod_erff({x})"),
    "Sign": Unary("({x} > 0.0f ? 1.0f : ({x} < 0.0f ? -1.0f : ({x} == {x} ? 0.0f : {x})))"),  # -0.0 gives 0
    "Softsign": Unary("({x} / (1.0f + __builtin_fabsf({x})))"),
    "Softplus": Unary("({x} > 20.0f ? {x} : svod_logf(1.0f + svod_expf({x})))"),
    "Round": Unary("nearbyintf({x})"),
    "Elu": Unary("({x} < 0.0f ? {alpha} * (svod_expf({x}) - 1.0f) : {x})", (("alpha", 1.0),)),
    "Selu": Unary(
        "({gamma} * ({x} <= 0.0f ? {alpha} * (svod_expf({x}) - 1.0f) : {x}))",
        (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
    ),
    "ThresholdedRelu": Unary("({x} > {alpha} ? {x} : 0.0f)", (("alpha", 1.0),)),
    "Celu": Unary("({x} > 0.0f ? {x} : {alpha} * (svod_expf({x} / {alpha}) - 1.0f))", (("alpha", 1.0),)),
}
#: Unary ops the library runs alone (same shape, nothing fused): the activations it has, and UNARY's.
LIBRARY_UNARY = dict(
    {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}, **{op: u.library for op, u in UNARY.items() if u.library}
)

LIB_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min", "Sum": "add"}
C_BINARY = {
    "Add": "(x0 + x1)",
    "Sub": "(x0 - x1)",
    "Mul": "(x0 * x1)",
    "Div": "(x0 / x1)",
    "Pow": "powf(x0, x1)",
    "Max": "svod_maxf(x0, x1)",  # the library's NaN-propagating max and min
    "Min": "svod_minf(x0, x1)",
}


def activation_of(node: Node) -> Tuple[Optional[str], Dict[str, float]]:
    act = node.fused.get("activation")
    return (act[0], act[1]) if act else (None, {})


def apply_activation(L: Lowering, name: str, node: Node) -> None:
    """Apply ``node``'s fused activation to ``name`` in place (library relu, else generated C)."""
    kind, params = activation_of(node)
    if kind is None:
        return
    v = L.value(name)
    if kind == "Relu":
        L.library("relu", F32, [name, name], {"n": v.size})
        return
    L.source(elementwise(v.shape, [v.shape], activation(kind, params, "x0"), inplace=True, tag="act"), [name])


def unary_expr(node: Node, graph: Graph) -> str:
    """The C expression of unary ``node`` (an activation or an op of :data:`UNARY`) applied to ``x0``."""
    if node.op in ACTIVATIONS:
        return activation(node.op, activation_params_of(graph, node), "x0")
    spec = UNARY[node.op]
    return spec.c.format(x="x0", **{name: flt(float(node.attrs.get(name, default))) for name, default in spec.attrs})


#: Unary ops that run on every dtype their registration names (not float32 only): the others are float32 C text.
TYPED_UNARY = ("Abs", "Neg", "Sign")
#: The trigonometric and hyperbolic functions: libm's, in float (float32) or double (float64).
LIBM_UNARY = {
    "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos", "Atan": "atan",
    "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
}  # fmt: skip
#: UNARY's functions of libm that also run on float64, in double (as onnxruntime computes them there).
DOUBLE_UNARY = {
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Floor": "floor",
    "Ceil": "ceil",
    "Erf": "erf",
    "Round": "nearbyint",
}


def lower_typed_unary(L: Lowering, node: Node) -> None:
    """Abs, Neg, Sign on any numeric dtype and libm's functions on float32/float64 (:mod:`..kernels.arith`)."""
    x, out = node.inputs[0], node.outputs[0]
    d = DTYPES[L.value(x).dtype]
    A = Arith()
    if node.op in LIBM_UNARY:
        expr = A.libm_unary(LIBM_UNARY[node.op], d, "x0")
    elif node.op in DOUBLE_UNARY:
        expr = A.libm_unary(DOUBLE_UNARY[node.op], d, "x0")
    else:
        expr = A.unary(node.op, d, "x0")
    kernel = elementwise(
        L.value(out).shape, [L.value(x).shape], expr, tag=node.op.lower(), in_dtypes=[d], out_dtype=d, arith=A
    )
    L.source(kernel, [out, x])


register(LIBM_UNARY, "generated C (libm), float32 and float64", dtypes=("float32", "float64"))(lower_typed_unary)


def lower_unary(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    v = L.value(out)
    if v.dtype in HALVES and node.op not in TYPED_UNARY:  # float32's expression on float loads, rounded back
        d = DTYPES[v.dtype]
        kind, params = activation_of(node)
        expr = activation(kind, params, unary_expr(node, L.graph))
        L.source(
            elementwise(v.shape, [L.value(x).shape], expr, tag=node.op.lower(), in_dtypes=[d], out_dtype=d), [out, x]
        )
        return
    if v.dtype != "float32":
        lower_typed_unary(L, node)
        return
    library = LIBRARY_UNARY.get(node.op)
    if library and not node.fused:
        L.library(library, F32, [out, x], {"n": v.size})
        return
    kind, params = activation_of(node)
    expr = activation(kind, params, unary_expr(node, L.graph))
    L.source(elementwise(v.shape, [L.value(x).shape], expr, tag=node.op.lower()), [out, x])


#: float16 and bfloat16: the float32 unary ops (activations included) run on them in float, rounded once per op.
HALVES = ("float16", "bfloat16")
#: Unary ops whose registration is not the table's default (float attributes, "generated C" or the library's note).
_UNARY_REGISTRATION = {
    "Gelu": dict(note="generated C (erf or tanh form)", approximate=one_of("none", "tanh")),
    "Abs": dict(note="library kernel (same-shape float32); generated C for the other dtypes", dtypes=NUMERIC),
    "Neg": dict(note="library kernel (same-shape float32); generated C for the other dtypes", dtypes=FLOATS + SIGNED),
    "Sign": dict(note="generated C", dtypes=NUMERIC),
}


def _register_unary() -> None:
    """Every activation and UNARY op lowers through lower_unary, with the attributes its table entry names."""
    for op, attrs in [(op, a.attrs) for op, a in ACTIVATIONS.items()] + [(op, u.attrs) for op, u in UNARY.items()]:
        if op == "Clip":
            continue  # ops/clip.py registers Clip (every dtype, run-time bounds) and calls lower_unary where it fits
        options: Dict[str, Any] = {name: ANY for name, _ in attrs}
        options["note"] = "library kernel (same-shape)" if op in LIBRARY_UNARY else "generated C"
        options["dtypes"] = ("float32",) + HALVES + (("float64",) if op in DOUBLE_UNARY else ())
        options.update(_UNARY_REGISTRATION.get(op, {}))
        register([op], **options)(lower_unary)


_register_unary()


@register(
    ["PRelu"],
    "generated C (broadcasting slope); "
    "a constant scalar slope fuses as LeakyRelu, a constant per-channel one into a blocked Conv",
)
def lower_prelu(L: Lowering, node: Node) -> None:
    x, slope = node.inputs
    out = node.outputs[0]
    kernel = elementwise(
        L.value(out).shape, [L.value(x).shape, L.value(slope).shape], "(x0 < 0.0f ? x0 * x1 : x0)", tag="prelu"
    )
    L.source(kernel, [out, x, slope])


def _broadcast_check(graph: Graph, node: Node) -> Optional[str]:
    if node.op in ("Add", "Sub", "Mul", "Div") and node.attrs.get("broadcast", 1) == 1 and "axis" in node.attrs:
        shapes = [graph.values[n].shape for n in node.inputs]
        if (
            len(shapes[1])
            and len(shapes[1]) != len(shapes[0])
            and node.attrs["axis"] != len(shapes[0]) - len(shapes[1])
        ):
            return "legacy broadcast with axis=%d (only trailing alignment)" % node.attrs["axis"]
    return None


@register(
    ["Add", "Sub", "Mul", "Div"],
    "library kernel for equal shapes, generated C for broadcasting (+ fused activation); integers wrap, "
    "x / 0 = 0 (docs/onnx.md)",
    check=_broadcast_check,
    dtypes=NUMERIC,
    broadcast=ANY,
    axis=ANY,
    consumed_inputs=ANY,
)
@register(
    ["Pow"],
    "generated C (broadcasting); other than float32 ** float32: pow in double, converted as Cast",
    dtypes=("float32", "float64", "int32", "int64"),
)
@register(
    ["Sum", "Mean"],
    "variadic, broadcasting; library add for a Sum of two equal float32 shapes",
    consumed_inputs=ANY,
    dtypes=FLOATS,
)
@register(
    ["Max", "Min"],
    "variadic, broadcasting; library max/min for two equal float32 shapes; NaN propagates",
    consumed_inputs=ANY,
    dtypes=NUMERIC,
)
def lower_nary(L: Lowering, node: Node) -> None:
    out = node.outputs[0]
    v = L.value(out)
    ins = [n for n in node.inputs if n]
    if node.op == "Pow" and any(L.value(n).dtype != "float32" for n in ins):
        lower_pow(L, node)
        return
    if v.dtype != "float32":
        lower_typed_nary(L, node, ins)
        return
    same = all(L.value(n).shape == v.shape for n in ins)
    if len(ins) == 2 and same and node.op in LIB_BINARY and not node.fused:
        L.library(LIB_BINARY[node.op], F32, [out] + ins, {"n": v.size})
        return
    if len(ins) == 2 and same and node.op in ("Add", "Sum") and activation_of(node)[0] == "Relu":
        L.library("add_relu", F32, [out] + ins, {"n": v.size})
        return
    expr = "x0"
    for k in range(1, len(ins)):
        op = "Add" if node.op in ("Sum", "Mean") else node.op
        expr = C_BINARY[op].replace("x1", "x%d" % k).replace("x0", "(%s)" % expr)  # x1 first: expr holds x1
    if node.op == "Mean":
        expr = "(%s) * (1.0f / %s)" % (expr, flt(float(len(ins))))  # onnxruntime's: times the reciprocal
    kind, params = activation_of(node)
    L.source(
        elementwise(v.shape, [L.value(n).shape for n in ins], activation(kind, params, expr), tag="ew"), [out] + ins
    )


def lower_typed_nary(L: Lowering, node: Node, ins: List[str], fmod: int = 0) -> None:
    """A variadic op on a dtype other than float32 (:mod:`..kernels.arith`). float16/bfloat16 compute the whole op
    in float and round once, and Mean multiplies by 1/n, as onnxruntime does."""
    out = node.outputs[0]
    v = L.value(out)
    d = DTYPES[v.dtype]
    A = Arith()
    op = "Add" if node.op in ("Sum", "Mean") else node.op
    expr = "x0"
    for k in range(1, len(ins)):
        expr = A.binary(op, d, expr, "x%d" % k, fmod)
    if node.op == "Mean":
        expr = "(%s * ((%s)1 / (%s)%d))" % (expr, d.compute, d.compute, len(ins))
    if d.name in HALVES:  # a fused activation (only float types have them): in float, before the one rounding
        kind, params = activation_of(node)
        expr = activation(kind, params, expr)
    shapes = [L.value(n).shape for n in ins]
    kernel = elementwise(v.shape, shapes, expr, tag=node.op.lower(), in_dtypes=[d] * len(ins), out_dtype=d, arith=A)
    L.source(kernel, [out] + ins)


def lower_pow(L: Lowering, node: Node) -> None:
    """Pow with a float64 or integer base or exponent: libm's pow in double (as onnxruntime's std::pow), the result
    converted to the base's dtype as Cast converts (integers truncate; out of range as docs/onnx.md says)."""
    x, y = node.inputs
    out = node.outputs[0]
    dx, dy = DTYPES[L.value(x).dtype], DTYPES[L.value(y).dtype]
    A = Arith()
    expr = A.cast(DTYPES["float64"], dx, "%s((double)x0, (double)x1)" % A.libm("pow", "double", 2))
    kernel = elementwise(
        L.value(out).shape,
        [L.value(x).shape, L.value(y).shape],
        expr,
        tag="pow",
        in_dtypes=[dx, dy],
        out_dtype=dx,
        arith=A,
    )
    L.source(kernel, [out, x, y])


def _mod_check(graph: Graph, node: Node) -> Optional[str]:
    if graph.values[node.inputs[0]].dtype in FLOATS and not node.attrs.get("fmod", 0):
        return "fmod=0 on floating-point tensors (ONNX requires fmod=1 for them)"
    return None


@register(
    ["Mod"],
    "generated C (broadcasting); integers: fmod=0 takes the divisor's sign, fmod=1 the dividend's; x mod 0 = 0",
    check=_mod_check,
    dtypes=NUMERIC,
    fmod=one_of(0, 1),
)
def lower_mod(L: Lowering, node: Node) -> None:
    lower_typed_nary(L, node, list(node.inputs), int(node.attrs.get("fmod", 0)))


@register([AFFINE], "x * scale[c] + shift[c] (from BatchNormalization and per-channel Mul/Add)")
def lower_affine(L: Lowering, node: Node) -> None:
    x, scale, shift = node.inputs
    out = node.outputs[0]
    shape = L.value(x).shape
    channel = (shape[1],) + (1,) * (len(shape) - 2)
    s = L.const(L.graph.const(scale).reshape(channel), scale)
    t = L.const(L.graph.const(shift).reshape(channel), shift)
    kind, params = activation_of(node)
    kernel = elementwise(shape, [shape, channel, channel], activation(kind, params, "(x0 * x1 + x2)"), tag="affine")
    L.source(kernel, [out, x, s, t])


def _where_check(graph: Graph, node: Node) -> Optional[str]:
    c = graph.values[node.inputs[0]]
    return None if c.const is not None or c.dtype == "bool" else "the condition must be bool"


@register(["Where"], "generated C; bool condition", check=_where_check, dtypes=EVERY)
def lower_where(L: Lowering, node: Node) -> None:
    c, a, b = node.inputs
    out = node.outputs[0]
    cond = c
    if L.graph.is_const(c):
        cond = L.const(L.graph.const(c).astype(bool), c)
    shapes = [L.value(n).shape for n in (cond, a, b)]
    dtype = L.value(out).dtype
    d = DTYPES["uint16" if dtype in ("float16", "bfloat16") else dtype]  # a choice copies bits: NaNs keep theirs
    kernel = elementwise(
        L.value(out).shape, shapes, "(x0 ? x1 : x2)", tag="where", in_dtypes=[DTYPES["bool"], d, d], out_dtype=d
    )
    L.source(kernel, [out, cond, a, b])


@register(
    ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"],
    "generated C (broadcasting); bool result",
    dtypes=EVERY,
)
@register(["And", "Or", "Xor", "Not"], "generated C (broadcasting); bool result", dtypes=("float32", "bool"))
def lower_compare(L: Lowering, node: Node) -> None:
    runtime = [L.value(n).dtype for n in node.inputs if not L.graph.is_const(n)]
    dtype = runtime[0] if runtime else L.value(node.inputs[0]).dtype
    ins = []
    for name in node.inputs:
        if L.graph.is_const(name) and L.value(name).dtype != dtype:  # an int64 zero beside a float32 tensor, ...
            name = L.const(L.graph.const(name).astype(bool if dtype == "bool" else dtype), name)
        ins.append(name)
    d = DTYPES[dtype]
    if node.op in COMPARISONS:
        expr = "(x0 %s x1)" % COMPARISONS[node.op]
    elif node.op == "Not":
        expr = "(!x0)"
    else:
        expr = LOGIC[node.op].format(a="x0", b="x1")
    out = node.outputs[0]
    kernel = elementwise(
        L.value(out).shape,
        [L.value(n).shape for n in ins],
        expr,
        tag=node.op.lower(),
        in_dtypes=[d] * len(ins),
        out_dtype=DTYPES["bool"],
    )
    L.source(kernel, [out] + ins)


#: Bitwise ops on integers (C's operators on the element type) and float classification (bool results).
BITWISE = {"BitwiseAnd": "&", "BitwiseOr": "|", "BitwiseXor": "^"}


@register(["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"], "generated C (broadcasting)", dtypes=INTEGERS)
@register(
    ["BitShift"],
    "generated C (broadcasting); a shift by the width or more gives 0 (C leaves it undefined)",
    dtypes=UNSIGNED,
    direction=one_of("LEFT", "RIGHT"),
)
@register(["IsNaN"], "generated C; bool result", dtypes=FLOATS + ("bool",))
@register(["IsInf"], "generated C; bool result", dtypes=FLOATS + ("bool",), detect_negative=ANY, detect_positive=ANY)
def lower_bits(L: Lowering, node: Node) -> None:
    ins = list(node.inputs)
    out = node.outputs[0]
    d = DTYPES[L.value(ins[0]).dtype]
    result = d
    if node.op in BITWISE:
        expr = "(%s)(x0 %s x1)" % (d.c, BITWISE[node.op])
    elif node.op == "BitwiseNot":
        expr = "(%s)~x0" % d.c
    elif node.op == "BitShift":
        shift = "<<" if node.attrs["direction"] == "LEFT" else ">>"
        expr = "(x1 >= %d ? (%s)0 : (%s)((%s)x0 %s x1))" % (d.bits, d.c, d.c, d.wrap, shift)
    else:
        result = DTYPES["bool"]
        if node.op == "IsNaN":
            expr = "(x0 != x0)"
        else:
            neg, pos = int(node.attrs.get("detect_negative", 1)), int(node.attrs.get("detect_positive", 1))
            tests = (["x0 - x0 != x0 - x0 && x0 == x0 && x0 < 0"] if neg else []) + (
                ["x0 - x0 != x0 - x0 && x0 == x0 && x0 > 0"] if pos else []
            )
            expr = "(%s)" % (" || ".join("(%s)" % t for t in tests) or "0")
    kernel = elementwise(
        L.value(out).shape,
        [L.value(n).shape for n in ins],
        expr,
        tag=node.op.lower(),
        in_dtypes=[d] * len(ins),
        out_dtype=result,
    )
    L.source(kernel, [out] + ins)
