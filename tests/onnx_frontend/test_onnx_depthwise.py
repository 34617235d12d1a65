"""Generated depthwise convolutions (groups = C = OC, conv_kernels.depthwise2d: a zero-padded copy of each plane,
fixed taps) against onnxruntime: stride larger than the kernel, dilation, asymmetric pads wider than the kernel,
a 1x1 image, batch 2, with and without bias, the fused activations; a plane too large for the padded copy takes
another kernel."""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Dict, List, Optional, Tuple

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model, max_rel_error, random_inputs, run_ort  # noqa: E402

from svod_min.onnx.geometry import ConvGeom  # noqa: E402
from svod_min.onnx.kernels import conv as conv_kernels  # noqa: E402

rng = np.random.default_rng(5)

#: (input shape, kernel (kh, kw), attributes)
CASES = [
    ((1, 8, 28, 28), (3, 3), {"pads": [1, 1, 1, 1]}),
    ((2, 5, 9, 11), (3, 3), {"pads": [1, 1, 1, 1], "strides": [2, 2]}),
    ((1, 4, 10, 10), (2, 2), {"strides": [3, 3]}),  # stride > kernel
    ((1, 3, 9, 9), (3, 3), {"pads": [2, 2, 2, 2], "dilations": [2, 2]}),
    ((1, 3, 6, 7), (3, 2), {"pads": [4, 0, 1, 3]}),  # asymmetric pads, wider than the kernel
    ((1, 6, 1, 1), (3, 3), {"pads": [1, 1, 1, 1]}),  # 1x1 image
    ((1, 4, 12, 13), (5, 5), {"pads": [2, 2, 2, 2], "strides": [1, 2]}),
]


def _model(
    shape: Tuple[int, ...], k: Tuple[int, int], attrs: Dict[str, Any], bias: bool = True, act: Optional[str] = None
) -> Any:
    c = shape[1]
    consts = {"w": rng.standard_normal((c, 1) + k).astype(np.float32)}
    inputs = ["x", "w"]
    if bias:
        consts["b"] = rng.standard_normal(c).astype(np.float32)
        inputs.append("b")
    nodes = [helper.make_node("Conv", inputs, ["c" if act else "y"], group=c, kernel_shape=list(k), **attrs)]
    if act == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.1))
    elif act:
        nodes.append(helper.make_node(act, ["c"], ["y"]))
    return graph_model(nodes, [("x", shape)], ["y"], 13, consts)


def _check(model: Any, tmp_path: Any) -> List[str]:
    """Compare with onnxruntime; the names of the bundle's kernels."""
    feeds = random_inputs(model)
    got = build_and_load(model, str(tmp_path))(**feeds)["y"]
    want = run_ort(model, feeds)[0]
    assert got.shape == want.shape and max_rel_error(got, want) < 1e-4
    with zipfile.ZipFile(os.path.join(str(tmp_path), "m.svod")) as zf:
        return list(json.loads(zf.read("plan.json"))["kernels"])


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_depthwise_matches_onnxruntime(case: Tuple[Any, ...], tmp_path: Any) -> None:
    assert [k.startswith("svod_onnx_dwconv_") for k in _check(_model(*case), tmp_path)] == [True]


@pytest.mark.parametrize("act", [None, "Relu", "LeakyRelu", "Sigmoid"])
def test_depthwise_activations_and_no_bias(act: Optional[str], tmp_path: Any) -> None:
    _check(_model((1, 6, 9, 9), (3, 3), {"pads": [1, 1, 1, 1]}, bias=act is None, act=act), tmp_path)


def test_plane_size_picks_the_kernel() -> None:
    def geom(h: int) -> "ConvGeom":
        return ConvGeom(1, 2, h, h, 2, h, h, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2)

    assert conv_kernels.depthwise_padded_plane(geom(127)) == 129 * 129 > conv_kernels.DEPTHWISE_PAD_MAX
    assert conv_kernels.depthwise_padded_plane(geom(126)) == 128 * 128 <= conv_kernels.DEPTHWISE_PAD_MAX


def test_large_plane_takes_another_kernel(tmp_path: Any) -> None:
    kernels = _check(_model((1, 2, 130, 130), (3, 3), {"pads": [1, 1, 1, 1]}), tmp_path)
    assert kernels and not any(k.startswith("svod_onnx_dwconv_") for k in kernels)
