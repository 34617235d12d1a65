"""Device contexts: the timeline signal, in-order completion, checked timeline values."""

from __future__ import annotations

import threading
from typing import Any, List

import pytest
from support.executor import LONG, SHORT

from svod_min.devices.spec import DeviceSpec
from svod_min.error import ExecutionError
from svod_min.executor.device_context import DeviceContext, TimelineSignal

# --- timeline signal -------------------------------------------------------------------------


def test_timeline_signal_blocks_waiter_until_signalled() -> None:
    sig = TimelineSignal(name="CPU")
    started, done = threading.Event(), threading.Event()
    result: List[bool] = []

    def waiter() -> None:
        started.set()
        result.append(sig.wait(3, timeout=LONG))
        done.set()

    threading.Thread(target=waiter, daemon=True).start()
    assert started.wait(LONG)
    sig.signal(2)
    assert not done.wait(SHORT)  # 2 < 3: still blocked
    sig.signal(3)
    assert done.wait(LONG)
    assert result == [True]
    assert sig.value == 3


def test_timeline_signal_ignores_lower_values_and_times_out() -> None:
    sig = TimelineSignal(5, name="CUDA:1")
    sig.signal(2)
    assert sig.value == 5
    assert sig.wait(5, timeout=0) is True
    assert sig.wait(6, timeout=0.01) is False
    with pytest.raises(ExecutionError, match=r"CUDA:1 timeline value 6 \(current value 5\)"):
        sig.wait_or_raise(6, timeout=0.01)
    with pytest.raises(ExecutionError):
        sig.signal(-1)
    with pytest.raises(ExecutionError):
        sig.signal(2**64)


def test_context_completes_in_order() -> None:
    ctx = DeviceContext(DeviceSpec("CPU"))
    a, b = ctx.next_timeline(), ctx.next_timeline()
    assert (a, b) == (1, 2)
    ctx.signal_completion(b)  # finished first, but 1 is still running
    assert ctx.current_value == 0
    ctx.signal_completion(a)
    assert ctx.current_value == 2
    ctx.wait_for(2, timeout=0)
    with pytest.raises(ExecutionError, match="never reserved"):
        ctx.wait_for(3)
    with pytest.raises(ExecutionError, match="cannot complete"):
        ctx.signal_completion(7)


@pytest.mark.parametrize(
    "call",
    [
        lambda ctx: ctx.wait_for("3"),
        lambda ctx: ctx.signal_completion("1"),
        lambda ctx: ctx.wait_for(-1),
    ],
)
def test_timeline_values_are_checked(call: Any) -> None:
    from svod_min.executor.unified import DeviceContext

    ctx = DeviceContext("CPU")
    ctx.next_timeline()
    with pytest.raises(ExecutionError, match=r"timeline value must be an int in \[0, 2\*\*64\)"):
        call(ctx)
