"""TopK (generated C, kernels/topk.py) against onnxruntime: ties in index order, NaN ranked above every number,
largest and smallest, an axis that is not the last, k as opset 1's attribute and as a constant input."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import host_target, run_ort  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx import build_onnx  # noqa: E402

SHAPE = (3, 9, 4)
#: (output prefix, k, axis, largest, sorted); sorted=0 is checked against onnxruntime's sorted=1 answer (svod_min
#: always sorts; onnxruntime's unsorted order is its heap's).
CASES = [
    ("a", 4, 1, 1, 1),
    ("b", 5, 1, 0, 1),
    ("c", 2, 0, 0, 1),
    ("d", 4, -1, 1, 1),
    ("e", 9, -2, 0, 1),
    ("f", 3, 1, 1, 0),
]


def _model(dtype, opset):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes, inits, outs = [], [], []
    for name, k, axis, largest, srt in CASES:
        attrs = {"axis": axis}
        if opset == 1:
            attrs["k"] = k
            inputs = ["x"]
        else:
            attrs.update(largest=largest, sorted=srt)
            inits.append(numpy_helper.from_array(np.array([k], np.int64), "k_" + name))
            inputs = ["x", "k_" + name]
        nodes.append(helper.make_node("TopK", inputs, [name + "v", name + "i"], **attrs))
        shape = list(SHAPE)
        shape[axis] = k
        outs += [
            helper.make_tensor_value_info(name + "v", elem, shape),
            helper.make_tensor_value_info(name + "i", TensorProto.INT64, shape),
        ]
    graph = helper.make_graph(nodes, "t", [helper.make_tensor_value_info("x", elem, list(SHAPE))], outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _data(dtype):
    rng = np.random.default_rng(11)
    x = rng.integers(-3, 4, SHAPE).astype(dtype)  # few values: many ties
    if dtype.startswith("float"):
        x[0, 2, 1] = x[0, 5, 1] = x[2, 0, 3] = np.nan
        x[1, 3, :] = -0.0
    return x


def _build_and_run(tmp_path, model, x):
    path, bundle = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    build_onnx(path, bundle, targets=[host_target()], expect=False)
    return load_model(bundle)(x=x)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_topk_equals_onnxruntime(tmp_path, dtype):
    model, x = _model(dtype, 11), _data(dtype)
    got = _build_and_run(tmp_path, model, x)
    sorted_model = _model(dtype, 11)
    for node in sorted_model.graph.node:
        for a in node.attribute:
            if a.name == "sorted":
                a.i = 1
    want = dict(zip([o.name for o in sorted_model.graph.output], run_ort(sorted_model, {"x": x})))
    for name, *_ in CASES:
        np.testing.assert_array_equal(got[name + "i"], want[name + "i"], err_msg=name)
        np.testing.assert_array_equal(got[name + "v"], want[name + "v"], err_msg=name)
        assert got[name + "v"].dtype == np.dtype(dtype)


def test_topk_opset1_takes_k_from_its_attribute(tmp_path):
    model, x = _model("float32", 1), _data("float32")
    got = _build_and_run(tmp_path, model, x)
    want = dict(zip([o.name for o in model.graph.output], run_ort(model, {"x": x})))
    for name, *_ in CASES:
        np.testing.assert_array_equal(got[name + "i"], want[name + "i"], err_msg=name)
        np.testing.assert_array_equal(got[name + "v"], want[name + "v"], err_msg=name)


def test_topk_refuses_a_k_known_only_at_run_time(tmp_path):
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"])
    graph = helper.make_graph(
        [node],
        "t",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("v", TensorProto.FLOAT, [2, None]),
            helper.make_tensor_value_info("i", TensorProto.INT64, [2, None]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 7
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError) as err:
        build_onnx(path, str(tmp_path / "m.svod"), targets=[host_target()], expect=False)
    assert "--pin k=" in str(err.value)
