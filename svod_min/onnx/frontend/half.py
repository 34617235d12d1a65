"""float16 and bfloat16 models through the ops that compute in float32 only, as onnxruntime's CPU provider runs them.

onnxruntime has no float16 kernel on x86-64 for most ops (Conv, MatMul, Gemm, pooling, normalizations, Softmax,
reductions, Resize, and even Add, Relu or Sigmoid): it casts their float16 inputs to float32, computes in float32 and
casts the results back, then drops every Cast pair float32 -> float16 -> float32 its insertion left between two such
nodes, and also runs in float32 a node it could run in float16 when all its neighbours run in float32. A chain of those
nodes therefore computes in float32 from end to end, rounded to float16 only where a value leaves it.

:func:`compute_halves_in_float` does the same on the IR before the op table checks it: a node whose op's table entry
takes float32 but not one of the float16/bfloat16 run-time tensors it reads or writes is computed in float32 (its
half constants converted at build, its half run-time inputs through a Cast, its half outputs written as float32
values), and so is every node that could run in half but is joined to such a node through a half value (it would
otherwise round a float32 result to half, or have its half result widened again). Values keep float32 between those
nodes; a Cast back to half writes a value that a graph output, a Cast of the model's own or a node outside the region
reads. A graph of half ops alone is left as it is (those kernels load half, compute in float and round once, as
onnxruntime's would). Integer and bool tensors are left alone; graph inputs and outputs keep the model's dtypes; the
model's own Casts keep their rounding (the spec's, where onnxruntime drops a model Cast pair float32 -> float16 ->
float32 too). bfloat16 takes the same path (onnxruntime refuses most of those nodes); a node whose ONNX schema takes
no bfloat16 (Conv before opset 22) never gets here: the parser's type check refuses the model.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, List, Mapping, Optional, Set

import numpy as np

from .ir import Graph, Node, Value
from .table import OpSpec

HALVES = ("float16", "bfloat16")
#: The model's own conversions: never widened (their result's rounding is what the model asks for).
CASTS = ("Cast", "CastLike")
#: ONNX's TensorProto element types of the Cast nodes the pass inserts.
ELEM_TYPE = {"float32": 1, "float16": 10, "bfloat16": 16}


def compute_halves_in_float(graph: Graph, table: Mapping[str, OpSpec]) -> Graph:
    """``graph`` with its float16/bfloat16 nodes that the ``table`` computes in float32 only rewritten to do so."""
    widened = _widened_nodes(graph, table)
    if not widened:
        return graph
    consumers = graph.consumers()
    twins: Dict[str, str] = {}  # a half value -> its float32 twin
    replaced: Set[str] = set()
    nodes: List[Node] = []
    for node in graph.nodes:
        if id(node) not in widened:
            nodes.append(node)
            continue
        inputs = []
        for name in node.inputs:
            v = graph.values.get(name) if name else None
            if v is None or v.dtype not in HALVES:
                inputs.append(name)
                continue
            if name not in twins:
                if v.const is not None:
                    twins[name] = graph.add_const(name + "~float32", v.const.astype(np.float32))
                else:
                    twins[name] = _fresh(graph, name, v)
                    nodes.append(_cast(node, name, twins[name], "float32"))
                replaced.add(name)
            inputs.append(twins[name])
        outputs, casts_back = [], []
        for name in node.outputs:
            v = graph.values.get(name) if name else None
            if v is None or v.dtype not in HALVES:
                outputs.append(name)
                continue
            twins[name] = _fresh(graph, name, v)
            outputs.append(twins[name])
            if name in graph.outputs or any(id(c) not in widened for c in consumers.get(name, [])):
                casts_back.append(_cast(node, twins[name], name, v.dtype))
            else:
                replaced.add(name)
        nodes.append(replace(node, inputs=inputs, outputs=outputs))
        nodes.extend(casts_back)
    graph.nodes = nodes
    _drop_unused(graph, replaced)
    return graph


def with_halves(table: Mapping[str, OpSpec]) -> Dict[str, OpSpec]:
    """The op ``table`` as the front end sees it before this pass: an op that takes float32 also takes float16 and
    bfloat16 (the pass computes them in float32), so that the parser does not expand a function op such as Softmax
    or LayerNormalization into its body only because its tensors are half."""
    return {
        op: spec
        if op in CASTS or "float32" not in spec.dtypes
        else replace(spec, dtypes=spec.dtypes + tuple(d for d in HALVES if d not in spec.dtypes))
        for op, spec in table.items()
    }


def _widened_nodes(graph: Graph, table: Mapping[str, OpSpec]) -> Set[int]:
    """The ids of the nodes to compute in float32: those that must, and the half nodes joined to them."""
    producer: Dict[str, Node] = {o: node for node in graph.nodes for o in node.outputs if o}
    consumers = graph.consumers()
    widened: Dict[int, Node] = {}
    for node in graph.nodes:
        if _must_widen(graph, node, table.get(node.op)):
            widened[id(node)] = node
    work = list(widened.values())
    while work:
        node = work.pop()
        neighbours = [producer[n] for n in _half_names(graph, node.inputs) if n in producer]
        neighbours += [c for n in _half_names(graph, node.outputs) for c in consumers.get(n, [])]
        for other in neighbours:
            if id(other) not in widened and _may_widen(graph, other, table.get(other.op)):
                widened[id(other)] = other
                work.append(other)
    return set(widened)


def _half_names(graph: Graph, names: List[str]) -> List[str]:
    return [n for n in names if n and n in graph.values and graph.values[n].dtype in HALVES]


def _may_widen(graph: Graph, node: Node, spec: Optional[OpSpec]) -> bool:
    """The node computes in float32 if it has to or a neighbour does: its op takes float32, it reads a half value,
    and it is not a Cast (whose rounding is the model's)."""
    return (
        spec is not None
        and node.domain in ("", "ai.onnx")
        and node.op not in CASTS
        and "float32" in spec.dtypes
        and bool(_half_names(graph, node.inputs))
    )


def _must_widen(graph: Graph, node: Node, spec: Optional[OpSpec]) -> bool:
    """The op's table entry refuses one of the half run-time tensors the node reads or writes."""
    if spec is None or not _may_widen(graph, node, spec):
        return False
    runtime = [n for n in _half_names(graph, list(node.inputs) + list(node.outputs)) if graph.values[n].const is None]
    return any(graph.values[n].dtype not in spec.dtypes for n in runtime)


def _fresh(graph: Graph, name: str, like: Value) -> str:
    """A new float32 run-time value shaped as ``like``, named after ``name`` (made unique)."""
    unique, i = name + "~float32", 0
    while unique in graph.values:
        i += 1
        unique = "%s~float32~%d" % (name, i)
    graph.values[unique] = Value(unique, like.shape, "float32")
    return unique


def _cast(node: Node, src: str, dst: str, dtype: str) -> Node:
    """A Cast the pass inserts for ``node`` (it carries the node's index, so an error names the model's node)."""
    return Node(
        "Cast",
        "%s (%s for %s)" % (dst, dtype, node.name or node.op),
        node.index,
        [src],
        [dst],
        {"to": ELEM_TYPE[dtype]},
    )


def _drop_unused(graph: Graph, names: Set[str]) -> None:
    """Half values the rewrite left without a reader or a writer (a twin replaced them everywhere)."""
    used = {n for node in graph.nodes for n in list(node.inputs) + list(node.outputs)}
    used |= set(graph.inputs) | set(graph.outputs)
    for name in names - used:
        del graph.values[name]
