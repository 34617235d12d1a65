"""Library convolution and pooling kernels (docs/kernels.md): conv2d_gemm, depthwise_conv2d, maxpool2d,
avgpool2d, global_avgpool, for 2-D float32 tensors; a bundle needs no compiler to run them.

A convolution's epilogue ``act(conv + bias + residual)`` runs in the kernel for every activation the fuse
pass attaches (only a Clip with one open bound, other than Relu's, runs after it, in place). The prebuilt
objects hold none, relu and clip; a bundle carries objects for the other instances. Constant conv2d_gemm
weights are packed here into the kernel's panel layout (``packed=True``) and stored packed in the bundle.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Tuple

import numpy as np

from ..kernels.conv_pack import pack_conv_weights
from . import csrc
from .ir import Node
from .lower import Lowering
from .ops_elementwise import activation_of, apply_activation

def residual_of(node: Node) -> str:
    """The tensor a residual Add fused into ``node`` adds to its output ('' when none)."""
    return node.inputs[3] if node.fused.get("residual") and len(node.inputs) > 3 else ""


#: ONNX activation -> the library epilogue's act and its float variables ((variable, activation param), ...).
EPILOGUE_ACTS: Dict[str, Tuple[str, Tuple[Tuple[str, str], ...]]] = {
    "Relu": ("relu", ()),
    "LeakyRelu": ("leaky_relu", (("alpha", "alpha"),)),
    "Sigmoid": ("sigmoid", ()),
    "Tanh": ("tanh", ()),
    "HardSigmoid": ("hardsigmoid", (("alpha", "alpha"), ("beta", "beta"))),
    "HardSwish": ("hardswish", ()),
}


def _epilogue_act(node: Node) -> Tuple[str, Dict[str, float], bool]:
    """(act param, its float variables, whether the activation still has to run after the kernel)."""
    kind, params = activation_of(node)
    if kind is None:
        return "none", {}, False
    if kind in EPILOGUE_ACTS:
        act, names = EPILOGUE_ACTS[kind]
        return act, {var: params[key] for var, key in names}, False
    if kind == "Clip" and math.isfinite(params["min"]) and math.isfinite(params["max"]):
        return "clip", {"clip_min": params["min"], "clip_max": params["max"]}, False
    if kind == "Clip" and params["min"] == 0.0 and params["max"] == math.inf:
        return "relu", {}, False
    return "none", {}, True


#: The library kernels the lowering uses. The library's depthwise_conv2d, maxpool2d and avgpool2d run
#: slower than the generated C on the light models' shapes (docs/onnx.md, "Lowering"), so depthwise
#: convolutions and windowed pools stay generated until those kernels catch up; the paths stay tested.
LIBRARY_KERNELS = frozenset({"conv2d_gemm", "global_avgpool"})


def conv_library_applies(L: Lowering, node: Node, g: csrc.ConvGeom) -> bool:
    """2-D float32 convolutions whose output size is the kernel's (all group counts, any N)."""
    if len(L.value(node.inputs[0]).shape) != 4 or L.value(node.inputs[0]).dtype != "float32":
        return False
    oh = (g.h + g.pt + g.pb - g.dh * (g.kh - 1) - 1) // g.sh + 1
    ow = (g.w + g.pl + g.pr - g.dw * (g.kw - 1) - 1) // g.sw + 1
    if is_depthwise(g) and "depthwise_conv2d" not in LIBRARY_KERNELS:
        return False
    return (oh, ow) == (g.oh, g.ow) and min(g.pt, g.pl, g.pb, g.pr) >= 0


def is_depthwise(g: csrc.ConvGeom) -> bool:
    """Each group is one channel in and one out."""
    return g.groups == g.c == g.oc and g.groups > 1


def lower_conv_library(L: Lowering, node: Node, g: csrc.ConvGeom, bias: str) -> None:
    """One conv2d_gemm (or depthwise_conv2d when each group is one channel in, one out) with the epilogue fused."""
    x, w, out = node.inputs[0], node.inputs[1], node.outputs[0]
    residual = residual_of(node)
    act, act_vars, after = _epilogue_act(node)
    depthwise = is_depthwise(g)
    packed = not depthwise and L.graph.is_const(w)
    if (residual or packed) and not bias:  # the prebuilt residual and packed instances take a bias
        bias = L.const(np.zeros(g.oc, np.float32), out + "~zero_bias")
    params: Dict[str, Any] = {"dtype": "float32", "act": act, "bias": bool(bias), "residual": bool(residual)}
    if packed:  # the weights in the kernel's panel layout, once, here (docs/kernels.md)
        w = L.const(pack_conv_weights(L.graph.const(w).astype(np.float32), g.groups), w + "~packed")
        params["packed"] = True
    variables: Dict[str, Any] = {"N": g.n, "C": g.c, "H": g.h, "W": g.w}
    if not depthwise:
        variables["OC"] = g.oc
    variables.update({"KH": g.kh, "KW": g.kw, "sh": g.sh, "sw": g.sw, "pt": g.pt, "pl": g.pl, "pb": g.pb,
                      "pr": g.pr, "dh": g.dh, "dw": g.dw})  # fmt: skip
    if not depthwise:
        variables["groups"] = g.groups
    variables.update(act_vars)
    buffers = [out, x, w] + ([bias] if bias else []) + ([residual] if residual else [])
    L.library("depthwise_conv2d" if depthwise else "conv2d_gemm", params, buffers, variables)
    if after:
        apply_activation(L, out, node)


def add_residual(L: Lowering, node: Node, out: str) -> None:
    """out = act(out + residual) in place: a fused residual Add on a path without the library epilogue
    (the caller lowered the convolution itself without the activation)."""
    kind, params = activation_of(node)
    shape = L.value(out).shape
    expr = csrc.activation(kind, params, "(x0 + x1)")
    L.source(csrc.elementwise(shape, [shape, shape], expr, inplace=True, tag="residual"), [out, residual_of(node)])


def lower_pool_library(L: Lowering, node: Node, g: csrc.ConvGeom) -> bool:
    """maxpool2d / avgpool2d for a 2-D float32 pool; False where they do not apply (the caller generates C)."""
    x, out = node.inputs[0], node.outputs[0]
    if ("maxpool2d" if node.op == "MaxPool" else "avgpool2d") not in LIBRARY_KERNELS:
        return False
    if len(L.value(x).shape) != 4 or L.value(x).dtype != "float32" or min(g.pt, g.pl, g.pb, g.pr) < 0:
        return False
    if not _windows_start_inside(g):
        return False
    base = {"N": g.n, "C": g.c, "H": g.h, "W": g.w, "OH": g.oh, "OW": g.ow, "KH": g.kh, "KW": g.kw,
            "sh": g.sh, "sw": g.sw, "pt": g.pt, "pl": g.pl}  # fmt: skip
    if node.op == "MaxPool":
        L.library("maxpool2d", {"dtype": "float32"}, [out, x], dict(base, dh=g.dh, dw=g.dw))
        return True
    if (g.dh, g.dw) != (1, 1):
        return False
    include = int(node.attrs.get("count_include_pad", 0))
    L.library("avgpool2d", {"dtype": "float32"}, [out, x], dict(base, pb=g.pb, pr=g.pr, count_include_pad=include))
    return True


def _windows_start_inside(g: csrc.ConvGeom) -> bool:
    """ceil_mode may add a last window; the kernel refuses one that starts past the padded input."""
    return (g.oh - 1) * g.sh < g.h + g.pt and (g.ow - 1) * g.sw < g.w + g.pl


def lower_global_avgpool_library(L: Lowering, node: Node) -> bool:
    """global_avgpool for a 4-D float32 input; False where it does not apply."""
    xs = L.value(node.inputs[0]).shape
    if len(xs) != 4 or L.value(node.inputs[0]).dtype != "float32":
        return False
    variables = {"N": xs[0], "C": xs[1], "H": xs[2], "W": xs[3]}
    L.library("global_avgpool", {"dtype": "float32"}, [node.outputs[0], node.inputs[0]], variables)
    return True
