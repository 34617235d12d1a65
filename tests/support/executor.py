"""Helpers shared by the executor and device-context tests: threads, waits, time limits."""

from __future__ import annotations

import threading
import time
from typing import Any, List, Tuple

LONG = 10.0  # generous: only hit when something is broken
SHORT = 0.05  # "still blocked" probes: a slow machine can only make these pass


def start_thread(target: Any) -> Tuple[threading.Thread, List[Any]]:
    """Run ``target()`` on a thread; the list receives its result or exception."""
    out: List[Any] = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # handed back to the test thread
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def wait_until(predicate: Any) -> None:
    deadline = time.monotonic() + LONG
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.001)
