"""Transitional alias: the CUDA binding moved into the package :mod:`svod_min.devices.cuda`.

Kept only because ``plan_file.py`` still imports ``PtxError`` from here; remove it once that
import reads ``from .error import PtxError``.
"""

from __future__ import annotations

from ..error import PtxError

__all__ = ["PtxError"]
