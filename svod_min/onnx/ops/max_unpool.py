"""MaxUnpool: x's elements scattered into a zero tensor of the output's shape at the flat positions its indices hold
(MaxPool's Indices output), generated C (:mod:`..kernels.unpool`).

The indices are checked: constant ones at build (frontend/indices.py), ones from data by the kernel, which skips and
reports a position outside the output (docs/onnx.md, "Indices"). An ``output_shape`` input must be known at build
(a constant, or pinned with ``--pin``) and equal the default shape, ``(in - 1) * stride - pads + kernel`` per spatial
axis: for a larger one, onnx's reference (and its test data) reads the indices as positions in the default shape,
placed at the origin of the larger output, while onnxruntime reads them as positions in the larger output; the two
disagree, so such a node is refused by name rather than answered one way."""

from __future__ import annotations

from typing import List, Optional

import numpy as np

from ..frontend.indices import unpool_default_shape
from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..kernels.unpool import max_unpool
from .lowering import Lowering

#: The dtypes of x (ONNX's T1): moved as bits, so float16 and bfloat16 stay exact.
UNPOOL_DTYPES = ("float32", "float64", "float16", "bfloat16")


def _default_shape(graph: Graph, node: Node) -> List[int]:
    return unpool_default_shape(node.attrs, graph.values[node.inputs[0]].shape)


def _unpool_check(graph: Graph, node: Node) -> Optional[str]:
    x, idx = graph.values[node.inputs[0]], graph.values[node.inputs[1]]
    if len(x.shape) < 3:
        return "input %r of shape %s (N, C and at least one spatial axis)" % (x.name, list(x.shape))
    if tuple(idx.shape) != tuple(x.shape):
        return "indices %r of shape %s for x of shape %s (equal shapes)" % (idx.name, list(idx.shape), list(x.shape))
    default = _default_shape(graph, node)
    if len(node.inputs) > 2 and node.inputs[2]:
        name = node.inputs[2]
        if not graph.is_const(name):
            return "output_shape %r must be a constant (it decides the output's shape: build with --pin %s=...)" % (
                name,
                name,
            )
        given = [int(d) for d in graph.const(name).reshape(-1)]
        if given != default:
            return (
                "output_shape %s differs from the default shape %s: onnx's reference and onnxruntime read the "
                "indices differently there" % (given, default)
            )
    out = list(graph.values[node.outputs[0]].shape)
    if out != default:
        return "output of shape %s where MaxUnpool gives %s" % (out, default)
    return None


@register(
    ["MaxUnpool"],
    "generated C; a zero output, then each element at its flat index (in order; int64 indices constant, checked at "
    "build, or from data, checked by the kernel: a bad one is skipped and reported, exit 2); output_shape, when "
    "given, constant or pinned and equal to the default shape",
    check=_unpool_check,
    dtypes=UNPOOL_DTYPES + ("int64",),
    kernel_shape=ANY,
    pads=ANY,
    strides=ANY,
)
def lower_max_unpool(L: Lowering, node: Node) -> None:
    x, indices, out = node.inputs[0], node.inputs[1], node.outputs[0]
    total, count = L.value(out).size, L.value(x).size
    checked = not L.graph.is_const(indices)
    if not checked:
        indices = L.const(L.graph.const(indices).astype(np.int64).reshape(-1), indices)
    kernel = max_unpool(total, count, L.value(x).dtype, checked)
    if not checked:
        L.source(kernel, [out, x, indices])
        return
    why = "a flat position in %r, shape %s" % (out, list(L.value(out).shape))
    status = L.status_slots(node.label(), "indices %r" % indices, L.value(indices).shape, why, 1)
    L.source(kernel, [out, x, indices, status], outputs=(0, 3))
