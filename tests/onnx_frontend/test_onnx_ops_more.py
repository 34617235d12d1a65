"""Gather, comparisons into Where, ArgMax/ArgMin, InstanceNormalization, Pad modes, Resize/Upsample and
ConvTranspose against onnxruntime on single-node models: attributes, shapes and refusals."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, max_rel_error, random_inputs, run_ort, single_node, typed_model  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402

rng = np.random.default_rng(11)


def _w(*shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.5


def _compare(model, tmp_path, feeds=None, tol=1e-4):
    feeds = feeds if feeds is not None else random_inputs(model)
    want = run_ort(model, feeds)
    m = build_and_load(model, str(tmp_path))
    got = m.run(feeds)
    for value, name in zip(want, m.output_names):
        assert got[name].shape == value.shape, name
        assert got[name].dtype == value.dtype, name
        if value.dtype.kind == "f":
            assert max_rel_error(got[name], value) < tol, name
        else:
            np.testing.assert_array_equal(got[name], value)


CASES = [
    ("gather_axis0", "Gather", [("x", (5, 3))], {"i": np.array([4, -1, 0, 2], np.int64)}, {}),
    ("gather_axis1_2d_idx", "Gather", [("x", (2, 6, 3))], {"i": np.array([[0, -2], [5, 1]], np.int64)}, {"axis": 1}),
    ("gather_neg_axis_int32", "Gather", [("x", (2, 3, 4))], {"i": np.array([3, -4, 1], np.int32)}, {"axis": -1}),
    ("gather_scalar_idx", "Gather", [("x", (4, 5))], {"i": np.array(-2, np.int64)}, {"axis": 0}),
    ("argmax", "ArgMax", [("x", (3, 4, 5))], {}, {"axis": 1}),
    ("argmax_nokeep_neg", "ArgMax", [("x", (3, 4, 5))], {}, {"axis": -1, "keepdims": 0}),
    ("argmin", "ArgMin", [("x", (3, 4, 5))], {}, {"axis": 0}),
    ("instnorm", "InstanceNormalization", [("x", (2, 3, 4, 5))], {"s": _w(3) + 1, "b": _w(3)}, {"epsilon": 1e-3}),
    ("instnorm_1d", "InstanceNormalization", [("x", (2, 4, 7))], {"s": _w(4) + 1, "b": _w(4)}, {}),
    ("pad_reflect", "Pad", [("x", (2, 3, 4))], {"p": np.array([0, 2, 1, 0, 1, 3], np.int64)}, {"mode": "reflect"}),
    ("pad_edge", "Pad", [("x", (2, 3, 4))], {"p": np.array([1, 2, 0, 0, 3, 2], np.int64)}, {"mode": "edge"}),
    ("pad_edge_crop", "Pad", [("x", (3, 5))], {"p": np.array([0, -1, 2, 1], np.int64)}, {"mode": "edge"}),
    ("pad_wrap", "Pad", [("x", (3, 4))], {"p": np.array([1, 2, 2, 1], np.int64)}, {"mode": "wrap", "_opset": 19}),
    (
        "pad_reflect_axes",
        "Pad",
        [("x", (2, 3, 4))],
        {"p": np.array([2, 1], np.int64), "v": np.array(0, np.float32), "a": np.array([-1], np.int64)},
        {"mode": "reflect", "_opset": 18},
    ),
    ("pad_reflect_opset2", "Pad", [("x", (3, 4))], {}, {"mode": "reflect", "pads": [1, 2, 1, 2], "_opset": 2}),
    ("convt", "ConvTranspose", [("x", (1, 3, 4, 5))], {"w": _w(3, 2, 3, 3), "b": _w(2)}, {}),
    (
        "convt_stride_pads",
        "ConvTranspose",
        [("x", (2, 3, 4, 4))],
        {"w": _w(3, 4, 3, 3)},
        {"strides": [2, 2], "pads": [1, 0, 1, 1]},
    ),
    (
        "convt_out_padding",
        "ConvTranspose",
        [("x", (1, 2, 3, 4))],
        {"w": _w(2, 3, 3, 2)},
        {"strides": [2, 3], "output_padding": [1, 2]},
    ),
    (
        "convt_dilation",
        "ConvTranspose",
        [("x", (1, 2, 5, 5))],
        {"w": _w(2, 2, 3, 3)},
        {"dilations": [2, 1], "strides": [1, 2]},
    ),
    (
        "convt_groups",
        "ConvTranspose",
        [("x", (1, 4, 3, 3))],
        {"w": _w(4, 3, 2, 2), "b": _w(6)},
        {"group": 2, "strides": [2, 2]},
    ),
    (
        "convt_output_shape",
        "ConvTranspose",
        [("x", (1, 2, 3, 3))],
        {"w": _w(2, 2, 3, 3)},
        {"strides": [2, 2], "output_shape": [6, 7]},
    ),
    (
        "convt_same_upper",
        "ConvTranspose",
        [("x", (1, 2, 3, 4))],
        {"w": _w(2, 2, 4, 3)},
        {"strides": [2, 2], "auto_pad": "SAME_UPPER"},
    ),
    (
        "convt_same_lower",
        "ConvTranspose",
        [("x", (1, 2, 3, 4))],
        {"w": _w(2, 2, 4, 3)},
        {"strides": [2, 2], "auto_pad": "SAME_LOWER"},
    ),
    (
        "convt_valid",
        "ConvTranspose",
        [("x", (1, 2, 3, 4))],
        {"w": _w(2, 2, 3, 3)},
        {"strides": [2, 1], "auto_pad": "VALID"},
    ),
    (
        "convt1d",
        "ConvTranspose",
        [("x", (2, 3, 6))],
        {"w": _w(3, 2, 4), "b": _w(2)},
        {"strides": [3], "pads": [1, 2], "group": 1},
    ),
    ("convt1d_groups", "ConvTranspose", [("x", (1, 4, 5))], {"w": _w(4, 1, 3)}, {"group": 2, "dilations": [2]}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnxruntime(case, tmp_path):
    _, op, inputs, consts, attrs = case
    attrs = dict(attrs)
    opset = attrs.pop("_opset", 17)
    _compare(single_node(op, inputs, opset=opset, consts=consts, **attrs), tmp_path)


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_select_last_index_with_ties(op, last, tmp_path):
    model = single_node(op, [("x", (4, 6))], axis=1, select_last_index=last)
    x = np.array([[1, 3, 3, 0, 3, 2], [0, 0, 0, 0, 0, 0], [5, -1, 5, -1, 2, 2], [1, 2, 3, 4, 5, 6]], np.float32)
    _compare(model, tmp_path, {"x": x})


@pytest.mark.parametrize("dtype", [TensorProto.INT64, TensorProto.INT32])
def test_gather_runtime_indices(dtype, tmp_path):
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)]
    model = typed_model(nodes, [("x", (2, 5, 3), TensorProto.FLOAT), ("i", (2, 2), dtype)], ["y"], 13, {})
    idx = np.array([[4, -5], [0, -1]], np.int64 if dtype == TensorProto.INT64 else np.int32)
    _compare(model, tmp_path, {"x": _w(2, 5, 3), "i": idx})


def test_gather_from_constant_embedding(tmp_path):
    nodes = [helper.make_node("Gather", ["e", "i"], ["y"])]
    model = typed_model(nodes, [("i", (3, 2), TensorProto.INT64)], ["y"], 13, {"e": _w(10, 4)})
    _compare(model, tmp_path, {"i": np.array([[9, 0], [-1, 3], [2, 2]], np.int64)})


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
def test_comparison_feeds_where(op, tmp_path):
    nodes = [helper.make_node(op, ["a", "b"], ["c"]), helper.make_node("Where", ["c", "a", "b"], ["y"])]
    model = typed_model(
        nodes, [("a", (2, 3, 4), TensorProto.FLOAT), ("b", (3, 1), TensorProto.FLOAT)], ["y", "c"], 16, {}
    )
    a = np.round(_w(2, 3, 4) * 2)
    b = np.round(_w(3, 1) * 2)
    _compare(model, tmp_path, {"a": a, "b": b})


def test_not_and_or_xor_on_comparisons(tmp_path):
    nodes = [
        helper.make_node("Greater", ["a", "z"], ["p"]),
        helper.make_node("Less", ["b", "z"], ["q"]),
        helper.make_node("Not", ["p"], ["np"]),
        helper.make_node("And", ["np", "q"], ["r1"]),
        helper.make_node("Or", ["p", "q"], ["r2"]),
        helper.make_node("Xor", ["r1", "r2"], ["r3"]),
        helper.make_node("Where", ["r3", "a", "b"], ["y"]),
    ]
    model = typed_model(
        nodes,
        [("a", (3, 4), TensorProto.FLOAT), ("b", (3, 4), TensorProto.FLOAT)],
        ["y", "r1", "r2", "np"],
        13,
        {"z": np.array(0.0, np.float32)},
    )
    _compare(model, tmp_path)


def _resize(tmp_path, shape, attrs, scales=None, sizes=None, opset=19, axes=None):
    inputs = ["x", "", "scales" if scales is not None else "", "sizes" if sizes is not None else ""]
    consts = {}
    if scales is not None:
        consts["scales"] = np.array(scales, np.float32)
    if sizes is not None:
        consts["sizes"] = np.array(sizes, np.int64)
    while inputs[-1] == "":
        inputs.pop()
    if axes is not None:
        attrs = dict(attrs, axes=axes)
    nodes = [helper.make_node("Resize", inputs, ["y"], **attrs)]
    model = typed_model(nodes, [("x", shape, TensorProto.FLOAT)], ["y"], opset, consts)
    _compare(model, tmp_path)


TRANSFORMS = [
    "half_pixel",
    "asymmetric",
    "align_corners",
    "pytorch_half_pixel",
    "tf_half_pixel_for_nn",
    "half_pixel_symmetric",
]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("nearest", NEAREST)
def test_resize_nearest(transform, nearest, tmp_path):
    attrs = {"mode": "nearest", "coordinate_transformation_mode": transform, "nearest_mode": nearest}
    # half_pixel_symmetric at 0.6 puts a source coordinate on exactly 2.0, where onnxruntime's float rounding
    # differs from the spec's formula evaluated in float32: 0.7 keeps clear of such ties
    _resize(tmp_path, (1, 2, 3, 5), attrs, scales=[1, 1, 2.5, 0.7 if transform == "half_pixel_symmetric" else 0.6])


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_linear_2d_scales(transform, tmp_path):
    _resize(
        tmp_path,
        (2, 2, 4, 5),
        {"mode": "linear", "coordinate_transformation_mode": transform},
        scales=[1, 1, 1.75, 0.6],
    )


@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_linear_2d_sizes(transform, tmp_path):
    _resize(tmp_path, (1, 3, 4, 5), {"mode": "linear", "coordinate_transformation_mode": transform}, sizes=[1, 3, 7, 1])


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("exclude", [0, 1])
def test_resize_cubic(transform, exclude, tmp_path):
    attrs = {
        "mode": "cubic",
        "coordinate_transformation_mode": transform,
        "exclude_outside": exclude,
        "cubic_coeff_a": -0.5,
    }
    _resize(tmp_path, (1, 2, 5, 6), attrs, scales=[1, 1, 1.6, 0.5])


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_tf_crop_and_resize(mode, tmp_path):
    """roi crops (partly outside the input: those positions hold extrapolation_value), sizes or scales."""
    roi = np.array([0, 0, -0.2, 0.3, 1, 1, 0.8, 1.4], np.float32)
    attrs = {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.5}
    node = helper.make_node("Resize", ["x", "roi", "", "sizes"], ["y"], **attrs)
    consts = {"roi": roi, "sizes": np.array([1, 2, 6, 5], np.int64)}
    _compare(typed_model([node], [("x", (1, 2, 5, 6), TensorProto.FLOAT)], ["y"], 13, consts), tmp_path)
    node = helper.make_node("Resize", ["x", "roi", "scales"], ["y"], axes=[3], **attrs)
    consts = {"roi": np.array([0.25, 0.75], np.float32), "scales": np.array([1.5], np.float32)}
    _compare(typed_model([node], [("x", (1, 2, 5, 6), TensorProto.FLOAT)], ["y"], 18, consts), tmp_path)


def test_resize_nearest_sizes_axes_and_aspect_policy(tmp_path):
    _resize(tmp_path, (1, 2, 4, 6), {"mode": "nearest"}, sizes=[9, 8], axes=[2, 3])
    _resize(
        tmp_path, (1, 2, 4, 6), {"mode": "linear", "keep_aspect_ratio_policy": "not_larger"}, sizes=[9, 8], axes=[2, 3]
    )
    _resize(
        tmp_path,
        (1, 2, 4, 6),
        {"mode": "nearest", "keep_aspect_ratio_policy": "not_smaller"},
        sizes=[9, 8],
        axes=[2, 3],
    )


def test_resize_opset11_and_opset10(tmp_path):
    node11 = helper.make_node("Resize", ["x", "roi", "s"], ["y"], mode="linear")  # opset 11: roi is not optional
    consts = {"roi": np.zeros(0, np.float32), "s": np.array([1, 1, 2, 2], np.float32)}
    _compare(typed_model([node11], [("x", (1, 1, 3, 4), TensorProto.FLOAT)], ["y"], 11, consts), tmp_path)
    for mode in ("nearest", "linear"):
        nodes = [helper.make_node("Resize", ["x", "s"], ["y"], mode=mode)]
        model = typed_model(
            nodes, [("x", (1, 2, 3, 4), TensorProto.FLOAT)], ["y"], 10, {"s": np.array([1, 1, 2, 1.5], np.float32)}
        )
        _compare(model, tmp_path)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample_old_opsets(mode, tmp_path):
    nodes = [helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode)]
    model = typed_model(
        nodes, [("x", (1, 2, 3, 4), TensorProto.FLOAT)], ["y"], 9, {"s": np.array([1, 1, 2, 3], np.float32)}
    )
    _compare(model, tmp_path)
    node7 = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[1.0, 1.0, 2.0, 2.0])
    _compare(typed_model([node7], [("x", (1, 2, 3, 4), TensorProto.FLOAT)], ["y"], 7, {}), tmp_path)


def _refused(model, tmp_path, match):
    path = str(tmp_path / "r.onnx")
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError, match=match):
        lower_model(path)


def test_refusals(tmp_path):
    cubic = helper.make_node("Upsample", ["x", "s"], ["y"], mode="cubic")
    _refused(
        typed_model(
            [cubic], [("x", (1, 1, 2, 2), TensorProto.FLOAT)], ["y"], 9, {"s": np.array([1, 1, 2, 2], np.float32)}
        ),
        tmp_path,
        "attribute mode='cubic'",
    )
    crop = helper.make_node("Resize", ["x", "", "s"], ["y"], coordinate_transformation_mode="half_pixel_bogus")
    _refused(
        typed_model(
            [crop], [("x", (1, 1, 2, 2), TensorProto.FLOAT)], ["y"], 13, {"s": np.array([1, 1, 2, 2], np.float32)}
        ),
        tmp_path,
        "coordinate_transformation_mode='half_pixel_bogus'",
    )
    anti = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", antialias=1)
    _refused(
        typed_model(
            [anti], [("x", (1, 1, 4, 4), TensorProto.FLOAT)], ["y"], 18, {"s": np.array([1, 1, 0.5, 0.5], np.float32)}
        ),
        tmp_path,
        "antialias=1",
    )
    _refused(
        single_node("ConvTranspose", [("x", (1, 1, 2, 2, 2))], consts={"w": np.ones((1, 1, 1, 1, 1), np.float32)}),
        tmp_path,
        "3-D windows",
    )
    _refused(
        single_node("Pad", [("x", (2, 3))], consts={"p": np.array([1, 0, 0, 1], np.int64)}, mode="bogus"),
        tmp_path,
        "mode='bogus'",
    )
    pad = helper.make_node("Pad", ["x", "p"], ["y"])
    _refused(
        typed_model([pad], [("x", (2, 3), TensorProto.FLOAT), ("p", (4,), TensorProto.INT64)], ["y"], 13, {}),
        tmp_path,
        r"node 0 \(Pad\)",
    )


def test_pad_opset1_paddings_attribute(tmp_path):
    """Pad-1 names its pads ``paddings`` (onnxruntime has no opset-1 Pad: numpy is the reference)."""
    node = helper.make_node("Pad", ["x"], ["y"], mode="edge", paddings=[1, 0, 2, 3])
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6, 7])],
    )  # shape inference lacks Pad-1
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)])
    model.ir_version = 8
    x = _w(3, 4)
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    np.testing.assert_array_equal(got, np.pad(x, [(1, 2), (0, 3)], mode="edge"))


def test_dropout_mask_is_all_true_at_inference(tmp_path):
    # the Dropout reads a computed value (the pass that drops inference no-ops must keep it: its mask is read)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Dropout", ["r"], ["y", "mask"]),
    ]
    model = typed_model(nodes, [("x", (3, 5), TensorProto.FLOAT)], ["y", "mask"], 13, {})
    _compare(model, tmp_path)
