"""Loop and Scan with a trip count known at build time, unrolled into the nodes of their body.

A bundle fixes every shape, so a loop whose trip count is a constant once the inputs are bound (a Loop's ``M``, a
Scan's scanned axis) is its body repeated: iteration ``k``'s values get names prefixed ``<first output>~loop<k>~``,
the loop-carried values of one iteration feed the next, the iteration number is a constant, and each scan output is
its per-iteration values stacked (Unsqueeze, then one Concat). Names of the outer scope that the body reads stay.

What is not unrolled (the op table then refuses the node by name): a trip count that is not a constant, a Loop whose
condition is not a constant true or whose body computes its own condition (an early exit decides shapes at run
time), a body holding subgraphs of its own, an opset-8 Scan (batch-major, with sequence lengths), and loops whose
unrolled form would exceed :data:`MAX_UNROLLED_NODES` nodes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: The most nodes an unrolled loop may become: a loop of thousands of iterations stays a (refused) loop.
MAX_UNROLLED_NODES = 20000


def unroll_loop(node: Any, consts: Dict[str, np.ndarray], model: onnx.ModelProto, opset: int) -> Optional[List[Any]]:
    """The nodes replacing a Loop whose trip count ``M`` is a constant and whose condition stays true; None where the
    loop is left as it is."""
    body = _body(node)
    if body is None or len(node.input) < 2 or not node.input[0] or node.input[0] not in consts:
        return None
    trips = int(np.asarray(consts[node.input[0]]).reshape(-1)[0])
    if node.input[1] and not _constant_true(consts.get(node.input[1])):
        return None
    if not _condition_passes_through(body):
        return None
    carried = list(node.input[2:])
    n_carried, n_scan = len(carried), len(body.output) - 1 - len(carried)
    if trips < 0 or n_scan < 0 or trips * max(len(body.node), 1) > MAX_UNROLLED_NODES:
        return None
    if trips == 0 and n_scan:
        return None  # empty scan outputs of a shape the body would have given: not known without running it
    unroller = _Unroller(node, body, model, opset)
    state = carried
    per_iteration: List[List[str]] = []
    for k in range(trips):
        inputs = [unroller.constant(np.array(k, np.int64), k, "iter"), unroller.constant(np.array(True), k, "cond")]
        outputs = unroller.iteration(k, inputs + state)
        state, scans = outputs[1 : 1 + n_carried], outputs[1 + n_carried :]
        per_iteration.append(scans)
    unroller.finish(node.output[:n_carried], state)
    for j, name in enumerate(node.output[n_carried:]):
        unroller.stack(name, [scans[j] for scans in per_iteration], 0, False)
    return unroller.nodes


def unroll_scan(
    node: Any, shapes: Dict[str, Tuple[int, ...]], model: onnx.ModelProto, opset: int
) -> Optional[List[Any]]:
    """The nodes replacing a Scan (opset 9 on) whose scanned axes have static lengths; None where it is left."""
    body = _body(node)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if body is None or opset < 9 or "num_scan_inputs" not in attrs:
        return None
    n_scan_in = int(attrs["num_scan_inputs"])
    n_state = len(node.input) - n_scan_in
    scan_inputs = list(node.input[n_state:])
    n_scan_out = len(body.output) - n_state
    in_axes = list(attrs.get("scan_input_axes", [0] * n_scan_in))
    in_dirs = list(attrs.get("scan_input_directions", [0] * n_scan_in))
    out_axes = list(attrs.get("scan_output_axes", [0] * n_scan_out))
    out_dirs = list(attrs.get("scan_output_directions", [0] * n_scan_out))
    lengths = set()
    for name, axis in zip(scan_inputs, in_axes):
        shape = shapes.get(name)
        if shape is None:
            return None
        lengths.add(shape[axis + len(shape) if axis < 0 else axis])
    if len(lengths) != 1 or n_scan_out < 0:
        return None
    trips = lengths.pop()
    if trips == 0 or trips * max(len(body.node), 1) > MAX_UNROLLED_NODES:
        return None
    unroller = _Unroller(node, body, model, opset)
    state = list(node.input[:n_state])
    per_iteration: List[List[str]] = []
    for t in range(trips):
        slices = [
            unroller.take(name, trips - 1 - t if direction else t, axis, t)
            for name, axis, direction in zip(scan_inputs, in_axes, in_dirs)
        ]
        outputs = unroller.iteration(t, state + slices)
        state, scans = outputs[:n_state], outputs[n_state:]
        per_iteration.append(scans)
    unroller.finish(node.output[:n_state], state)
    for j, name in enumerate(node.output[n_state:]):
        rank = _rank(body.output[n_state + j])
        axis = int(out_axes[j]) if j < len(out_axes) else 0
        axis = axis + rank + 1 if axis < 0 and rank is not None else axis
        if axis < 0:
            return None
        unroller.stack(name, [scans[j] for scans in per_iteration], axis, bool(out_dirs[j] if j < len(out_dirs) else 0))
    return unroller.nodes


def _body(node: Any) -> Optional[onnx.GraphProto]:
    graphs = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH and a.name == "body"]
    if len(graphs) != 1:
        return None
    body = graphs[0]
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in body.node for a in n.attribute):
        return None  # nested subgraphs would need the same renaming
    return body


def _constant_true(value: Optional[np.ndarray]) -> bool:
    return value is not None and value.size == 1 and bool(np.asarray(value).reshape(-1)[0])


def _condition_passes_through(body: onnx.GraphProto) -> bool:
    """The body's condition output is its condition input (through Identity nodes) or a constant true: the loop
    runs its full trip count."""
    producers = {o: n for n in body.node for o in n.output}
    name = body.output[0].name
    while name in producers and producers[name].op_type == "Identity":
        name = producers[name].input[0]
    if len(body.input) > 1 and name == body.input[1].name:
        return True
    for t in body.initializer:
        if t.name == name:
            return _constant_true(numpy_helper.to_array(t))
    node = producers.get(name)
    if node is not None and node.op_type == "Constant":
        values = [numpy_helper.to_array(a.t) for a in node.attribute if a.name == "value"]
        return bool(values) and _constant_true(values[0])
    return False


def _rank(vi: Any) -> Optional[int]:
    tt = vi.type.tensor_type
    return len(tt.shape.dim) if tt.HasField("shape") else None


class _Unroller:
    """Copies of one loop body, renamed per iteration, and the nodes that join them."""

    def __init__(self, node: Any, body: onnx.GraphProto, model: onnx.ModelProto, opset: int) -> None:
        self.body, self.model, self.opset = body, model, opset
        self.prefix = "%s~loop" % (node.output[0] or node.name or "loop")
        self.local = {t.name for t in body.initializer} | {o for n in body.node for o in n.output if o}
        self.nodes: List[Any] = []

    def name(self, k: int, what: str) -> str:
        return "%s%d~%s" % (self.prefix, k, what)

    def constant(self, value: np.ndarray, k: int, what: str) -> str:
        name = self.name(k, what)
        self.model.graph.initializer.append(numpy_helper.from_array(value, name))
        return name

    def iteration(self, k: int, inputs: Sequence[str]) -> List[str]:
        """One copy of the body reading ``inputs`` for its graph inputs; the names of its outputs."""
        rename: Dict[str, str] = {vi.name: src for vi, src in zip(self.body.input, inputs)}
        rename.update({name: self.name(k, name) for name in self.local})
        for t in self.body.initializer:
            copy = onnx.TensorProto()
            copy.CopyFrom(t)
            copy.name = rename[t.name]
            self.model.graph.initializer.append(copy)
        for n in self.body.node:
            copy = onnx.NodeProto()
            copy.CopyFrom(n)
            copy.input[:] = [rename.get(i, i) if i else i for i in n.input]
            copy.output[:] = [rename.get(o, o) if o else o for o in n.output]
            copy.name = self.name(k, n.name or n.op_type)
            self.nodes.append(copy)
        return [rename.get(o.name, o.name) for o in self.body.output]

    def take(self, name: str, index: int, axis: int, k: int) -> str:
        """Slice ``index`` of ``name`` along ``axis``, the axis removed (Gather with a scalar index)."""
        out = self.name(k, "slice~" + name)
        at = self.constant(np.array(index, np.int64), k, "at~" + name)
        self.nodes.append(helper.make_node("Gather", [name, at], [out], axis=axis, name=out))
        return out

    def finish(self, outputs: Sequence[str], values: Sequence[str]) -> None:
        for out, value in zip(outputs, values):
            if out:
                self.nodes.append(helper.make_node("Identity", [value], [out], name=out + "~final"))

    def stack(self, out: str, values: Sequence[str], axis: int, reverse: bool) -> None:
        """``out`` = the values each with a new axis ``axis``, concatenated along it (last first with ``reverse``)."""
        if not out:
            return
        parts = []
        for k, value in enumerate(values):
            part = self.name(k, "stacked~" + out)
            if self.opset >= 13:
                axes = self.constant(np.array([axis], np.int64), k, "axes~" + out)
                self.nodes.append(helper.make_node("Unsqueeze", [value, axes], [part], name=part))
            else:
                self.nodes.append(helper.make_node("Unsqueeze", [value], [part], axes=[axis], name=part))
            parts.append(part)
        self.nodes.append(helper.make_node("Concat", parts[::-1] if reverse else parts, [out], axis=axis, name=out))
