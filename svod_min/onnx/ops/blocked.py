"""Lowerings of the blocked-layout ops the layout pass (:mod:`.layout`) emits.

Each reads its geometry from the plain tensors the node stands for (``layout.logical``) and runs one generated
kernel on the blocked ones: the convolution of :mod:`.csrc_blocked_conv` and the depthwise one of
:mod:`..kernels.blocked_dwconv` (weights and bias packed here, once),
the reorders, pools and global pools of :mod:`.csrc_blocked`, and a per-channel affine as a broadcasting
elementwise kernel over [1, CB, 1, 1, 16] constants.
"""

from __future__ import annotations

import numpy as np

from ..activations import activation
from ..frontend.ir import Node
from ..frontend.layout import (
    BLOCKED_AFFINE,
    BLOCKED_CONV,
    BLOCKED_DWCONV,
    BLOCKED_GLOBAL_POOL,
    BLOCKED_POOL,
    FROM_BLOCKED,
    TO_BLOCKED,
    logical,
)
from ..frontend.table import register
from ..geometry import LANES, pad_channels
from ..kernels import blocked, blocked_pool
from ..kernels.blocked_conv import blocked_conv, pack_weights
from ..kernels.blocked_dwconv import blocked_dwconv, pack_depthwise_weights
from ..kernels.elementwise import elementwise
from .conv import residual_of
from .elementwise import activation_of
from .lowering import Lowering
from .window import geometry


def _plain_shape(L: Lowering, node: Node) -> tuple:
    return L.value(node.attrs["_plain_inputs"][0]).shape


@register([TO_BLOCKED], "plain [N, C, H, W] -> blocked [N, CB, H, W, 16], padding channels zero")
def lower_to_blocked(L: Lowering, node: Node) -> None:
    L.source(blocked.to_blocked(*_plain_shape(L, node)), [node.outputs[0], node.inputs[0]])


@register([FROM_BLOCKED], "blocked -> plain")
def lower_from_blocked(L: Lowering, node: Node) -> None:
    L.source(blocked.from_blocked(*L.value(node.outputs[0]).shape), [node.outputs[0], node.inputs[0]])


@register([BLOCKED_CONV], "group-1 2-D convolution on blocked tensors; bias, activation and residual in the store")
def lower_blocked_conv(L: Lowering, node: Node) -> None:
    plain = logical(node)
    w = L.graph.const(node.inputs[1]).astype(np.float32)
    g = geometry(L, plain, w.shape[2:], w.shape[0], 1)
    bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
    bias = L.graph.const(bias_name) if bias_name else None
    residual = residual_of(node)
    kind, params = activation_of(node)
    plain_input = len(L.value(node.inputs[0]).shape) == 4  # a first layer's few channels, read plain
    kernel = blocked_conv(g, kind, params, bool(residual), plain_input)
    packed = L.const(pack_weights(w), node.inputs[1] + "~nchwc")
    padded = L.const(pad_channels(bias, g.oc), (bias_name or node.outputs[0]) + "~nchwc_bias")
    L.source(kernel, [node.outputs[0], node.inputs[0], packed, padded] + ([residual] if residual else []))


@register([BLOCKED_DWCONV], "depthwise 2-D convolution on blocked tensors; bias and activation in the store")
def lower_blocked_dwconv(L: Lowering, node: Node) -> None:
    plain = logical(node)
    w = L.graph.const(node.inputs[1]).astype(np.float32)
    g = geometry(L, plain, w.shape[2:], w.shape[0], w.shape[0])
    bias_name = node.inputs[2] if len(node.inputs) > 2 else ""
    bias = L.graph.const(bias_name) if bias_name else None
    kernel = blocked_dwconv(g, *activation_of(node))
    packed = L.const(pack_depthwise_weights(w), node.inputs[1] + "~nchwc_dw")
    padded = L.const(pad_channels(bias, g.oc), (bias_name or node.outputs[0]) + "~nchwc_bias")
    L.source(kernel, [node.outputs[0], node.inputs[0], packed, padded])


@register([BLOCKED_POOL], "MaxPool / AveragePool on blocked tensors")
def lower_blocked_pool(L: Lowering, node: Node) -> None:
    plain = logical(node)
    c = _plain_shape(L, node)[1]
    g = geometry(L, plain, list(node.attrs["kernel_shape"]), c)
    op = node.attrs["_op"]
    kernel = blocked_pool.blocked_pool(op, g, bool(int(node.attrs.get("count_include_pad", 0))))
    L.source(kernel, [node.outputs[0], node.inputs[0]])


@register([BLOCKED_GLOBAL_POOL], "GlobalAveragePool / GlobalMaxPool of a blocked tensor, written plain")
def lower_blocked_global_pool(L: Lowering, node: Node) -> None:
    pool = (
        blocked_pool.blocked_global_avgpool
        if node.attrs["_op"] == "GlobalAveragePool"
        else blocked_pool.blocked_global_maxpool
    )
    L.source(pool(*_plain_shape(L, node)), [node.outputs[0], node.inputs[0]])


@register([BLOCKED_AFFINE], "x * scale[c] + shift[c] (+ activation) on a blocked tensor")
def lower_blocked_affine(L: Lowering, node: Node) -> None:
    x, scale, shift = node.inputs
    shape = L.value(x).shape
    channel = (1, shape[1], 1, 1, LANES)
    c = _plain_shape(L, node)[1]
    consts = [
        L.const(pad_channels(L.graph.const(name), c).reshape(channel), name + "~nchwc") for name in (scale, shift)
    ]
    kind, params = activation_of(node)
    expr = activation(kind, params, "(x0 * x1 + x2)")
    L.source(elementwise(shape, [shape, channel, channel], expr, tag="baffine"), [node.outputs[0], x] + consts)
