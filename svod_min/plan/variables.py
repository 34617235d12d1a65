"""A plan's run-time variables: their bounds across ops, checking the caller's values, and the
kernel values and custom-function variables that follow from them.

A kernel's ``vals`` follow the plan variables three ways: a variable bound to an expression
(``var_exprs``) is evaluated, a variable of the same name takes the value, and fixed variables
and ``core_id`` (set per invocation by the dispatcher) keep theirs.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Mapping, Sequence

from ..error import PlanError, VariableBoundsError
from ..expr import compile_expr
from .ops import PreparedCustomFunction, PreparedKernel, PreparedOp, RuntimeVar, runtime_vars_of

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def plan_runtime_vars(ops: Sequence[PreparedOp]) -> Dict[str, RuntimeVar]:
    """Every variable a caller may set, by name, its bounds intersected across the ops declaring it."""
    out: Dict[str, RuntimeVar] = {}
    for op in ops:
        for var in runtime_vars_of(op):
            prev = out.get(var.name)
            if prev is not None:
                var = RuntimeVar(var.name, max(prev.min_val, var.min_val), min(prev.max_val, var.max_val))
            out[var.name] = var
    return out


def check_var_values(known: Mapping[str, RuntimeVar], var_vals: Any) -> Dict[str, int]:
    """The caller's values as plain ints, every one named in ``known`` and inside its bounds."""
    if not isinstance(var_vals, Mapping):
        raise PlanError("variables must be a mapping of names to ints, got %s" % type(var_vals).__name__)
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


def bound_var_value(where: str, name: str, text: str, env: Mapping[str, int]) -> int:
    """Kernel variable ``name`` bound to expression ``text`` under ``env``: a PlanError naming unknown
    variables, a VariableBoundsError when the value does not fit the kernel's int32 parameter."""
    value = compile_expr(text)(env)
    if not INT32_MIN <= value <= INT32_MAX:
        raise VariableBoundsError("%s: %s = %s = %d does not fit int32" % (where, name, text, value))
    return value


def kernel_vals(op: PreparedKernel, values: Mapping[str, int], env: Mapping[str, int]) -> List[int]:
    """The kernel's ``vals`` once the plan variables ``values`` are set (``env``: every variable's value)."""
    return [_kernel_val(op, name, old, values, env) for name, old in zip(op.kernel.var_names, op.vals)]


def _kernel_val(op: PreparedKernel, name: str, old: int, values: Mapping[str, int], env: Mapping[str, int]) -> int:
    if name in op.var_exprs:
        return bound_var_value("kernel %s" % op.kernel.entry_point, name, op.var_exprs[name], env)
    if name in values and name not in op.fixedvars and name != "core_id":
        return values[name]
    return old


def custom_vars(op: PreparedCustomFunction, values: Mapping[str, int]) -> Dict[str, int]:
    """What a custom function sees: its runtime variables' current values, then its fixed ones."""
    out = {v.name: values[v.name] for v in op.runtime_vars if v.name in values}
    out.update(op.fixedvars)
    return out


__all__ = [
    "INT32_MAX",
    "INT32_MIN",
    "bound_var_value",
    "check_var_values",
    "custom_vars",
    "kernel_vals",
    "plan_runtime_vars",
]
