"""Collecting and validating a plan's buffers and ops, once, before anything runs.

Indices, dependencies, cycles, views, launch sizes and buffer extents are checked here and the
deterministic Kahn levels computed; :mod:`svod_min.plan.execution_plan` turns the validated
:class:`PlanParts` into a plan.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..error import NotSupportedError, PlanError, VariableBoundsError
from ..expr import compile_expr
from ..cache.kernel_cache import CachedKernel
from ..ordering import kahn_levels
from .ops import CUSTOM_FUNCTIONS, OP_TYPES, PreparedBufferView, PreparedCopy, PreparedCustomFunction, PreparedKernel, PreparedOp, check_fields, custom_function_kinds

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


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


def resolve_dependencies(ops: List[PreparedOp], instance_deps: Dict[int, List[int]]) -> List[List[int]]:
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



class PlanBuilder:
    """Collects buffers and ops, then :meth:`validated` checks them into :class:`PlanParts`.

    :class:`svod_min.plan.execution_plan.ExecutionPlanBuilder` adds ``build()`` (parts -> plan).
    """

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
            raise PlanError("op %d: instance dependencies must be a list of op indices (ints), got %r" % (index, dependencies))
        self._instance_deps[self.add_op(op)] = list(dependencies)
        return index

    @property
    def op_count(self) -> int:
        return len(self._ops)

    def validated(self) -> PlanParts:
        """Validate everything; raises PlanError naming the problem."""
        outputs = self._check_outputs()
        for index, op in enumerate(self._ops):
            self._check_op(index, op)
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
        if not isinstance(op, OP_TYPES):
            raise PlanError("op %d: unknown op type %s" % (index, type(op).__name__))
        where = "op %d (id %r)" % (index, op.id)
        if type(op.id) is not int or not isinstance(op.buffer_indices, (list, tuple)):
            raise PlanError("%s: id must be an int and buffer_indices a list" % where)
        check_fields(where, op)
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
            if op.kind not in CUSTOM_FUNCTIONS:
                raise NotSupportedError(
                    "%s: custom function %s is not supported (attrs=%d); registered: %s"
                    % (where, op.kind, len(op.attrs), custom_function_kinds())
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
        count = op.kernel.program.buf_count
        if count != nbuf:
            raise PlanError("%s: kernel %s takes %d buffers, got %d" % (where, op.kernel.entry_point, count, nbuf))
        if len(op.vals) != len(names):
            raise PlanError("%s: %d values for variables %s" % (where, len(op.vals), names))
        takes = op.kernel.program.var_names
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



def check_buffer(ast_id: Any, buffer: Any) -> None:
    """What build, hazard grouping and binding read from a buffer: refuse anything else up front."""
    ok = all(type(getattr(buffer, a, None)) is int for a in ("offset", "nbytes")) and hasattr(buffer, "storage")
    if not ok or not isinstance(getattr(getattr(buffer, "dtype", None), "itemsize", None), int):
        raise PlanError("add_buffer(%r): not a device buffer: %s" % (ast_id, type(buffer).__name__))



__all__ = ["INT32_MAX", "INT32_MIN", "PlanBuilder", "PlanParts", "check_buffer", "resolve_dependencies"]
