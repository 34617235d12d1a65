"""Pre-compiled execution plans: ops run in dependency order, again and again.

A plan owns its buffers and prepared ops (kernels, copies, views, custom
functions). :class:`ExecutionPlanBuilder` validates everything once —
indices, dependencies, cycles, views, launch sizes, buffer extents — and
computes deterministic Kahn levels. Each level is split into groups of ops
whose byte ranges on the underlying storage do not conflict; groups run in
order, and the ops of a group overlap on the device's thread pool.

Variables are checked against their bounds before anything is dispatched; a
failure part-way poisons the plan, which then refuses to run.
"""

from __future__ import annotations

import contextlib
import numbers
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from .error import (
    BufferAllocationError,
    DeviceError,
    ExecutionError,
    NotSupportedError,
    PlanError,
    PlanPoisonedError,
    SvodError,
    VariableBoundsError,
)
from .expr import compile_expr
from .ordering import Access, access_span, accesses_conflict, kahn_levels
from .kernel_cache import CachedKernel
from .profiler import KernelProfile

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
#: A core_id kernel declaring less work than this runs its invocations on one
#: thread: starting and joining threads costs more than it saves (~30 µs).
PARALLEL_MIN_FLOPS = 1_000_000


# --- prepared ops -------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeVar:
    """A variable the caller may change between runs, with inclusive bounds."""

    name: str
    min_val: int
    max_val: int


@dataclass
class PreparedKernel:
    """A compiled kernel bound to plan buffers (svod's ``PreparedKernel``).

    ``buffer_indices`` index plan buffers in kernel argument order;
    ``output_indices`` are positions within them that the kernel writes.
    ``vals`` follows ``kernel.var_names``. ``extents`` optionally maps a
    position to an element-count expression the buffer must hold;
    ``arg_check`` (library kernels) checks dtypes, variable bounds and
    overlap at every bind, so a variable change cannot break them either.
    """

    id: int
    kernel: CachedKernel
    buffer_indices: List[int]
    output_indices: List[int]
    vals: List[int] = field(default_factory=list)
    fixedvars: Dict[str, int] = field(default_factory=dict)
    dependencies: List[int] = field(default_factory=list)
    runtime_vars: List[RuntimeVar] = field(default_factory=list)
    extents: Dict[int, Union[int, str]] = field(default_factory=dict)
    flops: Optional[Union[int, str]] = None
    bytes_moved: Optional[Union[int, str]] = None
    # kernel variable -> expression over plan variables (e.g. {"n": "rows*128"})
    var_exprs: Dict[str, str] = field(default_factory=dict)
    # (env, buffers) -> None, raising when they break the kernel's contract: run at every (re)bind
    arg_check: Optional[Callable[[Mapping[str, int], Sequence[Any]], None]] = field(default=None, compare=False)

    @property
    def device(self) -> str:
        return self.kernel.device

    @property
    def input_indices(self) -> List[int]:
        outs = set(self.output_indices)
        return [i for i in range(len(self.buffer_indices)) if i not in outs]


@dataclass
class PreparedCopy:
    """``buffer_indices = [dst, src]``: copy all of src into dst (same size)."""

    id: int
    buffer_indices: List[int]
    dependencies: List[int] = field(default_factory=list)


@dataclass
class PreparedBufferView:
    """``buffer_indices = [out, base]``: out must be base's bytes [offset, offset+size)."""

    id: int
    buffer_indices: List[int]
    byte_offset: int
    byte_size: int
    dependencies: List[int] = field(default_factory=list)


@dataclass
class PreparedCustomFunction:
    """A registered Python callable run on the host with the op's buffers."""

    id: int
    kind: str
    buffer_indices: List[int]
    attrs: Dict[str, Any] = field(default_factory=dict)
    fixedvars: Dict[str, int] = field(default_factory=dict)
    dependencies: List[int] = field(default_factory=list)
    runtime_vars: List[RuntimeVar] = field(default_factory=list)


PreparedOp = Union[PreparedKernel, PreparedCopy, PreparedBufferView, PreparedCustomFunction]
_OP_TYPES = (PreparedKernel, PreparedCopy, PreparedBufferView, PreparedCustomFunction)

# --- custom functions ------------------------------------------------------------

CustomFn = Callable[[List[Any], Dict[str, int], Dict[str, Any]], None]
_custom_functions: Dict[str, CustomFn] = {}


def register_custom_function(kind: str, fn: CustomFn) -> None:
    """Register ``fn(buffers, vars, attrs)`` for custom ops of ``kind``.

    ``buffers`` are numpy views when numpy is installed, else the plan's buffers.
    ``vars`` holds the op's ``runtime_vars`` at their current plan values (from
    ``set_var_values`` / ``execute_with_vars``; one never set is absent), then
    its ``fixedvars``, which win, as they do for kernels.
    """
    _custom_functions[kind] = fn


def _host_allreduce(buffers: List[Any], vars: Dict[str, int], attrs: Dict[str, Any]) -> None:
    """Sum all buffers elementwise and write the sum back into each of them."""
    views = [_as_list(b) for b in buffers]
    if len({len(v) for v in views}) > 1:
        raise ExecutionError("allreduce needs buffers of equal length, got %s" % [len(v) for v in views])
    total = [sum(column) for column in zip(*views)]
    for buf in buffers:
        _store(buf, total)


def _as_list(buf: Any) -> list:
    return buf.ravel().tolist() if hasattr(buf, "ravel") else list(_flat(buf.tolist()))


def _flat(values: Any) -> Iterable[Any]:
    for v in values:
        if isinstance(v, list):
            yield from _flat(v)
        else:
            yield v


def _store(buf: Any, values: list) -> None:
    if hasattr(buf, "ravel"):
        buf.ravel()[:] = values
    else:
        buf.copyin(values)


register_custom_function("allreduce", _host_allreduce)


def run_custom_function(op: PreparedCustomFunction, buffers: List[Any], vars: Dict[str, int]) -> None:
    """Run a custom op (svod's ``run_custom_function``)."""
    fn = _custom_functions.get(op.kind)
    if fn is None:
        raise NotSupportedError("custom function %s is not supported (attrs=%d)" % (op.kind, len(op.attrs)))
    fn(buffers, vars, dict(op.attrs))


# --- ordering -----------------------------------------------------------------------


def _resolve_dependencies(ops: List[PreparedOp], instance_deps: Dict[int, List[int]]) -> List[List[int]]:
    """Predecessor op indices for every op.

    As in svod: when every op id is unique, an id dependency names that op
    wherever it sits (a dependency on a later-inserted op is fine, and two ops
    naming each other form a cycle). When ids repeat (expanded schedules), a
    dependency binds to the latest op *before* this one with that id.
    Instance dependencies are op indices.
    """
    ids = [op.id for op in ops]
    by_id: Optional[Dict[int, int]] = {i: n for n, i in enumerate(ids)} if len(set(ids)) == len(ids) else None
    preds: List[List[int]] = []
    latest: Dict[int, int] = {}
    for index, op in enumerate(ops):
        mine = set()
        for dep in op.dependencies:
            target = (by_id if by_id is not None else latest).get(dep)
            if target is None:
                why = "unknown op id"
                if dep in ids:
                    why = "is only defined later (ids repeat, so dependencies bind to earlier ops)"
                raise PlanError("op %d (id %d) depends on %s: %s" % (index, op.id, dep, why))
            mine.add(target)
        for dep_index in instance_deps.get(index, ()):
            if not 0 <= dep_index < len(ops):
                raise PlanError("op %d depends on unknown op index %d (%d ops)" % (index, dep_index, len(ops)))
            if dep_index == index:
                raise PlanError("op %d depends on itself" % index)
            mine.add(dep_index)
        preds.append(sorted(mine))
        latest[op.id] = index
    return preds


def _group_level(level: List[int], accesses: List[List[Access]], barrier: List[bool]) -> List[List[int]]:
    """Split a level into conflict-free groups, keeping insertion order between conflicts."""
    groups: List[List[int]] = []
    for index in level:
        if barrier[index]:
            groups.append([index])
            continue
        # An op may join the last group only if no later group blocks it: keep order.
        target = None
        for g in reversed(groups):
            if barrier[g[0]] or any(accesses_conflict(accesses[index], accesses[j]) for j in g):
                break
            target = g
        if target is None:
            groups.append([index])
        else:
            target.append(index)
    return groups


# --- the builder ------------------------------------------------------------------------------


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
        _check_buffer(ast_id, buffer)
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
            raise PlanError("op %d: instance dependencies must be a list of op indices (ints), got %r" % (index, dependencies))
        self._instance_deps[self.add_op(op)] = list(dependencies)
        return index

    @property
    def op_count(self) -> int:
        return len(self._ops)

    def build(self) -> "ExecutionPlan":
        """Validate everything and return the plan; raises PlanError naming the problem."""
        outputs = self._check_outputs()
        for index, op in enumerate(self._ops):
            self._check_op(index, op)
        preds = _resolve_dependencies(self._ops, self._instance_deps)
        order, levels = kahn_levels(preds, [op.id for op in self._ops])
        plan = ExecutionPlan(
            device=self.device,
            buffers=list(self._buffers),
            ast_to_buffer=dict(self._ast_to_buffer),
            outputs=outputs,
            ops=list(self._ops),
            order=order,
            levels=levels,
            inputs=list(self._inputs),
        )
        plan._var_values = dict(self._var_values)
        plan._prepare()
        return plan

    def _check_outputs(self) -> List[int]:
        if self._outputs is None:
            if self._ops or self._buffers:
                raise PlanError("output buffers must be set explicitly (set_output_buffer/set_output_buffers)")
            return []
        for idx in self._outputs:
            self._check_index(idx, "output buffer")
        return list(self._outputs)

    def _check_index(self, idx: int, what: str) -> None:
        if type(idx) is not int or not 0 <= idx < len(self._buffers):  # True is not buffer 1
            raise PlanError("%s: buffer index out of range: %r (%d buffers)" % (what, idx, len(self._buffers)))

    def _check_op(self, index: int, op: PreparedOp) -> None:
        if not isinstance(op, _OP_TYPES):
            raise PlanError("op %d: unknown op type %s" % (index, type(op).__name__))
        where = "op %d (id %r)" % (index, op.id)
        if type(op.id) is not int or not isinstance(op.buffer_indices, (list, tuple)):
            raise PlanError("%s: id must be an int and buffer_indices a list" % where)
        _check_fields(where, op)
        for idx in op.buffer_indices:
            self._check_index(idx, where)
        if isinstance(op, PreparedKernel):
            self._check_kernel_op(where, op)
        if isinstance(op, PreparedCopy):
            if len(op.buffer_indices) != 2:
                raise PlanError("%s: copy requires two buffer indices [dst, src], got %d" % (where, len(op.buffer_indices)))
            dst, src = (self._buffers[i] for i in op.buffer_indices)
            if dst.nbytes != src.nbytes:
                raise PlanError("%s: copy size mismatch: dst %d bytes, src %d bytes" % (where, dst.nbytes, src.nbytes))
        if isinstance(op, PreparedBufferView):
            self._check_view(where, op)
        if isinstance(op, PreparedCustomFunction):
            if op.kind not in _custom_functions:
                raise NotSupportedError(
                    "%s: custom function %s is not supported (attrs=%d); registered: %s"
                    % (where, op.kind, len(op.attrs), sorted(_custom_functions))
                )

    def _check_kernel_op(self, where: str, op: PreparedKernel) -> None:
        if not isinstance(op.kernel, CachedKernel):
            raise PlanError("%s: kernel must be a CachedKernel, got %s" % (where, type(op.kernel).__name__))
        nbuf, names = len(op.buffer_indices), op.kernel.var_names
        if not op.output_indices:
            raise PlanError("%s: kernel %s has no output indices" % (where, op.kernel.entry_point))
        for what, positions in (("output index", op.output_indices), ("extent position", list(op.extents))):
            for pos in positions:
                if type(pos) is not int or not 0 <= pos < nbuf:
                    raise PlanError("%s: %s out of range: %r (%d buffers)" % (where, what, pos, nbuf))
        count = getattr(op.kernel.program, "buf_count", nbuf)
        if count != nbuf:
            raise PlanError("%s: kernel %s takes %d buffers, got %d" % (where, op.kernel.entry_point, count, nbuf))
        if len(op.vals) != len(names):
            raise PlanError("%s: %d values for variables %s" % (where, len(op.vals), names))
        takes = getattr(op.kernel.program, "var_names", names)
        if len(takes) != len(names):
            raise PlanError("%s: kernel %s takes variables %s, the op names %s" % (where, op.kernel.entry_point, list(takes), list(names)))
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in op.vals):
            raise PlanError("%s: vals must be ints, got %r" % (where, op.vals))
        for name, value in op.fixedvars.items():  # a declared fixed value must be the one that runs
            if name in names and op.vals[names.index(name)] != value:
                raise PlanError("%s: fixed variable %s=%r but vals gives %r" % (where, name, value, op.vals[names.index(name)]))
            if name in op.var_exprs:  # the expression would patch vals away from the fixed value
                raise PlanError("%s: variable %s is both fixed (%r) and bound to %r" % (where, name, value, op.var_exprs[name]))
        allowed = set(names) | set(op.fixedvars)
        for what, expr in (("flops", op.flops), ("bytes_moved", op.bytes_moved)):
            unknown = sorted(compile_expr(expr).names - allowed) if expr is not None else []
            if unknown:
                raise PlanError("%s: %s expression %r uses %s, not kernel variables %s" % (where, what, expr, unknown, list(names)))
        self._apply_var_exprs(where, op)

    def _apply_var_exprs(self, where: str, op: PreparedKernel) -> None:
        """Kernel variables bound to expressions start from the plan variables' current values."""
        op.vals = list(op.vals)  # a tuple is accepted: the values are patched in place from here on
        for name, text in op.var_exprs.items():
            if name not in op.kernel.var_names:
                raise PlanError("%s: var_exprs names %r, not a variable of %s" % (where, name, op.kernel.entry_point))
            value = compile_expr(text)(self._var_values)  # unknown names: a PlanError naming them
            if not INT32_MIN <= value <= INT32_MAX:
                raise VariableBoundsError("%s: %s = %s = %d does not fit int32" % (where, name, text, value))
            op.vals[op.kernel.var_names.index(name)] = value

    def _check_view(self, where: str, op: PreparedBufferView) -> None:
        if len(op.buffer_indices) != 2:
            raise PlanError("%s: view requires two buffer indices [out, base]" % where)
        out, base = (self._buffers[i] for i in op.buffer_indices)
        if out.storage is not base.storage:
            raise PlanError("%s: view and base do not share storage" % where)
        if out.offset != base.offset + op.byte_offset or out.nbytes != op.byte_size:
            raise PlanError(
                "%s: view is bytes [%d, +%d) of the storage, op says [%d, +%d)"
                % (where, out.offset, out.nbytes, base.offset + op.byte_offset, op.byte_size)
            )
        if op.byte_offset < 0 or op.byte_offset + op.byte_size > base.nbytes:
            raise PlanError("%s: view [%d, +%d) is outside its %d-byte base" % (where, op.byte_offset, op.byte_size, base.nbytes))


# --- the plan ---------------------------------------------------------------------------------


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
        self._released = False
        self._calls: List[Optional[Callable[[], None]]] = []
        self._groups: List[List[List[int]]] = []
        self._threaded: List[bool] = []
        self._tiny: List[bool] = []  # declared work too small to be worth a pool hand-off
        # native replay: (fn address, args, ncalls, core_pos) per kernel op, and the
        # schedule as segments (a ReplayTable, or a Python group of op indices)
        self._native_entries: Dict[int, Tuple[int, List[int], int, int, int]] = {}
        self._segments: Optional[List[Any]] = None
        self._segment_kind: Optional[str] = None  # "native" (C runner tables) or "graph" (CUDA graphs)
        self._gpu_launches = False  # some kernel op is bound to a GPU launch (CUDA graphs apply)
        self.native = _native_default()
        self.graphs = _graphs_default()
        self._var_values: Dict[str, int] = {}
        self._programs: List[Tuple[str, Any]] = []  # (kernel name, program): checked for close() before runs
        self._closes: Optional[List[int]] = None  # devices.cpu.CLOSES when the plan holds CpuPrograms
        self._closes_seen = 0

    # -- preparation -------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Evaluate launch sizes, check extents, bind calls, compute hazard groups."""
        self._calls = [None] * len(self._ops)
        self._threaded = [False] * len(self._ops)
        self._tiny = [False] * len(self._ops)
        for index, op in enumerate(self._ops):
            if isinstance(op, PreparedKernel):
                self._bind_kernel(index, op)
        self._gpu_launches = any(_graphable(call) for call in self._calls)  # launch objects never change type
        self._programs = _programs(self._ops)
        self._closes = _close_counter(self._programs)
        self._closes_seen = self._closes[0] if self._closes is not None else 0  # bind refused closed ones
        accesses = [self._accesses(op) for op in self._ops]
        barrier = [self._is_barrier(op) for op in self._ops]
        self._groups = [_group_level(level, accesses, barrier) for level in self.op_levels]
        self._build_segments()

    def _build_segments(self) -> None:
        """Pack runs of kernel groups into one-call segments: CUDA graphs on a GPU, C runner tables on the CPU."""
        self._segments, self._segment_kind = None, None
        if self.graphs and self._gpu_launches:
            try:
                segments = self._graph_segments(copies=True)
            except DeviceError:  # a driver without memcpy nodes: copies stay on the Python path
                segments = self._graph_segments(copies=False)
            self._segments, self._segment_kind = segments, "graph"
            return
        if not self.native or not self._native_entries:
            return
        from . import native_replay

        if not native_replay.available():
            return
        segments: List[Any] = []
        table = None
        for groups in self._groups:
            for group in groups:
                if all(i in self._native_entries for i in group):
                    table = table or native_replay.ReplayTable()
                    for i in group:
                        table.add(*self._native_entries[i])
                    continue
                if table is not None:
                    segments.append(table)
                    table = None
                segments.append(group)
        if table is not None:
            segments.append(table)
        # Bind once: a replay is then one C call per table, no lookups.
        threads = native_replay.native_threads(getattr(self._device, "threads", 1))
        self._segments = [seg if isinstance(seg, list) else seg.bind(threads) for seg in segments]
        self._segment_kind = "native"

    def _graph_segments(self, copies: bool) -> List[Any]:
        """Runs of groups whose ops all have a graph node become one CUDA graph each (>= 2 nodes).

        Nodes are kernel launches, device copies (``copies``) and nothing for
        views. A node waits for every node of the previous non-empty group of
        its run: groups already order every conflicting pair, so that is all a
        graph needs. Custom functions end a run and stay on the Python path.
        """
        nodes = {i: self._graph_node(i, copies) for groups in self._groups for group in groups for i in group}
        segments: List[Any] = []
        run: List[List[int]] = []

        def flush() -> None:
            if sum(1 for g in run for i in g if nodes[i] is not _NO_NODE) >= 2:
                segments.append(self._make_graph(run, nodes))
            else:
                segments.extend(list(g) for g in run)
            run.clear()

        for groups in self._groups:
            for group in groups:
                if all(nodes[i] is not None for i in group):
                    run.append(group)
                    continue
                flush()
                segments.append(group)
        flush()
        return segments

    def _graph_node(self, index: int, copies: bool) -> Any:
        """Op ``index`` as a graph node: its bound launch, a device copy, _NO_NODE (a view), or None (not graphable)."""
        call = self._calls[index]
        if _graphable(call):
            return call
        op = self._ops[index]
        if isinstance(op, PreparedBufferView):
            return _NO_NODE  # checked when the plan was built; nothing runs
        make = getattr(self._device, "graph_copy", None)
        if copies and isinstance(op, PreparedCopy) and make is not None:
            return make(*(self._buffers[i] for i in op.buffer_indices))
        return None

    @staticmethod
    def _make_graph(run: List[List[int]], nodes: Mapping[int, Any]) -> Any:
        from .devices.cuda import CudaGraph

        members, deps, previous = [], [], []  # type: List[Any], List[List[int]], List[int]
        for group in run:
            current = []
            for index in group:
                if nodes[index] is _NO_NODE:
                    continue
                current.append(len(members))
                members.append(nodes[index])
                deps.append(list(previous))
            previous = current or previous
        return CudaGraph(members, deps)

    @property
    def native_replay(self) -> bool:
        """True when execute() replays kernels through the native runner."""
        return self._segment_kind == "native"

    @property
    def graph_replay(self) -> bool:
        """True when execute() replays runs of GPU kernels as CUDA graphs (one launch per run)."""
        return self._segment_kind == "graph"

    def set_graph_replay(self, enabled: bool) -> bool:
        """Switch between CUDA-graph and eager launches on a GPU; returns whether graphs are now in use."""
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

    def _custom_vars(self, op: PreparedCustomFunction) -> Dict[str, int]:
        """What a custom function sees: its runtime variables' current values, then its fixed ones."""
        out = {v.name: self._var_values[v.name] for v in op.runtime_vars if v.name in self._var_values}
        out.update(op.fixedvars)
        return out

    def _env(self, op: Union[PreparedKernel, PreparedCustomFunction]) -> Dict[str, int]:
        """Sizes and extents see exactly the values that are dispatched; fixedvars only add other names."""
        env = dict(op.fixedvars)
        if isinstance(op, PreparedKernel):
            env.update(zip(op.kernel.var_names, op.vals))
        return env

    def _launch(self, op: PreparedKernel, env: Mapping[str, int]) -> Tuple[int, int, int]:
        dims = []
        for expr in op.kernel.global_size:
            value = compile_expr(expr)(env)
            if value <= 0:
                raise PlanError("kernel %s: launch size %r = %d must be positive" % (op.kernel.entry_point, expr, value))
            dims.append(value)
        return tuple(dims)  # type: ignore[return-value]

    def _check_extents(self, op: PreparedKernel, env: Mapping[str, int]) -> None:
        for pos, expr in op.extents.items():
            buf = self._buffers[op.buffer_indices[pos]]
            need = compile_expr(expr)(env)
            have = buf.nbytes // max(buf.dtype.itemsize, 1)
            if need > have:
                raise BufferAllocationError(
                    "kernel %s argument %d needs %d elements (%s) but buffer %d holds %d: refusing to dispatch"
                    % (op.kernel.entry_point, pos, need, expr, op.buffer_indices[pos], have)
                )

    def _bind_kernel(self, index: int, op: PreparedKernel) -> None:
        env = self._env(op)
        launch = self._launch(op, env)
        self._check_extents(op, env)
        bufs = [self._buffers[i] for i in op.buffer_indices]
        if op.arg_check is not None:
            op.arg_check(env, bufs)
        program = op.kernel.program
        if getattr(program, "grid_in_blocks", False):
            self._bind_gpu_kernel(index, op, bufs, launch, env)
            return
        core_index = op.kernel.var_names.index("core_id") if "core_id" in op.kernel.var_names else None
        self._threaded[index] = launch[0] > 1
        gs = launch if launch[0] > 1 else None
        if hasattr(program, "bind") and gs is not None and self._parallelism(op) == 1:
            self._calls[index] = program.bind(bufs, list(op.vals), global_size=gs, core_id_index=core_index, threads=1)
        elif hasattr(program, "bind"):
            self._calls[index] = program.bind(bufs, list(op.vals), global_size=gs, core_id_index=core_index)
        else:
            vals = list(op.vals)
            self._calls[index] = lambda: program.execute(bufs, vals, global_size=gs, core_id_index=core_index)
        self._record_native(index, op, bufs, launch[0], core_index)

    def _bind_gpu_kernel(self, index: int, op: PreparedKernel, bufs: List[Any], grid: Tuple[int, int, int], env: Mapping[str, int]) -> None:
        """A GPU launch (svod: global_size counts blocks): bound once, then patched in place.

        Patching keeps the launch object, so a CUDA graph holding it re-uploads
        just this node on its next replay.
        """
        block = None
        if op.kernel.local_size is not None:
            block = tuple(d if type(d) is int else compile_expr(d)(env) for d in op.kernel.local_size)
        bound = self._calls[index]
        if bound is not None and hasattr(bound, "set_vals"):
            bound.set_vals(list(op.vals))
            bound.set_dims(grid, block)
            return
        self._calls[index] = op.kernel.program.bind(bufs, list(op.vals), global_size=grid, local_size=block)

    def _record_native(self, index: int, op: PreparedKernel, bufs: List[Any], ncalls: int, core_index: Optional[int]) -> None:
        """Remember how the native runner would call this kernel (CpuProgram only)."""
        self._native_entries.pop(index, None)
        program = op.kernel.program
        address = getattr(type(program), "address", None)
        if address is None or not all(type(getattr(b, "address", None)) is int for b in bufs):
            return  # not a loaded CPU program (e.g. a test double): Python path
        args = [b.address for b in bufs] + list(op.vals)
        if len(args) > _NATIVE_MAX_ARGS:
            return  # the C runner's table rows hold 16 arguments: this kernel takes the Python path
        core_pos = len(bufs) + core_index if (ncalls > 1 and core_index is not None) else -1
        self._native_entries[index] = (program.address, args, ncalls, core_pos, self._parallelism(op))
        self._tiny[index] = self._parallelism(op) == 1

    def _parallelism(self, op: PreparedKernel) -> int:
        """Threads worth using for this kernel's core_id invocations (1 when its work is tiny)."""
        if op.flops is None:
            return 1 << 30
        try:
            return 1 if compile_expr(op.flops)(self._env(op)) < PARALLEL_MIN_FLOPS else 1 << 30
        except PlanError:
            return 1 << 30

    def _accesses(self, op: PreparedOp) -> List[Access]:
        def span(idx: int, write: bool) -> Access:
            return access_span(self._buffers[idx], write)

        if isinstance(op, PreparedKernel):
            outs = set(op.output_indices)
            return [span(b, pos in outs) for pos, b in enumerate(op.buffer_indices)]
        if isinstance(op, PreparedCopy):
            return [span(op.buffer_indices[0], True), span(op.buffer_indices[1], False)]
        if isinstance(op, PreparedCustomFunction):
            return [span(b, True) for b in op.buffer_indices]
        return []

    def _is_barrier(self, op: PreparedOp) -> bool:
        if isinstance(op, PreparedKernel):
            return not op.kernel.host_parallel_safe
        return isinstance(op, (PreparedCustomFunction, PreparedBufferView))

    # -- running -----------------------------------------------------------------------------

    def _check_runnable(self) -> None:
        if self._poisoned is not None:
            raise PlanPoisonedError("plan is poisoned by an earlier failure (%s); build a new plan" % self._poisoned)
        if self._released:
            raise ExecutionError("plan's intermediate buffers were released; it cannot run again")
        if self._closes is not None and self._closes[0] != self._closes_seen:  # some CpuProgram was closed
            self._check_programs()
            self._closes_seen = self._closes[0]

    def _check_programs(self) -> None:
        """Refuse a kernel whose program was closed after build, before anything runs (both replay paths).

        O(programs): :meth:`_check_runnable` calls it only when the process-wide close count moved.
        """
        for name, program in self._programs:
            if getattr(program, "closed", False):
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
        futures = [pool.submit(self._run_op, index) for index in group[1:]]
        errors = []
        try:
            self._run_op(group[0])
        except BaseException as exc:  # noqa: B902 - re-raised below after the others finish
            errors.append(exc)
        for fut in futures:
            try:
                fut.result()
            except BaseException as exc:  # noqa: B902
                errors.append(exc)
        if errors:
            raise errors[0]

    def _pool(self) -> Any:
        if _on_pool_worker():  # waiting on the pool from one of its own threads can deadlock it
            return None
        pool = getattr(self._device, "pool", None)
        threads = getattr(self._device, "threads", 1)
        return pool if threads > 1 else None

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
            return
        for groups in self._groups:
            for group in groups:
                self._run_group(group)

    def execute_profiled(self) -> List[KernelProfile]:
        """Run every op once, serially, timing each; returns a profile per op in execution order."""
        return self._guarded(self._run_profiled)

    def _run_profiled(self) -> List[KernelProfile]:
        """GPU launches report device time (CUDA events); other GPU ops are synchronized so wall time is real."""
        profiles = []
        self.synchronize()
        for index in self.op_order:
            timed = getattr(self._calls[index], "timed", None)
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
        sync = getattr(self._device, "synchronize", None)
        if callable(sync):
            sync()

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
            name=name, device=str(getattr(self._device, "spec", self._device)), num_buffers=len(op.buffer_indices),
            elapsed=elapsed, wall=wall, start_ns=start, end_ns=end, flops=flops, bytes_moved=moved,
            op_index=index, kind=kind,
        )

    # -- variables ----------------------------------------------------------------------------

    def runtime_vars(self) -> Dict[str, RuntimeVar]:
        """Every variable the caller may set, by name (bounds intersected across ops)."""
        out: Dict[str, RuntimeVar] = {}
        for op in self._ops:
            for var in getattr(op, "runtime_vars", ()):
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
        """Drop every buffer that is neither an output nor a declared input; the plan cannot run after."""
        with self._held():
            keep = set(self._outputs) | set(self._inputs)
            for ast_id, index in self._ast_to_buffer.items():
                if index not in keep and remove_fn is not None:
                    remove_fn(ast_id)
            self._buffers = [b if i in keep else None for i, b in enumerate(self._buffers)]
            self._calls = [None] * len(self._ops)
            self._native_entries.clear()
            self._segments, self._segment_kind, self._gpu_launches = None, None, False
            self._released = True

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
            ops = [_copy_op(op) for op in self._ops]
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
            total = _storage_size(self._buffers, buf.storage)
            base = self._device.allocate(total)
            if any(i in self._inputs for i, b in enumerate(self._buffers) if b.storage is buf.storage):
                _copy_storage(base, self._buffers, buf, total)
            new_storage[key] = base
        return base.view(buf.offset, buf.nbytes, dtype=buf.dtype, shape=buf.shape)

    def __repr__(self) -> str:
        state = "poisoned" if self.poisoned else "ready"
        return "<ExecutionPlan %d ops, %d levels, %d buffers, %s>" % (len(self._ops), len(self.op_levels), len(self._buffers), state)


_FIELD_TYPES = {  # field -> (accepted types, what to call them): checked before any field is used
    "vals": ((list, tuple), "a list"),
    "output_indices": ((list, tuple), "a list"),
    "dependencies": ((list, tuple), "a list of op ids"),
    "fixedvars": (dict, "a dict of names to ints"),
    "extents": (dict, "a dict of positions to sizes"),
    "var_exprs": (dict, "a dict of names to expressions"),
    "runtime_vars": ((list, tuple), "a list of RuntimeVar"),
    "attrs": (dict, "a dict"),
    "kind": (str, "a str"),
}


def _check_fields(where: str, op: PreparedOp) -> None:
    """Malformed fields are PlanErrors naming them (not TypeErrors or IndexErrors from deep in build)."""
    for name, (types, what) in _FIELD_TYPES.items():
        value = getattr(op, name, types)
        if value is not types and not isinstance(value, types):
            raise PlanError("%s: %s must be %s, got %s" % (where, name, what, type(value).__name__))
    for dep in op.dependencies:
        if type(dep) is not int:
            raise PlanError("%s: dependencies must be op ids (ints), got %r" % (where, dep))
    for var in getattr(op, "runtime_vars", ()):
        if not isinstance(var, RuntimeVar):
            raise PlanError("%s: runtime_vars must hold RuntimeVar, got %s" % (where, type(var).__name__))
    for name, value in getattr(op, "fixedvars", {}).items():
        if type(name) is not str or isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise PlanError("%s: fixedvars must map names to ints, got %r: %r" % (where, name, value))
    if isinstance(op, PreparedBufferView) and not all(type(v) is int for v in (op.byte_offset, op.byte_size)):
        raise PlanError("%s: view byte_offset and byte_size must be ints" % where)


def _check_buffer(ast_id: Any, buffer: Any) -> None:
    """What build, hazard grouping and binding read from a buffer: refuse anything else up front."""
    ok = all(type(getattr(buffer, a, None)) is int for a in ("offset", "nbytes")) and hasattr(buffer, "storage")
    if not ok or not isinstance(getattr(getattr(buffer, "dtype", None), "itemsize", None), int):
        raise PlanError("add_buffer(%r): not a device buffer: %s" % (ast_id, type(buffer).__name__))


_REENTERED = "plan is already running on this thread (called again from one of its own ops)"
_NATIVE_MAX_ARGS = 16  # native_replay.MAX_ARGS (not imported here: that module builds the C runner)


def _close_counter(programs: List[Tuple[str, Any]]) -> Optional[List[int]]:
    """The CPU device's close count when a plan holds CpuPrograms (None otherwise: nothing to watch)."""
    from .devices import cpu  # on use: GPU-only plans need not import the CPU device

    return cpu.CLOSES if any(isinstance(p, cpu.CpuProgram) for _, p in programs) else None


def _on_pool_worker() -> bool:
    from .devices.cpu import _worker  # on use: GPU-only plans need not import the CPU device

    return bool(getattr(_worker, "active", False))


def _programs(ops: Sequence[PreparedOp]) -> List[Tuple[str, Any]]:
    """Each kernel op's program once, with the first kernel name that uses it."""
    seen: Dict[int, Tuple[str, Any]] = {}
    for op in ops:
        if isinstance(op, PreparedKernel):
            seen.setdefault(id(op.kernel.program), (op.kernel.entry_point, op.kernel.program))
    return list(seen.values())


def _work(expr: Optional[Union[int, str]], env: Mapping[str, int]) -> Optional[int]:
    """A declared flops/bytes figure for a profile; None when it cannot be evaluated (never fails a run)."""
    if expr is None:
        return None
    try:
        return compile_expr(expr)(env)
    except PlanError:
        return None


def _native_default() -> bool:
    """Native replay unless ``SVOD_NATIVE_REPLAY=0`` (the Python path is the reference)."""
    import os

    return os.environ.get("SVOD_NATIVE_REPLAY", "1").strip().lower() not in ("0", "false", "no", "off")


def _storage_size(buffers: List[Any], storage: Any) -> int:
    return max(b.offset + b.nbytes for b in buffers if b is not None and b.storage is storage)


def _copy_storage(base: Any, buffers: List[Any], buf: Any, total: int) -> None:
    """Snapshot ``buf``'s storage (its first ``total`` bytes) into the fresh buffer ``base``."""
    if _is_host(buf):
        _memmove(base.address, buf.address - buf.offset, total)
        return
    # Device memory has no host address: copy every plan buffer's bytes of that storage.
    for b in buffers:
        if b is not None and b.storage is buf.storage and b.nbytes:
            copy_buffer(base.view(b.offset, b.nbytes, "uint8"), b.view(0, b.nbytes, "uint8"))


_NO_NODE = object()  # an op that needs no graph node (a view)


def _graphable(call: Any) -> bool:
    """A bound GPU launch that can become a CUDA graph node."""
    return call is not None and hasattr(call, "node_params")


def _graphs_default() -> bool:
    """CUDA-graph replay on GPUs unless ``SVOD_CUDA_GRAPHS=0`` (eager launches are the reference)."""
    import os

    return os.environ.get("SVOD_CUDA_GRAPHS", "1").strip().lower() not in ("0", "false", "no", "off")


def _copy_op(op: PreparedOp) -> PreparedOp:
    import copy

    clone = copy.copy(op)
    if isinstance(op, PreparedKernel):
        clone.vals = list(op.vals)
    return clone


def _memmove(dst: int, src: int, nbytes: int) -> None:
    import ctypes

    ctypes.memmove(dst, src, nbytes)


def _is_host(buf: Any) -> bool:
    from .devices.cpu import CpuBuffer

    return isinstance(buf, CpuBuffer)


def copy_buffer(dst: Any, src: Any) -> None:
    """Copy all of ``src`` into ``dst`` (same size) on whichever devices they live.

    Host buffers copy with one memmove; a device buffer on either side goes through its
    device's copy path (device pointers must never reach a host memmove).
    """
    if _is_host(dst) and _is_host(src):
        _memmove(dst.address, src.address, src.nbytes)
    elif _is_host(dst):
        src.copyout_into(dst)
    else:
        dst.copyin(src)


def _run_custom_on_host(op: "PreparedCustomFunction", bufs: List[Any], variables: Dict[str, int]) -> None:
    """Host functions see numpy views of host buffers; device buffers are staged and written back."""
    views, staged = [], []
    for buf in bufs:
        if _is_host(buf):
            views.append(_host_view(buf))
        else:
            stage = _host_stage(buf)
            views.append(stage)
            staged.append((buf, stage))
    run_custom_function(op, views, variables)
    for buf, stage in staged:  # custom functions count as writing every buffer they get
        buf.copyin(stage)


def _host_stage(buf: Any) -> Any:
    try:
        return buf.numpy()
    except SvodError:  # no numpy: the function gets a host CpuBuffer copy
        from .device_registry import DEVICE_FACTORIES

        stage = DEVICE_FACTORIES.device("CPU").allocate(buf.nbytes)
        buf.copyout_into(stage)
        return stage.view(0, buf.nbytes, buf.dtype, tuple(buf.shape))


def _host_view(buf: Any) -> Any:
    try:
        return buf.numpy()
    except SvodError:
        return buf


__all__ = [
    "ExecutionPlan",
    "ExecutionPlanBuilder",
    "PreparedBufferView",
    "PreparedCopy",
    "PreparedCustomFunction",
    "PreparedKernel",
    "PreparedOp",
    "RuntimeVar",
    "copy_buffer",
    "kahn_levels",
    "register_custom_function",
    "run_custom_function",
]
