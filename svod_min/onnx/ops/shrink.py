"""Shrink: ``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, 0 between, on every numeric dtype, as
onnxruntime computes it: float16 and bfloat16 in float (rounded once), float64 in double with the float attributes,
integers through float (``(float)x + bias``) converted back as a float -> integer Cast (truncation; out-of-range
values as onnxruntime on x86-64 gives them, :meth:`..kernels.arith.Arith.cast`). A NaN gives 0."""

from __future__ import annotations

import numpy as np

from ..ctext import flt
from ..frontend.ir import Node
from ..frontend.table import ANY, register
from ..kernels.arith import DTYPES, NUMERIC, Arith
from ..kernels.elementwise import elementwise
from .lowering import Lowering


def _literal(value: float, compute: str) -> str:
    """The float32 attribute ``value`` as a literal of the compute type (a double holds the float's value)."""
    f = float(np.float32(value))
    return "%r" % f if compute == "double" else flt(f)


@register(
    ["Shrink"],
    "generated C, every numeric dtype (integers computed through float and truncated back, as onnxruntime)",
    dtypes=NUMERIC,
    bias=ANY,
    lambd=ANY,
)
def lower_shrink(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    d = DTYPES[L.value(x).dtype]
    arith = Arith()
    if d.kind == "f":
        lam, bias = (_literal(float(node.attrs.get(k, v)), d.compute) for k, v in (("lambd", 0.5), ("bias", 0.0)))
        expr = "(x0 < -%s ? x0 + %s : (x0 > %s ? x0 - %s : 0))" % (lam, bias, lam, bias)
    else:
        lam, bias = (_literal(float(node.attrs.get(k, v)), "float") for k, v in (("lambd", 0.5), ("bias", 0.0)))
        f32 = DTYPES["float32"]
        low, high = arith.cast(f32, d, "((float)x0 + %s)" % bias), arith.cast(f32, d, "((float)x0 - %s)" % bias)
        expr = "((float)x0 < -%s ? %s : ((float)x0 > %s ? %s : (%s)0))" % (lam, low, lam, high, d.compute)
    shape = L.value(out).shape
    kernel = elementwise(shape, [shape], expr, tag="shrink", in_dtypes=[d], out_dtype=d, arith=arith)
    L.source(kernel, [out, x])
