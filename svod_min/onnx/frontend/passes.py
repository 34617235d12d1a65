"""Graph passes, each ``Graph -> Graph``: inference simplifications, folds into Conv/Gemm, activation fusion.

- ``drop_inference_noops``: Identity, and Dropout at inference (its mask output unused), vanish.
- ``fuse_lookup_tables`` (:mod:`.quant_lookup`): a QDQ model's 8-bit elementwise cones (DequantizeLinear, unary
  ops, scalar arithmetic, QuantizeLinear: yolov8's SiLU) become one 256-entry table lookup each, before
  ``to_affine`` would turn their scalar Muls and Adds into Affines.
- ``fuse_gelu_chains`` (:mod:`.gelu_chain`): the exporters' ``x * 0.5 * (1 + Erf(x / sqrt 2))`` and its tanh form
  become one Gelu node, before ``to_affine`` would turn their scalar Muls and Adds into Affines.
- ``to_affine``: BatchNormalization with constant statistics, and Mul/Add/Sub of a constant that is
  per channel (shape ``[C,1,..,1]`` against ``[N,C,...]``) or a scalar, become ``svod.Affine``
  (``y = x * scale[c] + shift[c]``); consecutive ones merge into one.
- ``fold_affine``: an Affine whose input is a Conv's (or constant-weight Gemm's) only use goes into
  the weights and bias: ``W' = W * scale``, ``b' = b * scale + shift``.
- ``fuse_residual_adds``: an Add (or two-input Sum) of a 2-D Conv's only use and another tensor of the same
  shape (ResNet's shortcut) becomes the Conv's residual epilogue (input 3); the Conv moves to the Add's place.
- ``fuse_activations``: the activations of :mod:`..activations` (Relu, LeakyRelu, Clip, Sigmoid, Tanh,
  HardSigmoid, HardSwish, Gelu), and a PRelu with
  one constant slope (a LeakyRelu), that are the only reader of a Conv, Gemm, Affine or elementwise node's
  output become that node's epilogue (the layout pass fuses a per-channel PRelu into a blocked Conv); a SiLU
  (``y * Sigmoid(y)``, :func:`silu_pair`) after an Affine or an elementwise node becomes its epilogue too (the
  layout pass fuses one after a blocked Conv).
Nodes are checked against the op table before any pass runs, so passes see valid attributes only.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from ..activations import ACTIVATIONS, activation_params
from .gelu_chain import fuse_gelu_chains
from .ir import Graph, Node
from .quant_lookup import fuse_lookup_tables

AFFINE = "svod.Affine"
#: Ops whose lowering applies a fused activation to what they write.
ACTIVATION_HOSTS = ("Conv", "Gemm", AFFINE, "Add", "Sub", "Mul", "Div", "Sum", "BatchNormalization", "MatMul")
#: The hosts whose store takes a SiLU (their generated elementwise C); a convolution's is the layout pass's.
SILU_HOSTS = (AFFINE, "Add", "Sub", "Mul", "Div", "Sum")
#: The dtypes a fused activation's float C text computes in.
FUSABLE_DTYPES = ("float32", "float16", "bfloat16")
#: The fused activation of a SiLU, ``y * Sigmoid(y)`` (:data:`..activations.FUSED_ONLY`).
SILU = "SiLU"


def run_passes(graph: Graph) -> Graph:
    for step in (
        drop_inference_noops,
        fuse_lookup_tables,
        fuse_gelu_chains,
        normalize_gemm,
        to_affine,
        merge_affines,
        fold_affine,
        fuse_residual_adds,
        fuse_activations,
    ):
        graph = step(graph)
    return graph


def _rename_uses(graph: Graph, old: str, new: str) -> None:
    for node in graph.nodes:
        node.inputs = [new if n == old else n for n in node.inputs]


def _replace_output(graph: Graph, node_out: str, new: str) -> None:
    """Readers of ``node_out`` read ``new`` instead; a graph output keeps its name (the producer is renamed)."""
    if node_out in graph.outputs:
        for node in graph.nodes:
            node.outputs = [node_out if n == new else n for n in node.outputs]
        _rename_uses(graph, new, node_out)
        return
    _rename_uses(graph, node_out, new)


def drop_inference_noops(graph: Graph) -> Graph:
    keep: List[Node] = []
    for node in graph.nodes:
        if (
            node.op in ("Identity", "Dropout")
            and not (len(node.outputs) > 1 and node.outputs[1])  # a Dropout whose mask is read stays
            and graph.values[node.inputs[0]].const is None
            and node.inputs[0] not in graph.inputs
            # Both ends graph outputs: renaming the producer would leave the input's output unwritten.
            and not (node.inputs[0] in graph.outputs and node.outputs[0] in graph.outputs)
        ):
            _replace_output(graph, node.outputs[0], node.inputs[0])
            continue
        keep.append(node)
    graph.nodes = keep
    return graph


def channel_vector(graph: Graph, x: str, c: str) -> Optional[np.ndarray]:
    """The per-channel vector of constant ``c`` applied to ``x`` (axis 1), or None when it is not one."""
    xs, data = graph.values[x].shape, graph.const(c)
    if len(xs) < 2 or data.dtype != np.float32 or data.ndim > len(xs):
        return None
    if data.size == 1:
        return np.full(xs[1], data.reshape(-1)[0], np.float32)
    shape = (1,) * (len(xs) - data.ndim) + tuple(data.shape)
    if shape[1] == xs[1] and all(d == 1 for i, d in enumerate(shape) if i != 1):
        return data.reshape(-1).astype(np.float32)
    return None


def to_affine(graph: Graph) -> Graph:
    for node in graph.nodes:
        scale_shift = _affine_of(graph, node)
        if scale_shift is None:
            continue
        x, scale, shift = scale_shift
        node.op, node.attrs = AFFINE, {}
        node.inputs = [
            x,
            graph.add_const(node.outputs[0] + "~scale", scale),
            graph.add_const(node.outputs[0] + "~shift", shift),
        ]
    return graph


def _affine_of(graph: Graph, node: Node) -> Optional[Tuple[str, np.ndarray, np.ndarray]]:
    if node.op == "BatchNormalization":
        x = node.inputs[0]
        if not all(graph.is_const(n) for n in node.inputs[1:5]) or len(graph.values[x].shape) < 2:
            return None
        if node.attrs.get("training_mode", 0) or len(node.outputs) > 1:
            return None  # training (before opset 14: the training outputs) normalises by the batch's statistics
        gamma, beta, mean, var = (graph.const(n).astype(np.float64) for n in node.inputs[1:5])
        s = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
        return x, s.astype(np.float32), (beta - mean * s).astype(np.float32)
    if node.op not in ("Mul", "Add", "Sub") or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    if graph.values[node.outputs[0]].dtype != "float32":
        return None
    for x, c, swapped in ((a, b, False), (b, a, True)):
        if graph.is_const(c) and not graph.is_const(x) and graph.values[x].shape == graph.values[node.outputs[0]].shape:
            vec = channel_vector(graph, x, c)
            if vec is None:
                continue
            ones, zeros = np.ones_like(vec), np.zeros_like(vec)
            if node.op == "Mul":
                return x, vec, zeros
            if node.op == "Add":
                return x, ones, vec
            return (x, -ones, vec) if swapped else (x, ones, -vec)
    return None


def normalize_gemm(graph: Graph) -> Graph:
    """Gemm with a constant B: alpha and transB go into B (K, N), beta into a constant C."""
    for node in graph.nodes:
        if node.op != "Gemm" or not graph.is_const(node.inputs[1]):
            continue
        c = node.inputs[2] if len(node.inputs) > 2 else ""
        if c and not graph.is_const(c):
            continue
        b = graph.const(node.inputs[1]).astype(np.float32)
        b = (b.T if node.attrs.get("transB", 0) else b) * np.float32(node.attrs.get("alpha", 1.0))
        inputs = [node.inputs[0], graph.add_const(node.inputs[1] + "~kn", np.ascontiguousarray(b, np.float32)), ""]
        if c:
            data = graph.const(c).astype(np.float32) * np.float32(node.attrs.get("beta", 1.0))
            if data.size == b.shape[1] or data.size == 1:
                data = np.broadcast_to(data.reshape(-1), (b.shape[1],))
            inputs[2] = graph.add_const(c + "~beta", np.ascontiguousarray(data, np.float32))
        node.inputs = inputs
        node.attrs = {"transA": node.attrs.get("transA", 0), "_normal": True}
    return graph


def _single_reader(graph: Graph, name: str, readers: Dict[str, List[Node]]) -> Optional[Node]:
    users = readers.get(name, [])
    if len(users) != 1 or name in graph.outputs or users[0].inputs.count(name) != 1:
        return None
    return users[0]


def merge_affines(graph: Graph) -> Graph:
    readers = graph.consumers()
    dropped = set()
    for node in graph.nodes:
        if node.op != AFFINE or id(node) in dropped:
            continue
        nxt = _single_reader(graph, node.outputs[0], readers)
        while nxt is not None and nxt.op == AFFINE and nxt.inputs[0] == node.outputs[0]:
            s1, t1 = graph.const(node.inputs[1]), graph.const(node.inputs[2])
            s2, t2 = graph.const(nxt.inputs[1]), graph.const(nxt.inputs[2])
            nxt.inputs = [
                node.inputs[0],
                graph.add_const(nxt.outputs[0] + "~scale", s1 * s2),
                graph.add_const(nxt.outputs[0] + "~shift", t1 * s2 + t2),
            ]
            dropped.add(id(node))
            node, nxt = nxt, None
            readers = graph.consumers()
            nxt = _single_reader(graph, node.outputs[0], readers)
    graph.nodes = [n for n in graph.nodes if id(n) not in dropped]
    return graph


def fold_affine(graph: Graph) -> Graph:
    readers = graph.consumers()
    dropped = set()
    for node in graph.nodes:
        if node.op != AFFINE:
            continue
        producer = _producer(graph, node.inputs[0])
        if producer is None or _single_reader(graph, node.inputs[0], readers) is not node or producer.fused:
            continue
        if producer.op == "Conv" and graph.is_const(producer.inputs[1]) and _const_or_absent(graph, producer, 2):
            _fold_into(graph, producer, node, weight_axis=0)
        elif producer.op == "Gemm" and producer.attrs.get("_normal") and _bias_is_vector(graph, producer):
            _fold_into(graph, producer, node, weight_axis=1)
        else:
            continue
        producer.outputs = [node.outputs[0]]
        dropped.add(id(node))
        readers = graph.consumers()
    graph.nodes = [n for n in graph.nodes if id(n) not in dropped]
    return graph


def _bias_is_vector(graph: Graph, gemm: Node) -> bool:
    return not gemm.inputs[2] or graph.const(gemm.inputs[2]).ndim == 1


def _const_or_absent(graph: Graph, node: Node, i: int) -> bool:
    return len(node.inputs) <= i or not node.inputs[i] or graph.is_const(node.inputs[i])


def _producer(graph: Graph, name: str) -> Optional[Node]:
    for node in graph.nodes:
        if name in node.outputs:
            return node
    return None


def _fold_into(graph: Graph, producer: Node, affine: Node, weight_axis: int) -> None:
    """W' = W * scale (along the output-channel axis), b' = b * scale + shift."""
    scale, shift = graph.const(affine.inputs[1]), graph.const(affine.inputs[2])
    w = graph.const(producer.inputs[1])
    shape = [1] * w.ndim
    shape[weight_axis] = -1
    new_w = (w * scale.reshape(shape)).astype(np.float32)
    bias_name = producer.inputs[2] if len(producer.inputs) > 2 and producer.inputs[2] else ""
    bias = graph.const(bias_name).reshape(-1) if bias_name else np.zeros(scale.shape, np.float32)
    new_b = (bias * scale + shift).astype(np.float32)
    inputs = list(producer.inputs) + [""] * (3 - len(producer.inputs))
    inputs[1] = graph.add_const(producer.inputs[1] + "~folded", new_w)
    inputs[2] = graph.add_const(affine.outputs[0] + "~bias", new_b)
    producer.inputs = inputs


def fuse_residual_adds(graph: Graph) -> Graph:
    """Add(conv, r) (or a two-input Sum) with r shaped as the output: the Conv (2-D, float32) takes r as input 3 and
    the Add's place."""
    readers = graph.consumers()
    nodes = list(graph.nodes)
    for add in list(nodes):
        conv = _residual_host(graph, add, readers)
        if conv is None:
            continue
        other = add.inputs[1] if conv.outputs[0] == add.inputs[0] else add.inputs[0]
        conv.inputs = (list(conv.inputs) + [""] * 3)[:3] + [other]
        conv.fused["residual"] = True
        conv.outputs = [add.outputs[0]]
        nodes.remove(conv)  # it runs where the Add ran: r may be computed after the conv's own inputs
        nodes[nodes.index(add)] = conv
        graph.nodes = nodes
        readers = graph.consumers()
    graph.nodes = nodes
    return graph


def _residual_host(graph: Graph, add: Node, readers: Dict[str, List[Node]]) -> Optional[Node]:
    """The Conv an Add can fold into as its residual epilogue, or None."""
    if add.op not in ("Add", "Sum") or add.fused or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    shape = graph.values[add.outputs[0]].shape
    if any(graph.values[n].shape != shape or graph.values[n].dtype != "float32" for n in add.inputs):
        return None
    for name in reversed(add.inputs):
        conv = _producer(graph, name)
        if (
            conv is not None
            and conv.op == "Conv"
            and not conv.fused
            and len(shape) == 4
            and _single_reader(graph, name, readers) is add
        ):
            return conv
    return None


def fuse_activations(graph: Graph) -> Graph:
    readers = graph.consumers()
    dropped = set()
    for node in graph.nodes:
        if node.op not in ACTIVATION_HOSTS or "activation" in node.fused or len(node.outputs) != 1:
            continue
        silu = silu_pair(graph, node.outputs[0], readers) if node.op in SILU_HOSTS else None
        if silu is not None and graph.values[silu[1].outputs[0]].dtype in FUSABLE_DTYPES:
            node.fused["activation"] = (SILU, {})
            node.outputs = [silu[1].outputs[0]]
            dropped.update(id(n) for n in silu)
            readers = graph.consumers()
            continue
        act = _single_reader(graph, node.outputs[0], readers)
        if act is None or not _activation_static(graph, act):
            continue
        if act.op in ACTIVATIONS:
            node.fused["activation"] = (act.op, activation_params_of(graph, act))
        elif act.op == "PRelu" and act.inputs[0] == node.outputs[0] and graph.const(act.inputs[1]).size == 1:
            node.fused["activation"] = ("LeakyRelu", {"alpha": float(graph.const(act.inputs[1]).reshape(-1)[0])})
        else:
            continue
        node.outputs = [act.outputs[0]]
        dropped.add(id(act))
        readers = graph.consumers()
    graph.nodes = [n for n in graph.nodes if id(n) not in dropped]
    return graph


def silu_pair(graph: Graph, name: str, readers: Dict[str, List[Node]]) -> Optional[Tuple[Node, Node]]:
    """(Sigmoid, Mul) where ``name`` is read only by ``s = Sigmoid(name)`` and ``Mul(name, s)`` (either order) and
    ``s`` only by that Mul: a SiLU, which its producer may run in its store as ``y * sigmoid(y)``; else None."""
    users = readers.get(name, [])
    if len(users) != 2 or name in graph.outputs:
        return None
    sig = next((u for u in users if u.op == "Sigmoid"), None)
    mul = next((u for u in users if u.op == "Mul"), None)
    if sig is None or mul is None or sig.outputs[0] in graph.outputs:
        return None
    s = sig.outputs[0]
    if sorted(mul.inputs) != sorted([name, s]) or [id(u) for u in readers.get(s, [])] != [id(mul)]:
        return None
    return sig, mul


def _activation_static(graph: Graph, act: Node) -> bool:
    """Clip's bounds and PRelu's slope must be constants to be compiled in, and the activation's result float32 or
    half: the hosts apply a fused activation as float C text (a Clip of integers or float64 runs on its own)."""
    dtype = graph.values[act.outputs[0]].dtype if act.outputs and act.outputs[0] else ""
    return dtype in FUSABLE_DTYPES and all(graph.is_const(n) for n in act.inputs[1:] if n)


def activation_params_of(graph: Graph, act: Node) -> Dict[str, float]:
    """An activation node's parameters as floats (Clip's min/max from attributes or constant inputs)."""
    bounds = [float(graph.const(n)) if n else None for n in act.inputs[1:3]] if act.op == "Clip" else []
    return activation_params(act.op, act.attrs, bounds)
