"""ReverseSequence on every dtype: sequence_lens constant (checked at build by frontend/indices.py) or from data
(checked by the kernel: a length outside [0, steps] is reported, exit 2; docs/onnx.md, "Indices")."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import one_of, register
from ..kernels.sequence import reverse_sequence
from .lowering import Lowering
from .shape import MOVABLE


def _axes(node: Node) -> tuple:
    return int(node.attrs.get("time_axis", 0)), int(node.attrs.get("batch_axis", 1))


def _reverse_sequence_check(graph: Graph, node: Node) -> Optional[str]:
    shape = graph.values[node.inputs[0]].shape
    lens = graph.values[node.inputs[1]]
    time_axis, batch_axis = _axes(node)
    if time_axis == batch_axis:
        return "time_axis and batch_axis are both %d" % time_axis
    if len(shape) < 2:
        return "input of rank %d (ReverseSequence takes rank 2 or more)" % len(shape)
    if lens.dtype != "int64" or lens.shape != (shape[batch_axis],):
        return "sequence_lens %r is %s %s (ONNX: int64 [%d], one per batch element)" % (
            lens.name,
            lens.dtype,
            list(lens.shape),
            shape[batch_axis],
        )
    return None


@register(
    ["ReverseSequence"],
    "generated C, any dtype; sequence_lens constant (checked at build) or from data (checked by the kernel: a "
    "length outside [0, steps] is reported, exit 2)",
    check=_reverse_sequence_check,
    dtypes=MOVABLE,
    time_axis=one_of(0, 1),
    batch_axis=one_of(0, 1),
)
def lower_reverse_sequence(L: Lowering, node: Node) -> None:
    x, lens, out = node.inputs[0], node.inputs[1], node.outputs[0]
    shape = L.value(x).shape
    time_axis, batch_axis = _axes(node)
    steps, batch = int(shape[time_axis]), int(shape[batch_axis])
    if L.value(out).size == 0:
        return
    kernel = reverse_sequence(steps, batch, int(np.prod(shape[2:])), time_axis == 0, L.value(x).dtype)
    why = "axis %d of %r has %d time steps" % (time_axis, x, steps)
    status = L.status_slots(node.label(), "sequence_lens %r" % lens, L.value(lens).shape, why, kernel.chunks)
    L.source(kernel, [out, x, lens, status], outputs=(0, 3))
