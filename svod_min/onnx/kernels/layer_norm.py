"""LayerNormalization with its Mean and InvStdDev outputs (``templates/layer_norm.c.j2``): the library's layernorm
writes the normalised rows only, so a model that reads the statistics gets this kernel."""

from __future__ import annotations

from .ckernel import CKernel, make_kernel, render, share


def layer_norm_stats(rows: int, cols: int, epsilon: float) -> CKernel:
    """Each of ``rows`` rows of ``cols`` float32 elements normalised by its mean and variance (two passes, summed in
    double), then times scale and plus bias (``cols`` each); each row's mean and 1 / sqrt(variance + epsilon)
    written to the fifth and sixth buffers."""
    chunks, per = share(rows, cols * 3)
    body = render("layer_norm.c.j2", per=per, rows=rows, cols=cols, epsilon=epsilon)
    return make_kernel("layernorm", body, [rows * cols, rows * cols, cols, cols, rows, rows], chunks, rows_first=True)
