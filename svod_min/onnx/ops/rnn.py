"""RNN, LSTM and GRU: one generated C kernel per node that loops over time, one call per (direction, batch row).

Batch rows and directions are independent recurrences, so each ``core_id`` call runs one of them from
its initial state to the end of its sequence (``sequence_lens``: a shorter row stops early, its Y rows
past the end are zero and Y_h/Y_c hold the state of its last step; a length outside [0, T] is an error:
constant, refused at build, from data, reported by the kernel, exit 2). The hidden (and cell) state lives
in Y_h (and Y_c), or in a temporary where the model does not ask for them; gate pre-activations go to a
scratch buffer. Both layouts are strides compiled in; only the default activations are implemented.
"""

from __future__ import annotations

from typing import Any, List, Optional

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, Rule, one_of, register
from ..kernels.rnn import rnn_kernel
from .lowering import Lowering

DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
#: Gate count per op: LSTM i, o, f, c; GRU z, r, h; RNN's one.
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def default_activations(op: str) -> Rule:
    """Only the default activations (Sigmoid, Tanh[, Tanh]) for each direction."""
    want = [a.lower() for a in DEFAULT_ACTIVATIONS[op]]

    def rule(value: Any) -> Optional[str]:
        names = [str(v).lower() for v in value]
        ok = len(names) in (len(want), 2 * len(want)) and names == want * (len(names) // len(want))
        return None if ok else "only the defaults %s per direction" % "/".join(DEFAULT_ACTIVATIONS[op])

    rule.doc = "/".join(DEFAULT_ACTIVATIONS[op])  # type: ignore[attr-defined]
    return rule


def _optional(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else ""


def _rnn_check(graph: Graph, node: Node) -> Optional[str]:
    for i in range(1, 3):
        if not graph.is_const(node.inputs[i]) and graph.values[node.inputs[i]].dtype != "float32":
            return "W and R must be float32"
    lens = _optional(node, 4)
    if lens and graph.values[lens].dtype != "int32":
        return "sequence_lens must be int32"
    return None


RNN_ATTRS = dict(
    activation_alpha=ANY,
    activation_beta=ANY,
    clip=ANY,
    direction=one_of("forward", "reverse", "bidirectional"),
    hidden_size=ANY,
    layout=one_of(0, 1),
)


@register(
    ["LSTM"],
    "generated C: one kernel looping over time, one call per (direction, batch row); Y, Y_h, Y_c",
    check=_rnn_check,
    dtypes=("float32", "int32"),
    activations=default_activations("LSTM"),
    input_forget=ANY,
    **RNN_ATTRS,
)
@register(
    ["RNN"],
    "generated C: one kernel looping over time, one call per (direction, batch row); Y, Y_h",
    check=_rnn_check,
    dtypes=("float32", "int32"),
    activations=default_activations("RNN"),
    **RNN_ATTRS,
)
@register(
    ["GRU"],
    "generated C: one kernel looping over time, one call per (direction, batch row); Y, Y_h",
    check=_rnn_check,
    dtypes=("float32", "int32"),
    activations=default_activations("GRU"),
    linear_before_reset=ANY,
    **RNN_ATTRS,
)
def lower_rnn(L: Lowering, node: Node) -> None:
    op = node.op
    x, w, r = node.inputs[:3]
    xs, ws = L.value(x).shape, L.value(w).shape
    layout = int(node.attrs.get("layout", 0))
    seq, batch = (xs[0], xs[1]) if layout == 0 else (xs[1], xs[0])
    dirs, gates = ws[0], ws[1]
    hidden = gates // GATES[op]
    outs = list(node.outputs) + [""] * (3 - len(node.outputs))
    k = {
        "T": seq,
        "B": batch,
        "I": xs[2],
        "H": hidden,
        "D": dirs,
        "G": gates,
        "G2": 2 * gates,
        "layout": layout,
        "reverse": node.attrs.get("direction", "forward") == "reverse",
        "y": bool(outs[0]),
        "bias": bool(_optional(node, 3)),
        "lens": bool(_optional(node, 4)),
        "h0": bool(_optional(node, 5)),
        "c0": op == "LSTM" and bool(_optional(node, 6)),
        "peephole": op == "LSTM" and bool(_optional(node, 7)),
    }
    state_shape = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    yh = outs[1] or L.temp(state_shape, hint="h")
    buffers: List[str] = ([outs[0]] if outs[0] else []) + [yh]
    if op == "LSTM":
        buffers.append(outs[2] or L.temp(state_shape, hint="c"))
    buffers.append(L.temp((dirs * batch, gates + hidden), hint="gates"))
    buffers += [x, w, r] + [n for n in (_optional(node, 3), _optional(node, 4), _optional(node, 5)) if n]
    if op == "LSTM":
        buffers += [n for n in (_optional(node, 6), _optional(node, 7)) if n]
    written = list(range(int(k["y"]) + 1 + int(op == "LSTM") + 1))  # Y, Y_h, Y_c, scratch come first
    kernel = rnn_kernel(op, k, node.attrs)
    lens = _optional(node, 4)
    if lens:  # lengths from data (constant ones are checked at build: frontend/indices.py)
        why = "%r has %d time steps" % (x, seq)
        buffers.append(L.status_slots(node.label(), "sequence_lens %r" % lens, (batch,), why, kernel.chunks))
        written.append(len(buffers) - 1)
    L.source(kernel, buffers, outputs=written)
