"""Shared fixtures for the execution-plan tests: mock programs and small builders.

A mock program fills the device interface's ``Program`` slots (no native entry, so the plan
never replays it natively); its launches call ``execute(buffers, vals, global_size=...,
core_id_index=...)`` on every dispatch, and each mock records what it was given.
Test modules import the ``dev`` fixture from here (``# noqa: F401 - fixtures``).
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

from svod_min.cache.kernel_cache import CachedKernel
from svod_min.devices.cpu.device import CpuBuffer, CpuDevice
from svod_min.plan.execution_plan import (
    ExecutionPlan,
    ExecutionPlanBuilder,
    PreparedCopy,
    PreparedCustomFunction,
    PreparedKernel,
    RuntimeVar,
)

SLEEP = 0.03  # the 30 ms of morok's host-parallelism mocks


@pytest.fixture(scope="module")
def dev() -> CpuDevice:
    """A CPU device with a pool of four threads, one per test module."""
    return CpuDevice(threads=4)


class RecordingLaunch:
    """A bound mock call (the interface's ``Launch``): replays ``program.execute`` with what it was bound to."""

    graphable = False
    timed = None

    def __init__(
        self,
        program: "RecordingProgram",
        buffers: Sequence[Any],
        vals: Sequence[int],
        global_size: Optional[Sequence[int]],
        core_id_index: Optional[int],
    ) -> None:
        self.program, self.buffers, self.vals = program, list(buffers), list(vals)
        self.global_size, self.core_id_index = global_size, core_id_index

    def __call__(self) -> None:
        self.program.execute(self.buffers, self.vals, global_size=self.global_size, core_id_index=self.core_id_index)

    def set_vals(self, vals: Sequence[int]) -> None:
        self.vals = list(vals)

    def set_dims(self, grid: Sequence[int], block: Optional[Sequence[int]] = None) -> None:
        self.global_size = grid


class RecordingProgram:
    """Counts calls and records ``(vals, global_size, core_id_index)`` of each.

    ``action(buffers, vals)`` runs on every call (to move data); ``sleep``
    seconds are spent inside the call while ``tracker`` counts it as active.
    :func:`mock_kernel` sets ``buf_count`` and ``var_names`` from the kernel it wraps it in.
    """

    grid_in_blocks = False
    native_address = None
    closed = False
    buf_count = 0
    var_names: Sequence[str] = ()

    def __init__(
        self,
        action: Optional[Callable[[Sequence[Any], List[int]], None]] = None,
        *,
        sleep: float = 0.0,
        tracker: Optional["ActiveTracker"] = None,
        name: str = "mock",
        log: Optional[List[Any]] = None,
    ) -> None:
        self.action = action
        self.sleep = sleep
        self.tracker = tracker
        self.name = name
        self.log = log  # shared across programs: records ``name`` per call, in call order
        self.calls: List[Tuple[List[int], Optional[Tuple[int, ...]], Optional[int]]] = []
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return len(self.calls)

    @property
    def last_global_size(self) -> Optional[Tuple[int, ...]]:
        return self.calls[-1][1] if self.calls else None

    def bind(
        self,
        buffers: Sequence[Any],
        vals: Sequence[int] = (),
        global_size: Optional[Sequence[int]] = None,
        local_size: Any = None,
        core_id_index: Optional[int] = None,
        threads: Any = None,
    ) -> RecordingLaunch:
        return RecordingLaunch(self, buffers, vals, global_size, core_id_index)

    def execute(
        self,
        buffers: Sequence[Any],
        vals: Sequence[int] = (),
        global_size: Optional[Sequence[int]] = None,
        core_id_index: Optional[int] = None,
    ) -> None:
        with self._lock:
            self.calls.append((list(vals), None if global_size is None else tuple(global_size), core_id_index))
            if self.log is not None:
                self.log.append(self.name)
        if self.tracker is not None:
            self.tracker.enter()
        try:
            if self.sleep:
                time.sleep(self.sleep)
            if self.action is not None:
                self.action(buffers, list(vals))
        finally:
            if self.tracker is not None:
                self.tracker.leave()


class ActiveTracker:
    """How many mock calls were running at once, at most."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.max_active = 0

    def enter(self) -> None:
        with self._lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def leave(self) -> None:
        with self._lock:
            self.active -= 1


def copy_action(nbytes: Optional[int] = None) -> Callable[[Sequence[Any], List[int]], None]:
    """``buffers[0] <- buffers[1]`` (``nbytes``, default all of buffers[0])."""

    def act(buffers: Sequence[Any], vals: List[int]) -> None:
        dst, src = buffers[0], buffers[1]
        ctypes.memmove(dst.address, src.address, dst.nbytes if nbytes is None else nbytes)

    return act


def mock_kernel(
    program: Any,
    *,
    var_names: Sequence[str] = (),
    nbufs: int = 1,
    outs: Sequence[int] = (0,),
    host_parallel_safe: bool = False,
    global_size: Sequence[Any] = (1, 1, 1),
    entry_point: str = "k",
) -> CachedKernel:
    if isinstance(program, RecordingProgram):
        program.buf_count, program.var_names = nbufs, tuple(var_names)
    return CachedKernel(
        program=program,
        device="CPU",
        code="",
        entry_point=entry_point,
        var_names=list(var_names),
        globals=list(range(nbufs)),
        outs=list(outs),
        ins=[i for i in range(nbufs) if i not in outs],
        host_parallel_safe=host_parallel_safe,
        global_size=tuple(global_size),
    )


def prepared(
    op_id: int,
    kernel: CachedKernel,
    buffer_indices: Sequence[int],
    *,
    output_indices: Sequence[int] = (0,),
    vals: Sequence[int] = (),
    deps: Sequence[int] = (),
    fixedvars: Optional[Dict[str, int]] = None,
    runtime_vars: Sequence[RuntimeVar] = (),
    extents: Optional[Dict[int, Any]] = None,
) -> PreparedKernel:
    return PreparedKernel(
        id=op_id,
        kernel=kernel,
        buffer_indices=list(buffer_indices),
        output_indices=list(output_indices),
        vals=list(vals),
        fixedvars=dict(fixedvars or {}),
        dependencies=list(deps),
        runtime_vars=list(runtime_vars),
        extents=dict(extents or {}),
    )


def copy_op(op_id: int, dst: int, src: int, deps: Sequence[int] = ()) -> PreparedCopy:
    return PreparedCopy(id=op_id, buffer_indices=[dst, src], dependencies=list(deps))


def f32(dev: CpuDevice, values: Sequence[float]) -> CpuBuffer:
    buf = dev.allocate([len(values)], "float32")
    buf.copyin(list(values))
    return buf


def i32(dev: CpuDevice, values: Sequence[int]) -> CpuBuffer:
    buf = dev.allocate([len(values)], "int32")
    buf.copyin(list(values))
    return buf


def custom_op(op_id: int, kind: str, buffers: List[int], **kw: Any) -> PreparedCustomFunction:
    return PreparedCustomFunction(id=op_id, kind=kind, buffer_indices=buffers, **kw)


def var_plan(
    dev: CpuDevice,
    prog: Any,
    *,
    var: str = "N",
    lo: int = 1,
    hi: int = 8,
    val: int = 1,
    global_size: Any = (1, 1, 1),
    fixed: Any = None,
) -> ExecutionPlan:
    """One mock kernel taking variable ``var`` (bounds [lo, hi], value ``val``) and writing a 4-float buffer."""
    b = ExecutionPlanBuilder(dev)
    dst = b.add_buffer(8500, f32(dev, [0.0] * 4))
    b.add_kernel(
        prepared(
            8500,
            mock_kernel(prog, var_names=[var], global_size=global_size),
            [dst],
            vals=[val],
            fixedvars=fixed,
            runtime_vars=[RuntimeVar(var, lo, hi)],
        )
    )
    b.set_output_buffer(dst)
    return b.build()


def run_threads(targets: List[Any]) -> List[BaseException]:
    """Run each target on its own thread and join them all; returns what they raised."""
    errors: List[BaseException] = []

    def wrap(fn: Any) -> Any:
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # noqa: B902 - reported by the test
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    return errors
