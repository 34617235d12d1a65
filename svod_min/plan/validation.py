"""Checking a plan's buffers and ops once, before anything runs.

Indices, dependencies, copies, views, kernel fields and declared-work expressions are checked
here, and kernel variables bound to expressions take their first values; each failure is a
:class:`PlanError` naming the op. :class:`svod_min.plan.execution_plan.ExecutionPlanBuilder`
calls these functions from ``build()``; launch sizes and extents are checked when the plan binds
its kernels (:mod:`svod_min.plan.binding`).
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..cache.kernel_cache import CachedKernel
from ..error import NotSupportedError, PlanError
from ..expr import compile_expr
from .ops import (
    CUSTOM_FUNCTIONS,
    OP_TYPES,
    PreparedBufferView,
    PreparedCopy,
    PreparedCustomFunction,
    PreparedKernel,
    PreparedOp,
    check_fields,
    custom_function_kinds,
)
from .variables import bound_var_value


def resolve_dependencies(ops: List[PreparedOp], instance_deps: Mapping[int, Sequence[int]]) -> List[List[int]]:
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


def check_buffer(ast_id: Any, buffer: Any) -> None:
    """What build, hazard grouping and binding read from a buffer: refuse anything else up front."""
    ok = all(type(getattr(buffer, a, None)) is int for a in ("offset", "nbytes")) and hasattr(buffer, "storage")
    if not ok or not isinstance(getattr(getattr(buffer, "dtype", None), "itemsize", None), int):
        raise PlanError("add_buffer(%r): not a device buffer: %s" % (ast_id, type(buffer).__name__))


def check_outputs(outputs: Optional[Sequence[int]], buffers: Sequence[Any], ops: Sequence[PreparedOp]) -> List[int]:
    """The output buffer indices; only a plan with neither ops nor buffers may leave them unset."""
    if outputs is None:
        if ops or buffers:
            raise PlanError("output buffers must be set explicitly (set_output_buffer/set_output_buffers)")
        return []
    for idx in outputs:
        _check_index(idx, "output buffer", len(buffers))
    return list(outputs)


def _check_index(idx: int, what: str, nbuffers: int) -> None:
    if type(idx) is not int or not 0 <= idx < nbuffers:  # True is not buffer 1
        raise PlanError("%s: buffer index out of range: %r (%d buffers)" % (what, idx, nbuffers))


def check_op(index: int, op: PreparedOp, buffers: Sequence[Any], var_values: Mapping[str, int]) -> None:
    """One op against the plan's buffers; a kernel's ``var_exprs`` are evaluated into its ``vals``."""
    if not isinstance(op, OP_TYPES):
        raise PlanError("op %d: unknown op type %s" % (index, type(op).__name__))
    where = "op %d (id %r)" % (index, op.id)
    if type(op.id) is not int or not isinstance(op.buffer_indices, (list, tuple)):
        raise PlanError("%s: id must be an int and buffer_indices a list" % where)
    check_fields(where, op)
    for idx in op.buffer_indices:
        _check_index(idx, where, len(buffers))
    if isinstance(op, PreparedKernel):
        _check_kernel_op(where, op, var_values)
    if isinstance(op, PreparedCopy):
        _check_copy(where, op, buffers)
    if isinstance(op, PreparedBufferView):
        _check_view(where, op, buffers)
    if isinstance(op, PreparedCustomFunction) and op.kind not in CUSTOM_FUNCTIONS:
        raise NotSupportedError(
            "%s: custom function %s is not supported (attrs=%d); registered: %s"
            % (where, op.kind, len(op.attrs), custom_function_kinds())
        )


def _check_copy(where: str, op: PreparedCopy, buffers: Sequence[Any]) -> None:
    if len(op.buffer_indices) != 2:
        raise PlanError("%s: copy requires two buffer indices [dst, src], got %d" % (where, len(op.buffer_indices)))
    dst, src = (buffers[i] for i in op.buffer_indices)
    if dst.nbytes != src.nbytes:
        raise PlanError("%s: copy size mismatch: dst %d bytes, src %d bytes" % (where, dst.nbytes, src.nbytes))


def _check_kernel_op(where: str, op: PreparedKernel, var_values: Mapping[str, int]) -> None:
    if not isinstance(op.kernel, CachedKernel):
        raise PlanError("%s: kernel must be a CachedKernel, got %s" % (where, type(op.kernel).__name__))
    nbuf, names = len(op.buffer_indices), op.kernel.var_names
    if not op.output_indices:
        raise PlanError("%s: kernel %s has no output indices" % (where, op.kernel.entry_point))
    for what, positions in (("output index", op.output_indices), ("extent position", list(op.extents))):
        for pos in positions:
            if type(pos) is not int or not 0 <= pos < nbuf:
                raise PlanError("%s: %s out of range: %r (%d buffers)" % (where, what, pos, nbuf))
    count = op.kernel.program.buf_count
    if count != nbuf:
        raise PlanError("%s: kernel %s takes %d buffers, got %d" % (where, op.kernel.entry_point, count, nbuf))
    if len(op.vals) != len(names):
        raise PlanError("%s: %d values for variables %s" % (where, len(op.vals), names))
    takes = op.kernel.program.var_names
    if len(takes) != len(names):
        raise PlanError(
            "%s: kernel %s takes variables %s, the op names %s"
            % (where, op.kernel.entry_point, list(takes), list(names))
        )
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in op.vals):
        raise PlanError("%s: vals must be ints, got %r" % (where, op.vals))
    _check_fixed_vars(where, op)
    allowed = set(names) | set(op.fixedvars)
    for what, expr in (("flops", op.flops), ("bytes_moved", op.bytes_moved)):
        unknown = sorted(compile_expr(expr).names - allowed) if expr is not None else []
        if unknown:
            raise PlanError(
                "%s: %s expression %r uses %s, not kernel variables %s" % (where, what, expr, unknown, list(names))
            )
    _apply_var_exprs(where, op, var_values)


def _check_fixed_vars(where: str, op: PreparedKernel) -> None:
    """A declared fixed value must be the one that runs, and no expression may patch it away."""
    names = op.kernel.var_names
    for name, value in op.fixedvars.items():
        if name in names and op.vals[names.index(name)] != value:
            raise PlanError(
                "%s: fixed variable %s=%r but vals gives %r" % (where, name, value, op.vals[names.index(name)])
            )
        if name in op.var_exprs:
            raise PlanError(
                "%s: variable %s is both fixed (%r) and bound to %r" % (where, name, value, op.var_exprs[name])
            )


def _apply_var_exprs(where: str, op: PreparedKernel, var_values: Mapping[str, int]) -> None:
    """Kernel variables bound to expressions start from the plan variables' current values."""
    op.vals = list(op.vals)  # a tuple is accepted: the values are patched in place from here on
    for name, text in op.var_exprs.items():
        if name not in op.kernel.var_names:
            raise PlanError("%s: var_exprs names %r, not a variable of %s" % (where, name, op.kernel.entry_point))
        op.vals[op.kernel.var_names.index(name)] = bound_var_value(where, name, text, var_values)


def _check_view(where: str, op: PreparedBufferView, buffers: Sequence[Any]) -> None:
    if len(op.buffer_indices) != 2:
        raise PlanError("%s: view requires two buffer indices [out, base]" % where)
    out, base = (buffers[i] for i in op.buffer_indices)
    if out.storage is not base.storage:
        raise PlanError("%s: view and base do not share storage" % where)
    if out.offset != base.offset + op.byte_offset or out.nbytes != op.byte_size:
        raise PlanError(
            "%s: view is bytes [%d, +%d) of the storage, op says [%d, +%d)"
            % (where, out.offset, out.nbytes, base.offset + op.byte_offset, op.byte_size)
        )
    if op.byte_offset < 0 or op.byte_offset + op.byte_size > base.nbytes:
        raise PlanError(
            "%s: view [%d, +%d) is outside its %d-byte base" % (where, op.byte_offset, op.byte_size, base.nbytes)
        )


__all__ = ["check_buffer", "check_op", "check_outputs", "resolve_dependencies"]
