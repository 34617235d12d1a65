"""Shape contracts that onnx's shape inference leaves unchecked, checked per node before anything is lowered.

Strict shape inference (:func:`~svod_min.onnx.frontend.parse.infer`) already refuses most contradictions (broadcast
failures, axes out of range, a Concat of mismatched parts), but it accepts, among others, a Reshape to a shape of
another element count, a Conv whose weight expects other channels than its input has, and per-channel parameters
of the wrong length. Each of those would be lowered into a kernel that reads or writes past a buffer, or would be
refused only at run; :func:`contract_violation` says which one a node breaks, naming the tensors and their shapes.
"""

from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .ir import Graph, Node

Shape = Tuple[int, ...]

#: Ops whose output is their input's bytes under another shape (lowered as views): the element counts must agree.
VIEW_OPS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Cast"})
#: Ops whose inputs broadcast together (numpy rules) into their output.
BROADCAST_OPS = frozenset(
    {"Add", "Sub", "Mul", "Div", "Pow", "Sum", "Max", "Min", "Mean", "Where", "And", "Or", "Xor"}
    | {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}
)


def _size(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _show(graph: Graph, name: str) -> str:
    shown = name[: -len("~empty")] if name.endswith("~empty") else name  # the parser's constant for an empty input
    return "%r %s" % (shown, list(graph.values[name].shape))


def broadcast(shapes: Sequence[Shape]) -> Optional[Shape]:
    """The numpy broadcast of ``shapes``, or None when they do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out: List[int] = []
    for axis in range(rank):
        dims = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _inputs(node: Node, *positions: int) -> List[str]:
    return [node.inputs[i] if len(node.inputs) > i else "" for i in positions]


def _view(graph: Graph, node: Node) -> Optional[str]:
    x, y = node.inputs[0], node.outputs[0]
    nx, ny = graph.values[x].size, graph.values[y].size
    if nx != ny:
        return "%s of %s (%d elements) to %s (%d elements): the element counts differ" % (
            node.op,
            _show(graph, x),
            nx,
            _show(graph, y),
            ny,
        )
    return None


def _broadcasting(graph: Graph, node: Node) -> Optional[str]:
    ins = [n for n in node.inputs if n]
    if node.op in ("Add", "Sub", "Mul", "Div") and node.attrs.get("broadcast"):
        return None  # opset < 7's legacy broadcast: its own rules, checked by the op's table entry
    want = graph.values[node.outputs[0]].shape
    got = broadcast([graph.values[n].shape for n in ins])
    if got != want:
        what = "do not broadcast" if got is None else "broadcast to %s" % list(got)
        return "inputs %s %s, but the output %s" % (
            ", ".join(_show(graph, n) for n in ins),
            what,
            _show(graph, node.outputs[0]),
        )
    return None


def _conv(graph: Graph, node: Node) -> Optional[str]:
    x, w, b = _inputs(node, 0, 1, 2)
    xs, ws = graph.values[x].shape, graph.values[w].shape
    group = int(node.attrs.get("group", 1))
    if len(ws) != len(xs):
        return "input %s and weight %s differ in rank" % (_show(graph, x), _show(graph, w))
    if group < 1 or ws[0] % group:
        return "weight %s has %d output channels, not a multiple of group=%d" % (_show(graph, w), ws[0], group)
    if xs[1] != ws[1] * group:
        return "input %s has %d channels; weight %s with group=%d expects %d" % (
            _show(graph, x),
            xs[1],
            _show(graph, w),
            group,
            ws[1] * group,
        )
    if b and graph.values[b].shape != (ws[0],):
        return "bias %s must hold the %d output channels of weight %s" % (_show(graph, b), ws[0], _show(graph, w))
    return None


def _conv_transpose(graph: Graph, node: Node) -> Optional[str]:
    x, w, b = _inputs(node, 0, 1, 2)
    xs, ws = graph.values[x].shape, graph.values[w].shape
    group = int(node.attrs.get("group", 1))
    if len(ws) != len(xs):
        return "input %s and weight %s differ in rank" % (_show(graph, x), _show(graph, w))
    if group < 1 or ws[0] % group or xs[1] != ws[0]:
        return "input %s has %d channels; weight %s with group=%d expects %d" % (
            _show(graph, x),
            xs[1],
            _show(graph, w),
            group,
            ws[0],
        )
    if b and graph.values[b].shape != (ws[1] * group,):
        return "bias %s must hold the %d output channels" % (_show(graph, b), ws[1] * group)
    return None


def _per_channel(graph: Graph, node: Node) -> Optional[str]:
    x = node.inputs[0]
    xs = graph.values[x].shape
    channels = xs[1] if len(xs) > 1 else 1
    for name in node.inputs[1:]:
        if name and (graph.values[name].size != channels or len(graph.values[name].shape) != 1):
            return "%s must be 1-D, one value per channel of input %s (%d)" % (
                _show(graph, name),
                _show(graph, x),
                channels,
            )
    return None


def _prelu(graph: Graph, node: Node) -> Optional[str]:
    x, slope = node.inputs[0], node.inputs[1]
    xs = graph.values[x].shape
    if broadcast([xs, graph.values[slope].shape]) != xs:
        return "slope %s does not broadcast to input %s" % (_show(graph, slope), _show(graph, x))
    return None


def _gemm(graph: Graph, node: Node) -> Optional[str]:
    c = _inputs(node, 2)[0]
    out = graph.values[node.outputs[0]].shape
    if c and broadcast([out, graph.values[c].shape]) != out:
        return "C %s does not broadcast to the result %s" % (_show(graph, c), list(out))
    return None


def _rnn(graph: Graph, node: Node) -> Optional[str]:
    x, w, r, b = _inputs(node, 0, 1, 2, 3)
    gates = 4 if node.op == "LSTM" else 3
    hidden = int(node.attrs.get("hidden_size", graph.values[r].shape[-1] if r else 0))
    dirs = 2 if node.attrs.get("direction", "forward") == "bidirectional" else 1
    features = graph.values[x].shape[-1]
    want = {w: (dirs, gates * hidden, features), r: (dirs, gates * hidden, hidden)}
    if b:
        want[b] = (dirs, 2 * gates * hidden)
    batch = graph.values[x].shape[0 if int(node.attrs.get("layout", 0)) else 1]
    for state in _inputs(node, 5, 6):  # initial_h, initial_c (LSTM): one row per direction and batch item
        if state:
            want[state] = (batch, dirs, hidden) if int(node.attrs.get("layout", 0)) else (dirs, batch, hidden)
    for name, shape in want.items():
        if graph.values[name].shape != shape:
            return "%s must be %s (hidden_size=%d, %d direction(s), input features %d)" % (
                _show(graph, name),
                list(shape),
                hidden,
                dirs,
                features,
            )
    return None


def _transpose(graph: Graph, node: Node) -> Optional[str]:
    x = node.inputs[0]
    perm = node.attrs.get("perm")
    if perm is not None and sorted(perm) != list(range(len(graph.values[x].shape))):
        return "perm %s is not a permutation of the %d dims of input %s" % (
            list(perm),
            len(graph.values[x].shape),
            _show(graph, x),
        )
    return None


def _slice(graph: Graph, node: Node) -> Optional[str]:
    """starts, ends, axes and steps (opset 10 on) are 1-D and of one length."""
    parts = [n for n in node.inputs[1:5] if n]
    for name in parts:
        if len(graph.values[name].shape) != 1 or graph.values[name].size != graph.values[parts[0]].size:
            return "starts/ends/axes/steps must be 1-D and of one length: %s" % ", ".join(
                _show(graph, n) for n in parts
            )
    return None


def _split(graph: Graph, node: Node) -> Optional[str]:
    sizes = _inputs(node, 1)[0]
    if sizes and len(graph.values[sizes].shape) != 1:
        return "split sizes %s must be 1-D" % _show(graph, sizes)
    return None


def _layer_norm(graph: Graph, node: Node) -> Optional[str]:
    """Scale and B broadcast to the normalized dims, ``X.shape[axis:]``."""
    x = node.inputs[0]
    xs = graph.values[x].shape
    axis = int(node.attrs.get("axis", -1))
    normalized = tuple(xs[axis + len(xs) if axis < 0 else axis :])
    for name in _inputs(node, 1, 2):
        if name and broadcast([normalized, graph.values[name].shape]) != normalized:
            return "%s does not broadcast to the normalized dims %s of input %s" % (
                _show(graph, name),
                list(normalized),
                _show(graph, x),
            )
    return None


def _pad_amounts(graph: Graph, node: Node, rank: int) -> Optional[List[int]]:
    """Pad's begin and end amounts per axis (2 * rank values), None when not constant."""
    if graph.opset < 11:
        pads = node.attrs.get("pads", node.attrs.get("paddings"))
        return None if pads is None else [int(p) for p in pads]
    p, axes = _inputs(node, 1, 3)
    if not p or graph.values[p].const is None or (axes and graph.values[axes].const is None):
        return None
    raw = [int(v) for v in graph.values[p].const.reshape(-1)]
    picked = [int(a) % rank for a in graph.values[axes].const.reshape(-1)] if axes else list(range(rank))
    out = [0] * (2 * rank)
    for i, a in enumerate(picked):
        if i + len(picked) < len(raw):
            out[a], out[a + rank] = raw[i], raw[i + len(picked)]
    return out


def _pad(graph: Graph, node: Node) -> Optional[str]:
    """reflect, edge and wrap read the input's elements: an axis they pad keeps at least one (reflect: more than
    each pad), as onnxruntime requires."""
    mode = node.attrs.get("mode", "constant")
    x = node.inputs[0]
    xs = graph.values[x].shape
    pads = _pad_amounts(graph, node, len(xs)) if mode != "constant" and xs else None
    if pads is None or len(pads) != 2 * len(xs):
        return None
    for a, n in enumerate(xs):
        lo, hi = pads[a], pads[a + len(xs)]
        extent = n + min(lo, 0) + min(hi, 0)
        if (lo > 0 or hi > 0) and (extent < 1 or (mode == "reflect" and max(lo, hi) > extent - 1)):
            return "%s pads %d and %d on axis %d of %s, whose extent is %d after cropping" % (
                mode,
                lo,
                hi,
                a,
                _show(graph, x),
                extent,
            )
    return None


def _lrn(graph: Graph, node: Node) -> Optional[str]:
    size = node.attrs.get("size")
    if not isinstance(size, int) or size < 1:
        return "attribute size (required, 1 or more) is %r" % (size,)
    if len(graph.values[node.inputs[0]].shape) < 2:  # N x C x ...: the window runs over C
        return "input %s has no channel axis (LRN takes N x C x ...)" % _show(graph, node.inputs[0])
    return None


#: Ops whose first output is optional (an RNN's Y): their contract holds whichever outputs the node names.
OPTIONAL_FIRST_OUTPUT = frozenset({"LSTM", "GRU"})
#: Ops whose axis/axes attributes count the output's dims (the output has more than the input).
OUTPUT_AXES = frozenset({"Unsqueeze", "OneHot"})
#: Ops whose axis is a cut between dims, so ``r`` itself is a valid axis (Flatten at r: everything before the cut).
CUT_AXES = frozenset({"Flatten"})
#: Ops whose axis only matters when their scale (input 1) holds more than one value (per-axis quantization).
PER_AXIS_OPS = frozenset({"QuantizeLinear", "DequantizeLinear"})


def axis_attribute_violation(graph: Graph, node: Node) -> Optional[str]:
    """Why an ``axis``/``axes`` attribute of ``node`` lies outside ``[-r, r-1]`` of the tensor it counts (None when
    none does): ONNX calls that an invalid model, and a lowering would index a shape with it."""
    ref = (node.outputs[:1] if node.op in OUTPUT_AXES else node.inputs[:1]) or [""]
    if not ref[0] or ref[0] not in graph.values:
        return None
    if node.op in PER_AXIS_OPS:
        scale = _inputs(node, 1)[0]
        if not scale or graph.values[scale].size <= 1:
            return None
    r = len(graph.values[ref[0]].shape)
    hi = r if node.op in CUT_AXES else r - 1
    for attr in ("axis", "axes"):
        value = node.attrs.get(attr)
        values = value if isinstance(value, (list, tuple)) else [] if value is None else [value]
        for v in values:
            if not isinstance(v, int) or not -r <= v <= hi:
                return "attribute %s=%r is out of range [%d, %d] (%s has %d dims)" % (
                    attr,
                    value,
                    -r,
                    hi,
                    _show(graph, ref[0]),
                    r,
                )
    return None


CONTRACTS: Dict[str, Callable[[Graph, Node], Optional[str]]] = {
    **{op: _view for op in VIEW_OPS},
    **{op: _broadcasting for op in BROADCAST_OPS},
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "InstanceNormalization": _per_channel,
    "BatchNormalization": _per_channel,
    "PRelu": _prelu,
    "Gemm": _gemm,
    "LSTM": _rnn,
    "Transpose": _transpose,
    "Slice": _slice,
    "Split": _split,
    "Pad": _pad,
    "LRN": _lrn,
    "LayerNormalization": _layer_norm,
    "GRU": _rnn,
}


def contract_violation(graph: Graph, node: Node) -> Optional[str]:
    """How ``node``'s static shapes contradict its op (None when they agree or the op has no contract here)."""
    if not any(node.outputs) or (not node.outputs[0] and node.op not in OPTIONAL_FIRST_OUTPUT):
        return None
    why = axis_attribute_violation(graph, node)
    check = CONTRACTS.get(node.op)
    if why is not None or check is None:
        return why
    try:
        return check(graph, node)
    except IndexError:  # a dim the contract reads is missing: an input of a rank the op does not take
        shown = ", ".join(_show(graph, n) for n in node.inputs if n)
        return "inputs of ranks %s cannot take (inputs %s)" % (node.op, shown)
