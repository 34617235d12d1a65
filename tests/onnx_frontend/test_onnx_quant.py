"""QuantizeLinear and DequantizeLinear against onnxruntime, bit for bit: ties to even (x / scale exactly k + 0.5),
saturation at both ends, NaN and +-inf, per tensor, per axis and blocked, int8, uint8, int16, uint16 (and int32 into
DequantizeLinear); and a QDQ model written by onnxruntime's quantize_static, within one quantum of onnxruntime."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

ELEM = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16}
ELEM.update(uint16=TensorProto.UINT16, int32=TensorProto.INT32, float32=TensorProto.FLOAT)
RNG = np.random.default_rng(40)


def _edges(shape: List[int], scale: float) -> Any:
    """Random values with ties (x / scale = k + 0.5 exactly), both signs of zero, NaN, +-inf and far-out values."""
    x = (RNG.integers(-600, 600, shape) + 0.5).astype(np.float32) * np.float32(scale)
    flat = x.reshape(-1)
    special = [np.nan, np.inf, -np.inf, 1e30, -1e30, 0.0, -0.0, 0.5 * scale, -0.5 * scale, 1.5 * scale, -2.5 * scale]
    flat[: len(special)] = special
    flat[-1] = np.nan
    flat[len(special) : len(special) + flat.size // 3] = RNG.uniform(-300, 300, flat.size // 3) * scale
    return x


def _q_model(shape: List[int], scale: Any, zp: Optional[Any], opset: int, **attrs: Any) -> Any:
    consts: Dict[str, Any] = {"s": scale}
    ins = ["x", "s"]
    if zp is not None:
        consts["z"] = zp
        ins.append("z")
    node = helper.make_node("QuantizeLinear", ins, ["y"], **attrs)
    return typed_model([node], [("x", shape, TensorProto.FLOAT)], ["y"], opset, consts)


def _dq_model(shape: List[int], dtype: str, scale: Any, zp: Optional[Any], opset: int, **attrs: Any) -> Any:
    consts: Dict[str, Any] = {"s": scale}
    ins = ["x", "s"]
    if zp is not None:
        consts["z"] = zp
        ins.append("z")
    node = helper.make_node("DequantizeLinear", ins, ["y"], **attrs)
    return typed_model([node], [("x", shape, ELEM[dtype])], ["y"], opset, consts)


def _zero_points(dtype: str, n: Optional[int]) -> Any:
    info = np.iinfo(dtype)
    lo, hi = max(int(info.min), -200), min(int(info.max), 200)
    return np.array(RNG.integers(lo, hi + 1, n) if n else RNG.integers(lo, hi + 1), dtype)


def _same(model: Any, feeds: Dict[str, Any], tmp_path: Any, name: str) -> None:
    want = run_ort(model, feeds)[0]
    got = build_and_load(model, str(tmp_path), name).run(feeds)["y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))  # bit for bit, NaN and -0.0 included


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16"])
def test_quantize_per_tensor_ties_saturation_nan(dtype: str, tmp_path: Any) -> None:
    scale = np.array(0.25 if dtype.endswith("8") else 0.001, np.float32)
    shape = [3, 37]
    opset = 13 if dtype.endswith("8") else 21  # int16/uint16 are opset 21's
    _same(_q_model(shape, scale, _zero_points(dtype, None), opset), {"x": _edges(shape, float(scale))}, tmp_path, "q")


def test_quantize_without_zero_point_is_uint8(tmp_path: Any) -> None:
    shape = [50]
    _same(_q_model(shape, np.array(0.5, np.float32), None, 13), {"x": _edges(shape, 0.5)}, tmp_path, "q")


@pytest.mark.parametrize("dtype,axis", [("int8", 1), ("uint8", -1)])
def test_quantize_per_axis(dtype: str, axis: int, tmp_path: Any) -> None:
    shape = [2, 5, 3, 4]
    n = shape[axis]
    scale = (RNG.integers(1, 9, n) / 16.0).astype(np.float32)
    model = _q_model(shape, scale, _zero_points(dtype, n), 13, axis=axis)
    _same(model, {"x": _edges(shape, 0.125)}, tmp_path, "qa")


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32"])
def test_dequantize_per_tensor(dtype: str, tmp_path: Any) -> None:
    info = np.iinfo(dtype)
    x = RNG.integers(int(info.min), int(info.max) + 1, [4, 33], dtype=np.int64).astype(dtype)
    x.reshape(-1)[:2] = [info.min, info.max]
    zp = np.array(0, dtype) if dtype == "int32" else _zero_points(dtype, None)
    opset = 21 if dtype in ("int16", "uint16") else 13
    _same(_dq_model([4, 33], dtype, np.array(0.0371, np.float32), zp, opset), {"x": x}, tmp_path, "dq")


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_dequantize_per_axis(dtype: str, tmp_path: Any) -> None:
    shape = [3, 6, 5]
    scale = RNG.uniform(0.01, 0.2, 6).astype(np.float32)
    x = RNG.integers(0 if dtype == "uint8" else -128, 128, shape).astype(dtype)
    _same(_dq_model(shape, dtype, scale, _zero_points(dtype, 6), 13, axis=1), {"x": x}, tmp_path, "dqa")


def test_blocked_quantize_and_dequantize(tmp_path: Any) -> None:
    """Opset 21's block_size: one scale per 3 indices of axis 1 (the last block short)."""
    shape, block = [2, 8, 3], 3
    scale = RNG.uniform(0.05, 0.3, [2, 3, 3]).astype(np.float32)
    zp = _zero_points("int8", 18).reshape(2, 3, 3)
    _same(_q_model(shape, scale, zp, 21, axis=1, block_size=block), {"x": _edges(shape, 0.1)}, tmp_path, "qb")
    x = RNG.integers(-128, 128, shape).astype(np.int8)
    _same(_dq_model(shape, "int8", scale, zp, 21, axis=1, block_size=block), {"x": x}, tmp_path, "dqb")
    # a constant x folds at build (frontend/quant_fold.py) and must round as onnxruntime's kernel
    dq = helper.make_node("DequantizeLinear", ["w", "s", "z"], ["d"], axis=1, block_size=block)
    add = helper.make_node("Add", ["d", "a"], ["y"])
    consts = {"w": x, "s": scale, "z": zp}
    model = typed_model([dq, add], [("a", shape, TensorProto.FLOAT)], ["y"], 21, consts)
    _same(model, {"a": np.zeros(shape, np.float32)}, tmp_path, "dqf")


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_quantize_of_a_constant_folds_as_onnxruntime_rounds(dtype: str, tmp_path: Any) -> None:
    """A float32 weight before its QuantizeLinear (fake-quantized exports) folds at build (frontend/quant_fold.py):
    ties, saturation and NaN as the run-time kernel, per axis; the Add keeps a node to run."""
    shape = [4, 9]
    scale = np.array([0.25, 0.5, 0.125, 2.0], np.float32)
    q = helper.make_node("QuantizeLinear", ["w", "s", "z"], ["q"], axis=0)
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"], axis=0)
    add = helper.make_node("Add", ["d", "a"], ["y"])
    consts = {"w": _edges(shape, 0.25), "s": scale, "z": _zero_points(dtype, 4)}
    model = typed_model([q, dq, add], [("a", shape, TensorProto.FLOAT)], ["y"], 13, consts)
    _same(model, {"a": np.zeros(shape, np.float32)}, tmp_path, "qf")


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4])
def test_int4_weights_fold_at_build(elem: int, tmp_path: Any) -> None:
    """Blocked int4/uint4 weights (weight-only quantization, opset 21) are dequantized at build; MatMul reads the
    float32 result."""
    k, n, block = 16, 6, 8
    lo, hi = (-8, 8) if elem == TensorProto.INT4 else (0, 16)
    w = helper.make_tensor("w", elem, [k, n], RNG.integers(lo, hi, k * n).tolist())
    z = helper.make_tensor("z", elem, [k // block, n], RNG.integers(lo, hi, k // block * n).tolist())
    scale = onnx.numpy_helper.from_array(RNG.uniform(0.01, 0.1, [k // block, n]).astype(np.float32), "s")
    dq = helper.make_node("DequantizeLinear", ["w", "s", "z"], ["d"], axis=0, block_size=block)
    mm = helper.make_node("MatMul", ["x", "d"], ["y"])
    graph = helper.make_graph(
        [dq, mm],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, n])],
        [w, z, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    x = RNG.uniform(-1, 1, [2, k]).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path), "i4").run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_run_time_scale_and_zero_point(tmp_path: Any) -> None:
    """Scales and zero points fed at run time (as ONNX's own node tests do), per axis."""
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=0)
    dq = helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=0)
    ins = [("x", [3, 20], TensorProto.FLOAT), ("s", [3], TensorProto.FLOAT), ("z", [3], TensorProto.UINT8)]
    model = typed_model([q, dq], ins, ["y"], 13, {})
    feeds = {"x": _edges([3, 20], 0.2), "s": np.array([0.2, 0.05, 1.5], np.float32)}
    feeds["z"] = np.array([0, 128, 255], np.uint8)
    _same(model, feeds, tmp_path, "rt")


def test_float16_scale_dequantizes_in_float32(tmp_path: Any) -> None:
    """A float16 scale: the front end's half pass (frontend/half.py) computes in float32 and rounds the result to
    float16 once, as onnxruntime does, bit for bit."""
    consts = {"s": np.array(0.3, np.float16), "z": np.array(3, np.int8)}
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    model = typed_model([node], [("x", [6], TensorProto.INT8)], ["y"], 19, consts)
    _same(model, {"x": np.array([-128, -1, 0, 3, 100, 127], np.int8)}, tmp_path, "dq16")


def _float_model() -> Any:
    """Conv 3->16 (3x3, padded; 16 channels take the blocked layout) + Relu + Flatten + MatMul to 10, seeded."""
    rng = np.random.default_rng(7)
    consts = {
        "w": rng.normal(0, 0.3, [16, 3, 3, 3]).astype(np.float32),
        "b": rng.normal(0, 0.1, [16]).astype(np.float32),
        "m": rng.normal(0, 0.2, [576, 10]).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y"]),
    ]
    return typed_model(nodes, [("x", [1, 3, 6, 6], TensorProto.FLOAT)], ["y"], 13, consts)


class _Calibration:
    """A tiny calibration set: four seeded batches."""

    def __init__(self) -> None:
        rng = np.random.default_rng(11)
        self.batches = iter([{"x": rng.uniform(-1, 1, [1, 3, 6, 6]).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> Optional[Dict[str, Any]]:
        return next(self.batches, None)


@pytest.mark.parametrize("per_channel,activations", [(False, "QUInt8"), (True, "QInt8")])
def test_quantize_static_model_within_one_quantum(per_channel: bool, activations: str, tmp_path: Any) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    reader = type("Reader", (_Calibration, CalibrationDataReader), {})()
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(_float_model(), src)
    kind = getattr(QuantType, activations)
    quantize_static(src, dst, reader, quant_format=QuantFormat.QDQ, per_channel=per_channel, activation_type=kind)
    model = onnx.load(dst)
    ops = [n.op_type for n in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    last = [n for n in model.graph.node if n.output[0] == "y"][0]
    assert last.op_type == "DequantizeLinear"
    quantum = float(onnx.numpy_helper.to_array([t for t in model.graph.initializer if t.name == last.input[1]][0]))
    x = np.random.default_rng(3).uniform(-1, 1, [1, 3, 6, 6]).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path), "qdq").run({"x": x})["y"]
    assert np.max(np.abs(got.astype(np.float64) - want)) <= quantum * 1.0001
