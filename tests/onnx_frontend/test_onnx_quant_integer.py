"""The integer-quantized ops against onnxruntime, bit for bit, on seeded random data: MatMulInteger, ConvInteger,
QLinearMatMul and QLinearConv (zero points, per-column and per-channel scales, groups, pads, strides, dilations,
saturation, float16 scales); the variants onnxruntime refuses (per-row zero points of A, per-channel ConvInteger
zero points) against numpy's exact integer sums; models onnxruntime's quantize_dynamic (an MLP and a CNN) and
quantize_static in QOperator format write, with onnxruntime's com.microsoft QLinear ops and QGemm (each against
onnxruntime too); a 3-D ConvInteger refused by name."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support import conv_ref  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402

ELEM = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int32": TensorProto.INT32}
ELEM.update(float32=TensorProto.FLOAT, float16=TensorProto.FLOAT16)
RNG = np.random.default_rng(404)


def _ints(dtype: str, shape: Sequence[int], rng: Any = RNG) -> Any:
    info = np.iinfo(dtype)
    return rng.integers(int(info.min), int(info.max) + 1, list(shape)).astype(dtype)


def _model(node: Any, feeds: Dict[str, Any], consts: Dict[str, Any], opset: int = 13) -> Any:
    inputs = [(n, list(v.shape), ELEM[v.dtype.name]) for n, v in feeds.items()]
    return typed_model([node], inputs, ["y"], opset, consts)


def _svod(model: Any, feeds: Dict[str, Any], tmp_path: Any, name: str = "m") -> Any:
    return build_and_load(model, str(tmp_path), name).run(feeds)["y"]


def _same_as_ort(model: Any, feeds: Dict[str, Any], tmp_path: Any) -> Any:
    want = run_ort(model, feeds)[0]
    got = _svod(model, feeds, tmp_path)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    return got


@pytest.mark.parametrize("adt,bdt", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "int8")])
def test_matmulinteger_batched_zero_points(adt: str, bdt: str, tmp_path: Any) -> None:
    # N = 300 crosses the kernel's 256-column tile; B's zero point per column of each batch, A's per tensor (as
    # onnxruntime takes them)
    a, b = _ints(adt, [2, 3, 5, 40]), _ints(bdt, [3, 40, 300])
    consts = {"za": _ints(adt, []), "zb": _ints(bdt, [3, 1, 300])}
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    got = _same_as_ort(_model(node, {"a": a, "b": b}, consts), {"a": a, "b": b}, tmp_path)
    exact = np.matmul(a.astype(np.int64) - consts["za"], b.astype(np.int64) - consts["zb"])
    np.testing.assert_array_equal(got, exact)


def test_matmulinteger_1d_and_per_column_vector(tmp_path: Any) -> None:
    a, b, zb = _ints("uint8", [64]), _ints("int8", [64, 7]), _ints("int8", [7])
    node = helper.make_node("MatMulInteger", ["a", "b", "", "zb"], ["y"])
    _same_as_ort(_model(node, {"a": a, "b": b}, {"zb": zb}), {"a": a, "b": b}, tmp_path)


def test_matmulinteger_per_row_zero_points_as_numpy(tmp_path: Any) -> None:
    # per-row a_zero_point ([D, M, 1]) and per-column b_zero_point ([D, 1, N]) are the spec's; onnxruntime refuses
    # the per-row one, so numpy's exact int64 sums are the reference
    a, b = _ints("int8", [2, 4, 9]), _ints("int8", [2, 9, 6])
    za, zb = _ints("int8", [2, 4, 1]), _ints("int8", [2, 1, 6])
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    feeds = {"a": a, "b": b, "za": za, "zb": zb}
    got = _svod(_model(node, feeds, {}), feeds, tmp_path)
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb))


def _qlinear_matmul(adt: str, bdt: str, per_column: bool, scale_dtype: str = "float32") -> Tuple[Any, Dict[str, Any]]:
    # its own generator: the data, and so which results saturate, do not depend on which tests ran before
    rng, n = np.random.default_rng(405), 12
    feeds = {
        "a": _ints(adt, [3, 4, 30], rng),
        "a_scale": np.array(0.02, scale_dtype),
        "a_zp": _ints(adt, [], rng),
        "b": _ints(bdt, [30, n], rng),
        "b_scale": (rng.uniform(0.005, 0.03, [n]) if per_column else np.array(0.01)).astype(scale_dtype),
        "b_zp": _ints(bdt, [n] if per_column else [], rng),
        # a small y_scale: some results saturate, the rest round
        "y_scale": np.array(0.1 if scale_dtype == "float32" else 0.25, scale_dtype),
        "y_zp": _ints(adt, [], rng),
    }
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    return _model(node, feeds, {}, 21 if scale_dtype == "float16" else 13), feeds


@pytest.mark.parametrize(
    "adt,bdt,per_column,scale",
    [("uint8", "uint8", False, "float32"), ("int8", "int8", True, "float32"), ("uint8", "int8", True, "float16")],
)
def test_qlinearmatmul_bit_for_bit(adt: str, bdt: str, per_column: bool, scale: str, tmp_path: Any) -> None:
    model, feeds = _qlinear_matmul(adt, bdt, per_column, scale)
    got = _same_as_ort(model, feeds, tmp_path)
    info = np.iinfo(adt)
    assert ((got == info.min) | (got == info.max)).any() and ((got > info.min) & (got < info.max)).any()


def test_qlinearmatmul_ties_round_to_even(tmp_path: Any) -> None:
    # a_scale * b_scale / y_scale = 2^-3 exactly and small operands: every eighth sum lands on a half, none saturates
    a, b = RNG.integers(-8, 9, [16, 30]).astype(np.int8), RNG.integers(-8, 9, [30, 16]).astype(np.int8)
    feeds = {"a": a, "a_scale": np.array(0.5, np.float32), "a_zp": np.array(0, np.int8), "b": b}
    feeds.update(b_scale=np.array(0.25, np.float32), b_zp=np.array(0, np.int8), y_scale=np.array(1.0, np.float32))
    feeds["y_zp"] = np.array(3, np.int8)
    node = helper.make_node("QLinearMatMul", list(feeds), ["y"])
    got = _same_as_ort(_model(node, feeds, {}), feeds, tmp_path)
    exact = np.matmul(a.astype(np.int64), b.astype(np.int64))
    halves = exact % 8 == 4
    assert halves.sum() > 10
    np.testing.assert_array_equal(got[halves], np.round(exact[halves] / 8.0) + 3)  # numpy's round: half to even


def _conv_feeds(xdt: str, wdt: str, c: int, oc: int, group: int, hw: Sequence[int]) -> Dict[str, Any]:
    return {"x": _ints(xdt, [2, c] + list(hw)), "w": _ints(wdt, [oc, c // group, 3] + ([3] if len(hw) == 2 else []))}


@pytest.mark.parametrize("wdt", ["uint8", "int8"])
def test_convinteger_pads_strides_dilations_groups(wdt: str, tmp_path: Any) -> None:
    feeds = _conv_feeds("uint8", wdt, 4, 6, 2, [9, 11])
    consts = {"xz": _ints("uint8", []), "wz": _ints(wdt, [])}
    attrs = dict(pads=[1, 2, 0, 1], strides=[2, 1], dilations=[1, 2], group=2)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    got = _same_as_ort(_model(node, feeds, consts, 10), feeds, tmp_path)
    want = conv_ref.conv2d(
        feeds["x"].astype(np.int64) - consts["xz"],
        feeds["w"].astype(np.int64) - consts["wz"],
        (2, 1),
        [1, 2, 0, 1],
        (1, 2),
        2,
    )
    np.testing.assert_array_equal(got, want)  # float64 sums of these sizes are exact


def test_convinteger_per_channel_zero_point_as_numpy(tmp_path: Any) -> None:
    # the spec's per-output-channel w_zero_point, which onnxruntime refuses: numpy's exact sums are the reference
    feeds = _conv_feeds("uint8", "uint8", 3, 5, 1, [7, 6])
    consts = {"xz": _ints("uint8", []), "wz": _ints("uint8", [5])}
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], auto_pad="SAME_UPPER")
    got = _svod(_model(node, feeds, consts, 10), feeds, tmp_path)
    w = feeds["w"].astype(np.int64) - consts["wz"][:, None, None, None]
    want = conv_ref.conv2d(feeds["x"].astype(np.int64) - consts["xz"], w, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "xdt,wdt,per_channel,hw,bias",
    [
        ("uint8", "uint8", False, [8, 9], True),
        ("int8", "int8", True, [8, 9], True),
        ("uint8", "int8", True, [17], False),
    ],
)
def test_qlinearconv_bit_for_bit(
    xdt: str, wdt: str, per_channel: bool, hw: List[int], bias: bool, tmp_path: Any
) -> None:
    oc, group = 6, 3
    feeds = _conv_feeds(xdt, wdt, 6, oc, group, hw)
    x, w = feeds.pop("x"), feeds.pop("w")
    ins = {
        "x": x,
        "x_scale": np.array(0.03, np.float32),
        "x_zp": _ints(xdt, []),
        "w": w,
        "w_scale": RNG.uniform(0.002, 0.02, [oc] if per_channel else []).astype(np.float32),
        "w_zp": _ints(wdt, [oc]) if per_channel and wdt == "uint8" else np.zeros([oc] if per_channel else [], wdt),
        "y_scale": np.array(1.0, np.float32),
        "y_zp": _ints(xdt, []),
    }
    if bias:
        ins["bias"] = RNG.integers(-20000, 20000, [oc]).astype(np.int32)
    consts = {k: v for k, v in ins.items() if k not in ("x", "x_scale", "y_zp")}  # x_scale, y_zp fed at run time
    feeds = {k: ins[k] for k in ("x", "x_scale", "y_zp")}
    pads = [1, 1, 1, 0] if len(hw) == 2 else [2, 1]
    node = helper.make_node("QLinearConv", list(ins), ["y"], pads=pads, strides=[1, 2][: len(hw)], group=group)
    got = _same_as_ort(_model(node, feeds, consts, 10), feeds, tmp_path)
    info = np.iinfo(xdt)
    assert ((got > info.min) & (got < info.max)).mean() > 0.3  # mostly rounded, not saturated


def _mlp() -> Any:
    rng = np.random.default_rng(5)
    consts = {
        "w1": rng.normal(0, 0.3, [16, 32]).astype(np.float32),
        "b1": rng.normal(0, 0.1, [32]).astype(np.float32),
        "w2": rng.normal(0, 0.3, [32, 10]).astype(np.float32),
        "b2": rng.normal(0, 0.1, [10]).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["o"]),
        helper.make_node("Add", ["o", "b2"], ["y"]),
    ]
    return typed_model(nodes, [("x", [4, 16], TensorProto.FLOAT)], ["y"], 13, consts)


def _cnn() -> Any:
    rng = np.random.default_rng(6)
    consts = {
        "w1": rng.normal(0, 0.3, [8, 3, 3, 3]).astype(np.float32),
        "b1": rng.normal(0, 0.1, [8]).astype(np.float32),
        "w2": rng.normal(0, 0.2, [8, 4, 3, 3]).astype(np.float32),
        "m": rng.normal(0, 0.2, [8 * 4 * 4, 10]).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Flatten", ["r2"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y"]),
    ]
    return typed_model(nodes, [("x", [2, 3, 8, 8], TensorProto.FLOAT)], ["y"], 13, consts)


@pytest.mark.parametrize(
    "which,ops,options",
    [
        ("mlp", {"MatMulInteger"}, {}),
        ("cnn", {"ConvInteger", "MatMulInteger"}, {}),
        ("cnn", {"ConvInteger", "MatMulInteger"}, {"per_channel": True, "reduce_range": True}),
    ],
)
def test_quantize_dynamic_models(which: str, ops: set, options: Dict[str, Any], tmp_path: Any) -> None:
    from onnxruntime.quantization import quantize_dynamic

    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    float_model = _mlp() if which == "mlp" else _cnn()
    onnx.save(float_model, src)
    quantize_dynamic(src, dst, **options)
    model = onnx.load(dst)
    kinds = {n.op_type for n in model.graph.node}
    assert ops | {"DynamicQuantizeLinear"} <= kinds, kinds
    shape = [d.dim_value for d in float_model.graph.input[0].type.tensor_type.shape.dim]
    bundle = build_and_load(model, str(tmp_path), "dyn")
    # An all-zero x: DynamicQuantizeLinear's y_scale is 0 here (the spec's formula) and 1 in onnxruntime; y and the
    # zero point are 0 in both, so everything after it agrees.
    for x in (np.random.default_rng(8).uniform(-1, 1, shape).astype(np.float32), np.zeros(shape, np.float32)):
        want = run_ort(model, {"x": x})[0]
        got = bundle.run({"x": x})["y"]
        # the integer sums and the quantization are exact; onnxruntime fuses the float epilogue (scale product,
        # Cast, Mul, Add) into one kernel that rounds in another order: float32 rounding apart, no quantum apart
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.max(np.abs(want))))


class _Calibration:
    def __init__(self) -> None:
        rng = np.random.default_rng(12)
        self.batches = iter([{"x": rng.uniform(-1, 1, [2, 3, 8, 8]).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> Optional[Dict[str, Any]]:
        return next(self.batches, None)


def _residual() -> Any:
    """Conv, Conv, Add (the residual), x * Sigmoid(x), LeakyRelu, GlobalAveragePool, MatMul: quantize_static writes
    onnxruntime's QLinearAdd, QLinearSigmoid, QLinearMul, QLinearLeakyRelu and QLinearGlobalAveragePool for them."""
    rng = np.random.default_rng(21)
    consts = {
        "w1": rng.normal(0, 0.3, [8, 3, 3, 3]).astype(np.float32),
        "b1": rng.normal(0, 0.1, [8]).astype(np.float32),
        "w2": rng.normal(0, 0.2, [8, 8, 3, 3]).astype(np.float32),
        "m": rng.normal(0, 0.3, [8, 5]).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c1", "c2"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["g"]),
        helper.make_node("Mul", ["s", "g"], ["h"]),
        helper.make_node("LeakyRelu", ["h"], ["l"], alpha=0.1),
        helper.make_node("GlobalAveragePool", ["l"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["y"]),
    ]
    return typed_model(nodes, [("x", [2, 3, 8, 8], TensorProto.FLOAT)], ["y"], 13, consts)


def _branches() -> Any:
    """Two Convs concatenated, AveragePool, Gemm (transB), Softmax: QLinearConcat, QLinearAveragePool, QGemm and
    QLinearSoftmax in QOperator format."""
    rng = np.random.default_rng(2)
    consts = {
        "w1": rng.normal(0, 0.3, [8, 3, 3, 3]).astype(np.float32),
        "w2": rng.normal(0, 0.3, [4, 3, 1, 1]).astype(np.float32),
        "g": rng.normal(0, 0.2, [10, 12 * 4 * 4]).astype(np.float32),
        "gb": rng.normal(0, 0.1, [10]).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["x", "w2"], ["c2"]),
        helper.make_node("Concat", ["c1", "c2"], ["cc"], axis=1),
        helper.make_node("AveragePool", ["cc"], ["ap"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["ap"], ["f"]),
        helper.make_node("Gemm", ["f", "g", "gb"], ["gm"], transB=1),
        helper.make_node("Softmax", ["gm"], ["y"], axis=1),
    ]
    return typed_model(nodes, [("x", [2, 3, 8, 8], TensorProto.FLOAT)], ["y"], 13, consts)


@pytest.mark.parametrize("which", ["cnn", "residual", "branches"])
def test_quantize_static_qoperator_model(which: str, tmp_path: Any) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_static

    reader = type("Reader", (_Calibration, CalibrationDataReader), {})()
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save({"cnn": _cnn, "residual": _residual, "branches": _branches}[which](), src)
    quantize_static(src, dst, reader, quant_format=QuantFormat.QOperator, per_channel=which == "cnn")
    model = onnx.load(dst)
    kinds = {n.op_type for n in model.graph.node}
    assert "QLinearConv" in kinds and ("QGemm" if which == "branches" else "QLinearMatMul") in kinds, kinds
    if which == "branches":
        assert {"QLinearConcat", "QLinearAveragePool", "QLinearSoftmax"} <= kinds, kinds
    if which == "residual":
        assert {"QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearGlobalAveragePool"} <= kinds, kinds
    x = np.random.default_rng(9).uniform(-1, 1, [2, 3, 8, 8]).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    got = _svod(model, {"x": x}, tmp_path, "qop")
    np.testing.assert_array_equal(got, want)  # QLinearAdd's fixed point happens to agree here (docs/onnx.md)


def test_3d_convinteger_is_refused_by_name(tmp_path: Any) -> None:
    feeds = {"x": _ints("uint8", [1, 2, 4, 4, 4])}
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"])
    model = _model(node, feeds, {"w": _ints("uint8", [3, 2, 2, 2, 2])}, 10)
    with pytest.raises(UnsupportedModelError, match=r"ConvInteger.*3-D windows are not supported"):
        build_and_load(model, str(tmp_path))


def _ms_model(node: Any, feeds: Dict[str, Any], consts: Dict[str, Any], out: Optional[List[int]]) -> Any:
    """One com.microsoft node; its output declared with the input's dtype (QGemm without y_zp: float32) and ``out``
    (None: shape unknown, as onnxruntime alone is told it)."""
    float_out = node.op_type == "QGemm" and len(node.input) < 9
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info(n, ELEM[v.dtype.name], list(v.shape)) for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT if float_out else ELEM[feeds["x"].dtype.name], out)],
        [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _scale_zp(dtype: str, prefix: str, scale: float) -> Dict[str, Any]:
    middle = 128 if dtype == "uint8" else 0  # a zero point near the middle: results spread over the range
    zp = np.array(middle + RNG.integers(-20, 21), dtype)
    return {prefix + "_scale": np.array(scale, np.float32), prefix + "_zp": zp}


@pytest.mark.parametrize(
    "op,dtype,attrs",
    [
        ("QLinearAdd", "uint8", {}),
        ("QLinearMul", "int8", {}),
        ("QLinearSigmoid", "int8", {}),
        ("QLinearLeakyRelu", "uint8", {"alpha": 0.2}),
        ("QLinearGlobalAveragePool", "uint8", {"channels_last": 0}),
        ("QLinearGlobalAveragePool", "int8", {"channels_last": 1}),
    ],
)
def test_contrib_qlinear_ops(op: str, dtype: str, attrs: Dict[str, Any], tmp_path: Any) -> None:
    # onnxruntime's com.microsoft QLinear ops (quantize_static's QOperator format) as DequantizeLinear, the float op,
    # QuantizeLinear: equal to onnxruntime's lookup tables and float kernels; its QLinearAdd computes in fixed point
    # (integer multipliers and a rounding shift) on x86-64, so a result there may lie one quantum away
    # scales of many significant bits, as calibration gives: their ratios seldom put a result on an exact tie, where
    # onnxruntime's fixed-point QLinearAdd rounds half away from zero and QuantizeLinear half to even
    x = _ints(dtype, [2, 6, 5, 7])
    consts = _scale_zp(dtype, "x", 0.0513)
    if op in ("QLinearAdd", "QLinearMul"):
        consts.update(b=_ints(dtype, [6, 1, 7]), **_scale_zp(dtype, "b", 0.0297))
    consts.update(_scale_zp(dtype, "y", 0.0411 if op != "QLinearMul" else 0.517))
    if op == "QLinearSigmoid":
        consts["y_scale"] = np.array(1 / 256, np.float32)
    ins = list(consts)
    if op not in ("QLinearAdd", "QLinearMul"):
        ins = ["x_scale", "x_zp", "y_scale", "y_zp"]
    node = helper.make_node(op, ["x"] + ins, ["y"], domain="com.microsoft", **attrs)
    out = [2, 6, 5, 7] if op != "QLinearGlobalAveragePool" else [2, 1, 1, 7] if attrs["channels_last"] else [2, 6, 1, 1]
    model = _ms_model(node, {"x": x}, consts, out)
    want = run_ort(model, {"x": x})[0]
    got = _svod(model, {"x": x}, tmp_path)
    assert got.dtype == want.dtype and got.shape == want.shape
    info = np.iinfo(dtype)
    assert ((got > info.min) & (got < info.max)).mean() > 0.5  # mostly rounded, not saturated
    if op != "QLinearAdd":
        np.testing.assert_array_equal(got, want)
    else:
        off = np.abs(got.astype(int) - want.astype(int))
        assert off.max() <= 1 and (off > 0).mean() < 0.02, (off.max(), (off > 0).sum())


def _qgemm_case(dtype: str, per_channel: bool, float_out: bool) -> Tuple[Dict[str, Any], List[str], Dict[str, Any]]:
    n = 9
    consts = {"a_scale": np.array(0.0213, np.float32), "a_zp": _scale_zp(dtype, "t", 1.0)["t_zp"]}
    consts["b"] = _ints(dtype, [n, 20])  # transB: [N, K]
    consts["b_scale"] = RNG.uniform(0.002, 0.02, [n] if per_channel else []).astype(np.float32)
    consts["b_zp"] = np.zeros([n] if per_channel else [], dtype)
    consts["c"] = RNG.integers(-3000, 3000, [n]).astype(np.int32)
    ins = ["x", "a_scale", "a_zp", "b", "b_scale", "b_zp", "c"]
    if not float_out:
        consts.update(_scale_zp(dtype, "y", 0.37))
        ins += ["y_scale", "y_zp"]
    return consts, ins, {"transA": 1, "transB": 1, "alpha": 0.75}


@pytest.mark.parametrize(
    "op,dtype,attrs",
    [
        ("QLinearConcat", "uint8", {"axis": 1}),
        ("QLinearAveragePool", "int8", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}),
        ("QLinearAveragePool", "uint8", {"kernel_shape": [2, 3], "count_include_pad": 1, "pads": [0, 1, 0, 1]}),
        ("QLinearAveragePool", "uint8", {"kernel_shape": [2, 2], "channels_last": 1}),
        ("QLinearSoftmax", "uint8", {"axis": -1, "opset": 13}),
        ("QGemm", "uint8", {"per_channel": False, "float_out": False}),
        ("QGemm", "int8", {"per_channel": True, "float_out": True}),
    ],
)
def test_contrib_qlinear_ops_more(op: str, dtype: str, attrs: Dict[str, Any], tmp_path: Any) -> None:
    # QLinearConcat (inputs of other scales requantized), QLinearAveragePool, QLinearSoftmax and QGemm, as
    # quantize_static's QOperator format writes them for Concat, AveragePool, Softmax and Gemm
    x = _ints(dtype, [2, 6, 5, 7] if op != "QGemm" else [20, 4])  # QGemm: transA, A is [K, M]
    if op == "QLinearConcat":
        consts = {**_scale_zp(dtype, "y", 0.0411), **_scale_zp(dtype, "x", 0.0513)}
        consts.update(b=_ints(dtype, [2, 3, 5, 7]), **_scale_zp(dtype, "b", 0.0297))
        ins = ["y_scale", "y_zp", "x", "x_scale", "x_zp", "b", "b_scale", "b_zp"]
    elif op == "QGemm":
        consts, ins, gemm = _qgemm_case(dtype, attrs["per_channel"], attrs["float_out"])
        attrs = gemm
    else:
        consts = {
            **_scale_zp(dtype, "x", 0.0513),
            **_scale_zp(dtype, "y", 0.0411 if op != "QLinearSoftmax" else 1 / 256),
        }
        ins = ["x", "x_scale", "x_zp", "y_scale", "y_zp"]
    node = helper.make_node(op, ins, ["y"], domain="com.microsoft", **attrs)
    want = run_ort(_ms_model(node, {"x": x}, consts, None), {"x": x})[0]
    got = _svod(_ms_model(node, {"x": x}, consts, list(want.shape)), {"x": x}, tmp_path)
    assert got.dtype == want.dtype and got.shape == want.shape
    if op != "QLinearAveragePool":
        np.testing.assert_array_equal(got, want)
    else:
        # onnxruntime's x86-64 QLinearAveragePool kernels, chosen by the CPU, round some near ties to the other side
        # in float32 (29.4999975 to 30 on one host, where svod_min gives 29, the float64 value's rounding): one
        # quantum at a few places, bit-equal on others
        off = np.abs(got.astype(int) - want.astype(int))
        assert off.max() <= 1 and (off > 0).mean() < 0.02, (off.max(), (off > 0).sum())
    assert len(np.unique(got)) > 5


def test_per_row_a_scale_is_refused_by_name(tmp_path: Any) -> None:
    # QLinearMatMul's a_scale is per tensor in the spec; a per-row one is refused, naming the input
    model, feeds = _qlinear_matmul("uint8", "uint8", False)
    feeds["a_scale"] = np.full([4], 0.02, np.float32)
    model = _model(helper.make_node("QLinearMatMul", list(feeds), ["y"]), feeds, {})
    with pytest.raises(UnsupportedModelError, match=r"QLinearMatMul.*'a_scale' has shape \[4\]; only one value"):
        build_and_load(model, str(tmp_path))


@pytest.mark.parametrize(
    "xdt,c,hw,k,stride,pad",
    [
        ("uint8", 5, [9, 23], 1, 1, 0),  # a 1x1 convolution: each panel one contiguous run of the plane
        ("int8", 3, [10, 13], 1, 1, 0),  # K = 3: a partial group of four rows, 130 pixels: a partial last panel
        ("uint8", 4, [7, 37], 3, 1, 1),  # runs of 36 bytes, and of fewer than 16 and 8 where a panel splits a row
        ("int8", 4, [12, 19], 3, 2, 1),  # stride 2: strided runs
        ("uint8", 6, [8, 20], 1, 2, 0),  # a 1x1 convolution with stride 2 walks output rows
    ],
)
def test_convinteger_patch_packing_geometries(
    xdt: str, c: int, hw: List[int], k: int, stride: int, pad: int, tmp_path: Any
) -> None:
    # the int8 convolution's patch packer (templates/qpack_conv.c.j2) against numpy's exact integer convolution,
    # over the run lengths and panel splits its copy paths take; its own generator keeps the module's RNG order
    rng = np.random.default_rng(4242)
    info = np.iinfo(xdt)
    x = rng.integers(int(info.min), int(info.max) + 1, [2, c] + hw).astype(xdt)
    w = rng.integers(-128, 128, [7, c, k, k]).astype(np.int8)
    xz = np.array(rng.integers(int(info.min), int(info.max) + 1), xdt)
    feeds = {"x": x, "w": w}
    node = helper.make_node(
        "ConvInteger", ["x", "w", "xz"], ["y"], pads=[pad] * 4, strides=[stride, stride], kernel_shape=[k, k]
    )
    got = _svod(_model(node, feeds, {"xz": xz}, 10), feeds, tmp_path)
    want = conv_ref.conv2d(x.astype(np.int64) - int(xz), w.astype(np.int64), (stride, stride), [pad] * 4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "xdt,c,hw,k,stride,pads,dil",
    [
        ("uint8", 4, [7, 37], [3, 3], 1, [1, 1, 1, 1], 1),  # runs cut by panels; every quad of one tap copied whole
        ("int8", 8, [12, 19], [3, 3], 2, [1, 1, 1, 1], 1),  # stride 2: strided words
        ("uint8", 12, [9, 10], [5, 5], 1, [2, 0, 1, 3], 2),  # dilated, uneven pads: taps wholly in the padding
        ("int8", 4, [1, 70], [1, 3], 1, [0, 1, 0, 1], 1),  # a 1-D window (H = 1)
    ],
)
def test_convinteger_tap_major_packing(
    xdt: str, c: int, hw: List[int], k: List[int], stride: int, pads: List[int], dil: int, tmp_path: Any
) -> None:
    # constant weights and C a multiple of 4: the patches are packed tap-major from the input's channel quads
    # (templates/qquad.c.j2, qpack_taps.c.j2) and the weights' rows reordered to match; numpy's exact convolution
    # is the reference, over two images
    rng = np.random.default_rng(977)
    info = np.iinfo(xdt)
    x = rng.integers(int(info.min), int(info.max) + 1, [2, c] + hw).astype(xdt)
    w = rng.integers(-128, 128, [9, c] + k).astype(np.int8)
    xz = np.array(rng.integers(int(info.min), int(info.max) + 1), xdt)
    attrs = dict(pads=pads, strides=[stride, stride], dilations=[dil, dil], kernel_shape=k)
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], **attrs)
    model = _model(node, {"x": x}, {"w": w, "xz": xz}, 10)
    loaded = build_and_load(model, str(tmp_path), "taps")
    got = loaded.run({"x": x})["y"]
    want = conv_ref.conv2d(x.astype(np.int64) - int(xz), w.astype(np.int64), (stride, stride), pads, (dil, dil))
    np.testing.assert_array_equal(got, want)
    names = [kernel.entry_point for kernel in loaded.loaded.plan.kernels()]
    assert any("qpacktaps" in n for n in names) and any("qquad" in n for n in names), names


@pytest.mark.parametrize(
    "xdt,hw,k,stride,pads,dil,wz_per_channel",
    [
        ("uint8", [9, 14], [3, 3], 1, [1, 1, 1, 1], 1, False),
        ("int8", [12, 11], [5, 5], 2, [2, 1, 2, 3], 1, True),  # uneven pads, stride 2
        ("uint8", [10, 10], [3, 3], 1, [2, 2, 2, 2], 2, True),  # dilated
        ("int8", [1, 40], [1, 5], 1, [0, 2, 0, 2], 1, False),  # a 1-D window (H = 1)
    ],
)
def test_convinteger_depthwise(
    xdt: str, hw: List[int], k: List[int], stride: int, pads: List[int], dil: int, wz_per_channel: bool, tmp_path: Any
) -> None:
    # one filter per channel (group = C = OC): the row-by-row depthwise kernel (templates/qdwconv.c.j2) against
    # numpy's exact grouped convolution, over two images
    rng = np.random.default_rng(31)
    c = 6
    info = np.iinfo(xdt)
    x = rng.integers(int(info.min), int(info.max) + 1, [2, c] + hw).astype(xdt)
    w = rng.integers(-128, 128, [c, 1] + k).astype(np.int8)
    xz = np.array(rng.integers(int(info.min), int(info.max) + 1), xdt)
    wz = rng.integers(-128, 128, [c] if wz_per_channel else []).astype(np.int8)
    attrs = dict(pads=pads, strides=[stride, stride], dilations=[dil, dil], kernel_shape=k, group=c)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)
    loaded = build_and_load(_model(node, {"x": x}, {"w": w, "xz": xz, "wz": wz}, 10), str(tmp_path), "dw")
    got = loaded.run({"x": x})["y"]
    wd = w.astype(np.int64) - (wz[:, None, None, None] if wz_per_channel else wz)
    want = conv_ref.conv2d(x.astype(np.int64) - int(xz), wd, (stride, stride), pads, (dil, dil), c)
    np.testing.assert_array_equal(got, want)
    assert any("dwconvint" in kernel.entry_point for kernel in loaded.loaded.plan.kernels())


@pytest.mark.parametrize("xdt", ["uint8", "int8"])
def test_qlinearconv_depthwise_as_onnxruntime(xdt: str, tmp_path: Any) -> None:
    # QLinearConv with one filter per channel, per-channel weight scales and a bias, requantized as onnxruntime
    rng = np.random.default_rng(32)
    c = 8
    info = np.iinfo(xdt)
    feeds = {"x": rng.integers(int(info.min), int(info.max) + 1, [1, c, 9, 13]).astype(xdt)}
    consts = {
        "xs": np.array(0.03, np.float32),
        "xz": np.array(rng.integers(int(info.min), int(info.max) + 1), xdt),
        "w": rng.integers(-128, 128, [c, 1, 3, 3]).astype(np.int8),
        "ws": rng.uniform(0.002, 0.02, [c]).astype(np.float32),
        "wz": np.zeros([c], np.int8),
        "ys": np.array(0.05, np.float32),
        "yz": np.array(rng.integers(int(info.min), int(info.max) + 1), xdt),
        "b": rng.integers(-3000, 3000, [c]).astype(np.int32),
    }
    ins = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"]
    node = helper.make_node("QLinearConv", ins, ["y"], pads=[1, 1, 1, 1], strides=[2, 1], group=c)
    got = _same_as_ort(_model(node, feeds, consts), feeds, tmp_path)
    assert ((got > info.min) & (got < info.max)).any()
