"""How a ``core_id`` kernel's invocations are spread over the CPU device's thread pool.

The caller and up to ``workers - 1`` pool threads claim core ids one at a time from a shared
queue, so a thread on a slower or busier CPU takes fewer (a VM's vCPUs often differ in speed:
fixed halves of gelu 2^22 gave 1.2-1.4x on 2 vCPUs, claimed ids 1.5-1.6x in the same minutes).
Inside a pool worker everything runs on that thread: waiting on the pool from one of its own
threads could deadlock it.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Deque, List

from ...error import ExecutionError

if TYPE_CHECKING:  # imported where a pool is waited on: a one-thread device has none
    import concurrent.futures

#: The caller, done with its ids, polls this long for the workers' last ones before it sleeps:
#: a sleeping caller is woken ~0.1 ms after they finish on a VM (2-3% of gelu 2^22 on 2 vCPUs).
SPIN_JOIN_S = 0.001

_worker = threading.local()  # .active is True on svod pool threads
_yield: Callable[[], None] = getattr(os, "sched_yield", lambda: time.sleep(0))  # releases the GIL


def mark_worker() -> None:
    """The pool's thread initializer: dispatch from this thread runs inline."""
    _worker.active = True


def on_worker() -> bool:
    return getattr(_worker, "active", False)


def run_range(fn: Callable[..., None], args: List[Any], pos: int, lo: int, hi: int) -> None:
    """Call ``fn`` for core ids ``lo..hi-1`` in turn, on this thread."""
    call_args = list(args)  # private copy: other threads patch their own core id
    for core_id in range(lo, hi):
        call_args[pos] = core_id
        fn(*call_args)


def run_claimed(fn: Callable[..., None], args: List[Any], pos: int, ids: Deque[int]) -> None:
    """Call ``fn`` for core ids taken from ``ids`` until none are left (``popleft`` is atomic, GIL or not)."""
    call_args = list(args)
    while True:
        try:
            core_id = ids.popleft()
        except IndexError:
            return
        call_args[pos] = core_id
        fn(*call_args)


def dispatch(
    pool: concurrent.futures.ThreadPoolExecutor,
    fn: Callable[..., None],
    args: List[Any],
    pos: int,
    n: int,
    workers: int,
    name: str,
) -> None:
    """Run core ids ``0..n-1`` on the caller and ``workers - 1`` pool threads; errors name kernel ``name``."""
    if workers <= 1 or on_worker():
        run_range(fn, args, pos, 0, n)
        return
    ids = collections.deque(range(n))
    futures = [pool.submit(run_claimed, fn, args, pos, ids) for _ in range(workers - 1)]
    try:
        run_claimed(fn, args, pos, ids)  # the caller is on a CPU already: it works while the workers wake
        _spin_until_done(futures)
    finally:
        wait_all(futures, name)


def _spin_until_done(futures: List["concurrent.futures.Future[None]"]) -> None:
    deadline = time.perf_counter() + SPIN_JOIN_S
    while not all(f.done() for f in futures) and time.perf_counter() < deadline:
        _yield()


def wait_all(futures: List["concurrent.futures.Future[None]"], name: str) -> None:
    """Wait for every future (buffers may be reused after), then raise the first failure as ExecutionError."""
    import concurrent.futures  # here: a one-thread device never waits on a pool

    concurrent.futures.wait(futures)
    for fut in futures:
        exc = fut.exception()
        if exc is not None:
            raise ExecutionError("kernel %s failed on a pool thread: %s" % (name, exc)) from exc
