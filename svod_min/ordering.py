"""Ordering of plan ops: byte-range hazards between buffer accesses and deterministic levels
(Kahn's algorithm). One implementation each, used by plans, the executor and the devices."""

from __future__ import annotations

import heapq
from typing import Any, List, Sequence, Tuple

from .error import PlanError


def kahn_levels(preds: List[List[int]], ids: Sequence[int]) -> Tuple[List[int], List[List[int]]]:
    """Deterministic topological order and levels (ready sets, lowest index first)."""
    n = len(preds)
    indegree = [len(p) for p in preds]
    succs: List[List[int]] = [[] for _ in range(n)]
    for index, p in enumerate(preds):
        for q in p:
            succs[q].append(index)
    ready = [i for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    order: List[int] = []
    levels: List[List[int]] = []
    while ready:
        level = sorted(ready)
        ready = []
        levels.append(level)
        order.extend(level)
        for i in level:
            for s in succs[i]:
                indegree[s] -= 1
                if indegree[s] == 0:
                    heapq.heappush(ready, s)
    if len(order) != n:
        blocked = sorted({ids[i] for i in range(n) if indegree[i] > 0})
        raise PlanError("cycle detected in op dependencies: blocked_ids=%s" % blocked)
    return order, levels


#: One access of an op to a buffer: (storage key, first byte, end byte, is_write).
Access = Tuple[int, int, int, bool]


def access_span(buf: Any, write: bool) -> Access:
    """``buf``'s bytes as an :data:`Access` (an empty buffer still occupies its offset)."""
    return (id(buf.storage), buf.offset, buf.offset + max(buf.nbytes, 1), write)


def ranges_overlap(lo_a: int, hi_a: int, lo_b: int, hi_b: int) -> bool:
    """Whether the half-open byte ranges ``[lo_a, hi_a)`` and ``[lo_b, hi_b)`` intersect.

    An empty range strictly inside the other counts (it sits between two of its bytes); one at
    either end does not.
    """
    return lo_a < hi_b and lo_b < hi_a


def buffers_overlap(a: Any, b: Any) -> bool:
    """Whether two buffers (views) share bytes of one storage allocation."""
    return a.storage is b.storage and ranges_overlap(a.offset, a.offset + a.nbytes, b.offset, b.offset + b.nbytes)


def accesses_conflict(a: Sequence[Access], b: Sequence[Access]) -> bool:
    """A hazard: some byte of one storage is touched by both and written by at least one."""
    for sa, lo_a, hi_a, wa in a:
        for sb, lo_b, hi_b, wb in b:
            if sa == sb and (wa or wb) and ranges_overlap(lo_a, hi_a, lo_b, hi_b):
                return True
    return False


def group_level(level: List[int], accesses: List[List[Access]], barrier: List[bool]) -> List[List[int]]:
    """Split a level into conflict-free groups, keeping insertion order between conflicts."""
    groups: List[List[int]] = []
    for index in level:
        if barrier[index]:
            groups.append([index])
            continue
        # An op may join the last group only if no later group blocks it: keep order.
        target = None
        for g in reversed(groups):
            if barrier[g[0]] or any(accesses_conflict(accesses[index], accesses[j]) for j in g):
                break
            target = g
        if target is None:
            groups.append([index])
        else:
            target.append(index)
    return groups


__all__ = [
    "Access",
    "access_span",
    "accesses_conflict",
    "buffers_overlap",
    "group_level",
    "kahn_levels",
    "ranges_overlap",
]
