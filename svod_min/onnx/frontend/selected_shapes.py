"""Output shapes that a constant decides and onnx's shape inference leaves open: Compress with a constant (or pinned)
condition keeps the positions its condition selects, so its output's length along the axis (or, without an axis, of
the flattened input) is the number of true entries among the first ones; MaxUnpool with a constant (or pinned)
``output_shape`` has that shape.

:func:`selected_shapes` writes those shapes into the model's value_info (or the graph output's type), so the next
inference round carries them to the nodes that follow."""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import numpy_helper


def compress_length(condition: np.ndarray, n: int) -> int:
    """The positions a Compress condition keeps of ``n``: its true entries among the first ``n`` (ONNX discards the
    slices past the condition's length; a true entry past ``n`` is the op table's to refuse)."""
    return int(np.count_nonzero(np.asarray(condition).reshape(-1)[:n]))


def _compress_dims(node: onnx.NodeProto, shape: Tuple[int, ...], condition: np.ndarray) -> Optional[List[int]]:
    axes = [int(a.i) for a in node.attribute if a.name == "axis"]
    if not axes:
        return [compress_length(condition, int(np.prod(shape)))]
    axis = axes[0] + len(shape) if axes[0] < 0 else axes[0]
    if not 0 <= axis < len(shape):
        return None  # shape inference names a bad axis
    dims = list(shape)
    dims[axis] = compress_length(condition, shape[axis])
    return dims


def _dims(node: onnx.NodeProto, shape: Tuple[int, ...], operand: np.ndarray) -> Optional[List[int]]:
    if node.op_type == "Compress":
        return _compress_dims(node, shape, operand)
    dims = [int(d) for d in operand.reshape(-1)]
    return dims if len(dims) == len(shape) and min(dims, default=0) >= 0 else None  # else inference names it


#: The ops whose output shape a constant operand decides, and that operand's position.
DECIDING = {"Compress": 1, "MaxUnpool": 2}


def selected_shapes(model: onnx.ModelProto, shapes: Dict[str, Tuple[int, ...]]) -> bool:
    """Set the output shape of each default-domain op of ``DECIDING`` whose input has a static shape (``shapes``)
    and whose deciding operand is an initializer; True when one was set."""
    consts = {t.name: t for t in model.graph.initializer}
    declared = DeclaredShapes(model)
    found = False
    for node in model.graph.node:
        at = DECIDING.get(node.op_type)
        if at is None or node.domain not in ("", "ai.onnx") or len(node.input) <= at or not node.output:
            continue
        src = shapes.get(node.input[0])
        if src is None or node.input[at] not in consts or node.output[0] in shapes:
            continue
        dims = _dims(node, src, numpy_helper.to_array(consts[node.input[at]]))
        if dims is not None and declared.declare(node.output[0], node.input[0], dims):
            found = True
    return found


class DeclaredShapes:
    """Writes a shape the front end computed where onnx's inference has none: into the output's declaration, or a
    value_info, with the element type of the value it derives from."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.model = model
        self.infos = {vi.name: vi for vi in list(model.graph.input) + list(model.graph.value_info)}
        self.outputs = {o.name: o for o in model.graph.output}

    def declare(self, name: str, like: str, dims: List[int]) -> bool:
        """``name`` gets ``dims`` and ``like``'s element type; False (nothing written) where ``like``'s type is
        unknown."""
        if like not in self.infos:
            return False
        target = self.outputs.get(name) or self.model.graph.value_info.add()
        target.name = name
        target.type.tensor_type.elem_type = self.infos[like].type.tensor_type.elem_type
        target.type.tensor_type.shape.Clear()
        for d in dims:
            target.type.tensor_type.shape.dim.add().dim_value = d
        return True
