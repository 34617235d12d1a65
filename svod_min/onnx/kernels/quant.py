"""QuantizeLinear and DequantizeLinear kernels (per tensor, per axis, blocked), rendered from
``templates/quant.c.j2``."""

from __future__ import annotations

from typing import Dict, Tuple

from ...error import NotSupportedError
from .ckernel import CKernel, make_kernel, render, share

#: The integer dtypes of quantized tensors: their C type and range.
QUANT_TYPES: Dict[str, Tuple[str, int, int]] = {
    "int8": ("signed char", -128, 127),
    "uint8": ("unsigned char", 0, 255),
    "int16": ("short", -32768, 32767),
    "uint16": ("unsigned short", 0, 65535),
    "int32": ("int", -(1 << 31), (1 << 31) - 1),
}
#: How the scales map onto x (the template's modes).
MODES = ("tensor", "axis", "block")


def quant_kernel(
    kernel: str, qtype: str, outer: int, axis_len: int, inner: int, mode: str, block: int = 1, blocks: int = 1
) -> CKernel:
    """``kernel`` ("quantize": float32 x -> ``qtype`` y; "dequantize": ``qtype`` x -> float32 y) over x viewed as
    (outer, axis_len, inner), scales per ``mode`` (blocked: ``block`` indices of the axis per scale, ``blocks``
    scales along it)."""
    if kernel not in ("quantize", "dequantize") or mode not in MODES:
        raise KeyError((kernel, mode))
    ctype, lo, hi = QUANT_TYPES[qtype]
    rows = outer * axis_len
    chunks, per = share(rows, inner)
    body = render(
        "quant.c.j2",
        kernel=kernel,
        mode=mode,
        X="float" if kernel == "quantize" else ctype,
        Y=ctype if kernel == "quantize" else "float",
        Z=ctype,
        lo=lo,
        hi=hi,
        rows=rows,
        per=per,
        D=axis_len,
        inner=inner,
        block=block,
        blocks=blocks,
    )
    scales = 1 if mode == "tensor" else axis_len if mode == "axis" else outer * blocks * inner
    return make_kernel(
        "q" if kernel == "quantize" else "dq",
        body,
        [rows * inner, rows * inner, scales, scales],
        chunks,
        rows_first=True,
    )


def lookup_kernel(xtype: str, ytype: str, total: int) -> CKernel:
    """``svod.Lookup8``: ``total`` 8-bit ``xtype`` bytes mapped through a 256-entry table of ``ytype``
    (``templates/lookup8.c.j2``)."""
    if xtype not in ("int8", "uint8") or ytype not in ("int8", "uint8"):
        raise NotSupportedError("svod.Lookup8 maps 8-bit tensors only: %s to %s" % (xtype, ytype))
    chunks, per = share(total, 1)
    body = render(
        "lookup8.c.j2",
        X=QUANT_TYPES[xtype][0],
        Y=QUANT_TYPES[ytype][0],
        signed=xtype == "int8",
        total=total,
        per=per,
    )
    return make_kernel("lut8", body, [total, total, 256], chunks, rows_first=True)
