"""The index rules: which inputs of which ONNX ops hold indices, and the range each index must lie in.

ONNX calls an index outside its op's range an error (onnxruntime refuses the model): Gather, GatherElements,
ScatterElements take ``[-n, n-1]`` along their axis (a negative index counts from the end), GatherND and
ScatterND the same per component of an index tuple, TopK's k ``[0, n]``, Split's sizes ``[0, n]``, the axes of
Slice and Pad ``[-r, r-1]``, ReverseSequence's and RNN/LSTM/GRU's lengths ``[0, steps]``, TensorScatter's write
indices ``[0, max - seq]`` (circular: ``[0, 2^63 - 1]``). Slice's starts and ends are clamped by the spec and OneHot
maps an index outside ``[-depth, depth-1]`` to all off values: neither is an error, so neither has a rule here.

One table serves both places a constant index meets the front end: the fold step (``parse.py``) declines to
fold a node whose constant indices break its rule (onnx's reference evaluator wraps or clamps some of them:
GatherElements with index 4 on an axis of 4 returns element 0), and the op table's check (``table.py``) refuses
the node with :class:`IndexOutOfRangeError` naming the node, the index, its position and the bound. Indices that
come from data are checked by the kernel at run time (docs/onnx.md, "Indices").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

Shape = Tuple[int, ...]


@dataclass
class BadIndex:
    """The first index (in C order) of one input that breaks its rule."""

    what: str  # the input, as the message names it: "indices 'i'"
    value: int
    position: Tuple[int, ...]
    lo: int
    hi: int
    why: str  # where the bound comes from: "axis 0 of 'x' has 4 elements"
    noun: str = "index"  # what one element is: "index", "axis", "k", "split size"

    def message(self) -> str:
        return "%s %d at position %s of %s is out of range [%d, %d] (%s)" % (
            self.noun,
            self.value,
            list(self.position),
            self.what,
            self.lo,
            self.hi,
            self.why,
        )


@dataclass
class Operand:
    """One input of a node as a rule sees it: its name, static shape (None: unknown) and data (None: not constant)."""

    name: str
    shape: Optional[Shape]
    const: Optional[np.ndarray]


Rule = Callable[[Mapping[str, Any], List[Operand], int], Optional[BadIndex]]
RULES: Dict[str, Rule] = {}


def rule(*ops: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for op in ops:
            RULES[op] = fn
        return fn

    return deco


def first_outside(data: np.ndarray, lo: Any, hi: Any) -> Optional[Tuple[Tuple[int, ...], int]]:
    """(position, value) of the first element of ``data`` outside ``[lo, hi]`` (bounds broadcast against it)."""
    values = np.asarray(data)
    if values.dtype.kind not in "iu":
        values = values.astype(np.int64)
    bad = (values < lo) | (values > hi)
    if not bad.any():
        return None
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return at, int(values[at])


def _axis(attrs: Mapping[str, Any], rank: int, default: int = 0) -> Optional[int]:
    """The node's axis attribute as an index into ``rank`` dims; None when it is itself out of range (shape
    inference names that)."""
    axis = int(attrs.get("axis", default))
    axis = axis + rank if axis < 0 else axis
    return axis if 0 <= axis < rank else None


def _input(ops: List[Operand], i: int) -> Optional[Operand]:
    return ops[i] if len(ops) > i and ops[i].name else None


def _along_axis(what: str, attrs: Mapping[str, Any], ops: List[Operand]) -> Optional[BadIndex]:
    """indices (input 1) in [-n, n-1], n the size of data (input 0) along ``axis``."""
    data, idx = _input(ops, 0), _input(ops, 1)
    if data is None or idx is None or idx.const is None or data.shape is None:
        return None
    axis = _axis(attrs, len(data.shape))
    if axis is None:
        return None
    n = data.shape[axis]
    hit = first_outside(idx.const, -n, n - 1)
    if hit is None:
        return None
    return BadIndex(
        "%s %r" % (what, idx.name), hit[1], hit[0], -n, n - 1, "axis %d of %r has %d elements" % (axis, data.name, n)
    )


@rule("Gather", "GatherElements", "ScatterElements", "Scatter")
def _gather(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    return _along_axis("indices", attrs, ops)


@rule("GatherND", "ScatterND")
def _gather_nd(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    """Each index tuple (the last axis of indices) addresses data's dims from ``batch_dims`` on."""
    data, idx = _input(ops, 0), _input(ops, 1)
    if data is None or idx is None or idx.const is None or data.shape is None or idx.const.ndim == 0:
        return None
    batch = int(attrs.get("batch_dims", 0))
    k = idx.const.shape[-1]
    dims = np.array(data.shape[batch : batch + k], dtype=np.int64)
    if len(dims) != k:
        return None  # a tuple longer than data's rank: a shape error, which shape inference names
    hit = first_outside(idx.const, -dims, dims - 1)
    if hit is None:
        return None
    n = int(dims[hit[0][-1]])
    return BadIndex(
        "indices %r" % idx.name,
        hit[1],
        hit[0],
        -n,
        n - 1,
        "component %d of an index tuple addresses axis %d of %r, %d elements"
        % (hit[0][-1], batch + hit[0][-1], data.name, n),
    )


@rule("TopK")
def _topk(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    data = _input(ops, 0)
    if data is None or data.shape is None:
        return None
    axis = _axis(attrs, len(data.shape), -1)
    if axis is None:
        return None
    n = data.shape[axis]
    k_op = _input(ops, 1)
    k = k_op.const if k_op is not None else (np.array([attrs["k"]]) if "k" in attrs else None)
    if k is None:
        return None
    hit = first_outside(np.asarray(k).reshape(-1), 0, n)
    if hit is None:
        return None
    what = "k %r" % k_op.name if k_op is not None else "attribute k"
    return BadIndex(what, hit[1], hit[0], 0, n, "axis %d of %r has %d elements" % (axis, data.name, n), "k")


@rule("Split")
def _split(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    data = _input(ops, 0)
    if data is None or data.shape is None:
        return None
    axis = _axis(attrs, len(data.shape))
    if axis is None:
        return None
    n = data.shape[axis]
    sizes_op = _input(ops, 1)
    sizes = sizes_op.const if sizes_op is not None else attrs.get("split")
    if sizes is None:
        return None
    hit = first_outside(np.asarray(sizes, dtype=np.int64).reshape(-1), 0, n)
    if hit is None:
        return None
    what = "split sizes %r" % sizes_op.name if sizes_op is not None else "attribute split"
    why = "axis %d of %r has %d elements" % (axis, data.name, n)
    return BadIndex(what, hit[1], hit[0], 0, n, why, "split size")


def _axes(what: str, values: Any, data: Operand) -> Optional[BadIndex]:
    if values is None or data.shape is None:
        return None
    r = len(data.shape)
    hit = first_outside(np.asarray(values, dtype=np.int64).reshape(-1), -r, r - 1)
    if hit is None:
        return None
    return BadIndex(what, hit[1], hit[0], -r, r - 1, "%r has %d dims" % (data.name, r), "axis")


@rule("Slice")
def _slice(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    """Axes only: starts and ends are clamped by the spec, never an error."""
    data = _input(ops, 0)
    if data is None:
        return None
    if opset < 10:
        return _axes("attribute axes", attrs.get("axes"), data)
    axes = _input(ops, 3)
    return None if axes is None else _axes("axes %r" % axes.name, axes.const, data)


@rule("Pad")
def _pad(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    data, axes = _input(ops, 0), _input(ops, 3)
    if data is None or axes is None:
        return None
    return _axes("axes %r" % axes.name, axes.const, data)


@rule("ReverseSequence")
def _reverse_sequence(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    data, lens = _input(ops, 0), _input(ops, 1)
    time_axis = int(attrs.get("time_axis", 0))
    if data is None or data.shape is None or lens is None or lens.const is None or time_axis not in (0, 1):
        return None
    if len(data.shape) < 2:
        return None
    n = data.shape[time_axis]
    hit = first_outside(np.asarray(lens.const).reshape(-1), 0, n)
    if hit is None:
        return None
    why = "axis %d of %r has %d time steps" % (time_axis, data.name, n)
    return BadIndex("sequence_lens %r" % lens.name, hit[1], hit[0], 0, n, why, "sequence length")


@rule("TensorScatter")
def _tensor_scatter(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    """write_indices (input 2), one per batch element: [0, max - seq] in linear mode (the update's rows all land in
    the cache), any non-negative index in circular mode (taken modulo max)."""
    past, update, w = _input(ops, 0), _input(ops, 1), _input(ops, 2)
    if past is None or update is None or w is None or w.const is None or past.shape is None or update.shape is None:
        return None
    axis = _axis(attrs, len(past.shape), -2)
    if axis is None or len(update.shape) != len(past.shape):
        return None  # a shape error, which the op table names
    n, seq = past.shape[axis], update.shape[axis]
    circular = attrs.get("mode", "linear") == "circular"
    hi = (1 << 63) - 1 if circular else n - seq
    hit = first_outside(np.asarray(w.const).reshape(-1), 0, hi)
    if hit is None:
        return None
    why = "axis %d of %r has %d positions, the update %d%s" % (
        axis,
        past.name,
        n,
        seq,
        " (circular: any non-negative index, modulo %d)" % n if circular else "",
    )
    return BadIndex("write_indices %r" % w.name, hit[1], hit[0], 0, hi, why, "write index")


@rule("RNN", "LSTM", "GRU")
def _recurrence(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    """sequence_lens (input 4), one per batch row: [0, steps] (onnxruntime refuses any other)."""
    x, lens = _input(ops, 0), _input(ops, 4)
    if x is None or x.shape is None or len(x.shape) != 3 or lens is None or lens.const is None:
        return None
    steps = x.shape[1 if int(attrs.get("layout", 0)) else 0]
    hit = first_outside(np.asarray(lens.const).reshape(-1), 0, steps)
    if hit is None:
        return None
    why = "%r has %d time steps" % (x.name, steps)
    return BadIndex("sequence_lens %r" % lens.name, hit[1], hit[0], 0, steps, why, "sequence length")


def unpool_default_shape(attrs: Mapping[str, Any], shape: Sequence[int]) -> List[int]:
    """MaxUnpool's output shape without ``output_shape``: N, C, then ``(in - 1) * stride - pads + kernel`` per
    spatial axis."""
    kernel = [int(k) for k in attrs.get("kernel_shape", [])]
    rank = len(kernel)
    strides = [int(s) for s in attrs.get("strides", [1] * rank)]
    pads = [int(p) for p in attrs.get("pads", [0] * (2 * rank))]
    spatial = [(int(shape[2 + a]) - 1) * strides[a] - pads[a] - pads[rank + a] + kernel[a] for a in range(rank)]
    return [int(shape[0]), int(shape[1])] + spatial


@rule("MaxUnpool")
def _max_unpool(attrs: Mapping[str, Any], ops: List[Operand], opset: int) -> Optional[BadIndex]:
    """Indices (input 1) are flat positions in the output: [0, size - 1], the size of output_shape (input 2) where it
    is a constant, else of the default shape."""
    data, idx, out = _input(ops, 0), _input(ops, 1), _input(ops, 2)
    if data is None or idx is None or idx.const is None or data.shape is None:
        return None
    kernel = attrs.get("kernel_shape", [])
    if len(data.shape) != len(kernel) + 2:
        return None  # a shape error, which shape inference names
    if out is not None and out.const is None:
        return None  # the output's shape is not known: the op table asks for a pin
    dims = [int(d) for d in out.const.reshape(-1)] if out is not None else unpool_default_shape(attrs, data.shape)
    size = int(np.prod(dims))
    hit = first_outside(idx.const, 0, size - 1)
    if hit is None:
        return None
    why = "a flat position in the output, shape %s" % dims
    return BadIndex("indices %r" % idx.name, hit[1], hit[0], 0, size - 1, why)


def check_indices(op: str, attrs: Mapping[str, Any], operands: Sequence[Operand], opset: int) -> Optional[BadIndex]:
    """The first constant index of the node that breaks its op's rule, or None (no rule, all in range, or its
    indices are not constants: those are the kernel's to check at run time)."""
    check = RULES.get(op)
    return None if check is None else check(attrs, list(operands), opset)


__all__ = ["BadIndex", "Operand", "RULES", "check_indices", "first_outside", "unpool_default_shape"]
