"""Constant folding evaluates each node at the model's own opset: opset 9's Unsqueeze (axes an attribute) on a
constant folds, so Inception-v2's and DenseNet's per-channel Mul/Add after a Conv (scales Unsqueezed to (C, 1, 1))
fold into the convolution's weights and bias, and the Relu into its epilogue."""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model, max_rel_error, random_inputs, run_ort  # noqa: E402

from svod_min.onnx.frontend.parse import fold_constants  # noqa: E402

rng = np.random.default_rng(3)


def _conv_scale_shift_relu(opset: int) -> Any:
    consts = {
        "w": rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3,
        "s": rng.uniform(0.5, 1.5, 6).astype(np.float32),
        "t": rng.uniform(-0.1, 0.1, 6).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Unsqueeze", ["s"], ["s3"], axes=[1, 2]),
        helper.make_node("Mul", ["c", "s3"], ["m"]),
        helper.make_node("Unsqueeze", ["t"], ["t3"], axes=[1, 2]),
        helper.make_node("Add", ["m", "t3"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    return graph_model(nodes, [("x", (1, 3, 8, 9))], ["y"], opset, consts)


def test_opset9_unsqueeze_of_a_constant_folds() -> None:
    model = fold_constants(_conv_scale_shift_relu(9), 9)
    assert [n.op_type for n in model.graph.node] == ["Conv", "Mul", "Add", "Relu"]
    folded = {t.name: list(t.dims) for t in model.graph.initializer}
    assert folded["s3"] == [6, 1, 1] and folded["t3"] == [6, 1, 1]


def test_conv_scale_shift_relu_is_one_conv(tmp_path: Any) -> None:
    model = _conv_scale_shift_relu(9)
    feeds = random_inputs(model)
    m = build_and_load(model, str(tmp_path))
    assert max_rel_error(m.run(feeds)["y"], run_ort(model, feeds)[0]) < 1e-4
    with zipfile.ZipFile(os.path.join(str(tmp_path), "m.svod")) as zf:
        doc = json.loads(zf.read("plan.json"))
    kernels = [doc["kernels"][op["kernel"]] for op in doc["ops"] if "kernel" in op]
    assert [(k.get("library"), k.get("params", {}).get("act")) for k in kernels] == [("conv2d_gemm", "relu")]
