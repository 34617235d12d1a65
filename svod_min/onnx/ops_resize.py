"""Resize (and Upsample, its older form) as separable passes: one generated kernel per resized axis, each
output position reading one source row (nearest) or two weighted ones (linear) whose indices and weights
are computed here, at build time, with ONNX's coordinate transforms in float32 as onnxruntime does."""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from . import csrc_more
from .ir import Graph, Node
from .lower import Lowering
from .table import ANY, one_of, register

TRANSFORMS = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel", "tf_half_pixel_for_nn", "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _input(node: Node, i: int) -> str:
    return node.inputs[i] if len(node.inputs) > i and node.inputs[i] else ""


def _resize_check(graph: Graph, node: Node) -> Optional[str]:
    for i in range(1, len(node.inputs)):
        if node.inputs[i] and not graph.is_const(node.inputs[i]):
            return "roi/scales/sizes must be constants (they are compiled into the kernel)"
    return None


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


def source_coordinate(transform: str, j: np.ndarray, scale: np.float32, n_in: int, n_out: int) -> np.ndarray:
    """Output positions ``j`` -> float32 positions in the input, per coordinate_transformation_mode."""
    j = j.astype(np.float32)
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


def axis_taps(mode: str, transform: str, nearest: str, scale: float, n_in: int, n_out: int, cubic_a: float = -0.75,
              exclude_outside: bool = False) -> Tuple[List[int], List[float], int]:  # fmt: skip
    """(indices, weights, taps per output) of one resized axis."""
    x = source_coordinate(transform, np.arange(n_out), np.float32(scale), n_in, n_out)
    if mode == "nearest":
        idx = np.clip(nearest_index(x, nearest, scale), 0, n_in - 1).astype(np.int64)
        return idx.tolist(), [1.0] * n_out, 1
    if mode == "cubic":
        return cubic_taps(x, n_in, cubic_a, exclude_outside)
    x = np.clip(x, np.float32(0), np.float32(n_in - 1))
    lo = np.minimum(np.floor(x).astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    w_hi = (x - lo.astype(np.float32)).astype(np.float32)
    w_lo = (np.float32(1) - w_hi).astype(np.float32)
    return np.stack([lo, hi], 1).reshape(-1).tolist(), np.stack([w_lo, w_hi], 1).reshape(-1).tolist(), 2


def _modes(graph: Graph, node: Node) -> Tuple[str, str, str]:
    mode = node.attrs.get("mode", "nearest")
    if node.op == "Upsample" or graph.opset < 11:
        return mode, "asymmetric", "simple"
    return mode, node.attrs.get("coordinate_transformation_mode", "half_pixel"), node.attrs.get("nearest_mode", "round_prefer_floor")


@register(["Resize"], "separable generated C passes (one per resized axis); nearest, linear, cubic; scales/sizes constant",
          check=_resize_check, mode=one_of("nearest", "linear", "cubic"), nearest_mode=one_of(*NEAREST_MODES),
          coordinate_transformation_mode=one_of(*TRANSFORMS), cubic_coeff_a=ANY, exclude_outside=ANY,
          extrapolation_value=ANY, antialias=one_of(0), axes=ANY,
          keep_aspect_ratio_policy=one_of("stretch", "not_larger", "not_smaller"))  # fmt: skip
@register(["Upsample"], "as Resize (asymmetric coordinates)", check=_resize_check, mode=one_of("nearest", "linear"), scales=ANY)
def lower_resize(L: Lowering, node: Node) -> None:
    x, out = node.inputs[0], node.outputs[0]
    in_shape, out_shape = L.value(x).shape, L.value(out).shape
    scales = _scales(L.graph, node, in_shape, out_shape)
    mode, transform, nearest = _modes(L.graph, node)
    axes = [a for a in range(len(in_shape)) if in_shape[a] != out_shape[a] or scales[a] != 1.0]
    if not axes:
        L.copy(out, x)
        return
    current, shape = x, list(in_shape)
    for k, a in enumerate(axes):
        index, weight, per_out = axis_taps(mode, transform, nearest, scales[a], in_shape[a], out_shape[a],
                                           float(node.attrs.get("cubic_coeff_a", -0.75)), bool(node.attrs.get("exclude_outside", 0)))
        shape[a] = out_shape[a]
        target = out if k == len(axes) - 1 else L.temp(shape, hint="resize")
        outer, inner = int(np.prod(shape[:a])), int(np.prod(shape[a + 1:]))
        L.source(csrc_more.taps(outer, in_shape[a], out_shape[a], inner, index, weight, per_out), [target, current])
        current = target
