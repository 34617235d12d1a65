"""devices/graph_segments.py: runs of graphable ops packed into graphs, the generic half of a graph slot."""

from __future__ import annotations

from typing import Any, List

from svod_min.devices.base import NO_NODE
from svod_min.devices.graph_segments import graph_segments


class Graph:
    """What ``make_graph`` built: its members and their dependencies."""

    def __init__(self, members: List[Any], deps: List[List[int]]) -> None:
        self.members, self.deps = members, deps

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and (self.members, self.deps) == (other.members, other.deps)

    def __repr__(self) -> str:
        return "Graph(%r, %r)" % (self.members, self.deps)


def test_a_run_of_groups_becomes_one_graph_waiting_on_the_previous_group() -> None:
    nodes = {0: "a", 1: "b", 2: "c", 3: "d"}
    segments = graph_segments([[0, 1], [2], [3]], nodes, Graph)
    assert segments == [Graph(["a", "b", "c", "d"], [[], [], [0, 1], [2]])]


def test_an_op_without_a_node_ends_the_run_and_stays_a_group() -> None:
    nodes = {0: "a", 1: "b", 2: None, 3: "d", 4: "e"}
    segments = graph_segments([[0], [1], [2], [3, 4]], nodes, Graph)
    assert segments == [Graph(["a", "b"], [[], [0]]), [2], Graph(["d", "e"], [[], []])]


def test_a_run_of_one_node_is_not_worth_a_graph() -> None:
    nodes = {0: "a", 1: None, 2: "c", 3: NO_NODE}
    assert graph_segments([[0], [1], [2], [3]], nodes, Graph) == [[0], [1], [2], [3]]


def test_views_add_no_node_and_do_not_break_the_dependency_chain() -> None:
    nodes = {0: "a", 1: NO_NODE, 2: "c"}
    segments = graph_segments([[0], [1], [2]], nodes, Graph)
    assert segments == [Graph(["a", "c"], [[], [0]])]  # c waits for a across the empty (view) group


def test_no_groups_no_segments() -> None:
    assert graph_segments([], {}, Graph) == []
