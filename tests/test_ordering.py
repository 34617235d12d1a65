"""ordering.py: Kahn levels, byte-range overlap and access conflicts, hazard groups within a level."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from svod_min.error import PlanError
from svod_min.ordering import access_span, accesses_conflict, buffers_overlap, group_level, kahn_levels, ranges_overlap


def _buf(storage: Any, offset: int, nbytes: int) -> Any:
    return SimpleNamespace(storage=storage, offset=offset, nbytes=nbytes)


# --- Kahn levels ---------------------------------------------------------------------------------------


def test_kahn_levels_are_ready_sets_lowest_index_first() -> None:
    # 0 -> 2, 1 -> 2, 2 -> 3; 4 is independent
    order, levels = kahn_levels([[], [], [0, 1], [2], []], [10, 11, 12, 13, 14])
    assert levels == [[0, 1, 4], [2], [3]]
    assert order == [0, 1, 4, 2, 3]


def test_kahn_levels_of_a_diamond_and_of_nothing() -> None:
    assert kahn_levels([[], [0], [0], [1, 2]], [1, 2, 3, 4])[1] == [[0], [1, 2], [3]]
    assert kahn_levels([], []) == ([], [])


def test_kahn_cycle_names_the_blocked_ids() -> None:
    # 1 <-> 2 form a cycle, 3 waits on it; 0 is fine
    with pytest.raises(PlanError, match=r"cycle detected in op dependencies: blocked_ids=\[21, 22, 23\]"):
        kahn_levels([[], [2], [1], [2]], [20, 21, 22, 23])


def test_kahn_self_loop_is_a_cycle() -> None:
    with pytest.raises(PlanError, match=r"blocked_ids=\[7\]"):
        kahn_levels([[0]], [7])


# --- overlap -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((0, 4, 4, 8), None, False),  # touching half-open ranges share no byte
        ((0, 4, 3, 8), None, True),
        ((2, 3, 0, 8), None, True),  # one inside the other
        ((0, 8, 8, 8), None, False),  # an empty range at the end
        (
            (4, 4, 0, 8),
            None,
            True,
        ),  # an empty range strictly inside counts (access_span gives empty buffers a byte anyway)
    ],
)
def test_ranges_overlap_edges(a: Any, b: Any, expected: bool) -> None:
    lo_a, hi_a, lo_b, hi_b = a
    assert ranges_overlap(lo_a, hi_a, lo_b, hi_b) is expected
    assert ranges_overlap(lo_b, hi_b, lo_a, hi_a) is expected  # symmetric


def test_buffers_overlap_needs_the_same_storage() -> None:
    s, t = object(), object()
    assert buffers_overlap(_buf(s, 0, 8), _buf(s, 4, 8))
    assert not buffers_overlap(_buf(s, 0, 8), _buf(s, 8, 8))
    assert not buffers_overlap(_buf(s, 0, 8), _buf(t, 0, 8))


def test_an_empty_buffer_still_occupies_its_offset() -> None:
    s = object()
    assert access_span(_buf(s, 4, 0), True) == (id(s), 4, 5, True)
    assert accesses_conflict([access_span(_buf(s, 4, 0), True)], [access_span(_buf(s, 0, 8), False)])


def test_accesses_conflict_needs_a_write_and_shared_bytes() -> None:
    s, t = object(), object()
    read = access_span(_buf(s, 0, 8), False)
    assert not accesses_conflict([read], [access_span(_buf(s, 4, 8), False)])  # read/read
    assert accesses_conflict([read], [access_span(_buf(s, 4, 8), True)])  # read/write
    assert accesses_conflict([access_span(_buf(s, 0, 8), True)], [read])  # write/read
    assert not accesses_conflict([read], [access_span(_buf(s, 8, 8), True)])  # disjoint bytes
    assert not accesses_conflict([read], [access_span(_buf(t, 0, 8), True)])  # another storage


# --- groups within a level -----------------------------------------------------------------------------


def test_group_level_keeps_conflicting_ops_in_insertion_order() -> None:
    s = object()
    w0, w8 = access_span(_buf(s, 0, 8), True), access_span(_buf(s, 8, 8), True)
    accesses = [[w0], [w8], [w0], [w8]]  # 0 and 2 conflict, 1 and 3 conflict
    assert group_level([0, 1, 2, 3], accesses, [False] * 4) == [[0, 1], [2, 3]]


def test_group_level_moves_an_op_back_only_past_groups_it_does_not_conflict_with() -> None:
    s = object()
    a, b = access_span(_buf(s, 0, 8), True), access_span(_buf(s, 8, 8), True)
    assert group_level([0, 1, 2], [[a], [a], [b]], [False] * 3) == [[0, 2], [1]]  # free of both: the earliest
    assert group_level([0, 1, 2], [[a], [b], [a]], [False] * 3) == [[0, 1], [2]]  # 1 joins 0; 2 conflicts with 0


def test_barriers_stand_alone_and_end_the_group_before_them() -> None:
    accesses = [[], [], [], []]
    assert group_level([0, 1, 2, 3], accesses, [False, True, False, False]) == [[0], [1], [2, 3]]
