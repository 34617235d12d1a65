"""8-bit elementwise cones of a QDQ model as one 256-entry table lookup (``svod.Lookup8``).

A statically quantized model puts DequantizeLinear and QuantizeLinear around every elementwise op: yolov8's SiLU is
``y_q -> DQ -> Sigmoid -> Q -> DQ -> Mul(DQ(y_q), .) -> Q``. Where a per-tensor QuantizeLinear to int8/uint8
depends on one 8-bit tensor only, its output byte is a function of the input byte: the table of that function,
computed at build (:mod:`.lookup_table`), replaces the whole cone, as onnxruntime's QLinearSigmoid does.

The cone, traced back from the QuantizeLinear, holds only per-tensor DequantizeLinear nodes of int8/uint8 tensors
(its leaves), the unary ops of :data:`.lookup_table.UNARY`, Add/Sub/Mul/Div whose other operand is a scalar float32
constant or a value of the cone, and inner per-tensor QuantizeLinear -> DequantizeLinear pairs; every value float32
(8-bit between a pair) and shaped as the output. Its leaves must read one tensor. No value inside the cone may have a
reader outside it, except a leaf DequantizeLinear's output: that node stays for its other readers (the lookup reads
the 8-bit tensor itself). Where an inner pair's 8-bit or float value is read outside the cone, the cone stops at
that pair (its DequantizeLinear becomes a leaf) and is traced again. QuantizeLinear nodes are visited last first, so
a chain of cones merges into one where nothing else reads the values between them.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set

import numpy as np

from .ir import Graph, Node
from .lookup_table import BINARY, UNARY, evaluate

LOOKUP = "svod.Lookup8"
BYTES = ("int8", "uint8")
#: The most nodes one cone takes (tracing stays cheap on a long chain).
MAX_NODES = 64
#: How often a cone is traced again with more inner pairs made leaves.
RETRIES = 4


def _scalar_const(graph: Graph, name: str, dtypes: tuple) -> bool:
    return graph.is_const(name) and graph.values[name].size == 1 and graph.values[name].dtype in dtypes


def per_tensor(graph: Graph, node: Node) -> bool:
    """A QuantizeLinear to int8/uint8 or a DequantizeLinear of int8/uint8 to float32 with one constant float32 scale
    and zero point (or none), not blocked, saturating, of a run-time tensor."""
    if node.op not in ("QuantizeLinear", "DequantizeLinear") or len(node.outputs) != 1:
        return False
    quantize = node.op == "QuantizeLinear"
    x, y = graph.values[node.inputs[0]], graph.values[node.outputs[0]]
    zp = node.inputs[2] if len(node.inputs) > 2 else ""
    byte = y if quantize else x
    return (
        x.const is None
        and byte.dtype in BYTES
        and (x if quantize else y).dtype == "float32"
        and _scalar_const(graph, node.inputs[1], ("float32",))
        and (not zp or _scalar_const(graph, zp, (byte.dtype,)))
        and not node.attrs.get("block_size", 0)
        and node.attrs.get("saturate", 1) == 1
        and not node.attrs.get("output_dtype", 0)
    )


class Cone:
    """The nodes between one QuantizeLinear and the 8-bit tensors its leaves read, traced back from it."""

    def __init__(
        self,
        graph: Graph,
        producers: Dict[str, Node],
        stops: Set[str],
        walked: Optional[Dict[str, Optional[Cone]]] = None,
    ) -> None:
        self.graph = graph
        self.producers = producers
        self.stops = stops  # 8-bit values taken as sources, not traced through their QuantizeLinear
        # inner pairs' cones by their 8-bit value, None where not one, shared by one trace's cones: a value two
        # branches reach is traced once
        self.walked: Dict[str, Optional[Cone]] = {} if walked is None else walked
        self.nodes: Dict[int, Node] = {}
        self.leaves: Dict[int, Node] = {}
        self.sources: Set[str] = set()
        self.pairs: Set[str] = set()  # the 8-bit values of the inner pairs traced through

    def trace(self, name: str, shape: tuple) -> bool:
        """Take the nodes ``name`` is computed by into the cone; False where one is not a cone's node."""
        node = self.producers.get(name)
        if node is None or len(self.nodes) > MAX_NODES or self.graph.values[name].shape != shape:
            return False
        if id(node) in self.nodes:
            return True
        if node.op == "DequantizeLinear":
            return self._dequantize(node, shape)
        if self.graph.values[name].dtype != "float32" or len(node.outputs) != 1:
            return False
        if node.op in UNARY:
            if node.op == "Clip" and not all(self.graph.is_const(n) for n in node.inputs[1:3] if n):
                return False
            self.nodes[id(node)] = node
            return self.trace(node.inputs[0], shape)
        if node.op in BINARY and len(node.inputs) == 2:
            self.nodes[id(node)] = node
            return all(self._operand(n, shape) for n in node.inputs)
        return False

    def _operand(self, name: str, shape: tuple) -> bool:
        if self.graph.is_const(name):
            return _scalar_const(self.graph, name, ("float32",))
        return self.trace(name, shape)

    def _dequantize(self, node: Node, shape: tuple) -> bool:
        """A leaf, or an inner pair traced through (where its QuantizeLinear's input is a cone of its own)."""
        if not per_tensor(self.graph, node):
            return False
        byte = node.inputs[0]
        q = self.producers.get(byte)
        if q is not None and byte not in self.stops and q.op == "QuantizeLinear" and per_tensor(self.graph, q):
            if byte not in self.walked:
                inner = Cone(self.graph, self.producers, self.stops, self.walked)
                self.walked[byte] = inner if inner.trace(q.inputs[0], shape) else None
            inner_cone = self.walked[byte]
            if inner_cone is not None:
                self._merge(inner_cone)
                self.nodes[id(q)] = q
                self.nodes[id(node)] = node
                self.pairs.add(byte)
                return True
        if self.graph.values[byte].shape != shape:
            return False
        self.nodes[id(node)] = node
        self.leaves[id(node)] = node
        self.sources.add(byte)
        return True

    def _merge(self, other: "Cone") -> None:
        self.nodes.update(other.nodes)
        self.leaves.update(other.leaves)
        self.sources |= other.sources
        self.pairs |= other.pairs


def _outside_reads(graph: Graph, cone: Cone, readers: Dict[str, List[Node]]) -> Set[str]:
    """The values of the cone (but leaves' outputs) that a node outside it or the graph's outputs read."""
    bad = set()
    for node in cone.nodes.values():
        if id(node) in cone.leaves:
            continue
        out = node.outputs[0]
        if out in graph.outputs or any(id(r) not in cone.nodes for r in readers.get(out, [])):
            bad.add(out)
    return bad


def find_cone(graph: Graph, q: Node, producers: Dict[str, Node], readers: Dict[str, List[Node]]) -> Optional[Cone]:
    """The cone ``q`` (a per-tensor QuantizeLinear) computes from one 8-bit tensor, or None."""
    shape = graph.values[q.outputs[0]].shape
    stops: Set[str] = set()
    for _ in range(RETRIES):
        cone = Cone(graph, producers, stops)
        if not cone.trace(q.inputs[0], shape) or len(cone.sources) != 1:
            return None
        cone.nodes[id(q)] = q
        bad = _outside_reads(graph, cone, readers) - {q.outputs[0]}
        if not bad:
            return cone
        more = {_stop_for(v, cone, producers) for v in bad}
        if "" in more:
            return None  # a float value between ops is read outside: the cone would compute it twice
        stops |= more
    return None


def _stop_for(value: str, cone: Cone, producers: Dict[str, Node]) -> str:
    """The inner pair's 8-bit value to stop the cone at so that ``value``, read outside it, is a leaf's output or
    the cone's source; "" where there is none."""
    if value in cone.pairs:
        return value
    node = producers[value]
    return node.inputs[0] if node.op == "DequantizeLinear" and node.inputs[0] in cone.pairs else ""


def fuse_lookup_tables(graph: Graph) -> Graph:
    """Replace each 8-bit elementwise cone of the graph by one ``svod.Lookup8`` node: ``y = table[x]``, the
    table a 256-entry constant of y's dtype indexed by x's byte (+ 128 for int8)."""
    producers = {o: n for n in graph.nodes for o in n.outputs if o}
    readers = graph.consumers()
    removed: Set[int] = set()
    lookups: Dict[int, Node] = {}
    for q in reversed(graph.nodes):
        if q.op != "QuantizeLinear" or id(q) in removed or not per_tensor(graph, q):
            continue
        cone = find_cone(graph, q, producers, readers)
        if cone is None:
            continue
        lookups[id(q)] = _replace(graph, q, cone, readers, removed)
    if lookups:
        graph.nodes = [lookups.get(id(n), n) for n in graph.nodes if id(n) not in removed or id(n) in lookups]
    return graph


def _replace(graph: Graph, q: Node, cone: Cone, readers: Dict[str, List[Node]], removed: Set[int]) -> Node:
    """The lookup node of ``cone``; its nodes are marked removed (a leaf read outside it stays) and the readers
    updated."""
    (source,) = cone.sources
    ordered = [n for n in graph.nodes if id(n) in cone.nodes]
    table = evaluate(graph, ordered, source).astype(np.dtype(graph.values[q.outputs[0]].dtype))
    name = graph.add_const(q.outputs[0] + "~table", table)
    lookup = Node(LOOKUP, q.name, q.index, [source, name], [q.outputs[0]], {})
    for node in ordered:
        out = node.outputs[0]
        outside = out in graph.outputs or any(id(r) not in cone.nodes for r in readers.get(out, []))
        if not (id(node) in cone.leaves and outside):
            removed.add(id(node))
    for node in ordered:
        for i in node.inputs:
            if i in readers:
                readers[i] = [r for r in readers[i] if id(r) != id(node) or id(node) not in removed]
    readers.setdefault(source, []).append(lookup)
    return lookup
