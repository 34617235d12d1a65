"""Binding one kernel op to its device: the values it sees, its launch size, extents and threads.

A plan binds every kernel once when it is prepared and again when its variables change;
:func:`bind_kernel` evaluates the op's size expressions against exactly the values that are
dispatched, refuses buffers too small for the declared extents, and returns the device
interface's bound ``Launch`` (:mod:`svod_min.devices.base`) with how the native runner would
call the same kernel.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from ..error import BufferAllocationError, PlanError
from ..expr import compile_expr
from .native_replay import NativeEntry, native_entry
from .ops import PreparedCustomFunction, PreparedKernel

#: A core_id kernel declaring less work than this runs its invocations on one
#: thread: starting and joining threads would cost more than they save.
PARALLEL_MIN_FLOPS = 1_000_000
#: Threads a kernel may use when its work is unknown or large: as many as the device has.
ANY_THREADS = 1 << 30


class BoundKernel(NamedTuple):
    """A kernel op bound for replay."""

    launch: Any  # the device's Launch (a GPU launch is patched in place on a rebind)
    threaded: bool  # its core_id invocations are spread over the host pool
    entry: Optional[NativeEntry]  # how the native runner calls it; None: the Python path runs it
    tiny: bool  # declared work too small to be worth a pool hand-off


def op_env(op: Union[PreparedKernel, PreparedCustomFunction]) -> Dict[str, int]:
    """Sizes and extents see exactly the values that are dispatched; fixedvars only add other names."""
    env = dict(op.fixedvars)
    if isinstance(op, PreparedKernel):
        env.update(zip(op.kernel.var_names, op.vals))
    return env


class NoWork:
    """The launch of a kernel whose launch size has a 0 dimension (an empty batch): nothing is dispatched, so no
    kernel ever sees the buffers of a launch with no work (a 0-byte buffer's pointer points at nothing)."""

    graphable = False
    timed = None

    def __call__(self) -> None:
        return None


def launch_dims(op: PreparedKernel, env: Mapping[str, int]) -> Tuple[int, int, int]:
    """The kernel's launch size under ``env``; each dimension must be positive, or 0 (no work: not dispatched)."""
    dims = []
    for expr in op.kernel.global_size:
        value = compile_expr(expr)(env)
        if value < 0:
            raise PlanError(
                "kernel %s: launch size %r = %d is negative (0 is no work, more runs it)"
                % (op.kernel.entry_point, expr, value)
            )
        dims.append(value)
    return tuple(dims)  # type: ignore[return-value]


def check_extents(op: PreparedKernel, buffers: Sequence[Any], env: Mapping[str, int]) -> None:
    """Refuse to dispatch when a buffer holds fewer elements than the op's extent for it."""
    for pos, expr in op.extents.items():
        buf = buffers[op.buffer_indices[pos]]
        need = compile_expr(expr)(env)
        have = buf.nbytes // max(buf.dtype.itemsize, 1)
        if need > have:
            raise BufferAllocationError(
                "kernel %s argument %d needs %d elements (%s) but buffer %d holds %d: refusing to dispatch"
                % (op.kernel.entry_point, pos, need, expr, op.buffer_indices[pos], have)
            )


def parallelism(op: PreparedKernel, env: Mapping[str, int]) -> int:
    """Threads worth using for this kernel's core_id invocations (1 when its declared work is tiny)."""
    if op.flops is None:
        return ANY_THREADS
    try:
        return 1 if compile_expr(op.flops)(env) < PARALLEL_MIN_FLOPS else ANY_THREADS
    except PlanError:
        return ANY_THREADS


def bind_kernel(op: PreparedKernel, buffers: Sequence[Any], bound: Any) -> BoundKernel:
    """Check ``op`` against ``buffers`` and bind it; ``bound`` is its previous launch (or None)."""
    env = op_env(op)
    dims = launch_dims(op, env)
    check_extents(op, buffers, env)
    if 0 in dims:
        return BoundKernel(NoWork(), False, None, True)
    if isinstance(bound, NoWork):
        bound = None
    bufs = [buffers[i] for i in op.buffer_indices]
    if op.arg_check is not None:
        op.arg_check(env, bufs)
    program = op.kernel.program
    if program.grid_in_blocks:
        return BoundKernel(_bind_gpu(op, bufs, dims, env, bound), False, None, False)
    names = op.kernel.var_names
    core_index = names.index("core_id") if "core_id" in names else None
    threaded = dims[0] > 1
    threads = parallelism(op, env)
    launch = program.bind(
        bufs,
        list(op.vals),
        global_size=dims if threaded else None,
        core_id_index=core_index,
        threads=1 if threaded and threads == 1 else None,
    )
    entry = native_entry(program.native_address, bufs, op.vals, dims[0], core_index, threads)
    return BoundKernel(launch, threaded, entry, threads == 1)


def _bind_gpu(
    op: PreparedKernel, bufs: List[Any], grid: Tuple[int, int, int], env: Mapping[str, int], bound: Any
) -> Any:
    """A GPU launch (svod: global_size counts blocks): bound once, then patched in place.

    Patching keeps the launch object, so a device graph holding it re-uploads
    just this node on its next replay.
    """
    block = None
    if op.kernel.local_size is not None:
        block = tuple(d if type(d) is int else compile_expr(d)(env) for d in op.kernel.local_size)
    if bound is not None:
        bound.set_vals(list(op.vals))
        bound.set_dims(grid, block)
        return bound
    return op.kernel.program.bind(bufs, list(op.vals), global_size=grid, local_size=block)


__all__ = [
    "ANY_THREADS",
    "PARALLEL_MIN_FLOPS",
    "BoundKernel",
    "NoWork",
    "bind_kernel",
    "check_extents",
    "launch_dims",
    "op_env",
    "parallelism",
]
