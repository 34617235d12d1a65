"""How many elements folding a node would materialise, known before the reference evaluator runs it.

Constant folding runs a node in numpy at build time; an Expand or a ConstantOfShape of a constant to 2^32
elements would allocate 16 GiB there before any size check on its result. :func:`fold_elements` reads the
outputs' sizes from shape inference or, where inference left a shape open, from the constant operands of
the ops whose output size comes from their operands' values (Expand, ConstantOfShape, Tile, Range);
:func:`too_big_to_fold` says when the node must stay a node.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np


def fold_elements(node: Any, consts: Dict[str, np.ndarray], shapes: Dict[str, Tuple[int, ...]]) -> Optional[int]:
    """The most elements one of ``node``'s outputs would hold, or None when that cannot be told beforehand."""
    sizes = []
    for name in node.output:
        if not name:
            continue
        if name in shapes:
            sizes.append(_product(shapes[name]))
        elif node.op_type in _FROM_DATA:
            size = _FROM_DATA[node.op_type](node, consts)
            if size is None:
                return None
            sizes.append(size)
        else:
            return None
    return max(sizes, default=0)


def too_big_to_fold(node: Any, consts: Dict[str, np.ndarray], shapes: Dict[str, Tuple[int, ...]], limit: int) -> bool:
    """True when folding ``node`` would materialise more than ``limit`` elements: it stays a node, lowered and
    counted in the plan's memory budget (a size that cannot be told beforehand is checked after folding)."""
    size = fold_elements(node, consts, shapes)
    return size is not None and size > limit


def _product(dims: Sequence[int]) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


def _values(consts: Dict[str, np.ndarray], node: Any, i: int) -> Optional[np.ndarray]:
    name = node.input[i] if i < len(node.input) else ""
    return consts.get(name) if name else None


def _expand(node: Any, consts: Dict[str, np.ndarray]) -> Optional[int]:
    data, shape = _values(consts, node, 0), _values(consts, node, 1)
    if data is None or shape is None:
        return None
    dims = [int(d) for d in np.asarray(shape).reshape(-1)]
    rank = max(len(dims), data.ndim)
    a = [1] * (rank - data.ndim) + list(data.shape)
    b = [1] * (rank - len(dims)) + dims
    return _product(max(x, y) if min(x, y) != 0 else 0 for x, y in zip(a, b))


def _constant_of_shape(node: Any, consts: Dict[str, np.ndarray]) -> Optional[int]:
    shape = _values(consts, node, 0)
    return None if shape is None else _product(max(0, int(d)) for d in np.asarray(shape).reshape(-1))


def _tile(node: Any, consts: Dict[str, np.ndarray]) -> Optional[int]:
    data, repeats = _values(consts, node, 0), _values(consts, node, 1)
    if data is None or repeats is None:
        return None
    return int(data.size) * _product(max(0, int(r)) for r in np.asarray(repeats).reshape(-1))


def _range(node: Any, consts: Dict[str, np.ndarray]) -> Optional[int]:
    start, limit, delta = (_values(consts, node, i) for i in range(3))
    if start is None or limit is None or delta is None or any(np.size(v) != 1 for v in (start, limit, delta)):
        return None  # not Range's scalars: no size to foresee, and the fold (or the op table) names the fault
    if float(np.asarray(delta).reshape(-1)[0]) == 0:
        return None
    lo, hi, step = (float(np.asarray(v).reshape(-1)[0]) for v in (start, limit, delta))
    count = (hi - lo) / step
    return max(0, math.ceil(count)) if math.isfinite(count) else None


_FROM_DATA = {"Expand": _expand, "ConstantOfShape": _constant_of_shape, "Tile": _tile, "Range": _range}

__all__ = ["fold_elements", "too_big_to_fold"]
