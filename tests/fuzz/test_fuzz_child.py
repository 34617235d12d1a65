"""The fuzzer's child steps classify what a model can do to a process: a signal, a hang, an allocation past the
limit, a traceback behind exit 2 (fuzz/child.py, fuzz/case.py)."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

import pytest
from support.paths import REPO_DIR

if not os.path.isdir(os.path.join(REPO_DIR, "fuzz")) or not hasattr(os, "fork"):
    pytest.skip("the fuzz package lives in the checkout; it forks", allow_module_level=True)
sys.path.insert(0, REPO_DIR)

from fuzz.child import address_space_limit, run_child  # noqa: E402


def _step(tmp_path, body, timeout_s=10.0, limit=None):
    return run_child("step", ["step"], body, str(tmp_path), timeout_s, limit)


def test_exit_status_and_output_come_back(tmp_path):
    def body():
        print("to stdout")
        print("to stderr", file=sys.stderr)
        return 2

    step = _step(tmp_path, body)
    assert (step.rc, step.signal, step.hung) == (2, None, False)
    assert step.stdout.strip() == "to stdout" and "to stderr" in step.stderr


def test_a_segfault_is_a_signal_not_the_end_of_the_round(tmp_path):
    step = _step(tmp_path, lambda: ctypes.string_at(0))
    assert step.signal == signal.SIGSEGV and step.rc is None
    assert "Fatal Python error" in step.stderr  # faulthandler left the Python stack


def test_a_hang_is_killed_at_the_deadline_with_its_children(tmp_path):
    marker = tmp_path / "grandchild-alive"

    def body():
        if os.fork() == 0:  # a compiler the step started: killed with the group
            time.sleep(1)
            marker.write_text("still here")
            os._exit(0)
        time.sleep(60)
        return 0

    step = _step(tmp_path, body, timeout_s=0.3)
    assert step.hung and step.signal is None and step.seconds < 5
    time.sleep(1.5)
    assert not marker.exists()


def test_an_allocation_past_the_limit_fails_in_the_child(tmp_path):
    def body():
        bytearray(1 << 31)  # 2 GiB against a budget of 256 MiB
        return 0

    step = _step(tmp_path, body, limit=address_space_limit(256 << 20))
    assert step.rc == 70 and "MemoryError" in step.stderr


def test_an_uncaught_exception_leaves_its_traceback(tmp_path):
    def body():
        raise KeyError("boom")

    step = _step(tmp_path, body)
    assert step.rc == 70 and "Traceback (most recent call last)" in step.stderr and "KeyError" in step.stderr
