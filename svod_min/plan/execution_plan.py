"""Pre-compiled execution plans: ops run in dependency order, again and again.

A plan owns its buffers and prepared ops (kernels, copies, views, custom
functions, :mod:`svod_min.plan.ops`). :class:`ExecutionPlanBuilder` collects
them and validates everything once (:mod:`svod_min.plan.validation`), then
computes deterministic Kahn levels. The plan binds each kernel to its device
(:mod:`svod_min.plan.binding`) and splits each level into groups of ops whose
byte ranges on the underlying storage do not conflict
(:mod:`svod_min.plan.schedule`); groups run in order, and the ops of a group
overlap on the device's host pool. Runs of kernel groups replay as one call:
device graphs on a GPU, native runner tables on the CPU
(:mod:`svod_min.plan.native_replay`).

Variables are checked against their bounds before anything is dispatched; a
failure part-way poisons the plan, which then refuses to run.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ..cache.kernel_cache import CachedKernel
from ..config import env_flag
from ..devices.base import RELEASE_EPOCH
from ..devices.transfer import copy_buffer, copy_storage, host_views, storage_size, write_back
from ..error import BufferAllocationError, ExecutionError, PlanError, PlanPoisonedError, SvodError
from ..expr import compile_expr
from ..ordering import kahn_levels
from .binding import PARALLEL_MIN_FLOPS, NoWork, bind_kernel, op_env
from .grain import GrainSplit
from .native_replay import NativeEntry, pack_segments
from .ops import (
    PreparedBufferView,
    PreparedCopy,
    PreparedCustomFunction,
    PreparedKernel,
    PreparedOp,
    RuntimeVar,
    copy_op,
    custom_function_kinds,
    register_custom_function,
    run_custom_function,
)
from .schedule import graph_segments, hazard_groups, kernel_programs
from .validation import check_buffer, check_op, check_outputs, resolve_dependencies
from .variables import check_var_values, custom_vars, kernel_vals, plan_runtime_vars

if TYPE_CHECKING:
    from ..profiler import KernelProfile

_REENTERED = "plan is already running on this thread (called again from one of its own ops)"


@dataclass
class PlanParts:
    """A validated plan's pieces, in the order the plan runs them."""

    device: Any
    buffers: List[Any]
    ast_to_buffer: Dict[int, int]
    outputs: List[int]
    ops: List[PreparedOp]
    order: List[int]
    levels: List[List[int]]
    inputs: List[int]
    var_values: Dict[str, int]


class ExecutionPlanBuilder:
    """Collects buffers and ops, then :meth:`build` validates them into a plan."""

    def __init__(self, device: Any) -> None:
        self.device = device
        self._buffers: List[Any] = []
        self._ast_to_buffer: Dict[int, int] = {}
        self._outputs: Optional[List[int]] = None
        self._ops: List[PreparedOp] = []
        self._instance_deps: Dict[int, List[int]] = {}
        self._inputs: List[int] = []
        self._var_values: Dict[str, int] = {}

    def set_var_values(self, values: Mapping[str, int]) -> None:
        """Current values of the plan variables (needed by ops with ``var_exprs``)."""
        self._var_values = dict(values)

    def add_buffer(self, ast_id: int, buffer: Any) -> int:
        """Add a buffer; returns its index. ``ast_id`` names it for :meth:`ExecutionPlan.buffer`."""
        check_buffer(ast_id, buffer)
        self._buffers.append(buffer)
        index = len(self._buffers) - 1
        self._ast_to_buffer[ast_id] = index
        return index

    def map_buffer(self, ast_id: int, index: int) -> None:
        """Make ``ast_id`` another name for the buffer at ``index``."""
        if not 0 <= index < len(self._buffers):
            raise PlanError("map_buffer: buffer index out of range: %d (%d buffers)" % (index, len(self._buffers)))
        self._ast_to_buffer[ast_id] = index

    def set_output_buffer(self, index: int) -> None:
        self.set_output_buffers([index])

    def set_output_buffers(self, indices: Sequence[int]) -> None:
        self._outputs = list(indices)

    def declare_input(self, index: int) -> None:
        """Mark a buffer as a per-replica input (snapshotted by ``replicate``)."""
        self._inputs.append(index)

    def add_kernel(self, kernel: PreparedKernel) -> int:
        return self.add_op(kernel)

    def add_op(self, op: PreparedOp) -> int:
        """Append an op; returns its index."""
        self._ops.append(op)
        return len(self._ops) - 1

    def add_op_with_instance_dependencies(self, op: PreparedOp, dependencies: Sequence[int]) -> int:
        """Append an op that also depends on the ops at these indices."""
        index = len(self._ops)
        if not isinstance(dependencies, (list, tuple)) or not all(type(d) is int for d in dependencies):
            raise PlanError(
                "op %d: instance dependencies must be a list of op indices (ints), got %r" % (index, dependencies)
            )
        self._instance_deps[self.add_op(op)] = list(dependencies)
        return index

    @property
    def op_count(self) -> int:
        return len(self._ops)

    def validated(self) -> PlanParts:
        """Validate everything (:mod:`svod_min.plan.validation`); raises PlanError naming the problem."""
        outputs = check_outputs(self._outputs, self._buffers, self._ops)
        for index, op in enumerate(self._ops):
            check_op(index, op, self._buffers, self._var_values)
        preds = resolve_dependencies(self._ops, self._instance_deps)
        order, levels = kahn_levels(preds, [op.id for op in self._ops])
        return PlanParts(
            device=self.device,
            buffers=list(self._buffers),
            ast_to_buffer=dict(self._ast_to_buffer),
            outputs=outputs,
            ops=list(self._ops),
            order=order,
            levels=levels,
            inputs=list(self._inputs),
            var_values=dict(self._var_values),
        )

    def build(self) -> "ExecutionPlan":
        """Validate everything and return the plan; raises PlanError naming the problem."""
        return ExecutionPlan.from_parts(self.validated())


class ExecutionPlan:
    """A validated, repeatedly executable list of ops (see module docstring)."""

    def __init__(
        self,
        *,
        device: Any,
        buffers: List[Any],
        ast_to_buffer: Dict[int, int],
        outputs: List[int],
        ops: List[PreparedOp],
        order: List[int],
        levels: List[List[int]],
        inputs: Sequence[int] = (),
    ) -> None:
        self._device = device
        self._buffers = buffers
        self._ast_to_buffer = ast_to_buffer
        self._outputs = outputs
        self._ops = ops
        self.op_order = order
        self.op_levels = levels
        self._inputs = list(inputs)
        self._lock = threading.Lock()
        self._owner: Optional[int] = None  # thread holding _lock (re-entry would deadlock: refused)
        self._poisoned: Optional[str] = None
        self._released: Optional[str] = None  # which release_* call dropped the buffers
        # per op, set by _prepare() and _bind_kernel()
        self._launches: List[Any] = []  # its bound Launch (kernels) or None
        self._calls: List[Optional[Callable[[], None]]] = []  # the launch's __call__ (one lookup less per replayed op)
        self._threaded: List[bool] = []  # its core_id invocations are spread over the host pool
        self._tiny: List[bool] = []  # declared work too small to be worth a pool hand-off
        self._grain = GrainSplit(0)  # measured: ops cheaper than a pool hand-off
        self._groups: List[List[List[int]]] = []  # per level, groups of ops that may overlap
        # native replay: how the runner calls each kernel op, and the schedule as segments
        # (a bound table or graph replaying many ops, or a Python group of op indices)
        self._native_entries: Dict[int, NativeEntry] = {}
        self._segments: Optional[List[Any]] = None
        self._segment_kind: Optional[str] = None  # "native" (C runner tables) or "graph" (device graphs)
        self._lone: Optional[Callable[[], int]] = None  # the one native table that is the whole plan, if it is
        self.native = env_flag("SVOD_NATIVE_REPLAY", True)  # the Python path is the reference
        self.graphs = env_flag("SVOD_CUDA_GRAPHS", True)  # eager launches are the reference
        self._var_values: Dict[str, int] = {}
        self._programs: List[Tuple[str, Any]] = []  # (kernel name, program): checked for close() before runs
        #: Called after every run, under the plan lock: a plan file's run-time checks (planfile/status.py) read what
        #: the kernels reported and raise; they do not poison the plan.
        self.after_run: List[Callable[[], None]] = []
        self._release_seen = 0  # RELEASE_EPOCH's value when the programs were last checked

    @classmethod
    def from_parts(cls, parts: PlanParts) -> "ExecutionPlan":
        """A prepared plan from a builder's validated parts."""
        plan = cls(
            device=parts.device,
            buffers=parts.buffers,
            ast_to_buffer=parts.ast_to_buffer,
            outputs=parts.outputs,
            ops=parts.ops,
            order=parts.order,
            levels=parts.levels,
            inputs=parts.inputs,
        )
        plan._var_values = dict(parts.var_values)
        plan._prepare()
        return plan

    # -- binding -------------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Bind every kernel (launch sizes, extents), group each level by hazards, pack segments."""
        count = len(self._ops)
        self._launches, self._calls = [None] * count, [None] * count
        self._threaded, self._tiny = [False] * count, [False] * count
        self._grain = GrainSplit(count)  # timed over the first replays of these bindings
        for index, op in enumerate(self._ops):
            if isinstance(op, PreparedKernel):
                self._bind_kernel(index, op)
        self._programs = kernel_programs(self._ops)
        self._release_seen = RELEASE_EPOCH.value  # bind refused closed programs
        self._groups = hazard_groups(self.op_levels, self._ops, self._buffers)
        self._build_segments()

    def _bind_kernel(self, index: int, op: PreparedKernel) -> None:
        bound = bind_kernel(op, self._buffers, self._launches[index])
        self._launches[index], self._calls[index] = bound.launch, bound.launch.__call__
        self._threaded[index] = bound.threaded
        if bound.entry is None:
            self._native_entries.pop(index, None)
        else:
            self._native_entries[index], self._tiny[index] = bound.entry, bound.tiny

    def _build_segments(self) -> None:
        """Pack runs of kernel groups into one-call segments: device graphs on a GPU, C runner tables on the CPU."""
        self._segments, self._segment_kind = None, None
        groups = [group for level in self._groups for group in level]
        graph = self._device.graph
        if self.graphs and graph is not None and any(c is not None and c.graphable for c in self._launches):
            self._segments = graph_segments(graph, groups, self._ops, self._buffers, self._launches)
            self._segment_kind = "graph"
        elif self.native:
            self._segments = pack_segments(groups, self._native_entries, self._device.threads)
            self._segment_kind = None if self._segments is None else "native"
        segments = self._segments
        lone = self._segment_kind == "native" and segments is not None and len(segments) == 1
        # a plan of native kernels only: a replay is that one call (no groups, so no grain to measure)
        self._lone = segments[0] if lone and type(segments[0]) is not list else None  # type: ignore[index]

    @property
    def native_replay(self) -> bool:
        """True when execute() replays kernels through the native runner."""
        return self._segment_kind == "native"

    @property
    def graph_replay(self) -> bool:
        """True when execute() replays runs of GPU kernels as device graphs (one launch per run)."""
        return self._segment_kind == "graph"

    def set_graph_replay(self, enabled: bool) -> bool:
        """Switch between device-graph and eager launches on a GPU; returns whether graphs are now in use."""
        with self._held():
            self.graphs = bool(enabled)
            self._build_segments()
            return self.graph_replay

    def set_native_replay(self, enabled: bool) -> bool:
        """Switch between native and Python replay; returns whether native is now in use."""
        with self._held():
            self.native = bool(enabled)
            self._build_segments()
            return self.native_replay

    # -- running -----------------------------------------------------------------------------

    def _check_runnable(self) -> None:
        if self._poisoned is not None:
            raise PlanPoisonedError("plan is poisoned by an earlier failure (%s); build a new plan" % self._poisoned)
        if self._released is not None:
            raise ExecutionError("plan's buffers were released (%s); it cannot run again" % self._released)
        if RELEASE_EPOCH.value != self._release_seen:  # something was closed or released since
            self._check_programs()
            self._release_seen = RELEASE_EPOCH.value

    def _check_programs(self) -> None:
        """Refuse a kernel whose program was closed after build, before anything runs (both replay paths).

        O(programs): :meth:`_check_runnable` calls it only when the process-wide release epoch moved.
        """
        for name, program in self._programs:
            if program.closed:
                raise ExecutionError("kernel %s: its program was closed; build a new plan" % name)

    def _run_op(self, index: int) -> None:
        op = self._ops[index]
        call = self._calls[index]
        if call is not None:
            call()
        elif isinstance(op, PreparedCopy):
            dst, src = (self._buffers[i] for i in op.buffer_indices)
            copy_buffer(dst, src)
        elif isinstance(op, PreparedCustomFunction):
            _run_custom_on_host(op, [self._buffers[i] for i in op.buffer_indices], custom_vars(op, self._var_values))
        # views were validated at build time: nothing to do

    def _run_group(self, group: List[int]) -> None:
        if len(group) == 1 or any(self._threaded[i] for i in group) or all(self._tiny[i] for i in group):
            for index in group:
                self._run_op(index)
            return
        pool = self._pool()
        if pool is None:
            for index in group:
                self._run_op(index)
            return
        split = self._grain  # the first replays time each op; then ops below the pool's grain stay on this
        measuring = split.measuring  # thread, a wake-up costing more than they do (svod_min.plan.grain)
        run = self._run_timed if measuring else self._run_op
        handed = group[1:] if measuring else [i for i in group if not (split.inline[i] or self._tiny[i])][1:]
        futures = [pool.submit(run, index) for index in handed]
        errors = []
        try:
            skip = set(handed)
            for index in group:
                if index not in skip:
                    run(index)
        except BaseException as exc:  # noqa: B902 - re-raised below after the others finish
            errors.append(exc)
        for fut in futures:
            try:
                fut.result()
            except BaseException as exc:  # noqa: B902
                errors.append(exc)
        if errors:
            raise errors[0]

    def _run_timed(self, index: int) -> None:
        start = time.perf_counter_ns()
        self._run_op(index)
        self._grain.record(index, time.perf_counter_ns() - start)

    def _pool(self) -> Any:
        return self._device.host_pool()

    def _guarded(self, body: Callable[[], Any], prepare: Optional[Callable[[], None]] = None) -> Any:
        """Run ``body`` holding the plan lock; a failure in it poisons the plan.

        ``prepare`` runs first under the same lock hold (so another thread cannot
        slip in between); its errors (bad variables) do not poison.
        """
        me = threading.get_ident()  # _held() inlined: this is every replay's fixed cost
        if self._owner == me:
            raise ExecutionError(_REENTERED)
        with self._lock:
            self._owner = me
            try:
                self._check_runnable()
                if prepare is not None:
                    prepare()
                result = self._poisoning(body)
                for check in self.after_run:  # what the kernels reported (bad data: not a plan failure)
                    check()
                return result
            finally:
                self._owner = None

    def _poisoning(self, body: Callable[[], Any]) -> Any:
        try:
            return body()
        except SvodError as exc:
            self._poisoned = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
            raise
        except Exception as exc:
            self._poisoned = "%s: %s" % (type(exc).__name__, exc)
            raise ExecutionError("plan execution failed: %s: %s" % (type(exc).__name__, exc)) from exc
        except BaseException as exc:  # KeyboardInterrupt mid-run: buffers are half-updated
            self._poisoned = "interrupted by %s" % type(exc).__name__
            raise

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        """The plan lock; re-entering from the holding thread (a custom function running its own plan) is refused."""
        me = threading.get_ident()
        if self._owner == me:
            raise ExecutionError(_REENTERED)
        with self._lock:
            self._owner = me
            try:
                yield
            finally:
                self._owner = None

    def execute(self) -> None:
        """Run every op once, level by level."""
        self._guarded(self._run_levels)

    def _run_levels(self) -> None:
        lone = self._lone
        if lone is not None:
            if lone() == -1:
                raise ExecutionError("the native runner refused a malformed kernel table; nothing of it ran")
            return
        if self._segments is not None:
            for segment in self._segments:
                if type(segment) is list:
                    self._run_group(segment)
                elif segment() == -1:  # the native runner refused its table (a device graph returns None)
                    raise ExecutionError("the native runner refused a malformed kernel table; nothing of it ran")
        else:
            for groups in self._groups:
                for group in groups:
                    self._run_group(group)
        if self._grain.measuring:
            self._grain.replay_done(self._pool())

    def execute_profiled(self) -> List[KernelProfile]:
        """Run every op once, serially, timing each; returns a profile per op in execution order."""
        return self._guarded(self._run_profiled)

    def _run_profiled(self) -> List[KernelProfile]:
        """Timed launches report device time (GPU events); other ops are synchronized so wall time is real."""
        profiles = []
        self.synchronize()
        for index in self.op_order:
            launch = self._launches[index]
            timed = None if launch is None else launch.timed
            start = time.perf_counter_ns()
            if timed is not None:
                device_seconds: Optional[float] = timed()
            else:
                device_seconds = None
                self._run_op(index)
                self.synchronize()
            end = time.perf_counter_ns()
            profiles.append(self._profile(index, start, end, device_seconds))
        return profiles

    def synchronize(self) -> None:
        """Wait until the device finished everything queued (GPU plans return before their kernels finish)."""
        self._device.synchronize()

    def _profile(self, index: int, start: int, end: int, device_seconds: Optional[float] = None) -> KernelProfile:
        op = self._ops[index]
        wall = (end - start) / 1e9
        elapsed = wall if device_seconds is None else device_seconds
        name, kind, flops, moved = "op%d" % op.id, "kernel", None, None
        if isinstance(op, PreparedKernel):
            name = op.kernel.entry_point
            env = op_env(op)
            flops, moved = _work(op.flops, env), _work(op.bytes_moved, env)
        elif isinstance(op, PreparedCopy):
            name, kind, moved = "copy", "copy", 2 * self._buffers[op.buffer_indices[1]].nbytes
        elif isinstance(op, PreparedBufferView):
            name, kind = "view", "view"
        else:
            name, kind = "custom:%s" % op.kind, "custom"
        from ..profiler import KernelProfile  # here: a plan that is never profiled does not import it

        return KernelProfile(
            name=name,
            device=str(self._device.spec),
            num_buffers=len(op.buffer_indices),
            elapsed=elapsed,
            wall=wall,
            start_ns=start,
            end_ns=end,
            flops=flops,
            bytes_moved=moved,
            op_index=index,
            kind=kind,
        )

    # -- variables ----------------------------------------------------------------------------

    def runtime_vars(self) -> Dict[str, RuntimeVar]:
        """Every variable the caller may set, by name (bounds intersected across ops)."""
        return plan_runtime_vars(self._ops)

    def current_var_values(self) -> Dict[str, int]:
        """The plan variables' values of the latest run (the builder's before the first): a copy."""
        return dict(self._var_values)

    def _apply_vars(self, values: Mapping[str, int]) -> None:
        """Patch vals (not fixed vars, not core_id), then re-validate and re-bind. Dispatches nothing."""
        env = dict(self._var_values)
        env.update(values)
        staged = []
        for index, op in enumerate(self._ops):
            if not isinstance(op, PreparedKernel):
                continue
            new_vals = kernel_vals(op, values, env)
            if new_vals != op.vals:
                staged.append((index, op, new_vals))
        old = [(op, op.vals) for _, op, _ in staged]
        idle = [isinstance(self._launches[index], NoWork) for index, _, _ in staged]
        try:
            for index, op, new_vals in staged:
                op.vals = new_vals
                self._bind_kernel(index, op)  # evaluates launch sizes and extents
        except BaseException:
            for op, vals in old:  # a rejected value leaves the plan as it was
                op.vals = vals
            for index, op, _ in staged:
                self._bind_kernel(index, op)
            raise
        finally:
            # the tables hold the old values: repack; graph nodes were patched, unless a kernel's work became none or
            # some (its node comes or goes)
            flipped = [isinstance(self._launches[index], NoWork) for index, _, _ in staged] != idle
            if staged and (self._segment_kind != "graph" or flipped):
                self._build_segments()
        self._var_values = env

    def execute_with_vars(self, var_vals: Mapping[str, int]) -> None:
        """Set variables (all checked before any dispatch), then execute.

        Both happen under one hold of the plan lock, so a concurrent caller
        can never run the plan with this call's values or vice versa.
        """
        self._guarded(
            self._run_levels, prepare=lambda: self._apply_vars(check_var_values(self.runtime_vars(), var_vals))
        )

    def execute_with_vars_profiled(self, var_vals: Mapping[str, int]) -> List[KernelProfile]:
        return self._guarded(
            self._run_profiled, prepare=lambda: self._apply_vars(check_var_values(self.runtime_vars(), var_vals))
        )

    # -- buffers ---------------------------------------------------------------------------------

    def output_buffer(self) -> Optional[Any]:
        return self.output_buffer_at(0)

    def output_buffer_at(self, position: int) -> Optional[Any]:
        if 0 <= position < len(self._outputs):
            return self._buffers[self._outputs[position]]
        return None

    def output_buffers(self) -> List[Any]:
        return [self._buffers[i] for i in self._outputs]

    @property
    def num_outputs(self) -> int:
        return len(self._outputs)

    def output_buffer_idx(self) -> int:
        if not self._outputs:
            raise PlanError("plan has no output buffers")
        return self._outputs[0]

    def buffer(self, ast_id: int) -> Optional[Any]:
        index = self._ast_to_buffer.get(ast_id)
        return None if index is None else self._buffers[index]

    def buffers(self) -> List[Any]:
        return list(self._buffers)

    def buffer_at(self, index: int) -> Optional[Any]:
        return self._buffers[index] if 0 <= index < len(self._buffers) else None

    @property
    def ast_to_buffer_map(self) -> Dict[int, int]:
        return dict(self._ast_to_buffer)

    @property
    def device(self) -> Any:
        return self._device

    def prepared_ops(self) -> List[PreparedOp]:
        return list(self._ops)

    def prepared_kernels(self) -> List[PreparedKernel]:
        return [op for op in self._ops if isinstance(op, PreparedKernel)]

    def kernels(self) -> List[CachedKernel]:
        return [op.kernel for op in self.prepared_kernels()]

    @property
    def poisoned(self) -> bool:
        return self._poisoned is not None

    def copy_output_region_to_buffer(
        self, position: int, dst: Any, dst_offset: int, src_offset: int, nbytes: int
    ) -> None:
        """Copy ``nbytes`` of output ``position`` (from ``src_offset``) into ``dst`` at ``dst_offset``."""
        src = self.output_buffer_at(position)
        if src is None:
            raise PlanError("output position %d out of range (%d outputs)" % (position, self.num_outputs))
        for what, off, buf in (("source", src_offset, src), ("destination", dst_offset, dst)):
            if off < 0 or nbytes < 0 or off + nbytes > buf.nbytes:
                raise BufferAllocationError(
                    "%s region [%d, +%d) is outside its %d-byte buffer" % (what, off, nbytes, buf.nbytes)
                )
        if nbytes:
            copy_buffer(dst.view(dst_offset, nbytes, "uint8"), src.view(src_offset, nbytes, "uint8"))

    def release_intermediate_buffers(self, remove_fn: Optional[Callable[[int], None]] = None) -> None:
        """Drop every buffer that is neither an output nor a declared input; the plan cannot run after.

        ``remove_fn(ast_id)`` is called for each name of a dropped buffer (svod: remove it from
        the caller's buffer registry).
        """
        self._release("release_intermediate_buffers", set(self._outputs) | set(self._inputs), remove_fn)

    def release_all_buffers(self, remove_fn: Optional[Callable[[int], None]] = None) -> None:
        """Drop every buffer, outputs and inputs included (svod's ``release_all_buffers``).

        ``remove_fn(ast_id)`` is called for every buffer name; the plan cannot run after and
        its output accessors return None.
        """
        self._release("release_all_buffers", set(), remove_fn)

    def _release(self, how: str, keep: set, remove_fn: Optional[Callable[[int], None]]) -> None:
        with self._held():
            for ast_id, index in self._ast_to_buffer.items():
                if index not in keep and remove_fn is not None:
                    remove_fn(ast_id)
            self._buffers = [b if i in keep else None for i, b in enumerate(self._buffers)]
            self._launches, self._calls = [None] * len(self._ops), [None] * len(self._ops)
            self._native_entries.clear()
            self._segments, self._segment_kind, self._lone = None, None, None
            self._released = how

    def replicate(self) -> "ExecutionPlan":
        """A plan sharing kernels and read-only buffers (weights), with its own written buffers.

        Declared inputs are snapshotted; every other buffer an op writes is
        allocated fresh (zeroed); views are re-derived from the new storage.
        """
        with self._held():
            self._check_runnable()  # closed programs too
            written = self._written_buffers()
            mapping: Dict[int, Any] = {}
            new_storage: Dict[int, Any] = {}
            for index, buf in enumerate(self._buffers):
                mapping[index] = self._replicate_buffer(index, buf, written, new_storage)
            ops = [copy_op(op) for op in self._ops]
        plan = ExecutionPlan(
            device=self._device,
            buffers=[mapping[i] for i in range(len(self._buffers))],
            ast_to_buffer=dict(self._ast_to_buffer),
            outputs=list(self._outputs),
            ops=ops,
            order=list(self.op_order),
            levels=[list(level) for level in self.op_levels],
            inputs=list(self._inputs),
        )
        plan._var_values = dict(self._var_values)
        plan.native, plan.graphs = self.native, self.graphs
        plan._prepare()
        return plan

    def _written_buffers(self) -> set:
        storages = set()
        for op in self._ops:
            if isinstance(op, PreparedKernel):
                storages.update(id(self._buffers[op.buffer_indices[p]].storage) for p in op.output_indices)
            elif isinstance(op, PreparedCopy):
                storages.add(id(self._buffers[op.buffer_indices[0]].storage))
            elif isinstance(op, PreparedCustomFunction):
                storages.update(id(self._buffers[i].storage) for i in op.buffer_indices)
        storages.update(id(self._buffers[i].storage) for i in self._inputs)
        return storages

    def _replicate_buffer(self, index: int, buf: Any, written: set, new_storage: Dict[int, Any]) -> Any:
        key = id(buf.storage)
        if key not in written:
            return buf  # weights and other read-only data are shared
        base = new_storage.get(key)
        if base is None:
            total = storage_size(self._buffers, buf.storage)
            base = self._device.allocate(total)
            if any(i in self._inputs for i, b in enumerate(self._buffers) if b.storage is buf.storage):
                copy_storage(base, self._buffers, buf, total)
            new_storage[key] = base
        return base.view(buf.offset, buf.nbytes, dtype=buf.dtype, shape=buf.shape)

    def __repr__(self) -> str:
        state = "poisoned" if self.poisoned else "ready"
        return "<ExecutionPlan %d ops, %d levels, %d buffers, %s>" % (
            len(self._ops),
            len(self.op_levels),
            len(self._buffers),
            state,
        )


def _work(expr: Optional[Union[int, str]], env: Mapping[str, int]) -> Optional[int]:
    """A declared flops/bytes figure for a profile; None when it cannot be evaluated (never fails a run)."""
    if expr is None:
        return None
    try:
        return compile_expr(expr)(env)
    except PlanError:
        return None


def _run_custom_on_host(op: PreparedCustomFunction, bufs: List[Any], variables: Dict[str, int]) -> None:
    """Host functions see numpy views of host buffers; device buffers are staged and written back."""
    views = host_views(bufs)
    run_custom_function(op, views, variables)
    write_back(bufs, views)  # custom functions count as writing every buffer they get


__all__ = [  # the plan's public face: its own classes, plus the op and custom-function names of plan_ops
    "ExecutionPlan",
    "ExecutionPlanBuilder",
    "PARALLEL_MIN_FLOPS",
    "PreparedBufferView",
    "PreparedCopy",
    "PreparedCustomFunction",
    "PreparedKernel",
    "PreparedOp",
    "RuntimeVar",
    "copy_buffer",
    "kahn_levels",
    "custom_function_kinds",
    "register_custom_function",
    "run_custom_function",
]
