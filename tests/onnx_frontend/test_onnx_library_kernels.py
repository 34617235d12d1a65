"""Convolutions and pools lower to the library's prebuilt conv2d_gemm / depthwise_conv2d / pool kernels with the
bias, activation and residual Add in the epilogue: the built bundle's plan document names them, and its results
match onnxruntime."""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Dict, List

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model, max_rel_error, random_inputs, run_ort  # noqa: E402

rng = np.random.default_rng(11)


@pytest.fixture
def every_library_kernel(monkeypatch: Any) -> None:
    """Lower onto every library kernel, including those the default set leaves to generated C."""
    from svod_min.onnx.ops import lowering

    kinds = {"conv2d_gemm", "depthwise_conv2d", "maxpool2d", "avgpool2d", "global_avgpool"}
    monkeypatch.setattr(lowering, "LIBRARY_KERNELS", frozenset(kinds))


def _w(*shape: int) -> Any:
    return rng.standard_normal(shape).astype(np.float32) * 0.3


def _build(model: Any, tmp_path: Any, tol: float = 1e-4) -> Dict[str, Any]:
    """Build the bundle, check every output against onnxruntime, return the bundle's plan document."""
    feeds = random_inputs(model)
    want = run_ort(model, feeds)
    m = build_and_load(model, str(tmp_path))
    got = m.run(feeds)
    for value, name in zip(want, m.output_names):
        assert got[name].shape == value.shape
        assert max_rel_error(got[name], value) < tol, name
    with zipfile.ZipFile(os.path.join(str(tmp_path), "m.svod")) as zf:
        return json.loads(zf.read("plan.json"))


def _library_ops(doc: Dict[str, Any]) -> List[Dict[str, Any]]:
    """(library name, params) of each op, in order; generated kernels as ("source", {})."""
    out = []
    for op in doc["ops"]:
        if "kernel" not in op:
            continue
        k = doc["kernels"][op["kernel"]]
        out.append({"library": k.get("library", "source"), "params": k.get("params", {})})
    return out


def test_conv_relu_is_one_library_conv(tmp_path):
    consts = {"w": _w(8, 3, 3, 3), "b": _w(8)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    ops = _library_ops(_build(graph_model(nodes, [("x", (2, 3, 11, 9))], ["y"], 13, consts), tmp_path))
    assert ops == [
        {
            "library": "conv2d_gemm",
            "params": {"dtype": "float32", "act": "relu", "bias": True, "residual": False, "packed": True},
        }
    ]


@pytest.mark.parametrize("add", ["Add", "Sum"])
def test_resnet_block_fuses_residual_and_relu(add, tmp_path):
    """conv-BN-relu, conv-BN, Add(shortcut), Relu; the shortcut a strided 1x1 conv-BN as in ResNet's first blocks."""

    def bn(name: str, c: int) -> Dict[str, Any]:
        return {name + "s": _w(c) + 1, name + "b": _w(c), name + "m": _w(c), name + "v": np.abs(_w(c)) + 0.5}

    consts = dict(w1=_w(8, 4, 3, 3), w2=_w(8, 8, 3, 3), w3=_w(8, 4, 1, 1), **bn("n1", 8), **bn("n2", 8), **bn("n3", 8))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c1", "n1s", "n1b", "n1m", "n1v"], ["b1"]),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c2", "n2s", "n2b", "n2m", "n2v"], ["b2"]),
        helper.make_node("Conv", ["x", "w3"], ["c3"], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c3", "n3s", "n3b", "n3m", "n3v"], ["b3"]),
        helper.make_node(add, ["b2", "b3"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    ops = _library_ops(_build(graph_model(nodes, [("x", (1, 4, 10, 10))], ["y"], 13, consts), tmp_path))
    assert [o["library"] for o in ops] == ["conv2d_gemm"] * 3
    assert ops[-1]["params"] == {"dtype": "float32", "act": "relu", "bias": True, "residual": True, "packed": True}


def test_identity_shortcut_without_bias_gets_a_zero_bias(tmp_path):
    """Add(conv(x), x) then Relu: the prebuilt residual instance takes a bias, so a zero one is supplied."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["x", "c"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    ops = _library_ops(_build(graph_model(nodes, [("x", (1, 6, 7, 7))], ["y"], 13, {"w": _w(6, 6, 3, 3)}), tmp_path))
    assert ops == [
        {
            "library": "conv2d_gemm",
            "params": {"dtype": "float32", "act": "relu", "bias": True, "residual": True, "packed": True},
        }
    ]


@pytest.mark.parametrize("group, oc", [(6, 6), (6, 12), (3, 6), (2, 4)])
def test_grouped_and_depthwise_conv_with_relu6(group, oc, tmp_path, every_library_kernel):
    consts = {"w": _w(oc, 6 // group, 3, 3), "b": _w(oc), "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 0, 2, 1], group=group),
        helper.make_node("Clip", ["c", "lo", "hi"], ["y"]),
    ]
    ops = _library_ops(_build(graph_model(nodes, [("x", (2, 6, 9, 8))], ["y"], 13, consts), tmp_path))
    kernel = "depthwise_conv2d" if group == 6 == oc else "conv2d_gemm"
    packed = {"packed": True} if kernel == "conv2d_gemm" else {}
    assert ops == [
        {
            "library": kernel,
            "params": dict({"dtype": "float32", "act": "clip", "bias": True, "residual": False}, **packed),
        }
    ]


@pytest.mark.parametrize(
    "op, attrs, act, residual",
    [
        ("Sigmoid", {}, "sigmoid", False),
        ("Tanh", {}, "tanh", True),
        ("HardSwish", {}, "hardswish", False),
        ("LeakyRelu", {"alpha": 0.07}, "leaky_relu", True),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "hardsigmoid", False),
    ],
)
def test_every_activation_is_fused_into_the_conv(op, attrs, act, residual, tmp_path):
    """One library conv with the activation in its epilogue (after the residual Add), run from the object the
    bundle carries for it (the prebuilt objects hold none, relu and clip only)."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    if residual:
        nodes.append(helper.make_node("Add", ["c", "x"], ["s"]))
    nodes.append(helper.make_node(op, ["s" if residual else "c"], ["y"], **attrs))
    # tanh keeps outputs near 0 as small as the sums they come from, so they carry the convolution's absolute
    # rounding (a few 1e-7 here, onnxruntime's order of summation not ours): relative to 1e-3 of the largest
    doc = _build(graph_model(nodes, [("x", (1, 5, 6, 7))], ["y"], 14, {"w": _w(5, 5, 3, 3)}), tmp_path, tol=2e-3)
    ops = _library_ops(doc)
    assert ops == [
        {
            "library": "conv2d_gemm",
            "params": {"dtype": "float32", "act": act, "bias": True, "residual": residual, "packed": True},
        }
    ]
    kernel = doc["kernels"][doc["ops"][-1]["kernel"]]
    assert {o["variant"] for o in kernel["library_objects"]} >= {"x86_64-v4", "x86_64-avx2", "x86_64-baseline"}
    assert {k: v for k, v in doc["ops"][-1]["vars"].items() if k in ("alpha", "beta")} == pytest.approx(attrs)


def test_a_clip_with_one_open_bound_runs_after_the_conv(tmp_path):
    consts = {"w": _w(4, 3, 3, 3), "lo": np.array(-0.25, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Clip", ["c", "lo"], ["y"])]
    ops = _library_ops(_build(graph_model(nodes, [("x", (1, 3, 6, 6))], ["y"], 13, consts), tmp_path))
    assert ops[0] == {
        "library": "conv2d_gemm",
        "params": {"dtype": "float32", "act": "none", "bias": True, "residual": False, "packed": True},
    }  # a zero bias: the packed instances take one
    assert ops[1]["library"] == "source"


def _stored_consts(doc, tmp_path):
    """Each constant the bundle stores (not an input): name -> its array."""
    consts = [n for n, b in doc["buffers"].items() if "init" in b and not b.get("input")]
    with zipfile.ZipFile(os.path.join(str(tmp_path), "m.svod")) as zf:
        return {n: np.load(zf.open(doc["buffers"][n]["init"]["npy"])) for n in consts}


def test_conv_weights_are_stored_packed_only(tmp_path):
    """The bundle holds the packed weights (OC 12 padded to a strip of 24 rows), not the (OC, C, KH, KW) tensor
    too; fewer than 16 output channels keep the convolution on conv2d_gemm."""
    from svod_min.kernels.conv_pack import PACK_ROWS, pack_conv_weights

    w = _w(12, 2, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    stored = _stored_consts(_build(graph_model(nodes, [("x", (1, 2, 6, 7))], ["y"], 13, {"w": w}), tmp_path), tmp_path)
    assert sorted(list(a.shape) for a in stored.values()) == [
        [12],
        [PACK_ROWS * 2 * 9],
    ]  # the zero bias, the packed weights
    packed = [a for a in stored.values() if a.shape != (12,)][0]
    assert np.array_equal(packed, pack_conv_weights(w))


def test_blocked_conv_weights_are_stored_packed_only(tmp_path):
    """A convolution in the blocked layout stores its weights once, packed in 16x16 channel blocks (OC 30 padded
    to 32, C 2 to 16), and its bias padded to 32."""
    from svod_min.onnx.geometry import pad_channels
    from svod_min.onnx.kernels.blocked_conv import pack_weights

    w, b = _w(30, 2, 3, 3), np.arange(30, dtype=np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    doc = _build(graph_model(nodes, [("x", (1, 2, 6, 7))], ["y"], 13, {"w": w, "b": b}), tmp_path)
    stored = _stored_consts(doc, tmp_path)
    assert sorted(list(a.shape) for a in stored.values()) == [[2, 1, 3, 3, 16, 16], [32]]
    for array in stored.values():
        assert np.array_equal(array, pack_weights(w) if array.ndim == 6 else pad_channels(b, 30))


def test_conv_with_weights_from_an_input_takes_the_unpacked_kernel(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])]
    model = graph_model(nodes, [("x", (1, 3, 6, 6)), ("w", (4, 3, 3, 3))], ["y"], 13, {})
    ops = _library_ops(_build(model, tmp_path))
    assert ops == [
        {"library": "conv2d_gemm", "params": {"dtype": "float32", "act": "none", "bias": False, "residual": False}}
    ]


@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 3], "strides": [2, 2]},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [2, 3], "pads": [1, 1, 0, 1], "dilations": [2, 1]},
    ],
)
def test_maxpool_is_library(attrs, tmp_path, every_library_kernel):
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], **attrs)]
    ops = _library_ops(_build(graph_model(nodes, [("x", (2, 3, 10, 9))], ["y"], 13, {}), tmp_path))
    assert ops == [{"library": "maxpool2d", "params": {"dtype": "float32"}}]


@pytest.mark.parametrize("include", [0, 1])
def test_avgpool_and_global_avgpool_are_library(include, tmp_path, every_library_kernel):
    nodes = [
        helper.make_node(
            "AveragePool",
            ["x"],
            ["p"],
            kernel_shape=[3, 3],
            strides=[2, 2],
            pads=[1, 1, 1, 1],
            ceil_mode=1,
            count_include_pad=include,
        ),
        helper.make_node("GlobalAveragePool", ["p"], ["y"]),
    ]
    ops = _library_ops(_build(graph_model(nodes, [("x", (2, 3, 10, 9))], ["y", "p"], 13, {}), tmp_path))
    assert [o["library"] for o in ops] == ["avgpool2d", "global_avgpool"]


def test_1d_conv_and_pool_keep_the_generated_paths(tmp_path):
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1]),
        helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[2], strides=[2]),
    ]
    ops = _library_ops(_build(graph_model(nodes, [("x", (1, 3, 12))], ["y"], 13, {"w": _w(4, 3, 3)}), tmp_path))
    assert not any(o["library"] in ("conv2d_gemm", "maxpool2d") for o in ops)


def test_by_default_depthwise_and_windowed_pools_are_generated(tmp_path):
    consts = {"w": _w(6, 1, 3, 3), "b": _w(6)}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], group=6),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("AveragePool", ["p"], ["q"], kernel_shape=[2, 2]),
        helper.make_node("GlobalAveragePool", ["q"], ["y"]),
    ]
    ops = _library_ops(_build(graph_model(nodes, [("x", (1, 6, 11, 11))], ["y"], 13, consts), tmp_path))
    names = [o["library"] for o in ops]
    assert not {"depthwise_conv2d", "maxpool2d", "avgpool2d"} & set(names), names
    assert names[-1] == "global_avgpool"
