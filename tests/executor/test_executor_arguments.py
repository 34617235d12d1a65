"""executor.py refuses malformed timeouts, kernels, failures and graph nodes with named errors
(moved from the CPU misuse tests; belongs with tests/executor/test_executor.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from support.paths import REPO_DIR

from svod_min.error import ExecutionError
from svod_min.executor.unified import ExecutionGraph, ExecutionNode

_ROOT = REPO_DIR


def _executor_wait_in_a_child(call: str) -> "subprocess.CompletedProcess[str]":
    code = (
        textwrap.dedent("""
        from svod_min.error import ExecutionError
        from svod_min.executor import TimelineSignal, UnifiedExecutor
        ex = UnifiedExecutor()
        ctx = ex.add_device("CPU")
        try:
            %s
            print("returned")
        except ExecutionError as exc:
            print("ExecutionError", exc)
    """)
        % call
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=_ROOT)


@pytest.mark.parametrize(
    "call",
    [
        "TimelineSignal(0).wait(1, float('nan'))",
        "ctx.wait_for(0, 'x')",
        "ex.synchronize_all('1')",
        "TimelineSignal(0).wait(1, True)",
    ],
)
def test_executor_timeouts_that_are_not_numbers_are_refused(call: str) -> None:
    result = _executor_wait_in_a_child(call)  # nan: a wait that never expired; a string: TypeError deep inside
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().startswith("ExecutionError timeout must be seconds (a number) or None"), result.stdout


def test_executor_timeouts_inf_and_past_deadlines_still_work() -> None:
    from svod_min.executor.unified import TimelineSignal

    assert TimelineSignal(1).wait(1, float("inf")) is True
    assert TimelineSignal(0).wait(1, -0.5) is False  # a deadline already past: do not wait


def test_execute_kernel_refuses_a_non_callable_before_reserving() -> None:
    from svod_min.executor.unified import UnifiedExecutor

    ex = UnifiedExecutor()
    with pytest.raises(ExecutionError, match="execute_kernel needs a callable, got NoneType"):
        ex.execute_kernel("CPU", None)  # type: ignore[arg-type]
    ctx = ex.context("CPU")
    assert ctx is None or (ctx.last_reserved == 0 and ctx.failures == {})


def test_signal_failure_needs_an_exception() -> None:
    from svod_min.executor.unified import UnifiedExecutor

    ctx = UnifiedExecutor().add_device("CPU")
    value = ctx.next_timeline()
    with pytest.raises(ExecutionError, match="signal_failure needs an exception, got str"):
        ctx.signal_failure(value, "oops")  # type: ignore[arg-type]  # wait_for later: TypeError from "raise from"
    ctx.signal_completion(value)
    ctx.wait_for(value, 1.0)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ExecutionNode("a", "CPU"), "node id must be an int, got 'a'"),
        (lambda: ExecutionNode(True, "CPU"), "node id must be an int, got True"),
        (lambda: ExecutionNode(0, "CPU", buffer_access=5), "buffer_access must be a list, got int"),
        (lambda: ExecutionNode(0, "CPU", buffer_access=[object()]), "buffer_access holds KernelBufferAccess"),
        (lambda: ExecutionGraph([5]), "graph nodes must be ExecutionNode, got int"),
    ],
)
def test_execution_graph_refuses_malformed_nodes(make: Any, message: str) -> None:
    from svod_min.error import PlanError

    with pytest.raises(PlanError, match=message):
        make()
