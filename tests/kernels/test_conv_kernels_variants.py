"""The convolution and pooling kernels of every x86_64 prebuilt variant this CPU runs (baseline SSE 4x8, AVX2
6x16, AVX-512 8x32), not only the host's: packed conv2d_gemm over the shapes that take each of its paths (the
column tail, the masked-load gather, groups, stride > kernel, batch 2, a 1x1 image, several kc blocks) at 1 and
2 threads, depthwise_conv2d, the pools and global_avgpool, against float64 references (tests/support/conv_ref.py)."""

from __future__ import annotations

from typing import Any, List, Tuple

import pytest
from support import conv_ref as ref
from support.kernel_check import HOST_VARIANT, rng  # noqa: F401 - rng is a fixture

np = pytest.importorskip("numpy")

# C kernels against numpy: the same on every Python.
pytestmark = pytest.mark.python_independent

from svod_min import kernels  # noqa: E402
from svod_min.compiler.targets import cpu_features  # noqa: E402
from svod_min.kernels import variants as kprebuilt  # noqa: E402
from svod_min.kernels.conv_pack import pack_conv_weights  # noqa: E402
from svod_min.kernels.lookup import generated  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)


def _x86_variants() -> List[str]:
    if not (HOST_VARIANT or "").startswith("x86_64"):
        return []
    have = cpu_features()
    return [
        name for name, v in sorted(generated().VARIANTS.items()) if v["arch"] == "x86_64" and set(v["requires"]) <= have
    ]


VARIANTS = _x86_variants()

#: (N, C, H, W, OC, KH, KW, stride, pads (t, l, b, r), dilation, groups)
CONV_CASES = [
    (1, 1, 1, 1, 1, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # 1x1 image, one channel
    (2, 13, 11, 10, 25, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # batch 2, OC one past a packed strip
    (1, 100, 5, 6, 50, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # K = 900: three kc blocks
    (1, 4, 15, 16, 6, 2, 2, (3, 3), (0, 1, 2, 0), (1, 1), 1),  # stride > kernel, asymmetric pads
    (1, 64, 6, 7, 96, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 32),  # groups
    (1, 32, 7, 7, 50, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1),  # P = 49: the column tail (8x32)
    (1, 32, 20, 20, 40, 3, 3, (2, 1), (1, 1, 1, 1), (2, 1), 1),  # masked-load gather, dilation, two pixel blocks
    (1, 16, 28, 28, 24, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # pointwise, 784 pixels over even blocks
]


def _use(monkeypatch: pytest.MonkeyPatch, variant: str) -> None:
    monkeypatch.setenv(kprebuilt.VARIANT_ENV, variant)
    assert kernels.host_variant() == variant


@pytest.mark.skipif(not VARIANTS, reason="x86_64 prebuilt objects only run on x86_64")
@pytest.mark.parametrize("variant", VARIANTS)
def test_packed_conv_of_every_variant(variant: str, monkeypatch: pytest.MonkeyPatch, rng: Any) -> None:
    _use(monkeypatch, variant)
    for case in CONV_CASES:
        n, c, h, w_, oc, kh, kw, stride, pads, dil, groups = case
        x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
        w = rng.standard_normal((oc, c // groups, kh, kw)).astype(np.float32)
        b = rng.standard_normal(oc).astype(np.float32)
        conv = ref.conv2d(x, w, stride, pads, dil, groups)
        r = rng.standard_normal(conv.shape).astype(np.float32)
        want = ref.epilogue(conv, "relu", {}, b, r)
        kk = c // groups * kh * kw
        mag = ref.conv2d(np.abs(x), np.abs(w), stride, pads, dil, groups)
        tol = 1.5 * (
            2 * kk * EPS32 * mag + 2 * EPS32 * (np.abs(conv) + np.abs(b)[None, :, None, None])
        ) + 3 * EPS32 * np.abs(r)
        k = kernels.get("conv2d_gemm", act="relu", bias=True, residual=True, packed=True, prebuilt=True)
        assert k.variant == variant
        outs = []
        for threads in (1, 2):
            out = np.full(conv.shape, np.nan, np.float32)
            k.run(
                [out, x, pack_conv_weights(w, groups), b, r],
                threads=threads,
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
            )
            assert np.all(np.abs(out.astype(np.float64) - want) <= tol), (variant, case, threads)
            outs.append(out)
        assert np.array_equal(outs[0], outs[1]), (variant, case)


@pytest.mark.skipif(not VARIANTS, reason="x86_64 prebuilt objects only run on x86_64")
@pytest.mark.parametrize("variant", VARIANTS)
def test_depthwise_and_pools_of_every_variant(variant: str, monkeypatch: pytest.MonkeyPatch, rng: Any) -> None:
    _use(monkeypatch, variant)
    n, c, h, w_ = 2, 19, 13, 21
    x = rng.standard_normal((n, c, h, w_)).astype(np.float32)
    wd = rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
    want = np.maximum(ref.conv2d(x, wd, (2, 1), (1, 1, 1, 1), (1, 1), c), 0)
    out = np.full(want.shape, np.nan, np.float32)
    dw = kernels.get("depthwise_conv2d", act="relu", prebuilt=True)
    dw.run([out, x, wd], threads=2, N=n, C=c, H=h, W=w_, KH=3, KW=3, sh=2, sw=1, pt=1, pl=1, pb=1, pr=1, dh=1, dw=1)
    tol = 2 * 9 * EPS32 * ref.conv2d(np.abs(x), np.abs(wd), (2, 1), (1, 1, 1, 1), (1, 1), c) + 1e-30
    assert np.all(np.abs(out - want) <= tol), variant
    geometry: Tuple[Any, ...] = ((3, 3), (2, 2), (1, 1, 1, 1))
    k, s, p = geometry
    oh, ow = (h + 2 - 3) // 2 + 1, (w_ + 2 - 3) // 2 + 1
    mx = np.full((n, c, oh, ow), np.nan, np.float32)
    kernels.get("maxpool2d", prebuilt=True).run(
        [mx, x], threads=2, N=n, C=c, H=h, W=w_, OH=oh, OW=ow, KH=3, KW=3, sh=2, sw=2, pt=1, pl=1, dh=1, dw=1
    )
    assert np.array_equal(mx, ref.maxpool2d(x, k, s, p, (1, 1), oh, ow).astype(np.float32)), variant
    av = np.full((n, c, oh, ow), np.nan, np.float32)
    kernels.get("avgpool2d", prebuilt=True).run(
        [av, x],
        threads=2,
        N=n,
        C=c,
        H=h,
        W=w_,
        OH=oh,
        OW=ow,
        KH=3,
        KW=3,
        sh=2,
        sw=2,
        pt=1,
        pl=1,
        pb=1,
        pr=1,
        count_include_pad=0,
    )
    tol = 11 * EPS32 * ref.avgpool2d(np.abs(x), k, s, p, oh, ow, False) + 1e-30
    assert np.all(np.abs(av - ref.avgpool2d(x, k, s, p, oh, ow, False)) <= tol), variant
    g = np.full((n, c), np.nan, np.float32)
    kernels.get("global_avgpool", prebuilt=True).run([g, x], threads=2, N=n, C=c, H=h, W=w_)
    mean = x.astype(np.float64).mean(axis=(2, 3))
    assert np.all(np.abs(g - mean) <= 40 * EPS32 * np.abs(x).astype(np.float64).mean(axis=(2, 3))), variant
