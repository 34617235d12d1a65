"""Conv: the library's conv2d_gemm / depthwise_conv2d where they fit (weights packed at build time; bias, activation
and residual in their epilogue), a convolution as one matmul (1x1, or over im2col columns), or generated C."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Tuple

import numpy as np

from ...kernels.conv_pack import pack_conv_weights
from ..activations import activation, library_epilogue
from ..frontend.ir import Node
from ..frontend.table import ANY, register
from ..geometry import ConvGeom
from ..kernels import conv as conv_kernels
from ..kernels.elementwise import elementwise
from . import lowering
from .elementwise import activation_of, apply_activation
from .lowering import F32, Lowering
from .matmul import epilogue
from .window import PAD_MODES, geometry, window_check

#: Grouped convolutions of at most this many groups run as one library conv2d per group (N = 1).
LIBRARY_GROUPS = 8
#: Largest im2col buffer (bytes) a convolution may use to run as one library matmul (the arena reuses it).
IM2COL_BYTES = 64 << 20


@register(
    ["Conv"],
    "2-D float32: the blocked layout's direct convolution (one group, >= 16 output channels), "
    "else library conv2d_gemm (any groups, any N; depthwise: generated C); "
    "bias, BatchNormalization, the activations and a residual Add in the epilogue; "
    "1-D: library matmul over im2col columns, conv2d, or generated C",
    check=window_check,
    auto_pad=PAD_MODES,
    dilations=ANY,
    group=ANY,
    kernel_shape=ANY,
    pads=ANY,
    strides=ANY,
)
def lower_conv(L: Lowering, node: Node) -> None:
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    out = node.outputs[0]
    ws = L.value(w).shape
    g = geometry(L, node, ws[2:], ws[0], int(node.attrs.get("group", 1)))
    if one_out_applies(L, node, g):
        kind, params = activation_of(node)
        L.source(conv_kernels.conv_one_out(g, bool(bias), kind, params), [out, x, w] + ([bias] if bias else []))
    elif conv_library_applies(L, node, g):
        lower_conv_library(L, node, g, bias)
    elif residual_of(node):  # the residual Add and activation run after a plain convolution
        _lower_conv_generic(L, dataclasses.replace(node, inputs=node.inputs[:3], fused={}), g, x, w, bias, out)
        add_residual(L, node, out)
    else:
        _lower_conv_generic(L, node, g, x, w, bias, out)


def _lower_conv_generic(L: Lowering, node: Node, g: ConvGeom, x: str, w: str, bias: str, out: str) -> None:
    """1-D and other convolutions the library kernels leave out: matmul over im2col, conv2d, generated C."""
    symmetric = g.pt == g.pb and g.pl == g.pr
    kind, _ = activation_of(node)
    if g.groups == 1 and g.n == 1 and (g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr) == (1, 1, 1, 1, 0, 0, 0, 0):
        _conv_as_matmul(L, node, g, x, w, bias, out)
    elif g.groups == 1 and g.n == 1 and 4 * g.c * g.kh * g.kw * g.oh * g.ow <= IM2COL_BYTES:
        col = L.temp((g.c * g.kh * g.kw, g.oh * g.ow), hint="col")
        L.source(conv_kernels.im2col(g), [col, x])
        _conv_as_matmul(L, node, g, col, w, bias, out, k=g.c * g.kh * g.kw)
    elif g.n == 1 and (g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr) == (1, 1, 1, 1, 0, 0, 0, 0) and g.groups <= 64:
        _grouped_pointwise(L, node, g, x, w, bias, out)
    elif g.groups == g.c == g.oc and conv_kernels.depthwise_padded_plane(g) <= conv_kernels.DEPTHWISE_PAD_MAX:
        kind, params = activation_of(node)
        L.source(conv_kernels.depthwise2d(g, bool(bias), kind, params), [out, x, w] + ([bias] if bias else []))
    elif symmetric and (g.groups == 1 or (g.n == 1 and g.groups <= LIBRARY_GROUPS)) and kind in (None, "Relu"):
        _conv_library(L, g, x, w, bias, out)
        apply_activation(L, out, node)
    else:
        kind, params = activation_of(node)
        L.source(conv_kernels.conv2d(g, bool(bias), kind, params), [out, x, w] + ([bias] if bias else []))


def _conv_library(L: Lowering, g: ConvGeom, x: str, w: str, bias: str, out: str) -> None:
    cg, ocg = g.c // g.groups, g.oc // g.groups
    params = {"dtype": "float32", "bias": bool(bias)}
    for k in range(g.groups):
        if g.groups == 1:
            bx, bw, bb, bo = x, w, bias, out
        else:
            bx = L.subview(x, 4 * k * cg * g.h * g.w, (1, cg, g.h, g.w))
            bw = L.subview(w, 4 * k * ocg * cg * g.kh * g.kw, (ocg, cg, g.kh, g.kw))
            bb = L.subview(bias, 4 * k * ocg, (ocg,)) if bias else ""
            bo = L.subview(out, 4 * k * ocg * g.oh * g.ow, (1, ocg, g.oh, g.ow))
        variables = {
            "N": g.n,
            "C": cg,
            "H": g.h,
            "W": g.w,
            "OC": ocg,
            "KH": g.kh,
            "KW": g.kw,
            "sh": g.sh,
            "sw": g.sw,
            "ph": g.pt,
            "pw": g.pl,
            "dh": g.dh,
            "dw": g.dw,
        }
        L.library("conv2d", params, [bo, bx, bw] + ([bb] if bias else []), variables)


def _conv_as_matmul(L: Lowering, node: Node, g: ConvGeom, x: str, w: str, bias: str, out: str, k: int = 0) -> None:
    """N = 1: out[OC, OH*OW] = W[OC, K] @ x[K, OH*OW] (x: the input of a 1x1 stride-1 unpadded conv, or its im2col
    columns), then bias and activation in place."""
    hw = g.oh * g.ow
    L.library("matmul", F32, [out, w, x], {"M": g.oc, "N": hw, "K": k or g.c})
    epilogue(L, node, out, (g.oc, hw), bias, (g.oc, 1))


def _grouped_pointwise(L: Lowering, node: Node, g: ConvGeom, x: str, w: str, bias: str, out: str) -> None:
    """A grouped 1x1 convolution (N = 1): one library matmul per group on views, then one bias/activation epilogue."""
    cg, ocg, hw = g.c // g.groups, g.oc // g.groups, g.h * g.w
    for k in range(g.groups):
        bo = L.subview(out, 4 * k * ocg * hw, (ocg, hw))
        bw = L.subview(w, 4 * k * ocg * cg, (ocg, cg))
        bx = L.subview(x, 4 * k * cg * hw, (cg, hw))
        L.library("matmul", F32, [bo, bw, bx], {"M": ocg, "N": hw, "K": cg})
    epilogue(L, node, out, (g.oc, hw), bias, (g.oc, 1))


def residual_of(node: Node) -> str:
    """The tensor a residual Add fused into ``node`` adds to its output ('' when none)."""
    return node.inputs[3] if node.fused.get("residual") and len(node.inputs) > 3 else ""


def _epilogue_act(node: Node) -> Tuple[str, Dict[str, float], bool]:
    """(act param, its float variables, whether the activation still has to run after the kernel)."""
    return library_epilogue(*activation_of(node))


def one_out_applies(L: Lowering, node: Node, g: ConvGeom) -> bool:
    """A 2-D float32 convolution with one group and one output channel, without a fused residual: the row kernel
    (conv2d_gemm's 8-row tile would compute seven channels for nothing)."""
    x = L.value(node.inputs[0])
    return g.oc == 1 and g.groups == 1 and len(x.shape) == 4 and x.dtype == "float32" and not residual_of(node)


def conv_library_applies(L: Lowering, node: Node, g: ConvGeom) -> bool:
    """2-D float32 convolutions whose output size is the kernel's (all group counts, any N)."""
    if len(L.value(node.inputs[0]).shape) != 4 or L.value(node.inputs[0]).dtype != "float32":
        return False
    oh = (g.h + g.pt + g.pb - g.dh * (g.kh - 1) - 1) // g.sh + 1
    ow = (g.w + g.pl + g.pr - g.dw * (g.kw - 1) - 1) // g.sw + 1
    if is_depthwise(g) and "depthwise_conv2d" not in lowering.LIBRARY_KERNELS:
        return False
    return (oh, ow) == (g.oh, g.ow) and min(g.pt, g.pl, g.pb, g.pr) >= 0


def is_depthwise(g: ConvGeom) -> bool:
    """Each group is one channel in and one out."""
    return g.groups == g.c == g.oc and g.groups > 1


def lower_conv_library(L: Lowering, node: Node, g: ConvGeom, bias: str) -> None:
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
    variables.update(
        {
            "KH": g.kh,
            "KW": g.kw,
            "sh": g.sh,
            "sw": g.sw,
            "pt": g.pt,
            "pl": g.pl,
            "pb": g.pb,
            "pr": g.pr,
            "dh": g.dh,
            "dw": g.dw,
        }
    )
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
    expr = activation(kind, params, "(x0 + x1)")
    L.source(elementwise(shape, [shape, shape], expr, inplace=True, tag="residual"), [out, residual_of(node)])
