"""Execution graphs: Kahn levels, hazards from buffer accesses, sync strategies."""

from __future__ import annotations

import random
from typing import List, Optional, Tuple

import pytest

from svod_min.devices.registry import DEVICE_FACTORIES, DeviceSpec
from svod_min.error import PlanError
from svod_min.executor.graph import ExecutionGraph, ExecutionNode, KernelBufferAccess, SyncStrategy, sync_strategy
from svod_min.executor.unified import UnifiedExecutor


def _node(i: int, preds: Tuple[int, ...] = (), access: Tuple[KernelBufferAccess, ...] = ()) -> ExecutionNode:
    return ExecutionNode(i, DeviceSpec("CPU"), predecessors=list(preds), buffer_access=list(access))


def _graph(edges: List[Tuple[int, Tuple[int, ...]]]) -> ExecutionGraph:
    g = ExecutionGraph()
    for i, preds in edges:
        g.add_node(_node(i, preds))
    return g


# --- parallel groups -------------------------------------------------------------------


def test_chain_gives_three_groups() -> None:
    g = _graph([(1, ()), (2, (1,)), (3, (2,))])
    assert g.compute_parallel_groups() == [[1], [2], [3]]


def test_diamond_groups() -> None:
    g = _graph([(1, ()), (2, (1,)), (3, (1,)), (4, (2, 3))])
    assert g.compute_parallel_groups() == [[1], [2, 3], [4]]


def test_two_roots_join() -> None:
    # The reference's shape: two independent nodes feeding a third.
    g = _graph([(2, ()), (1, ()), (3, (1, 2))])
    assert g.compute_parallel_groups() == [[1, 2], [3]]


def test_groups_are_deterministic_and_idempotent() -> None:
    edges = [(1, ()), (2, (1,)), (3, (1,)), (4, (2, 3)), (5, ()), (6, (5, 4)), (7, (1,)), (8, (7, 7))]
    expected = [[1, 5], [2, 3, 7], [4, 8], [6]]
    rng = random.Random(1234)
    for _ in range(20):
        shuffled = list(edges)
        rng.shuffle(shuffled)
        g = _graph(shuffled)
        assert g.compute_parallel_groups() == expected
        assert g.compute_parallel_groups() == expected  # no state accumulates between calls
        assert g.topological_order() == [n for grp in expected for n in grp]


def test_cycle_lists_blocked_ids() -> None:
    g = _graph([(1, ()), (2, (1, 3)), (3, (2,)), (4, (3,)), (5, (1,))])
    with pytest.raises(PlanError, match=r"cycle.*blocked_ids=\[2, 3, 4\]"):
        g.compute_parallel_groups()


def test_self_dependency_is_a_cycle() -> None:
    with pytest.raises(PlanError, match=r"blocked_ids=\[1\]"):
        _graph([(1, (1,))]).compute_parallel_groups()


def test_unknown_predecessor_and_duplicate_id() -> None:
    with pytest.raises(PlanError, match="unknown node id 9"):
        _graph([(1, ()), (2, (9,))]).compute_parallel_groups()
    g = _graph([(1, ())])
    with pytest.raises(PlanError, match="duplicate"):
        g.add_node(_node(1))


def test_empty_graph() -> None:
    assert ExecutionGraph().compute_parallel_groups() == []


def test_node_accepts_device_string() -> None:
    assert ExecutionNode(0, "cuda:1").device == DeviceSpec("CUDA", 1)  # type: ignore[arg-type]


# --- hazards -------------------------------------------------------------------------------


def R(buf: str, rng: Optional[Tuple[int, int]] = None) -> KernelBufferAccess:
    return KernelBufferAccess(buf, False, rng)


def W(buf: str, rng: Optional[Tuple[int, int]] = None) -> KernelBufferAccess:
    return KernelBufferAccess(buf, True, rng)


def test_dependencies_from_access_raw_war_waw() -> None:
    g = ExecutionGraph()
    g.add_node(_node(1, access=(W("a"),)))  # produce a
    g.add_node(_node(2, access=(R("a"), W("b"))))  # RAW on a
    g.add_node(_node(3, access=(R("a"), W("c"))))  # RAW on a, independent of 2
    g.add_node(_node(4, access=(W("a"),)))  # WAR vs 2, 3; WAW vs 1
    g.add_node(_node(5, access=(R("x"),)))  # read-only, untouched buffer
    g.add_node(_node(6, access=(R("x"),)))  # read after read: no hazard
    added = g.add_dependencies_from_access()
    assert set(added) == {(1, 2), (1, 3), (1, 4), (2, 4), (3, 4)}
    assert g.compute_parallel_groups() == [[1, 5, 6], [2, 3], [4]]
    assert g.add_dependencies_from_access() == []  # idempotent


def test_access_byte_ranges_narrow_hazards() -> None:
    g = ExecutionGraph()
    g.add_node(_node(1, access=(W("arena", (0, 64)),)))
    g.add_node(_node(2, access=(W("arena", (64, 128)),)))  # disjoint view: no edge
    g.add_node(_node(3, access=(R("arena", (60, 70)),)))  # overlaps both
    g.add_node(_node(4, access=(R("arena"),)))  # whole buffer: conflicts with both writes
    assert set(g.add_dependencies_from_access()) == {(1, 3), (2, 3), (1, 4), (2, 4)}
    assert g.compute_parallel_groups() == [[1, 2], [3, 4]]


def test_access_of_cpu_views_keys_on_storage() -> None:
    buf = DEVICE_FACTORIES.device("CPU").allocate(256)
    lo, hi, mid = buf.view(0, 128), buf.view(128, 128), buf.view(64, 128)
    assert KernelBufferAccess.of(lo, True).byte_range == (0, 128)
    assert not KernelBufferAccess.of(lo, True).conflicts(KernelBufferAccess.of(hi, True))
    assert KernelBufferAccess.of(mid).conflicts(KernelBufferAccess.of(hi, True))
    other = DEVICE_FACTORIES.device("CPU").allocate(256)
    assert not KernelBufferAccess.of(other, True).conflicts(KernelBufferAccess.of(buf, True))
    assert KernelBufferAccess.of("key", True) == W("key")  # anything else is its own key


def test_access_of_any_interface_buffer_uses_its_storage_window() -> None:
    """Only the device interface's slots (storage, offset, nbytes) are read: a buffer of any device works."""

    class Window:  # a base.Buffer as another device would give it: no byte_range(), no address
        def __init__(self, storage: object, offset: int, nbytes: int) -> None:
            self.storage, self.offset, self.nbytes = storage, offset, nbytes

    arena = object()
    lo, hi, mid = Window(arena, 0, 128), Window(arena, 128, 128), Window(arena, 64, 128)
    assert KernelBufferAccess.of(hi, True) == W(arena, (128, 256))
    assert not KernelBufferAccess.of(lo, True).conflicts(KernelBufferAccess.of(hi, True))
    assert KernelBufferAccess.of(mid).conflicts(KernelBufferAccess.of(lo, True))
    assert not KernelBufferAccess.of(Window(object(), 0, 128), True).conflicts(KernelBufferAccess.of(lo, True))


# --- sync strategy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, dst, expected",
    [
        ("CPU", "CPU", SyncStrategy.NONE),
        ("CUDA:0", "cuda", SyncStrategy.NONE),
        ("CUDA:0", "CUDA:1", SyncStrategy.PEER_TO_PEER),
        ("GPU:1", "CUDA:0", SyncStrategy.PEER_TO_PEER),
        ("CPU", "CUDA", SyncStrategy.HOST_STAGED),
        ("CUDA:1", "CPU", SyncStrategy.HOST_STAGED),
        ("METAL", "CUDA", SyncStrategy.HOST_STAGED),
    ],
)
def test_sync_strategy_table(src: str, dst: str, expected: SyncStrategy) -> None:
    assert UnifiedExecutor.sync_strategy(src, dst) is expected
    assert UnifiedExecutor.sync_strategy(DeviceSpec.parse(src), DeviceSpec.parse(dst)) is expected
    assert sync_strategy(DeviceSpec.parse(src), DeviceSpec.parse(dst)) is expected


def test_cpu_mediated_is_an_alias() -> None:
    assert SyncStrategy["CPU_MEDIATED"] is SyncStrategy.HOST_STAGED
    assert len(SyncStrategy) == 3


def test_numpy_accesses_conflict_by_address_not_by_elementwise_equality() -> None:
    np = pytest.importorskip("numpy")
    from svod_min.executor.unified import ExecutionGraph, ExecutionNode, KernelBufferAccess

    arena = np.zeros(8)
    a, b, c = arena[:4], arena[2:6], np.zeros(4)  # a and b overlap; c is elsewhere (and equal in value)
    graph = ExecutionGraph(
        [
            ExecutionNode(0, "CPU", buffer_access=[KernelBufferAccess.of(a, True)]),
            ExecutionNode(1, "CPU", buffer_access=[KernelBufferAccess.of(b, False)]),
            ExecutionNode(2, "CPU", buffer_access=[KernelBufferAccess.of(c, False)]),
        ]
    )
    assert graph.add_dependencies_from_access() == [
        (0, 1)
    ]  # (predecessor, node); raised "truth value is ambiguous" before
