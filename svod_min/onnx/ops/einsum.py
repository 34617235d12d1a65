"""Einsum: the equation parsed at build time into one generated kernel (:mod:`..kernels.einsum`) that loops over its
index space.

Every label of the equation is one loop: the output's labels (the ellipsis' dims first where the output has them)
index the output elements, the other labels are summed over. An operand's element offset is the sum of its labels'
coordinates times its strides, so a letter repeated in one operand (``ii``) reads its diagonal, and an ellipsis dim
of size 1 broadcasts (stride 0). Without ``->`` the output is ONNX's implicit one: the ellipsis' dims, then the
letters that occur once, in alphabetical order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..frontend.einsum_syntax import ELLIPSIS, equation_fault, term_fault
from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..geometry import contiguous_strides
from ..kernels.arith import FLOATS, INTEGERS
from ..kernels.einsum import einsum_kernel
from .lowering import Lowering

#: The element types the kernel computes in (float16 and bfloat16 nodes are widened to float32 by frontend/half.py).
EINSUM_DTYPES = tuple(d for d in FLOATS if d not in ("float16", "bfloat16")) + INTEGERS


class EquationError(ValueError):
    """An equation the lowering does not take; its message says why (the table's check names the node)."""


@dataclass
class Plan:
    """An equation bound to its operands' shapes: the loops (label -> size), the output's labels in order, the
    summed labels, and each operand's label per dim."""

    sizes: Dict[str, int]
    output: List[str]
    summed: List[str]
    operands: List[List[str]]


def _terms(term: str) -> Tuple[List[str], bool]:
    """A term's letters and whether it holds the ellipsis."""
    why = term_fault(term)
    if why is not None:
        raise EquationError(why)
    return list(term.replace(ELLIPSIS, "")), ELLIPSIS in term


def plan_equation(equation: str, shapes: Sequence[Sequence[int]]) -> Plan:
    """``equation`` over operands of ``shapes`` as loops; raises :class:`EquationError` saying why it cannot."""
    why = equation_fault(equation)
    if why is not None:
        raise EquationError(why)
    lhs, arrow, rhs = "".join(equation.split()).partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise EquationError("%d operand terms for %d inputs" % (len(terms), len(shapes)))
    sizes: Dict[str, int] = {}
    operands: List[List[str]] = []
    ellipsis_dims: List[int] = []  # the broadcast ellipsis' dims, right-aligned
    for i, (term, shape) in enumerate(zip(terms, shapes)):
        letters, has_ellipsis = _terms(term)
        extra = len(shape) - len(letters)
        if extra < 0 or (extra > 0 and not has_ellipsis):
            raise EquationError("term %d %r does not match input %d of rank %d" % (i, term, i, len(shape)))
        dims = list(shape)
        if has_ellipsis:
            at = term.replace(ELLIPSIS, "\0").index("\0")
            mine = dims[at : at + extra]
            ellipsis_dims = _broadcast(ellipsis_dims, mine, i)
            labels = letters[:at] + ["%d~" % (extra - k) for k in range(extra)] + letters[at:]
        else:
            labels = letters
        for label, size in zip(labels, dims):
            if label.endswith("~"):
                continue  # the ellipsis' sizes broadcast: bound below
            if sizes.setdefault(label, int(size)) != int(size):
                raise EquationError("label %r has sizes %d and %d" % (label, sizes[label], size))
        operands.append(labels)
    rank = len(ellipsis_dims)
    for k, size in enumerate(ellipsis_dims):
        sizes["%d~" % (rank - k)] = int(size)
    ell = ["%d~" % (rank - k) for k in range(rank)]
    counts: Dict[str, int] = {}
    for labels in operands:
        for label in labels:
            if not label.endswith("~"):
                counts[label] = counts.get(label, 0) + 1
    if arrow:
        out_letters, out_ellipsis = _terms(rhs)
        if len(set(out_letters)) != len(out_letters):
            raise EquationError("output %r repeats a letter" % rhs)
        missing = [c for c in out_letters if c not in sizes]
        if missing:
            raise EquationError("output letter %r is in no input term" % missing[0])
        if rank and not out_ellipsis:
            raise EquationError("the inputs' ellipsis dims must appear in the output ('...')")
        if out_ellipsis:
            at = rhs.replace(ELLIPSIS, "\0").index("\0")
            output = out_letters[:at] + ell + out_letters[at:]
        else:
            output = out_letters
    else:
        output = ell + sorted(c for c, n in counts.items() if n == 1)
    summed = [label for label in sizes if label not in output]
    return Plan(sizes, output, summed, operands)


def _broadcast(have: List[int], mine: Sequence[int], operand: int) -> List[int]:
    """The ellipsis dims so far broadcast with operand ``operand``'s (right-aligned; sizes equal or 1)."""
    n = max(len(have), len(mine))
    a = [1] * (n - len(have)) + list(have)
    b = [1] * (n - len(mine)) + [int(d) for d in mine]
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise EquationError("the ellipsis dims of input %d (%s) do not broadcast with %s" % (operand, mine, have))
        out.append(y if x == 1 else x)
    return out


def _operand_strides(plan: Plan, labels: List[str], shape: Sequence[int]) -> Dict[str, int]:
    """Each label's element stride in one operand: a repeated label adds its dims' strides (the diagonal), an
    ellipsis dim of size 1 none (it broadcasts)."""
    strides = contiguous_strides(list(shape))
    out: Dict[str, int] = {}
    for label, size, stride in zip(labels, shape, strides):
        if int(size) == 1 and plan.sizes[label] != 1:
            continue
        out[label] = out.get(label, 0) + int(stride)
    return out


def _equation(node: Node) -> str:
    eq = node.attrs.get("equation", "")
    return eq.decode() if isinstance(eq, bytes) else str(eq)


def _einsum_check(graph: Graph, node: Node) -> Optional[str]:
    equation = _equation(node)
    shapes = [graph.values[n].shape for n in node.inputs]
    try:
        plan = plan_equation(equation, shapes)
    except EquationError as exc:
        return "equation %r: %s" % (equation, exc)
    want = tuple(plan.sizes[label] for label in plan.output)
    got = tuple(graph.values[node.outputs[0]].shape)
    if want != got:
        return "equation %r gives shape %s, the output is %s" % (equation, list(want), list(got))
    return None


@register(
    ["Einsum"],
    "generated C: one loop per label (diagonals, ellipsis broadcast, implicit output), sums in double (float) or "
    "in the type, wrapping (integers); float32, float64 and integer operands",
    check=_einsum_check,
    dtypes=EINSUM_DTYPES,
    equation=ANY,
)
def lower_einsum(L: Lowering, node: Node) -> None:
    out = node.outputs[0]
    shapes = [L.value(n).shape for n in node.inputs]
    plan = plan_equation(_equation(node), shapes)
    loops = plan.output + plan.summed
    per_operand = [_operand_strides(plan, labels, shape) for labels, shape in zip(plan.operands, shapes)]
    strides = [[s.get(label, 0) for label in loops] for s in per_operand]
    kernel = einsum_kernel(
        [plan.sizes[label] for label in plan.output],
        [plan.sizes[label] for label in plan.summed],
        strides,
        [int(np.prod(s)) for s in shapes],
        L.value(out).dtype,
    )
    L.source(kernel, [out] + list(node.inputs))
