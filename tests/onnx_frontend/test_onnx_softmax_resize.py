"""Softmax/LogSoftmax's generated kernels (rows of the last axis; blocks of inner positions) against numpy in float64,
and Resize's last-axis and fused nearest 2-D passes against onnxruntime: one-element axes, odd lengths and lengths
that are not a multiple of the vector width or of the block, values far apart, -inf inputs, several core_id chunks."""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, max_rel_error, run_ort, single_node  # noqa: E402

from svod_min.onnx.kernels import norm  # noqa: E402


def _softmax64(x: Any, axis: int, log: bool) -> Any:
    x = x.astype(np.float64)
    shifted = x - np.max(x, axis=axis, keepdims=True)
    total = np.sum(np.exp(shifted), axis=axis, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


#: (shape, axis): last-axis rows (1 element, fewer than 16, not a multiple of 16, ImageNet's 1000) and middle axes
#: whose inner size is below, past and a multiple of norm.SOFTMAX_BLOCK, and a one-element reduced axis.
SOFTMAX_CASES = [
    ((1, 1), -1),
    ((3, 7), -1),
    ((2, 33), -1),
    ((2, 1000), -1),
    ((2, 5, 3), 1),
    ((1, 21, 5, 7), 1),
    ((2, 3, 70), 1),
    ((1, 4, 128), 1),
    ((1, 130), 0),
    ((3, 4, 5), 0),
]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("case", SOFTMAX_CASES, ids=repr)
def test_softmax_matches_float64(op: str, case: Tuple[Sequence[int], int], tmp_path: Any) -> None:
    shape, axis = case
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    got = build_and_load(single_node(op, [("x", shape)], axis=axis), str(tmp_path))(x=x)["y"]
    want = _softmax64(x, axis, op == "LogSoftmax")
    assert got.shape == want.shape
    assert np.allclose(got, want, rtol=2e-6, atol=2e-7 if op == "Softmax" else 2e-6), float(np.max(np.abs(got - want)))


@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_of_far_apart_and_infinite_inputs(axis: int, tmp_path: Any) -> None:
    """+-1e30 (exp of the unshifted values would overflow), -inf (weight exactly 0), a row of equal values."""
    x = np.zeros((2, 19, 19), np.float32)
    x[0, 3, :] = 1e30
    x[0, 4, :] = -1e30
    x[0, 5:9, :] = -np.inf
    x[1] = np.linspace(-80, 80, 19 * 19, dtype=np.float32).reshape(19, 19)
    if axis == -1:
        x = np.ascontiguousarray(np.swapaxes(x, 1, 2))
    for op in ("Softmax", "LogSoftmax"):
        got = build_and_load(single_node(op, [("x", x.shape)], axis=axis), str(tmp_path), name=op)(x=x)["y"]
        want = _softmax64(x, axis, op == "LogSoftmax")
        assert np.array_equal(np.isinf(got), np.isinf(want)) and not np.isnan(got).any()
        finite = np.isfinite(want)
        assert np.allclose(got[finite], want[finite], rtol=2e-6, atol=2e-7), op
        if op == "Softmax":
            assert np.all(got[np.isneginf(x)] == 0.0)


def test_softmax_kernels_have_no_libm_exp() -> None:
    """The exp is the inline polynomial (a libm call would keep the loops scalar)."""
    for kernel in (norm.softmax_axis(4, 1000, 1, False), norm.softmax_axis(1, 21, 4096, True)):
        body = kernel.source[kernel.source.index("softmax_exp") :]
        assert "expf(" not in body.replace("softmax_exp(", "")


def _resize_model(shape: Sequence[int], scales: Sequence[float], axes: Sequence[int], **attrs: Any) -> Any:
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], axes=list(axes), **attrs)
    graph = helper.make_graph(
        [node],
        "r",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        [numpy_helper.from_array(np.array(scales, np.float32), "scales")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


#: (input shape, scales of the last two axes, attributes): the fused nearest 2-D pass (x2, odd factors, a
#: downsample, 8x64x64 x2 in several core_id chunks whose first rows repeat their predecessor's source row) and
#: the last-axis pass of linear and cubic modes.
RESIZE_CASES = [
    ((1, 3, 5, 7), (2.0, 2.0), dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")),
    ((2, 3, 7, 5), (1.6, 2.4), dict(mode="nearest", coordinate_transformation_mode="half_pixel")),
    (
        (1, 2, 9, 11),
        (0.5, 0.7),
        dict(mode="nearest", coordinate_transformation_mode="align_corners", nearest_mode="ceil"),
    ),
    (
        (1, 8, 64, 64),
        (2.0, 2.0),
        dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
    ),
    ((1, 2, 5, 17), (2.0, 2.0), dict(mode="linear", coordinate_transformation_mode="half_pixel")),
    ((1, 3, 8, 13), (0.5, 0.5), dict(mode="linear", coordinate_transformation_mode="align_corners")),
    ((1, 2, 6, 9), (2.0, 1.5), dict(mode="cubic", coordinate_transformation_mode="half_pixel")),
]


@pytest.mark.parametrize("case", RESIZE_CASES, ids=repr)
def test_resize_matches_onnxruntime(case: Tuple[Any, ...], tmp_path: Any) -> None:
    shape, scales, attrs = case
    model = _resize_model(shape, scales, [2, 3], **attrs)
    feeds: Dict[str, Any] = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}
    want = run_ort(model, feeds)[0]
    got = build_and_load(model, str(tmp_path))(**feeds)["y"]
    assert got.shape == want.shape
    if attrs["mode"] == "nearest":
        assert np.array_equal(got, want)
    else:  # float32 sums in another order than onnxruntime's (cubic: 16 products)
        assert max_rel_error(got, want) < (1e-4 if attrs["mode"] == "cubic" else 1e-5)


def test_resize_of_the_last_axis_alone(tmp_path: Any) -> None:
    """axes=[3]: one pass over the last axis (the gather loop), linear and nearest."""
    for mode in ("linear", "nearest"):
        model = _resize_model((2, 3, 4, 9), (2.5,), [3], mode=mode)
        feeds = {"x": np.random.default_rng(4).standard_normal((2, 3, 4, 9)).astype(np.float32)}
        want = run_ort(model, feeds)[0]
        got = build_and_load(model, str(tmp_path), name=mode)(**feeds)["y"]
        assert got.shape == want.shape and max_rel_error(got, want) < 1e-5, mode


def test_two_softmax_kernels_in_one_model(tmp_path: Any) -> None:
    """Both kernels define softmax_exp: compiled in one batch, each keeps its own."""
    nodes = [helper.make_node("Softmax", ["x"], ["a"], axis=1), helper.make_node("LogSoftmax", ["a"], ["y"], axis=-1)]
    graph = helper.make_graph(
        nodes,
        "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 20])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.random.default_rng(5).standard_normal((2, 3, 20)).astype(np.float32)
    got = build_and_load(model, str(tmp_path))(x=x)["y"]
    want = _softmax64(_softmax64(x, 1, False), -1, True)
    assert np.allclose(got, want, rtol=2e-6, atol=2e-6)
