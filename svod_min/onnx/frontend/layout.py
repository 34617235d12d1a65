"""The layout pass: which tensors the lowering keeps in the blocked channel layout (NCHWc).

A convolution with at least 16 channels out runs blocked (:mod:`.csrc_blocked_conv`); one with fewer than 16
plain channels in (a first layer) reads them plain and writes blocked, and a PRelu with a constant slope per
channel that is its only reader runs in its store, as does a SiLU (``y * Sigmoid(y)``, the Sigmoid and the Mul
its only readers). A depthwise convolution of a blocked input runs blocked (:mod:`..kernels.blocked_dwconv`),
with the same epilogues. Its result stays
blocked through the ops that read blocked tensors as they are: pools, the global average and max pools (which
write their result plain), per-channel affines, activations, same-shape elementwise ops of blocked tensors, and a
channel Concat of inputs whose channel counts are multiples of 16, and a channel Split into such parts (its
lowering reads the part sizes from the blocked outputs' shapes). Every other reader, and a graph output,
gets the plain tensor back through one ``svod.FromBlocked`` reorder, emitted before its first plain reader;
a convolution whose input is plain reorders it with ``svod.ToBlocked`` only where the convolution's work per
input element pays for the copy. Blocked values are named ``<tensor>~nchwc`` and have the physical shape
[N, ceil(C/16), H, W, 16]; the plain name keeps meaning the plain tensor.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..activations import ACTIVATIONS
from ..geometry import LANES, blocked_shape
from .ir import Graph, Node, Value
from .passes import AFFINE, SILU, channel_vector, silu_pair

TO_BLOCKED = "svod.ToBlocked"
FROM_BLOCKED = "svod.FromBlocked"
BLOCKED_CONV = "svod.BlockedConv"
BLOCKED_DWCONV = "svod.BlockedDepthwiseConv"
BLOCKED_POOL = "svod.BlockedPool"
BLOCKED_GLOBAL_POOL = "svod.BlockedGlobalPool"
BLOCKED_AFFINE = "svod.BlockedAffine"
#: Ops that read blocked operands of one shape as flat arrays and write one of the same shape.
SAME_SHAPE_OPS = frozenset(ACTIVATIONS) | {"Add", "Sum", "Sub", "Mul", "Max", "Min"}
#: A convolution whose input is plain starts a blocked region when it does at least this many multiply-adds
#: per input element the reorder copies.
START_MACS_PER_INPUT = 64


def block_channels(graph: Graph) -> Graph:
    """Rewrite ``graph`` so that convolutions and the ops between them run on blocked tensors."""
    rewrite = _Rewrite(graph)
    for node in graph.nodes:
        rewrite.visit(node)
    for name in graph.outputs:
        rewrite.need_plain(name)
    graph.nodes = rewrite.nodes
    return graph


def logical(node: Node) -> Node:
    """The node as it reads and writes plain tensors (for geometry from the logical shapes)."""
    return Node(
        node.op,
        node.name,
        node.index,
        list(node.attrs["_plain_inputs"]),
        list(node.attrs["_plain_outputs"]),
        node.attrs,
        node.domain,
        node.fused,
    )


class _Rewrite:
    """Walks the nodes in order, emitting each one plain or blocked and the reorders between them."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes: List[Node] = []
        self.blocked: Dict[str, str] = {}
        self.plain: Set[str] = set(graph.values)  # names whose plain tensor exists (or will, once produced)
        self.readers = graph.consumers()
        self.absorbed: Set[int] = set()  # ids of nodes a blocked Conv took into its epilogue
        self.counter = 0

    def visit(self, node: Node) -> None:
        if id(node) in self.absorbed:
            return
        op = self._blocked_op(node)
        if op is None:
            for name in node.inputs:
                self.need_plain(name)
            self.nodes.append(node)
            return
        fused, plain_outputs = dict(node.fused), list(node.outputs)
        conv = op in (BLOCKED_CONV, BLOCKED_DWCONV) and "activation" not in fused
        prelu = self._prelu_to_absorb(node) if conv else None
        if prelu is not None:
            fused["activation"] = ("PRelu", {"slope": tuple(float(v) for v in prelu[1])})
            self.absorbed.add(id(prelu[0]))
            plain_outputs = list(prelu[0].outputs)
        silu = self._silu_to_absorb(node) if conv and prelu is None else None
        if silu is not None:
            fused["activation"] = (SILU, {})
            self.absorbed.update(id(n) for n in silu)
            plain_outputs = list(silu[1].outputs)
        inputs = [self._blocked_input(name, k, op) for k, name in enumerate(node.inputs)]
        outputs = plain_outputs if op == BLOCKED_GLOBAL_POOL else [self._blocked_output(name) for name in plain_outputs]
        attrs = dict(node.attrs, _plain_inputs=list(node.inputs), _plain_outputs=plain_outputs, _op=node.op)
        if node.op in ("Concat", "Split"):
            attrs["axis"] = 1
        self.nodes.append(Node(op, node.name, node.index, inputs, outputs, attrs, node.domain, fused))

    def _prelu_to_absorb(self, conv: Node) -> Optional[Tuple[Node, np.ndarray]]:
        """(a PRelu with a constant per-channel slope that is the convolution's only reader, its slope), or None:
        it runs in the convolution's store."""
        name = conv.outputs[0]
        users = self.readers.get(name, [])
        if len(users) != 1 or name in self.graph.outputs or users[0].op != "PRelu" or users[0].inputs[0] != name:
            return None
        slope_name = users[0].inputs[1]
        slope = channel_vector(self.graph, name, slope_name) if self.graph.is_const(slope_name) else None
        return None if slope is None else (users[0], slope)

    def _silu_to_absorb(self, conv: Node) -> Optional[Tuple[Node, Node]]:
        """The convolution's SiLU (:func:`.passes.silu_pair`), which runs in its store as ``y * sigmoid(y)`` (the
        same expression and sigmoid as the two kernels it replaces); else None."""
        return silu_pair(self.graph, conv.outputs[0], self.readers)

    def need_plain(self, name: str) -> None:
        if name and name not in self.plain:
            self._emit(FROM_BLOCKED, [self.blocked[name]], [name])
            self.plain.add(name)

    def _blocked_input(self, name: str, index: int, op: str) -> str:
        if not name or self.graph.is_const(name) or (op == BLOCKED_CONV and index in (1, 2)):
            return name
        if op == BLOCKED_CONV and index == 0 and name not in self.blocked and self.graph.values[name].shape[1] < LANES:
            return name  # a first layer reads its few plain channels as they are
        if name not in self.blocked:
            self.blocked[name] = self._new_blocked(name)
            self._emit(TO_BLOCKED, [name], [self.blocked[name]])
        return self.blocked[name]

    def _blocked_output(self, name: str) -> str:
        self.blocked[name] = self._new_blocked(name)
        self.plain.discard(name)
        return self.blocked[name]

    def _new_blocked(self, name: str) -> str:
        blocked = name + "~nchwc"
        self.graph.values[blocked] = Value(blocked, blocked_shape(self.graph.values[name].shape), "float32")
        return blocked

    def _emit(self, op: str, inputs: List[str], outputs: List[str]) -> None:
        self.counter += 1
        attrs = {"_plain_inputs": inputs, "_plain_outputs": outputs}
        self.nodes.append(Node(op, "svod.reorder%d" % self.counter, -1, inputs, outputs, attrs))

    # -- which op a node becomes ------------------------------------------------------------------

    def _blocked_op(self, node: Node) -> Optional[str]:
        if node.op == "Conv" and self._depthwise_blocks(node):
            return BLOCKED_DWCONV
        if node.op == "Conv":
            return BLOCKED_CONV if self._conv_blocks(node) else None
        if not self._is_4d_float(node) or not all(n in self.blocked for n in self._tensors(node)):
            return None
        if node.op in ("MaxPool", "AveragePool") and len(node.outputs) == 1 and self._pads_ok(node):
            return BLOCKED_POOL
        if node.op in ("GlobalAveragePool", "GlobalMaxPool"):
            return BLOCKED_GLOBAL_POOL
        if node.op == AFFINE:
            return BLOCKED_AFFINE
        if node.op in SAME_SHAPE_OPS and self._same_shapes(node):
            return node.op
        if node.op == "Concat" and int(node.attrs.get("axis", 0)) in (1, -3) and self._whole_blocks(node):
            return node.op
        if node.op == "Split" and int(node.attrs.get("axis", 0)) in (1, -3) and self._whole_block_parts(node):
            return node.op
        return None

    def _conv_blocks(self, node: Node) -> bool:
        x, w = node.inputs[0], node.inputs[1]
        g = self.graph
        if int(node.attrs.get("group", 1)) != 1 or not self._is_4d_float(node) or not g.is_const(w):
            return False
        if len(node.inputs) > 2 and node.inputs[2] and not g.is_const(node.inputs[2]) or not self._pads_ok(node):
            return False
        oc, c, kh, kw = g.values[w].shape
        if oc < LANES:
            return False
        if x in self.blocked:
            return True
        return oc * kh * kw >= START_MACS_PER_INPUT

    def _depthwise_blocks(self, node: Node) -> bool:
        """A depthwise convolution (one filter per channel) of a blocked input, without a fused residual: it runs
        blocked, in place of a reorder each way around it."""
        g, w = self.graph, node.inputs[1]
        if node.inputs[0] not in self.blocked or not g.is_const(w) or node.fused.get("residual"):
            return False
        if not self._is_4d_float(node) or not self._pads_ok(node) or len(g.values[w].shape) != 4:
            return False
        if len(node.inputs) > 2 and node.inputs[2] and not g.is_const(node.inputs[2]):
            return False
        oc, per_group, _, _ = g.values[w].shape
        c = g.values[node.inputs[0]].shape[1]
        return per_group == 1 and int(node.attrs.get("group", 1)) == c == oc

    def _tensors(self, node: Node) -> Sequence[str]:
        return [n for n in node.inputs if n and not self.graph.is_const(n)]

    def _is_4d_float(self, node: Node) -> bool:
        values = self.graph.values
        names = list(self._tensors(node)[:1]) + list(node.outputs[:1])
        return all(len(values[n].shape) == 4 and values[n].dtype == "float32" for n in names)

    def _pads_ok(self, node: Node) -> bool:
        """No negative explicit padding (auto_pad's SAME and VALID padding never is; the geometry resolves it)."""
        return all(int(p) >= 0 for p in node.attrs.get("pads", []))

    def _same_shapes(self, node: Node) -> bool:
        shape = self.graph.values[node.outputs[0]].shape
        tensors = self._tensors(node)
        return (
            len(node.outputs) == 1
            and all(self.graph.values[n].shape == shape for n in tensors)
            and (len(tensors) == len([n for n in node.inputs if n]) or node.op in ACTIVATIONS)
        )

    def _whole_block_parts(self, node: Node) -> bool:
        """A channel Split into parts of whole blocks: each part is a range of channel blocks (a view of the blocked
        input where the batch is 1)."""
        values = self.graph.values
        return all(
            name and len(values[name].shape) == 4 and values[name].shape[1] % LANES == 0 for name in node.outputs
        )

    def _whole_blocks(self, node: Node) -> bool:
        inputs = [n for n in node.inputs if n]
        return len(self._tensors(node)) == len(inputs) and all(
            self.graph.values[n].shape[1] % LANES == 0 for n in inputs
        )
