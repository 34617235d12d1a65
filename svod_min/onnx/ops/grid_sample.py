"""GridSample: x sampled at the points a grid holds (normalised coordinates in [-1, 1], fed at run time or constant),
over 1 to 3 spatial axes; nearest, linear (bilinear) and cubic (bicubic); zeros, border and reflection padding.
The grid's values are coordinates, not indices: any value is valid, and every tap the kernel reads is clamped into
x (kernels/templates/grid_sample.c.j2)."""

from __future__ import annotations

from typing import Optional

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import one_of, register
from ..kernels.grid_sample import grid_sample
from .lowering import Lowering

#: The opset 16 names of the modes and the opset 20 ones.
MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


def _grid_sample_check(graph: Graph, node: Node) -> Optional[str]:
    x, grid = graph.values[node.inputs[0]].shape, graph.values[node.inputs[1]].shape
    if not 3 <= len(x) <= 5:
        return "input of rank %d (1 to 3 spatial axes are implemented)" % len(x)
    if len(grid) != len(x) or grid[0] != x[0] or grid[-1] != len(x) - 2:
        return "grid of shape %s for an input of shape %s (expected [%d, ..., %d])" % (
            list(grid),
            list(x),
            x[0],
            len(x) - 2,
        )
    return None


@register(
    ["GridSample"],
    "generated C; 1 to 3 spatial axes; the grid fed at run time or constant (coordinates: every read clamped into "
    "the input)",
    check=_grid_sample_check,
    mode=one_of(*MODES),
    padding_mode=one_of("zeros", "border", "reflection"),
    align_corners=one_of(0, 1),
)
def lower_grid_sample(L: Lowering, node: Node) -> None:
    x, grid, out = node.inputs[0], node.inputs[1], node.outputs[0]
    shape, grid_shape = L.value(x).shape, L.value(grid).shape
    kernel = grid_sample(
        int(shape[0]),
        int(shape[1]),
        [int(d) for d in shape[2:]],
        int(np.prod(grid_shape[1:-1])),
        MODES[node.attrs.get("mode", "bilinear" if L.graph.opset < 20 else "linear")],
        node.attrs.get("padding_mode", "zeros"),
        bool(node.attrs.get("align_corners", 0)),
    )
    L.source(kernel, [out, x, grid])
