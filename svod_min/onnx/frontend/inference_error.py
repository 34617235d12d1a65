"""Which node a failed shape inference is about: onnx names only the op type, so the node list is bisected.

Strict shape inference refuses a model whose shapes contradict each other (inputs that do not broadcast, an axis
past the rank, a Concat of mismatched parts...), but its message says ``(op_type:Add)``, not which Add. The first
failing node is the one whose prefix of the node list fails while the prefix before it infers: found in log2(nodes)
inference runs, and only when inference has already failed.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import onnx
from onnx import shape_inference

Shapes = Dict[str, List[int]]


def inference_failure(model: onnx.ModelProto, message: str, opset: int) -> str:
    """The refusal's text: the node (index, op, name), onnx's complaint and the node's inputs with their shapes."""
    try:
        index, shapes = first_failing_node(model)
    except Exception:  # locating is a courtesy: onnx's own message still says what is wrong
        index, shapes = None, {}
    if index is None:
        return "shape inference fails on the model (an input shape that contradicts it?): %s" % message
    node = model.graph.node[index]
    why = message.rsplit("] ", 1)[-1]  # onnx's detail, after its "[ShapeInferenceError] ... (op_type:X): [..] "
    inputs = ", ".join("%r %s" % (n, shapes.get(n, "?")) for n in node.input if n)
    return "node %d (%s%s), opset %d: shape inference fails: %s (inputs %s)" % (
        index,
        node.op_type,
        ", %r" % node.name if node.name else "",
        opset,
        why,
        inputs or "none",
    )


def first_failing_node(model: onnx.ModelProto) -> Tuple[Optional[int], Shapes]:
    """The index of the first node whose inference fails and the static shapes known before it (None, {} when
    every prefix infers: the fault is not a node's)."""
    lo, hi = 0, len(model.graph.node)  # the prefix of lo nodes infers; the one of hi nodes is still to be shown to fail
    if not _fails(model, hi):
        return None, {}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _fails(model, mid):
            hi = mid
        else:
            lo = mid
    if _fails(model, lo):  # even no node at all fails: the inputs or outputs themselves
        return None, {}
    return hi - 1, _shapes(_infer(_prefix(model, lo)))


def _fails(model: onnx.ModelProto, count: int) -> bool:
    try:
        _infer(_prefix(model, count))
    except Exception:
        return True
    return False


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)  # as parse.infer


def _prefix(model: onnx.ModelProto, count: int) -> onnx.ModelProto:
    """``model`` with its first ``count`` nodes; graph outputs that those nodes do not make are dropped."""
    part = onnx.ModelProto()
    part.CopyFrom(model)
    del part.graph.node[count:]
    made = {o for n in part.graph.node for o in n.output} | {i.name for i in part.graph.input}
    made |= {t.name for t in part.graph.initializer}
    kept = [o for o in part.graph.output if o.name in made]
    del part.graph.output[:]
    part.graph.output.extend(kept)
    return part


def _shapes(model: onnx.ModelProto) -> Shapes:
    out: Shapes = {}
    for t in model.graph.initializer:
        out[t.name] = list(t.dims)
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        dims = _dims(vi)
        if dims is not None:
            out[vi.name] = dims
    return out


def _dims(vi: Any) -> Optional[List[int]]:
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    dims = []
    for d in vi.type.tensor_type.shape.dim:
        if not d.HasField("dim_value"):
            return None
        dims.append(int(d.dim_value))
    return dims
