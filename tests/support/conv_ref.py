"""Float64 references for the convolution and pooling kernels (conv2d_gemm, depthwise_conv2d, pools).

Written independently of the kernels: the input is zero-padded explicitly and every window is a
numpy stride-tricks view, so no index arithmetic is shared with the C code.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np
from numpy.lib.stride_tricks import as_strided

#: name -> float parameters (the kernel variables) of each fused activation.
ACT_VARS: Dict[str, Tuple[str, ...]] = {
    "none": (),
    "relu": (),
    "clip": ("clip_min", "clip_max"),
    "leaky_relu": ("alpha",),
    "sigmoid": (),
    "hardsigmoid": ("alpha", "beta"),
    "hardswish": (),
    "tanh": (),
}


def windows(
    x: np.ndarray, kh: int, kw: int, stride: Tuple[int, int], dilation: Tuple[int, int], oh: int, ow: int
) -> np.ndarray:
    """(N, C, oh, ow, kh, kw) view of the (already padded) NCHW array ``x``."""
    n, c, _h, _w = x.shape
    s0, s1, s2, s3 = x.strides
    return as_strided(
        x,
        (n, c, oh, ow, kh, kw),
        (s0, s1, s2 * stride[0], s3 * stride[1], s2 * dilation[0], s3 * dilation[1]),
        writeable=False,
    )


def pad(x: np.ndarray, pads: Sequence[int], value: float = 0.0) -> np.ndarray:
    """NCHW ``x`` padded by (top, left, bottom, right) with ``value``."""
    pt, pl, pb, pr = pads
    return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=value)


def out_size(h: int, k: int, s: int, p0: int, p1: int, d: int) -> int:
    return (h + p0 + p1 - d * (k - 1) - 1) // s + 1


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    stride: Tuple[int, int] = (1, 1),
    pads: Sequence[int] = (0, 0, 0, 0),
    dilation: Tuple[int, int] = (1, 1),
    groups: int = 1,
) -> np.ndarray:
    """Grouped NCHW convolution in float64, weight (OC, C/groups, KH, KW)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    oh = out_size(h, kh, stride[0], pads[0], pads[2], dilation[0])
    ow = out_size(wd, kw, stride[1], pads[1], pads[3], dilation[1])
    win = windows(np.ascontiguousarray(pad(x, pads)), kh, kw, stride, dilation, oh, ow)
    ocg = oc // groups
    out = np.empty((n, oc, oh, ow))
    for g in range(groups):
        part = win[:, g * cg : (g + 1) * cg]  # (n, cg, oh, ow, kh, kw)
        out[:, g * ocg : (g + 1) * ocg] = np.einsum("ncpqij,ocij->nopq", part, w[g * ocg : (g + 1) * ocg])
    return out


def activation(v: np.ndarray, act: str, params: Dict[str, float]) -> np.ndarray:
    """The fused activation in float64 (float parameters rounded to float32 first, as the kernels get them)."""
    p = {k: float(np.float32(val)) for k, val in params.items()}
    if act == "none":
        return v
    if act == "relu":
        return np.maximum(v, 0)
    if act == "clip":
        return np.minimum(np.maximum(v, p["clip_min"]), p["clip_max"])
    if act == "leaky_relu":
        return np.where(v < 0, p["alpha"] * v, v)
    if act == "sigmoid":
        return 1 / (1 + np.exp(-v))
    if act == "hardsigmoid":
        return np.clip(p["alpha"] * v + p["beta"], 0, 1)
    if act == "hardswish":
        return v * np.clip(v / 6 + 0.5, 0, 1)
    if act == "tanh":
        return np.tanh(v)
    raise ValueError(act)


def epilogue(
    conv: np.ndarray,
    act: str,
    params: Dict[str, float],
    bias: Optional[np.ndarray] = None,
    residual: Optional[np.ndarray] = None,
) -> np.ndarray:
    v = conv.copy()
    if bias is not None:
        v += bias.astype(np.float64)[None, :, None, None]
    if residual is not None:
        v += residual.astype(np.float64)
    return activation(v, act, params)


def maxpool2d(
    x: np.ndarray,
    k: Tuple[int, int],
    stride: Tuple[int, int],
    pads: Sequence[int],
    dilation: Tuple[int, int],
    oh: int,
    ow: int,
) -> np.ndarray:
    """Max over each window; padding (and windows running past the end in ceil mode) is -inf."""
    n, c, h, wd = x.shape
    need_b = max(0, (oh - 1) * stride[0] + dilation[0] * (k[0] - 1) + 1 - h - pads[0])
    need_r = max(0, (ow - 1) * stride[1] + dilation[1] * (k[1] - 1) + 1 - wd - pads[1])
    xp = np.ascontiguousarray(pad(x.astype(np.float64), (pads[0], pads[1], need_b, need_r), -np.inf))
    return windows(xp, k[0], k[1], stride, dilation, oh, ow).max(axis=(4, 5))


def avgpool2d(
    x: np.ndarray,
    k: Tuple[int, int],
    stride: Tuple[int, int],
    pads: Sequence[int],
    oh: int,
    ow: int,
    count_include_pad: bool,
) -> np.ndarray:
    """Mean over each window, with explicit loops over the output (onnxruntime's divisor rules)."""
    n, c, h, wd = x.shape
    xd = x.astype(np.float64)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * stride[0] - pads[0], j * stride[1] - pads[1]
            he, we = min(hs + k[0], h + pads[2]), min(ws + k[1], wd + pads[3])
            a0, a1, b0, b1 = max(hs, 0), min(hs + k[0], h), max(ws, 0), min(ws + k[1], wd)
            total = xd[:, :, a0 : max(a0, a1), b0 : max(b0, b1)].sum(axis=(2, 3))
            cnt = (he - hs) * (we - ws) if count_include_pad else max(0, a1 - a0) * max(0, b1 - b0)
            out[:, :, i, j] = total / cnt if cnt > 0 else 0.0
    return out
