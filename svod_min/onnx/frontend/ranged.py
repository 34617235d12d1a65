"""Ranged dims (``build --shape x=1..8,3,224,224``, ``--dim N=1..8``): one bundle for every batch size in a range.

A ranged dim becomes one plan variable. This release ranges the leading (batch) dim only: the model is read at the
range's largest value and at one less, and :mod:`.batch_rows` compares the two graphs to find which values carry the
batch and to prove that every op treats batch rows independently. The plan is then lowered once, at the largest
value; at run time a binding below it runs the same kernels on a prefix of each batched buffer (docs/onnx.md,
"Ranged batch").
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from ...error import UnsupportedModelError

#: The plan variable a ranged dim becomes when its name is not an identifier the plan can use.
DEFAULT_VARIABLE = "batch"
#: Names a plan variable may not take: the plan's own thread variables and the size language's functions.
RESERVED = frozenset({"core_id", "core_id_count", "min", "max", "ceildiv"})


def plan_variable(name: str) -> str:
    """The plan variable a ranged ``--dim NAME`` becomes: NAME where the size language can name it (an identifier,
    not a Python keyword such as ``None`` or ``if``, not a reserved name), else ``batch``."""
    usable = name.isidentifier() and name.isascii() and not keyword.iskeyword(name) and name not in RESERVED
    return name if usable else DEFAULT_VARIABLE


@dataclass(frozen=True)
class DimRange:
    """An inclusive range of sizes a dim takes at run time: ``--shape x=1..8,...`` or ``--dim N=1..8``."""

    lo: int
    hi: int

    def __post_init__(self) -> None:
        if not 1 <= self.lo <= self.hi:
            raise UnsupportedModelError(
                "range %d..%d: a ranged dim needs 1 <= MIN <= MAX (an empty batch is not a binding)"
                % (self.lo, self.hi)
            )

    def __str__(self) -> str:
        return "%d..%d" % (self.lo, self.hi)


Dim = Union[int, DimRange]


def parse_dim(text: str) -> Dim:
    """``"8"`` -> 8, ``"1..8"`` -> DimRange(1, 8); ValueError otherwise."""
    lo, sep, hi = text.strip().partition("..")
    if not sep:
        return int(text)
    return DimRange(int(lo), int(hi))


@dataclass(frozen=True)
class BatchRange:
    """The build's ranged dim: the plan variable it becomes and its range."""

    variable: str
    lo: int
    hi: int

    @property
    def alternate(self) -> int:
        """The second size the model is read at: one below the largest (two sizes tell the batch from a constant)."""
        return self.hi - 1 if self.hi > 1 else 2


def batch_range(dims: Mapping[str, Dim], shapes: Mapping[str, Sequence[Dim]]) -> Optional[BatchRange]:
    """The one range the build's dims and shapes name (None: a fixed build); UnsupportedModelError for a range on a
    dim other than an input's first, or two different ranges."""
    found: List[Tuple[str, DimRange]] = []
    for name, dim in dims.items():
        if isinstance(dim, DimRange):
            found.append((plan_variable(name), dim))
    for name, shape in shapes.items():
        for axis, dim in enumerate(shape):
            if not isinstance(dim, DimRange):
                continue
            if axis != 0:
                raise UnsupportedModelError(
                    "--shape %s: dim %d is ranged (%s); this release ranges the leading (batch) dim only: build "
                    "with a fixed size for it" % (name, axis, dim)
                )
            found.append((DEFAULT_VARIABLE, dim))
    if not found:
        return None
    ranges = {r for _, r in found}
    if len(ranges) > 1:
        raise UnsupportedModelError(
            "ranges %s: every ranged dim is the one batch, so they must be the same range"
            % ", ".join(sorted(str(r) for r in ranges))
        )
    named = [v for v, _ in found if v != DEFAULT_VARIABLE]
    variable = named[0] if len(set(named)) == 1 else DEFAULT_VARIABLE
    only = found[0][1]
    return BatchRange(variable, only.lo, only.hi)


def at_size(
    dims: Mapping[str, Dim], shapes: Mapping[str, Sequence[Dim]], size: int
) -> Tuple[Dict[str, int], Dict[str, List[int]]]:
    """The build's dims and shapes with every range set to ``size``."""

    def fix(dim: Any) -> int:
        return size if isinstance(dim, DimRange) else int(dim)

    return {n: fix(d) for n, d in dims.items()}, {n: [fix(d) for d in s] for n, s in shapes.items()}


__all__ = [
    "DEFAULT_VARIABLE",
    "RESERVED",
    "BatchRange",
    "Dim",
    "DimRange",
    "at_size",
    "batch_range",
    "parse_dim",
    "plan_variable",
]
