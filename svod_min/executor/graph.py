"""Explicit dependency graphs of ops across devices: buffer accesses, hazards, Kahn levels.

:meth:`ExecutionGraph.compute_parallel_groups` returns deterministic Kahn
levels (sorted by id, :func:`svod_min.ordering.kahn_levels`) and is idempotent;
svod iterates a HashMap and appends to its order on every call.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, Iterable, List, Optional, Tuple

from ..devices.spec import DeviceSpec, as_spec
from ..error import PlanError
from ..ordering import kahn_levels, ranges_overlap

# --- sync strategy -------------------------------------------------------------


class SyncStrategy(enum.Enum):
    """How a transfer between two devices is synchronised."""

    NONE = "none"  # same device: one in-order timeline
    PEER_TO_PEER = "peer_to_peer"  # same kind, another index (CUDA:0 -> CUDA:1)
    HOST_STAGED = "host_staged"  # different kinds: through host memory
    CPU_MEDIATED = "host_staged"  # noqa: PIE796 -- svod's name, deliberately an alias of HOST_STAGED


def sync_strategy(src: DeviceSpec, dst: DeviceSpec) -> SyncStrategy:
    """NONE for the same device, PEER_TO_PEER for the same kind, else HOST_STAGED."""
    if src == dst:
        return SyncStrategy.NONE
    if src.kind == dst.kind:
        return SyncStrategy.PEER_TO_PEER
    return SyncStrategy.HOST_STAGED


# --- execution graph -------------------------------------------------------------


_HOST_MEMORY = "host memory"  # the key of numpy arrays: overlap is decided by their addresses


def _same_key(a: Any, b: Any) -> bool:
    if a is b:
        return True
    try:
        return (a == b) is True  # numpy's == is elementwise: never "the same buffer"
    except Exception:
        return False


@dataclass(frozen=True)
class KernelBufferAccess:
    """One buffer a node touches. ``byte_range`` (start, end) narrows the hazard to a region."""

    buffer: Hashable
    is_write: bool = False
    byte_range: Optional[Tuple[int, int]] = None

    @classmethod
    def of(cls, buffer: Any, is_write: bool = False) -> "KernelBufferAccess":
        """Access to a device buffer, keyed by its storage so views of one arena conflict.

        A device buffer (:class:`svod_min.devices.base.Buffer`: ``storage``, ``offset``,
        ``nbytes``) gives its window of the storage; a numpy array its host addresses; anything
        else is its own key over its whole extent.
        """
        storage = getattr(buffer, "storage", None)  # a device Buffer, or an opaque key (svod takes ids)
        if storage is not None:
            return cls(storage, is_write, (buffer.offset, buffer.offset + buffer.nbytes))
        iface = getattr(buffer, "__array_interface__", None)
        if iface is not None:  # numpy: host memory, by address
            start = iface["data"][0]
            return cls(_HOST_MEMORY, is_write, (start, start + int(buffer.nbytes)))
        return cls(buffer, is_write)

    def conflicts(self, other: "KernelBufferAccess") -> bool:
        """RAW, WAR or WAW on overlapping bytes of the same buffer."""
        if not (self.is_write or other.is_write) or not _same_key(self.buffer, other.buffer):
            return False
        if self.byte_range is None or other.byte_range is None:
            return True
        return ranges_overlap(self.byte_range[0], self.byte_range[1], other.byte_range[0], other.byte_range[1])


@dataclass
class ExecutionNode:
    """One op of an :class:`ExecutionGraph`; ``predecessors`` are node ids."""

    id: int
    device: DeviceSpec
    inputs: List[Any] = field(default_factory=list)
    outputs: List[Any] = field(default_factory=list)
    predecessors: List[int] = field(default_factory=list)
    is_transfer: bool = False
    buffer_access: List[KernelBufferAccess] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.device = as_spec(self.device)
        if isinstance(self.id, bool) or not isinstance(self.id, int):  # ids are sorted into levels
            raise PlanError("node id must be an int, got %r" % (self.id,))
        for name in ("inputs", "outputs", "predecessors", "buffer_access"):
            if not isinstance(getattr(self, name), list):
                raise PlanError(
                    "node %d: %s must be a list, got %s" % (self.id, name, type(getattr(self, name)).__name__)
                )
        if not all(isinstance(a, KernelBufferAccess) for a in self.buffer_access):
            raise PlanError(
                "node %d: buffer_access holds KernelBufferAccess items (KernelBufferAccess.of(buf))" % self.id
            )


class ExecutionGraph:
    """Nodes with explicit dependencies; levels are computed on demand, never cached."""

    def __init__(self, nodes: Iterable[ExecutionNode] = ()) -> None:
        self._nodes: Dict[int, ExecutionNode] = {}  # insertion order matters for hazards
        for node in nodes:
            self.add_node(node)

    def __len__(self) -> int:
        return len(self._nodes)

    @property
    def nodes(self) -> List[ExecutionNode]:
        """Nodes in insertion order."""
        return list(self._nodes.values())

    def node(self, node_id: int) -> ExecutionNode:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise PlanError("unknown node id %r" % (node_id,)) from None

    def add_node(self, node: ExecutionNode) -> int:
        """Add ``node``; a duplicate id is a :class:`PlanError`. Returns its id."""
        if not isinstance(node, ExecutionNode):
            raise PlanError("graph nodes must be ExecutionNode, got %s" % type(node).__name__)
        if node.id in self._nodes:
            raise PlanError("duplicate node id %d" % node.id)
        self._nodes[node.id] = node
        return node.id

    def add_dependency(self, node_id: int, predecessor: int) -> None:
        """Make ``node_id`` wait for ``predecessor`` (no-op if already present)."""
        node = self.node(node_id)
        if predecessor not in node.predecessors:
            node.predecessors.append(predecessor)

    def add_dependencies_from_access(self) -> List[Tuple[int, int]]:
        """Add an edge for every RAW/WAR/WAW hazard, in insertion order.

        A node depends on every earlier node whose access conflicts with one
        of its own (overlapping byte ranges when both give one). Returns the
        ``(predecessor, node)`` edges that were new; calling again adds none.
        """
        added: List[Tuple[int, int]] = []
        order = self.nodes
        for i, node in enumerate(order):
            for earlier in order[:i]:
                if earlier.id not in node.predecessors and _hazard(earlier, node):
                    node.predecessors.append(earlier.id)
                    added.append((earlier.id, node.id))
        return added

    def compute_parallel_groups(self) -> List[List[int]]:
        """Kahn levels: each group's nodes depend only on earlier groups; ids sorted.

        An unknown predecessor or a cycle is a :class:`PlanError`; the cycle
        message lists every node that could not be scheduled.
        """
        ids = sorted(self._nodes)  # levels list indices in order: sorted indices are sorted ids
        _order, levels = kahn_levels(self._predecessor_indices(ids), ids)
        return [[ids[i] for i in level] for level in levels]

    def topological_order(self) -> List[int]:
        """The groups flattened: a deterministic valid execution order."""
        return [n for group in self.compute_parallel_groups() for n in group]

    def _predecessor_indices(self, ids: List[int]) -> List[List[int]]:
        """Each node's predecessors as positions in ``ids`` (duplicates dropped: they would double-count)."""
        index = {node_id: i for i, node_id in enumerate(ids)}
        nodes = self._nodes
        try:
            return [list({index[p] for p in nodes[node_id].predecessors}) for node_id in ids]
        except KeyError:
            self._raise_unknown_predecessor()
            raise

    def _raise_unknown_predecessor(self) -> None:
        """The first unknown predecessor, in insertion order, as a :class:`PlanError`."""
        for node in self._nodes.values():
            for pred in node.predecessors:
                if pred not in self._nodes:
                    raise PlanError("node %d depends on unknown node id %r" % (node.id, pred))


def _hazard(earlier: ExecutionNode, later: ExecutionNode) -> bool:
    return any(a.conflicts(b) for a in earlier.buffer_access for b in later.buffer_access)


__all__ = ["ExecutionGraph", "ExecutionNode", "KernelBufferAccess", "SyncStrategy", "sync_strategy"]
