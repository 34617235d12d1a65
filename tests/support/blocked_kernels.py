"""Generated blocked-layout kernels compiled with the host's C compiler and called through ctypes, and the
numpy reorders the tests check them with (shared by the blocked kernel tests of tests/onnx_frontend)."""

from __future__ import annotations

import ctypes
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from svod_min.onnx.kernels.ckernel import CKernel

CC = shutil.which("clang") or shutil.which("gcc") or shutil.which("cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (clang, gcc or cc) to build the kernels")
#: Padding channels of the blocked inputs: finite, and larger than any real value, so a leak shows.
GARBAGE = 3.0e38
_BUILD = tempfile.TemporaryDirectory(prefix="svod_blocked_")


@functools.lru_cache(maxsize=None)
def library(source: str, name: str, buffers: int, flags: tuple = ()) -> Any:
    """The kernel compiled as a shared object (once per source) and its entry point."""
    path = Path(_BUILD.name)
    (path / (name + ".c")).write_text(source)
    cmd = [
        str(CC),
        "-O2",
        *flags,
        "-shared",
        "-fPIC",
        "-w",
        "-o",
        str(path / (name + ".so")),
        str(path / (name + ".c")),
        "-lm",
    ]
    subprocess.run(cmd, check=True)
    entry = getattr(ctypes.CDLL(str(path / (name + ".so"))), name)
    entry.argtypes = [ctypes.c_void_p] * buffers + [ctypes.c_int]
    entry.restype = None
    return entry


def run(kernel: CKernel, *inputs: Any) -> Any:
    """The kernel's output (float32, flat) for ``inputs`` (its buffers after the output), every core_id in turn."""
    assert kernel.buffers == 1 + len(inputs)
    arrays = [np.ascontiguousarray(a, dtype=np.float32).reshape(-1) for a in inputs]
    for array, extent in zip(arrays, kernel.extents[1:]):
        assert array.size == extent
    out = np.full(kernel.extents[0], np.float32(-7.25))
    entry = library(kernel.source, kernel.name, kernel.buffers, kernel.flags)
    for core_id in range(kernel.chunks):
        entry(out.ctypes.data, *[a.ctypes.data for a in arrays], core_id)
    return out


def block(x: Any, pad_value: float = GARBAGE) -> Any:
    """NCHW -> [N, CB, H, W, 16] with numpy, ``pad_value`` in the padding channels."""
    n, c, h, w = x.shape
    cb = -(-c // 16)
    padded = np.full((n, cb * 16, h, w), pad_value, dtype=np.float32)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cb, 16, h, w).transpose(0, 1, 3, 4, 2))


def unblock(y: Any, c: int) -> Any:
    """[N, CB, H, W, 16] -> NCHW (the real channels)."""
    n, cb, h, w, _ = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * 16, h, w)[:, :c]
