"""Data movement of QDQ models on the quantized bytes (frontend/quant_movement.py), and MaxPool on int8/uint8.

Where a Concat, Split, Slice, Reshape, Transpose or MaxPool sits between DequantizeLinear and QuantizeLinear nodes of
one (scale, zero point), the round trip is exact, so the op runs on the integer tensors: the results equal
onnxruntime's byte for byte, and the QDQ pairs are gone from the lowered graph. Pairs of different parameters stay.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort  # noqa: E402

from svod_min.onnx.build import prepared_graph  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402
from svod_min.onnx.frontend.table import OPS  # noqa: E402

ELEM = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _model(nodes: List[Any], dtype: str, shape: Sequence[int], consts: Dict[str, Any], outputs: Sequence[str]) -> Any:
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", ELEM[dtype], list(shape))],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _lowered_ops(model: Any, tmp_path: Any) -> List[str]:
    path = os.path.join(str(tmp_path), "ops.onnx")
    onnx.save(model, path)
    return [n.op for n in prepared_graph(read_graph(path, {}, {}, OPS)).nodes]


def _same_as_ort(model: Any, x: Any, tmp_path: Any) -> None:
    want = run_ort(model, {"x": x})
    got = build_and_load(model, str(tmp_path)).run({"x": x})
    for out, w in zip(model.graph.output, want):
        assert got[out.name].dtype == w.dtype and got[out.name].shape == w.shape
        np.testing.assert_array_equal(got[out.name], w)


def _movement_model(dtype: str, second_scale: float) -> Any:
    """x -> DQ -> MaxPool (SPPF's 5x5 same) -> Q -> DQ, beside x -> DQ; Concat of both -> Q -> DQ -> Split ->
    Q -> DQ -> Transpose / Reshape -> Q: every pair of scale s, except the MaxPool's Q at ``second_scale``."""
    zp = 19 if dtype == "uint8" else -7
    consts = {
        "s": np.array(0.05, np.float32),
        "z": np.array(zp, dtype),
        "s2": np.array(second_scale, np.float32),
        "split": np.array([3, 5], np.int64),
        "shape": np.array([1, 5, -1], np.int64),
    }
    dq = lambda x, y, s="s": helper.make_node("DequantizeLinear", [x, s, "z"], [y])  # noqa: E731
    q = lambda x, y, s="s": helper.make_node("QuantizeLinear", [x, s, "z"], [y])  # noqa: E731
    nodes = [
        dq("x", "xf"),
        helper.make_node("MaxPool", ["xf"], ["pf"], kernel_shape=[5, 5], pads=[2, 2, 2, 2]),
        q("pf", "pq", "s2"),
        dq("pq", "pd", "s2"),
        helper.make_node("Concat", ["xf", "pd"], ["cf"], axis=1),
        q("cf", "cq"),
        dq("cq", "cd"),
        helper.make_node("Split", ["cd", "split"], ["a", "b"], axis=1),
        q("a", "aq"),
        q("b", "bq"),
        dq("aq", "ad"),
        dq("bq", "bd"),
        helper.make_node("Transpose", ["ad"], ["at"], perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["bd", "shape"], ["br"]),
        q("at", "y0"),
        q("br", "y1"),
    ]
    return _model(nodes, dtype, [1, 4, 9, 11], consts, ["y0", "y1"])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_movement_between_equal_qdq_pairs_runs_on_the_bytes(dtype: str, tmp_path: Any) -> None:
    model = _movement_model(dtype, 0.05)
    info = np.iinfo(dtype)
    x = np.random.default_rng(5).integers(int(info.min), int(info.max) + 1, [1, 4, 9, 11]).astype(dtype)
    _same_as_ort(model, x, tmp_path)
    ops = _lowered_ops(model, tmp_path)
    assert "QuantizeLinear" not in ops and "DequantizeLinear" not in ops, ops
    assert {"MaxPool", "Concat", "Split", "Transpose", "Reshape"} <= set(ops)


def test_a_pair_of_another_scale_keeps_its_quantization(tmp_path: Any) -> None:
    # the MaxPool's output quantized at another scale: that pair stays (the Concat then mixes two scales and stays
    # too), and the results still equal onnxruntime's
    model = _movement_model("uint8", 0.11)
    x = np.random.default_rng(6).integers(0, 256, [1, 4, 9, 11]).astype(np.uint8)
    _same_as_ort(model, x, tmp_path)
    ops = _lowered_ops(model, tmp_path)
    assert ops.count("QuantizeLinear") >= 2 and "DequantizeLinear" in ops


@pytest.mark.parametrize(
    "attrs",
    [
        dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2]),  # yolov8's SPPF: the same-size kernel
        dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),  # the row/plane kernels
        dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),  # a last window past the input's end
        dict(kernel_shape=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1], dilations=[2, 2]),  # dilated: per tap
    ],
)
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_max_pool_on_bytes_against_numpy(dtype: str, attrs: Dict[str, Any], tmp_path: Any) -> None:
    info = np.iinfo(dtype)
    x = np.random.default_rng(7).integers(int(info.min), int(info.max) + 1, [2, 3, 10, 13]).astype(dtype)
    model = _model([helper.make_node("MaxPool", ["x"], ["y"], **attrs)], dtype, x.shape, {}, ["y"])
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    np.testing.assert_array_equal(got, _max_pool(x, attrs))


def _max_pool(x: Any, attrs: Dict[str, Any]) -> Any:
    """numpy's max over each window, padding left out."""
    kh, kw = attrs["kernel_shape"]
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
    h, w = x.shape[2:]

    def out_size(n: int, k: int, s: int, d: int, p: int) -> int:
        span = n + p - d * (k - 1) - 1
        return (-(-span // s) if attrs.get("ceil_mode") else span // s) + 1

    oh, ow = out_size(h, kh, sh, dh, pt + pb), out_size(w, kw, sw, dw, pl + pr)
    y = np.zeros(x.shape[:2] + (oh, ow), x.dtype)
    for i in range(oh):
        for j in range(ow):
            rows = [i * sh - pt + a * dh for a in range(kh) if 0 <= i * sh - pt + a * dh < h]
            cols = [j * sw - pl + b * dw for b in range(kw) if 0 <= j * sw - pl + b * dw < w]
            y[:, :, i, j] = x[:, :, rows][:, :, :, cols].max(axis=(2, 3))
    return y


def _resize_model(dtype: str, mode: str, qdq: bool) -> Any:
    """x -> (DQ ->) Resize by scales [1, 1, 2, 3] (-> Q): yolov8's upsampling in QDQ form, or on the bytes."""
    consts = {"s": np.array(0.05, np.float32), "z": np.array(7, dtype), "scales": np.array([1, 1, 2, 3], np.float32)}
    resize = helper.make_node("Resize", ["xf" if qdq else "x", "", "scales"], ["rf" if qdq else "y"], mode=mode)
    nodes = [resize]
    if qdq:
        nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]), resize]
        nodes.append(helper.make_node("QuantizeLinear", ["rf", "s", "z"], ["y"]))
    return _model(nodes, dtype, [1, 3, 5, 7], consts, ["y"])


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_nearest_resize_between_equal_pairs_runs_on_the_bytes(dtype: str, tmp_path: Any) -> None:
    model = _resize_model(dtype, "nearest", qdq=True)
    info = np.iinfo(dtype)
    x = np.random.default_rng(8).integers(int(info.min), int(info.max) + 1, [1, 3, 5, 7]).astype(dtype)
    _same_as_ort(model, x, tmp_path)
    assert _lowered_ops(model, tmp_path) == ["Resize"]


def test_linear_resize_keeps_its_quantization(tmp_path: Any) -> None:
    # interpolation makes new values: the pair stays and the Resize runs in float
    model = _resize_model("uint8", "linear", qdq=True)
    x = np.random.default_rng(9).integers(0, 256, [1, 3, 5, 7]).astype(np.uint8)
    ops = _lowered_ops(model, tmp_path)
    assert "DequantizeLinear" in ops and "QuantizeLinear" in ops
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    assert np.abs(got.astype(np.int64) - want.astype(np.int64)).max() <= 1


def test_byte_resize_other_than_nearest_is_refused_by_name(tmp_path: Any) -> None:
    from svod_min.error import UnsupportedModelError

    model = _resize_model("uint8", "linear", qdq=False)
    with pytest.raises(UnsupportedModelError, match="int8/uint8 Resize is nearest over the last two axes only"):
        build_and_load(model, str(tmp_path))
