"""conv2d_gemm with weights packed at build time (packed=True, svod_min.kernels.conv_pack) against the float64
reference (tests/support/conv_ref.py) and the unpacked kernel: odd shapes (OC past a packed strip, K over several
kc blocks, groups, stride > kernel, dilation, pads wider than the kernel, 1x1 images, batch 2), every tile height,
1 and 2 threads (bit-identical), and the packing's own refusals."""

from __future__ import annotations

from typing import Any, Sequence, Tuple

import pytest
from support import conv_ref as ref
from support.kernel_check import needs_cc, rng  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

# C kernels against numpy: the same on every Python (the library's Python side is tested in every env).
pytestmark = pytest.mark.python_independent

from svod_min import kernels  # noqa: E402
from svod_min.error import CompilerNotFoundError  # noqa: E402
from svod_min.kernels import KernelArgumentError  # noqa: E402
from svod_min.kernels.conv_pack import PACK_ROWS, pack_conv_weights, packed_size  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)

#: (N, C, H, W, OC, KH, KW, stride, pads (t, l, b, r), dilation, groups)
CASES = [
    (1, 1, 1, 1, 1, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1 image, one channel
    (1, 5, 7, 9, 3, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # pointwise
    (2, 13, 11, 10, 25, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # batch 2, OC one past a strip
    (1, 100, 5, 6, 50, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # K = 900: three kc blocks, the last shorter
    (1, 3, 23, 22, 9, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1), 1),  # a stem
    (1, 4, 15, 16, 6, 2, 2, (3, 3), (0, 1, 2, 0), (1, 1), 1),  # stride > kernel, asymmetric pads
    (1, 8, 14, 13, 8, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2), 1),  # dilation
    (1, 2, 3, 3, 5, 1, 1, (1, 1), (2, 2, 2, 2), (1, 1), 1),  # pads wider than the kernel
    (2, 8, 9, 9, 6, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2),  # groups
    (1, 64, 6, 7, 96, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 32),  # many small groups, 3 rows each
    (1, 1024, 2, 2, 30, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # K = 1024 in 3 blocks of 342, 340
]
#: Shapes for the im2col by masked loads (AVX-512; column stride 1 or 2, at least 1024 = C/groups OC/groups): runs
#: of input rows per 16-pixel chunk; P = 49, 50, 51 and 84 (= 64 + 16 + 4) end on a strip a few pixels past half
#: the tile's width, which runs as a half tile and those pixels as columns.
RUN_CASES = [
    (1, 32, 5, 5, 37, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # OW = 5: a chunk over 4 output rows, the most planned
    (1, 32, 4, 4, 33, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # OW = 4: more runs than planned, the generic pack
    (1, 32, 20, 20, 40, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # P = 400: a second pixel block from mid-row
    (1, 32, 9, 11, 41, 5, 5, (2, 1), (4, 3, 2, 4), (1, 1), 1),  # 25 taps, row stride 2, column stride 1, P = 84
    (2, 33, 6, 12, 32, 1, 7, (1, 1), (0, 3, 0, 3), (1, 1), 1),  # 1x7, batch 2
    (1, 32, 3, 3, 40, 3, 3, (1, 1), (4, 4, 4, 4), (1, 1), 1),  # pads past the kernel: rows and columns all padding
    (1, 32, 9, 9, 33, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1), 1),  # 49 taps (the most planned)
    (1, 32, 8, 8, 33, 1, 8, (1, 1), (0, 4, 0, 3), (1, 1), 1),  # 8 taps in a row
    (1, 32, 6, 6, 33, 9, 9, (1, 1), (4, 4, 4, 4), (1, 1), 1),  # 81 taps: past the plan, the generic pack
    (1, 40, 13, 12, 36, 3, 3, (1, 1), (2, 3, 2, 1), (2, 3), 1),  # dilation, asymmetric pads
    (1, 32, 7, 7, 50, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # P = 49 = 32 + 16 + 1: one pixel as a column
    (1, 32, 5, 10, 40, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # P = 50: two pixels as columns
    (2, 32, 3, 17, 33, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # P = 51: three, batch 2
    (1, 32, 14, 14, 40, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1), 1),  # column stride 2: pairs of loads, even elements
    (1, 32, 15, 21, 33, 3, 3, (2, 2), (0, 2, 1, 0), (1, 1), 1),  # stride 2, odd sizes, asymmetric pads
    (1, 48, 13, 14, 40, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1), 1),  # 1x1 stride 2
    (1, 32, 12, 40, 33, 3, 5, (1, 2), (1, 2, 1, 2), (2, 2), 1),  # column stride 2 with dilation 2
    (1, 32, 9, 9, 32, 3, 3, (3, 3), (1, 1, 1, 1), (1, 1), 1),  # column stride 3: the generic pack
    (1, 64, 7, 9, 64, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 2),  # groups: 32 x 32 channels each
]


def _run(
    rng: Any,
    case: Tuple[Any, ...],
    act: str = "relu",
    residual: bool = False,
    threads: Sequence[int] = (1,),
    **params: Any,
) -> Any:
    n, c, h, w_, oc, kh, kw, stride, pads, dil, groups = case
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    w = rng.standard_normal((oc, c // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    conv = ref.conv2d(x, w, stride, pads, dil, groups)
    r = rng.standard_normal(conv.shape).astype(np.float32) if residual else None
    fvars = {"clip_min": -0.5, "clip_max": 1.25} if act == "clip" else {}
    want = ref.epilogue(conv, act, fvars, b, r)
    mag = ref.conv2d(np.abs(x), np.abs(w), stride, pads, dil, groups)
    kk = c // groups * kh * kw
    tol = 1.5 * (2 * kk * EPS32 * mag + 2 * EPS32 * (np.abs(conv) + np.abs(b)[None, :, None, None])) + 1e-30
    if residual:
        tol = tol + 3 * EPS32 * np.abs(r)
    try:
        k = kernels.get("conv2d_gemm", act=act, bias=True, residual=residual, packed=True, **params)
    except CompilerNotFoundError:  # a tile the prebuilt objects leave out, and no compiler here
        pytest.skip("conv2d_gemm packed %s is compiled on demand and there is no C compiler" % params)
    packed = pack_conv_weights(w, groups)
    assert packed.size == packed_size(oc, kk, groups)
    variables = dict(
        N=n,
        C=c,
        H=h,
        W=w_,
        OC=oc,
        KH=kh,
        KW=kw,
        sh=stride[0],
        sw=stride[1],
        pt=pads[0],
        pl=pads[1],
        pb=pads[2],
        pr=pads[3],
        dh=dil[0],
        dw=dil[1],
        groups=groups,
        **fvars,
    )
    outs = []
    for t in threads:
        out = np.full(conv.shape, np.nan, np.float32)
        k.run([out, x, packed, b] + ([r] if residual else []), threads=t, **variables)
        err = np.abs(out.astype(np.float64) - want)
        assert np.all(err <= tol), (case, act, residual, t, float(err.max()))
        outs.append(out)
    return outs


@pytest.mark.parametrize("case", CASES + RUN_CASES, ids=repr)
def test_packed_conv_matches_reference(case: Tuple[Any, ...], rng: Any) -> None:
    _run(rng, case)


@needs_cc
@pytest.mark.parametrize("case", RUN_CASES, ids=repr)
def test_packed_conv_compiled_matches_reference(case: Tuple[Any, ...], rng: Any) -> None:
    """The host tile compiled from the generated source (the prebuilt object is the same code)."""
    _run(rng, case, prebuilt=False)


@pytest.mark.parametrize("act", ["none", "relu", "clip"])
@pytest.mark.parametrize("residual", [False, True])
def test_packed_conv_epilogues(act: str, residual: bool, rng: Any) -> None:
    _run(rng, CASES[3], act=act, residual=residual)


def test_packed_conv_threads_bit_identical(rng: Any) -> None:
    for case in (
        (2, 16, 20, 21, 30, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),
        (1, 32, 5, 5, 200, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # one pixel block: the oc split
        (1, 16, 28, 28, 24, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # 25 strips spread over 4 or 6 blocks
        (3, 8, 13, 13, 16, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # 3 images: 2 blocks each on 2 ids
        (3, 8, 1, 1, 16, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    ):  # one strip in 2 blocks: one is empty
        one, two, three = _run(rng, case, residual=True, threads=(1, 2, 3))  # 3: an uneven oc split
        assert np.array_equal(one, two) and np.array_equal(one, three)


def test_packed_conv_is_prebuilt() -> None:
    if kernels.host_variant() is None:
        pytest.skip("no prebuilt object fits this host")
    for act in ("none", "relu", "clip"):
        for res in (False, True):
            assert kernels.get("conv2d_gemm", act=act, bias=True, residual=res, packed=True, prebuilt=True).prebuilt


@needs_cc
@pytest.mark.parametrize("mr,nr", [(4, 8), (6, 16), (8, 32)])
def test_packed_conv_every_tile(mr: int, nr: int, rng: Any) -> None:
    """One packed layout for every tile height: PACK_ROWS is a multiple of each mr."""
    assert PACK_ROWS % mr == 0
    _run(rng, CASES[2], mr=mr, nr=nr)
    _run(rng, CASES[9], mr=mr, nr=nr)


def test_packed_weights_layout() -> None:
    """Block by block, strip by strip, row fastest; rows past OC/groups zero."""
    oc, k = 26, 5
    w = np.arange(oc * k, dtype=np.float32).reshape(oc, k, 1, 1) + 1
    p = pack_conv_weights(w)
    strips = p.reshape(2, k, PACK_ROWS)  # one kc block (k < kc), two strips
    assert np.array_equal(strips[0].T, w.reshape(oc, k)[:PACK_ROWS])
    assert np.array_equal(strips[1].T[:2], w.reshape(oc, k)[PACK_ROWS:]) and not strips[1].T[2:].any()


def test_packed_weights_refusals() -> None:
    with pytest.raises(KernelArgumentError, match="multiple of groups"):
        pack_conv_weights(np.zeros((5, 1, 3, 3), np.float32), groups=2)
    with pytest.raises(KernelArgumentError):
        pack_conv_weights(np.zeros((4, 3), np.float32))
    with pytest.raises(KernelArgumentError):
        pack_conv_weights(np.zeros((4, 1, 1, 1), np.int32))
