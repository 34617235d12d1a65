"""The op table: every ONNX op the front end lowers, the attribute values it implements, and the checks.

An op registers its lowering with :func:`register`, naming each attribute the ONNX spec gives it
and a rule for the values it implements (``ANY``, ``one_of(...)``, or a function returning why a
value is refused). :func:`check_graph` runs before any pass or any file is written: an op, an
attribute, a value or a dtype outside the table raises :class:`UnsupportedModelError` naming the
node (index and name), the op, the opset and what is unsupported. docs/onnx.md's op table is
:func:`markdown_table`'s output (a test holds the two equal).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from ...error import IndexOutOfRangeError, ModelFileError, UnsupportedModelError
from .contracts import contract_violation
from .indices import Operand, check_indices
from .ir import Graph, Node

Rule = Callable[[Any], Optional[str]]


def ANY(value: Any) -> Optional[str]:  # noqa: N802 - reads as a constant in the tables
    return None


def one_of(*allowed: Any) -> Rule:
    def rule(value: Any) -> Optional[str]:
        return None if value in allowed else "only %s" % " or ".join(repr(a) for a in allowed)

    rule.doc = "|".join(str(a) for a in allowed)  # type: ignore[attr-defined]
    return rule


def all_equal(expected: int) -> Rule:
    def rule(value: Any) -> Optional[str]:
        return None if all(v == expected for v in value) else "only all %d" % expected

    rule.doc = "all %d" % expected  # type: ignore[attr-defined]
    return rule


@dataclass
class OpSpec:
    """One supported op: its attribute rules, the runtime dtypes it takes, its lowering and a note for the docs."""

    op: str
    attrs: Dict[str, Rule]
    lower: Callable[..., None]
    note: str = ""
    dtypes: Tuple[str, ...] = ("float32",)
    check: Optional[Callable[[Graph, Node], Optional[str]]] = field(default=None)

    def refusal(self, attrs: Mapping[str, Any], dtypes: Iterable[Tuple[str, str]]) -> Optional[str]:
        """Why this op's lowering does not take these attribute values or these run-time (name, dtype) tensors;
        None where it takes them."""
        for name, value in attrs.items():
            rule = self.attrs.get(name)
            if rule is None:
                return "attribute %s is not supported" % name
            why = rule(value)
            if why is not None:
                return "attribute %s=%r is not supported (%s)" % (name, value, why)
        for name, dtype in dtypes:
            if dtype not in self.dtypes:
                return "tensor %r is %s; this op runs on %s only" % (name, dtype, ", ".join(self.dtypes))
        return None


OPS: Dict[str, OpSpec] = {}


def register(
    ops: Iterable[str],
    note: str = "",
    check: Optional[Callable[[Graph, Node], Optional[str]]] = None,
    dtypes: Tuple[str, ...] = ("float32",),
    **attrs: Rule,
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def deco(fn: Callable[..., None]) -> Callable[..., None]:
        for op in ops:
            OPS[op] = OpSpec(op, dict(attrs), fn, note, dtypes, check)
        return fn

    return deco


def refuse(node: Node, opset: int, what: str) -> UnsupportedModelError:
    return UnsupportedModelError("%s, opset %d: %s" % (node.label(), opset, what))


def check_graph(graph: Graph) -> None:
    """Every node is one the table lowers, with attribute values and dtypes it implements."""
    for node in graph.nodes:
        check_node(graph, node)


def check_node(graph: Graph, node: Node) -> None:
    opset = graph.opset
    if node.domain not in ("", "ai.onnx"):
        raise refuse(node, opset, "domain %r is not supported (only the default ONNX domain)" % node.domain)
    check_constant_indices(graph, node)
    spec = OPS.get(node.op)
    if spec is None or node.op.startswith("svod."):
        raise refuse(node, opset, "op %s is not supported (docs/onnx.md lists the ops svod_min lowers)" % node.op)
    tensors = [graph.values[name] for name in list(node.inputs) + list(node.outputs) if name]
    why = spec.refusal(node.attrs, [(v.name, v.dtype) for v in tensors if v.const is None])
    if why is not None:
        raise refuse(node, opset, why)
    if spec.check is not None:
        why = spec.check(graph, node)
        if why is not None:
            raise refuse(node, opset, why)
    why = contract_violation(graph, node)
    if why is not None:  # the model contradicts itself: a fault of the file, not something svod_min lacks
        raise ModelFileError("%s, opset %d: %s" % (node.label(), opset, why))
    why = empty_input(graph, node)
    if why is not None:
        raise refuse(node, opset, why)


#: Ops whose lowering computes a non-empty result from an empty input: Concat skips the empty part, Gemm with K = 0
#: is alpha * 0 + beta * C. Every other node with an empty input and a non-empty output is refused (the parser
#: already folded those whose result it could compute: reductions over nothing, MatMul with K = 0, ...).
EMPTY_INPUT_OPS = frozenset({"Concat", "Gemm"})


def empty_input(graph: Graph, node: Node) -> Optional[str]:
    """Why ``node`` cannot take the empty tensor it reads (None when it reads none or can): a run-time input, or a
    constant as its data input (input 0: later constant inputs of size 0 are parameters, such as Resize's roi)."""
    if node.op in EMPTY_INPUT_OPS or all(graph.values[o].size == 0 for o in node.outputs if o):
        return None
    for i, name in enumerate(node.inputs):
        v = graph.values[name] if name else None
        if v is not None and v.size == 0 and (v.const is None or i == 0):
            return "input %r is empty (shape %s): %s of an empty tensor into a non-empty result is not supported" % (
                name[: -len("~empty")] if name.endswith("~empty") else name,  # the parser's constant for an input
                list(v.shape),
                node.op,
            )
    return None


def check_constant_indices(graph: Graph, node: Node) -> None:
    """A constant index outside its op's range (frontend/indices.py) refuses the node, whether or not the table
    lowers the op: the model is wrong, and the message says where."""
    operands = [
        Operand(n, graph.values[n].shape if n in graph.values else None, graph.values[n].const if n else None)
        for n in node.inputs
    ]
    bad = check_indices(node.op, node.attrs, operands, graph.opset)
    if bad is not None:
        raise IndexOutOfRangeError("%s, opset %d: %s" % (node.label(), graph.opset, bad.message()))


def markdown_table() -> str:
    """The op table of docs/onnx.md: op, attributes (with the values implemented where limited), notes."""
    lines = ["| op | attributes (implemented values) | notes |", "|---|---|---|"]
    for op in sorted(OPS):
        if op.startswith("svod."):
            continue
        spec = OPS[op]
        attrs = ", ".join(
            name if rule is ANY else "%s (%s)" % (name, getattr(rule, "doc", "limited"))
            for name, rule in sorted(spec.attrs.items())
            if not name.startswith("_")
        )
        lines.append("| %s | %s | %s |" % (op, attrs or "-", spec.note or "-"))
    return "\n".join(lines)


def supported_ops() -> List[str]:
    return sorted(op for op in OPS if not op.startswith("svod."))
