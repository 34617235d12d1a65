"""How a plan's ops are scheduled: hazard groups inside each level, and device-graph segments.

Each Kahn level is split into groups of ops whose byte ranges on the underlying storage do not
conflict (:func:`hazard_groups`); groups run in order and the ops of one group may overlap.
On a GPU, runs of groups become device graphs (:func:`graph_segments`); on the CPU,
:func:`svod_min.plan.native_replay.pack_segments` packs them into native runner tables.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from ..devices.base import NO_NODE
from ..error import DeviceError
from ..ordering import Access, access_span, group_level
from .ops import PreparedBufferView, PreparedCopy, PreparedCustomFunction, PreparedKernel, PreparedOp


def op_accesses(op: PreparedOp, buffers: Sequence[Any]) -> List[Access]:
    """The byte ranges ``op`` reads and writes (a custom function counts as writing all of its buffers)."""
    if isinstance(op, PreparedKernel):
        outs = set(op.output_indices)
        return [access_span(buffers[b], pos in outs) for pos, b in enumerate(op.buffer_indices)]
    if isinstance(op, PreparedCopy):
        return [access_span(buffers[op.buffer_indices[0]], True), access_span(buffers[op.buffer_indices[1]], False)]
    if isinstance(op, PreparedCustomFunction):
        return [access_span(buffers[b], True) for b in op.buffer_indices]
    return []


def is_barrier(op: PreparedOp) -> bool:
    """An op that runs alone in its group: kernels not safe to overlap, custom functions, views."""
    if isinstance(op, PreparedKernel):
        return not op.kernel.host_parallel_safe
    return isinstance(op, (PreparedCustomFunction, PreparedBufferView))


def hazard_groups(
    levels: Sequence[List[int]], ops: Sequence[PreparedOp], buffers: Sequence[Any]
) -> List[List[List[int]]]:
    """Per level, its ops split into groups that may run at the same time."""
    accesses = [op_accesses(op, buffers) for op in ops]
    barrier = [is_barrier(op) for op in ops]
    return [group_level(level, accesses, barrier) for level in levels]


def graph_segments(
    graph: Any, groups: List[List[int]], ops: Sequence[PreparedOp], buffers: Sequence[Any], launches: Sequence[Any]
) -> List[Any]:
    """Runs of groups as device graphs from the device's graph slot; copies become memcpy nodes
    where the driver has them, else they stay on the Python path."""
    try:
        return graph.build(groups, graph_nodes(graph, ops, buffers, launches, copies=True))
    except DeviceError:
        return graph.build(groups, graph_nodes(graph, ops, buffers, launches, copies=False))


def graph_nodes(
    graph: Any, ops: Sequence[PreparedOp], buffers: Sequence[Any], launches: Sequence[Any], copies: bool
) -> Dict[int, Any]:
    """Each op as a graph node: its bound launch, a device copy (``copies``), NO_NODE (a view), or None.

    Custom functions (and copies the device cannot make nodes of) are None: they end a run and
    stay on the Python path.
    """
    nodes: Dict[int, Any] = {}
    for index, op in enumerate(ops):
        call = launches[index]
        node = None
        if call is not None and call.graphable:
            node = call
        elif isinstance(op, PreparedBufferView):
            node = NO_NODE  # checked when the plan was built; nothing runs
        elif copies and isinstance(op, PreparedCopy):
            node = graph.copy_node(*(buffers[i] for i in op.buffer_indices))
        nodes[index] = node
    return nodes


def kernel_programs(ops: Sequence[PreparedOp]) -> List[Tuple[str, Any]]:
    """Each kernel op's program once, with the first kernel name that uses it."""
    seen: Dict[int, Tuple[str, Any]] = {}
    for op in ops:
        if isinstance(op, PreparedKernel):
            seen.setdefault(id(op.kernel.program), (op.kernel.entry_point, op.kernel.program))
    return list(seen.values())


__all__ = ["graph_nodes", "graph_segments", "hazard_groups", "is_barrier", "kernel_programs", "op_accesses"]
