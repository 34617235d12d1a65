"""BatchNormalization where the statistics are not folded: mean and var fed at run time (with a fused Relu), and
training_mode=1 (the batch's own statistics, the running mean and variance as outputs; constant statistics too, which
must not fold), against onnxruntime. One model holds the cases, so one build compiles them all."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402

F = TensorProto.FLOAT


def _stats(prefix, channels):
    return [(prefix + k, (channels,), F) for k in ("s", "b", "m", "v")]


def test_batchnorm_runtime_statistics_and_training_mode(tmp_path):
    nodes = [
        # inference, statistics fed at run time, a Relu the passes fuse into the kernel
        helper.make_node("BatchNormalization", ["x", "as", "ab", "am", "av"], ["n"], epsilon=1e-3),
        helper.make_node("Relu", ["n"], ["infer"]),
        # training: y, running mean and var; the batch (3) and spatial axes (2 x 5) reduced per channel
        helper.make_node(
            "BatchNormalization", ["x", "as", "ab", "am", "av"], ["train", "rmean", "rvar"], training_mode=1,
            momentum=0.8, epsilon=1e-2,
        ),
        # training with constant statistics (they must not fold), only y read (onnxruntime crashes on omitted
        # running outputs), on a rank-3 input
        helper.make_node(
            "BatchNormalization", ["x3", "cs", "cb", "cm", "cv"], ["train3", "rm3", "rv3"], training_mode=1
        ),
    ]  # fmt: skip
    inputs = [("x", (3, 4, 2, 5), F)] + _stats("a", 4) + [("x3", (2, 3, 7), F)]
    rng = np.random.default_rng(0)
    consts = {
        "cs": rng.uniform(0.5, 2, 3).astype(np.float32),
        "cb": rng.standard_normal(3).astype(np.float32),
        "cm": rng.standard_normal(3).astype(np.float32),
        "cv": rng.uniform(0.5, 2, 3).astype(np.float32),
    }
    outputs = ["infer", "train", "rmean", "rvar", "train3"]
    model = typed_model(nodes, inputs, outputs, 15, consts)
    feeds = {n: rng.standard_normal(s).astype(np.float32) * 2 + 1 for n, s, _ in inputs}
    feeds["av"] = rng.uniform(0.2, 3, 4).astype(np.float32)
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for o, w in zip(outputs, want):
        assert got[o].shape == w.shape, (o, got[o].shape, w.shape)
        np.testing.assert_allclose(got[o], w, rtol=1e-5, atol=1e-5, err_msg=o)


def test_batchnorm_opset9_training_outputs_mean_training_and_saved_ones_are_refused(tmp_path):
    # before opset 14 the five outputs make the node a training one, whether or not they are read
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean", "var", "sm", "sv"])
    inputs = [("x", (2, 3, 4), F)] + [(k, (3,), F) for k in "sbmv"]
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s, _ in inputs}
    feeds["v"] = np.abs(feeds["v"]) + 0.5
    model = typed_model([node], inputs, ["y"], 9, {})
    want = run_ort(model, feeds)[0]
    np.testing.assert_allclose(build_and_load(model, str(tmp_path)).run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    model = typed_model([node], inputs, ["y", "sm"], 9, {})
    model.graph.output[1].CopyFrom(helper.make_tensor_value_info("sm", F, [3]))  # shape inference leaves it untyped
    with pytest.raises(UnsupportedModelError, match="'sm'"):  # refused by name, never computed as inference
        build_and_load(model, str(tmp_path), "saved")
