"""The ONNX front end's own graph IR: values with static shapes and dtypes, constants, nodes.

Every pass is a function ``Graph -> Graph`` (it may reuse the nodes it does not change); the
lowering reads only this IR, never protobuf objects, so passes and lowering are testable alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np


@dataclass
class Value:
    """A tensor of the graph: its static shape, numpy dtype name and, for a constant, its data."""

    name: str
    shape: Tuple[int, ...]
    dtype: str
    const: Optional[np.ndarray] = None

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass
class Node:
    """One ONNX node (or an internal op such as ``svod.Affine``): inputs '' for an omitted optional one.

    ``index`` is the node's position in the model file, so that an error names the node the user sees;
    ``fused`` holds what passes fused into the node (``activation``: (op, attrs)).
    """

    op: str
    name: str
    index: int
    inputs: List[str]
    outputs: List[str]
    attrs: Dict[str, Any]
    domain: str = ""
    fused: Dict[str, Any] = field(default_factory=dict)

    def label(self) -> str:
        return "node %d (%s%s)" % (self.index, self.op, ", %r" % self.name if self.name else "")


@dataclass
class Graph:
    """A whole model: values by name, nodes in a topological order, input/output names, the opset."""

    values: Dict[str, Value]
    nodes: List[Node]
    inputs: List[str]
    outputs: List[str]
    opset: int

    def consumers(self) -> Dict[str, List[Node]]:
        """Value name -> the nodes that read it."""
        out: Dict[str, List[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    out.setdefault(name, []).append(node)
        return out

    def is_const(self, name: str) -> bool:
        return bool(name) and self.values[name].const is not None

    def const(self, name: str) -> np.ndarray:
        data = self.values[name].const
        assert data is not None, name
        return data

    def add_const(self, name: str, data: np.ndarray) -> str:
        """A new constant value named after ``name`` (made unique)."""
        unique, i = name, 0
        while unique in self.values:
            i += 1
            unique = "%s~%d" % (name, i)
        self.values[unique] = Value(unique, tuple(int(d) for d in data.shape), data.dtype.name, data)
        return unique


def normalize_axis(axis: int, rank: int) -> int:
    """An ONNX axis attribute (negative: counted from the end) as an index into ``rank`` dims."""
    return axis + rank if axis < 0 else axis
