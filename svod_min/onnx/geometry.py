"""Geometry the passes, the lowerings and the kernels share: a convolution's or pool's window (:class:`ConvGeom`),
element strides of shapes under broadcasting, and the facts of the blocked channel layout (NCHWc).

The blocked layout stores a float32 tensor of logical shape [N, C, H, W] as [N, CB, H, W, 16] with
CB = ceil(C / 16): element (n, c, h, w) at (((n CB + c / 16) H + h) W + w) 16 + c % 16. Channels C and above
in the last block are padding: finite but arbitrary values that no kernel lets reach a real output channel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np


@dataclass(frozen=True)
class ConvGeom:
    """One 2-D convolution or pooling window, all sizes known: N, C, H, W -> N, OC, OH, OW."""

    n: int
    c: int
    h: int
    w: int
    oc: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pl: int
    pb: int
    pr: int
    dh: int
    dw: int
    groups: int = 1

    def window(self) -> Dict[str, int]:
        """The sizes a window kernel's template takes: input and output planes, kernel, strides, leading pads and
        dilations (``h w oh ow kh kw sh sw pt pl dh dw``)."""
        return {k: getattr(self, k) for k in ("h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "pt", "pl", "dh", "dw")}


def contiguous_strides(shape: Sequence[int]) -> List[int]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return out[::-1]


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> List[int]:
    """Element strides of ``shape`` read as ``out_shape`` (numpy broadcasting; 0 where it repeats)."""
    padded = [1] * (len(out_shape) - len(shape)) + list(shape)
    strides = contiguous_strides(padded)
    return [0 if p == 1 and o != 1 else s for p, o, s in zip(padded, out_shape, strides)]


def collapse(out_shape: Sequence[int], strides: List[List[int]]) -> Tuple[List[int], List[List[int]]]:
    """Drop size-1 dims and merge neighbours every array walks as one (shape, strides per array)."""
    dims = [(d, [s[i] for s in strides]) for i, d in enumerate(out_shape) if d != 1]
    merged: List[Tuple[int, List[int]]] = []
    for d, ss in dims:
        if merged and all(prev == cur * d for prev, cur in zip(merged[-1][1], ss)):
            merged[-1] = (merged[-1][0] * d, ss)
        else:
            merged.append((d, ss))
    if not merged:
        merged = [(1, [1 for _ in strides])]
    return [d for d, _ in merged], [[ss[k] for _, ss in merged] for k in range(len(strides))]


#: Channels per block.
LANES = 16


def blocks(c: int) -> int:
    """Channel blocks of ``c`` channels."""
    return -(-c // LANES)


def blocked_shape(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    """The physical shape [N, CB, H, W, 16] of a plain [N, C, H, W]."""
    n, c, h, w = shape
    return (n, blocks(c), h, w, LANES)


def pad_channels(values: Optional[np.ndarray], c: int) -> np.ndarray:
    """A per-channel vector (a bias, a scale, a shift) over every blocked channel, float32, zero beyond the ``c``
    real ones (all zeros for None)."""
    out = np.zeros(blocks(c) * LANES, np.float32)
    if values is not None:
        out[:c] = values.reshape(-1)
    return out
