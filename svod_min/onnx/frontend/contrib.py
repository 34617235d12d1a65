"""onnxruntime's contrib ops rewritten into ONNX ops the op table lowers, on the protobuf level, before any check.

Exported and optimised models carry ops of the ``com.microsoft`` domain (and a few onnxruntime registers in the
default domain below the opset that standardised them). The rewrite runs first, before the ONNX checker and shape
inference, because neither knows those ops: each becomes a short chain of default-domain nodes of the model's own
opset (``Gelu`` and ``LayerNormalization`` where the opset has them, else their decomposition into Erf/Tanh and
ReduceMean/Sqrt/Div). Semantics follow onnxruntime's contrib op documentation:

- ``Gelu``, ``BiasGelu`` (A + B first): ``x * 0.5 * (1 + erf(x / sqrt 2))``;
  ``FastGelu`` (optional bias): the tanh form; ``QuickGelu``: ``x * sigmoid(alpha * x)``.
- ``SkipLayerNormalization`` / ``SkipSimplifiedLayerNormalization``: ``s = input + skip (+ bias)``, then
  LayerNorm (gamma, beta) / RMS norm (gamma) over the last axis; output 3 is ``s``, outputs 1 and 2 (mean,
  inverse standard deviation: training outputs) are refused when something reads them.
- ``SimplifiedLayerNormalization`` (RMS norm, default domain in onnxruntime), and the default domain's
  ``LayerNormalization`` below opset 17 (onnxruntime runs it as a contrib op there): decomposed.
- ``FusedMatMul``: Transpose of the last two dims where ``transA``/``transB``, MatMul, Mul by ``alpha``.
- ``FusedConv``: Conv, ``+ Z`` when given, then its ``activation`` (Relu, Tanh, Sigmoid, LeakyRelu, Clip,
  HardSigmoid with ``activation_params``).
- ``BiasAdd``: ``X + bias + skip``.
- ``QLinearAdd``, ``QLinearMul``, ``QLinearSigmoid``, ``QLinearLeakyRelu``, ``QLinearSoftmax``, ``QLinearConcat``,
  ``QLinearAveragePool`` (``quantize_static``'s QOperator format): DequantizeLinear of each input, the float op,
  QuantizeLinear with the output's scale and zero point (a missing zero point is 0 of the input's dtype);
  ``QLinearGlobalAveragePool`` and ``QGemm`` (MatMulInteger, + C) as onnxruntime's kernels compute them: the sum
  times one float32 multiplier, quantized with scale 1. onnxruntime's x86-64 QLinearAdd rounds some exact ties
  otherwise (docs/onnx.md).

The attention family (``Attention``, ``MultiHeadAttention``, ``RotaryEmbedding``) is :mod:`.contrib_attention`'s.
Any other ``com.microsoft`` op is refused by name. Constants take the dtype of the tensor they meet, which a
lenient shape inference tells; a node whose input's dtype or rank it cannot tell yet waits for the next round
(its producer is then rewritten and inferred).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Tuple

import onnx
from onnx import shape_inference

from ...error import ModelFileError, UnsupportedModelError
from .contrib_attention import ATTENTION_REWRITES
from .contrib_emit import Emit, Known

MS = "com.microsoft"
#: onnxruntime's contrib ops registered in the default domain, with the opset from which ONNX has them itself.
DEFAULT_DOMAIN = {"SimplifiedLayerNormalization": 10**6, "LayerNormalization": 17}


def _gelu(e: Emit, x: str, out: str, tanh: bool) -> None:
    if e.opset >= 20:
        e.op("Gelu", [x], out, approximate="tanh" if tanh else "none")
        return
    if tanh:  # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = e.op("Mul", [e.op("Mul", [x, x]), x])
        inner = e.op("Add", [x, e.op("Mul", [cube, e.const(0.044715, x)])])
        core = e.op("Tanh", [e.op("Mul", [inner, e.const(math.sqrt(2 / math.pi), x)])])
    else:
        core = e.op("Erf", [e.op("Mul", [x, e.const(1 / math.sqrt(2), x)])])
    half = e.op("Mul", [x, e.const(0.5, x)])
    e.op("Mul", [half, e.op("Add", [core, e.const(1.0, x)])], out)


def _rw_gelu(e: Emit) -> None:
    _gelu(e, e.inp(0), e.out(0), tanh=False)


def _rw_bias_gelu(e: Emit) -> None:
    _gelu(e, e.op("Add", [e.inp(0), e.inp(1)]), e.out(0), tanh=False)


def _rw_fast_gelu(e: Emit) -> None:
    x, bias = e.inp(0), e.inp(1, required=False)
    _gelu(e, e.op("Add", [x, bias]) if bias else x, e.out(0), tanh=True)


def _rw_quick_gelu(e: Emit) -> None:
    x = e.inp(0)
    alpha = float(e.attrs().get("alpha", 1.702))
    e.op("Mul", [x, e.op("Sigmoid", [e.op("Mul", [x, e.const(alpha, x)])])], e.out(0))


def _rw_bias_add(e: Emit) -> None:
    e.op("Add", [e.op("Add", [e.inp(0), e.inp(1)]), e.inp(2)], e.out(0))


def _norm(e: Emit, x: str, scale: str, bias: str, axis: int, eps: float, out: str, rms: bool) -> None:
    """LayerNorm (or RMS norm: no centring, no bias) of ``x`` over the axes from ``axis`` on."""
    rank = e.ranks[x]
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ModelFileError("%s: axis %d is outside the input's rank %d" % (e.label(), axis, rank))
    if not rms and e.opset >= 17:
        e.op("LayerNormalization", [x, scale] + ([bias] if bias else []), out, axis=axis, epsilon=eps)
        return
    axes = list(range(axis - rank, 0))  # negative: the trailing axes whatever the rank
    centred = x if rms else e.op("Sub", [x, e.reduce_mean(x, axes)])
    var = e.reduce_mean(e.op("Mul", [centred, centred]), axes)
    normed = e.op("Div", [centred, e.op("Sqrt", [e.op("Add", [var, e.const(eps, x)])])])
    e.op("Mul", [normed, scale], None if bias else out)
    if bias:
        e.op("Add", [e.nodes[-1].output[0], bias], out)


def _unused_outputs(e: Emit, which: Dict[int, str], readers: Dict[str, int]) -> None:
    for i, what in which.items():
        name = e.out(i)
        if name and readers.get(name, 0):
            raise e.refuse(
                "output %d (%s, %r) is read; only the normalised output and the sum are supported" % (i, what, name)
            )


def _skip_norm(rms: bool) -> Callable[[Emit, Dict[str, int]], None]:
    def rewrite(e: Emit, readers: Dict[str, int]) -> None:
        _unused_outputs(e, {1: "mean", 2: "inv_std_var"}, readers)
        x, skip, gamma = e.inp(0), e.inp(1), e.inp(2)
        beta = "" if rms else e.inp(3, required=False)
        bias = e.inp(3 if rms else 4, required=False)
        total = e.op("Add", [x, skip], None if bias else (e.out(3) or None))
        if bias:
            total = e.op("Add", [total, bias], e.out(3) or None)
        eps = float(e.attrs().get("epsilon", 1e-12))
        e.ranks[total] = e.ranks[x]
        _norm(e, total, gamma, beta, -1, eps, e.out(0), rms)

    return rewrite


def _rw_simplified_ln(e: Emit, readers: Dict[str, int]) -> None:
    _unused_outputs(e, {1: "inv_std_var"}, readers)
    a = e.attrs()
    _norm(e, e.inp(0), e.inp(1), "", int(a.get("axis", -1)), float(a.get("epsilon", 1e-5)), e.out(0), rms=True)


def _rw_layer_norm(e: Emit, readers: Dict[str, int]) -> None:
    _unused_outputs(e, {1: "mean", 2: "inv_std_dev"}, readers)
    a = e.attrs()
    x, scale, bias = e.inp(0), e.inp(1), e.inp(2, required=False)
    _norm(e, x, scale, bias, int(a.get("axis", -1)), float(a.get("epsilon", 1e-5)), e.out(0), rms=False)


def _rw_fused_matmul(e: Emit) -> None:
    a = e.attrs()
    for name in ("transBatchA", "transBatchB"):
        if a.get(name, 0):
            raise e.refuse("attribute %s=%r is not supported (only 0)" % (name, a[name]))
    operands = []
    for i, trans in ((0, a.get("transA", 0)), (1, a.get("transB", 0))):
        x = e.inp(i)
        if trans:
            rank = e.ranks[x]
            if rank < 2:
                raise e.refuse("transA/transB of a %d-D operand is not supported" % rank)
            x = e.op("Transpose", [x], perm=list(range(rank - 2)) + [rank - 1, rank - 2])
        operands.append(x)
    alpha = float(a.get("alpha", 1.0))
    if alpha == 1.0:
        e.op("MatMul", operands, e.out(0))
    else:
        e.op("Mul", [e.op("MatMul", operands), e.const(alpha, e.inp(0))], e.out(0))


CONV_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


def _rw_fused_conv(e: Emit) -> None:
    a = e.attrs()
    act = a.get("activation", b"")
    act = act.decode() if isinstance(act, bytes) else str(act)
    params = [float(p) for p in a.get("activation_params", [])]
    need = {"": 0, "Relu": 0, "Tanh": 0, "Sigmoid": 0, "LeakyRelu": 1, "Clip": 2, "HardSigmoid": 2}
    if act not in need:
        raise e.refuse("activation %r is not supported (Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid)" % act)
    if len(params) < need[act]:
        raise ModelFileError("%s: activation %s needs %d activation_params" % (e.label(), act, need[act]))
    x, w, b, z = e.inp(0), e.inp(1), e.inp(2, required=False), e.inp(3, required=False)
    conv_attrs = {k: v for k, v in a.items() if k in CONV_ATTRS}
    if isinstance(conv_attrs.get("auto_pad"), bytes):
        conv_attrs["auto_pad"] = conv_attrs["auto_pad"].decode()
    last = not z and not act
    y = e.op("Conv", [x, w] + ([b] if b else []), e.out(0) if last else None, **conv_attrs)
    if z:
        y = e.op("Add", [y, z], e.out(0) if not act else None)
    if not act:
        return
    if act == "LeakyRelu":
        e.op("LeakyRelu", [y], e.out(0), alpha=params[0])
    elif act == "HardSigmoid":
        e.op("HardSigmoid", [y], e.out(0), alpha=params[0], beta=params[1])
    elif act == "Clip" and e.opset >= 11:
        e.op("Clip", [y, e.const(params[0], x), e.const(params[1], x)], e.out(0))
    elif act == "Clip":
        e.op("Clip", [y], e.out(0), min=params[0], max=params[1])
    else:
        e.op(act, [y], e.out(0))


def _dequantized(e: Emit, i: int) -> str:
    """Input ``i`` (quantized; its scale and zero point follow it) as float32."""
    zp = e.inp(i + 2, required=False)
    return e.op("DequantizeLinear", [e.inp(i), e.inp(i + 1)] + ([zp] if zp else []))


def _quantized(e: Emit, y: str, i: int) -> None:
    """``y`` quantized into the node's output with the scale and zero point at inputs ``i``, ``i + 1``; a missing
    zero point is 0 of input 0's dtype (QuantizeLinear's own default would be uint8)."""
    if e.opset < 10:
        raise e.refuse("needs opset 10 or later (QuantizeLinear and DequantizeLinear)")
    zp = e.inp(i + 1, required=False) or e.const(0, e.inp(0))
    e.op("QuantizeLinear", [y, e.inp(i), zp], e.out(0))


def _qlinear_binary(op: str) -> Callable[[Emit], None]:
    def rewrite(e: Emit) -> None:  # A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp
        _quantized(e, e.op(op, [_dequantized(e, 0), _dequantized(e, 3)]), 6)

    return rewrite


def _qlinear_unary(op: str) -> Callable[[Emit], None]:
    def rewrite(e: Emit) -> None:  # X, X_scale, X_zp, Y_scale, Y_zp
        attrs = {"alpha": float(e.attrs().get("alpha", 0.01))} if op == "LeakyRelu" else {}
        _quantized(e, e.op(op, [_dequantized(e, 0)], **attrs), 3)

    return rewrite


def _rw_qlinear_global_average_pool(e: Emit) -> None:
    """As onnxruntime computes it: the sum over the spatial axes (channels_last: N, spatial..., C) less x_zero_point
    times their size, times x_scale / (y_scale * size) in float32, quantized with scale 1. The sum runs in float32,
    exact while it stays below 2^24 (up to 65,793 positions; onnxruntime sums in int32)."""
    x, rank = e.inp(0), e.ranks[e.inp(0)]
    axes = list(range(1, rank - 1)) if e.attrs().get("channels_last", 0) else list(range(2, rank))
    if e.opset < 10:
        raise e.refuse("needs opset 10 or later (QuantizeLinear)")
    wide = e.op("Cast", [x], to=onnx.TensorProto.FLOAT)
    zp = e.inp(2, required=False)
    if zp:  # each element less the zero point: exact in float32, as the sum is
        wide = e.op("Sub", [wide, e.op("Cast", [zp], to=onnx.TensorProto.FLOAT)])
    if e.opset >= 13:
        total = e.op("ReduceSum", [wide, e.ints(axes)], keepdims=1)
    else:
        total = e.op("ReduceSum", [wide], axes=axes, keepdims=1)
    spatial = e.op("Slice", [e.op("Shape", [x]), e.ints([axes[0]]), e.ints([axes[-1] + 1])])
    size = e.op("Cast", [e.op("ReduceProd", [spatial], keepdims=0)], to=onnx.TensorProto.FLOAT)
    scale = e.op("Div", [e.inp(1), e.op("Mul", [e.inp(3), size])])
    zy = e.inp(4, required=False) or e.const(0, x)
    e.op("QuantizeLinear", [e.op("Mul", [total, scale]), e.const(1.0, e.inp(1)), zy], e.out(0))


def _rw_qlinear_concat(e: Emit) -> None:  # Y_scale, Y_zp, then X, X_scale, X_zp per input
    parts = [_dequantized(e, i) for i in range(2, len(e.node.input), 3)]
    if not parts:
        raise ModelFileError("%s: no inputs to concatenate" % e.label())
    y = e.op("Concat", parts, axis=int(e.attrs().get("axis", 0)))
    if e.opset < 10:
        raise e.refuse("needs opset 10 or later (QuantizeLinear and DequantizeLinear)")
    e.op("QuantizeLinear", [y, e.inp(0), e.inp(1, required=False) or e.const(0, e.inp(2))], e.out(0))


def _rw_qlinear_average_pool(e: Emit) -> None:  # X, X_scale, X_zp, Y_scale, Y_zp
    a = e.attrs()
    pool = {k: v.decode() if isinstance(v, bytes) else v for k, v in a.items() if k != "channels_last"}
    x = _dequantized(e, 0)
    rank = e.ranks[e.inp(0)]
    last = bool(a.get("channels_last", 0))
    if last:  # N, spatial..., C -> N, C, spatial... and back
        x = e.op("Transpose", [x], perm=[0, rank - 1] + list(range(1, rank - 1)))
    y = e.op("AveragePool", [x], **pool)
    if last:
        y = e.op("Transpose", [y], perm=[0] + list(range(2, rank)) + [1])
    _quantized(e, y, 3)


def _rw_qlinear_softmax(e: Emit) -> None:  # X, X_scale, X_zp, Y_scale, Y_zp; axis, opset (whose Softmax)
    a = e.attrs()
    rank = e.ranks[e.inp(0)]
    axis = int(a.get("axis", -1 if int(a.get("opset", 13)) >= 13 else 1))
    last = axis in (-1, rank - 1)
    if not last and (int(a.get("opset", 13)) >= 13) != (e.opset >= 13):
        raise e.refuse("axis %d of a Softmax of opset %s in a model of opset %d" % (axis, a.get("opset"), e.opset))
    _quantized(e, e.op("Softmax", [_dequantized(e, 0)], axis=axis), 3)


def _rw_qgemm(e: Emit) -> None:
    """A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp: MatMulInteger, + C, times alpha * a_scale *
    b_scale (/ y_scale) in float32, then quantized with scale 1 when y_zero_point is given (onnxruntime's QGemm:
    its requantization); a float32 result without it."""
    a = e.attrs()
    ta, tb = e.inp(0), e.inp(3)
    if a.get("transA", 0):
        ta = e.op("Transpose", [ta], perm=[1, 0])
    if a.get("transB", 0):
        tb = e.op("Transpose", [tb], perm=[1, 0])
    acc = e.op("MatMulInteger", [ta, tb, e.inp(2), e.inp(5)])
    bias = e.inp(6, required=False)
    if bias:
        acc = e.op("Add", [acc, bias])
    alpha = float(a.get("alpha", 1.0))
    scale = e.inp(1) if alpha == 1.0 else e.op("Mul", [e.const(alpha, e.inp(1)), e.inp(1)])
    scale = e.op("Mul", [scale, e.inp(4)])
    y_scale, y_zp = e.inp(7, required=False), e.inp(8, required=False)
    if y_scale and not y_zp or y_zp and not y_scale:
        raise e.refuse("y_scale and y_zero_point come together (a float32 result takes neither)")
    if y_scale:
        scale = e.op("Div", [scale, y_scale])
    value = e.op("Mul", [e.op("Cast", [acc], to=onnx.TensorProto.FLOAT), scale], None if y_zp else e.out(0))
    if y_zp:
        if e.opset < 10:
            raise e.refuse("needs opset 10 or later (QuantizeLinear)")
        e.op("QuantizeLinear", [value, e.const(1.0, e.inp(1)), y_zp], e.out(0))


LSTM_ATTRS = ("activation_alpha", "activation_beta", "activations", "clip", "direction", "hidden_size", "input_forget")


def _dequantized_weights(e: Emit, w: str, scale: str, zero_point: str) -> str:
    """DynamicQuantizeLSTM's int8/uint8 weights (directions, in, 4 hidden), with a scale and zero point per direction
    or per direction and column, as LSTM's float weights (directions, 4 hidden, in)."""
    rank = e.ranks[scale]
    if rank not in (1, 2) or e.ranks.get(zero_point, rank) != rank:
        raise e.refuse(
            "a weight scale of rank %d is not supported (only per direction, or per direction and column)" % rank
        )
    axes = [1, 2] if rank == 1 else [1]
    values = e.op("Cast", [w], to=onnx.TensorProto.FLOAT)
    if zero_point:
        values = e.op("Sub", [values, e.unsqueeze(e.op("Cast", [zero_point], to=onnx.TensorProto.FLOAT), axes)])
    return e.op("Transpose", [e.op("Mul", [values, e.unsqueeze(scale, axes)])], perm=[0, 2, 1])


def _rw_dynamic_quantize_lstm(e: Emit) -> None:
    """LSTM with the weights dequantized at build time; onnxruntime also quantizes X and H at each step (uint8, its
    own scale), which this computes in float32 instead: the outputs differ by that quantization (docs/onnx.md)."""
    w = _dequantized_weights(e, e.inp(1), e.inp(8), e.inp(9, required=False))
    r = _dequantized_weights(e, e.inp(2), e.inp(10), e.inp(11, required=False))
    inputs = [e.inp(0), w, r] + [e.inp(i, required=False) for i in range(3, 8)]
    while inputs and not inputs[-1]:
        inputs.pop()
    attrs = {k: v for k, v in e.attrs().items() if k in LSTM_ATTRS}
    for key in ("direction",):
        if isinstance(attrs.get(key), bytes):
            attrs[key] = attrs[key].decode()
    if "activations" in attrs:
        attrs["activations"] = [a.decode() if isinstance(a, bytes) else a for a in attrs["activations"]]
    outs = [e.out(i) for i in range(3)]
    e.nodes.append(onnx.helper.make_node("LSTM", inputs, outs, name=e.fresh(), **attrs))


#: op -> (rewrite, whether it needs the readers count, which inputs' ranks it needs where given)
REWRITES: Dict[str, Tuple[Callable[..., None], bool, Tuple[int, ...]]] = {
    "Gelu": (_rw_gelu, False, ()),
    "BiasGelu": (_rw_bias_gelu, False, ()),
    "FastGelu": (_rw_fast_gelu, False, ()),
    "QuickGelu": (_rw_quick_gelu, False, ()),
    "BiasAdd": (_rw_bias_add, False, ()),
    "SkipLayerNormalization": (_skip_norm(rms=False), True, (0,)),
    "SkipSimplifiedLayerNormalization": (_skip_norm(rms=True), True, (0,)),
    "SimplifiedLayerNormalization": (_rw_simplified_ln, True, (0,)),
    "FusedMatMul": (_rw_fused_matmul, False, (0, 1)),
    "FusedConv": (_rw_fused_conv, False, ()),
    "QLinearAdd": (_qlinear_binary("Add"), False, ()),
    "QLinearMul": (_qlinear_binary("Mul"), False, ()),
    "QLinearSigmoid": (_qlinear_unary("Sigmoid"), False, ()),
    "QLinearLeakyRelu": (_qlinear_unary("LeakyRelu"), False, ()),
    "QLinearGlobalAveragePool": (_rw_qlinear_global_average_pool, False, (0,)),
    "QLinearConcat": (_rw_qlinear_concat, False, ()),
    "QLinearAveragePool": (_rw_qlinear_average_pool, False, (0,)),
    "QGemm": (_rw_qgemm, False, ()),
    "QLinearSoftmax": (_rw_qlinear_softmax, False, (0,)),
    "DynamicQuantizeLSTM": (_rw_dynamic_quantize_lstm, False, (0, 8, 9, 10, 11)),
    **ATTENTION_REWRITES,
}


def _is_contrib(node: Any, opset: int) -> bool:
    if node.domain == MS:
        return True
    return node.domain in ("", "ai.onnx") and opset < DEFAULT_DOMAIN.get(node.op_type, 0)


def _known(model: onnx.ModelProto) -> Known:
    """Elem types and ranks a lenient shape inference finds (it skips the ops it does not know)."""
    try:
        inferred = shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # the strict inference after the rewrite names what is wrong
        inferred = model
    types: Dict[str, int] = {}
    ranks: Dict[str, int] = {}
    for vi in list(inferred.graph.input) + list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and tt.elem_type:
            types[vi.name] = tt.elem_type
            if tt.HasField("shape"):
                ranks[vi.name] = len(tt.shape.dim)
    for t in inferred.graph.initializer:
        types[t.name], ranks[t.name] = t.data_type, len(t.dims)
    return types, ranks


def rewrite_contrib(model: onnx.ModelProto, opset: int) -> int:
    """Replace every contrib node by default-domain nodes (in place); the number replaced. Refuses, naming the node,
    a contrib op not in :data:`REWRITES` and one whose input's dtype or rank stays unknown."""
    done = 0
    for _ in range(64):  # each round rewrites every node whose inputs' dtypes (and needed ranks) are known
        pending = [(i, n) for i, n in enumerate(model.graph.node) if _is_contrib(n, opset)]
        if not pending:
            return done
        for i, n in pending:
            if n.op_type not in REWRITES:
                raise UnsupportedModelError(
                    "node %d (%s%s): %s op %s is not supported (docs/onnx.md lists the contrib ops svod_min rewrites)"
                    % (i, n.op_type, ", %r" % n.name if n.name else "", n.domain or "ai.onnx", n.op_type)
                )
        known = _known(model)
        readers: Dict[str, int] = {}
        for n in model.graph.node:
            for name in n.input:
                readers[name] = readers.get(name, 0) + 1
        for o in model.graph.output:
            readers[o.name] = readers.get(o.name, 0) + 1
        new_nodes: List[Any] = []
        progress = 0
        for i, n in enumerate(model.graph.node):
            fn, wants_readers, rank_of = (
                REWRITES.get(n.op_type, (None, False, ())) if _is_contrib(n, opset) else (None, False, ())
            )
            if fn is None or not _ready(n, rank_of, known):
                new_nodes.append(n)
                continue
            e = Emit(model, n, i, opset, (dict(known[0]), dict(known[1])))
            try:
                fn(e, readers) if wants_readers else fn(e)
            except (TypeError, ValueError, OverflowError) as exc:  # an attribute of the wrong kind: a string alpha
                raise ModelFileError("%s: an attribute has a value of the wrong kind (%s)" % (e.label(), exc)) from None
            new_nodes.extend(e.nodes)
            progress += 1
        del model.graph.node[:]
        model.graph.node.extend(new_nodes)
        done += progress
        if not progress:
            i, n = next((i, n) for i, n in enumerate(model.graph.node) if _is_contrib(n, opset))
            raise UnsupportedModelError(
                "node %d (%s%s): %s op %s: the dtype or rank of its inputs cannot be inferred"
                % (i, n.op_type, ", %r" % n.name if n.name else "", n.domain or "ai.onnx", n.op_type)
            )
    return done


def _ready(node: Any, rank_of: Tuple[int, ...], known: Known) -> bool:
    types, ranks = known
    x = node.input[0] if node.input else ""
    # an optional input that is absent needs no rank; a required one that is absent is the rewrite's error to name
    return (
        bool(x)
        and x in types
        and all(i >= len(node.input) or node.input[i] in ranks or not node.input[i] for i in rank_of)
    )
