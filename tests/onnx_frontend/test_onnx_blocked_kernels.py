"""The blocked-channel-layout kernels (svod_min/onnx/kernels/blocked.py and kernels/blocked_pool.py), compiled with
the host's C compiler and called through ctypes for every core_id, against float64 numpy references computed on the
NCHW data: the reorders (exact round trip, zeros in the padding channels), MaxPool and AveragePool over edge shapes
(channels not a multiple of 16, 1x1 images, batch 2, stride above the kernel, dilation, one-sided padding,
ceil_mode windows past the padding, count_include_pad 0 and 1, row tiles, several items per call, NaN), the global
pools. The blocked inputs carry large finite garbage in their padding channels: none may reach a real output
channel."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any, List, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.python_independent  # C kernels against numpy: the same on every Python

from support.blocked_kernels import block, needs_cc, run, unblock  # noqa: E402

from svod_min.error import NotSupportedError  # noqa: E402
from svod_min.onnx.geometry import ConvGeom  # noqa: E402
from svod_min.onnx.kernels import blocked as reorders  # noqa: E402
from svod_min.onnx.kernels import blocked_pool  # noqa: E402
from svod_min.onnx.kernels.ckernel import PROTOTYPES, CKernel  # noqa: E402


def geometry(
    shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int] = (1, 1),
    pads: Sequence[int] = (0, 0, 0, 0),
    dilations: Sequence[int] = (1, 1),
    ceil_mode: bool = False,
) -> ConvGeom:
    """ONNX's output size (pads as (top, left, bottom, right)); a ceil_mode window must start inside the input or its
    start padding."""
    n, c, h, w = shape
    outs = []
    for size, k, s, d, before, after in zip((h, w), kernel, strides, dilations, pads[:2], pads[2:]):
        room = size + before + after - (k - 1) * d - 1
        out = (-(-room // s) if ceil_mode else room // s) + 1
        if ceil_mode and (out - 1) * s >= size + before:
            out -= 1
        outs.append(out)
    return ConvGeom(
        n,
        c,
        h,
        w,
        c,
        outs[0],
        outs[1],
        kernel[0],
        kernel[1],
        strides[0],
        strides[1],
        pads[0],
        pads[1],
        pads[2],
        pads[3],
        dilations[0],
        dilations[1],
    )


def reference_pool(op: str, x: Any, g: ConvGeom, count_include_pad: bool) -> Any:
    """float64 MaxPool (NaN wins, padding never does) or AveragePool (ONNX's count) on NCHW data."""
    x = x.astype(np.float64)
    out = np.empty((g.n, g.c, g.oh, g.ow))
    for oh in range(g.oh):
        rows = [oh * g.sh - g.pt + k * g.dh for k in range(g.kh)]
        for ow in range(g.ow):
            cols = [ow * g.sw - g.pl + k * g.dw for k in range(g.kw)]
            inside_r, inside_c = [r for r in rows if 0 <= r < g.h], [q for q in cols if 0 <= q < g.w]
            window = x[:, :, inside_r][:, :, :, inside_c].reshape(g.n, g.c, -1)
            if op == "MaxPool":
                best = window.max(axis=2, initial=-np.inf)
                out[:, :, oh, ow] = np.where(np.isnan(window).any(axis=2), np.nan, best)
                continue
            if count_include_pad:
                count = len([r for r in rows if r < g.h + g.pb]) * len([q for q in cols if q < g.w + g.pr])
            else:
                count = len(inside_r) * len(inside_c)
            out[:, :, oh, ow] = window.sum(axis=2) / count
    return out


def assert_close(got: Any, want: Any) -> None:
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.allclose(got, want, rtol=2e-6, atol=1e-6, equal_nan=True), float(np.nanmax(np.abs(got - want)))


@needs_cc
@pytest.mark.parametrize("shape", [(2, 33, 5, 7), (1, 1, 1, 1), (1, 16, 3, 3), (1, 17, 4, 4), (3, 40, 24, 24)])
def test_reorders_round_trip_exactly(shape: Tuple[int, int, int, int]) -> None:
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    n, c, h, w = shape
    cb = -(-c // 16)
    blocked = run(reorders.to_blocked(n, c, h, w), x).reshape(n, cb, h, w, 16)
    assert np.array_equal(blocked, block(x, 0.0))  # padding channels are 0, real ones in place
    back = run(reorders.from_blocked(n, c, h, w), block(x)).reshape(shape)  # garbage in the padding: ignored
    assert np.array_equal(back, x)


#: (op, input shape, kernel, strides, pads (t, l, b, r), dilations, ceil_mode, count_include_pad)
POOLS: List[
    Tuple[str, Tuple[int, ...], Tuple[int, int], Tuple[int, int], Tuple[int, ...], Tuple[int, int], bool, bool]
] = [
    ("MaxPool", (1, 17, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, False),
    ("MaxPool", (1, 1, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False, False),  # a 1x1 image
    ("AveragePool", (1, 3, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, False),
    ("AveragePool", (1, 3, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, True),
    ("MaxPool", (2, 3, 11, 10), (2, 2), (3, 4), (0, 0, 0, 0), (1, 1), False, False),  # stride above the kernel
    ("AveragePool", (2, 16, 11, 10), (2, 2), (3, 4), (0, 0, 0, 0), (1, 1), True, False),
    ("MaxPool", (1, 33, 12, 13), (3, 2), (1, 1), (2, 0, 1, 1), (2, 3), False, False),  # dilation
    ("MaxPool", (1, 17, 9, 12), (5, 3), (1, 1), (0, 2, 4, 0), (1, 1), False, False),  # padding on one side each
    ("AveragePool", (1, 17, 9, 12), (5, 3), (1, 1), (0, 2, 4, 0), (1, 1), False, True),
    ("AveragePool", (1, 33, 8, 8), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, False),  # ceil_mode: windows stick out
    ("AveragePool", (1, 33, 8, 8), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True, True),
    ("MaxPool", (1, 17, 17, 19), (3, 3), (2, 3), (0, 0, 0, 0), (1, 1), True, False),
    ("AveragePool", (1, 3, 4, 300), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, True),  # two column tiles
    ("MaxPool", (2, 33, 30, 30), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, False),  # several calls, rows each
]


def _pool_id(case: Tuple[Any, ...]) -> str:
    op, shape, kernel, strides, pads, dil, ceil, include = case
    return "%s-%s-k%s-s%s-p%s-d%s%s%s" % (
        op,
        "x".join(map(str, shape)),
        *("".join(map(str, v)) for v in (kernel, strides, pads, dil)),
        "-ceil" if ceil else "",
        "-incl" if include else "",
    )


@needs_cc
@pytest.mark.parametrize("case", POOLS, ids=_pool_id)
def test_blocked_pool_matches_reference(case: Tuple[Any, ...]) -> None:
    op, shape, kernel, strides, pads, dil, ceil, include = case
    g = geometry(shape, kernel, strides, pads, dil, ceil)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    k = blocked_pool.blocked_pool(op, g, include)
    if shape == (2, 33, 30, 30):
        assert k.chunks > 1  # the split over calls is exercised
    got = unblock(run(k, block(x)).reshape(g.n, -(-g.c // 16), g.oh, g.ow, 16), g.c)
    assert_close(got, reference_pool(op, x, g, include))


@needs_cc
@pytest.mark.parametrize(
    "shape,nans",
    [
        ((1, 17, 9, 9), [(0, 16, 4, 4), (0, 0, 8, 0)]),
        ((2, 33, 30, 30), [(1, 32, 15, 15), (0, 3, 2, 29), (1, 20, 29, 0)]),  # several calls, several items each
    ],
)
def test_blocked_maxpool_propagates_nan(shape: Tuple[int, ...], nans: Sequence[Tuple[int, int, int, int]]) -> None:
    g = geometry(shape, (3, 3), (1, 1), (1, 1, 1, 1))
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    for at in nans:
        x[at] = np.nan
    got = unblock(run(blocked_pool.blocked_pool("MaxPool", g, False), block(x)).reshape(g.n, -1, g.oh, g.ow, 16), g.c)
    want = reference_pool("MaxPool", x, g, False)
    assert np.isnan(want).sum() >= 9 * len(nans) - 8
    assert_close(got, want)


@needs_cc
@pytest.mark.parametrize("shape", [(2, 33, 7, 7), (1, 1, 1, 1), (1, 16, 13, 13)])
def test_blocked_global_pools(shape: Tuple[int, int, int, int]) -> None:
    n, c, h, w = shape
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    avg = run(blocked_pool.blocked_global_avgpool(n, c, h, w), block(x)).reshape(n, c, 1, 1)
    assert_close(avg, x.astype(np.float64).mean(axis=(2, 3), keepdims=True))
    x[0, c - 1, h - 1, w - 1] = np.nan
    top = run(blocked_pool.blocked_global_maxpool(n, c, h, w), block(x)).reshape(n, c, 1, 1)
    want = x.astype(np.float64).max(axis=(2, 3), keepdims=True)  # numpy's max propagates NaN
    assert np.isnan(want[0, c - 1, 0, 0])
    assert_close(top, want)


def test_blocked_pool_refuses_what_it_cannot_compute() -> None:
    with pytest.raises(NotSupportedError, match="LpPool"):
        blocked_pool.blocked_pool("LpPool", geometry((1, 1, 4, 4), (2, 2)), False)
    with pytest.raises(NotSupportedError, match="negative padding"):
        blocked_pool.blocked_pool("MaxPool", geometry((1, 1, 4, 4), (2, 2), pads=(-1, 0, 0, 0)), False)


def all_kernels() -> List[CKernel]:
    g = geometry((1, 17, 9, 9), (3, 3), (2, 2), (1, 1, 1, 1))
    return [
        reorders.to_blocked(1, 17, 9, 9),
        reorders.from_blocked(1, 17, 9, 9),
        blocked_pool.blocked_pool("MaxPool", g, False),
        blocked_pool.blocked_pool("AveragePool", g, True),
        blocked_pool.blocked_global_avgpool(1, 17, 9, 9),
        blocked_pool.blocked_global_maxpool(1, 17, 9, 9),
    ]


@pytest.mark.skipif(shutil.which("clang") is None, reason="no clang to cross-compile with")
def test_kernels_compile_for_aarch64(tmp_path: Path) -> None:
    """Every kernel builds for a foreign target without headers (the bundle compiles each for every target)."""
    for kernel in all_kernels():
        src = tmp_path / (kernel.name + ".c")
        src.write_text(kernel.source)
        subprocess.run(
            ["clang", "--target=aarch64-linux-gnu", "-O2", "-fPIC", "-w", "-c", str(src), "-o", str(tmp_path / "k.o")],
            check=True,
        )


def test_header_lists_the_prototypes() -> None:
    assert all(k.source.startswith(PROTOTYPES) for k in all_kernels())
