"""The blocked channel layout's reorders: NCHW to NCHWc (16 lanes) and back (:mod:`svod_min.onnx.geometry` has the
layout). ``to_blocked`` writes zeros into the padding channels."""

from __future__ import annotations


from ..geometry import LANES, blocks
from .ckernel import CKernel, chunks_for, make_kernel, range_head

def items_head(items: int, chunks: int) -> str:
    return range_head(-(-items // chunks), items) + "\n"


def transpose16() -> str:
    """C statements transposing ``r``, 16 vectors of 16 floats, in place: the off-diagonal blocks of each size (8, 4,
    2, 1) swapped, a two-source shuffle per vector and size."""
    lines = []
    for size in (8, 4, 2, 1):
        for i in (i for i in range(16) if not i & size):
            top = ", ".join(str(16 + j - size if j & size else j) for j in range(16))
            bottom = ", ".join(str(16 + j if j & size else j + size) for j in range(16))
            lines.append("      { v16 va = r[%d], vb = r[%d]; r[%d] = __builtin_shufflevector(va, vb, %s);"
                         " r[%d] = __builtin_shufflevector(va, vb, %s); }" % (i, i + size, i, top, i + size, bottom))
    return "\n".join(lines) + "\n"


#: A reorder, one (n, block, row) item at a time: whole 16 x 16 tiles (16 channels by 16 pixels) transposed in
#: vectors where the compiler has __builtin_shufflevector (clang; gcc from 12), every other element one at a time
#: (``element``: element (l, iw) of the NCHW row ``nchw`` and the blocked row ``blk``).
REORDER = """void KNAME(float *restrict out, const float *restrict x, int core_id) {
  enum { C = %(c)d, CB = %(cb)d, H = %(h)d, W = %(w)d };
  typedef float v16 __attribute__((vector_size(64), aligned(4)));
%(head)s  for (long it = i0; it < i1; ++it) {
    long row = it %% H, b = (it / H) %% CB, n = it / (H * CB);
    long lanes = C - b * 16 < 16 ? C - b * 16 : 16;
    const float *nchw = %(nchw_base)s + ((n * C + b * 16) * H + row) * (long)W;
    float *blk = %(blocked_base)s + it * (long)(W * 16);
    long iw = 0;
#if defined(__clang__) || __GNUC__ >= 12
    if (lanes == 16)
      for (; iw + 16 <= W; iw += 16) {
        v16 r[16];
        for (long k = 0; k < 16; ++k) __builtin_memcpy(&r[k], %(load)s, 64);
%(transpose)s        for (long k = 0; k < 16; ++k) __builtin_memcpy(%(store)s, &r[k], 64);
      }
#endif
    for (; iw < W; ++iw) {
      for (long l = 0; l < lanes; ++l) %(element)s;
%(zero)s    }
  }
}
"""


def to_blocked(n: int, c: int, h: int, w: int) -> CKernel:
    """NCHW -> blocked (buffers: out blocked, in NCHW); padding channels 0. One work item per (n, block, row)."""
    cb, items = blocks(c), n * blocks(c) * h
    chunks = chunks_for(items, LANES * w)
    body = REORDER % dict(c=c, cb=cb, h=h, w=w, head=items_head(items, chunks), nchw_base="x", blocked_base="out",
                          load="nchw + k * (long)(H * W) + iw", store="blk + (iw + k) * 16", transpose=transpose16(),
                          element="blk[iw * 16 + l] = nchw[l * (long)(H * W) + iw]",
                          zero="      for (long l = lanes; l < 16; ++l) blk[iw * 16 + l] = 0.0f;\n")  # fmt: skip
    return make_kernel("to_blocked", body.replace("float *blk", "float *restrict blk"), [n * cb * h * w * LANES, n * c * h * w], chunks)


def from_blocked(n: int, c: int, h: int, w: int) -> CKernel:
    """Blocked -> NCHW (buffers: out NCHW, in blocked): the real channels only. One work item per (n, block, row)."""
    cb, items = blocks(c), n * blocks(c) * h
    chunks = chunks_for(items, LANES * w)
    body = REORDER % dict(c=c, cb=cb, h=h, w=w, head=items_head(items, chunks), nchw_base="out", blocked_base="x",
                          load="blk + (iw + k) * 16", store="nchw + k * (long)(H * W) + iw", transpose=transpose16(),
                          element="nchw[l * (long)(H * W) + iw] = blk[iw * 16 + l]", zero="")  # fmt: skip
    body = body.replace("const float *nchw", "float *restrict nchw").replace("float *blk", "const float *restrict blk")
    return make_kernel("from_blocked", body, [n * c * h * w, n * cb * h * w * LANES], chunks)
