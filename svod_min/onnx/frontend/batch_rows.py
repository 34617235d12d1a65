"""Which values of a model carry the batch, and proof that every op keeps batch rows apart (a ranged build).

The model is read at two batch sizes (:mod:`.ranged`). A value whose shape is the same in both graphs does not
depend on the batch; one whose first dim is the batch in each (and nothing else differs) carries it; anything else
(the batch on another axis, a dim that doubles with it, a constant computed from it) is refused by name. Then each op
that reads a batched value must be one that computes each batch row from that row alone (an elementwise op, a
convolution, a Softmax over another axis...): only then is running the kernels on a prefix of every batched buffer
the same as running the model on fewer rows. An op that mixes rows (a reduction over the batch, a Softmax over axis
0, BatchNormalization in training mode) or that this release has not been taught about is refused by name,
suggesting a fixed ``--shape``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ...error import UnsupportedModelError
from .ir import Graph, Node

#: Ops that compute each row of every output from the same row of their batched inputs, whatever their attributes
#: (the graph comparison already holds the batch to the first axis of every value).
ROWWISE = frozenset(
    """
    Abs Acos Acosh Add And Asin Asinh Atan Atanh AveragePool BitShift BitwiseAnd BitwiseNot BitwiseOr BitwiseXor Cast
    CastLike Ceil Celu Clip Conv ConvInteger ConvTranspose Cos Cosh DepthToSpace DequantizeLinear Div Elu Equal Erf Exp
    Expand Flatten Floor Gelu GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual GridSample HardSigmoid HardSwish
    Identity InstanceNormalization IsInf IsNaN LRN LeakyRelu Less LessOrEqual Log LpPool Max MaxPool Mean Min Mod Mul
    Neg Not Or PRelu Pad Pow QLinearConv QuantizeLinear Reciprocal Relu Reshape Resize Round Selu Shrink Sigmoid Sign
    Sin Sinh Softplus Softsign SpaceToDepth Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile Transpose Unsqueeze
    Upsample Where Xor svod.Affine svod.BlockedAffine svod.BlockedConv svod.BlockedDepthwiseConv svod.BlockedGlobalPool
    svod.BlockedPool svod.FromBlocked svod.Lookup8 svod.ToBlocked
    """.split()
)

#: The constant inputs that only give an output's shape (the plan is lowered at the largest batch, and the graph
#: comparison checks that the output's shape follows the batch): a constant computed from the batch may feed them.
SHAPE_INPUTS = frozenset({("Reshape", 1), ("Expand", 1), ("Tile", 1), ("Resize", 3), ("Upsample", 1)})

#: A start this far below zero clamps to the first row at any batch size.
INT32_LIMIT = 1 << 31


@dataclass(frozen=True)
class BatchRows:
    """A ranged build's batch: the plan variable, its range, and the graph's values that carry it in their first
    dim with their rows per batch row (:func:`batched_values`). The plan is lowered at ``hi``."""

    variable: str
    lo: int
    hi: int
    values: Mapping[str, int]


#: The batched values a rule asks about (their rows per batch row).
Batched = Mapping[str, int]
Rule = Callable[[Graph, Node, Batched], Optional[str]]


def batched_values(a: Graph, b: Graph, n_a: int, n_b: int) -> Dict[str, int]:
    """The values of ``a`` (read at batch ``n_a``) that carry the batch in their first dim, found against ``b`` (the
    same model at ``n_b``), each with its rows per batch row (a first dim of k x batch: the heads of an attention
    folded into it, k rows per batch row, in batch order); UnsupportedModelError naming the first value or node that
    does not keep rows apart."""
    _same_nodes(a, b)
    consumers = a.consumers()
    batched: Dict[str, int] = {}
    for name, va in a.values.items():
        vb = b.values.get(name)
        if vb is None or vb.dtype != va.dtype:
            raise _refusal("value %r is not the same at batch %d and %d" % (name, n_a, n_b))
        if va.const is not None or vb.const is not None:
            per_row = _batched_constant(va.const, vb.const, n_a, n_b)
            if per_row:
                batched[name] = per_row
            else:
                _same_constant(name, va.const, vb.const, consumers.get(name, []), n_a, n_b)
        elif va.shape != vb.shape:
            per_row = _rows_per_batch_row(va.shape, vb.shape, n_a, n_b)
            if not per_row:
                raise _refusal(
                    "value %r is %s at batch %d and %s at batch %d: the batch must stay its first dim"
                    % (name, list(va.shape), n_a, list(vb.shape), n_b)
                )
            batched[name] = per_row
    for node in a.nodes:
        _check_node(a, node, batched)
    return batched


def _same_nodes(a: Graph, b: Graph) -> None:
    if [(n.op, n.inputs, n.outputs) for n in a.nodes] != [(n.op, n.inputs, n.outputs) for n in b.nodes]:
        raise _refusal("the model's graph is not the same at two batch sizes (its shape logic depends on the batch)")
    if a.inputs != b.inputs or a.outputs != b.outputs:
        raise _refusal("the model's inputs or outputs are not the same at two batch sizes")


def _batched_constant(ca: Optional[np.ndarray], cb: Optional[np.ndarray], n_a: int, n_b: int) -> int:
    """Rows per batch row of a constant the batch sized (an Expand or Tile of a constant to the batch, folded): its
    rows at the smaller size are the first rows at the larger, so a prefix is right at any binding. 0 otherwise."""
    if ca is None or cb is None or ca.shape == cb.shape:
        return 0
    per_row = _rows_per_batch_row(ca.shape, cb.shape, n_a, n_b)
    return per_row if per_row and np.array_equal(ca[: cb.shape[0]], cb, equal_nan=True) else 0


def _same_constant(
    name: str, ca: Optional[np.ndarray], cb: Optional[np.ndarray], users: Sequence[Node], n_a: int, n_b: int
) -> None:
    """A constant equal at both sizes, or one computed from the batch that only gives shapes."""
    if ca is not None and cb is not None and ca.shape == cb.shape and np.array_equal(ca, cb):
        return
    for node in users:
        positions = [i for i, v in enumerate(node.inputs) if v == name]
        if any((node.op, i) not in SHAPE_INPUTS for i in positions):
            raise _refusal(
                "constant %r is computed from the batch size (it differs at batch %d and %d) and %s reads it as "
                "data" % (name, n_a, n_b, node.label())
            )


def _rows_per_batch_row(sa: Sequence[int], sb: Sequence[int], n_a: int, n_b: int) -> int:
    """k where the first dim is k x the batch at both sizes and nothing else differs, else 0."""
    if len(sa) != len(sb) or not sa or tuple(sa[1:]) != tuple(sb[1:]) or sa[0] % n_a or sb[0] % n_b:
        return 0
    k = sa[0] // n_a
    return k if k >= 1 and sb[0] == k * n_b else 0


#: Ops that may change how many rows of a value one batch row owns (the batch-major order stays: a Reshape of
#: [batch, 6, T, D] to [batch x 6, T, D]); every other op keeps it (a Tile or Resize that doubles axis 0 would not
#: keep the batch order, or mixes rows).
REGROUPING = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def _check_node(g: Graph, node: Node, batched: Mapping[str, int]) -> None:
    ins = [v for v in node.inputs if v and v in batched]
    if not ins:
        return
    unbatched_out = [v for v in node.outputs if v and v not in batched and g.values[v].size > 0]
    if unbatched_out:
        raise _refusal(
            "%s reads batched %r but its output %r does not follow the batch" % (node.label(), ins[0], unbatched_out[0])
        )
    regrouped = [v for v in node.outputs if v in batched and batched[v] != batched[ins[0]]]
    if regrouped and node.op not in REGROUPING:
        raise _refusal(
            "%s: its output %r holds %d rows per batch row, its input %r %d"
            % (node.label(), regrouped[0], batched[regrouped[0]], ins[0], batched[ins[0]])
        )
    if node.op in ROWWISE:
        return
    rule = RULES.get(node.op)
    why = "this release does not know it keeps batch rows apart" if rule is None else rule(g, node, batched)
    if why:
        raise _refusal("%s: %s" % (node.label(), why))


def _refusal(what: str) -> UnsupportedModelError:
    return UnsupportedModelError("ranged batch: %s; build with a fixed --shape (or --dim) for this model" % what)


# -- the rules of ops that keep rows apart only with some attributes --------------------------------------------


def _rank(g: Graph, name: str) -> int:
    return len(g.values[name].shape)


def _axis(node: Node, rank: int, default: int) -> int:
    axis = int(node.attrs.get("axis", default))
    return axis + rank if axis < 0 else axis


def _not_batch_axis(default: Callable[[Graph, Node], int], first_only: bool = True) -> Rule:
    """An op over one axis (its ``axis`` attribute): the batch's axis 0 must not be it. ``first_only``: the axis is
    the first input's (a Gather's table: an unbatched table may be read along axis 0), else every input's."""

    def rule(g: Graph, node: Node, batched: Batched) -> Optional[str]:
        if first_only and node.inputs[0] not in batched:
            return None
        axis = _axis(node, _rank(g, node.inputs[0]), default(g, node))
        return "it works along axis 0, the batch" if axis == 0 else None

    return rule


def _softmax_default(g: Graph, node: Node) -> int:
    return 1 if g.opset < 13 else -1


def _reduce(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    axes: Optional[List[int]] = None
    if "axes" in node.attrs:
        axes = [int(a) for a in node.attrs["axes"]]
    elif len(node.inputs) > 1 and node.inputs[1]:
        if not g.is_const(node.inputs[1]):
            return "its axes are computed at run time"
        axes = [int(a) for a in g.const(node.inputs[1]).ravel()]
    rank = _rank(g, node.inputs[0])
    if not axes:
        return None if node.attrs.get("noop_with_empty_axes", 0) else "it reduces over every axis, the batch's too"
    return "it reduces over axis 0, the batch" if any(a % max(rank, 1) == 0 for a in axes) else None


def _matmul(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    operands = (0, 3) if node.op == "QLinearMatMul" else (0, 1)
    a, b = (node.inputs[i] for i in operands)
    if any(v in batched for i, v in enumerate(node.inputs) if i not in operands):
        return "its scales or zero points follow the batch"
    if b in batched and (_rank(g, b) < 3 or (a in batched and _rank(g, a) != _rank(g, b))):
        return "its second operand carries the batch on a contracted or broadcast axis"
    if a in batched and _rank(g, a) < 2:
        return "its first operand is a batched vector"
    return None


def _gemm(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    if node.attrs.get("transA", 0) or any(v in batched for v in node.inputs[1:]):
        return "the batch is not the rows of its first operand alone"
    return None


def _slice(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    """A Slice may name axis 0 only to keep every row: start 0, step 1 (the graph comparison checks the end)."""
    if any(v in batched for v in node.inputs[1:]):
        return "its starts, ends or steps follow the batch"
    parts = [node.inputs[i] if len(node.inputs) > i else "" for i in (1, 3, 4)]
    if any(p and not g.is_const(p) for p in parts):
        return "its starts, axes or steps are computed at run time"
    starts = [int(v) for v in g.const(parts[0]).ravel()]
    axes = [int(v) for v in g.const(parts[1]).ravel()] if parts[1] else list(range(len(starts)))
    steps = [int(v) for v in g.const(parts[2]).ravel()] if parts[2] else [1] * len(starts)
    rank = _rank(g, node.inputs[0])
    for start, axis, step in zip(starts, axes, steps):
        if axis % rank == 0 and (step != 1 or not (start == 0 or start <= -INT32_LIMIT)):
            return "it slices axis 0, the batch (only start 0 and step 1 keep every row)"
    return None


def _topk(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    if len(node.inputs) > 1 and node.inputs[1] in batched:
        return "its k follows the batch"
    return _not_batch_axis(lambda g, n: -1)(g, node, batched)


def _cumsum(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    if not g.is_const(node.inputs[1]):
        return "its axis is computed at run time"
    axis = int(g.const(node.inputs[1]).ravel()[0])
    return "it sums along axis 0, the batch" if axis % _rank(g, node.inputs[0]) == 0 else None


def _recurrent(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    return None if node.attrs.get("layout", 0) == 1 else "with layout 0 the batch is its second axis"


def _batch_norm(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    if node.attrs.get("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        return "in training mode it normalises by the batch's statistics"
    if any(v in batched for v in node.inputs[1:]):
        return "its statistics follow the batch"
    return None


def _only_first_batched(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    """Inputs after the first (indices, scales, statistics) must not follow the batch."""
    later = [v for v in node.inputs[1:] if v in batched]
    return "its input %r follows the batch (only its first may)" % later[0] if later else None


def _both(*rules: Rule) -> Rule:
    def rule(g: Graph, node: Node, batched: Batched) -> Optional[str]:
        return next((why for why in (r(g, node, batched) for r in rules) if why), None)

    return rule


def _layer_norm(g: Graph, node: Node, batched: Batched) -> Optional[str]:
    return _both(_not_batch_axis(lambda g, n: -1), _only_first_batched)(g, node, batched)


RULES: Dict[str, Rule] = {
    "Softmax": _not_batch_axis(_softmax_default),
    "LogSoftmax": _not_batch_axis(_softmax_default),
    "Hardmax": _not_batch_axis(_softmax_default),
    "Concat": _not_batch_axis(lambda g, n: 0, first_only=False),
    "Split": _not_batch_axis(lambda g, n: 0),
    "ArgMax": _not_batch_axis(lambda g, n: 0),
    "ArgMin": _not_batch_axis(lambda g, n: 0),
    "LpNormalization": _not_batch_axis(lambda g, n: -1),
    "Gather": _both(_only_first_batched, _not_batch_axis(lambda g, n: 0)),
    "GatherElements": _both(_only_first_batched, _not_batch_axis(lambda g, n: 0)),
    "LayerNormalization": _layer_norm,
    "TopK": _topk,
    "CumSum": _cumsum,
    "BatchNormalization": _batch_norm,
    "MatMul": _matmul,
    "MatMulInteger": _matmul,
    "QLinearMatMul": _matmul,
    "Gemm": _gemm,
    "Slice": _slice,
    "LSTM": _recurrent,
    "GRU": _recurrent,
    "RNN": _recurrent,
    **{
        op: _reduce
        for op in (
            "ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum "
            "ReduceSumSquare"
        ).split()
    },
}


__all__ = ["BatchRows", "REGROUPING", "RULES", "ROWWISE", "SHAPE_INPUTS", "batched_values"]
