"""Convolution weights packed for ``conv2d_gemm`` with ``packed=True`` (docs/kernels.md): done once, when a
model is built, instead of at every run for every block of output pixels.

The layout, per group g (OCg = OC/groups output channels, K = C/groups KH KW): the K columns in blocks of
equal size (the kernel's own kc blocking: ceil(K / ceil(K / kc)) columns, the last one shorter), and per block
the OCg rows in strips of :data:`PACK_ROWS`, the last one zero-padded; a strip of a block of kc columns is
kc x PACK_ROWS values, row fastest. PACK_ROWS is a multiple of every register tile's mr, so the same packed
weights serve every prebuilt variant.
"""

from __future__ import annotations

from typing import Any

from ..error import KernelArgumentError

#: Rows per packed strip: a multiple of every conv2d_gemm tile height (mr 4, 6, 8).
PACK_ROWS = 24
#: conv2d_gemm's K block (kc) per element size in bytes: float32 384, float64 192.
PACK_KC = {4: 384, 8: 192}


def packed_size(oc: int, k: int, groups: int) -> int:
    """Elements of the packed weights of ``oc`` output channels, ``k`` = C/groups KH KW, ``groups`` groups."""
    ocg = oc // groups
    return groups * -(-ocg // PACK_ROWS) * PACK_ROWS * k


def pack_conv_weights(w: Any, groups: int = 1) -> Any:
    """``w`` (OC, C/groups, KH, KW), a float32 or float64 numpy array, in conv2d_gemm's packed layout (1-D)."""
    import numpy as np

    w = np.asarray(w)
    if w.ndim != 4 or w.dtype.itemsize not in PACK_KC or w.dtype.kind != "f" or groups < 1 or w.shape[0] % groups:
        raise KernelArgumentError(
            "pack_conv_weights: a float32/float64 (OC, C/groups, KH, KW) array with OC a "
            "multiple of groups=%d, not %s %s" % (groups, w.dtype, w.shape)
        )
    oc = w.shape[0]
    ocg, k = oc // groups, int(np.prod(w.shape[1:]))
    strips = -(-ocg // PACK_ROWS)
    kc_max = PACK_KC[w.dtype.itemsize]
    kblocks = -(-k // kc_max)
    kcb = -(-k // kblocks)
    rows = np.zeros((groups, strips * PACK_ROWS, k), w.dtype)
    rows[:, :ocg] = w.reshape(groups, ocg, k)
    out = []
    for g in range(groups):
        for pc in range(0, k, kcb):
            block = rows[g, :, pc : pc + kcb]  # (strips * PACK_ROWS, kc)
            kc = block.shape[1]
            out.append(block.reshape(strips, PACK_ROWS, kc).transpose(0, 2, 1).reshape(-1))
    return np.ascontiguousarray(np.concatenate(out))
