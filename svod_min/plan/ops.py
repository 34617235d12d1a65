"""The ops a plan runs (svod's ``Prepared*``), its run-time variables and the custom-function registry.

Plain dataclasses: :mod:`svod_min.plan.validation` checks them, :mod:`svod_min.plan.execution_plan` runs them.
"""

from __future__ import annotations

import copy
import functools
import numbers
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Union

from ..cache.kernel_cache import CachedKernel
from ..error import ExecutionError, NotSupportedError, PlanError


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
OP_TYPES = (PreparedKernel, PreparedCopy, PreparedBufferView, PreparedCustomFunction)

# --- custom functions ------------------------------------------------------------

CustomFn = Callable[[List[Any], Dict[str, int], Dict[str, Any]], None]
#: kind -> function; :func:`register_custom_function` fills it.
CUSTOM_FUNCTIONS: Dict[str, CustomFn] = {}


def register_custom_function(kind: str, fn: CustomFn) -> None:
    """Register ``fn(buffers, vars, attrs)`` for custom ops of ``kind``.

    ``buffers`` are numpy views when numpy is installed, else the plan's buffers.
    ``vars`` holds the op's ``runtime_vars`` at their current plan values (from
    ``set_var_values`` / ``execute_with_vars``; one never set is absent), then
    its ``fixedvars``, which win, as they do for kernels.
    """
    CUSTOM_FUNCTIONS[kind] = fn


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
    fn = CUSTOM_FUNCTIONS.get(op.kind)
    if fn is None:
        raise NotSupportedError("custom function %s is not supported (attrs=%d)" % (op.kind, len(op.attrs)))
    fn(buffers, vars, dict(op.attrs))


def custom_function_kinds() -> List[str]:
    """The registered custom-function kinds, sorted."""
    return sorted(CUSTOM_FUNCTIONS)


def copy_op(op: PreparedOp) -> PreparedOp:
    """A shallow copy whose ``vals`` a plan may patch without touching the original's."""
    clone = copy.copy(op)
    if isinstance(op, PreparedKernel):
        clone.vals = list(op.vals)
    return clone


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


def check_fields(where: str, op: PreparedOp) -> None:
    """Malformed fields are PlanErrors naming them (not TypeErrors or IndexErrors from deep in build)."""
    present = _field_names(type(op))
    for name, (types, what) in _FIELD_TYPES.items():
        value = getattr(op, name) if name in present else types
        if value is not types and not isinstance(value, types):
            raise PlanError("%s: %s must be %s, got %s" % (where, name, what, type(value).__name__))
    for dep in op.dependencies:
        if type(dep) is not int:
            raise PlanError("%s: dependencies must be op ids (ints), got %r" % (where, dep))
    for var in runtime_vars_of(op):
        if not isinstance(var, RuntimeVar):
            raise PlanError("%s: runtime_vars must hold RuntimeVar, got %s" % (where, type(var).__name__))
    for name, value in fixedvars_of(op).items():
        if type(name) is not str or isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise PlanError("%s: fixedvars must map names to ints, got %r: %r" % (where, name, value))
    if isinstance(op, PreparedBufferView) and not all(type(v) is int for v in (op.byte_offset, op.byte_size)):
        raise PlanError("%s: view byte_offset and byte_size must be ints" % where)


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> FrozenSet[str]:
    # per class, not per op: a plan checks every one of its (hundreds of) ops as it is built
    return frozenset(f.name for f in fields(cls))


def runtime_vars_of(op: PreparedOp) -> Sequence[RuntimeVar]:
    """The variables a caller may set for ``op`` (only kernels and custom functions have any)."""
    return op.runtime_vars if isinstance(op, (PreparedKernel, PreparedCustomFunction)) else ()


def fixedvars_of(op: PreparedOp) -> Mapping[str, int]:
    return op.fixedvars if isinstance(op, (PreparedKernel, PreparedCustomFunction)) else {}


__all__ = [
    "CUSTOM_FUNCTIONS",
    "CustomFn",
    "OP_TYPES",
    "PreparedBufferView",
    "PreparedCopy",
    "PreparedCustomFunction",
    "PreparedKernel",
    "PreparedOp",
    "RuntimeVar",
    "check_fields",
    "copy_op",
    "custom_function_kinds",
    "fixedvars_of",
    "register_custom_function",
    "run_custom_function",
    "runtime_vars_of",
]
