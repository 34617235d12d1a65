"""Clip on every numeric dtype, its bounds constants or tensors fed at run time.

float32, float16 and bfloat16 with constant bounds (attributes or constant inputs) lower as the activation does
(:func:`.elementwise.lower_unary`: the library's clip where it fits, fused into the op before it by the passes).
Every other Clip is one generated elementwise kernel on x and the bounds it has, in x's dtype: ``min(max(x, lo),
hi)``, so with lo > hi every element becomes hi (onnxruntime's rule); a NaN in x stays NaN."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..kernels.arith import DTYPES, NUMERIC
from ..kernels.elementwise import elementwise
from .elementwise import HALVES, lower_unary
from .lowering import Lowering


def _clip_check(graph: Graph, node: Node) -> Optional[str]:
    for name in node.inputs[1:3]:
        if name and graph.values[name].shape != ():
            return "min/max must be scalars (ONNX: shape []); %r is %s" % (name, list(graph.values[name].shape))
    return None


@register(
    ["Clip"],
    "generated C, every numeric dtype; min/max constant (compiled in, fused as an activation for float32) or tensors "
    "fed at run time; min > max gives max",
    check=_clip_check,
    dtypes=NUMERIC,
    min=ANY,
    max=ANY,
)
def lower_clip(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    dtype = L.value(x).dtype
    bounds = [(i, n) for i, n in enumerate(node.inputs[1:3]) if n]
    if dtype in ("float32",) + HALVES and all(L.graph.is_const(n) for _, n in bounds):
        lower_unary(L, node)
        return
    for i, attr in enumerate(("min", "max")):  # opset < 11: float64 bounds as attributes
        if attr in node.attrs:
            bounds.append((i, L.const(np.array(node.attrs[attr], dtype), "%s~%s" % (out, attr))))
    d = DTYPES[dtype]
    expr, names = "x0", [x]
    for i, name in bounds:
        k = "x%d" % len(names)
        names.append(name)
        expr = ("(%s < %s ? %s : %s)" if i == 0 else "(%s > %s ? %s : %s)") % (expr, k, k, expr)
    kernel = elementwise(
        L.value(out).shape,
        [L.value(n).shape for n in names],
        expr,
        tag="clip",
        in_dtypes=[d] * len(names),
        out_dtype=d,
    )
    L.source(kernel, [out] + names)
