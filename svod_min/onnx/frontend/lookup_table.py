"""The 256-entry table of an 8-bit elementwise cone (:mod:`.quant_lookup`): the cone's nodes run at build on every
value of their one 8-bit source, in numpy.

Arithmetic (Add, Sub, Mul, Div, the clamps, HardSigmoid's and HardSwish's affine steps) is float32, in the order the
generated C computes it; the transcendental functions (Sigmoid, Tanh, Exp, Erf, Softplus, Elu, Selu, Gelu) are
computed in float64 and rounded to float32 once, so each is the correctly rounded float32 value: any float32 kernel
(svod_min's, onnxruntime's) is within an ulp or two of it, which moves a result across a quantization boundary only
where the value lies within those ulps of it (one quantum then). DequantizeLinear and QuantizeLinear round as
:func:`.quant_fold.dequantize_constant` and :func:`.quant_fold.quantize_constant`, which they call: ties to even,
saturation, NaN to the dtype's lowest value.
"""

from __future__ import annotations

import math
from typing import Callable, Dict, List

import numpy as np
from onnx import helper

from ..activations import activation_params
from .ir import Graph, Node
from .quant_fold import dequantize_constant, quantize_constant

F32 = np.float32
Unary = Callable[[np.ndarray, Node, Graph], np.ndarray]


def _f64(fn: Callable[[np.ndarray], np.ndarray]) -> Unary:
    """A transcendental op computed in float64, rounded to float32 once."""

    def run(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(x.astype(np.float64)).astype(F32)

    return run


def _attr(node: Node, name: str, default: float) -> np.float32:
    return F32(node.attrs.get(name, default))


def _clamp(x: np.ndarray, lo: np.float32, hi: np.float32) -> np.ndarray:
    """x clamped to [lo, hi] by comparisons, so NaN passes through (the generated C's clamps)."""
    return np.where(x < lo, lo, np.where(x > hi, hi, x)).astype(F32)


def _clip(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
    bounds = [float(graph.const(n).reshape(())) if n else None for n in node.inputs[1:3]]
    params = activation_params("Clip", node.attrs, bounds)
    return _clamp(x, F32(params["min"]), F32(params["max"]))


def _hard_sigmoid(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
    return _clamp(_attr(node, "alpha", 0.2) * x + _attr(node, "beta", 0.5), F32(0), F32(1))


def _hard_swish(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
    return (x * _clamp(x * F32(1.0 / 6.0) + F32(0.5), F32(0), F32(1))).astype(F32)


def _leaky_relu(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
    return np.where(x < 0, _attr(node, "alpha", 0.01) * x, x).astype(F32)


def _elu(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
    alpha = float(node.attrs.get("alpha", 1.0))
    return _f64(lambda v: np.where(v < 0, alpha * np.expm1(v), v))(x, node, graph)


def _selu(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
    alpha = float(node.attrs.get("alpha", 1.67326319217681884765625))
    gamma = float(node.attrs.get("gamma", 1.05070102214813232421875))
    return _f64(lambda v: gamma * np.where(v <= 0, alpha * np.expm1(v), v))(x, node, graph)


def _erf(v: np.ndarray) -> np.ndarray:
    return np.array([math.erf(t) if not math.isnan(t) else t for t in v.reshape(-1)], np.float64).reshape(v.shape)


def _gelu(x: np.ndarray, node: Node, graph: Graph) -> np.ndarray:
    if node.attrs.get("approximate", "none") == "tanh":
        return _f64(lambda v: 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))))(x, node, graph)
    return _f64(lambda v: 0.5 * v * (1 + _erf(v / math.sqrt(2))))(x, node, graph)


#: The unary ops a cone may hold, as numpy functions of a float32 vector.
UNARY: Dict[str, Unary] = {
    "Relu": lambda x, n, g: np.where(x < 0, F32(0), x).astype(F32),
    "LeakyRelu": _leaky_relu,
    "Clip": _clip,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Neg": lambda x, n, g: np.negative(x),
    "Abs": lambda x, n, g: np.abs(x),
    "Sigmoid": _f64(lambda v: 1.0 / (1.0 + np.exp(-v))),
    "Tanh": _f64(np.tanh),
    "Exp": _f64(np.exp),
    "Erf": _f64(_erf),
    "Softplus": _f64(lambda v: np.logaddexp(0.0, v)),
    "Softsign": lambda x, n, g: (x / (F32(1) + np.abs(x))).astype(F32),
    "Elu": _elu,
    "Selu": _selu,
    "Gelu": _gelu,
}
#: The binary ops: each operand a value of the cone or a scalar constant, float32 arithmetic.
BINARY: Dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": np.divide,
}


def source_values(dtype: str) -> np.ndarray:
    """Every value of an 8-bit dtype, in table order: entry i is the byte i (uint8) or i - 128 (int8)."""
    return np.arange(256, dtype=np.int64).astype(np.uint8) if dtype == "uint8" else np.arange(-128, 128).astype(np.int8)


def _quant(node: Node, graph: Graph, x: np.ndarray) -> np.ndarray:
    """A per-tensor QuantizeLinear or DequantizeLinear of x (checked by the cone's tracer), as quant_fold rounds."""
    consts = {"x": x, "s": graph.const(node.inputs[1])}
    names = ["x", "s"]
    if len(node.inputs) > 2 and node.inputs[2]:
        consts["z"] = graph.const(node.inputs[2])
        names.append("z")
    proto = helper.make_node(node.op, names, ["y"])
    out = (quantize_constant if node.op == "QuantizeLinear" else dequantize_constant)(proto, consts)
    assert out is not None, node.label()  # the tracer took per-tensor float32 scales and 8-bit zero points only
    return out[0]


def evaluate(graph: Graph, nodes: List[Node], source: str) -> np.ndarray:
    """The cone's result (its last node's output) for every value of ``source``, in table order; ``nodes``: the
    cone in graph order, its first readers of ``source`` DequantizeLinear nodes."""
    values: Dict[str, np.ndarray] = {source: source_values(graph.values[source].dtype)}

    def operand(name: str) -> np.ndarray:
        return values[name] if name in values else graph.const(name).reshape(()).astype(F32)

    for node in nodes:
        x = values.get(node.inputs[0])
        if node.op in ("QuantizeLinear", "DequantizeLinear"):
            out = _quant(node, graph, operand(node.inputs[0]))
        elif node.op in BINARY:
            with np.errstate(all="ignore"):
                out = BINARY[node.op](operand(node.inputs[0]), operand(node.inputs[1]), dtype=F32)
        else:
            assert x is not None, node.label()
            out = UNARY[node.op](x, node, graph)
        values[node.outputs[0]] = np.asarray(out).reshape(256)
    return values[nodes[-1].outputs[0]]
