"""What the ONNX front end refuses, and how: UnsupportedModelError/ModelFileError naming the node, exit 2, nothing at
-o."""

from __future__ import annotations

import os

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import host_target, single_node  # noqa: E402

from svod_min.__main__ import main  # noqa: E402
from svod_min.error import ModelFileError, UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402


def _save(model, tmp_path, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path


def _refused(model, tmp_path, match):
    path = _save(model, tmp_path)
    with pytest.raises(UnsupportedModelError, match=match):
        lower_model(path)
    out = str(tmp_path / "m.svod")
    assert main(["build", path, "-o", out, "--target", host_target()]) == 2
    assert not os.path.exists(out) and not [f for f in os.listdir(str(tmp_path)) if f.endswith(".tmp")]


def test_unknown_op_names_node_op_and_opset(tmp_path):
    model = single_node("Multinomial", [("x", (3, 3))])
    _refused(model, tmp_path, r"node 0 \(Multinomial\), opset 17: op Multinomial is not supported")


def test_unsupported_attribute_value(tmp_path):
    model = single_node("AveragePool", [("x", (1, 1, 4, 4))], kernel_shape=[2, 2], count_include_pad=2)
    _refused(model, tmp_path, "count_include_pad=2")


def test_cast_to_a_float8_is_refused_by_dtype(tmp_path):
    # opset 19 brings float8 to Cast: at 17 the model is invalid and shape inference's type check refuses it
    model = single_node("Cast", [("x", (2,))], opset=19, to=TensorProto.FLOAT8E4M3FN)
    _refused(model, tmp_path, "float8")


def test_unknown_attribute_is_a_model_error(tmp_path):
    model = single_node("Relu", [("x", (2,))])
    model.graph.node[0].attribute.append(helper.make_attribute("bogus", 1))
    with pytest.raises(ModelFileError, match="bogus"):
        lower_model(_save(model, tmp_path))


def test_unsupported_dtype(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [3])],
    )
    _refused(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path, "is float64")


def test_3d_conv_refused(tmp_path):
    model = single_node("Conv", [("x", (1, 1, 3, 3, 3))], consts={"w": np.ones((1, 1, 1, 1, 1), np.float32)})
    _refused(model, tmp_path, "3-D windows")


def test_not_onnx_and_truncated_files(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b'{"svod_plan": 1}')
    with pytest.raises(ModelFileError):
        lower_model(str(junk))
    good = single_node("Relu", [("x", (4, 4))], consts={})
    data = good.SerializeToString()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError):
        lower_model(str(cut))
    assert main(["build", str(cut), "-o", str(tmp_path / "c.svod")]) == 2


def test_missing_external_data(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data

    model = single_node("Add", [("x", (64, 64))], consts={"b": np.ones((64, 64), np.float32)})
    convert_model_to_external_data(model, location="weights.bin", size_threshold=0)
    path = _save(model, tmp_path)
    os.remove(str(tmp_path / "weights.bin"))
    with pytest.raises(ModelFileError, match="weights.bin"):
        lower_model(path)


def _dynamic_model():
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_dynamic_dims_bound_or_refused(tmp_path):
    path = _save(_dynamic_model(), tmp_path)
    with pytest.raises(ModelFileError, match=r"--dim batch=SIZE \(or a range MIN\.\.MAX\)"):
        lower_model(path)
    assert lower_model(path, dims={"batch": 3}).doc["buffers"]["x"]["shape"] == [3, 8]
    assert lower_model(path, shapes={"x": [5, 8]}).doc["buffers"]["x"]["shape"] == [5, 8]
    with pytest.raises(ModelFileError, match="not 7"):
        lower_model(path, shapes={"x": [5, 7]})
    with pytest.raises(ModelFileError, match="--dim names"):
        lower_model(path, dims={"batch": 1, "nope": 2})
