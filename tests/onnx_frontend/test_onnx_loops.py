"""Loop and Scan with a trip count known at build time, unrolled at build (frontend/loops.py), against onnxruntime;
a loop whose body decides when to stop is refused by name."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402

RNG = np.random.default_rng(7)
F = TensorProto.FLOAT


def _model(node, inputs, outputs, consts, opset=17):
    graph = helper.make_graph(
        [node],
        "loops",
        [helper.make_tensor_value_info(n, F, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _loop_body(cond_out_from_input=True):
    # carried: acc = acc * 0.5 + x * i ; scan output: acc itself, every iteration
    nodes = [
        helper.make_node("Cast", ["i"], ["i_f"], to=F),
        helper.make_node("Mul", ["x", "i_f"], ["xi"]),
        helper.make_node("Mul", ["acc_in", "half"], ["acc_half"]),
        helper.make_node("Add", ["acc_half", "xi"], ["acc_out"]),
        helper.make_node("Identity", ["acc_out"], ["scan_out"]),
    ]
    if cond_out_from_input:
        nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    else:  # stop once the sum passes a bound: the trip count depends on the data
        nodes += [
            helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "bound"], ["cond_out"]),
        ]
    return helper.make_graph(
        nodes,
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", F, [2, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", F, [2, 3]),
            helper.make_tensor_value_info("scan_out", F, [2, 3]),
        ],
        [
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
            numpy_helper.from_array(np.array(9.0, np.float32), "bound"),
        ],
    )


def _loop_model(body):
    node = helper.make_node("Loop", ["M", "cond", "acc0"], ["acc", "history"], body=body)
    consts = {"M": np.array(5, np.int64), "cond": np.array(True)}
    model = _model(node, [("x", [2, 3]), ("acc0", [2, 3])], ["acc", "history"], consts)
    del model.graph.output[:]  # onnx infers the Loop's outputs without shapes, which its checker refuses
    model.graph.output.extend(
        [helper.make_tensor_value_info("acc", F, [2, 3]), helper.make_tensor_value_info("history", F, [5, 2, 3])]
    )
    return model


def test_loop_with_a_constant_trip_count_matches_onnxruntime(tmp_path):
    model = _loop_model(_loop_body())
    feeds = {n: RNG.standard_normal((2, 3)).astype(np.float32) for n in ("x", "acc0")}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    assert got["history"].shape == (5, 2, 3)
    np.testing.assert_allclose(got["acc"], want[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["history"], want[1], rtol=1e-6, atol=1e-6)


def test_loop_whose_body_decides_when_to_stop_is_refused_by_name(tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(_loop_model(_loop_body(cond_out_from_input=False)), path)
    with pytest.raises(UnsupportedModelError, match="Loop"):
        from svod_min.onnx.build import OPS, check_graph

        check_graph(read_graph(path, {}, {}, OPS))


@pytest.mark.parametrize("reverse, out_axis", [(0, 0), (1, 1)])
def test_scan_matches_onnxruntime(tmp_path, reverse, out_axis):
    # a running sum over the rows of x (4 x 3): state = state + row; the scan output is each state
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["seen"])],
        "body",
        [helper.make_tensor_value_info("s_in", F, [3]), helper.make_tensor_value_info("row", F, [3])],
        [helper.make_tensor_value_info("s_out", F, [3]), helper.make_tensor_value_info("seen", F, [3])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "all"],
        body=body,
        num_scan_inputs=1,
        scan_input_directions=[reverse],
        scan_output_axes=[out_axis],
    )
    model = _model(node, [("s0", [3]), ("x", [4, 3])], ["s", "all"], {})
    feeds = {"s0": RNG.standard_normal(3).astype(np.float32), "x": RNG.standard_normal((4, 3)).astype(np.float32)}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    np.testing.assert_allclose(got["s"], want[0], rtol=1e-6, atol=1e-6)
    assert got["all"].shape == want[1].shape
    np.testing.assert_allclose(got["all"], want[1], rtol=1e-6, atol=1e-6)
