"""A kernel that shows whether a dispatch's threads claim core ids or get fixed ranges.

``wait0(flags, n, core_id)``: core id 0 spins (bounded: a few seconds) until ids 1..n-1 have all
run, then writes 1 to ``flags[0]`` (-1 when it gave up); the others write 1 to their flag and count
themselves in ``flags[n]``. Run as n ids on two threads, fixed ranges queue ids 1..n/2-1 behind
id 0 on its own thread, so it gives up; claimed ids let the other thread take all the rest.
"""

from __future__ import annotations

from typing import List

WAIT_SRC = """
void wait0(int* restrict flags, const int n, const int core_id) {
    if (core_id == 0) {
        long spins = 0;
        while (__atomic_load_n(&flags[n], __ATOMIC_ACQUIRE) < n - 1 && ++spins < 2000000000L)
            ;
        flags[0] = __atomic_load_n(&flags[n], __ATOMIC_ACQUIRE) == n - 1 ? 1 : -1;
        return;
    }
    flags[core_id] = 1;
    __atomic_add_fetch(&flags[n], 1, __ATOMIC_ACQ_REL);
}
"""
WAIT_ENTRY = "wait0"


def all_ids_ran(n: int) -> List[int]:
    """``flags`` after a dispatch where id 0 saw every other id run."""
    return [1] * n + [n - 1]
