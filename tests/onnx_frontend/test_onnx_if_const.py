"""An If whose condition is a constant once the inputs are bound (a test on a shape, a constant flag) builds as the
branch it takes, matching onnxruntime; an If on a run-time condition is still refused by name."""

from __future__ import annotations

import os
from typing import Any, List

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402


def _branches() -> List[Any]:
    """then: y = x + c (c the branch's own initializer, t a name the else branch uses too); else: y = x * 2."""
    c = numpy_helper.from_array(np.arange(3, dtype=np.float32), "c")
    then = helper.make_graph(
        [helper.make_node("Add", ["x", "c"], ["t"]), helper.make_node("Relu", ["t"], ["out"])],
        "then",
        [],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
        [c],
    )
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    other = helper.make_graph(
        [helper.make_node("Mul", ["x", "two"], ["t"])],
        "else",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])],
        [two],
    )
    return [then, other]


def _model(cond_nodes: List[Any], inits: List[Any], cond: str = "cond") -> Any:
    then, other = _branches()
    nodes = cond_nodes + [
        helper.make_node("If", [cond], ["y"], then_branch=then, else_branch=other),
        helper.make_node("Sigmoid", ["y"], ["z"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ifs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


SHAPE_TEST = [  # cond = shape(x)[0] > 1: true once x is bound
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
    helper.make_node("Greater", ["d0", "one"], ["cond"]),
]
SHAPE_INITS = [
    numpy_helper.from_array(np.array(0, np.int64), "zero"),
    numpy_helper.from_array(np.array(1, np.int64), "one"),
]


@pytest.mark.parametrize(
    "nodes,inits",
    [
        (SHAPE_TEST, SHAPE_INITS),
        ([], [numpy_helper.from_array(np.array(False), "cond")]),
    ],
    ids=["shape-test-then", "constant-false-else"],
)
def test_constant_if_takes_its_branch(nodes: List[Any], inits: List[Any], tmp_path: Any) -> None:
    model = _model(nodes, inits)
    x = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    path = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, path)
    assert "If" not in [n.op for n in read_graph(path, {}, {}).nodes]
    got = build_and_load(model, str(tmp_path)).run({"x": x})["z"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_runtime_condition_still_refused(tmp_path: Any) -> None:
    model = _model([], [])
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    path = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError, match=r"node 0 \(If\), opset 13: op If is not supported"):
        lower_model(path, {}, {})
