"""BatchNormalization's kernel where the statistics are not constants (fed at run time, or the batch's own in
training mode); its C is ``templates/batch_norm.c.j2``. Constant statistics never get here: the passes fold them
into an affine (or the Conv before it)."""

from __future__ import annotations

from .ckernel import CKernel, make_kernel, render, share


def batch_norm(
    batch: int, channels: int, size: int, epsilon: float, momentum: float, training: bool, act: str = "v"
) -> CKernel:
    """x viewed as (batch, channels, size), normalised per channel; ``act``: the C expression of the fused activation
    of ``v``. Buffers: out, x, scale, bias, mean, var[, running mean, running var (training)]."""
    chunks, per = share(channels, batch * size * (3 if training else 1))
    body = render(
        "batch_norm.c.j2",
        per=per,
        channels=channels,
        batch=batch,
        size=size,
        epsilon=epsilon,
        momentum=momentum,
        training=training,
        act=act,
    )
    volume = batch * channels * size
    extents = [volume, volume] + [channels] * (6 if training else 4)
    return make_kernel("batchnorm", body, extents, chunks, flops=volume * (5 if training else 2))
