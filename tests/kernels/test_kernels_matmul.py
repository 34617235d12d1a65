"""matmul (every tile, threads, a 1 MiB thread stack) and conv2d against numpy, within 2 K eps (|A| @ |B|)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict

import pytest
from support.kernel_check import check_matmul, instances, needs_cc, rng  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.kernels import KernelArgumentError  # noqa: E402

# the emulated arches compile this file's kernels from source with their own gcc (.ci/*-stage)
pytestmark = pytest.mark.from_source_sample

# --- matmul --------------------------------------------------------------------------------------

MM_SHAPES = [(1, 1, 1), (1, 17, 1), (7, 5, 3), (13, 29, 31), (97, 101, 103), (64, 35, 259), (50, 260, 7)]


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_matmul_default_tile(dt: str, rng: Any) -> None:
    k = kernels.get("matmul", dtype=dt)
    for m, n, kk in MM_SHAPES:
        check_matmul(rng, k, dt, m, n, kk)
    check_matmul(rng, k, dt, 301, 131, 300, threads=2)
    check_matmul(rng, k, dt, 5, 9, 11, threads=2)  # fewer rows than core ids x tile


_SMALL_STACK = """
import sys, threading
import numpy as np
from svod_min import kernels
ok = []
def run():
    for dt in ("float32", "float64"):
        a, b = np.ones((70, 900), dt), np.full((900, 90), 0.5, dt)
        c = np.empty((70, 90), dt)
        kernels.get("matmul", dtype=dt).bind([c, a, b], M=70, N=90, K=900, threads=1)()
        ok.append(bool(np.all(c == 450.0)))
threading.stack_size(1 << 20)  # what runtimes that make 1 MiB threads give a kernel
t = threading.Thread(target=run)
t.start()
t.join()
print(ok)
"""


def test_matmul_fits_a_one_mib_thread_stack() -> None:
    # The pack buffers live on the stack (docs/kernels.md): an overflow would kill the process.
    proc = subprocess.run(
        [sys.executable, "-c", _SMALL_STACK],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "[True, True]", (proc.returncode, proc.stderr[-2000:])


@needs_cc
@pytest.mark.parametrize("inst", instances("matmul"), ids=lambda p: "%s-%dx%d" % (p["dtype"], p["mr"], p["nr"]))
def test_matmul_every_tile(inst: Dict[str, Any], rng: Any) -> None:
    k = kernels.get("matmul", **inst)
    assert (k.params["mr"], k.params["nr"]) == (inst["mr"], inst["nr"])
    for m, n, kk in MM_SHAPES[2:5]:
        check_matmul(rng, k, inst["dtype"], m, n, kk)


def _conv_ref(x: Any, w: Any, bias: Any, s: Any, p: Any, d: Any) -> Any:
    n, c, h, wd = x.shape
    oc, _, kh, kw = w.shape
    oh = (h + 2 * p[0] - d[0] * (kh - 1) - 1) // s[0] + 1
    ow = (wd + 2 * p[1] - d[1] * (kw - 1) - 1) // s[1] + 1
    xp = np.zeros((n, c, h + 2 * p[0], wd + 2 * p[1]), dtype=np.float64)
    xp[:, :, p[0] : p[0] + h, p[1] : p[1] + wd] = x
    out = np.zeros((n, oc, oh, ow)) + (0 if bias is None else bias.reshape(1, -1, 1, 1))
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * d[0], i * d[0] + s[0] * (oh - 1) + 1, s[0])
            cols = slice(j * d[1], j * d[1] + s[1] * (ow - 1) + 1, s[1])
            patch = xp[:, :, rows, cols]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out


CONVS = [  # N, C, H, W, OC, KH, KW, stride, pad, dilation
    (1, 1, 1, 1, 1, 1, 1, (1, 1), (0, 0), (1, 1)),
    (2, 3, 7, 5, 4, 3, 3, (1, 1), (1, 1), (1, 1)),
    (1, 2, 13, 11, 3, 3, 2, (2, 3), (1, 0), (1, 1)),
    (3, 4, 9, 17, 5, 2, 3, (1, 2), (2, 2), (2, 1)),
    (1, 1, 5, 5, 2, 5, 5, (1, 1), (0, 0), (1, 1)),
    (1, 3, 31, 29, 2, 1, 1, (3, 3), (0, 0), (1, 1)),
]


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv2d(dt: str, bias: bool, rng: Any) -> None:
    k = kernels.get("conv2d", dtype=dt, bias=bias)
    for n, c, h, wd, oc, kh, kw, s, p, d in CONVS:
        x = rng.standard_normal((n, c, h, wd)).astype(dt)
        w = rng.standard_normal((oc, c, kh, kw)).astype(dt)
        bvec = rng.standard_normal(oc).astype(dt) if bias else None
        want = _conv_ref(x, w, bvec, s, p, d)
        out = np.full(want.shape, np.nan, dtype=dt)
        var = dict(N=n, C=c, H=h, W=wd, OC=oc, KH=kh, KW=kw, sh=s[0], sw=s[1], ph=p[0], pw=p[1], dh=d[0], dw=d[1])
        k.run([out, x, w] + ([bvec] if bias else []), **var)
        bound = _conv_ref(np.abs(x), np.abs(w), None if bvec is None else np.abs(bvec), s, p, d)
        assert np.all(np.abs(out - want) <= 2 * c * kh * kw * np.finfo(dt).eps * bound + 1e-30), (dt, x.shape, w.shape)


def test_conv2d_refuses_a_kernel_larger_than_the_padded_input() -> None:
    k = kernels.get("conv2d")
    x, w, out = np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 3, 3), np.float32), np.zeros(1, np.float32)
    with pytest.raises(KernelArgumentError, match="violate"):
        k.run([out, x, w], N=1, C=1, H=2, W=2, OC=1, KH=3, KW=3, sh=1, sw=1, ph=0, pw=0, dh=1, dw=1)


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_matmul_default_tile_exists_without_a_variant(dt: str) -> None:
    """No prebuilt variant (an arch without objects, SVOD_KERNELS_VARIANT=none): the default tile has an instance."""
    sig = kernels.find_sig("matmul", None, dtype=dt)
    assert (sig.param_dict["mr"], sig.param_dict["nr"]) == ((4, 8) if dt == "float32" else (4, 4))
