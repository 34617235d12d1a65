"""Empty tensors (a 0-sized dim) through each op family against onnxruntime: as inputs of the model and as
intermediates (a Slice that selects nothing, a Split with an empty part); reductions over nothing give their
identity, Concat skips an empty part, MatMul/Gemm with K = 0 give zeros (+ C); an op that cannot take an empty input
is refused at build by name."""

from __future__ import annotations

import os

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import graph_model, host_target, run_ort  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx import build_onnx  # noqa: E402
from svod_min.planfile.load import load_plan  # noqa: E402

N = helper.make_node
REDUCE = ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceLogSum"]


def _check(model, tmp_path, feeds, expect=False):
    """svod_min's outputs equal onnxruntime's: the same shapes (empty ones included) and values (inf and NaN too)."""
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    bundle = str(tmp_path / "m.svod")
    build_onnx(path, bundle, targets=[host_target()], expect=expect)
    got = load_model(bundle).run(feeds)
    want = run_ort(model, feeds)
    names = [o.name for o in model.graph.output]
    for name, w in zip(names, want):
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
    return bundle, got


def test_empty_model_inputs_through_each_op_family(tmp_path) -> None:
    nodes = [
        N("Relu", ["x"], ["relu"]),
        N("Add", ["x", "w"], ["add"]),
        N("Transpose", ["x"], ["transpose"], perm=[2, 0, 1]),
        N("Reshape", ["x", "shape"], ["reshape"]),
        N("Softmax", ["x"], ["softmax"], axis=1),
        N("Concat", ["x", "z"], ["concat"], axis=1),
        N("MatMul", ["a", "b"], ["matmul"]),
        N("Gemm", ["a", "b", "c"], ["gemm"], beta=0.5),
        N("Conv", ["img", "kernel"], ["conv"]),
        N("MaxPool", ["img"], ["maxpool"], kernel_shape=[2, 2]),
    ] + [N(op, ["x", "axes"], [op.lower()]) for op in REDUCE]
    inputs = [("x", (2, 0, 3)), ("w", (1, 3)), ("z", (2, 2, 3)), ("a", (3, 0)), ("b", (0, 4)), ("c", (4,))]
    inputs.append(("img", (0, 3, 5, 5)))
    consts = {
        "shape": np.array([6, 0], np.int64),  # 0 copies the input's dim: [6, 0]
        "axes": np.array([1], np.int64),
        "kernel": np.ones((2, 3, 3, 3), np.float32),
    }
    outputs = [n.output[0] for n in nodes]
    model = graph_model(nodes, inputs, outputs, 18, consts)
    rng = np.random.default_rng(0)
    feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in inputs}
    _, got = _check(model, tmp_path, feeds)
    assert got["reducesum"].shape == (2, 1, 3) and (got["reducesum"] == 0).all()
    assert (got["reduceprod"] == 1).all() and (got["reducemax"] == -np.inf).all() and (got["reducemin"] == np.inf).all()
    np.testing.assert_array_equal(got["concat"], feeds["z"])  # the empty part adds nothing
    np.testing.assert_array_equal(got["gemm"], np.broadcast_to(0.5 * feeds["c"], (3, 4)))


def test_empty_intermediates_slice_split_and_k_zero(tmp_path) -> None:
    nodes = [
        N("Slice", ["x", "two", "two", "one"], ["nothing"]),  # x[:, 2:2]: [2, 0]
        N("Relu", ["nothing"], ["relu"]),
        N("Concat", ["nothing", "x"], ["concat"], axis=1),
        N("ReduceSum", ["nothing", "one"], ["sum"]),
        N("ReduceMax", ["nothing", "one"], ["max"]),
        N("ReduceMean", ["nothing", "one"], ["mean"]),
        N("Split", ["x", "parts"], ["p", "q", "r"], axis=1),
        N("Slice", ["x", "zero", "three", "one"], ["x3"]),
        N("Mul", ["r", "x3"], ["scaled"]),
        N("MatMul", ["nothing", "b"], ["matmul"]),
        N("Gemm", ["nothing", "bt", "x3"], ["gemm"], alpha=2.0, beta=0.5, transB=1),
        N("Transpose", ["nothing"], ["transpose"]),
    ]
    consts = {
        "zero": np.array([0], np.int64),
        "one": np.array([1], np.int64),
        "two": np.array([2], np.int64),
        "three": np.array([3], np.int64),
        "parts": np.array([1, 0, 3], np.int64),
        "b": np.ones((0, 5), np.float32),
        "bt": np.ones((3, 0), np.float32),
    }
    outputs = ["nothing", "relu", "concat", "sum", "max", "mean", "p", "q", "scaled", "matmul", "gemm", "transpose"]
    model = graph_model(nodes, [("x", (2, 4))], outputs, 18, consts)
    feeds = {"x": np.arange(8, dtype=np.float32).reshape(2, 4) - 3}
    bundle, got = _check(model, tmp_path, feeds, expect=True)
    assert got["q"].shape == (2, 0) and got["nothing"].shape == (2, 0)
    np.testing.assert_array_equal(got["gemm"], 0.5 * feeds["x"][:, :3])
    assert (got["mean"] == 0).all()  # onnxruntime's choice: the spec leaves a mean over nothing undefined
    # the bundle's recorded expectations (from onnxruntime) include the empty outputs, and verify
    loaded = load_plan(bundle)
    loaded.plan.execute()
    loaded.plan.synchronize()
    checks = loaded.verify()
    assert len(checks) == len(outputs) and all(ok for _, ok, _ in checks), checks


def test_the_issues_slice_to_an_empty_output_runs(tmp_path) -> None:
    """The issue's case: a Slice yielding [1, 0] built, then `run` refused to dispatch its kernel."""
    model = graph_model(
        [N("Slice", ["x", "s", "e", "ax"], ["y"])],
        [("x", (1, 4))],
        ["y"],
        17,
        {"s": np.array([3], np.int64), "e": np.array([1], np.int64), "ax": np.array([1], np.int64)},
    )
    bundle, got = _check(model, tmp_path, {"x": np.ones((1, 4), np.float32)})
    assert got["y"].shape == (1, 0)
    assert len(load_plan(bundle).plan.prepared_kernels()) == 0  # no kernel runs for nothing


def test_an_op_that_cannot_take_an_empty_input_is_refused_at_build_by_name(tmp_path) -> None:
    model = graph_model(
        [N("LSTM", ["x", "w", "r"], ["y", "h"], hidden_size=2)],
        [("x", (0, 1, 2))],
        ["y", "h"],
        17,
        {"w": np.ones((1, 8, 2), np.float32), "r": np.ones((1, 8, 2), np.float32)},
    )
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(
        UnsupportedModelError, match=r"node 0 \(LSTM\).*input 'x' is empty \(shape \[0, 1, 2\]\)"
    ) as err:
        build_onnx(path, str(tmp_path / "m.svod"), targets=[host_target()], expect=False)
    assert err.value.exit_code == 2
    assert not os.path.exists(str(tmp_path / "m.svod"))


def test_an_empty_string_input_is_refused_by_name(tmp_path) -> None:
    """Its node folds away (an empty result), so the refusal comes from the input itself, not from a traceback."""
    graph = helper.make_graph(
        [N("RegexFullMatch", ["x"], ["y"], pattern="a.*")],
        "t",
        [helper.make_tensor_value_info("x", onnx.TensorProto.STRING, [0])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.BOOL, [0])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError, match="model input 'x' has dtype object"):
        build_onnx(path, str(tmp_path / "m.svod"), targets=[host_target()], expect=False)
