"""Col2Im and DeformConv against onnxruntime on seeded random data. Each model holds several cases, so one build
compiles them all."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _compare(tmp_path, nodes, inputs, outputs, consts, opset, seed=0, rtol=1e-5, atol=1e-5):
    model = typed_model(nodes, inputs, outputs, opset, consts)
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s, _ in inputs}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for o, w in zip(outputs, want):
        assert got[o].shape == w.shape, (o, got[o].shape, w.shape)
        np.testing.assert_allclose(got[o], w, rtol=rtol, atol=atol, err_msg=o)


#: (image_shape, block_shape, attributes): 1-D, overlapping 2-D blocks with strides, pads and dilations, 3-D.
COL2IM_CASES = [
    ([9], [3], {"strides": [2], "pads": [1, 2]}),
    ([6, 7], [3, 2], {}),
    ([7, 8], [3, 3], {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2]}),
    ([4, 5, 3], [2, 3, 2], {"strides": [1, 2, 1], "pads": [0, 1, 1, 1, 0, 0]}),
]


def _positions(image, block, attrs):
    rank = len(image)
    strides, pads = attrs.get("strides", [1] * rank), attrs.get("pads", [0] * 2 * rank)
    dil = attrs.get("dilations", [1] * rank)
    return int(
        np.prod(
            [(image[d] + pads[d] + pads[rank + d] - dil[d] * (block[d] - 1) - 1) // strides[d] + 1 for d in range(rank)]
        )
    )


def test_col2im_overlapping_blocks_any_rank(tmp_path):
    nodes, inputs, outputs, consts = [], [], [], {}
    for i, (image, block, attrs) in enumerate(COL2IM_CASES):
        channels = 2
        shape = [2, channels * int(np.prod(block)), _positions(image, block, attrs)]
        inputs.append(("x%d" % i, shape, F))
        consts["image%d" % i] = np.array(image, np.int64)
        consts["block%d" % i] = np.array(block, np.int64)
        nodes.append(helper.make_node("Col2Im", ["x%d" % i, "image%d" % i, "block%d" % i], ["y%d" % i], **attrs))
        outputs.append("y%d" % i)
    _compare(tmp_path, nodes, inputs, outputs, consts, 18)


def test_col2im_refuses_columns_that_do_not_fit_the_blocks(tmp_path):
    # 5 columns cannot be the 4 positions of 2x2 blocks over a 3x3 image; onnx's shape inference does not check it
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"])
    consts = {"image": np.array([3, 3], np.int64), "block": np.array([2, 2], np.int64)}
    model = typed_model([node], [("x", [1, 4, 5], F)], ["y"], 18, consts)
    with pytest.raises(UnsupportedModelError, match="does not hold blocks"):
        build_and_load(model, str(tmp_path))


def test_deform_conv_groups_offset_groups_mask_bias(tmp_path):
    # x (2, 4, 6, 7), weights (6, 2, 3, 2) in 2 groups; offsets of up to a few pixels, so taps land between pixels,
    # in the padding and beyond the input (zeros), and on whole pixels when 0
    nodes = [
        helper.make_node(
            "DeformConv", ["x", "w", "off", "b", "mask"], ["full"], group=2, offset_group=2, strides=[2, 1],
            pads=[1, 0, 1, 1], dilations=[1, 2],
        ),
        helper.make_node("DeformConv", ["x1", "w1", "off1"], ["plain"], kernel_shape=[2, 2]),
    ]  # fmt: skip
    inputs = [
        ("x", [2, 4, 6, 7], F), ("w", [6, 2, 3, 2], F), ("off", [2, 2 * 6 * 2, 3, 6], F), ("b", [6], F),
        ("mask", [2, 2 * 6, 3, 6], F), ("x1", [1, 1, 3, 3], F), ("w1", [1, 1, 2, 2], F), ("off1", [1, 8, 2, 2], F),
    ]  # fmt: skip
    model = typed_model(nodes, inputs, ["full", "plain"], 22, {})
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s, _ in inputs}
    feeds["off"] *= 2.5
    feeds["off1"][0, :4] = 0.0  # the first two taps at whole pixels
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for o, w in zip(["full", "plain"], want):
        assert got[o].shape == w.shape, (o, got[o].shape, w.shape)
        np.testing.assert_allclose(got[o], w, rtol=1e-4, atol=1e-5, err_msg=o)
