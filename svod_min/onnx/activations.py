"""The activation table: every activation a Conv, Gemm, MatMul, affine or elementwise node can apply to what it
writes (the passes fuse it into that node), in one place.

Each entry names the ONNX op's float attributes with their defaults, the C expression the generated kernels use
(``{x}`` the value, ``{alpha}``... the attributes as float32 literals), and the library epilogue that runs it
in conv2d_gemm / matmul's store where there is one. The passes (which op fuses), the elementwise lowering (the op
alone), the convolutions' epilogues and the generated kernels all read this table: adding an activation is one
entry here and its test.

Every expression keeps NaN where the ONNX reference does: clamps are comparisons (a NaN compares false and passes
through), never ``fmaxf``/``fminf``, which return the other operand. Sigmoid, Tanh and Gelu's tanh form are the
kernel library's own functions (:mod:`.kernels.libmath`), with the accuracy docs/kernels.md states for them; Gelu's
erf form calls ``svod_erff`` (``kernels/templates/math.c.j2``, within 2 ulp), which vectorises where libm's erff
would stop the loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

from .ctext import flt

#: A NaN-keeping clamp of the C expression ``{t}`` to [0, 1].
_CLAMP01 = "({t} > 1.0f ? 1.0f : ({t} < 0.0f ? 0.0f : {t}))"


@dataclass(frozen=True)
class Activation:
    """One activation: its float attributes (name, default), its C expression and its library epilogue.

    ``c_tanh``: Gelu's other form, used when the node asks for the tanh approximation (its ``approximate``
    attribute is read as the parameter ``tanh``, 1.0 or 0.0). ``library``: the act name of
    the library kernels' epilogue and its variables as (epilogue variable, attribute) pairs; None where the library
    has none (the activation then runs after the kernel, in place)."""

    attrs: Tuple[Tuple[str, float], ...]
    c: str
    library: Optional[Tuple[str, Tuple[Tuple[str, str], ...]]] = None
    c_tanh: str = ""


ACTIVATIONS: Dict[str, Activation] = {
    "Relu": Activation((), "({x} < 0.0f ? 0.0f : {x})", ("relu", ())),
    "LeakyRelu": Activation(
        (("alpha", 0.01),), "({x} < 0.0f ? {alpha} * {x} : {x})", ("leaky_relu", (("alpha", "alpha"),))
    ),
    # The library's clip and relu epilogues take finite bounds or [0, inf): see library_epilogue.
    "Clip": Activation((("min", -math.inf), ("max", math.inf)), "({x} < {min} ? {min} : ({x} > {max} ? {max} : {x}))"),
    "Sigmoid": Activation((), "svod_sigmoidf({x})", ("sigmoid", ())),
    "Tanh": Activation((), "svod_tanhf({x})", ("tanh", ())),
    "HardSigmoid": Activation(
        (("alpha", 0.2), ("beta", 0.5)),
        _CLAMP01.format(t="({alpha} * {x} + {beta})"),
        ("hardsigmoid", (("alpha", "alpha"), ("beta", "beta"))),
    ),
    # ONNX's alpha 1/6 as a multiplier (the library's epilogue and onnxruntime round the same way; a divide costs more)
    "HardSwish": Activation((), "({x} * " + _CLAMP01.format(t="({x} * (1.0f / 6.0f) + 0.5f)") + ")", ("hardswish", ())),
    "Gelu": Activation(
        (),
        "(0.5f * {x} * (1.0f + svod_erff({x} * 0.70710678118654752f)))",
        c_tanh="svod_geluf({x})",
    ),
}


def activation_params(op: str, attrs: Dict[str, object], bounds: Sequence[Optional[float]] = ()) -> Dict[str, float]:
    """The float parameters of activation ``op`` from its node's attributes; ``bounds``: Clip's min/max given as
    constant inputs (opset 11+; None where absent). Gelu's ``approximate`` becomes ``tanh`` 1.0 or 0.0."""
    params = {name: float(attrs.get(name, default)) for name, default in ACTIVATIONS[op].attrs}  # type: ignore[arg-type]
    if op == "Gelu":
        params["tanh"] = 1.0 if attrs.get("approximate", "none") == "tanh" else 0.0
    for name, bound in zip(("min", "max"), bounds):
        if bound is not None:
            params[name] = bound
    if op == "Clip" and params["min"] > params["max"]:
        params["min"] = params["max"]  # ONNX: with min > max every value becomes max (onnxruntime agrees)
    return params


#: Activations a pass fuses from several nodes, with no ONNX op of their own: SiLU, ``y * Sigmoid(y)``, in the store
#: of an elementwise node (the same sigmoid as the Sigmoid kernel it replaces; blocked convolutions have their own).
FUSED_ONLY: Dict[str, Activation] = {"SiLU": Activation((), "({x} * svod_sigmoidf({x}))")}


def activation_spec(kind: str) -> Activation:
    """The table entry of activation ``kind``: an op's, or a fused pattern's (:data:`FUSED_ONLY`)."""
    return ACTIVATIONS[kind] if kind in ACTIVATIONS else FUSED_ONLY[kind]


def activation(kind: Optional[str], params: Dict[str, float], v: str) -> str:
    """The C expression of activation ``kind`` (None: none) with ``params`` applied to the C expression ``v``."""
    if kind is None:
        return v
    spec = activation_spec(kind)
    text = spec.c_tanh if spec.c_tanh and params.get("tanh") else spec.c
    return text.format(x=v, **{name: flt(params[name]) for name, _ in spec.attrs})


def library_epilogue(kind: Optional[str], params: Dict[str, float]) -> Tuple[str, Dict[str, float], bool]:
    """(the library epilogue's act name, its float variables, whether the activation still has to run after the
    kernel) for activation ``kind``: Clip runs in the store with finite bounds, as a relu with [0, inf)."""
    if kind is None:
        return "none", {}, False
    spec = activation_spec(kind)
    if spec.library is not None:
        act, names = spec.library
        return act, {var: params[key] for var, key in names}, False
    if kind == "Clip" and math.isfinite(params["min"]) and math.isfinite(params["max"]):
        return "clip", {"clip_min": params["min"], "clip_max": params["max"]}, False
    if kind == "Clip" and params["min"] == 0.0 and params["max"] == math.inf:
        return "relu", {}, False
    return "none", {}, True
