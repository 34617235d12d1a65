"""Einsum equations checked for their characters before onnx's shape inference reads them: onnx's inference (1.23.2
at least) loops forever on a '.' that is not part of one '...' (``i.j->ij``), so such a model is refused by name
first. The lowering (ops/einsum.py) reads the equation with the same rule."""

from __future__ import annotations

from typing import Any, Iterator, Optional

import onnx

from ...error import ModelFileError

ELLIPSIS = "..."


def term_fault(term: str) -> Optional[str]:
    """Why one term (an operand's, or the output's) is not letters with at most one '...'; None when it is."""
    if term.count(ELLIPSIS) > 1 or "." in term.replace(ELLIPSIS, ""):
        return "term %r: at most one ellipsis '...', and no other '.'" % term
    for c in term.replace(ELLIPSIS, ""):
        if not ("a" <= c <= "z" or "A" <= c <= "Z"):
            return "term %r: %r is not a letter" % (term, c)
    return None


def equation_fault(equation: str) -> Optional[str]:
    """Why ``equation`` is not an Einsum equation (terms joined by ',', at most one '->'); None when it is one."""
    eq = "".join(equation.split())
    lhs, _, rhs = eq.partition("->")
    if "-" in lhs + rhs or ">" in lhs + rhs:
        return "one '->' at most, and no other '-' or '>'"
    for term in lhs.split(",") + ([rhs] if "->" in eq else []):
        why = term_fault(term)
        if why is not None:
            return why
    return None


def _nodes(graph: Any) -> Iterator[Any]:
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from _nodes(g)


def refuse_bad_equations(model: onnx.ModelProto, path: str) -> None:
    """ModelFileError naming the first Einsum node (subgraphs included) whose equation breaks the rule."""
    for index, node in enumerate(_nodes(model.graph)):
        if node.op_type != "Einsum" or node.domain not in ("", "ai.onnx"):
            continue
        for attr in node.attribute:
            if attr.name != "equation":
                continue
            equation = attr.s.decode("utf-8", "replace")
            why = equation_fault(equation)
            if why is not None:
                raise ModelFileError(
                    "%s: Einsum node %r: equation %r is malformed: %s" % (path, node.name or index, equation, why)
                )
