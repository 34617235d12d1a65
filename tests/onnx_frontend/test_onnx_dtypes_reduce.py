"""ArgMax/ArgMin compare their data in its own type (the int64 of the op's dtypes is the result's): integers
above 2^24 and float64 against onnxruntime exactly; float16 data is compared in float32 (the front end's half pass,
frontend/half.py, as onnxruntime casts it) (the fuzzer found int64 data read as float32)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import host_target, run_ort  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.onnx import build_onnx  # noqa: E402


def _arg_model(dtype):
    nodes = [
        helper.make_node("ArgMax", ["x"], ["hi"], axis=1, keepdims=0),
        helper.make_node("ArgMin", ["x"], ["lo"], axis=-1, select_last_index=1),
    ]
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [3, 5, 4])],
        [
            helper.make_tensor_value_info("hi", TensorProto.INT64, [3, 4]),
            helper.make_tensor_value_info("lo", TensorProto.INT64, [3, 5, 1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "int8", "float64", "float32", "float16"])
def test_arg_reductions_compare_in_the_datas_type(tmp_path, dtype):
    rng = np.random.default_rng(5)
    x = rng.integers(0, 6, (3, 5, 4)).astype(dtype)  # ties, for select_last_index
    if dtype == "int64":
        x = x * np.array(2**40, dtype=dtype) + np.array(rng.integers(0, 3, x.shape), dtype=dtype)  # equal in float32
    model = _arg_model(dtype)
    path, bundle = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    build_onnx(path, bundle, targets=[host_target()], expect=False)
    got = load_model(bundle)(x=x)
    want = run_ort(model, {"x": x})
    np.testing.assert_array_equal(got["hi"], want[0])
    np.testing.assert_array_equal(got["lo"], want[1])


def test_long_reductions_keep_float32_accuracy(tmp_path):
    """Six million elements summed in order: a float accumulator was 0.2% off (the fuzzer's one-hour round)."""
    ops = ["ReduceSumSquare", "ReduceL2", "ReduceL1", "ReduceLogSum"]
    nodes = [helper.make_node(op, ["x"], [op], keepdims=1) for op in ops]
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1 << 20, 2])],
        [helper.make_tensor_value_info(op, TensorProto.FLOAT, [1, 1, 1]) for op in ops],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path, bundle = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    build_onnx(path, bundle, targets=[host_target()], expect=False)
    x = np.random.default_rng(3).uniform(0.0, 1.0, (3, 1 << 20, 2)).astype(np.float32)
    got = load_model(bundle)(x=x)
    x64 = x.astype(np.float64)
    want = {
        "ReduceSumSquare": np.sum(x64 * x64),
        "ReduceL2": np.sqrt(np.sum(x64 * x64)),
        "ReduceL1": np.sum(np.abs(x64)),
        "ReduceLogSum": np.log(np.sum(x64)),
    }
    for op in ops:
        np.testing.assert_allclose(got[op].reshape(()), want[op], rtol=1e-6, err_msg=op)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceLogSum"])
def test_float64_reductions_and_exp_log_match_onnxruntime(tmp_path, op):
    """float64 reductions (generated C in double: the library's are float32), after a float64 Exp, then Log and Sqrt:
    ReduceLogSumExp's body on float64."""
    from support.onnx_models import build_and_load, typed_model

    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [0, 2])
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Constant", [], ["ax"], value=axes),
        helper.make_node(op, ["e", "ax"], ["r"], keepdims=1),
        helper.make_node("Log", ["r"], ["l"]),
        helper.make_node("Sqrt", ["r"], ["y"]),
    ]
    model = typed_model(nodes, [("x", (3, 4, 5), TensorProto.DOUBLE)], ["l", "y"], 18, {})
    feeds = {"x": np.random.default_rng(8).standard_normal((3, 4, 5))}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for name, value in zip(["l", "y"], want):
        assert got[name].dtype == np.float64 and got[name].shape == value.shape
        np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_min_and_max_along_a_long_contiguous_axis_keep_nan_and_infinities(tmp_path, dtype):
    """ReduceMin (and ReduceMax in float64) along a contiguous axis of 16-lane running results (reduce.c.j2): rows of
    203 elements (not a multiple of 16) with a NaN in a lane's middle, in the tail, none, infinities, all one value;
    against numpy, whose min and max propagate NaN."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-50, 50, (6, 203)).astype(dtype)
    x[0, 37] = np.nan  # inside the lanes
    x[1, 202] = np.nan  # in the tail past the last 16
    x[2, 5], x[2, 100] = -np.inf, np.inf
    x[3, :] = 2.5
    x[4, 150] = -1e30 if dtype == "float64" else -3e38
    nodes = [
        helper.make_node("ReduceMin", ["x"], ["lo"], axes=[1], keepdims=0),
        helper.make_node("ReduceMax", ["x"], ["hi"], axes=[-1], keepdims=1),
    ]
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", elem, [6, 203])],
        [helper.make_tensor_value_info("lo", elem, [6]), helper.make_tensor_value_info("hi", elem, [6, 1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path, bundle = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    build_onnx(path, bundle, targets=[host_target()], expect=False)
    got = load_model(bundle)(x=x)
    np.testing.assert_array_equal(got["lo"], np.min(x, axis=1))
    np.testing.assert_array_equal(got["hi"], np.max(x, axis=1, keepdims=True))
    assert np.isnan(got["lo"][0]) and np.isnan(got["lo"][1]) and got["lo"][2] == -np.inf
