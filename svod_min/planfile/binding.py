"""Ranged dims: inputs and outputs whose size follows the plan variables, bound from the fed arrays' shapes.

An input or output buffer may carry ``"dims"`` (docs/plan-format.md, "Ranged dims"): per axis an int (the
buffer's ``shape`` there) or a size expression over the plan's variables. ``shape`` stays the size at the
variables' maxima, what the buffer is allocated at; at a binding the tensor of the bound shape lies contiguous
(C order) at the start of the buffer. An input's string entries are bare variable names: the fed array's size on
that axis binds the variable. An output's entries give its bound shape, read from that prefix.

:func:`read_dims` checks the declaration at load; :class:`Binding` holds every dims buffer's entries, compiled
once (a call evaluates closures, it compiles nothing), binds variables from shapes and gives bound shapes. Pure
Python: the ``run`` command binds ``.npy`` files on a bare interpreter.
"""

from __future__ import annotations

from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ..error import PlanError, PlanFileError, VariableBoundsError
from ..expr import SizeExpr, compile_expr
from ..plan.ops import RuntimeVar
from .schema import as_list, describe, need

#: One axis: its fixed size, or the expression giving its size from the plan variables.
Dim = Union[int, SizeExpr]
Shape = Tuple[int, ...]


def read_dims(
    b: Mapping[str, Any], shape: Sequence[int], variables: Mapping[str, RuntimeVar], path: str
) -> Tuple[Dim, ...]:
    """Buffer ``b``'s ``dims`` checked against its ``shape`` and the plan variables, compiled; PlanFileError with
    the JSON path of the entry otherwise."""
    path += ".dims"
    is_input = b.get("input") is True
    need(is_input or b.get("output") is True, path, "dims are for inputs and outputs only")
    entries = as_list(b["dims"], path)
    need(
        len(entries) == len(shape),
        path,
        "has %d entries, the buffer's shape %s has %d" % (len(entries), list(shape), len(shape)),
    )
    at_max = {name: var.max_val for name, var in variables.items()}
    return tuple(
        _read_dim(e, shape[i], is_input, variables, at_max, "%s[%d]" % (path, i)) for i, e in enumerate(entries)
    )


def _read_dim(
    entry: Any, size: int, is_input: bool, variables: Mapping[str, RuntimeVar], at_max: Mapping[str, int], path: str
) -> Dim:
    if type(entry) is int:
        need(entry == size, path, "%d is not the shape's %d (an int entry is the axis's fixed size)" % (entry, size))
        return entry
    need(isinstance(entry, str) and entry != "", path, "expected an int or a size expression, got %s" % describe(entry))
    if is_input:  # the fed array's size on this axis binds the variable: only a name can be bound
        need(
            entry in variables,
            path,
            "an input's entry is an int or a plan variable's name (plan variables: %s), got %r"
            % (sorted(variables), entry),
        )
    try:
        expr = compile_expr(entry)
    except PlanError as exc:
        raise PlanFileError(path, str(exc)) from None
    unknown = sorted(expr.names - set(variables))
    need(not unknown, path, "expression %r uses %s, not plan variables %s" % (entry, unknown, sorted(variables)))
    try:
        largest = expr(at_max)
    except PlanError as exc:
        raise PlanFileError(path, str(exc)) from None
    need(
        largest == size,
        path,
        "%r is %d at the variables' maxima, the shape's %d (the buffer holds the largest binding)"
        % (entry, largest, size),
    )
    return expr


#: One input axis as a call checks it: (fixed size, None) or (0, the variable it binds, its min, its max).
_Rule = Tuple[int, Optional[str], int, int]


def _rule(dim: Dim, variables: Mapping[str, RuntimeVar]) -> _Rule:
    if type(dim) is int:
        return dim, None, 0, 0
    var = variables[dim.text]  # type: ignore[union-attr]
    return 0, var.name, var.min_val, var.max_val


def _axis(name: str, axis: int) -> str:
    return "input %r axis %d" % (name, axis)


class Binding:
    """The dims of one loaded plan's inputs and outputs: ``dims`` maps buffer names to their entries, ``full``
    to their allocated shapes, ``inputs`` names the inputs among them; ``variables`` are the plan's; ``runtime``
    names those the plan's ops take (the rest, named only by dims, are remembered here in ``loose``)."""

    def __init__(
        self,
        dims: Mapping[str, Tuple[Dim, ...]],
        full: Mapping[str, Shape],
        inputs: Iterable[str],
        variables: Mapping[str, RuntimeVar],
        defaults: Mapping[str, int],
        runtime: FrozenSet[str],
    ) -> None:
        self.dims = dict(dims)
        self.full = dict(full)
        names = set(inputs)
        self.inputs = {n: d for n, d in self.dims.items() if n in names}
        self._rules = {n: tuple(_rule(d, variables) for d in dims) for n, dims in self.inputs.items()}
        self.variables = variables
        self.runtime = runtime
        self.loose = {n: v for n, v in defaults.items() if n not in runtime}

    def bind(self, shapes: Mapping[str, Sequence[int]], given: Optional[Mapping[str, int]] = None) -> Dict[str, int]:
        """The variables that the fed ``shapes`` bind (inputs without dims bind nothing); PlanError when a shape
        does not fit its input's dims, a variable is bound twice to different sizes or ``given`` (explicit values)
        disagrees, VariableBoundsError when a size is outside its variable's range. Changes nothing."""
        seen: Dict[str, Tuple[int, str, int]] = {}  # variable -> (size, input, axis) that bound it first
        for name, shape in shapes.items():
            rules = self._rules.get(name)
            if rules is not None:
                self._match(name, rules, shape, seen)
        for var, value in (given or {}).items():
            if var in seen and seen[var][0] != value:
                size, name, axis = seen[var]
                raise PlanError(
                    "variable %s=%r was given, but %s binds %s=%d" % (var, value, _axis(name, axis), var, size)
                )
        return {var: bound[0] for var, bound in seen.items()}

    def _match(self, name: str, rules: Tuple[_Rule, ...], shape: Sequence[int], seen: Dict[str, Any]) -> None:
        if len(shape) != len(rules):
            raise PlanError(
                "input %r: got rank %d %s, the plan's input has rank %d (dims %s)"
                % (name, len(shape), list(shape), len(rules), self.spelled(name))
            )
        for axis, (fixed, var, lo, hi) in enumerate(rules):
            size = shape[axis]
            if var is None:
                if size != fixed:
                    raise PlanError(
                        "input %r: axis %d has %d elements, the plan's input has %d there (dims %s)"
                        % (name, axis, size, fixed, self.spelled(name))
                    )
            elif not lo <= size <= hi:
                raise VariableBoundsError(
                    "%s binds %s=%d, outside its range [%d, %d]" % (_axis(name, axis), var, size, lo, hi)
                )
            else:
                before = seen.get(var)
                if before is None:
                    seen[var] = (size, name, axis)
                elif before[0] != size:
                    raise PlanError(
                        "%s binds %s=%d, but %s binds %s=%d"
                        % (_axis(name, axis), var, size, _axis(before[1], before[2]), var, before[0])
                    )

    def spelled(self, name: str) -> List[Any]:
        """Buffer ``name``'s dims as the plan writes them."""
        return [d if type(d) is int else d.text for d in self.dims[name]]

    def split(self, values: Mapping[str, int]) -> Tuple[Dict[str, int], Dict[str, int]]:
        """``values`` as (those the plan's ops take, those only dims name): an ExecutionPlan knows only its ops'
        variables, so the caller keeps the second part in ``loose`` once the run is accepted."""
        if not self.loose:  # the usual plan: its ops take every variable
            return dict(values), {}
        plan_values: Dict[str, int] = {}
        loose: Dict[str, int] = {}
        for var, value in values.items():
            (loose if var in self.loose else plan_values)[var] = value
        return plan_values, loose

    def shape(self, name: str, env: Mapping[str, int]) -> Shape:
        """Buffer ``name``'s bound shape under ``env`` (the plan's current values); PlanError when an axis falls
        outside the buffer's shape (a size expression that is not largest at the maxima)."""
        dims, full = self.dims[name], self.full[name]
        shape = tuple(d if type(d) is int else d(env) for d in dims)
        for axis, (size, most) in enumerate(zip(shape, full)):
            if not 0 <= size <= most:
                raise PlanError(
                    "buffer %r: axis %d (%s) is %d with %s, outside the buffer's %d"
                    % (name, axis, self.spelled(name)[axis], size, dict(env), most)
                )
        return shape


def binding_line(bound: Mapping[str, int]) -> str:
    """``binding: batch=3 seq=7``: every bound variable, by name."""
    return "binding: %s" % " ".join("%s=%d" % (n, bound[n]) for n in sorted(bound))


__all__ = ["Binding", "Dim", "binding_line", "read_dims"]
