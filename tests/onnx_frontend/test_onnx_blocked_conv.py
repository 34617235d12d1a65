"""The blocked convolution (svod_min/onnx/kernels/blocked_conv.py) alone, compiled with the host's C compiler for this
CPU's best x86-64 level (the bundle's host target) and called for every core_id, against a float64 numpy
convolution of the plain data (support.conv_ref): edge shapes (1x1 images, channels not a multiple of 16 or exactly
16, stride above the kernel, dilation, padding wider than the kernel or on one side only, batch 2, output rows
shorter and longer than the 14-pixel tile, an odd number of output-channel blocks, 1x1 to 7x7 kernels, several
calls), every fused activation, the residual. Every blocked input carries large finite garbage in its padding
channels: none may reach a real output. The same kernels compiled for each x86-64 level this CPU runs (each picks
its own register tile) agree with the reference; packed weights and padded biases unpack exactly."""

from __future__ import annotations

import dataclasses
import functools
import platform
from typing import Any, Dict, List, Optional, Tuple

import pytest

np = pytest.importorskip("numpy")
pytestmark = pytest.mark.python_independent  # C kernels against numpy: the same on every Python

from support import conv_ref  # noqa: E402
from support.blocked_kernels import block, needs_cc, run, unblock  # noqa: E402

from svod_min.onnx.geometry import ConvGeom, pad_channels  # noqa: E402
from svod_min.onnx.kernels.blocked_conv import blocked_conv, pack_weights  # noqa: E402
from svod_min.onnx.kernels.ckernel import CKernel  # noqa: E402

#: x86-64 level -> the CPU flags (/proc/cpuinfo) it needs.
LEVELS: Dict[str, Tuple[str, ...]] = {
    "x86-64": (),
    "x86-64-v3": ("avx2", "fma", "bmi1", "bmi2"),
    "x86-64-v4": ("avx2", "fma", "bmi1", "bmi2", "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
#: ONNX activation -> (support.conv_ref's name, the kernel's parameters, conv_ref's parameters).
ACTIVATIONS: Dict[Optional[str], Tuple[str, Dict[str, float], Dict[str, float]]] = {
    None: ("none", {}, {}),
    "Relu": ("relu", {}, {}),
    "LeakyRelu": ("leaky_relu", {"alpha": 0.1}, {"alpha": 0.1}),
    "Clip": ("clip", {"min": -0.5, "max": 0.75}, {"clip_min": -0.5, "clip_max": 0.75}),
    "Sigmoid": ("sigmoid", {}, {}),
    "Tanh": ("tanh", {}, {}),
    "HardSigmoid": ("hardsigmoid", {"alpha": 0.3, "beta": 0.4}, {"alpha": 0.3, "beta": 0.4}),
    "HardSwish": ("hardswish", {}, {}),
}


@functools.lru_cache(maxsize=None)
def cpu_flags() -> frozenset:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def runnable_levels() -> List[str]:
    if platform.machine() not in ("x86_64", "AMD64"):
        return []
    return [level for level, needs in LEVELS.items() if set(needs) <= cpu_flags()]


#: The level the bundle's host target compiles for here (the best one this CPU runs).
HOST_LEVEL = (runnable_levels() or [None])[-1]


def for_level(kernel: CKernel, level: Optional[str]) -> CKernel:
    """The kernel compiled with ``-march=level`` too, under its own name (a shared object of the same name would
    be the one already loaded)."""
    if level is None:
        return kernel
    name = "%s_%s" % (kernel.name, level.replace("-", "_"))
    return dataclasses.replace(
        kernel, name=name, source=kernel.source.replace(kernel.name, name), flags=kernel.flags + ("-march=" + level,)
    )


@dataclasses.dataclass(frozen=True)
class Case:
    """One convolution: plain input shape, OC, kernel, strides, pads (top, left, bottom, right), dilations, the
    fused activation, whether a residual is added and whether the input is read plain (a first layer)."""

    shape: Tuple[int, int, int, int]
    oc: int
    kernel: Tuple[int, int] = (3, 3)
    strides: Tuple[int, int] = (1, 1)
    pads: Tuple[int, int, int, int] = (1, 1, 1, 1)
    dilations: Tuple[int, int] = (1, 1)
    act: Optional[str] = None
    residual: bool = False
    plain_input: bool = False

    def geometry(self) -> ConvGeom:
        n, c, h, w = self.shape
        (kh, kw), (sh, sw), (dh, dw), (pt, pl, pb, pr) = self.kernel, self.strides, self.dilations, self.pads
        oh, ow = conv_ref.out_size(h, kh, sh, pt, pb, dh), conv_ref.out_size(w, kw, sw, pl, pr, dw)
        return ConvGeom(n, c, h, w, self.oc, oh, ow, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw)

    def label(self) -> str:
        sizes = ["".join(map(str, v)) for v in (self.kernel, self.strides, self.pads, self.dilations)]
        return "%s-oc%d-k%s-s%s-p%s-d%s-%s%s" % (
            "x".join(map(str, self.shape)),
            self.oc,
            *sizes,
            self.act or "none",
            "-res" if self.residual else "",
        ) + ("-plain" if self.plain_input else "")


#: Big enough for several core_id calls.
SEVERAL_CALLS = Case((1, 33, 29, 29), 33)
#: Each case is one compile (0.2-1 s at -O3; C = 24 with a 5x3 window took 2 s), so the activations ride on the edge
#: shapes instead of multiplying them.
CASES: List[Case] = [
    Case((1, 16, 1, 1), 16, act="Relu"),  # a 1x1 image under a padded 3x3 window; C = 16 exactly
    Case((1, 17, 9, 7), 33, act="LeakyRelu"),  # C and OC past a block; 3 output blocks (the last pair holds one); OW 7
    Case((2, 20, 6, 15), 20, act="Clip", residual=True),  # batch 2; OW 15: one 14-pixel tile and a 1-pixel rest
    Case((1, 33, 5, 29), 17, kernel=(1, 1), pads=(0, 0, 0, 0), act="Sigmoid"),  # 1x1 kernel; OW 29 = 2 tiles + 1
    Case((1, 16, 11, 13), 48, strides=(3, 4), pads=(0, 0, 0, 0), act="Tanh"),  # stride above the kernel
    Case((1, 20, 12, 31), 16, dilations=(2, 2), pads=(2, 2, 2, 2), act="HardSigmoid"),  # dilation 2
    Case((1, 17, 6, 8), 20, pads=(4, 5, 4, 5), act="HardSwish"),  # padding wider than the kernel: all-padding windows
    Case((1, 16, 9, 20), 33, kernel=(5, 3), pads=(0, 2, 4, 0), residual=True),  # padding on one side only, each axis
    Case((1, 16, 10, 16), 32, kernel=(5, 5), pads=(2, 2, 2, 2), strides=(2, 2), act="Relu"),
    Case(
        (2, 17, 11, 29), 17, kernel=(7, 7), pads=(3, 3, 3, 3), act="LeakyRelu", residual=True
    ),  # 7x7; OCB 2 (one pair)
    SEVERAL_CALLS,
    Case((1, 40, 7, 7), 70, act="Relu", residual=True),  # OW 7: tiles of 4 output blocks, the last group holds one
    Case((1, 3, 23, 21), 20, kernel=(7, 7), strides=(2, 2), pads=(3, 3, 3, 3), act="Relu", plain_input=True),  # a stem
    Case((2, 5, 9, 16), 16, plain_input=True),  # plain input, C 5, batch 2
]


def _weights(case: Case, seed: int) -> Tuple[Any, Any, Any, Optional[Any]]:
    """x, w, bias and the residual (or None), seeded, scaled so that the sums stay near 1."""
    g = case.geometry()
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(case.shape).astype(np.float32)
    w = (rng.standard_normal((g.oc, g.c, g.kh, g.kw)) / np.sqrt(g.c * g.kh * g.kw)).astype(np.float32)
    bias = rng.standard_normal(g.oc).astype(np.float32) * 0.5
    residual = rng.standard_normal((g.n, g.oc, g.oh, g.ow)).astype(np.float32) if case.residual else None
    return x, w, bias, residual


def reference(case: Case, x: Any, w: Any, bias: Any, residual: Optional[Any]) -> Any:
    name, _, params = ACTIVATIONS[case.act]
    conv = conv_ref.conv2d(x, w, case.strides, case.pads, case.dilations)
    return conv_ref.epilogue(conv, name, params, bias, residual)


def run_case(case: Case, level: Optional[str], seed: int = 5) -> Tuple[Any, Any]:
    """(the kernel's blocked output [N, OCB, OH, OW, 16], the float64 reference [N, OC, OH, OW])."""
    g = case.geometry()
    x, w, bias, residual = _weights(case, seed)
    kernel = for_level(blocked_conv(g, case.act, ACTIVATIONS[case.act][1], case.residual, case.plain_input), level)
    inputs = [x if case.plain_input else block(x), pack_weights(w), pad_channels(bias, g.oc)] + (
        [block(residual)] if residual is not None else []
    )
    got = run(kernel, *inputs).reshape(g.n, -(-g.oc // 16), g.oh, g.ow, 16)
    return got, reference(case, x, w, bias, residual)


def assert_close(got: Any, want: Any) -> None:
    assert got.shape == want.shape
    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err <= 2e-5 * scale, "max abs error %.3g (scale %.3g)" % (err, scale)


@needs_cc
@pytest.mark.parametrize("case", CASES, ids=Case.label)
def test_blocked_conv_matches_reference(case: Case) -> None:
    got, want = run_case(case, HOST_LEVEL)
    assert_close(unblock(got, case.oc), want)
    # The padding output channels hold act(0 + the residual's padding): finite, whatever they are.
    assert np.all(np.isfinite(got)), "non-finite values in the output (padding channels included)"


@needs_cc
def test_several_calls_split_the_work() -> None:
    g = SEVERAL_CALLS.geometry()
    assert blocked_conv(g, None, {}, False).chunks > 1


@needs_cc
@pytest.mark.parametrize("level", [lv for lv in LEVELS if lv != HOST_LEVEL])
@pytest.mark.parametrize("case", [CASES[3], CASES[9]], ids=Case.label)
def test_each_x86_level_agrees(case: Case, level: str) -> None:
    """Each level's predefined macros pick its own register tile (the host level runs in the test above)."""
    if level not in runnable_levels():
        pytest.skip("this CPU does not run %s" % level)
    got, want = run_case(case, level)
    assert_close(unblock(got, case.oc), want)


@pytest.mark.parametrize("oc,ic,kh,kw", [(33, 20, 3, 3), (16, 16, 1, 1), (17, 3, 1, 2)])
def test_pack_weights_round_trips(oc: int, ic: int, kh: int, kw: int) -> None:
    w = np.random.default_rng(7).standard_normal((oc, ic, kh, kw)).astype(np.float32)
    packed = pack_weights(w)
    ocb, icb = -(-oc // 16), -(-ic // 16)
    assert packed.shape == (ocb, icb, kh, kw, 16, 16) and packed.dtype == np.float32
    assert packed.flags["C_CONTIGUOUS"]
    for o in range(ocb * 16):
        for i in range(icb * 16):
            taps = packed[o // 16, i // 16, :, :, i % 16, o % 16]
            if o < oc and i < ic:
                assert np.array_equal(taps, w[o, i])
            else:
                assert not taps.any(), "nonzero weight beyond the real channels at out %d, in %d" % (o, i)


def test_pad_channels() -> None:
    bias = np.arange(1, 18, dtype=np.float32)
    padded = pad_channels(bias, 17)
    assert padded.dtype == np.float32 and padded.shape == (32,)
    assert np.array_equal(padded[:17], bias) and not padded[17:].any()
    assert np.array_equal(pad_channels(None, 20), np.zeros(32, np.float32))


def test_a_grouped_geometry_is_refused() -> None:
    from svod_min.error import NotSupportedError

    with pytest.raises(NotSupportedError, match="one group, not 2"):
        blocked_conv(ConvGeom(1, 4, 4, 4, 4, 4, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2), None, {}, False)
