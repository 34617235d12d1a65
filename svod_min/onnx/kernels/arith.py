"""Elementwise arithmetic with ONNX's semantics for every run-time dtype: how each dtype is stored, loaded and computed
in C, and the C expressions of the arithmetic, comparison and Cast ops on it.

Integers compute in their own type, wrapping on overflow: + - * and negation go through the unsigned type of at least
``int``'s width (signed overflow is undefined in C, and unsigned short * unsigned short promotes to a signed int that
can overflow). Division and modulo go through helpers (``templates/arith.c.j2``) that never trap: x / 0 and x mod 0
are 0, MIN / -1 wraps to MIN, x mod -1 is 0. float16 and bfloat16 load as float, compute in float and round back to
their format (round to nearest even) once per op (a variadic op's whole result once), as onnxruntime's CPU kernels
do; float64 computes in double. Comparisons give bool (0/1 bytes). Float -> integer Cast truncates toward zero; NaN
and out-of-range values give what onnxruntime gives on x86-64 (see :func:`Arith.cast`), where C leaves them
undefined."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Tuple

from .ckernel import render


@dataclass(frozen=True)
class DT:
    """A run-time dtype in generated C: its storage type, the type it computes in, how a stored element becomes a
    computed one (``load``: C text before and after the element) and back (``store``)."""

    name: str
    c: str
    compute: str
    kind: str  # "f" float, "s" signed integer, "u" unsigned integer, "b" bool
    bits: int
    load: Tuple[str, str] = ("", "")
    store: Tuple[str, str] = ("", "")

    @property
    def wrap(self) -> str:
        """The unsigned type an integer's + - * wrap in (at least int's width: no promotion to signed int)."""
        return "unsigned long long" if self.bits == 64 else "unsigned int"


DTYPES: Dict[str, DT] = {
    d.name: d
    for d in [
        DT("float32", "float", "float", "f", 32),
        DT("float64", "double", "double", "f", 64),
        DT("float16", "unsigned short", "float", "f", 16, ("svod_h2f(", ")"), ("svod_f2h(", ")")),
        DT("bfloat16", "unsigned short", "float", "f", 16, ("svod_bf2f(", ")"), ("svod_f2bf(", ")")),
        DT("int8", "signed char", "signed char", "s", 8),
        DT("int16", "short", "short", "s", 16),
        DT("int32", "int", "int", "s", 32),
        DT("int64", "long long", "long long", "s", 64),
        DT("uint8", "unsigned char", "unsigned char", "u", 8),
        DT("uint16", "unsigned short", "unsigned short", "u", 16),
        DT("uint32", "unsigned int", "unsigned int", "u", 32),
        DT("uint64", "unsigned long long", "unsigned long long", "u", 64),
        DT("bool", "unsigned char", "unsigned char", "b", 8),
    ]
}
FLOATS = ("float32", "float16", "bfloat16", "float64")
SIGNED = ("int8", "int16", "int32", "int64")
UNSIGNED = ("uint8", "uint16", "uint32", "uint64")
INTEGERS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTEGERS
EVERY = NUMERIC + ("bool",)

_LIMITS = {32: "2147483648.0", 64: "9223372036854775808.0"}
_WRAPPING = {"Add": "+", "Sub": "-", "Mul": "*"}
COMPARISONS = {"Equal": "==", "Less": "<", "Greater": ">", "LessOrEqual": "<=", "GreaterOrEqual": ">="}
LOGIC = {"And": "({a} && {b})", "Or": "({a} || {b})", "Xor": "(!{a} != !{b})"}
#: The float functions of Mod (fmod=1) and of the unary functions libm computes, by compute type.
LIBM_FLOAT = {"float": "f", "double": ""}


class Arith:
    """Builds one kernel's C expressions; collects the helpers (rendered by :meth:`helpers`) and libm prototypes
    they need."""

    def __init__(self) -> None:
        self._helpers: Dict[str, Dict[str, object]] = {}
        self.prototypes: List[str] = []

    def _helper(self, kind: str, name: str, **fields: object) -> str:
        if name not in self._helpers:
            self._helpers[name] = dict(kind=kind, name=name, **fields)
        return name

    def libm(self, fn: str, compute: str, arity: int) -> str:
        """The name of libm's ``fn`` for ``compute`` (float or double), its prototype added to the kernel's."""
        name = fn + LIBM_FLOAT[compute]
        proto = "%s %s(%s)" % (compute, name, ", ".join([compute] * arity))
        if proto not in self.prototypes:
            self.prototypes.append(proto)
        return name

    def helpers(self) -> str:
        """The C text of the helpers the expressions built so far call."""
        return render("arith.c.j2", helpers=list(self._helpers.values())) if self._helpers else ""

    def binary(self, op: str, d: DT, a: str, b: str, fmod: int = 0) -> str:
        """``a op b`` in ``d``'s compute type (Add Sub Mul Div Max Min Mod)."""
        if d.kind == "f":
            double = d.compute == "double"
            if op in _WRAPPING or op == "Div":
                return "(%s %s %s)" % (a, _WRAPPING.get(op, "/"), b)
            if op in ("Max", "Min"):  # NaN-propagating, as onnxruntime's
                return "svod_%s%s(%s, %s)" % (op.lower(), "" if double else "f", a, b)
            if op == "Mod":
                return "%s(%s, %s)" % (self.libm("fmod", d.compute, 2), a, b)
        elif d.kind in "su":
            if op in _WRAPPING:
                return "(%s)((%s)%s %s (%s)%s)" % (d.c, d.wrap, a, _WRAPPING[op], d.wrap, b)
            if op == "Max":
                return "(%s > %s ? %s : %s)" % (a, b, a, b)
            if op == "Min":
                return "(%s < %s ? %s : %s)" % (a, b, a, b)
            if op in ("Div", "Mod"):
                sign = "signed" if d.kind == "s" else "unsigned"
                floor = op == "Mod" and not fmod and d.kind == "s"
                name = "svod_%s%s_%s" % (op.lower(), "_floor" if floor else "", d.name)
                self._helper("%s_%s" % (op.lower(), sign), name, T=d.c, U=d.wrap, floor=floor)
                return "%s(%s, %s)" % (name, a, b)
        raise ValueError("no %s on %s" % (op, d.name))

    def unary(self, op: str, d: DT, x: str) -> str:
        """Abs, Neg or Sign of ``x`` in ``d``'s compute type."""
        if d.kind == "f":
            one = "1.0" if d.compute == "double" else "1.0f"
            return {
                "Abs": "__builtin_fabs%s(%s)" % ("" if d.compute == "double" else "f", x),
                "Neg": "(-%s)" % x,
                "Sign": "(%s > 0 ? %s : %s < 0 ? -%s : %s == %s ? 0 : %s)" % (x, one, x, one, x, x, x),  # NaN stays
            }[op]
        if op == "Abs":
            return (
                x
                if d.kind == "u"
                else "(%s)(%s < 0 ? (%s)0 - (%s)%s : (%s)%s)" % (d.c, x, d.wrap, d.wrap, x, d.wrap, x)
            )
        if op == "Neg":
            return "(%s)((%s)0 - (%s)%s)" % (d.c, d.wrap, d.wrap, x)
        return "(%s)((%s > 0) - (%s < 0))" % (d.c, x, x)

    def libm_unary(self, fn: str, d: DT, x: str) -> str:
        """libm's ``fn`` (sin, cos, ...) of ``x`` in float or double."""
        return "%s(%s)" % (self.libm(fn, d.compute, 1), x)

    def cast(self, src: DT, dst: DT, x: str) -> str:
        """``x`` (``src``'s compute type) converted to ``dst``'s compute type. To bool: x != 0 (NaN is true). Between
        integers: modular. Float to integer: truncation toward zero; NaN and out-of-range values as onnxruntime on
        x86-64 gives them (which its compiler's conversion decides): int32 and int64 give their minimum; int8,
        int16, uint8 and uint16 convert through int32 (so wrap when in its range, else give 0); uint32 and uint64
        through int32 / int64 below 2^31 / 2^63 (NaN: 2^31 / 2^63) and by subtracting that bound above it (inf and
        values past the type's range: 0); from float16, uint32 converts through int64 (wraps, else 0)."""
        if dst.kind == "b":
            return "(unsigned char)(%s != 0)" % x
        if dst.kind == "f" or src.kind != "f":
            return "(%s)%s" % (dst.compute, x)
        half = src.name == "float16"  # onnxruntime converts float16 to uint32 through int64
        bits = 64 if dst.bits == 64 or (half and dst.c == "unsigned int") else 32
        signed = self._helper(
            "to_signed", "svod_%s_to_i%d" % (src.compute, bits),
            T="long long" if bits == 64 else "int", U="unsigned long long" if bits == 64 else "unsigned int",
            F=src.compute, bits=bits, limit=_LIMITS[bits],
        )  # fmt: skip
        if dst.kind == "s" or dst.bits < bits:
            return "(%s)%s(%s)" % (dst.c, signed, x)
        name = self._helper(
            "to_unsigned", "svod_%s_to_u%d" % (src.compute, bits), U=dst.c, F=src.compute, bits=bits,
            limit=_LIMITS[bits], signed=signed,
        )  # fmt: skip
        return "%s(%s)" % (name, x)
