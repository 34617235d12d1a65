"""ONNX front end: ``python -m svod_min build MODEL.onnx -o MODEL.svod`` (docs/onnx.md).

- :mod:`.frontend`: the model as a graph: parse (onnx.load, checks, dims bound, constants folded, shapes
  inferred) into the IR, checks against the op table, the passes (folds, fusions) and the layout pass.
- :mod:`.ops`: the lowering, one module per op family, onto library kernels, views, copies and generated kernels.
- :mod:`.kernels`: the generated kernels, one module per family, their C rendered from ``kernels/templates``.
- :mod:`.activations` (the activation table), :mod:`.geometry` (windows, strides, the blocked layout),
  :mod:`.ctext` (C literals): what the three share.
- :mod:`.build`: the pipeline, from the file to the bundle (through :mod:`svod_min.planfile`).

Needs the ``onnx`` package (and jinja2) at build time only; the bundle runs with svod_min alone.
"""

from __future__ import annotations

from typing import Any


def build_onnx(*args: Any, **kwargs: Any) -> Any:
    """See :func:`svod_min.onnx.build.build_onnx` (imported on use: onnx and numpy load only for ONNX builds)."""
    from .build import build_onnx as build

    return build(*args, **kwargs)


def looks_like_onnx(path: str) -> bool:
    """Whether ``path`` names an ONNX model (suffix, or protobuf bytes), without importing onnx."""
    if path.lower().endswith(".onnx"):
        return True
    try:
        with open(path, "rb") as fh:
            return fh.read(1) == b"\x08"
    except OSError:
        return False


__all__ = ["build_onnx", "looks_like_onnx"]
