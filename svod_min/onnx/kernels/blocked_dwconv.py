"""The depthwise convolution of the blocked channel layout (NCHWc): C rendered from ``templates/blocked_dwconv.c.j2``,
weights packed here.

A depthwise convolution (group = channels in = channels out) pairs each channel with its own filter, so on blocked
tensors one tap is a 16-channel vector of input times a 16-channel vector of weights: no broadcast, no reduction
across lanes, and any stride or padding. It keeps the mobile nets' depthwise layers between their pointwise
convolutions in the blocked layout, without a reorder on either side. Weights are packed once, at build time, as
[CB, KH, KW, 16], zero beyond the real channels; the bias is padded the same way. The store applies the node's
activation (the blocked convolution's epilogue: the activation table, SiLU or a per-channel PRelu).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from ...error import NotSupportedError
from ..geometry import LANES, ConvGeom, blocks
from .blocked_conv import OPT_FLAGS, epilogue, has_edges
from .ckernel import CKernel, make_kernel, render, share


def pack_depthwise_weights(w: np.ndarray) -> np.ndarray:
    """[C, 1, KH, KW] -> [CB, KH, KW, 16], zero-padded, float32."""
    c, _, kh, kw = w.shape
    cb = blocks(c)
    padded = np.zeros((cb * LANES, kh, kw), np.float32)
    padded[:c] = w[:, 0]
    return np.ascontiguousarray(padded.reshape(cb, LANES, kh, kw).transpose(0, 2, 3, 1))


def blocked_dwconv(g: ConvGeom, act: Optional[str], act_params: Dict[str, Any]) -> CKernel:
    """``out = act(dwconv(x, w) + bias)`` for a depthwise 2-D convolution (groups = channels in = channels out) on
    blocked tensors.

    Buffers: out [N, CB, OH, OW, 16], x [N, CB, H, W, 16], w packed (:func:`pack_depthwise_weights`), bias [CB * 16]
    (:func:`~svod_min.onnx.geometry.pad_channels`)."""
    if not g.groups == g.c == g.oc:
        raise NotSupportedError(
            "the blocked depthwise convolution takes groups = channels in = channels out, not %d, %d, %d"
            % (g.groups, g.c, g.oc)
        )
    cb = blocks(g.c)
    items = g.n * cb * g.oh
    macs = g.n * cb * LANES * g.oh * g.ow * g.kh * g.kw
    chunks, per = share(items, macs // items)
    values = dict(
        cb=cb,
        **g.window(),
        edges=int(has_edges(g)),
        kw_span=(g.kw - 1) * g.dw,
        items=items,
        per=per,
        **epilogue(act, act_params, cb),
    )
    out_size = g.n * cb * g.oh * g.ow * LANES
    extents = [out_size, g.n * cb * g.h * g.w * LANES, cb * g.kh * g.kw * LANES, cb * LANES]
    return make_kernel(
        "bdwconv",
        render("blocked_dwconv.c.j2", **values),
        extents,
        chunks,
        OPT_FLAGS,
        flops=2 * g.n * g.c * g.oh * g.ow * g.kh * g.kw,
        rows_first=True,
    )
