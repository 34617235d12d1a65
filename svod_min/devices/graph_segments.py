"""Runs of graphable plan ops packed into device graphs (the generic half of a graph runtime).

A device's graph slot hands :func:`graph_segments` its own graph constructor; the packing is the
same for every device: hazard-ordered groups whose ops all have a node form a run, and a run of at
least two nodes becomes one graph.
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Sequence, Tuple

from .base import NO_NODE

#: ``make_graph(members, deps)``: ``deps[i]`` lists the member indices member ``i`` waits for.
MakeGraph = Callable[[List[Any], List[List[int]]], Any]


def graph_segments(groups: Sequence[Sequence[int]], nodes: Mapping[int, Any], make_graph: MakeGraph) -> List[Any]:
    """Segments for ``groups``: op-index lists (run one by one) and graphs from ``make_graph``.

    ``nodes[i]`` is op ``i``'s node, :data:`NO_NODE` (nothing to run: a view) or None (not
    graphable: it ends a run and stays on its own). A node waits for every node of the previous
    non-empty group of its run: groups already order every conflicting pair, so that is all a
    graph needs.
    """
    segments: List[Any] = []
    run: List[Sequence[int]] = []

    def flush() -> None:
        if sum(1 for g in run for i in g if nodes[i] is not NO_NODE) >= 2:
            segments.append(make_graph(*_members(run, nodes)))
        else:
            segments.extend(list(g) for g in run)
        run.clear()

    for group in groups:
        if all(nodes[i] is not None for i in group):
            run.append(group)
            continue
        flush()
        segments.append(list(group))
    flush()
    return segments


def _members(run: Sequence[Sequence[int]], nodes: Mapping[int, Any]) -> Tuple[List[Any], List[List[int]]]:
    members: List[Any] = []
    deps: List[List[int]] = []
    previous: List[int] = []
    for group in run:
        current = []
        for index in group:
            if nodes[index] is NO_NODE:
                continue
            current.append(len(members))
            members.append(nodes[index])
            deps.append(list(previous))
        previous = current or previous
    return members, deps


__all__ = ["MakeGraph", "graph_segments"]
