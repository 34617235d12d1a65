"""The blocked depthwise convolution (svod_min/onnx/kernels/blocked_dwconv.py) and SiLU in the blocked convolutions'
store.

The kernel alone, compiled with the host's C compiler and called for every core_id, against a float64 numpy grouped
convolution (support.conv_ref): channels not a multiple of 16, odd sizes, stride 2, dilation, padding wider than
the window, rows shorter and longer than the pixel tile, batch 2, every fused activation, SiLU and a per-channel
PRelu; one case also for the x86-64-v3 level (its own, narrower tile). Every blocked input carries large finite
garbage in its padding channels: none may reach a real output. Then whole ONNX graphs through the layout pass and a
bundle, against onnxruntime: a mobile block (pointwise, depthwise stride 2, pointwise, HardSwish) runs blocked end
to end, and ``y * Sigmoid(y)`` after a convolution runs in its store unless another op reads the sigmoid."""

from __future__ import annotations

import dataclasses
import platform
from typing import Any, Dict, List, Optional, Tuple

import pytest

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.python_independent  # C kernels against numpy: the same on every Python

from support import conv_ref  # noqa: E402
from support.blocked_kernels import block, needs_cc, run, unblock  # noqa: E402

from svod_min.onnx.geometry import ConvGeom, pad_channels  # noqa: E402
from svod_min.onnx.kernels.blocked_dwconv import blocked_dwconv, pack_depthwise_weights  # noqa: E402

#: ONNX activation -> (support.conv_ref's name, the kernel's parameters, conv_ref's parameters).
ACTIVATIONS: Dict[Optional[str], Tuple[str, Dict[str, float], Dict[str, float]]] = {
    None: ("none", {}, {}),
    "Relu": ("relu", {}, {}),
    "LeakyRelu": ("leaky_relu", {"alpha": 0.1}, {"alpha": 0.1}),
    "Clip": ("clip", {"min": -0.5, "max": 0.75}, {"clip_min": -0.5, "clip_max": 0.75}),
    "Sigmoid": ("sigmoid", {}, {}),
    "HardSigmoid": ("hardsigmoid", {"alpha": 0.3, "beta": 0.4}, {"alpha": 0.3, "beta": 0.4}),
    "HardSwish": ("hardswish", {}, {}),
}


@dataclasses.dataclass(frozen=True)
class Case:
    """One depthwise convolution: plain input shape, kernel, strides, pads (top, left, bottom, right), dilations,
    the fused activation ("SiLU" and "PRelu" included)."""

    shape: Tuple[int, int, int, int]
    kernel: Tuple[int, int] = (3, 3)
    strides: Tuple[int, int] = (1, 1)
    pads: Tuple[int, int, int, int] = (1, 1, 1, 1)
    dilations: Tuple[int, int] = (1, 1)
    act: Optional[str] = None

    def geometry(self) -> ConvGeom:
        n, c, h, w = self.shape
        (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = self.kernel, self.strides, self.dilations, self.pads
        oh, ow = conv_ref.out_size(h, kh, sh, pt, pb, dh), conv_ref.out_size(w, kw, sw, pl, pr, dw)
        return ConvGeom(n, c, h, w, c, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, c)

    def label(self) -> str:
        sizes = ["".join(map(str, v)) for v in (self.kernel, self.strides, self.pads, self.dilations)]
        return "%s-k%s-s%s-p%s-d%s-%s" % ("x".join(map(str, self.shape)), *sizes, self.act or "none")


CASES: List[Case] = [
    Case((1, 16, 1, 1), act="Relu"),  # a 1x1 image under a padded 3x3 window; C = 16 exactly
    Case((1, 20, 9, 7), strides=(2, 2), act="HardSwish"),  # C past a block, odd sizes, stride 2
    Case((2, 33, 11, 37), kernel=(5, 5), pads=(2, 2, 2, 2), act="HardSigmoid"),  # 3 blocks, OW 37 = 2 tiles + 5
    Case((1, 17, 15, 40), strides=(2, 2), pads=(0, 1, 1, 0), act="SiLU"),  # uneven padding, stride 2, 20 columns
    Case((1, 24, 6, 8), pads=(4, 5, 4, 5), act="Clip"),  # padding wider than the window: all-padding windows
    Case((1, 18, 12, 19), dilations=(2, 2), pads=(2, 2, 2, 2), act="PRelu"),  # dilation; a slope per channel
    Case((1, 64, 29, 29), kernel=(3, 5), pads=(1, 2, 1, 2), act="LeakyRelu"),  # big enough for several calls
]


def _data(case: Case, seed: int) -> Tuple[Any, Any, Any, Dict[str, Any]]:
    """x, w [C, 1, KH, KW], bias and the kernel's activation parameters (PRelu's slopes drawn here)."""
    g = case.geometry()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(case.shape).astype(np.float32)
    w = (rng.standard_normal((g.c, 1, g.kh, g.kw)) / np.sqrt(g.kh * g.kw)).astype(np.float32)
    bias = rng.standard_normal(g.c).astype(np.float32) * 0.5
    if case.act == "PRelu":
        params: Dict[str, Any] = {"slope": tuple(float(v) for v in rng.standard_normal(g.c).astype(np.float32))}
    else:
        params = dict(ACTIVATIONS[case.act][1]) if case.act in ACTIVATIONS else {}
    return x, w, bias, params


def reference(case: Case, x: Any, w: Any, bias: Any, params: Dict[str, Any]) -> Any:
    g = case.geometry()
    v = conv_ref.conv2d(x, w, case.strides, case.pads, case.dilations, groups=g.c)
    v = v + bias.astype(np.float64)[None, :, None, None]
    if case.act == "SiLU":
        return v / (1 + np.exp(-v))
    if case.act == "PRelu":
        slope = np.asarray(params["slope"], np.float64)[None, :, None, None]
        return np.where(v < 0, v * slope, v)
    name, _, ref_params = ACTIVATIONS[case.act]
    return conv_ref.activation(v, name, ref_params)


def run_case(case: Case, flags: Tuple[str, ...] = ()) -> Tuple[Any, Any]:
    """(the kernel's blocked output [N, CB, OH, OW, 16], the float64 reference [N, C, OH, OW])."""
    g = case.geometry()
    x, w, bias, params = _data(case, 3)
    kernel = blocked_dwconv(g, case.act, params)
    if flags:
        name = kernel.name + "_v3"
        kernel = dataclasses.replace(
            kernel, name=name, source=kernel.source.replace(kernel.name, name), flags=kernel.flags + flags
        )
    got = run(kernel, block(x), pack_depthwise_weights(w), pad_channels(bias, g.c))
    return got.reshape(g.n, -(-g.c // 16), g.oh, g.ow, 16), reference(case, x, w, bias, params)


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


def assert_close(got: Any, want: Any) -> None:
    assert got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err <= 2e-5 * scale, "max abs error %.3g (scale %.3g)" % (err, scale)


@needs_cc
@pytest.mark.parametrize("case", CASES, ids=Case.label)
def test_blocked_dwconv_matches_reference(case: Case) -> None:
    got, want = run_case(case)
    assert_close(unblock(got, case.shape[1]), want)


@needs_cc
def test_several_calls_split_the_work() -> None:
    assert blocked_dwconv(CASES[-1].geometry(), None, {}).chunks > 1


@needs_cc
def test_x86_64_v3_tile_agrees() -> None:
    """Without AVX-512 the tile is 4 pixels wide: its own remainders and edges."""
    if platform.machine() not in ("x86_64", "AMD64") or not {"avx2", "fma", "bmi1", "bmi2"} <= _cpu_flags():
        pytest.skip("this CPU does not run x86-64-v3")
    got, want = run_case(CASES[2], ("-march=x86-64-v3",))
    assert_close(unblock(got, CASES[2].shape[1]), want)


def test_pack_depthwise_weights_round_trips() -> None:
    w = np.random.default_rng(7).standard_normal((33, 1, 3, 5)).astype(np.float32)
    packed = pack_depthwise_weights(w)
    assert packed.shape == (3, 3, 5, 16)
    plain = packed.transpose(0, 3, 1, 2).reshape(48, 3, 5)
    assert np.array_equal(plain[:33], w[:, 0]) and not plain[33:].any()


def test_grouped_but_not_depthwise_is_refused() -> None:
    from svod_min.error import NotSupportedError

    g = dataclasses.replace(CASES[1].geometry(), groups=10)
    with pytest.raises(NotSupportedError):
        blocked_dwconv(g, None, {})


@needs_cc
def test_silu_store_over_a_wide_range_writes_no_subnormal() -> None:
    """SiLU in the blocked convolution's store for sums from -300 to 300 (past its exponent clamp at 80) and a
    NaN: the float64 ``v * sigmoid(v)`` within float32 rounding, NaN kept, and no subnormal output (one would slow
    every reader)."""
    from svod_min.onnx.kernels.blocked_conv import blocked_conv, pack_weights

    c, oc, h, w = 1, 20, 3, 41
    x = np.linspace(-300, 300, c * h * w).reshape(1, c, h, w).astype(np.float32)
    x[0, 0, 1, 7] = np.nan
    weights = np.linspace(-1.0, 1.0, oc).reshape(oc, c, 1, 1).astype(np.float32)
    g = ConvGeom(1, c, h, w, oc, h, w, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1)
    got = run(blocked_conv(g, "SiLU", {}, False, plain_input=True), x, pack_weights(weights), pad_channels(None, oc))
    got = unblock(got.reshape(1, 2, h, w, 16), oc)
    v = conv_ref.conv2d(x, weights)
    want = v / (1 + np.exp(-np.clip(v, -700, 700)))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    finite = ~np.isnan(want)
    assert np.max(np.abs(got[finite] - want[finite])) <= 2e-6 * np.max(np.abs(want[finite]))
    tiny = (got != 0) & (np.abs(got) < np.finfo(np.float32).tiny)
    assert not tiny.any(), got[tiny]
