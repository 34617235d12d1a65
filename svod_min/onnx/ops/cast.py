"""Cast and CastLike between every run-time dtype: a view where the dtype does not change, generated C otherwise
(the conversions of :meth:`..kernels.arith.Arith.cast`)."""

from __future__ import annotations

from ..frontend.ir import Node
from ..frontend.table import ANY, register
from ..kernels.arith import DTYPES, EVERY, Arith
from ..kernels.elementwise import elementwise
from .lowering import Lowering

NOTE = (
    "generated C between every dtype; float to integer truncates (NaN and out-of-range as onnxruntime on x86-64), "
    "to float16/bfloat16 rounds to nearest even; float8/float4/string are refused"
)


@register(["Cast"], NOTE, dtypes=EVERY, to=ANY, saturate=ANY, round_mode=ANY)
@register(["CastLike"], NOTE, dtypes=EVERY, saturate=ANY, round_mode=ANY)
def lower_cast(L: Lowering, node: Node) -> None:
    # saturate and round_mode only concern float8/float4 results, a dtype check_node refuses before this runs
    x, out = node.inputs[0], node.outputs[0]
    src, dst = DTYPES[L.value(x).dtype], DTYPES[L.value(out).dtype]
    if src is dst:
        L.view(out, x)
        return
    A = Arith()
    expr = A.cast(src, dst, "x0")
    kernel = elementwise(
        L.value(out).shape, [L.value(x).shape], expr, tag="cast", in_dtypes=[src], out_dtype=dst, arith=A
    )
    L.source(kernel, [out, x])
