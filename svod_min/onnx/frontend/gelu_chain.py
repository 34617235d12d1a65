"""The exporters' Gelu chains back into one Gelu node (the ``fuse_gelu_chains`` pass, run before the others).

Exporters that predate opset 20 (PyTorch, TensorFlow, HuggingFace's models) write Gelu out of elementwise ops:

- erf form: ``x * 0.5 * (1 + Erf(x / sqrt 2))``, the scaling a Div by sqrt 2 or a Mul by 1/sqrt 2;
- tanh form: ``0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``, the cube ``Pow(x, 3)`` or two Muls;

with the final ``x * 0.5 * (...)`` in any of its three groupings, ``Mul(x, 0.5)`` or ``Div(x, 2)``, and either
operand order of every Add and Mul. Left alone, the chain runs as five to nine kernels and the later passes turn its
scalar Muls and Adds into Affines; as one Gelu it is one activation that fuses into the MatMul, Gemm, Conv or Add
before it. A chain is rewritten only where every intermediate has no reader outside the chain (and is no graph
output), every value has x's shape and dtype (float32 or float16), and every constant is a scalar within one
rounding of that dtype of the exact one.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import numpy as np

from .ir import Graph, Node

#: The dtypes a rewritten chain may have: the Gelu activation computes them in float32.
_DTYPES = ("float32", "float16")
_SQRT2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBE = 0.044715


class _Chain:
    """The graph's readers and producers, and the checks one candidate chain needs."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.readers = graph.consumers()
        self.producers: Dict[str, Node] = {out: node for node in graph.nodes for out in node.outputs if out}

    def sole(self, name: str) -> Optional[Node]:
        """The only reader of ``name`` (reading it once), or None: several readers, or a graph output."""
        users = self.readers.get(name, [])
        if len(users) != 1 or name in self.graph.outputs or users[0].inputs.count(name) != 1:
            return None
        return users[0]

    def made_for(self, name: str, reader: Node, op: str) -> Optional[Node]:
        """The ``op`` node that makes ``name`` for ``reader`` alone, or None."""
        node = self.producers.get(name)
        if node is None or node.op != op or node.domain not in ("", "ai.onnx") or self.sole(name) is not reader:
            return None
        return node

    def scalar(self, name: str, want: float) -> bool:
        """Whether ``name`` is a constant of one element within one rounding of its dtype of ``want``."""
        if not self.graph.is_const(name):
            return False
        data = self.graph.const(name)
        if data.size != 1 or data.dtype.name not in _DTYPES:
            return False
        return abs(float(data.reshape(-1)[0]) - want) <= float(np.finfo(data.dtype).eps) * abs(want)

    def binary(self, node: Optional[Node], op: str, want: float) -> Optional[str]:
        """The operand of ``node`` (an ``op`` of two inputs) that is not the constant ``want``, or None; a Div's
        constant must be its divisor."""
        if node is None or node.op != op or len(node.inputs) != 2:
            return None
        a, b = node.inputs
        if self.scalar(b, want) and not self.graph.is_const(a):
            return a
        if op in ("Mul", "Add") and self.scalar(a, want) and not self.graph.is_const(b):
            return b
        return None

    def other(self, node: Node, name: str) -> Optional[str]:
        """The other input of the two-input Mul ``node`` that reads ``name``."""
        if node.op != "Mul" or len(node.inputs) != 2 or node.inputs[0] == node.inputs[1]:
            return None
        return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def fuse_gelu_chains(graph: Graph) -> Graph:
    c = _Chain(graph)
    dropped = set()
    for node in list(graph.nodes):
        if node.op not in ("Erf", "Tanh") or id(node) in dropped:
            continue
        found = _match(c, node)
        if found is None:
            continue
        final, x, chain = found
        final.op, final.domain, final.inputs, final.fused = "Gelu", "", [x], {}
        final.attrs = {"approximate": "tanh"} if node.op == "Tanh" else {}
        dropped.update(id(n) for n in chain if n is not final)
        graph.nodes = [n for n in graph.nodes if id(n) not in dropped]
        c = _Chain(graph)
    return graph


def _match(c: _Chain, core: Node) -> Optional[Tuple[Node, str, List[Node]]]:
    """(the chain's last node, x, every node of the chain) for the Erf or Tanh ``core``, or None."""
    head = _erf_head(c, core) if core.op == "Erf" else _tanh_head(c, core)
    if head is None:
        return None
    x, chain = head
    tail = _tail(c, core, x)
    if tail is None:
        return None
    chain = chain + [core] + tail
    value = c.graph.values[x]
    if value.dtype not in _DTYPES:
        return None
    for n in chain:
        out = c.graph.values[n.outputs[0]] if len(n.outputs) == 1 else None
        if out is None or out.shape != value.shape or out.dtype != value.dtype:
            return None
    return tail[-1], x, chain


def _erf_head(c: _Chain, erf: Node) -> Optional[Tuple[str, List[Node]]]:
    """x and the scaling node of ``Erf(x / sqrt 2)`` (Div by sqrt 2 or Mul by 1/sqrt 2)."""
    s = erf.inputs[0]
    div = c.made_for(s, erf, "Div")
    mul = c.made_for(s, erf, "Mul")
    x = c.binary(div, "Div", _SQRT2) or c.binary(mul, "Mul", 1.0 / _SQRT2)
    if x is None:
        return None
    return x, [div or mul]  # type: ignore[list-item]


def _tanh_head(c: _Chain, tanh: Node) -> Optional[Tuple[str, List[Node]]]:
    """x and the nodes of ``Tanh(sqrt(2/pi) * (x + 0.044715 * x^3))``."""
    scale = c.made_for(tanh.inputs[0], tanh, "Mul")
    v = c.binary(scale, "Mul", _SQRT_2_OVER_PI)
    add = c.made_for(v, scale, "Add") if v and scale else None  # type: ignore[arg-type]
    if add is None or len(add.inputs) != 2:
        return None
    for x, w in (add.inputs, add.inputs[::-1]):
        times = c.made_for(w, add, "Mul")
        cube = c.binary(times, "Mul", _CUBE)
        nodes = _cube_of(c, cube, times, x) if cube and times else None
        if nodes is not None:
            return x, nodes + [times, add, scale]  # type: ignore[list-item]
    return None


def _cube_of(c: _Chain, name: str, reader: Node, x: str) -> Optional[List[Node]]:
    """The nodes that make ``name`` = x^3 for ``reader``: ``Pow(x, 3)``, or ``x * (x * x)`` in either grouping."""
    power = c.made_for(name, reader, "Pow")
    if power is not None:
        return [power] if power.inputs[0] == x and c.scalar(power.inputs[1], 3.0) else None
    outer = c.made_for(name, reader, "Mul")
    if outer is None or len(outer.inputs) != 2 or x not in outer.inputs:
        return None
    square_name = outer.inputs[1] if outer.inputs[0] == x else outer.inputs[0]
    square = c.made_for(square_name, outer, "Mul")
    if square is None or square.inputs != [x, x]:
        return None
    return [square, outer]


def _tail(c: _Chain, core: Node, x: str) -> Optional[List[Node]]:
    """The nodes of ``0.5 * x * (1 + core)`` after ``core``, the last one making the Gelu's output."""
    plus = c.sole(core.outputs[0])
    a = plus.outputs[0] if plus is not None and c.binary(plus, "Add", 1.0) == core.outputs[0] else None
    times = c.sole(a) if a else None
    o = c.other(times, a) if times is not None and a else None
    if times is None or o is None:
        return None
    if o == x:  # (x * (1 + e)) * 0.5, or / 2
        last = c.sole(times.outputs[0])
        if c.binary(last, "Mul", 0.5) == times.outputs[0] or c.binary(last, "Div", 2.0) == times.outputs[0]:
            return [plus, times, last]  # type: ignore[list-item]
        return None
    if c.scalar(o, 0.5):  # x * ((1 + e) * 0.5)
        last = c.sole(times.outputs[0])
        if last is not None and c.other(last, times.outputs[0]) == x:
            return [plus, times, last]  # type: ignore[list-item]
        return None
    half = c.made_for(o, times, "Mul") or c.made_for(o, times, "Div")  # (x * 0.5) * (1 + e)
    if half is not None and c.binary(half, half.op, 0.5 if half.op == "Mul" else 2.0) == x:
        return [plus, half, times]  # type: ignore[list-item]
    return None
