"""Einsum: the equation parsed at build time. A float32 contraction of two operands (each label a batch, M, N or K
label) runs as the library's matmul, one per batch element; every other equation as one generated kernel
(:mod:`..kernels.einsum`) that loops over its index space.

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
from .lowering import F32, Lowering
from .shape import permuted

#: At most this many matmuls for one Einsum (one per batch element); more small ones run as the one kernel.
MAX_BATCH = 1024
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
    "a float32 contraction of two operands: library matmul per batch element (operands and result permuted where "
    "their layout differs); else generated C, one loop per label (diagonals, ellipsis broadcast, implicit output), "
    "sums in double (floats) or wrapping (integers); float32, float64 and integer operands",
    check=_einsum_check,
    dtypes=EINSUM_DTYPES,
    equation=ANY,
)
def lower_einsum(L: Lowering, node: Node) -> None:
    out = node.outputs[0]
    shapes = [L.value(n).shape for n in node.inputs]
    plan = plan_equation(_equation(node), shapes)
    if _as_matmul(L, node, plan, shapes):
        return
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


def _as_matmul(L: Lowering, node: Node, plan: Plan, shapes: Sequence[Sequence[int]]) -> bool:
    """A float32 contraction of two operands as the library's matmul, one per batch element: each label is a batch
    label (both operands and the output), an M or N label (one operand and the output) or a K label (both operands,
    summed); the operands are permuted into (batch, M, K) and (batch, K, N) where their layout differs, the result
    from (batch, M, N) into the output's order. False (nothing emitted) for anything else: a diagonal, a label summed
    within one operand, a broadcast dim, another dtype."""
    out = node.outputs[0]
    if L.value(out).dtype != "float32" or len(plan.operands) != 2:
        return False
    a_labels, b_labels = plan.operands
    for labels, shape in zip(plan.operands, shapes):
        if len(set(labels)) != len(labels) or any(int(d) != plan.sizes[x] for x, d in zip(labels, shape)):
            return False  # a diagonal, or an ellipsis dim that broadcasts
    kept = set(plan.output)
    if any(x not in kept and x not in b_labels for x in a_labels) or any(
        x not in kept and x not in a_labels for x in b_labels
    ):
        return False  # a label summed within one operand
    batch = [x for x in plan.output if x in a_labels and x in b_labels]
    m = [x for x in plan.output if x in a_labels and x not in b_labels]
    n = [x for x in plan.output if x in b_labels and x not in a_labels]
    k = [x for x in a_labels if x in b_labels and x not in kept]
    size = plan.sizes
    nb, rows, cols, depth = (int(np.prod([size[x] for x in part])) for part in (batch, m, n, k))
    if nb > MAX_BATCH:
        return False
    a = _arranged(L, node.inputs[0], a_labels, shapes[0], batch + m + k, size)
    b = _arranged(L, node.inputs[1], b_labels, shapes[1], batch + k + n, size)
    order = batch + m + n
    c = out if order == plan.output else L.temp([size[x] for x in order], "float32", "einsum_c")
    dims = {"M": rows, "N": cols, "K": depth}
    if nb == 1:
        L.library("matmul", F32, [c, a, b], dims)
    for i in range(nb if nb > 1 else 0):
        va = L.subview(a, 4 * i * rows * depth, (rows, depth))
        vb = L.subview(b, 4 * i * depth * cols, (depth, cols))
        vc = L.subview(c, 4 * i * rows * cols, (rows, cols))
        L.library("matmul", F32, [vc, va, vb], dims)
    if c != out:
        strides = dict(zip(order, contiguous_strides([size[x] for x in order])))
        permuted(L, out, c, L.value(out).shape, [strides[x] for x in plan.output], 0, "einsum_out")
    return True


def _arranged(
    L: Lowering, x: str, labels: List[str], shape: Sequence[int], order: List[str], size: Dict[str, int]
) -> str:
    """``x`` with its dims in ``order`` (its own labels): ``x`` itself where its layout already is that, else a
    permuted copy."""
    own = dict(zip(labels, contiguous_strides(list(shape))))
    target = [size[label] for label in order]
    src = [own[label] for label in order]
    want = contiguous_strides(target)
    if all(s == w or d == 1 for s, w, d in zip(src, want, target)):
        return x
    t = L.temp(target, "float32", "einsum_in")
    permuted(L, t, x, target, src, 0, "einsum_in")
    return t
