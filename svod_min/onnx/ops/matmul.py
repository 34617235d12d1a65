"""Gemm and MatMul on the library's matmul: a constant B pre-transposed and scaled at build time, batched operands as
one matmul per batch (numpy broadcasting of batch dims), bias and activation in one elementwise epilogue."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ..activations import activation
from ..ctext import flt
from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..geometry import broadcast_strides
from ..kernels.elementwise import elementwise
from .elementwise import activation_of, apply_activation
from .lowering import F32, Lowering


def epilogue(
    L: Lowering,
    node: Node,
    out: str,
    shape: Tuple[int, ...],
    bias: str,
    bias_shape: Tuple[int, ...],
    alpha: float = 1.0,
    beta: float = 1.0,
) -> None:
    """out = act(alpha * out + beta * bias) in place; nothing when there is nothing to do."""
    kind, params = activation_of(node)
    if not bias and alpha == 1.0:
        apply_activation(L, out, node)
        return
    expr = "x0" if alpha == 1.0 else "%s * x0" % flt(alpha)
    if bias:
        expr = "(%s + %s)" % (expr, "x1" if beta == 1.0 else "%s * x1" % flt(beta))
    ins = [shape] + ([bias_shape] if bias else [])
    L.source(
        elementwise(shape, ins, activation(kind, params, expr), inplace=True, tag="bias"),
        [out] + ([bias] if bias else []),
    )


def _transposed(L: Lowering, name: str) -> str:
    rows, cols = L.value(name).shape
    t = L.temp((cols, rows))
    L.library("transpose", F32, [t, name], {"rows": rows, "cols": cols})
    return t


@register(
    ["Gemm"],
    "library matmul; constant B pre-transposed and scaled at build time; bias and activation in one epilogue",
    alpha=ANY,
    beta=ANY,
    transA=ANY,
    transB=ANY,
    broadcast=ANY,
    _normal=ANY,
)
def lower_gemm(L: Lowering, node: Node) -> None:
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    out = node.outputs[0]
    attrs = node.attrs
    beta = 1.0 if attrs.get("_normal") else float(attrs.get("beta", 1.0))
    if L.value(a).size == 0:  # K = 0: A @ B is zeros, so the result is act(beta * C), or act(0) without C
        _empty_product(L, node, out, c, beta)
        return
    if attrs.get("transA", 0):
        a = _transposed(L, a)
    if attrs.get("transB", 0) and not attrs.get("_normal"):
        b = _transposed(L, b)
    m, k = L.value(a).shape
    n = L.value(b).shape[1]
    L.library("matmul", F32, [out, a, b], {"M": m, "N": n, "K": k})
    alpha = 1.0 if attrs.get("_normal") else float(attrs.get("alpha", 1.0))
    epilogue(L, node, out, (m, n), c, L.value(c).shape if c else (), alpha, beta)


def _empty_product(L: Lowering, node: Node, out: str, c: str, beta: float) -> None:
    """A Gemm over K = 0 (the table lets Gemm take empty A and B): its output from C alone."""
    kind, params = activation_of(node)
    shape = L.value(out).shape
    if not c:
        c = L.const(np.zeros((), np.float32), out + "~zero")
    L.source(
        elementwise(shape, [L.value(c).shape], activation(kind, params, "%s * x0" % flt(beta)), tag="bias"), [out, c]
    )


def _matmul_check(graph: Graph, node: Node) -> Optional[str]:
    a, b = (graph.values[n].shape for n in node.inputs)
    if len(a) < 1 or len(b) < 1:
        return "scalar operands"
    if len(a) == 1 and len(b) > 2:
        return "a 1-D first operand with a batched second one"
    return None


@register(
    ["MatMul"],
    "library matmul; batched operands as one matmul per batch (numpy broadcasting of batch dims)",
    check=_matmul_check,
)
def lower_matmul(L: Lowering, node: Node) -> None:
    a, b = node.inputs
    out = node.outputs[0]
    sa, sb = L.value(a).shape, L.value(b).shape
    a2 = sa if len(sa) > 1 else (1,) + sa
    b2 = sb if len(sb) > 1 else sb + (1,)
    m, k, n = a2[-2], a2[-1], b2[-1]
    if len(b2) == 2:  # the batch of A folds into M
        L.library("matmul", F32, [out, a, b], {"M": int(np.prod(a2[:-1])), "N": n, "K": k})
    else:
        batch = tuple(L.value(out).shape[:-2])
        _batched_matmul(L, out, a, b, a2, b2, batch, m, k, n)
    apply_activation(L, out, node)


def _batched_matmul(
    L: Lowering,
    out: str,
    a: str,
    b: str,
    a2: Sequence[int],
    b2: Sequence[int],
    batch: Tuple[int, ...],
    m: int,
    k: int,
    n: int,
) -> None:
    sa = broadcast_strides(a2[:-2], batch)
    sb = broadcast_strides(b2[:-2], batch)
    for i, idx in enumerate(np.ndindex(*batch)):
        oa = sum(j * s for j, s in zip(idx, sa)) * m * k
        ob = sum(j * s for j, s in zip(idx, sb)) * k * n
        va = L.subview(a, 4 * oa, (m, k))
        vb = L.subview(b, 4 * ob, (k, n))
        vo = L.subview(out, 4 * i * m * n, (m, n))
        L.library("matmul", F32, [vo, va, vb], {"M": m, "N": n, "K": k})
