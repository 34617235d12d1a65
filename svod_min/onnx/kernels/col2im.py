"""Col2Im's kernel: columns of blocks summed back into images; its C is ``templates/col2im.c.j2``."""

from __future__ import annotations

import math
from typing import Sequence

from ..geometry import contiguous_strides
from .ckernel import CKernel, make_kernel, render, share


def col2im(
    images: int,
    image: Sequence[int],
    block: Sequence[int],
    blocks: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int],
    dilations: Sequence[int],
) -> CKernel:
    """``out[i, y...] += col[i, k..., p...]`` for ``images`` (n, c) images of shape ``image``, blocks of shape
    ``block`` at ``blocks`` positions per axis; ``pads``: each axis's leading pad."""
    volume, taps, positions = math.prod(image), math.prod(block), math.prod(blocks)
    chunks, per = share(images, volume + taps * positions)
    body = render(
        "col2im.c.j2",
        per=per,
        items=images,
        rank=len(image),
        volume=volume,
        taps=taps,
        positions=positions,
        image=[int(d) for d in image],
        block=[int(d) for d in block],
        blocks=[int(d) for d in blocks],
        strides=[int(d) for d in strides],
        pads=[int(d) for d in pads],
        dilations=[int(d) for d in dilations],
        image_strides=contiguous_strides(image),
        block_strides=contiguous_strides(block),
        block_position_strides=contiguous_strides(blocks),
    )
    return make_kernel(
        "col2im", body, [images * volume, images * taps * positions], chunks, flops=images * taps * positions
    )
