"""ConvTranspose on the GEMM path (library matmul + generated col2im) for constant weights, the gather path
for weights computed at run time: both against onnxruntime, and which path a model takes."""

from __future__ import annotations

import os

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import max_rel_error, run_both, single_node, typed_model  # noqa: E402

from svod_min.onnx.build import lower_model  # noqa: E402
from svod_min.onnx.ops import conv_transpose  # noqa: E402

rng = np.random.default_rng(23)


def _w(*shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.5


def _kernels(model, tmp_path):
    path = os.path.join(str(tmp_path), "k.onnx")
    onnx.save(model, path)
    return lower_model(path).doc["kernels"]


def _compare(model, feeds, tmp_path):
    (want,), got = run_both(model, str(tmp_path), feeds)
    (out,) = got.values()
    assert out.shape == want.shape
    assert max_rel_error(out, want) < 1e-4


# batch 2, groups, bias, strides with pads and output_padding, dilation, a 1x1 window, a 1x1 image
GEMM_CASES = [
    ("batch_groups_bias", (2, 4, 5, 3), (4, 3, 3, 3), {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 1]}),
    (
        "out_padding_dilation",
        (1, 3, 4, 4),
        (3, 2, 3, 2),
        {"strides": [3, 2], "output_padding": [2, 1], "dilations": [1, 2]},
    ),
    ("pointwise", (1, 8, 6, 7), (8, 5, 1, 1), {}),
    ("one_pixel_image", (1, 6, 1, 1), (6, 4, 4, 4), {"strides": [2, 2]}),
    ("depthwise_like", (1, 6, 5, 5), (6, 1, 2, 2), {"group": 6, "strides": [2, 2]}),
]


@pytest.mark.parametrize("case", GEMM_CASES, ids=[c[0] for c in GEMM_CASES])
def test_constant_weights_take_the_gemm_path_and_match(case, tmp_path):
    _, xs, ws, attrs = case
    consts = {"w": _w(*ws), "b": _w(ws[1] * attrs.get("group", 1))}
    model = single_node("ConvTranspose", [("x", xs)], consts=consts, **attrs)
    kernels = _kernels(model, tmp_path)
    assert any(k.get("library") == "matmul" for k in kernels.values())
    assert any(name.startswith("svod_onnx_col2im_") for name in kernels)
    _compare(model, {"x": _w(*xs)}, tmp_path)


def test_weights_computed_at_run_time_take_the_gather_path(tmp_path):
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], pads=[1, 1, 0, 0])]
    model = typed_model(
        nodes, [("x", (2, 3, 4, 4), TensorProto.FLOAT), ("w", (3, 2, 3, 3), TensorProto.FLOAT)], ["y"], 17, {}
    )
    kernels = _kernels(model, tmp_path)
    assert not any(k.get("library") == "matmul" for k in kernels.values())
    assert any(name.startswith("svod_onnx_convt_") for name in kernels)
    _compare(model, {"x": _w(2, 3, 4, 4), "w": _w(3, 2, 3, 3)}, tmp_path)


def test_a_col_buffer_over_the_limit_takes_the_gather_path(tmp_path, monkeypatch):
    monkeypatch.setattr(conv_transpose, "COL_BYTES_MAX", 1024)
    model = single_node("ConvTranspose", [("x", (1, 4, 6, 6))], consts={"w": _w(4, 3, 3, 3)}, strides=[2, 2])
    kernels = _kernels(model, tmp_path)
    assert not any(k.get("library") == "matmul" for k in kernels.values())
    _compare(model, {"x": _w(1, 4, 6, 6)}, tmp_path)
