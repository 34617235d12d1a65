"""Helpers of the cache tests (tests/cache/): an isolated cache per test, threads released together,
and child processes that share a cache directory."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from typing import Any, Callable, Iterator, List, Optional, Tuple

import pytest

from support.paths import REPO_DIR
from svod_min.cache import kernel_cache as kc


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Never touch the real ~/.cache, and start each test with an empty memory level (autouse: a test
    module that imports it gets it for every test)."""
    monkeypatch.setenv("SVOD_OBJECT_CACHE_DIR", str(tmp_path / "default-cache"))
    monkeypatch.delenv("SVOD_OBJECT_CACHE", raising=False)
    monkeypatch.delenv("SVOD_OBJECT_CACHE_BUDGET", raising=False)
    kc.OBJECT_MEMORY_CACHE.clear()
    yield
    kc.OBJECT_MEMORY_CACHE.clear()


def run_in_threads(n: int, fn: Callable[[int], Any]) -> Tuple[List[Any], List[Optional[BaseException]]]:
    """Run fn(i) on n threads released together; returns (results, errors) by index."""
    barrier = threading.Barrier(n)
    results: List[Any] = [None] * n
    errors: List[Optional[BaseException]] = [None] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:  # noqa: B902 - recorded for the assertion
            errors[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
        assert not t.is_alive(), "worker thread hung"
    return results, errors


def spawn(script: str, *args: Any) -> "subprocess.Popen[bytes]":
    """A Python child running ``script`` (dedented) with ``args``, importing this checkout's svod_min."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_DIR + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
