"""Resize (and Upsample, its older form) as separable passes: one generated kernel per resized axis, each
output position reading one source row (nearest) or two weighted ones (linear) whose indices and weights
are computed here, at build time, with ONNX's coordinate transforms in float32 as onnxruntime does.
The last axis's pass loops over output positions within a row (table gathers); nearest over the last two
axes is one pass (no intermediate tensor)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..frontend.ir import Graph, Node
from ..frontend.table import ANY, one_of, register
from ..kernels.resize import nearest_2d, taps
from .lowering import Lowering

TRANSFORMS = (
    "half_pixel",
    "asymmetric",
    "align_corners",
    "pytorch_half_pixel",
    "tf_half_pixel_for_nn",
    "half_pixel_symmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _input(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else ""


#: The dtypes Resize takes: float32, and the bytes of a quantized model (nearest over the last two axes only).
RESIZE_DTYPES = ("float32", "int8", "uint8")


def _resize_check(graph: Graph, node: Node) -> Optional[str]:
    for i in range(1, len(node.inputs)):
        if node.inputs[i] and not graph.is_const(node.inputs[i]):
            return "roi/scales/sizes must be constants (they are compiled into the kernel)"
    x = graph.values[node.inputs[0]]
    if x.dtype != "float32" and not _nearest_2d(graph, node):
        return "input %r is %s: an int8/uint8 Resize is nearest over the last two axes only" % (x.name, x.dtype)
    return None


def _nearest_2d(graph: Graph, node: Node) -> bool:
    """Whether the node resizes its last two axes (and no other) with nearest sampling: one gather pass, any dtype."""
    in_shape, out_shape = graph.values[node.inputs[0]].shape, graph.values[node.outputs[0]].shape
    how = _sampling(graph, node)
    if how.mode != "nearest" or how.transform == "tf_crop_and_resize" or len(in_shape) < 2:
        return False
    return _resized_axes(graph, node, in_shape, out_shape) == [len(in_shape) - 2, len(in_shape) - 1]


def _resized_axes(graph: Graph, node: Node, in_shape: Sequence[int], out_shape: Sequence[int]) -> List[int]:
    scales = _scales(graph, node, in_shape, out_shape)
    return [a for a in range(len(in_shape)) if in_shape[a] != out_shape[a] or scales[a] != 1.0]


def _scales(graph: Graph, node: Node, in_shape: Sequence[int], out_shape: Sequence[int]) -> List[float]:
    """The scale of every axis as ONNX defines it: the given scales, or out/in where sizes are given."""
    rank = len(in_shape)
    if node.op == "Upsample" or graph.opset < 11:
        given = node.attrs.get("scales") if "scales" in node.attrs else graph.const(node.inputs[1]).reshape(-1).tolist()
        return [float(np.float32(s)) for s in given]
    axes = [int(a) % rank for a in node.attrs.get("axes", range(rank))]
    scales_in, sizes_in = _input(node, 2), _input(node, 3)
    if scales_in and graph.const(scales_in).size:
        full = [1.0] * rank
        for a, s in zip(axes, graph.const(scales_in).reshape(-1).tolist()):
            full[a] = float(np.float32(s))
        return full
    policy = node.attrs.get("keep_aspect_ratio_policy", "stretch")
    sizes = [int(v) for v in graph.const(sizes_in).reshape(-1)]
    ratios = [float(np.float32(s) / np.float32(in_shape[a])) for a, s in zip(axes, sizes)]
    full = [1.0] * rank
    for a, r in zip(axes, ratios):
        full[a] = r if policy == "stretch" else (min(ratios) if policy == "not_larger" else max(ratios))
    return full


def source_coordinate(
    transform: str, j: np.ndarray, scale: np.float32, n_in: int, n_out: int, roi: Tuple[float, float] = (0.0, 1.0)
) -> np.ndarray:
    """Output positions ``j`` -> float32 positions in the input, per coordinate_transformation_mode."""
    j = j.astype(np.float32)
    if transform == "tf_crop_and_resize":
        start, end, span = np.float32(roi[0]), np.float32(roi[1]), np.float32(n_in - 1)
        if n_out <= 1:
            return np.full_like(j, np.float32(0.5) * (start + end) * span)
        return start * span + j * (end - start) * span / np.float32(n_out - 1)
    if transform == "align_corners":
        return j * np.float32(n_in - 1) / np.float32(n_out - 1) if n_out > 1 else np.zeros_like(j)
    if transform == "asymmetric":
        return j / scale
    if transform == "tf_half_pixel_for_nn":
        return (j + np.float32(0.5)) / scale
    if transform == "pytorch_half_pixel" and n_out <= 1:
        return np.zeros_like(j)
    if transform == "half_pixel_symmetric":  # half_pixel, shifted so the sampled span stays centred
        adjustment = np.float32(n_out) / (scale * np.float32(n_in))
        offset = np.float32(n_in) / np.float32(2) * (np.float32(1) - adjustment)
        return offset + (j + np.float32(0.5)) / scale - np.float32(0.5)
    return (j + np.float32(0.5)) / scale - np.float32(0.5)


def nearest_index(x: np.ndarray, mode: str, scale: float) -> np.ndarray:
    if mode == "simple":  # opset < 11 and Upsample: truncation, or ceil when shrinking
        return np.ceil(x) if scale < 1 else np.trunc(x)
    if mode == "round_prefer_floor":
        return np.where(x == np.floor(x) + np.float32(0.5), np.floor(x), np.round(x))
    if mode == "round_prefer_ceil":
        return np.floor(x + np.float32(0.5))
    return np.floor(x) if mode == "floor" else np.ceil(x)


def cubic_taps(x: np.ndarray, n_in: int, a: float, exclude_outside: bool) -> Tuple[List[int], List[float], int]:
    """Four taps around each source coordinate, Keys' cubic kernel with coefficient ``a``; taps past the edge
    read the edge, or (``exclude_outside``) get weight 0 and the rest are renormalised."""
    base = np.floor(x)
    t = (x - base).astype(np.float64)
    dist = np.stack([t + 1, t, 1 - t, 2 - t], 1)
    near = ((a + 2) * dist - (a + 3)) * dist * dist + 1
    far = ((a * dist - 5 * a) * dist + 8 * a) * dist - 4 * a
    weight = np.where(dist <= 1, near, far)
    index = base.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
    if exclude_outside:
        weight = np.where((index < 0) | (index >= n_in), 0.0, weight)
        weight = weight / weight.sum(1, keepdims=True)
    index = np.clip(index, 0, n_in - 1)
    return index.reshape(-1).tolist(), weight.astype(np.float32).reshape(-1).tolist(), 4


@dataclass(frozen=True)
class Sampling:
    """How a Resize node samples: mode, coordinate transform, rounding, cubic parameters, extrapolation."""

    mode: str
    transform: str
    nearest: str
    cubic_a: float = -0.75
    exclude_outside: bool = False
    extrapolation: float = 0.0


def axis_taps(
    how: Sampling, scale: float, n_in: int, n_out: int, roi: Tuple[float, float] = (0.0, 1.0)
) -> Tuple[List[int], List[float], int, Optional[List[float]]]:
    """(indices, weights, taps per output, constant per output or None) of one resized axis; tf_crop_and_resize
    positions outside the input read nothing and hold the extrapolation value."""
    x = source_coordinate(how.transform, np.arange(n_out), np.float32(scale), n_in, n_out, roi)
    if how.mode == "nearest":
        idx = np.clip(nearest_index(x, how.nearest, scale), 0, n_in - 1).astype(np.int64)
        index, weight, per_out = idx.tolist(), [1.0] * n_out, 1
    elif how.mode == "cubic":
        index, weight, per_out = cubic_taps(x, n_in, how.cubic_a, how.exclude_outside)
    else:
        xc = np.clip(x, np.float32(0), np.float32(n_in - 1))
        lo = np.minimum(np.floor(xc).astype(np.int64), n_in - 1)
        hi = np.minimum(lo + 1, n_in - 1)
        w_hi = (xc - lo.astype(np.float32)).astype(np.float32)
        w_lo = (np.float32(1) - w_hi).astype(np.float32)
        index, weight, per_out = (
            np.stack([lo, hi], 1).reshape(-1).tolist(),
            np.stack([w_lo, w_hi], 1).reshape(-1).tolist(),
            2,
        )
    if how.transform != "tf_crop_and_resize":
        return index, weight, per_out, None
    outside = (x < 0) | (x > np.float32(n_in - 1))
    weight = [0.0 if outside[i // per_out] else w for i, w in enumerate(weight)]
    return index, weight, per_out, [how.extrapolation if o else 0.0 for o in outside.tolist()]


def _roi(graph: Graph, node: Node, rank: int) -> List[Tuple[float, float]]:
    """(start, end) per axis from the roi input (only read by tf_crop_and_resize)."""
    full = [(0.0, 1.0)] * rank
    roi = _input(node, 1)
    if not roi or graph.opset < 11 or not graph.const(roi).size:
        return full
    axes = [int(a) % rank for a in node.attrs.get("axes", range(rank))]
    values = graph.const(roi).reshape(-1).astype(np.float32).tolist()
    for k, a in enumerate(axes):
        full[a] = (values[k], values[k + len(axes)])
    return full


def _sampling(graph: Graph, node: Node) -> Sampling:
    a = node.attrs
    mode = a.get("mode", "nearest")
    if node.op == "Upsample" or graph.opset < 11:
        return Sampling(mode, "asymmetric", "simple")
    return Sampling(
        mode,
        a.get("coordinate_transformation_mode", "half_pixel"),
        a.get("nearest_mode", "round_prefer_floor"),
        float(a.get("cubic_coeff_a", -0.75)),
        bool(a.get("exclude_outside", 0)),
        float(a.get("extrapolation_value", 0.0)),
    )


@register(
    ["Resize"],
    "separable generated C passes (one per resized axis; nearest over the last two axes in one); "
    "nearest, linear, cubic; scales/sizes constant; int8/uint8 nearest over the last two axes",
    check=_resize_check,
    dtypes=RESIZE_DTYPES,
    mode=one_of("nearest", "linear", "cubic"),
    nearest_mode=one_of(*NEAREST_MODES),
    coordinate_transformation_mode=one_of(*TRANSFORMS),
    cubic_coeff_a=ANY,
    exclude_outside=ANY,
    extrapolation_value=ANY,
    antialias=one_of(0),
    axes=ANY,
    keep_aspect_ratio_policy=one_of("stretch", "not_larger", "not_smaller"),
)
@register(
    ["Upsample"],
    "as Resize (asymmetric coordinates)",
    check=_resize_check,
    mode=one_of("nearest", "linear"),
    scales=ANY,
)
def lower_resize(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    in_shape, out_shape = L.value(x).shape, L.value(out).shape
    scales = _scales(L.graph, node, in_shape, out_shape)
    how = _sampling(L.graph, node)
    roi = _roi(L.graph, node, len(in_shape)) if how.transform == "tf_crop_and_resize" else [(0.0, 1.0)] * len(in_shape)
    axes = [a for a in range(len(in_shape)) if in_shape[a] != out_shape[a] or scales[a] != 1.0 or roi[a] != (0.0, 1.0)]
    if not axes:
        L.copy(out, x)
        return
    rank = len(in_shape)
    if how.mode == "nearest" and how.transform != "tf_crop_and_resize" and axes == [rank - 2, rank - 1]:
        rows_at = axis_taps(how, scales[rank - 2], in_shape[rank - 2], out_shape[rank - 2])[0]
        cols_at = axis_taps(how, scales[rank - 1], in_shape[rank - 1], out_shape[rank - 1])[0]
        outer = int(np.prod(in_shape[: rank - 2]))
        kernel = nearest_2d(outer, in_shape[rank - 2], in_shape[rank - 1], rows_at, cols_at, L.value(x).dtype)
        L.source(kernel, [out, x])
        return
    current, shape = x, list(in_shape)
    for k, a in enumerate(axes):
        index, weight, per_out, fill = axis_taps(how, scales[a], in_shape[a], out_shape[a], roi[a])
        shape[a] = out_shape[a]
        target = out if k == len(axes) - 1 else L.temp(shape, hint="resize")
        outer, inner = int(np.prod(shape[:a])), int(np.prod(shape[a + 1 :]))
        L.source(taps(outer, in_shape[a], out_shape[a], inner, index, weight, per_out, fill), [target, current])
        current = target
