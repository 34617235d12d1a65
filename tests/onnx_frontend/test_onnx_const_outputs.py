"""A graph output that is a constant (folded at build) and that other nodes also read, through a view of it (a
CastLike, a Reshape) or directly: every reader sees the constant's value, not the output buffer before it is filled
(the fuzzer found Max(x, CastLike(c)) reading zeros where c was 0.5 and also an output)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import host_target, run_ort  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.onnx import build_onnx  # noqa: E402

N = helper.make_node


@pytest.mark.parametrize("through", ["CastLike", "Reshape", "Identity", "direct"])
def test_a_constant_output_read_by_other_nodes(tmp_path, through) -> None:
    c = np.full((4,), 0.5, dtype=np.float32)
    shape = np.array([1, 4], dtype=np.int64)
    nodes = {
        "CastLike": [N("CastLike", ["c", "x"], ["v"])],
        "Reshape": [N("Reshape", ["c", "s"], ["v"])],
        "Identity": [N("Identity", ["c"], ["v"])],
        "direct": [N("Identity", ["c"], ["v0"]), N("Add", ["v0", "c"], ["v"])],
    }[through]
    graph = helper.make_graph(
        [N("Constant", [], ["c"], value=numpy_helper.from_array(c)), *nodes, N("Max", ["x", "v"], ["y"])],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4]),
            helper.make_tensor_value_info("c", TensorProto.FLOAT, [4]),
        ],
        [numpy_helper.from_array(shape, "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    bundle = str(tmp_path / "m.svod")
    build_onnx(path, bundle, targets=[host_target()], expect=False)
    x = np.linspace(-1, 1.5, 12, dtype=np.float32).reshape(3, 4)
    got = load_model(bundle)(x=x)
    want = run_ort(model, {"x": x})
    np.testing.assert_array_equal(got["y"], want[0])
    np.testing.assert_array_equal(got["c"], c)
