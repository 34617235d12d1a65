"""The int8 GEMM of MatMulInteger and QLinearMatMul (``templates/qgemm.c.j2``): u8 x s8 products summed in int32,
with AVX512-VNNI or AVX-VNNI where the CPU has them (chosen per call from ``svod_int8_isa``, which svod_min's loader
sets from ``/proc/cpuinfo``) and portable C elsewhere; B packed into 16-column blocks of 4-byte K groups, at build
for a constant B (:func:`pack_b`) or by a run-time kernel (``templates/qpack.c.j2``) for another."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import numpy as np

from ..geometry import ConvGeom
from .ckernel import CKernel, make_kernel, render, share
from .quant import QUANT_TYPES

#: Rows of A per tile, and 16-column blocks of B per panel (MR x NR zmm sums: 24 of the 32 registers).
MR, NR = 6, 4
PANEL_COLUMNS = NR * 16
#: The widened way (x86-64 without VNNI) keeps a tile's rows of A as 16-bit lanes on the kernel's stack, MR * K4 * 8
#: bytes; a K past this budget takes the portable C way there instead.
QUADS_BYTES = 1 << 20


@dataclass(frozen=True)
class GemmShape:
    """out[batch..., M, N] from a[..., M, K] and packed B. ``bd``: the output's batch dims; ``sa``: A's element
    stride per batch dim, ``sp``: the packed B's per batch dim (in whole packed matrices; 0 where one repeats);
    ``b_batches``: how many matrices B holds; ``bzn``/``bsn``: b's zero point's and scale's stride per column
    (0: per tensor); ``sizes``: the element counts of a, b's zero point and b's scale; ``azm``: a's zero point's
    stride per row (0: per tensor, 1: one per row, the same in every batch); ``asr``: a's scale's (QLinearConv's
    w_scale per output channel; b's is then per tensor); ``bias``: an int32 per row is added to each sum."""

    m: int
    k: int
    n: int
    bd: Tuple[int, ...]
    sa: Tuple[int, ...]
    sp: Tuple[int, ...]
    b_batches: int
    bzn: int
    bsn: int
    sizes: Tuple[int, int, int]
    azm: int = 0
    asr: int = 0
    bias: bool = False


def panels(n: int) -> int:
    return -(-n // PANEL_COLUMNS)


def k_groups(k: int) -> int:
    return -(-k // 4)


def panel_bytes(k: int) -> int:
    return k_groups(k) * NR * 64


def packed_sizes(k: int, n: int, batches: int) -> Tuple[int, int]:
    """Element counts of the packed B (int8) and its column sums (int32)."""
    return batches * panels(n) * panel_bytes(k), batches * panels(n) * PANEL_COLUMNS


def pack_b(b: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """B ([batches, K, N], int8 or uint8) packed as the kernel reads it, w' = w (int8) or w - 128 (uint8), with
    each column's sum of w' over k (int32, one per packed column)."""
    batches, k, n = b.shape
    w = b.astype(np.int16) - (128 if b.dtype == np.uint8 else 0)
    k4, p = k_groups(k), panels(n)
    full = np.zeros((batches, k4 * 4, p * PANEL_COLUMNS), np.int16)
    full[:, :k, :n] = w
    # [batch, k4, 4, panel, nr, 16] -> [batch, panel, k4, nr, 16, 4]
    packed = full.reshape(batches, k4, 4, p, NR, 16).transpose(0, 3, 1, 4, 5, 2).astype(np.int8)
    sums = full.sum(axis=1, dtype=np.int64).astype(np.int32)
    return packed.reshape(-1), sums.reshape(-1)


def _flips(a: str, b: str) -> dict:
    flip = 0x80808080 if a == "int8" else 0
    return dict(flip=flip, flip_byte=0x80 if a == "int8" else 0, flip_b=b == "uint8")


def int8_gemm(s: GemmShape, a: str, b: str, y: str) -> CKernel:
    """MatMulInteger (``y`` "int32") or QLinearMatMul (``y`` int8/uint8) of ``a`` by packed B (of dtype ``b``).
    Buffers: out, a, packed B, its column sums, a's zero point (per tensor), b's zero point, then for QLinearMatMul
    a_scale, b_scale, y_scale, y's zero point (float32 scales), then the int32 bias (one per row) with ``s.bias``."""
    qlinear = y != "int32"
    assert not (s.asr and s.bsn), "a scale per row and per column"
    batch = int(np.prod(s.bd)) if s.bd else 1
    mb = -(-s.m // MR)
    items = batch * mb
    chunks, per = share(items, MR * s.k * s.n)
    _, lo, hi = QUANT_TYPES[y]
    body = render(
        "qgemm.c.j2",
        A=QUANT_TYPES[a][0],
        B=QUANT_TYPES[b][0],
        Y=QUANT_TYPES[y][0],
        qlinear=qlinear,
        lo=lo,
        hi=hi,
        M=s.m,
        K=s.k,
        N=s.n,
        K4=k_groups(s.k),
        MR=MR,
        NR=NR,
        MB=mb,
        items=items,
        per=per,
        panels=panels(s.n),
        panel_bytes=panel_bytes(s.k),
        quads=MR * k_groups(s.k) * 8 <= QUADS_BYTES,
        bd=list(s.bd),
        sa=list(s.sa),
        sp=list(s.sp),
        bzn=s.bzn,
        bsn=s.bsn,
        azm=s.azm,
        asr=s.asr,
        bias=s.bias,
        **_flips(a, b),
    )
    packed, sums = packed_sizes(s.k, s.n, s.b_batches)
    extents = [batch * s.m * s.n, s.sizes[0], packed, sums, s.m if s.azm else 1, s.sizes[1]]
    if qlinear:
        extents += [s.m if s.asr else 1, s.sizes[2], 1, 1]
    if s.bias:
        extents += [s.m]
    flops = 2 * batch * s.m * s.n * s.k
    return make_kernel("qgemm" if qlinear else "gemmint", body, extents, chunks, flops=flops, rows_first=True)


def int8_pack(k: int, n: int, batches: int, b: str) -> CKernel:
    """B (``batches`` matrices [K, N] of dtype ``b``) packed at run time. Buffers: packed B, column sums, B."""
    items = batches * panels(n)
    chunks, per = share(items, PANEL_COLUMNS * k)
    body = render(
        "qpack.c.j2",
        B=QUANT_TYPES[b][0],
        K=k,
        N=n,
        K4=k_groups(k),
        NR=NR,
        items=items,
        per=per,
        panels=panels(n),
        panel_bytes=panel_bytes(k),
        flip_byte=0x80 if b == "uint8" else 0,
    )
    packed, sums = packed_sizes(k, n, batches)
    return make_kernel("qpack", body, [packed, sums, batches * k * n], chunks, rows_first=True)


def _pack_window(g: ConvGeom) -> Dict[str, int]:
    """The window the patch packer walks: a 1x1 convolution with unit strides and no padding reads each channel's
    plane in output order, so the plane is one row of H*W pixels and every panel one contiguous run."""
    window = g.window()
    if (g.kh, g.kw, g.sh, g.sw, g.pt, g.pl, g.pb, g.pr) == (1, 1, 1, 1, 0, 0, 0, 0):
        plane = g.h * g.w
        window.update(h=1, w=plane, oh=1, ow=plane)
    return window


def int8_pack_conv(g: ConvGeom, x: str) -> CKernel:
    """The patches of ConvInteger's input ``x`` (one group; int8/uint8) packed as the int8 GEMM's B, one matrix
    [C*KH*KW, OH*OW] per image. Buffers: packed B, column sums, x, x's zero point."""
    k, n = g.c * g.kh * g.kw, g.oh * g.ow
    items = g.n * panels(n)
    chunks, per = share(items, PANEL_COLUMNS * k)
    body = render(
        "qpack_conv.c.j2",
        X=QUANT_TYPES[x][0],
        K=k,
        K4=k_groups(k),
        items=items,
        per=per,
        panels=panels(n),
        panel_bytes=panel_bytes(k),
        flip_byte=0x80 if x == "uint8" else 0,
        c=g.c,
        **_pack_window(g),
    )
    packed, sums = packed_sizes(k, n, g.n)
    return make_kernel("qpackconv", body, [packed, sums, g.n * g.c * g.h * g.w, 1], chunks, rows_first=True)


#: Pixels per item of the channel-quads kernel.
QUAD_BLOCK = 256


def tap_major(g: ConvGeom) -> bool:
    """Whether a convolution's patches are packed tap-major from its channel quads (:func:`int8_quads`,
    :func:`int8_pack_taps`): one group, C a multiple of 4, a window of more than one tap (a 1x1 window packs its
    plane directly, :func:`int8_pack_conv`)."""
    return g.groups == 1 and g.c % 4 == 0 and g.kh * g.kw > 1


def int8_quads(g: ConvGeom, x: str) -> CKernel:
    """x [N, C, H, W] (int8/uint8, C a multiple of 4) as 32-bit words of 4 channels [N, C/4, H*W] and each pixel's
    channel sum [N, H*W] (``templates/qquad.c.j2``). Buffers: words, sums, x."""
    hw = g.h * g.w
    blocks = -(-hw // QUAD_BLOCK)
    items = g.n * blocks
    chunks, per = share(items, QUAD_BLOCK * g.c)
    body = render(
        "qquad.c.j2",
        X=QUANT_TYPES[x][0],
        items=items,
        per=per,
        blocks=blocks,
        block=QUAD_BLOCK,
        hw=hw,
        c=g.c,
        quads=g.c // 4,
        flip_byte=0x80 if x == "uint8" else 0,
    )
    return make_kernel("qquad", body, [g.n * g.c * hw // 4, g.n * hw, g.n * g.c * hw], chunks, rows_first=True)


def int8_pack_taps(g: ConvGeom, x: str) -> CKernel:
    """The patches of a :func:`tap_major` convolution packed as the int8 GEMM's B, rows k = (ki, kj, c), from the
    input's channel quads (``templates/qpack_taps.c.j2``). Buffers: packed B, column sums, quads, channel sums,
    x's zero point."""
    k, n = g.c * g.kh * g.kw, g.oh * g.ow
    items = g.n * panels(n)
    chunks, per = share(items, PANEL_COLUMNS * k // 4)
    body = render(
        "qpack_taps.c.j2",
        X=QUANT_TYPES[x][0],
        items=items,
        per=per,
        panels=panels(n),
        panel_bytes=panel_bytes(k),
        c=g.c,
        quads=g.c // 4,
        flip_byte=0x80 if x == "uint8" else 0,
        **g.window(),
    )
    packed, sums = packed_sizes(k, n, g.n)
    hw = g.h * g.w
    return make_kernel("qpacktaps", body, [packed, sums, g.n * g.c * hw // 4, g.n * hw, 1], chunks, rows_first=True)


def tap_major_weights(w: np.ndarray) -> np.ndarray:
    """Convolution weights [OC, C, KH(, KW)] with their rows in the tap-major order (ki, kj, c) of
    :func:`int8_pack_taps`."""
    w4 = w.reshape(w.shape[0], w.shape[1], w.shape[2], -1)
    return np.ascontiguousarray(np.transpose(w4, (0, 2, 3, 1)))
