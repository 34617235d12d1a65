"""svod's CPU command queue: launches, copies and timeline waits/signals, recorded, then run in order.

As in svod (the ``CpuQueue`` of its predecessor morok), recording never raises: a command that
cannot be recorded (a closed program, a wrong buffer count, copies of different sizes) keeps its
error, and :meth:`CpuQueue.submit` reports every such error at once, joined by ``"; "``, before
running anything. A submitted queue runs serially on the calling thread, so CPU work is done when
``submit()`` returns; :meth:`CpuQueue.finish` submits whatever is still recorded (the GPU-queue
idiom "submit, then wait for the device" in one call).

Signals are any object with ``signal(value)`` and ``wait(value, timeout) -> bool``, such as
:class:`svod_min.executor.TimelineSignal`.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python 3.7 is not supported; kept for type checkers only
    Protocol = object  # type: ignore[assignment,misc]

from ...error import ExecutionError, SvodError
from ..transfer import copy_buffer

Command = Callable[[], None]


class Signal(Protocol):
    """A timeline a queue can wait for and advance."""

    def signal(self, value: int) -> None: ...

    def wait(self, value: int, timeout: Optional[float] = None) -> bool: ...


class CpuQueue:
    """An ordered queue of CPU commands; methods return the queue so calls can be chained."""

    def __init__(self) -> None:
        self._commands: List[Command] = []
        self._errors: List[str] = []
        self.submitted = 0  # commands run so far (for tests and diagnostics)

    def __len__(self) -> int:
        return len(self._commands)

    def __repr__(self) -> str:
        return "<CpuQueue %d recorded, %d errors>" % (len(self._commands), len(self._errors))

    # --- recording ---

    def exec(
        self,
        program: Any,
        buffers: Sequence[Any],
        vals: Sequence[int] = (),
        *,
        global_size: Optional[Sequence[int]] = None,
        core_id_index: Optional[int] = None,
    ) -> "CpuQueue":
        """Record a kernel launch: ``program`` is bound (validated) now and runs at submit."""
        try:
            launch = program.bind(buffers, vals, global_size=global_size, core_id_index=core_id_index)
        except SvodError as exc:
            return self._defer("exec %s: %s" % (program.name, exc))
        return self._record(launch)

    def copy(self, dst: Any, src: Any) -> "CpuQueue":
        """Record a copy of all of ``src`` into ``dst`` (the same size)."""
        if dst.nbytes != src.nbytes:
            return self._defer("copy: size mismatch: dst %d bytes, src %d bytes" % (dst.nbytes, src.nbytes))
        return self._record(lambda: copy_buffer(dst, src))

    def signal(self, signal: Signal, value: int) -> "CpuQueue":
        """Record advancing ``signal`` to ``value`` once every earlier command ran."""
        if not _is_count(value):
            return self._defer("signal: value must be a non-negative int, got %r" % (value,))
        return self._record(lambda: signal.signal(value))

    def wait(self, signal: Signal, value: int, timeout: Optional[float] = None) -> "CpuQueue":
        """Record waiting until ``signal`` reaches ``value`` (``timeout`` seconds at most) before what follows."""
        if not _is_count(value):
            return self._defer("wait: value must be a non-negative int, got %r" % (value,))

        def wait() -> None:
            if not signal.wait(value, timeout):
                raise ExecutionError(
                    "CpuQueue: timed out after %gs waiting for timeline value %d" % (timeout or 0.0, value)
                )

        return self._record(wait)

    def memory_barrier(self) -> "CpuQueue":
        """Recorded for parity with device queues: a CPU queue runs in order, so nothing is left to fence."""
        return self

    def _record(self, command: Command) -> "CpuQueue":
        self._commands.append(command)
        return self

    def _defer(self, error: str) -> "CpuQueue":
        self._errors.append(error)
        return self

    # --- running ---

    def submit(self) -> int:
        """Run every recorded command in order and empty the queue; returns how many ran.

        Recording errors raise :class:`ExecutionError` (all of them, joined by ``"; "``) and
        nothing runs. A command that fails stops the queue there; the rest are dropped.
        """
        commands, errors = self._commands, self._errors
        self._commands, self._errors = [], []
        if errors:
            raise ExecutionError("CpuQueue: " + "; ".join(errors))
        for command in commands:
            command()
            self.submitted += 1
        return len(commands)

    def finish(self) -> None:
        """Submit what is recorded; on return every command of this queue has run."""
        self.submit()


def _is_count(value: Any) -> bool:
    return type(value) is int and value >= 0


__all__ = ["CpuQueue", "Signal"]
