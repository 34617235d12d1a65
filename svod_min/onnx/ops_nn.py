"""Convolution, dense layers, pooling, normalisation and softmax: library conv2d_gemm / depthwise_conv2d / pools
(conv_kernels.py) / matmul / reductions / layernorm where they fit, generated C (1-D windows, LRN, softmax) otherwise."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import csrc, csrc_more, csrc_pool
from .conv_kernels import (add_residual, conv_library_applies, lower_conv_library, lower_global_avgpool_library,
                           lower_pool_library, residual_of)
from .ir import Graph, Node
from .lower import Lowering
from .ops_elementwise import F32, activation_of, apply_activation
from .table import ANY, one_of, register

PAD_MODES = one_of("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
#: Grouped convolutions of at most this many groups run as one library conv2d per group (N = 1).
LIBRARY_GROUPS = 8
#: Largest im2col buffer (bytes) a convolution may use to run as one library matmul (the arena reuses it).
IM2COL_BYTES = 64 << 20


def _spatial_rank(graph: Graph, node: Node) -> int:
    return len(graph.values[node.inputs[0]].shape) - 2


def _window_check(graph: Graph, node: Node) -> Optional[str]:
    rank = _spatial_rank(graph, node)
    if rank not in (1, 2):
        return "%d-D windows are not supported (1-D and 2-D)" % rank
    if node.op == "MaxPool" and len(node.outputs) > 1 and node.outputs[1]:
        return "the Indices output is not supported"
    if node.op == "Conv" and graph.values[node.inputs[1]].shape[2:] != tuple(node.attrs.get("kernel_shape", graph.values[node.inputs[1]].shape[2:])):
        return "kernel_shape does not match the weight"
    if node.op in ("MaxPool", "AveragePool") and node.attrs.get("ceil_mode", 0):
        return _ceil_window_check(graph, node)
    return None


def _ceil_window_check(graph: Graph, node: Node) -> Optional[str]:
    """A ceil_mode output whose last window starts past the input and its leading pad: onnx's shape inference
    keeps that window, onnxruntime drops it (one output fewer), so the two disagree on the output's shape."""
    in_hw = list(graph.values[node.inputs[0]].shape[2:])
    out_hw = list(graph.values[node.outputs[0]].shape[2:])
    kernel = list(node.attrs["kernel_shape"])
    strides = list(node.attrs.get("strides", [1] * len(in_hw)))
    dil = list(node.attrs.get("dilations", [1] * len(in_hw)))
    pads = _pads(node, in_hw, kernel, strides, dil)
    for axis, (size, out, stride, begin) in enumerate(zip(in_hw, out_hw, strides, pads)):
        if isinstance(out, int) and (out - 1) * stride >= size + begin:
            return ("ceil_mode: the last window of spatial axis %d starts in the end padding (output %d, stride %d, "
                    "input %d, leading pad %d); onnx shape inference keeps it, onnxruntime drops it"
                    % (axis, out, stride, size, begin))  # fmt: skip
    return None


def _pads(node: Node, in_hw: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dil: Sequence[int]) -> List[int]:
    """[top, left, bottom, right] (2-D) from pads or auto_pad."""
    rank = len(in_hw)
    mode = node.attrs.get("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(rank):
            out = -(-in_hw[i] // strides[i])
            total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in_hw[i])
            small = total // 2
            begin.append(small if mode == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        return begin + end
    if mode == "VALID":
        return [0] * (2 * rank)
    return list(node.attrs.get("pads", [0] * (2 * rank)))


def geometry(L: Lowering, node: Node, kernel: Sequence[int], oc: int, groups: int = 1) -> csrc.ConvGeom:
    """The window geometry of a Conv/pool node as 2-D (a 1-D one gets H = 1); output sizes from shape inference."""
    xs, ys = L.value(node.inputs[0]).shape, L.value(node.outputs[0]).shape
    in_hw, out_hw = list(xs[2:]), list(ys[2:])
    rank = len(in_hw)
    strides = list(node.attrs.get("strides", [1] * rank))
    dil = list(node.attrs.get("dilations", [1] * rank))
    pads = _pads(node, in_hw, kernel, strides, dil)
    if rank == 1:
        in_hw, out_hw, kernel, strides, dil = [1] + in_hw, [1] + out_hw, [1] + list(kernel), [1] + strides, [1] + dil
        pads = [0, pads[0], 0, pads[1]]
    return csrc.ConvGeom(xs[0], xs[1], in_hw[0], in_hw[1], oc, out_hw[0], out_hw[1], kernel[0], kernel[1], strides[0],
                         strides[1], pads[0], pads[1], pads[2], pads[3], dil[0], dil[1], groups)  # fmt: skip


@register(["Conv"], "2-D float32: the blocked layout's direct convolution (one group, >= 16 output channels), else library conv2d_gemm (any groups, any N; depthwise: generated C); bias, BatchNormalization, the activations and a residual Add in the epilogue; 1-D: library matmul over im2col columns, conv2d, or generated C",
          check=_window_check, auto_pad=PAD_MODES, dilations=ANY, group=ANY, kernel_shape=ANY, pads=ANY, strides=ANY)
def lower_conv(L: Lowering, node: Node) -> None:
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    out = node.outputs[0]
    ws = L.value(w).shape
    g = geometry(L, node, ws[2:], ws[0], int(node.attrs.get("group", 1)))
    if conv_library_applies(L, node, g):
        lower_conv_library(L, node, g, bias)
    elif residual_of(node):  # the residual Add and activation run after a plain convolution
        _lower_conv_generic(L, dataclasses.replace(node, inputs=node.inputs[:3], fused={}), g, x, w, bias, out)
        add_residual(L, node, out)
    else:
        _lower_conv_generic(L, node, g, x, w, bias, out)


def _lower_conv_generic(L: Lowering, node: Node, g: csrc.ConvGeom, x: str, w: str, bias: str, out: str) -> None:
    """1-D and other convolutions the library kernels leave out: matmul over im2col, conv2d, generated C."""
    symmetric = g.pt == g.pb and g.pl == g.pr
    kind, _ = activation_of(node)
    if g.groups == 1 and g.n == 1 and (g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr) == (1, 1, 1, 1, 0, 0, 0, 0):
        _conv_as_matmul(L, node, g, x, w, bias, out)
    elif g.groups == 1 and g.n == 1 and 4 * g.c * g.kh * g.kw * g.oh * g.ow <= IM2COL_BYTES:
        col = L.temp((g.c * g.kh * g.kw, g.oh * g.ow), hint="col")
        L.source(csrc.im2col(g), [col, x])
        _conv_as_matmul(L, node, g, col, w, bias, out, k=g.c * g.kh * g.kw)
    elif g.n == 1 and (g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr) == (1, 1, 1, 1, 0, 0, 0, 0) and g.groups <= 64:
        _grouped_pointwise(L, node, g, x, w, bias, out)
    elif g.groups == g.c == g.oc and csrc_more.depthwise_padded_plane(g) <= csrc_more.DEPTHWISE_PAD_MAX:
        kind, params = activation_of(node)
        L.source(csrc_more.depthwise2d(g, bool(bias), kind, params), [out, x, w] + ([bias] if bias else []))
    elif symmetric and (g.groups == 1 or (g.n == 1 and g.groups <= LIBRARY_GROUPS)) and kind in (None, "Relu"):
        _conv_library(L, g, x, w, bias, out)
        apply_activation(L, out, node)
    else:
        kind, params = activation_of(node)
        L.source(csrc.conv2d(g, bool(bias), kind, params), [out, x, w] + ([bias] if bias else []))


def _conv_library(L: Lowering, g: csrc.ConvGeom, x: str, w: str, bias: str, out: str) -> None:
    cg, ocg = g.c // g.groups, g.oc // g.groups
    params = {"dtype": "float32", "bias": bool(bias)}
    for k in range(g.groups):
        if g.groups == 1:
            bx, bw, bb, bo = x, w, bias, out
        else:
            bx = L.subview(x, 4 * k * cg * g.h * g.w, (1, cg, g.h, g.w))
            bw = L.subview(w, 4 * k * ocg * cg * g.kh * g.kw, (ocg, cg, g.kh, g.kw))
            bb = L.subview(bias, 4 * k * ocg, (ocg,)) if bias else ""
            bo = L.subview(out, 4 * k * ocg * g.oh * g.ow, (1, ocg, g.oh, g.ow))
        variables = {"N": g.n, "C": cg, "H": g.h, "W": g.w, "OC": ocg, "KH": g.kh, "KW": g.kw, "sh": g.sh, "sw": g.sw,
                     "ph": g.pt, "pw": g.pl, "dh": g.dh, "dw": g.dw}  # fmt: skip
        L.library("conv2d", params, [bo, bx, bw] + ([bb] if bias else []), variables)


def _conv_as_matmul(L: Lowering, node: Node, g: csrc.ConvGeom, x: str, w: str, bias: str, out: str, k: int = 0) -> None:
    """N = 1: out[OC, OH*OW] = W[OC, K] @ x[K, OH*OW] (x: the input of a 1x1 stride-1 unpadded conv, or its im2col
    columns), then bias and activation in place."""
    hw = g.oh * g.ow
    L.library("matmul", F32, [out, w, x], {"M": g.oc, "N": hw, "K": k or g.c})
    _epilogue(L, node, out, (g.oc, hw), bias, (g.oc, 1))


def _grouped_pointwise(L: Lowering, node: Node, g: csrc.ConvGeom, x: str, w: str, bias: str, out: str) -> None:
    """A grouped 1x1 convolution (N = 1): one library matmul per group on views, then one bias/activation epilogue."""
    cg, ocg, hw = g.c // g.groups, g.oc // g.groups, g.h * g.w
    for k in range(g.groups):
        bo = L.subview(out, 4 * k * ocg * hw, (ocg, hw))
        bw = L.subview(w, 4 * k * ocg * cg, (ocg, cg))
        bx = L.subview(x, 4 * k * cg * hw, (cg, hw))
        L.library("matmul", F32, [bo, bw, bx], {"M": ocg, "N": hw, "K": cg})
    _epilogue(L, node, out, (g.oc, hw), bias, (g.oc, 1))


def _epilogue(L: Lowering, node: Node, out: str, shape: Tuple[int, ...], bias: str, bias_shape: Tuple[int, ...],
              alpha: float = 1.0, beta: float = 1.0) -> None:  # fmt: skip
    """out = act(alpha * out + beta * bias) in place; nothing when there is nothing to do."""
    kind, params = activation_of(node)
    if not bias and alpha == 1.0:
        apply_activation(L, out, node)
        return
    expr = "x0" if alpha == 1.0 else "%s * x0" % csrc.flt(alpha)
    if bias:
        expr = "(%s + %s)" % (expr, "x1" if beta == 1.0 else "%s * x1" % csrc.flt(beta))
    ins = [shape] + ([bias_shape] if bias else [])
    L.source(csrc.elementwise(shape, ins, csrc.activation(kind, params, expr), inplace=True, tag="bias"), [out] + ([bias] if bias else []))


def _transposed(L: Lowering, name: str) -> str:
    rows, cols = L.value(name).shape
    t = L.temp((cols, rows))
    L.library("transpose", F32, [t, name], {"rows": rows, "cols": cols})
    return t


@register(["Gemm"], "library matmul; constant B pre-transposed and scaled at build time; bias and activation in one epilogue",
          alpha=ANY, beta=ANY, transA=ANY, transB=ANY, broadcast=ANY, _normal=ANY)
def lower_gemm(L: Lowering, node: Node) -> None:
    a, b = node.inputs[0], node.inputs[1]
    c = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    out = node.outputs[0]
    attrs = node.attrs
    if attrs.get("transA", 0):
        a = _transposed(L, a)
    if attrs.get("transB", 0) and not attrs.get("_normal"):
        b = _transposed(L, b)
    m, k = L.value(a).shape
    n = L.value(b).shape[1]
    L.library("matmul", F32, [out, a, b], {"M": m, "N": n, "K": k})
    alpha = 1.0 if attrs.get("_normal") else float(attrs.get("alpha", 1.0))
    beta = 1.0 if attrs.get("_normal") else float(attrs.get("beta", 1.0))
    _epilogue(L, node, out, (m, n), c, L.value(c).shape if c else (), alpha, beta)


def _matmul_check(graph: Graph, node: Node) -> Optional[str]:
    a, b = (graph.values[n].shape for n in node.inputs)
    if len(a) < 1 or len(b) < 1:
        return "scalar operands"
    if len(a) == 1 and len(b) > 2:
        return "a 1-D first operand with a batched second one"
    return None


@register(["MatMul"], "library matmul; batched operands as one matmul per batch (numpy broadcasting of batch dims)", check=_matmul_check)
def lower_matmul(L: Lowering, node: Node) -> None:
    a, b = node.inputs
    out = node.outputs[0]
    sa, sb = L.value(a).shape, L.value(b).shape
    a2 = sa if len(sa) > 1 else (1,) + sa
    b2 = sb if len(sb) > 1 else sb + (1,)
    m, k, n = a2[-2], a2[-1], b2[-1]
    if len(b2) == 2:  # the batch of A folds into M
        L.library("matmul", F32, [out, a, b], {"M": int(np.prod(a2[:-1])), "N": n, "K": k})
    else:
        batch = tuple(L.value(out).shape[:-2])
        _batched_matmul(L, out, a, b, a2, b2, batch, m, k, n)
    apply_activation(L, out, node)


def _batched_matmul(L: Lowering, out: str, a: str, b: str, a2: Sequence[int], b2: Sequence[int], batch: Tuple[int, ...],
                    m: int, k: int, n: int) -> None:  # fmt: skip
    sa = csrc.broadcast_strides(a2[:-2], batch)
    sb = csrc.broadcast_strides(b2[:-2], batch)
    for i, idx in enumerate(np.ndindex(*batch)):
        oa = sum(j * s for j, s in zip(idx, sa)) * m * k
        ob = sum(j * s for j, s in zip(idx, sb)) * k * n
        va = L.subview(a, 4 * oa, (m, k))
        vb = L.subview(b, 4 * ob, (k, n))
        vo = L.subview(out, 4 * i * m * n, (m, n))
        L.library("matmul", F32, [vo, va, vb], {"M": m, "N": n, "K": k})


@register(["MaxPool"], "generated C in two passes (the window's rows, then its columns), 1-D and 2-D; NaN propagates; the Indices output is not supported", check=_window_check,
          auto_pad=PAD_MODES, ceil_mode=ANY, dilations=ANY, kernel_shape=ANY, pads=ANY, storage_order=ANY, strides=ANY)
@register(["AveragePool"], "generated C in two passes (the window's rows, then its columns), 1-D and 2-D; count_include_pad 0/1, ceil_mode", check=_window_check,
          auto_pad=PAD_MODES, ceil_mode=ANY, count_include_pad=one_of(0, 1), dilations=ANY, kernel_shape=ANY, pads=ANY, strides=ANY)
def lower_pool(L: Lowering, node: Node) -> None:
    xs = L.value(node.inputs[0]).shape
    g = geometry(L, node, node.attrs["kernel_shape"], xs[1])
    if lower_pool_library(L, node, g):
        return
    kind, include = "max" if node.op == "MaxPool" else "avg", bool(node.attrs.get("count_include_pad", 0))
    kernel = csrc_pool.pool2d(g, kind, include) or csrc.pool2d(g, kind, include)
    L.source(kernel, [node.outputs[0], node.inputs[0]])


@register(["GlobalAveragePool", "GlobalMaxPool"], "library global_avgpool (4-D float32), else reduce_mean; reduce_max over the spatial dims")
def lower_global_pool(L: Lowering, node: Node) -> None:
    if node.op == "GlobalAveragePool" and lower_global_avgpool_library(L, node):
        return
    xs = L.value(node.inputs[0]).shape
    outer, red = xs[0] * xs[1], int(np.prod(xs[2:]))
    kernel = "reduce_mean" if node.op == "GlobalAveragePool" else "reduce_max"
    L.library(kernel, F32, [node.outputs[0], node.inputs[0]], {"outer": outer, "red": red, "inner": 1, "so": red, "sr": 1, "si": 1})


@register(["LRN"], "generated C", alpha=ANY, beta=ANY, bias=ANY, size=ANY)
def lower_lrn(L: Lowering, node: Node) -> None:
    xs = L.value(node.inputs[0]).shape
    a = node.attrs
    kernel = csrc.lrn(xs[0], xs[1], int(np.prod(xs[2:])), int(a["size"]), float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75)), float(a.get("bias", 1.0)))
    L.source(kernel, [node.outputs[0], node.inputs[0]])


def _bn_check(graph: Graph, node: Node) -> Optional[str]:
    if node.attrs.get("training_mode", 0):
        return "training_mode=1 (inference only)"
    if any(o for o in node.outputs[1:]):
        return "the training outputs (mean, var, saved statistics)"
    if not all(graph.is_const(n) for n in node.inputs[1:5]):
        return "scale, bias, mean and var must be constants"
    return None


@register(["BatchNormalization"], "inference; folded into the Conv/Gemm before it, else one per-channel scale+shift kernel",
          check=_bn_check, epsilon=ANY, momentum=ANY, spatial=one_of(1), is_test=ANY, training_mode=one_of(0), consumed_inputs=ANY)
def lower_batchnorm(L: Lowering, node: Node) -> None:
    raise AssertionError("BatchNormalization with constant statistics is an svod.Affine after the passes")


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


@register(["Softmax", "LogSoftmax"], "generated C: rows of the last axis (opset < 13: the flattened trailing axes) or blocks of 64 inner positions, vector exp", axis=ANY)
def lower_softmax(L: Lowering, node: Node) -> None:
    shape = L.value(node.inputs[0]).shape
    rank = max(1, len(shape))
    opset = L.graph.opset
    axis = _axis(int(node.attrs.get("axis", 1 if opset < 13 else -1)), rank)
    if opset < 13:
        outer, red, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis:])), 1
    else:
        outer, red, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    L.source(csrc.softmax_axis(outer, red, inner, node.op == "LogSoftmax"), [node.outputs[0], node.inputs[0]])


def _layernorm_check(graph: Graph, node: Node) -> Optional[str]:
    shape = graph.values[node.inputs[0]].shape
    axis = _axis(int(node.attrs.get("axis", -1)), len(shape))
    if any(o for o in node.outputs[1:]):
        return "the Mean and InvStdDev outputs"
    cols = int(np.prod(shape[axis:]))
    for n in node.inputs[1:]:
        if n and graph.values[n].size != cols:
            return "scale/bias that broadcast (they must hold the normalised size)"
    return None


@register(["LayerNormalization"], "library layernorm over the trailing axes", check=_layernorm_check, axis=ANY, epsilon=ANY, stash_type=one_of(1))
def lower_layernorm(L: Lowering, node: Node) -> None:
    x = node.inputs[0]
    shape = L.value(x).shape
    axis = _axis(int(node.attrs.get("axis", -1)), len(shape))
    rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    scale = node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else L.const(np.zeros(cols, np.float32), node.outputs[0] + "~zero_bias")
    L.library("layernorm", F32, [node.outputs[0], x, scale, bias], {"rows": rows, "cols": cols, "eps": float(node.attrs.get("epsilon", 1e-5))})


def reduce_axes(graph: Graph, node: Node) -> Optional[List[int]]:
    shape = graph.values[node.inputs[0]].shape
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = [int(a) for a in graph.const(node.inputs[1]).reshape(-1)] if graph.is_const(node.inputs[1]) else None
        if axes is None:
            return None
    if axes is None or len(axes) == 0:
        if node.attrs.get("noop_with_empty_axes", 0):
            return []
        axes = list(range(len(shape)))
    return sorted(_axis(int(a), len(shape)) for a in axes)


def _reduce_check(graph: Graph, node: Node) -> Optional[str]:
    axes = reduce_axes(graph, node)
    if axes is None:
        return "axes must be a constant"
    if axes and axes != list(range(axes[0], axes[-1] + 1)):
        return "axes %s are not one contiguous block" % axes
    return None


REDUCE_LIB = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max"}
REDUCE_C = {"ReduceMin": "min", "ReduceProd": "prod", "ReduceSumSquare": "sumsquare", "ReduceL1": "l1", "ReduceL2": "l2", "ReduceLogSum": "logsum"}


@register(sorted(REDUCE_LIB) + sorted(REDUCE_C), "library reduce_mean/sum/max, generated C for the others; axes one contiguous block",
          check=_reduce_check, axes=ANY, keepdims=ANY, noop_with_empty_axes=ANY)
def lower_reduce(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    shape = L.value(x).shape
    axes = reduce_axes(L.graph, node) or []
    if not axes:
        L.view(out, x)
        return
    outer, red, inner = int(np.prod(shape[:axes[0]])), int(np.prod(shape[axes[0]:axes[-1] + 1])), int(np.prod(shape[axes[-1] + 1:]))
    if node.op in REDUCE_LIB:
        L.library(REDUCE_LIB[node.op], F32, [out, x], {"outer": outer, "red": red, "inner": inner, "so": red * inner, "sr": inner, "si": 1})
    else:
        L.source(csrc.reduce_axis(outer, red, inner, REDUCE_C[node.op]), [out, x])
