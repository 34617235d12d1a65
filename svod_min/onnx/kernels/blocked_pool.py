"""Pools of the blocked channel layout (NCHWc): MaxPool/AveragePool and the global pools.

Every pixel is 16 contiguous channels, so a pool's work is whole 16-float vectors: the loops below run over 16
lanes (or over whole rows of 16-lane pixels) and the compiler turns each into vector instructions.

The pools mirror :mod:`svod_min.onnx.kernels.pool`'s semantics: padding never wins a max, NaN does; the average's
divisor is ONNX's count, (rows counted) x (columns counted), and the overhang of a ceil_mode window past the
end padding never counts. They run in the same two passes (the window's rows element by element into a
buffer of a tile of columns padded with -inf or 0, then its columns without bounds tests), one output row of
one channel block per work item. A max takes the NaN-propagating step at every tap: on 16-lane pixels it
costs a compare and a blend beside the max, less than the NCHW kernels' scan for NaN and second copy.

The C is ``templates/blocked_pool.c.j2``; this module computes its constants.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ...error import NotSupportedError
from ..ctext import C_TYPES
from ..geometry import LANES, ConvGeom, blocks
from .ckernel import CKernel, chunks_for, make_kernel, render

#: Columns (of 16 floats each) of a pool's tile buffer, on the stack: 16 KiB.
TILE_COLUMNS = 256
#: The kind (pool_common.c.j2's) of each windowed pool.
POOL_KINDS = {"MaxPool": "max", "AveragePool": "avg"}


def pool_tile(g: ConvGeom) -> int:
    """Output columns per tile: as many as a buffer of TILE_COLUMNS input columns holds the windows of (at least 1)."""
    reach = (g.kw - 1) * g.dw + 1
    return max(1, min(g.ow, (TILE_COLUMNS - reach) // g.sw + 1))


def _render(kind: str, items: int, chunks: int, dtype: str, **constants: Any) -> str:
    """blocked_pool.c.j2 for ``items`` work items shared by ``chunks`` calls."""
    return render("blocked_pool.c.j2", kind=kind, per=-(-items // chunks), items=items, T=C_TYPES[dtype], **constants)


def blocked_pool(op: str, g: ConvGeom, count_include_pad: bool, dtype: str = "float32") -> CKernel:
    """MaxPool or AveragePool on blocked tensors (buffers: out [N, CB, OH, OW, 16], in [N, CB, H, W, 16]); ``g``'s
    output size already holds ceil_mode. One work item per output row of a channel block."""
    if op not in POOL_KINDS:
        raise NotSupportedError("blocked_pool: op %r is not MaxPool or AveragePool" % (op,))
    if min(g.pt, g.pl, g.pb, g.pr) < 0 or min(g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.oh, g.ow) < 1:
        raise NotSupportedError("blocked_pool: negative padding or a size below 1 in %r" % (g,))
    cb = blocks(g.c)
    items = g.n * cb * g.oh
    chunks = chunks_for(items, g.ow * g.kh * g.kw * LANES)
    kind = POOL_KINDS[op]
    window = dict(g=asdict(g), tile=pool_tile(g), include_pad=count_include_pad, buf=LANES * TILE_COLUMNS)
    body = _render(kind, items, chunks, dtype, kernel="window", **window)
    return make_kernel(
        "bpool_" + kind, body, [items * g.ow * LANES, g.n * cb * g.h * g.w * LANES], chunks, rows_first=True
    )


def _global_pool(tag: str, kind: str, n: int, c: int, h: int, w: int, dtype: str) -> CKernel:
    cb = blocks(c)
    items = n * cb
    chunks = chunks_for(items, h * w * LANES)
    body = _render(kind, items, chunks, dtype, kernel="global", c=c, cb=cb, hw=h * w)
    return make_kernel(tag, body, [n * c, items * h * w * LANES], chunks, rows_first=True)


def blocked_global_avgpool(n: int, c: int, h: int, w: int, dtype: str = "float32") -> CKernel:
    """GlobalAveragePool of a blocked tensor into an NCHW [N, C, 1, 1] output (the real channels only)."""
    return _global_pool("bgavg", "avg", n, c, h, w, dtype)


def blocked_global_maxpool(n: int, c: int, h: int, w: int, dtype: str = "float32") -> CKernel:
    """GlobalMaxPool of a blocked tensor into an NCHW [N, C, 1, 1] output; NaN propagates."""
    return _global_pool("bgmax", "max", n, c, h, w, dtype)
