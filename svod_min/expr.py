"""A small, safe integer expression language for launch sizes and buffer extents.

    "n", "(n + 255) // 256", "max(1, rows * cols)", "n % 4"

Integers, variable names, ``+ - * // %``, unary minus, parentheses, and the
functions ``min``/``max`` and ``ceildiv(a, b)`` (``-(-a // b)``, the kernel library's spelling). The text is parsed with :mod:`ast` and every node is
checked against that whitelist, then turned into nested closures; nothing is
ever handed to ``eval``. Compiled expressions are cached by text.
"""

from __future__ import annotations

import ast
import operator
from typing import Callable, Dict, FrozenSet, Mapping, Union

from .error import PlanError

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
_FUNCS = {"min": min, "max": max}


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


class SizeExpr:
    """A compiled expression: ``expr(env) -> int``; ``names`` lists its variables."""

    __slots__ = ("text", "names", "_fn")

    def __init__(self, text: str, fn: Fn, names: FrozenSet[str]) -> None:
        self.text = text
        self._fn = fn
        self.names = names

    def __call__(self, env: Env) -> int:
        try:
            return self._fn(env)
        except KeyError as exc:
            raise PlanError("expression %r uses unknown variable %s" % (self.text, exc)) from None
        except ZeroDivisionError:
            raise PlanError("expression %r divides by zero with %s" % (self.text, dict(env))) from None

    def __repr__(self) -> str:
        return "SizeExpr(%r)" % self.text


def _compile_node(node: ast.AST, text: str, names: set) -> Fn:
    if isinstance(node, ast.Expression):
        return _compile_node(node.body, text, names)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        names.add(node.id)
        key = node.id
        return lambda env: env[key]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        op = _BINOPS[type(node.op)]
        left, right = _compile_node(node.left, text, names), _compile_node(node.right, text, names)
        return lambda env: op(left(env), right(env))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _compile_node(node.operand, text, names)
        sign = -1 if isinstance(node.op, ast.USub) else 1
        return lambda env: sign * inner(env)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCS
        and not node.keywords
        and len(node.args) >= 2
    ):
        fn = _FUNCS[node.func.id]
        args = [_compile_node(a, text, names) for a in node.args]
        return lambda env: fn(a(env) for a in args)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "ceildiv":
        if node.keywords or len(node.args) != 2:
            raise PlanError("expression %r: ceildiv takes exactly 2 arguments" % (text,))
        num, den = (_compile_node(a, text, names) for a in node.args)
        return lambda env: _ceildiv(num(env), den(env))
    raise PlanError("expression %r: %s is not allowed (integers, names, + - * // %%, min, max, ceildiv)" % (text, _describe(node)))


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Constant):
        return "constant %r" % (node.value,)
    if isinstance(node, ast.BinOp):
        return "operator %s" % type(node.op).__name__
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return "call to %s()" % node.func.id
    return type(node).__name__


_cache: Dict[str, SizeExpr] = {}


def compile_expr(text: Union[str, int]) -> SizeExpr:
    """Compile ``text`` (or wrap an int); raises PlanError for anything outside the language."""
    if type(text) is int:
        value = text
        return SizeExpr(str(value), lambda env: value, frozenset())
    if not isinstance(text, str):
        raise PlanError("size expression must be an int or a string, got %s" % type(text).__name__)
    hit = _cache.get(text)
    if hit is not None:
        return hit
    if len(text) > _MAX_LEN:
        raise PlanError("expression is longer than %d characters" % _MAX_LEN)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise PlanError("expression %r is not valid: %s" % (text, exc.msg)) from None
    except (RecursionError, MemoryError):  # the parser's own nesting limits (Python 3.8)
        raise PlanError("expression %r nests too deeply" % (text,)) from None
    names: set = set()
    try:
        compiled = SizeExpr(text, _compile_node(tree, text, names), frozenset(names))
    except RecursionError:
        raise PlanError("expression %r nests too deeply" % (text,)) from None
    _cache[text] = compiled
    return compiled


def evaluate(text: Union[str, int], env: Env) -> int:
    """Compile (cached) and evaluate in one step."""
    return compile_expr(text)(env)
