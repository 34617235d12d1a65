"""The convolution of the blocked channel layout (NCHWc): C rendered from ``templates/blocked_conv.c.j2``, weights
packed here.

A float32 tensor of logical shape [N, C, H, W] is stored blocked as [N, CB, H, W, 16], CB = ceil(C / 16):
sixteen channels of one pixel sit side by side, so a convolution is a direct loop whose inner step is one
input value broadcast against sixteen output channels' weights. Each call of the kernel's body keeps a
register tile of two output-channel blocks by a run of output pixels in one row (14 pixels where the target
has 32 vector registers, fewer elsewhere; the width is chosen by the target's predefined macros, so one source
serves every target the bundle compiles for). Weights are packed once, at build time, as
[OCB, ICB, KH, KW, 16 input channels, 16 output channels], zero beyond the real channels; the bias is padded
the same way. Only real input channels are read, so a producer's padding channels never reach a sum.

The epilogue ``act(conv + bias + residual)`` runs over each output row once its tiles are stored, as one
vectorised loop; padding output channels get act(0 + residual).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from ...error import NotSupportedError
from ..activations import activation
from ..geometry import LANES, ConvGeom, blocks
from .ckernel import CKernel, make_kernel, render, share

#: Multiply-adds one core_id call does at least: smaller convolutions run in fewer calls.
GRAIN_MACS = 1 << 21
#: Products summed in registers (whole input-channel blocks, at least this many) before the running sum in the
#: output takes them: one sequential sum of all C*KH*KW float32 products (4,608 in VGG's deep layers) loses 2.5x
#: the accuracy of conv2d_gemm's blocked sums on VGG-19's logits; at 256 it matches it, and costs no speed.
PARTIAL_TERMS = 256
#: The register tile is kept only where the compiler unrolls the pixel and block loops fully: at -O2 clang keeps
#: them as loops and the kernel runs at a quarter of its speed.
OPT_FLAGS = ("-O3",)
#: SiLU in the store: ``v / (1 + e^-v)``, and -0.0 (``v * 0``, what onnxruntime's Sigmoid and Mul give there)
#: below -80, the exponent clamped to [-80, 80] (NaN passes the comparisons). A subnormal anywhere costs ~100x
#: on x86 (microcode), in this store and in every convolution that reads it: ``v * sigmoid(v)`` is subnormal for
#: v below about -87, which YOLOv8's first layers reach on a random image, and made the fused model slower than
#: the separate Sigmoid and Mul. Past 80 the clamp changes nothing (1 + e^-80 rounds to 1); a -inf gives -0.0
#: where ``-inf * 0`` is NaN.
SILU_C = "(v < -80.0f ? -0.0f : v / (1.0f + svod_expf((-v) < -80.0f ? -80.0f : ((-v) > 80.0f ? 80.0f : (-v)))))"


def pack_weights(w: np.ndarray) -> np.ndarray:
    """[OC, IC, KH, KW] -> [OCB, ICB, KH, KW, 16 (in), 16 (out)], zero-padded, float32."""
    oc, ic, kh, kw = w.shape
    ocb, icb = blocks(oc), blocks(ic)
    padded = np.zeros((ocb * LANES, icb * LANES, kh, kw), np.float32)
    padded[:oc, :ic] = w
    tiles = padded.reshape(ocb, LANES, icb, LANES, kh, kw)
    return np.ascontiguousarray(tiles.transpose(0, 2, 4, 5, 3, 1))


def oc_tile(g: ConvGeom) -> int:
    """Output-channel blocks per register tile: four where rows are short (a 7-pixel row fills the tile's other
    dimension only half), else two."""
    return 4 if g.ow <= 7 and blocks(g.oc) >= 4 else 2


def epilogue(act: Optional[str], act_params: Dict[str, Any], ocb: int) -> Dict[str, Any]:
    """The store's activation of ``v``, or a per-channel PRelu's slopes, one per blocked channel (zero past the real
    channels). SiLU (the layout pass's, ``y * Sigmoid(y)``) is :data:`SILU_C`, with the library's exp."""
    if act == "SiLU":
        return {"act": SILU_C, "slopes": None, "epilogue": True}
    if act != "PRelu":
        return {"act": activation(act, act_params, "v"), "slopes": None, "epilogue": act is not None}
    slopes = [float(v) for v in act_params["slope"]]
    return {"act": None, "slopes": slopes + [0.0] * (ocb * LANES - len(slopes)), "epilogue": True}


def _block_stride(g: ConvGeom) -> int:
    """Elements between the packed weights of two consecutive output-channel blocks (the tile loads one vector of
    each per tap and input channel)."""
    return blocks(g.c) * g.kh * g.kw * LANES * LANES


def has_edges(g: ConvGeom) -> bool:
    """Whether some output column's window reaches past the input row (padding): without, no tile tests its taps,
    and the kernel is compiled without the testing variant."""
    return g.pl > 0 or (g.ow - 1) * g.sw + (g.kw - 1) * g.dw >= g.w


def _input_layout(g: ConvGeom, plain_input: bool) -> Tuple[Dict[str, Any], int]:
    """How the kernel addresses its input (plain rows of channel planes, or blocked rows of pixels): an image's
    element count, and the input's size."""
    if plain_input:
        return {"plain_input": True, "x_image": g.c * g.h * g.w}, g.n * g.c * g.h * g.w
    size = blocks(g.c) * g.h * g.w * LANES
    return {"plain_input": False, "x_image": size}, g.n * size


def blocked_conv(
    g: ConvGeom, act: Optional[str], act_params: Dict[str, Any], residual: bool, plain_input: bool = False
) -> CKernel:
    """``out = act(conv(x, w) + bias (+ residual))`` for a group-1 2-D convolution, every tensor blocked (the input
    plain [N, C, H, W] with ``plain_input``: a first layer with few channels writes blocked without a reorder).

    Buffers: out [N, OCB, OH, OW, 16], x, w packed (:func:`pack_weights`), bias [OCB * 16]
    (:func:`~svod_min.onnx.geometry.pad_channels`), and residual shaped like out when ``residual``.
    """
    if g.groups != 1:
        raise NotSupportedError("the blocked convolution takes one group, not %d" % g.groups)
    icb, ocb, ot = blocks(g.c), blocks(g.oc), oc_tile(g)
    groups = -(-ocb // ot)
    items = g.n * groups * g.oh
    macs = g.n * g.oc * g.oh * g.ow * g.c * g.kh * g.kw
    chunks, per = share(items, macs // items, GRAIN_MACS)
    layout, x_size = _input_layout(g, plain_input)
    values = dict(
        layout,
        icb=icb,
        ocb=ocb,
        ot=ot,
        groups=groups,
        last_ot=ocb - (groups - 1) * ot,
        **g.window(),
        kw_span=(g.kw - 1) * g.dw,
        ig=-(-PARTIAL_TERMS // (LANES * g.kh * g.kw)),
        edges=int(has_edges(g)),
        last_n=g.c - LANES * (icb - 1),
        block_stride=_block_stride(g),
        items=items,
        per=per,
        residual=residual,
        **dict(epilogue(act, act_params, ocb), epilogue=residual or act is not None),
    )
    out_size = g.n * ocb * g.oh * g.ow * LANES
    extents = [out_size, x_size, ocb * icb * g.kh * g.kw * LANES * LANES, ocb * LANES]
    if residual:
        extents.append(out_size)
    body = render("blocked_conv.c.j2", **values)
    return make_kernel("bconv", body, extents, chunks, OPT_FLAGS, flops=2 * macs, rows_first=True)
