"""conv2d_gemm, depthwise_conv2d, maxpool2d, avgpool2d and global_avgpool against float64 references
(tests/support/conv_ref.py: explicit padding and stride-trick windows), over odd shapes, every fused
epilogue, 1 and 2 threads (bit-identical) and the refusals of bad variables."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import pytest
from support import conv_ref as ref
from support.kernel_check import needs_cc, rng  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

# C kernels against numpy: the same on every Python (the library's Python side is tested in every env).
pytestmark = pytest.mark.python_independent

from svod_min import kernels  # noqa: E402
from svod_min.error import CompilerNotFoundError  # noqa: E402
from svod_min.kernels import KernelArgumentError, KernelParamError  # noqa: E402

ACTS = tuple(ref.ACT_VARS)
#: Float parameters of the activations that take them (hardsigmoid as onnx's defaults).
ACT_PARAMS: Dict[str, Dict[str, float]] = {
    "clip": {"clip_min": -0.5, "clip_max": 1.25},
    "leaky_relu": {"alpha": 0.1},
    "hardsigmoid": {"alpha": 0.2, "beta": 0.5},
}
EPS = {"float32": float(np.finfo(np.float32).eps), "float64": float(np.finfo(np.float64).eps)}


def get(name: str, **params: Any) -> Any:
    """``kernels.get``; a test of an instance the prebuilt objects leave out (float64, the rarer epilogues:
    codegen.catalogue.PREBUILT_SUBSET) is skipped where it would need a C compiler and there is none."""
    try:
        return kernels.get(name, **params)
    except CompilerNotFoundError:
        pytest.skip("%s %s is compiled on demand and there is no C compiler" % (name, params))


class Conv:
    """One convolution case: shapes, stride, pads (top, left, bottom, right), dilation, groups."""

    def __init__(
        self,
        n: int,
        c: int,
        h: int,
        w: int,
        oc: int,
        kh: int,
        kw: int,
        stride: Tuple[int, int] = (1, 1),
        pads: Tuple[int, int, int, int] = (0, 0, 0, 0),
        dilation: Tuple[int, int] = (1, 1),
        groups: int = 1,
    ) -> None:
        self.n, self.c, self.h, self.w, self.oc, self.kh, self.kw = n, c, h, w, oc, kh, kw
        self.stride, self.pads, self.dilation, self.groups = stride, pads, dilation, groups
        self.oh = ref.out_size(h, kh, stride[0], pads[0], pads[2], dilation[0])
        self.ow = ref.out_size(w, kw, stride[1], pads[1], pads[3], dilation[1])

    def __repr__(self) -> str:
        return "Conv(%d,%d,%dx%d->%d,%dx%d,s%s,p%s,d%s,g%d)" % (
            self.n,
            self.c,
            self.h,
            self.w,
            self.oc,
            self.kh,
            self.kw,
            self.stride,
            self.pads,
            self.dilation,
            self.groups,
        )

    def variables(self, gemm: bool = True) -> Dict[str, int]:
        v = dict(
            N=self.n,
            C=self.c,
            H=self.h,
            W=self.w,
            KH=self.kh,
            KW=self.kw,
            sh=self.stride[0],
            sw=self.stride[1],
            pt=self.pads[0],
            pl=self.pads[1],
            pb=self.pads[2],
            pr=self.pads[3],
            dh=self.dilation[0],
            dw=self.dilation[1],
        )
        if gemm:
            v.update(OC=self.oc, groups=self.groups)
        return v

    @property
    def out_shape(self) -> Tuple[int, int, int, int]:
        return (self.n, self.oc, self.oh, self.ow)


def run_conv(
    rng: Any,
    case: Conv,
    name: str = "conv2d_gemm",
    dtype: str = "float32",
    act: str = "none",
    bias: bool = False,
    residual: bool = False,
    threads: Sequence[int] = (1,),
    **params: Any,
) -> List[Any]:
    """Run ``name`` on random inputs at each thread count; check against the reference; the outputs."""
    x = rng.standard_normal((case.n, case.c, case.h, case.w)).astype(dtype)
    w = rng.standard_normal((case.oc, case.c // case.groups, case.kh, case.kw)).astype(dtype)
    b = rng.standard_normal(case.oc).astype(dtype) if bias else None
    r = rng.standard_normal(case.out_shape).astype(dtype) if residual else None
    fvars = ACT_PARAMS.get(act, {})
    k = get(name, dtype=dtype, act=act, bias=bias, residual=residual, **params)
    conv = ref.conv2d(x, w, case.stride, case.pads, case.dilation, case.groups)
    want = ref.epilogue(conv, act, fvars, b, r)
    # the standard bound of the dot products, carried through the epilogue (|act'| <= 1.5: hardswish)
    mag = ref.conv2d(np.abs(x), np.abs(w), case.stride, case.pads, case.dilation, case.groups)
    kk = case.c // case.groups * case.kh * case.kw
    eps = EPS[dtype]
    extra = (np.abs(b)[None, :, None, None] if bias else 0) + (np.abs(r) if residual else 0)
    tol = 1.5 * (2 * kk * eps * mag + 2 * eps * (np.abs(conv) + extra)) + 8 * eps * np.abs(want) + 1e-30
    outs = []
    for t in threads:
        out = np.full(case.out_shape, np.nan, dtype)
        bufs = [out, x, w] + ([b] if bias else []) + ([r] if residual else [])
        k.run(bufs, threads=t, **case.variables(name == "conv2d_gemm"), **fvars)
        err = np.abs(out.astype(np.float64) - want)
        assert np.all(err <= tol), (case, act, bias, residual, t, float(err.max()), float((err - tol).max()))
        outs.append(out)
    return outs


# --- conv2d_gemm ---------------------------------------------------------------------------------

GEMM_CASES = [
    Conv(1, 1, 1, 1, 1, 1, 1),
    Conv(1, 5, 7, 9, 3, 1, 1),  # pointwise: the input rows as B
    Conv(2, 13, 11, 10, 17, 3, 3, pads=(1, 1, 1, 1)),  # batch 2, C and OC not multiples of the tile
    Conv(1, 6, 12, 13, 10, 5, 5, pads=(2, 2, 2, 2)),
    Conv(1, 3, 23, 22, 9, 7, 7, stride=(2, 2), pads=(3, 3, 3, 3)),  # a stem
    Conv(1, 4, 15, 16, 6, 3, 3, stride=(3, 1), pads=(0, 1, 2, 0)),  # asymmetric pads, stride 3
    Conv(1, 8, 14, 13, 8, 3, 3, pads=(2, 2, 2, 2), dilation=(2, 2)),
    Conv(2, 8, 9, 9, 6, 3, 3, pads=(1, 1, 1, 1), groups=2),
    Conv(1, 64, 6, 7, 64, 3, 3, pads=(1, 1, 1, 1), groups=32),
    Conv(1, 100, 5, 6, 20, 3, 3, pads=(1, 1, 1, 1)),  # K = 900: several kc blocks before the epilogue
    Conv(1, 7, 20, 30, 5, 1, 1, stride=(2, 2)),  # 1x1 with stride: the gathered path
    Conv(1, 3, 6, 40, 4, 1, 3, stride=(1, 2), pads=(0, 1, 0, 1), dilation=(1, 3)),
    Conv(1, 9, 7, 7, 11, 3, 3, pads=(1, 1, 1, 1)),  # P = 49 = 32 + 16 + 1: a pixel as a column (AVX-512 tile)
]


@pytest.mark.parametrize("case", GEMM_CASES, ids=repr)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_conv2d_gemm(case: Conv, dt: str, rng: Any) -> None:
    run_conv(rng, case, dtype=dt, bias=True)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("residual", [False, True])
def test_conv2d_gemm_epilogues(act: str, bias: bool, residual: bool, rng: Any) -> None:
    run_conv(rng, Conv(1, 100, 5, 6, 20, 3, 3, pads=(1, 1, 1, 1)), act=act, bias=bias, residual=residual)
    run_conv(rng, Conv(2, 8, 9, 7, 10, 1, 1), act=act, bias=bias, residual=residual)


@pytest.mark.parametrize("bias,residual", [(False, False), (True, True)])
def test_conv2d_gemm_float64_relu(bias: bool, residual: bool, rng: Any) -> None:
    run_conv(rng, GEMM_CASES[2], dtype="float64", act="relu", bias=bias, residual=residual)


@pytest.mark.parametrize(
    "case",
    [
        Conv(2, 16, 40, 41, 24, 3, 3, pads=(1, 1, 1, 1)),
        Conv(1, 32, 5, 5, 200, 3, 3, pads=(1, 1, 1, 1)),  # one pixel block: oc split
        Conv(1, 64, 8, 8, 64, 3, 3, pads=(1, 1, 1, 1), groups=32),
    ],
    ids=repr,
)
def test_conv2d_gemm_threads_bit_identical(case: Conv, rng: Any) -> None:
    one, two = run_conv(rng, case, act="relu", bias=True, residual=True, threads=(1, 2))
    assert np.array_equal(one, two)


@needs_cc
def test_conv2d_gemm_other_tiles(rng: Any) -> None:
    for mr, nr in ((4, 8), (6, 16), (8, 32)):
        run_conv(rng, GEMM_CASES[2], act="relu", bias=True, mr=mr, nr=nr)


def test_conv2d_gemm_signature() -> None:
    k = get("conv2d_gemm", act="clip", bias=True, residual=True)
    assert [b.name for b in k.buffers] == ["out", "x", "w", "bias", "residual"]
    assert [b.role for b in k.buffers] == ["w", "r", "r", "r", "r"]
    assert k.var_names == [
        "N",
        "C",
        "H",
        "W",
        "OC",
        "KH",
        "KW",
        "sh",
        "sw",
        "pt",
        "pl",
        "pb",
        "pr",
        "dh",
        "dw",
        "groups",
        "clip_min",
        "clip_max",
        "core_id_count",
        "core_id",
    ]
    v = Conv(2, 8, 9, 9, 6, 3, 3, pads=(1, 1, 1, 1), groups=2).variables()
    counts = k.counts(clip_min=0.0, clip_max=6.0, **v)
    assert counts == {"out": 2 * 6 * 81, "x": 2 * 8 * 81, "w": 6 * 4 * 9, "bias": 6, "residual": 2 * 6 * 81}
    assert kernels.find_sig("conv2d_gemm").name == "conv2d_gemm"
    assert "act" in kernels.catalogue()["conv2d_gemm"]["params"]


def test_prebuilt_subset(rng: Any) -> None:
    """The float32 kernels with the common epilogues come from this host's prebuilt object (no compiler)."""
    if kernels.host_variant() is None:
        pytest.skip("no prebuilt object fits this host")
    for act in ("none", "relu", "clip"):
        for bias, res in ((False, False), (True, False), (True, True)):
            assert kernels.get("conv2d_gemm", act=act, bias=bias, residual=res, prebuilt=True).prebuilt
            assert kernels.get("depthwise_conv2d", act=act, bias=bias, residual=res, prebuilt=True).prebuilt
    for name in ("maxpool2d", "avgpool2d", "global_avgpool"):
        assert kernels.get(name, prebuilt=True).prebuilt
    run_conv(rng, GEMM_CASES[2], act="clip", bias=True, residual=True, prebuilt=True)


# --- refusals ---------------------------------------------------------------------------------------


def _gemm_args(case: Conv, dtype: str = "float32") -> List[Any]:
    return [
        np.zeros(case.out_shape, dtype),
        np.zeros((case.n, case.c, case.h, case.w), dtype),
        np.zeros((case.oc, case.c // case.groups, case.kh, case.kw), dtype),
    ]


def test_conv2d_gemm_refusals() -> None:
    k = kernels.get("conv2d_gemm")
    case = Conv(1, 6, 8, 8, 4, 3, 3, pads=(1, 1, 1, 1), groups=2)
    good = case.variables()
    k.run(_gemm_args(case), **good)
    for bad in ({"groups": 4}, {"OC": 5}, {"KH": 11}, {"dw": 5}, {"sh": 0}, {"pt": -1}, {"groups": 0}):
        with pytest.raises(KernelArgumentError):
            k.run(_gemm_args(case), **dict(good, **bad))
    small = _gemm_args(case)
    small[0] = np.zeros(case.oh * case.ow * case.oc - 1, np.float32)  # one element short
    with pytest.raises(KernelArgumentError):
        k.run(small, **good)
    with pytest.raises(KernelArgumentError):
        k.run(_gemm_args(case, "float64"), **good)
    with pytest.raises(KernelArgumentError):  # a written buffer that is an input
        args = _gemm_args(case)
        k.run([args[0], args[0], args[2]], **good)
    with pytest.raises(KernelParamError):
        kernels.get("conv2d_gemm", act="gelu")
    with pytest.raises(KernelParamError):  # float64 instances: none and relu
        kernels.get("conv2d_gemm", dtype="float64", act="sigmoid")
    with pytest.raises(KernelArgumentError):  # clip needs its bounds
        kernels.get("conv2d_gemm", act="clip").run(_gemm_args(case), **good)
    with pytest.raises(KernelArgumentError):
        kernels.get("conv2d_gemm", bias=True).run(_gemm_args(case) + [np.zeros(3, np.float32)], **good)


# --- depthwise_conv2d ------------------------------------------------------------------------------


def _dw(n: int, c: int, h: int, w: int, k: int, **kw: Any) -> Conv:
    return Conv(n, c, h, w, c, k, k, groups=c, **kw)


DW_CASES = [
    _dw(1, 1, 1, 1, 1),
    _dw(1, 32, 40, 45, 3, pads=(1, 1, 1, 1)),  # interior blocks and an overlapping last block
    _dw(2, 3, 9, 5, 3, pads=(1, 1, 1, 1)),  # narrower than one block: edges only
    _dw(1, 4, 37, 70, 3, stride=(2, 2), pads=(1, 1, 1, 1)),  # stride 2: even elements of two loads
    _dw(1, 4, 30, 80, 3, stride=(2, 2), pads=(0, 0, 1, 1)),
    _dw(1, 5, 21, 50, 5, pads=(2, 2, 2, 2)),
    _dw(1, 3, 30, 90, 3, stride=(1, 3), pads=(2, 0, 1, 3), dilation=(2, 2)),
    _dw(2, 6, 23, 71, 7, stride=(2, 2), pads=(3, 3, 3, 3)),
    Conv(1, 2, 17, 50, 2, 3, 1, pads=(1, 0, 1, 0), groups=2),  # 3x1
]


@pytest.mark.parametrize("case", DW_CASES, ids=repr)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_depthwise_conv2d(case: Conv, dt: str, rng: Any) -> None:
    run_conv(rng, case, name="depthwise_conv2d", dtype=dt)


@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("bias,residual", [(False, False), (True, False), (False, True), (True, True)])
def test_depthwise_conv2d_epilogues(act: str, bias: bool, residual: bool, rng: Any) -> None:
    run_conv(
        rng, _dw(2, 3, 12, 40, 3, pads=(1, 1, 1, 1)), name="depthwise_conv2d", act=act, bias=bias, residual=residual
    )


def test_depthwise_conv2d_threads_bit_identical(rng: Any) -> None:
    one, two = run_conv(
        rng,
        _dw(2, 16, 30, 70, 3, pads=(1, 1, 1, 1)),
        name="depthwise_conv2d",
        act="relu",
        bias=True,
        residual=True,
        threads=(1, 2),
    )
    assert np.array_equal(one, two)


def test_depthwise_conv2d_refusals() -> None:
    k = kernels.get("depthwise_conv2d")
    case = _dw(1, 4, 8, 8, 3, pads=(1, 1, 1, 1))
    good = case.variables(gemm=False)
    args = _gemm_args(case)
    k.run(args, **good)
    for bad in ({"KH": 11}, {"sw": 0}, {"pr": -1}):
        with pytest.raises(KernelArgumentError):
            k.run(args, **dict(good, **bad))
    with pytest.raises(KernelArgumentError):  # weight of a conv with more channels per group
        k.run([args[0], args[1], np.zeros(4 * 9 - 1, np.float32)], **good)
    with pytest.raises(KernelArgumentError):
        k.run(args, **dict(good, C=5))


# --- pooling ----------------------------------------------------------------------------------------


def _pool_out(h: int, k: int, s: int, p0: int, p1: int, d: int, ceil: bool) -> int:
    """onnxruntime's output size: ceil mode drops a last window that starts in the end padding."""
    span = h + p0 + p1 - d * (k - 1) - 1
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= h + p0:
        out -= 1
    return out


POOL_CASES = [  # (N, C, H, W, (KH, KW), (sh, sw), (pt, pl, pb, pr), (dh, dw), ceil)
    (1, 1, 1, 1, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), False),
    (2, 3, 56, 57, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    (1, 2, 55, 55, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), True),  # SqueezeNet's ceil-mode pools
    (1, 2, 13, 70, (2, 3), (1, 1), (1, 0, 0, 2), (1, 1), False),
    (1, 3, 9, 10, (3, 2), (2, 3), (1, 0, 1, 1), (2, 1), True),
    (1, 2, 40, 99, (3, 3), (1, 2), (2, 2, 2, 2), (2, 2), False),
    (1, 4, 7, 7, (7, 7), (1, 1), (0, 0, 0, 0), (1, 1), False),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_maxpool2d(case: Any, dt: str, rng: Any) -> None:
    n, c, h, w, k, s, p, d, ceil = case
    oh, ow = _pool_out(h, k[0], s[0], p[0], p[2], d[0], ceil), _pool_out(w, k[1], s[1], p[1], p[3], d[1], ceil)
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    want = ref.maxpool2d(x, k, s, p, d, oh, ow)
    kern = get("maxpool2d", dtype=dt)
    outs = []
    for t in (1, 2):
        out = np.full((n, c, oh, ow), np.nan, dt)
        kern.run(
            [out, x],
            threads=t,
            N=n,
            C=c,
            H=h,
            W=w,
            OH=oh,
            OW=ow,
            KH=k[0],
            KW=k[1],
            sh=s[0],
            sw=s[1],
            pt=p[0],
            pl=p[1],
            dh=d[0],
            dw=d[1],
        )
        assert np.array_equal(out, want.astype(dt))
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


def test_maxpool2d_nan_propagates() -> None:
    x = np.zeros((1, 1, 4, 40), np.float32)
    x[0, 0, 1, 17] = np.nan
    out = np.empty((1, 1, 2, 39), np.float32)
    kernels.get("maxpool2d").run(
        [out, x], N=1, C=1, H=4, W=40, OH=2, OW=39, KH=2, KW=2, sh=2, sw=1, pt=0, pl=0, dh=1, dw=1
    )
    assert np.isnan(out[0, 0, 0, 16]) and np.isnan(out[0, 0, 0, 17]) and np.isnan(out).sum() == 2


@pytest.mark.parametrize("case", [c for c in POOL_CASES if c[7] == (1, 1)], ids=str)
@pytest.mark.parametrize("cip", [0, 1])
@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_avgpool2d(case: Any, cip: int, dt: str, rng: Any) -> None:
    n, c, h, w, k, s, p, _d, ceil = case
    oh, ow = _pool_out(h, k[0], s[0], p[0], p[2], 1, ceil), _pool_out(w, k[1], s[1], p[1], p[3], 1, ceil)
    x = rng.standard_normal((n, c, h, w)).astype(dt)
    want = ref.avgpool2d(x, k, s, p, oh, ow, bool(cip))
    kern = get("avgpool2d", dtype=dt)
    outs = []
    for t in (1, 2):
        out = np.full((n, c, oh, ow), np.nan, dt)
        kern.run(
            [out, x],
            threads=t,
            N=n,
            C=c,
            H=h,
            W=w,
            OH=oh,
            OW=ow,
            KH=k[0],
            KW=k[1],
            sh=s[0],
            sw=s[1],
            pt=p[0],
            pl=p[1],
            pb=p[2],
            pr=p[3],
            count_include_pad=cip,
        )
        tol = (k[0] * k[1] + 2) * EPS[dt] * ref.avgpool2d(np.abs(x), k, s, p, oh, ow, bool(cip)) + 1e-30
        assert np.all(np.abs(out - want) <= tol)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_global_avgpool(dt: str, rng: Any) -> None:
    for n, c, h, w in ((1, 1, 1, 1), (2, 5, 7, 7), (1, 64, 13, 17), (3, 2, 1, 33)):
        x = rng.standard_normal((n, c, h, w)).astype(dt)
        out = np.full((n, c), np.nan, dt)
        get("global_avgpool", dtype=dt).run([out, x], threads=2, N=n, C=c, H=h, W=w)
        want = x.astype(np.float64).mean(axis=(2, 3))
        bound = (np.sqrt(h * w / 16.0) + 18) * EPS[dt] * np.abs(x).astype(np.float64).mean(axis=(2, 3))
        assert np.all(np.abs(out - want) <= bound)


def test_pool_refusals() -> None:
    x = np.zeros((1, 2, 8, 8), np.float32)
    out = np.zeros((1, 2, 4, 4), np.float32)
    base = dict(N=1, C=2, H=8, W=8, OH=4, OW=4, KH=2, KW=2, sh=2, sw=2, pt=0, pl=0)
    kernels.get("maxpool2d").run([out, x], dh=1, dw=1, **base)
    with pytest.raises(KernelArgumentError):  # the last window starts past the input
        kernels.get("maxpool2d").run([np.zeros((1, 2, 5, 4), np.float32), x], dh=1, dw=1, **dict(base, OH=5))
    with pytest.raises(KernelArgumentError):  # out too small for OH x OW
        kernels.get("maxpool2d").run([out[:, :, :3], x], dh=1, dw=1, **base)
    avg = kernels.get("avgpool2d")
    avg.run([out, x], pb=0, pr=0, count_include_pad=1, **base)
    with pytest.raises(KernelArgumentError):
        avg.run([out, x], pb=0, pr=0, count_include_pad=2, **base)
    with pytest.raises(KernelArgumentError):
        kernels.get("global_avgpool").run([np.zeros(1, np.float32), x], N=1, C=2, H=8, W=8)
