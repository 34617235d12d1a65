"""Core-id dispatch over the CPU pool (devices/cpu_dispatch.py), with Python callables standing in
for kernels: every id runs once, claimed ids balance a busy thread, failures on a pool thread
surface as ExecutionError only after every thread stopped, and a pool thread never waits on its pool."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from typing import Any, Dict, List

import pytest

from svod_min.devices.cpu.dispatch import dispatch, mark_worker
from svod_min.error import ExecutionError


@pytest.fixture
def pool() -> Any:
    with concurrent.futures.ThreadPoolExecutor(max_workers=3, initializer=mark_worker) as p:
        yield p


def test_every_core_id_runs_once_with_its_own_arguments(pool: Any) -> None:
    seen: List[tuple] = []
    lock = threading.Lock()

    def kernel(tag: str, core_id: int, last: int) -> None:
        with lock:
            seen.append((tag, core_id, last))

    dispatch(pool, kernel, ["k", -1, 9], 1, 100, 3, "kernel")
    assert sorted(seen) == [("k", i, 9) for i in range(100)]


def test_a_busy_thread_takes_fewer_ids(pool: Any) -> None:
    others_done = threading.Event()
    ran: Dict[int, int] = {}

    def kernel(core_id: int) -> None:
        if core_id == 0:  # busy until every other id ran: fixed ranges would queue some behind it
            assert others_done.wait(10), "ids queued behind a busy one"
            return
        ran[core_id] = threading.get_ident()
        if len(ran) == 7:
            others_done.set()

    dispatch(pool, kernel, [0], 0, 8, 2, "busy")
    assert sorted(ran) == list(range(1, 8)) and len(set(ran.values())) == 1


def test_a_failure_on_a_pool_thread_is_raised_after_the_caller_waited_for_it(pool: Any) -> None:
    on_caller: List[int] = []

    def kernel(core_id: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            time.sleep(0.05)  # fails long after the caller ran out of ids (and stopped polling)
            raise RuntimeError("bad core %d" % core_id)
        time.sleep(0.01)
        on_caller.append(core_id)

    with pytest.raises(ExecutionError, match="kernel boom failed on a pool thread: bad core"):
        dispatch(pool, kernel, [0], 0, 4, 2, "boom")
    assert on_caller and len(on_caller) < 4


def test_dispatch_from_a_pool_thread_runs_inline(pool: Any) -> None:
    def nested() -> List[int]:
        idents: List[int] = []
        dispatch(pool, lambda i: idents.append(threading.get_ident()), [0], 0, 6, 3, "nested")
        return idents

    # three nested dispatches fill all three workers: waiting on the pool would deadlock
    futures = [pool.submit(nested) for _ in range(3)]
    for fut in futures:
        idents = fut.result(timeout=30)
        assert len(idents) == 6 and len(set(idents)) == 1
