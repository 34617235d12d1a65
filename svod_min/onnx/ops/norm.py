"""Normalisations: LayerNormalization (library; generated C where its Mean or InvStdDev output is read), Softmax /
LogSoftmax, LRN and InstanceNormalization (generated C). BatchNormalization is registered here, lowered by
:mod:`.batch_norm`."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node, normalize_axis
from ..frontend.table import ANY, one_of, register
from ..kernels import norm as norm_kernels
from ..kernels.layer_norm import layer_norm_stats
from . import batch_norm
from .lowering import F32, Lowering


@register(["LRN"], "generated C", alpha=ANY, beta=ANY, bias=ANY, size=ANY)
def lower_lrn(L: Lowering, node: Node) -> None:
    xs = L.value(node.inputs[0]).shape
    a = node.attrs
    kernel = norm_kernels.lrn(
        xs[0],
        xs[1],
        int(np.prod(xs[2:])),
        int(a["size"]),
        float(a.get("alpha", 1e-4)),
        float(a.get("beta", 0.75)),
        float(a.get("bias", 1.0)),
    )
    L.source(kernel, [node.outputs[0], node.inputs[0]])


register(
    ["BatchNormalization"],
    batch_norm.NOTE,
    check=batch_norm.bn_check,
    epsilon=ANY,
    momentum=ANY,
    spatial=one_of(1),
    is_test=ANY,
    training_mode=one_of(0, 1),
    consumed_inputs=ANY,
)(batch_norm.lower_batchnorm)


@register(
    ["Softmax", "LogSoftmax"],
    "generated C: rows of the last axis (opset < 13: the flattened trailing axes) "
    "or blocks of 64 inner positions, vector exp",
    axis=ANY,
)
def lower_softmax(L: Lowering, node: Node) -> None:
    shape = L.value(node.inputs[0]).shape
    rank = max(1, len(shape))
    opset = L.graph.opset
    axis = normalize_axis(int(node.attrs.get("axis", 1 if opset < 13 else -1)), rank)
    if opset < 13:
        outer, red, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis:])), 1
    else:
        outer, red, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1 :]))
    L.source(norm_kernels.softmax_axis(outer, red, inner, node.op == "LogSoftmax"), [node.outputs[0], node.inputs[0]])


def _layernorm_check(graph: Graph, node: Node) -> Optional[str]:
    shape = graph.values[node.inputs[0]].shape
    axis = normalize_axis(int(node.attrs.get("axis", -1)), len(shape))
    cols = int(np.prod(shape[axis:]))
    for n in node.inputs[1:]:
        if n and graph.values[n].size != cols:
            return "scale/bias that broadcast (they must hold the normalised size)"
    return None


@register(
    ["LayerNormalization"],
    "library layernorm over the trailing axes; generated C where the Mean or InvStdDev output is read",
    check=_layernorm_check,
    axis=ANY,
    epsilon=ANY,
    stash_type=one_of(1),
)
def lower_layernorm(L: Lowering, node: Node) -> None:
    x = node.inputs[0]
    shape = L.value(x).shape
    axis = normalize_axis(int(node.attrs.get("axis", -1)), len(shape))
    rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    scale = node.inputs[1]
    bias = (
        node.inputs[2]
        if len(node.inputs) > 2 and node.inputs[2]
        else L.const(np.zeros(cols, np.float32), node.outputs[0] + "~zero_bias")
    )
    eps = float(node.attrs.get("epsilon", 1e-5))
    if any(node.outputs[1:]):  # the statistics: the library's kernel does not write them
        stats = [
            node.outputs[i] if len(node.outputs) > i and node.outputs[i] else L.temp([rows], hint="stat")
            for i in (1, 2)
        ]
        kernel = layer_norm_stats(rows, cols, eps)
        L.source(kernel, [node.outputs[0], x, scale, bias] + stats, outputs=(0, 4, 5))
        return
    L.library("layernorm", F32, [node.outputs[0], x, scale, bias], {"rows": rows, "cols": cols, "eps": eps})


@register(["InstanceNormalization"], "generated C; statistics per (N, C) plane", epsilon=ANY)
def lower_instance_norm(L: Lowering, node: Node) -> None:
    x, scale, bias = node.inputs
    shape = L.value(x).shape
    size = int(np.prod(shape[2:]))
    kernel = norm_kernels.instance_norm(shape[0] * shape[1], shape[1], size, float(node.attrs.get("epsilon", 1e-5)))
    L.source(kernel, [node.outputs[0], x, scale, bias])
