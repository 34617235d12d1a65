"""The integer-quantized ops: MatMulInteger and ConvInteger (the ops of models ``quantize_dynamic`` writes, int32
sums), QLinearMatMul and QLinearConv (``quantize_static``'s QOperator format: int32 sums requantized with a float
scale). Each runs as one generated kernel of :mod:`..kernels.quant_integer` on the integer tensors themselves.

Zero points and scales are read from buffers, so constants and run-time tensors (as ONNX's node tests feed them)
alike; a float16 scale is converted to float32 first (exactly). Zero points follow the spec: MatMulInteger's
a_zero_point per tensor or per row of A (an [M] vector or A's shape with K as 1), b_zero_point per tensor or per
column of B (an [N] vector or B's shape with K as 1); QLinearMatMul's b_scale and b_zero_point per tensor or per
column, the others per tensor; the convolutions' w_zero_point (and QLinearConv's w_scale) per tensor or per output
channel, the others per tensor.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, register
from ..geometry import ConvGeom, broadcast_strides
from ..kernels.arith import DTYPES, Arith
from ..kernels.elementwise import elementwise
from ..kernels.qgemm import (
    GemmShape,
    int8_gemm,
    int8_pack,
    int8_pack_conv,
    int8_pack_taps,
    int8_quads,
    pack_b,
    packed_sizes,
    tap_major,
    tap_major_weights,
)
from ..kernels.quant_integer import MatMulShape, int_conv, int_depthwise_conv, int_matmul, takes_depthwise
from .lowering import Lowering
from .window import PAD_MODES, geometry

#: The integer dtypes of the quantized operands and results.
INT8 = ("int8", "uint8")
#: The scales' dtypes (float16 ones are converted to float32, exactly).
SCALES = ("float32", "float16")
DTYPES_TAKEN = INT8 + ("int32",) + SCALES

#: Output channels from which a one-group convolution runs on the int8 GEMM: packing the patches costs about as
#: much as the naive loop nest's multiply-adds of 2-4 output channels (basic-pitch's int8-dynamic convolutions:
#: 8 channels, 70 ms naive against 34 packed + GEMM; 1 channel, 4.8 against ~7).
GEMM_MIN_CHANNELS = 4
#: Input positions: (data, scale, zero point) of each operand, and the output's (scale, zero point).
QLINEAR = {"a": (0, 1, 2), "b": (3, 4, 5), "y": (-1, 6, 7)}
INTEGER = {"a": (0, -1, 2), "b": (1, -1, 3)}
Layout = Tuple[Tuple[int, ...], int]  # (strides per output batch dim, stride per row m or column n)


def _input(node: Node, i: int) -> str:
    return node.inputs[i] if 0 <= i < len(node.inputs) else ""


def _shape(graph: Graph, name: str) -> Tuple[int, ...]:
    return tuple(graph.values[name].shape)


def _operands(graph: Graph, node: Node) -> Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[int, ...]]:
    """A as [..., M, K], B as [..., K, N] (a 1-D A is one row, a 1-D B one column) and the output's batch dims."""
    pos = QLINEAR if node.op == "QLinearMatMul" else INTEGER
    sa, sb = _shape(graph, node.inputs[pos["a"][0]]), _shape(graph, node.inputs[pos["b"][0]])
    a2 = sa if len(sa) > 1 else (1,) + sa
    b2 = sb if len(sb) > 1 else sb + (1,)
    batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    return a2, b2, batch


def _row_layout(zs: Tuple[int, ...], a2: Tuple[int, ...], batch: Tuple[int, ...]) -> Optional[Layout]:
    """How a's zero point maps onto the rows of A (None: it does not fit): one for all, an [M] vector, or A's shape
    with K as 1 (its dims 1 or A's)."""
    m = a2[-2]
    if int(np.prod(zs)) == 1:
        return (0,) * len(batch), 0
    if zs == (m,):
        return (0,) * len(batch), 1
    if len(zs) == len(a2) and zs[-1] == 1 and all(z in (1, d) for z, d in zip(zs[:-1], a2[:-1])):
        strides = broadcast_strides(zs[:-1], batch + (m,))
        return tuple(strides[:-1]), strides[-1]
    return None


def _column_layout(zs: Tuple[int, ...], b2: Tuple[int, ...], batch: Tuple[int, ...]) -> Optional[Layout]:
    """How b's zero point (or scale) maps onto the columns of B (None: it does not fit): one for all, an [N] vector,
    or B's shape with K as 1."""
    n = b2[-1]
    if int(np.prod(zs)) == 1:
        return (0,) * len(batch), 0
    if zs == (n,):
        return (0,) * len(batch), 1
    if len(zs) == len(b2) and zs[-2] == 1 and all(z in (1, d) for z, d in zip(zs[:-2] + zs[-1:], b2[:-2] + b2[-1:])):
        strides = broadcast_strides(zs[:-2] + zs[-1:], batch + (n,))
        return tuple(strides[:-1]), strides[-1]
    return None


def _dtype_check(graph: Graph, node: Node, pos: dict) -> Optional[str]:
    """The integer operands int8/uint8, each zero point of its tensor's dtype, the scales float32 or float16."""
    for role, (data, scale, zp) in pos.items():
        name = node.outputs[0] if data < 0 else node.inputs[data]
        dtype = graph.values[name].dtype
        if dtype not in INT8:
            return "%s %r is %s; only int8 and uint8 are supported" % (role, name, dtype)
        z = _input(node, zp)
        if z and graph.values[z].dtype != dtype:
            return "zero point %r is %s, %s %r is %s" % (z, graph.values[z].dtype, role, name, dtype)
        s = _input(node, scale)
        if s and graph.values[s].dtype not in SCALES:
            return "scale %r is %s; only float32 and float16 scales are supported" % (s, graph.values[s].dtype)
    return None


def _per_tensor(graph: Graph, node: Node, positions: Sequence[int]) -> Optional[str]:
    for i in positions:
        name = _input(node, i)
        if name and graph.values[name].size != 1:
            return "%r has shape %s; only one value (per tensor) is supported" % (name, list(_shape(graph, name)))
    return None


def _matmul_check(graph: Graph, node: Node) -> Optional[str]:
    qlinear = node.op == "QLinearMatMul"
    pos = QLINEAR if qlinear else INTEGER
    if qlinear and len(node.inputs) < 8:
        return "QLinearMatMul takes 8 inputs"
    why = _dtype_check(graph, node, pos)
    if why:
        return why
    if min(len(_shape(graph, node.inputs[pos[r][0]])) for r in ("a", "b")) < 1:
        return "scalar operands"
    a2, b2, batch = _operands(graph, node)
    za, zb = _input(node, pos["a"][2]), _input(node, pos["b"][2])
    if za and _row_layout(_shape(graph, za), a2, batch) is None:
        return "a_zero_point %r has shape %s: neither one value, [M] nor A's shape with K as 1" % (
            za,
            list(_shape(graph, za)),
        )
    sb = _input(node, pos["b"][1])
    for what, name in (("b_zero_point", zb), ("b_scale", sb)):
        if name and _column_layout(_shape(graph, name), b2, batch) is None:
            return "%s %r has shape %s: neither one value, [N] nor B's shape with K as 1" % (
                what,
                name,
                list(_shape(graph, name)),
            )
    return _per_tensor(graph, node, (1, 2, 6, 7)) if qlinear else None


def _zero_point(L: Lowering, node: Node, i: int, dtype: str) -> str:
    """Input ``i`` (a zero point), or a constant 0 of ``dtype`` where the node leaves it out."""
    name = _input(node, i)
    return name if name else L.const(np.zeros((1,), np.dtype(dtype)), node.outputs[0] + "~zero_point")


def _float32(L: Lowering, name: str) -> str:
    """A scale as float32: itself, a constant converted at build, or a run-time float16 one converted (exactly)."""
    v = L.value(name)
    if v.dtype == "float32":
        return name
    if v.const is not None:
        return L.const(np.asarray(v.const, np.float32), name + "~f32")
    out = L.temp(v.shape, "float32", "scale")
    A = Arith()
    expr = A.cast(DTYPES[v.dtype], DTYPES["float32"], "x0")
    L.source(
        elementwise(
            v.shape, [v.shape], expr, tag="cast", in_dtypes=[DTYPES[v.dtype]], out_dtype=DTYPES["float32"], arith=A
        ),
        [out, name],
    )
    return out


def lower_int_matmul(L: Lowering, node: Node) -> None:
    qlinear = node.op == "QLinearMatMul"
    pos = QLINEAR if qlinear else INTEGER
    a, b, y = node.inputs[pos["a"][0]], node.inputs[pos["b"][0]], node.outputs[0]
    adt, bdt, ydt = L.value(a).dtype, L.value(b).dtype, L.value(y).dtype
    a2, b2, batch = _operands(L.graph, node)
    za, zb = _zero_point(L, node, pos["a"][2], adt), _zero_point(L, node, pos["b"][2], bdt)
    arow = _row_layout(_shape(L.graph, za), a2, batch)
    bcol = _column_layout(_shape(L.graph, zb), b2, batch)
    assert arow is not None and bcol is not None  # _matmul_check refused the rest
    scol: Layout = ((0,) * len(batch), 0)
    scales: list = []
    if qlinear:
        scales = [_float32(L, node.inputs[i]) for i in (1, 4, 6)]
        scol = _column_layout(_shape(L.graph, scales[1]), b2, batch) or scol
    m, k, n = a2[-2], a2[-1], b2[-1]
    if L.value(za).size == 1 and not any(bcol[0]) and not any(scol[0]):
        _lower_int8_gemm(L, node, a2, b2, batch, (za, zb), scales, (bcol[1], scol[1]))
        return
    shape = MatMulShape(
        m,
        k,
        n,
        batch,
        tuple(s * m * k for s in broadcast_strides(a2[:-2], batch)),
        tuple(s * k * n for s in broadcast_strides(b2[:-2], batch)),
        arow[0],
        bcol[0],
        scol[0],
        arow[1],
        bcol[1],
        scol[1],
        (
            L.value(a).size,
            L.value(b).size,
            L.value(za).size,
            L.value(zb).size,
            L.value(scales[1]).size if qlinear else 1,
        ),
    )
    buffers = [y, a, b, za, zb]
    if qlinear:
        buffers += [scales[0], scales[1], scales[2], node.inputs[7]]
    L.source(int_matmul(shape, adt, bdt, ydt), buffers)


def _lower_int8_gemm(
    L: Lowering,
    node: Node,
    a2: Tuple[int, ...],
    b2: Tuple[int, ...],
    batch: Tuple[int, ...],
    zps: Tuple[str, str],
    scales: list,
    per_column: Tuple[int, int],
) -> None:
    """The tiled int8 GEMM (kernels/qgemm.py: VNNI where the CPU has it), for a's zero point per tensor and b's
    zero point and scale per tensor or per column alike in every batch: B packed at build when it is a constant,
    by a run-time kernel otherwise."""
    qlinear = node.op == "QLinearMatMul"
    pos = QLINEAR if qlinear else INTEGER
    a, b, y = node.inputs[pos["a"][0]], node.inputs[pos["b"][0]], node.outputs[0]
    adt, bdt, ydt = L.value(a).dtype, L.value(b).dtype, L.value(y).dtype
    m, k, n = a2[-2], a2[-1], b2[-1]
    b_batches = int(np.prod(b2[:-2])) if len(b2) > 2 else 1
    bv = L.value(b)
    if bv.const is not None:
        packed, sums = pack_b(np.asarray(bv.const).reshape(b_batches, k, n))
        bp, bsum = L.const(packed, y + "~packed_b"), L.const(sums, y + "~packed_b_sums")
    else:
        np_, ns = packed_sizes(k, n, b_batches)
        bp, bsum = L.temp((np_,), "int8", "packed_b"), L.temp((ns,), "int32", "packed_b_sums")
        L.follow_batch([bp, bsum], b)  # packed one batch after another
        L.source(int8_pack(k, n, b_batches, bdt), [bp, bsum, b], outputs=(0, 1))
    shape = GemmShape(
        m,
        k,
        n,
        batch,
        tuple(s * m * k for s in broadcast_strides(a2[:-2], batch)),
        tuple(broadcast_strides(b2[:-2], batch)),
        b_batches,
        per_column[0],
        per_column[1],
        (L.value(a).size, L.value(zps[1]).size, L.value(scales[1]).size if qlinear else 1),
    )
    buffers = [y, a, bp, bsum, zps[0], zps[1]]
    if qlinear:
        buffers += [scales[0], scales[1], scales[2], node.inputs[7]]
    L.source(int8_gemm(shape, adt, bdt, ydt), buffers)


def _conv_check(graph: Graph, node: Node) -> Optional[str]:
    qlinear = node.op == "QLinearConv"
    x = node.inputs[0]
    w = node.inputs[3 if qlinear else 1]
    if qlinear and len(node.inputs) < 8:
        return "QLinearConv takes 8 or 9 inputs"
    pos = {"x": (0, 1, 2), "w": (3, 4, 5), "y": (-1, 6, 7)} if qlinear else {"x": (0, -1, 2), "w": (1, -1, 3)}
    why = _dtype_check(graph, node, pos)
    if why:
        return why
    xs, ws = _shape(graph, x), _shape(graph, w)
    if len(xs) not in (3, 4):
        return "%d-D windows are not supported (1-D and 2-D)" % (len(xs) - 2)
    if tuple(node.attrs.get("kernel_shape", ws[2:])) != ws[2:]:
        return "kernel_shape does not match the weight"
    group = int(node.attrs.get("group", 1))
    if group < 1 or xs[1] % group or ws[0] % group or ws[1] * group != xs[1]:
        return "group %d does not fit %d input channels and a weight of shape %s" % (group, xs[1], list(ws))
    why = _per_tensor(graph, node, (1, 2, 6, 7) if qlinear else (2,))
    if why:
        return why
    for i in (4, 5) if qlinear else (3,):
        name = _input(node, i)
        if name and graph.values[name].size != 1 and _shape(graph, name) != (ws[0],):
            return "%r has shape %s; only one value or one per output channel (%d) is supported" % (
                name,
                list(_shape(graph, name)),
                ws[0],
            )
    bias = _input(node, 8)
    if bias and (graph.values[bias].dtype != "int32" or _shape(graph, bias) != (ws[0],)):
        return "bias %r is %s %s; QLinearConv takes int32 [%d]" % (
            bias,
            graph.values[bias].dtype,
            list(_shape(graph, bias)),
            ws[0],
        )
    return None


def lower_int_conv(L: Lowering, node: Node) -> None:
    qlinear = node.op == "QLinearConv"
    x, w, y = node.inputs[0], node.inputs[3 if qlinear else 1], node.outputs[0]
    xdt, wdt, ydt = L.value(x).dtype, L.value(w).dtype, L.value(y).dtype
    ws = L.value(w).shape
    g = geometry(L, node, ws[2:], ws[0], int(node.attrs.get("group", 1)))
    xz = _zero_point(L, node, 2, xdt)
    wz = _zero_point(L, node, 5 if qlinear else 3, wdt)
    scales: list = []
    if qlinear:
        scales = [_float32(L, node.inputs[i]) for i in (1, 4, 6)]
        bias = _input(node, 8) or L.const(np.zeros((ws[0],), np.int32), y + "~bias")
        scales += [node.inputs[7], bias]
    if g.groups == 1 and g.oc >= GEMM_MIN_CHANNELS:
        _lower_conv_gemm(L, g, (x, w, y), (xz, wz), (xdt, wdt, ydt), scales)
        return
    buffers = [y, x, w, xz, wz] + scales
    wscale_per_channel = False
    if qlinear:
        wscale_per_channel = L.value(scales[1]).size != 1
    kernel = int_depthwise_conv if takes_depthwise(g) else int_conv
    L.source(kernel(g, xdt, wdt, ydt, L.value(wz).size != 1, wscale_per_channel), buffers)


def _lower_conv_gemm(
    L: Lowering,
    g: ConvGeom,
    names: Tuple[str, str, str],
    zps: Tuple[str, str],
    dtypes: Tuple[str, str, str],
    qlinear: list,
) -> None:
    """ConvInteger or QLinearConv of one group on the int8 GEMM: per image, the weights [OC, C*KH*KW] (w's zero point
    and scale per tensor or per row) times the input's patches [C*KH*KW, OH*OW], into NCHW. The patches are packed
    straight from x (kernels/qgemm.py), or, for constant weights, C a multiple of 4 and a window of several taps,
    tap-major from x's channel quads, a packed word copied whole (the weights' rows then reordered at build).
    ``qlinear``: QLinearConv's x_scale, w_scale, y_scale, y's zero point and int32 bias (the bias added to the sums,
    then requantized), or empty."""
    x, w, y = names
    k, n = g.c * g.kh * g.kw, g.oh * g.ow
    np_, ns = packed_sizes(k, n, g.n)
    bp, bsum = L.temp((np_,), "int8", "patches"), L.temp((ns,), "int32", "patch_sums")
    L.follow_batch([bp, bsum], x)  # packed one image after another
    weights = L.value(w).const
    if tap_major(g) and weights is not None:
        w = _pack_tap_major(L, g, (x, w), zps[0], dtypes[0], (bp, bsum), np.asarray(weights))
    else:
        L.source(int8_pack_conv(g, dtypes[0]), [bp, bsum, x, zps[0]], outputs=(0, 1))
    wz, wdt = zps[1], dtypes[1]
    if wdt == "int8" and L.value(w).const is not None and L.value(wz).const is not None:
        w, wz, wdt = _as_unsigned(L, w), _as_unsigned(L, wz), "uint8"
    per_row = int(L.value(wz).size != 1)
    scale_rows = int(bool(qlinear) and L.value(qlinear[1]).size != 1)
    sizes = (L.value(w).size, 1, 1)
    shape = GemmShape(g.oc, k, n, (g.n,), (0,), (1,), g.n, 0, 0, sizes, per_row, scale_rows, bool(qlinear))
    buffers = [y, w, bp, bsum, wz, zps[0]]
    if qlinear:  # a is w here: a_scale is w_scale, b_scale x_scale
        buffers += [qlinear[1], qlinear[0], qlinear[2], qlinear[3], qlinear[4]]
    L.source(int8_gemm(shape, wdt, dtypes[0], dtypes[2]), buffers)


def _as_unsigned(L: Lowering, name: str) -> str:
    """An int8 constant (weights, or their zero point) moved to uint8, each value + 128: the GEMM then reads the
    weights as the unsigned bytes its VNNI instruction multiplies, with no flip per load (so the compiler
    broadcasts them straight from memory), and (w + 128) - (wz + 128) = w - wz."""
    values = np.asarray(L.value(name).const).astype(np.int16) + 128
    return L.const(values.astype(np.uint8), name + "~unsigned")


def _pack_tap_major(
    L: Lowering, g: ConvGeom, xw: Tuple[str, str], xz: str, xdt: str, packed: Tuple[str, str], weights: np.ndarray
) -> str:
    """Pack the patches tap-major (each packed word one word of the input's channel quads, copied whole) and return
    the constant weights with their rows in the same (ki, kj, c) order."""
    x, w = xw
    hw = g.h * g.w
    quads, sums = L.temp((g.n * g.c * hw // 4,), "int32", "channel_quads"), L.temp((g.n * hw,), "int32", "channel_sums")
    L.follow_batch([quads, sums], x)
    L.source(int8_quads(g, xdt), [quads, sums, x], outputs=(0, 1))
    L.source(int8_pack_taps(g, xdt), [packed[0], packed[1], quads, sums, xz], outputs=(0, 1))
    return L.const(tap_major_weights(weights), w + "~tap_major")


register(
    ["MatMulInteger"],
    "generated C, int32 sums (the int8 GEMM, VNNI where the CPU has it, for a_zero_point per tensor); int8/uint8 A "
    "and B (batch dims broadcast), a_zero_point per tensor or per row, b_zero_point per tensor or per column",
    check=_matmul_check,
    dtypes=DTYPES_TAKEN,
)(lower_int_matmul)
register(
    ["QLinearMatMul"],
    "generated C (the int8 GEMM, VNNI where the CPU has it), int32 sums requantized as onnxruntime (half to even, "
    "saturated); int8/uint8; float32 or float16 scales; b's scale and zero point per tensor or per column, the "
    "others per tensor",
    check=_matmul_check,
    dtypes=DTYPES_TAKEN,
)(lower_int_matmul)
WINDOW = dict(auto_pad=PAD_MODES, dilations=ANY, group=ANY, kernel_shape=ANY, pads=ANY, strides=ANY)
register(
    ["ConvInteger"],
    "generated C, 1-D and 2-D, int32 sums (one group: the int8 GEMM, VNNI where the CPU has it); int8/uint8 x and w, "
    "groups, w_zero_point per tensor or per output channel",
    check=_conv_check,
    dtypes=DTYPES_TAKEN,
    **WINDOW,
)(lower_int_conv)
register(
    ["QLinearConv"],
    "generated C, 1-D and 2-D, int32 sums plus the int32 bias, requantized as onnxruntime (half to even, "
    "saturated); int8/uint8; float32 or float16 scales; w's scale and zero point per tensor or per output channel",
    check=_conv_check,
    dtypes=DTYPES_TAKEN,
    **WINDOW,
)(lower_int_conv)
