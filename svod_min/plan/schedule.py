"""How a plan schedules its ops: kernels bound to launches, hazard groups, replay segments.

:class:`PlanSchedule` is the half of :class:`svod_min.plan.execution_plan.ExecutionPlan` that prepares
a replay; it talks to devices only through :mod:`svod_min.devices.base`'s slots. Segments are
graphs from the device's graph slot (GPUs), native runner tables (host kernels with a C entry),
or op-index groups the plan runs itself.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .native_replay import native_entry, pack_segments
from ..devices.base import NO_NODE, RELEASE_EPOCH
from ..error import BufferAllocationError, DeviceError, PlanError
from ..expr import compile_expr
from ..ordering import Access, access_span, group_level
from .grain import GrainSplit
from .ops import PreparedBufferView, PreparedCopy, PreparedCustomFunction, PreparedKernel, PreparedOp

#: A core_id kernel declaring less work than this runs its invocations on one
#: thread: starting and joining threads costs more than it saves (~30 µs).
PARALLEL_MIN_FLOPS = 1_000_000


class PlanSchedule:
    """Binding and segment building for :class:`~svod_min.plan.execution_plan.ExecutionPlan` (its state lives there)."""

    _device: Any
    _buffers: List[Any]
    _ops: List[PreparedOp]
    op_levels: List[List[int]]
    _var_values: Dict[str, int]
    native: bool
    graphs: bool
    _grain: GrainSplit

    def _prepare(self) -> None:
        """Evaluate launch sizes, check extents, bind calls, compute hazard groups."""
        self._launches: List[Any] = [None] * len(self._ops)  # each kernel op's bound Launch
        self._calls: List[Any] = [None] * len(self._ops)  # its bound __call__: ~20 ns less per replayed op
        self._threaded = [False] * len(self._ops)
        self._tiny = [False] * len(self._ops)  # declared work too small to be worth a pool hand-off
        self._grain = GrainSplit(len(self._ops))  # measured again: the new values change every op's cost
        for index, op in enumerate(self._ops):
            if isinstance(op, PreparedKernel):
                self._bind_kernel(index, op)
        self._programs = _programs(self._ops)
        self._release_seen = RELEASE_EPOCH.value  # bind refused closed programs
        accesses = [self._accesses(op) for op in self._ops]
        barrier = [self._is_barrier(op) for op in self._ops]
        self._groups = [group_level(level, accesses, barrier) for level in self.op_levels]
        self._build_segments()

    def _flat_groups(self) -> List[List[int]]:
        return [group for groups in self._groups for group in groups]

    def _build_segments(self) -> None:
        """Pack runs of kernel groups into one-call segments: device graphs on a GPU, C runner tables on the CPU."""
        self._segments, self._segment_kind = None, None
        graph = self._device.graph
        if self.graphs and graph is not None and any(c is not None and c.graphable for c in self._launches):
            try:
                segments = graph.build(self._flat_groups(), self._graph_nodes(copies=True))
            except DeviceError:  # a driver without memcpy nodes: copies stay on the Python path
                segments = graph.build(self._flat_groups(), self._graph_nodes(copies=False))
            self._segments, self._segment_kind = segments, "graph"
            return
        if not self.native:
            return
        segments = pack_segments(self._flat_groups(), self._native_entries, self._device.threads)
        if segments is not None:
            self._segments, self._segment_kind = segments, "native"

    def _graph_nodes(self, copies: bool) -> Dict[int, Any]:
        """Each op as a graph node: its bound launch, a device copy (``copies``), NO_NODE (a view), or None.

        Custom functions (and copies the device cannot make nodes of) are None: they end a run and
        stay on the Python path.
        """
        graph = self._device.graph
        nodes: Dict[int, Any] = {}
        for index, op in enumerate(self._ops):
            call = self._launches[index]
            node = None
            if call is not None and call.graphable:
                node = call
            elif isinstance(op, PreparedBufferView):
                node = NO_NODE  # checked when the plan was built; nothing runs
            elif copies and isinstance(op, PreparedCopy):
                node = graph.copy_node(*(self._buffers[i] for i in op.buffer_indices))
            nodes[index] = node
        return nodes

    @property
    def native_replay(self) -> bool:
        """True when execute() replays kernels through the native runner."""
        return self._segment_kind == "native"

    @property
    def graph_replay(self) -> bool:
        """True when execute() replays runs of GPU kernels as device graphs (one launch per run)."""
        return self._segment_kind == "graph"

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
        if program.grid_in_blocks:
            self._bind_gpu_kernel(index, op, bufs, launch, env)
            return
        core_index = op.kernel.var_names.index("core_id") if "core_id" in op.kernel.var_names else None
        self._threaded[index] = launch[0] > 1
        gs = launch if launch[0] > 1 else None
        parallelism = self._parallelism(op)
        threads = 1 if gs is not None and parallelism == 1 else None
        self._set_launch(index, program.bind(bufs, list(op.vals), global_size=gs, core_id_index=core_index, threads=threads))
        self._record_native(index, op, bufs, launch[0], core_index, parallelism)

    def _bind_gpu_kernel(self, index: int, op: PreparedKernel, bufs: List[Any], grid: Tuple[int, int, int], env: Mapping[str, int]) -> None:
        """A GPU launch (svod: global_size counts blocks): bound once, then patched in place.

        Patching keeps the launch object, so a device graph holding it re-uploads
        just this node on its next replay.
        """
        block = None
        if op.kernel.local_size is not None:
            block = tuple(d if type(d) is int else compile_expr(d)(env) for d in op.kernel.local_size)
        bound = self._launches[index]
        if bound is not None:
            bound.set_vals(list(op.vals))
            bound.set_dims(grid, block)
            return
        self._set_launch(index, op.kernel.program.bind(bufs, list(op.vals), global_size=grid, local_size=block))

    def _set_launch(self, index: int, launch: Any) -> None:
        self._launches[index], self._calls[index] = launch, launch.__call__

    def _record_native(self, index: int, op: PreparedKernel, bufs: List[Any], ncalls: int, core_index: Optional[int],
                       parallelism: int) -> None:  # fmt: skip
        """Remember how the native runner would call this kernel (programs with a native entry only)."""
        entry = native_entry(op.kernel.program.native_address, bufs, op.vals, ncalls, core_index, parallelism)
        if entry is None:
            self._native_entries.pop(index, None)
            return
        self._native_entries[index] = entry
        self._tiny[index] = parallelism == 1

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


def _programs(ops: Sequence[PreparedOp]) -> List[Tuple[str, Any]]:
    """Each kernel op's program once, with the first kernel name that uses it."""
    seen: Dict[int, Tuple[str, Any]] = {}
    for op in ops:
        if isinstance(op, PreparedKernel):
            seen.setdefault(id(op.kernel.program), (op.kernel.entry_point, op.kernel.program))
    return list(seen.values())


__all__ = ["PARALLEL_MIN_FLOPS", "PlanSchedule"]
