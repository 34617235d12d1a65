"""BatchNormalization. Constant statistics in inference are folded by the passes (into the Conv/Gemm before it, else
an affine: ``frontend/passes.py``); what reaches this lowering is one generated kernel per node
(kernels/templates/batch_norm.c.j2): inference with mean and var fed at run time, or ``training_mode=1`` (opset 14+),
which normalises by the batch's own mean and population variance and writes the running statistics
(``input * momentum + batch * (1 - momentum)``) to its optional outputs; before opset 14 a node with the training
outputs (mean, var, saved_mean, saved_var) is the same training node (its saved statistics are refused).
:mod:`.norm` registers the op with these functions."""

from __future__ import annotations

import math
from typing import Optional

from ..activations import activation
from ..frontend.ir import Graph, Node
from ..kernels.batch_norm import batch_norm
from .elementwise import activation_of
from .lowering import Lowering

NOTE = (
    "inference with constant statistics: folded into the Conv/Gemm before it, else one per-channel scale+shift "
    "kernel; statistics fed at run time or training_mode=1 (the batch's mean and population variance, the running "
    "statistics written): generated C per channel"
)


def _training(opset: int, node: Node) -> bool:
    """Whether the node normalises by the batch's statistics: training_mode=1 from opset 14; before it, the node's
    five outputs (mean, var, saved_mean, saved_var beside y) say so, read or not, as onnxruntime takes them."""
    if opset >= 14:
        return bool(node.attrs.get("training_mode", 0))
    return len(node.outputs) > 1


def bn_check(graph: Graph, node: Node) -> Optional[str]:
    if len(graph.values[node.inputs[0]].shape) < 2:
        return "input of rank %d (BatchNormalization takes [N, C, ...])" % len(graph.values[node.inputs[0]].shape)
    training = _training(graph.opset, node)
    if any(node.outputs[1:]) and not training:
        return "the running mean and var outputs without training_mode=1"
    if training and any(node.outputs[3:]):
        return "the saved mean and variance outputs (training's gradient statistics)"
    return None


def lower_batchnorm(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    training = _training(L.graph.opset, node)
    kind, params = activation_of(node)
    kernel = batch_norm(
        int(shape[0]),
        int(shape[1]),
        int(math.prod(shape[2:])),
        float(node.attrs.get("epsilon", 1e-5)),
        float(node.attrs.get("momentum", 0.9)),
        training,
        activation(kind, params, "v"),
    )
    buffers = [out] + list(node.inputs[:5])
    if not training:
        L.source(kernel, buffers)
        return
    stats = [
        node.outputs[i] if len(node.outputs) > i and node.outputs[i] else L.temp([shape[1]], hint="stat")
        for i in (1, 2)
    ]
    L.source(kernel, buffers + stats, outputs=(0, 6, 7))
