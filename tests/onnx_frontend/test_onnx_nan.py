"""NaN stays NaN through every activation and clamp, wherever it runs: alone (library or generated kernel), fused
into a generated elementwise kernel, into the blocked convolution's store, into conv2d_gemm's library epilogue, and
in LSTM's clipped gates. The reference is numpy in float64 (np.clip, comparisons), where a NaN in is a NaN out."""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model  # noqa: E402

from svod_min.onnx.activations import ACTIVATIONS  # noqa: E402

OPSET = 20  # Gelu's first opset
RNG = np.random.default_rng(5)
_erf = np.vectorize(math.erf)

#: Each activation's attributes in the test and its float64 reference.
REFERENCE: Dict[str, Tuple[Dict[str, Any], Callable[[Any], Any]]] = {
    "Relu": ({}, lambda x: np.where(x < 0, 0.0, x)),
    "LeakyRelu": ({"alpha": 0.1}, lambda x: np.where(x < 0, 0.1 * x, x)),
    "Clip": ({}, lambda x: np.clip(x, -0.5, 0.75)),
    "Sigmoid": ({}, lambda x: 1.0 / (1.0 + np.exp(-x))),
    "Tanh": ({}, np.tanh),
    "HardSigmoid": ({"alpha": 0.3, "beta": 0.4}, lambda x: np.clip(0.3 * x + 0.4, 0.0, 1.0)),
    "HardSwish": ({}, lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0)),
    "Gelu": ({}, lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))),
}


def test_every_activation_of_the_table_is_checked_here() -> None:
    assert sorted(REFERENCE) == sorted(ACTIVATIONS)


def _act_node(op: str, x: str, y: str) -> Tuple[List[Any], Dict[str, Any]]:
    attrs, _ = REFERENCE[op]
    if op == "Clip":  # opset 11+: the bounds are constant inputs
        bounds = {"lo": np.array(-0.5, np.float32), "hi": np.array(0.75, np.float32)}
        return [helper.make_node("Clip", [x, "lo", "hi"], [y])], bounds
    return [helper.make_node(op, [x], [y], **attrs)], {}


def _with_nans(shape: Tuple[int, ...]) -> Any:
    x = RNG.uniform(-4.0, 4.0, shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[RNG.choice(flat.size, max(1, flat.size // 7), replace=False)] = np.nan
    return x


def _assert_same(got: Any, want: Any) -> None:
    assert got.shape == want.shape
    nan = np.isnan(want)
    assert nan.any(), "the case must carry NaN to its output"
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_allclose(got[~nan], want[~nan], rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_activation_alone_keeps_nan(op: str, tmp_path: Any) -> None:
    nodes, consts = _act_node(op, "x", "y")
    model = graph_model(nodes, [("x", (2, 3, 5, 7))], ["y"], OPSET, consts)
    x = _with_nans((2, 3, 5, 7))
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    _assert_same(got, REFERENCE[op][1](x.astype(np.float64)))


@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_activation_fused_into_a_generated_elementwise_kernel_keeps_nan(op: str, tmp_path: Any) -> None:
    """y = act(a + b): a same-shape Add with a fused activation is one generated kernel."""
    nodes, consts = _act_node(op, "s", "y")
    model = graph_model(
        [helper.make_node("Add", ["a", "b"], ["s"])] + nodes, [("a", (3, 40)), ("b", (3, 40))], ["y"], OPSET, consts
    )
    a, b = _with_nans((3, 40)), RNG.uniform(-2.0, 2.0, (3, 40)).astype(np.float32)
    got = build_and_load(model, str(tmp_path)).run({"a": a, "b": b})["y"]
    _assert_same(got, REFERENCE[op][1](a.astype(np.float64) + b))


def _conv3x3(x: Any, w: Any, b: Any) -> Any:
    """float64 3x3 convolution, padding 1, stride 1 (a NaN reaches every output whose window holds it)."""
    n, c, h, wd = x.shape
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd)) + b.reshape(1, -1, 1, 1)
    for kh in range(3):
        for kw in range(3):
            out += np.einsum(
                "nchw,oc->nohw", padded[:, :, kh : kh + h, kw : kw + wd], w[:, :, kh, kw].astype(np.float64)
            )
    return out


@pytest.mark.parametrize("oc", [32, 8], ids=["blocked-conv", "conv2d_gemm"])
@pytest.mark.parametrize("op", sorted(REFERENCE))
def test_activation_fused_into_a_convolution_keeps_nan(op: str, oc: int, tmp_path: Any) -> None:
    """32 output channels: the blocked convolution's store; 8: the library conv2d_gemm's epilogue."""
    w = (RNG.standard_normal((oc, 16, 3, 3)) * 0.2).astype(np.float32)
    b = (RNG.standard_normal(oc) * 0.3).astype(np.float32)
    nodes, consts = _act_node(op, "c", "y")
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])
    model = graph_model([conv] + nodes, [("x", (1, 16, 9, 10))], ["y"], OPSET, dict(consts, w=w, b=b))
    x = RNG.uniform(-1.0, 1.0, (1, 16, 9, 10)).astype(np.float32)
    x[0, 3, 4, 5] = np.nan  # one pixel: a 3x3 patch of every output channel
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    _assert_same(got, REFERENCE[op][1](_conv3x3(x, w, b)))


def test_lstm_clip_keeps_nan(tmp_path: Any) -> None:
    """LSTM's ``clip`` bounds its gates; a NaN input reaches Y and Y_h as NaN (the reference's np.clip keeps it)."""
    hidden, size = 4, 3
    w = (RNG.standard_normal((1, 4 * hidden, size)) * 0.5).astype(np.float32)
    r = (RNG.standard_normal((1, 4 * hidden, hidden)) * 0.5).astype(np.float32)
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y", "yh"], hidden_size=hidden, clip=1.5)
    model = graph_model([node], [("x", (3, 1, size))], ["y", "yh"], OPSET, {"w": w, "r": r})
    x = RNG.uniform(-1.0, 1.0, (3, 1, size)).astype(np.float32)
    x[1, 0, 2] = np.nan  # step 1: its gates, then every later state
    got = build_and_load(model, str(tmp_path)).run({"x": x})
    assert not np.isnan(got["y"][0]).any()
    assert np.isnan(got["y"][1:]).all() and np.isnan(got["yh"]).all()
