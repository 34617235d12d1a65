"""The size-expression language: launch sizes, buffer extents and kernel-argument checks.

    "n", "(n + 255) // 256", "max(1, rows * cols)", "ceildiv(n, 64)", "n % 4"

One language for plans, kernel signatures and CUDA grids. Integers, variable
names, ``+ - * // %``, unary ``-``/``+``, parentheses, and the functions
``min``/``max`` (two or more arguments) and ``ceildiv(a, b)`` (``-(-a // b)``,
the kernel library's spelling). With ``conditions=True`` (the kernel library's
dialect: its argument checks) also comparisons (chained as in Python),
``and``/``or`` and ``a if c else b``.

The text is parsed with :mod:`ast`, every node is checked against that
whitelist and turned into nested closures; nothing is ever handed to
``eval``. Compiled expressions are cached per text, dialect and error class.
Errors are :class:`~svod_min.error.PlanError` or the class a caller names
(the kernel library's :class:`~svod_min.error.KernelParamError`, a device's
launch-configuration error).
"""

from __future__ import annotations

import ast
import operator
from typing import Callable, Dict, FrozenSet, List, Mapping, Optional, Set, Tuple, Type, Union

from .error import PlanError, SvodError

Env = Mapping[str, int]
Fn = Callable[[Env], int]

_MAX_LEN = 512

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_COMPARISONS = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_FUNCS = {"min": min, "max": max}

#: The functions of the language: name -> (fewest, most) arguments (None: no upper bound).
FUNCTIONS: Mapping[str, Tuple[int, Optional[int]]] = {"ceildiv": (2, 2), "min": (2, None), "max": (2, None)}


def ceildiv(a: int, b: int) -> int:
    """``a / b`` rounded up, as the kernel library writes it: ``-(-a // b)``."""
    return -(-a // b)


class SizeExpr:
    """A compiled expression: ``expr(env) -> int``; ``names`` lists its variables."""

    __slots__ = ("text", "names", "_fn", "_error")

    def __init__(self, text: str, fn: Fn, names: FrozenSet[str], error: Type[SvodError] = PlanError) -> None:
        self.text = text
        self._fn = fn
        self.names = names
        self._error = error

    def __call__(self, env: Env) -> int:
        try:
            return self._fn(env)
        except KeyError as exc:
            raise self._error("expression %r uses unknown variable %s" % (self.text, exc)) from None
        except ZeroDivisionError:
            raise self._error("expression %r divides by zero with %s" % (self.text, dict(env))) from None

    def __repr__(self) -> str:
        return "SizeExpr(%r)" % self.text


class _Compiler:
    """One text's AST -> closures; collects the variable names it reads."""

    def __init__(self, text: str, conditions: bool, error: Type[SvodError]) -> None:
        self.text = text
        self.conditions = conditions
        self.error = error
        self.names: Set[str] = set()

    def compile(self, node: ast.AST) -> Fn:
        if isinstance(node, ast.Expression):
            return self.compile(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            value = node.value
            return lambda env: value
        if isinstance(node, ast.Name):
            self.names.add(node.id)
            key = node.id
            return lambda env: env[key]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            op = _BINOPS[type(node.op)]
            left, right = self.compile(node.left), self.compile(node.right)
            return lambda env: op(left(env), right(env))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.compile(node.operand)
            sign = -1 if isinstance(node.op, ast.USub) else 1
            return lambda env: sign * inner(env)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS:
            return self._call(node)
        if self.conditions:
            fn = self._condition(node)
            if fn is not None:
                return fn
        raise self.error("expression %r: %s is not allowed (%s)" % (self.text, _describe(node), self._allowed()))

    def _allowed(self) -> str:
        base = "integers, names, + - * // %, min, max, ceildiv"
        return base + ", comparisons, and, or, if-else" if self.conditions else base

    def _call(self, node: ast.Call) -> Fn:
        name = node.func.id  # type: ignore[attr-defined]
        low, high = FUNCTIONS[name]
        if node.keywords or len(node.args) < low or (high is not None and len(node.args) > high):
            # max(x) would be an iterable call in Python: refused with the others
            takes = "%d" % low if low == high else "%d or more" % low
            got = "keywords" if node.keywords else "%d" % len(node.args)
            raise self.error("expression %r: %s() takes %s arguments, got %s" % (self.text, name, takes, got))
        args = [self.compile(a) for a in node.args]
        if name == "ceildiv":
            num, den = args
            return lambda env: ceildiv(num(env), den(env))
        fn = _FUNCS[name]
        return lambda env: fn(a(env) for a in args)

    def _condition(self, node: ast.AST) -> Optional[Fn]:
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARISONS for op in node.ops):
            return self._compare(node)
        if isinstance(node, ast.BoolOp) and isinstance(node.op, (ast.And, ast.Or)):
            return _bool_op(isinstance(node.op, ast.And), [self.compile(v) for v in node.values])
        if isinstance(node, ast.IfExp):
            test, body, orelse = self.compile(node.test), self.compile(node.body), self.compile(node.orelse)
            return lambda env: body(env) if test(env) else orelse(env)
        return None

    def _compare(self, node: ast.Compare) -> Fn:
        # Python's chaining: a < b < c is a < b and b < c, each operand evaluated once.
        first = self.compile(node.left)
        steps = [(_COMPARISONS[type(op)], self.compile(right)) for op, right in zip(node.ops, node.comparators)]
        if len(steps) == 1:
            op, right = steps[0]
            return lambda env: op(first(env), right(env))

        def chained(env: Env) -> int:
            left = first(env)
            for op, right in steps:
                value = right(env)
                if not op(left, value):
                    return False
                left = value
            return True

        return chained


def _bool_op(is_and: bool, values: List[Fn]) -> Fn:
    # Python's and/or: short-circuit, the deciding operand is the result.
    def combined(env: Env) -> int:
        value = 0
        for fn in values:
            value = fn(env)
            if bool(value) is not is_and:
                return value
        return value

    return combined


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return "constant %r" % (node.value,)
    if isinstance(node, ast.BinOp):
        return "operator %s" % type(node.op).__name__
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return "call to %s()" % node.func.id
    return type(node).__name__


_cache: Dict[str, SizeExpr] = {}  # the plans' dialect, on their hot path: keyed by text alone
_dialect_caches: Dict[Tuple[bool, type], Dict[str, SizeExpr]] = {}


def compile_expr(text: Union[str, int], conditions: bool = False, error: Type[SvodError] = PlanError) -> SizeExpr:
    """Compile ``text`` (or wrap an int); raises ``error`` for anything outside the language.

    ``conditions``: also comparisons, ``and``/``or`` and ``a if c else b``
    (the kernel library's argument checks). ``error``: the SvodError class
    raised, at compile and at evaluation time.
    """
    if type(text) is int:
        value = text
        return SizeExpr(str(value), lambda env: value, frozenset(), error)
    if not isinstance(text, str):
        raise error("size expression must be an int or a string, got %s" % type(text).__name__)
    cache = _cache if not conditions and error is PlanError else _dialect_caches.setdefault((conditions, error), {})
    hit = cache.get(text)
    if hit is not None:
        return hit
    compiled = _compile_text(text, conditions, error)
    cache[text] = compiled
    return compiled


def _compile_text(text: str, conditions: bool, error: Type[SvodError]) -> SizeExpr:
    if len(text) > _MAX_LEN:
        raise error("expression is longer than %d characters" % _MAX_LEN)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise error("expression %r is not valid: %s" % (text, exc.msg)) from None
    except (RecursionError, MemoryError):  # the parser's own nesting limits (Python 3.8)
        raise error("expression %r nests too deeply" % (text,)) from None
    compiler = _Compiler(text, conditions, error)
    try:
        fn = compiler.compile(tree)
    except RecursionError:
        raise error("expression %r nests too deeply" % (text,)) from None
    return SizeExpr(text, fn, frozenset(compiler.names), error)


def evaluate(text: Union[str, int], env: Env) -> int:
    """Compile (cached) and evaluate in one step."""
    return compile_expr(text)(env)
