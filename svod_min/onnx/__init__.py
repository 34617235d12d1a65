"""ONNX front end: ``python -m svod_min build MODEL.onnx -o MODEL.svod`` (docs/onnx.md).

parse (onnx.load, checks, dims bound, constants folded, shapes inferred) -> IR (:mod:`.ir`) ->
checks against the op table (:mod:`.table`) -> passes (:mod:`.passes`) -> lowering onto the
kernel library and generated C (:mod:`.lower`, :mod:`.ops_nn`, :mod:`.ops_elementwise`,
:mod:`.ops_shape`, :mod:`.csrc`) -> the plan bundle builder. Needs the ``onnx`` package at build
time only; the bundle runs with svod_min alone.
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
