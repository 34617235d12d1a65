"""Pre-compiled execution plans: ops run in dependency order, again and again.

A plan owns its buffers and prepared ops (kernels, copies, views, custom
functions, :mod:`svod_min.plan.ops`). :class:`ExecutionPlanBuilder` validates
everything once (:mod:`svod_min.plan.builder`) and computes deterministic Kahn
levels. Each level is split into groups of ops whose byte ranges on the
underlying storage do not conflict; groups run in order, and the ops of a group
overlap on the device's host pool (:mod:`svod_min.plan.schedule` binds and
packs them into graph or native segments).

Variables are checked against their bounds before anything is dispatched; a
failure part-way poisons the plan, which then refuses to run.
"""

from __future__ import annotations

import contextlib
import numbers
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from ..config import env_flag
from ..devices.base import RELEASE_EPOCH
from ..devices.transfer import copy_buffer, copy_storage, host_views, storage_size, write_back
from ..error import BufferAllocationError, ExecutionError, PlanError, PlanPoisonedError, SvodError, VariableBoundsError
from ..expr import compile_expr
from ..cache.kernel_cache import CachedKernel
from .native_replay import NativeEntry
from ..ordering import kahn_levels
from .grain import GrainSplit
from .builder import INT32_MAX, INT32_MIN, PlanBuilder, PlanParts
from .ops import PreparedBufferView, PreparedCopy, PreparedCustomFunction, PreparedKernel, PreparedOp, RuntimeVar, copy_op, custom_function_kinds, register_custom_function, run_custom_function, runtime_vars_of
from .schedule import PARALLEL_MIN_FLOPS, PlanSchedule
from ..profiler import KernelProfile

_REENTERED = "plan is already running on this thread (called again from one of its own ops)"


class ExecutionPlanBuilder(PlanBuilder):
    """Collects buffers and ops, then :meth:`build` validates them into a plan."""

    def build(self) -> "ExecutionPlan":
        """Validate everything and return the plan; raises PlanError naming the problem."""
        return ExecutionPlan.from_parts(self.validated())


class ExecutionPlan(PlanSchedule):
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
        self._launches: List[Any] = []  # per op: its bound Launch (kernels) or None
        self._calls: List[Optional[Callable[[], None]]] = []  # per op: the launch's __call__, or None
        self._groups: List[List[List[int]]] = []
        self._threaded: List[bool] = []
        self._tiny: List[bool] = []  # declared work too small to be worth a pool hand-off
        self._grain = GrainSplit(0)  # measured: ops cheaper than a pool hand-off (set up per binding)
        # native replay: how the runner calls each kernel op, and the schedule as segments
        # (a bound table or graph replaying many ops, or a Python group of op indices)
        self._native_entries: Dict[int, NativeEntry] = {}
        self._segments: Optional[List[Any]] = None
        self._segment_kind: Optional[str] = None  # "native" (C runner tables) or "graph" (device graphs)
        self.native = env_flag("SVOD_NATIVE_REPLAY", True)  # the Python path is the reference
        self.graphs = env_flag("SVOD_CUDA_GRAPHS", True)  # eager launches are the reference
        self._var_values: Dict[str, int] = {}
        self._programs: List[Tuple[str, Any]] = []  # (kernel name, program): checked for close() before runs
        self._release_seen = 0  # RELEASE_EPOCH's value when the programs were last checked

    @classmethod
    def from_parts(cls, parts: PlanParts) -> "ExecutionPlan":
        """A prepared plan from a builder's validated parts."""
        plan = cls(
            device=parts.device, buffers=parts.buffers, ast_to_buffer=parts.ast_to_buffer, outputs=parts.outputs,
            ops=parts.ops, order=parts.order, levels=parts.levels, inputs=parts.inputs,
        )
        plan._var_values = dict(parts.var_values)
        plan._prepare()
        return plan

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
            _run_custom_on_host(op, [self._buffers[i] for i in op.buffer_indices], self._custom_vars(op))
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
                return self._poisoning(body)
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
        if self._segments is not None:
            for segment in self._segments:
                if type(segment) is list:
                    self._run_group(segment)
                else:
                    segment()
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
            env = self._env(op)
            flops, moved = _work(op.flops, env), _work(op.bytes_moved, env)
        elif isinstance(op, PreparedCopy):
            name, kind, moved = "copy", "copy", 2 * self._buffers[op.buffer_indices[1]].nbytes
        elif isinstance(op, PreparedBufferView):
            name, kind = "view", "view"
        else:
            name, kind = "custom:%s" % op.kind, "custom"
        return KernelProfile(
            name=name, device=str(self._device.spec), num_buffers=len(op.buffer_indices),
            elapsed=elapsed, wall=wall, start_ns=start, end_ns=end, flops=flops, bytes_moved=moved,
            op_index=index, kind=kind,
        )

    # -- variables ----------------------------------------------------------------------------

    def runtime_vars(self) -> Dict[str, RuntimeVar]:
        """Every variable the caller may set, by name (bounds intersected across ops)."""
        out: Dict[str, RuntimeVar] = {}
        for op in self._ops:
            for var in runtime_vars_of(op):
                prev = out.get(var.name)
                if prev is not None:
                    var = RuntimeVar(var.name, max(prev.min_val, var.min_val), min(prev.max_val, var.max_val))
                out[var.name] = var
        return out

    def _check_vars(self, var_vals: Mapping[str, int]) -> Dict[str, int]:
        if not isinstance(var_vals, Mapping):
            raise PlanError("variables must be a mapping of names to ints, got %s" % type(var_vals).__name__)
        known = self.runtime_vars()
        checked = {}
        for name, value in var_vals.items():
            if name == "core_id":
                continue  # internal: set per invocation by the dispatcher
            var = known.get(name)
            if var is None:
                raise PlanError("unknown variable %r (plan variables: %s)" % (name, sorted(known)))
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise VariableBoundsError("variable %s=%r must be an int" % (name, value))
            value = int(value)  # numpy integers are welcome; the kernels get plain ints
            if not var.min_val <= value <= var.max_val:
                raise VariableBoundsError(
                    "variable %s=%d is outside bounds [%d, %d]" % (name, value, var.min_val, var.max_val)
                )
            checked[name] = value
        return checked

    def _apply_vars(self, values: Mapping[str, int]) -> None:
        """Patch vals (not fixed vars, not core_id), then re-validate and re-bind. Dispatches nothing."""
        env = dict(self._var_values)
        env.update(values)
        staged = []
        for index, op in enumerate(self._ops):
            if not isinstance(op, PreparedKernel):
                continue
            new_vals = [self._new_val(op, n, v, values, env) for n, v in zip(op.kernel.var_names, op.vals)]
            if new_vals != op.vals:
                staged.append((index, op, new_vals))
        old = [(op, op.vals) for _, op, _ in staged]
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
            if staged and self._segment_kind != "graph":
                self._build_segments()  # the tables hold the old values: repack (graph nodes were patched)
        self._var_values = env

    @staticmethod
    def _new_val(op: PreparedKernel, name: str, old: int, values: Mapping[str, int], env: Mapping[str, int]) -> int:
        if name in op.var_exprs:
            value = compile_expr(op.var_exprs[name])(env)
            if not INT32_MIN <= value <= INT32_MAX:
                raise VariableBoundsError("kernel %s: %s = %s = %d does not fit int32" % (op.kernel.entry_point, name, op.var_exprs[name], value))
            return value
        if name in values and name not in op.fixedvars and name != "core_id":
            return values[name]
        return old

    def execute_with_vars(self, var_vals: Mapping[str, int]) -> None:
        """Set variables (all checked before any dispatch), then execute.

        Both happen under one hold of the plan lock, so a concurrent caller
        can never run the plan with this call's values or vice versa.
        """
        self._guarded(self._run_levels, prepare=lambda: self._apply_vars(self._check_vars(var_vals)))

    def execute_with_vars_profiled(self, var_vals: Mapping[str, int]) -> List[KernelProfile]:
        return self._guarded(self._run_profiled, prepare=lambda: self._apply_vars(self._check_vars(var_vals)))

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

    def copy_output_region_to_buffer(self, position: int, dst: Any, dst_offset: int, src_offset: int, nbytes: int) -> None:
        """Copy ``nbytes`` of output ``position`` (from ``src_offset``) into ``dst`` at ``dst_offset``."""
        src = self.output_buffer_at(position)
        if src is None:
            raise PlanError("output position %d out of range (%d outputs)" % (position, self.num_outputs))
        for what, off, buf in (("source", src_offset, src), ("destination", dst_offset, dst)):
            if off < 0 or nbytes < 0 or off + nbytes > buf.nbytes:
                raise BufferAllocationError("%s region [%d, +%d) is outside its %d-byte buffer" % (what, off, nbytes, buf.nbytes))
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
            self._segments, self._segment_kind = None, None
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
        return "<ExecutionPlan %d ops, %d levels, %d buffers, %s>" % (len(self._ops), len(self.op_levels), len(self._buffers), state)


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
    "ExecutionPlan", "ExecutionPlanBuilder", "PARALLEL_MIN_FLOPS", "PreparedBufferView", "PreparedCopy",
    "PreparedCustomFunction", "PreparedKernel", "PreparedOp", "RuntimeVar", "copy_buffer", "kahn_levels",
    "custom_function_kinds", "register_custom_function", "run_custom_function",
]  # fmt: skip
