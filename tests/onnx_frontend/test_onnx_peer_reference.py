"""onnxruntime as an exact reference for integer-quantized models (svod_min/onnx/peer_reference.py): the rewritten
model computes the exact integer results on every host, a QDQ model with int8 activations keeps its float semantics,
and a build records expectations that the bundle verifies against, on products that saturate a 16-bit lane."""

from __future__ import annotations

import json
import zipfile
from typing import Any, Dict

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import typed_model  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.compiler.targets import host_target  # noqa: E402
from svod_min.onnx.build import build_onnx  # noqa: E402
from svod_min.onnx.peer_reference import with_unsigned_weights  # noqa: E402


def _session_run(model: Any, feeds: Dict[str, Any], optimize: bool = True) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def _saturating_matmul(b_as_input: bool) -> Any:
    """uint8 A of 255s against int8 B of 127s: every pair of products (64,770) is past a 16-bit lane."""
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    inputs = [("a", [3, 8], TensorProto.UINT8)] + ([("b", [8, 5], TensorProto.INT8)] if b_as_input else [])
    consts = {} if b_as_input else {"b": _weights()}
    return typed_model([node], inputs, ["y"], 13, consts)


def _weights() -> Any:
    w = np.full([8, 5], 127, np.int8)
    w[:, 1] = -128
    w[::2, 2] = -7
    return w


def _activations() -> Any:
    a = np.full([3, 8], 255, np.uint8)
    a[1, ::3] = 3
    return a


@pytest.mark.parametrize("b_as_input", [False, True])
def test_rewritten_matmulinteger_is_exact(b_as_input: bool) -> None:
    feeds = {"a": _activations()}
    if b_as_input:
        feeds["b"] = _weights()
    model, shifted = with_unsigned_weights(_saturating_matmul(b_as_input), feeds)
    exact = feeds["a"].astype(np.int64) @ _weights().astype(np.int64)
    np.testing.assert_array_equal(_session_run(model, shifted), exact)
    if b_as_input:
        assert shifted["b"].dtype == np.uint8 and feeds["b"].dtype == np.int8  # the caller's feed is left alone


def _qdq_int8_activations() -> Any:
    """A per-channel QDQ convolution with int8 activations, the form quantize_static writes with QInt8."""
    rng = np.random.default_rng(7)
    consts = {
        "xs": np.array(0.01, np.float32),
        "xz": np.array(-3, np.int8),
        "wq": rng.integers(-127, 128, [6, 4, 3, 3]).astype(np.int8),
        "ws": rng.uniform(0.002, 0.01, [6]).astype(np.float32),
        "wz": np.zeros([6], np.int8),
        "ys": np.array(0.05, np.float32),
        "yz": np.array(5, np.int8),
    }
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
        helper.make_node("Conv", ["xd", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "ys", "yz"], ["cq"]),
        helper.make_node("DequantizeLinear", ["cq", "ys", "yz"], ["y"]),
    ]
    return typed_model(nodes, [("x", [1, 4, 7, 7], TensorProto.FLOAT)], ["y"], 13, consts)


def test_rewritten_qdq_model_keeps_its_values() -> None:
    model = _qdq_int8_activations()
    feeds = {"x": np.random.default_rng(8).uniform(-1.2, 1.2, [1, 4, 7, 7]).astype(np.float32)}
    rewritten, _ = with_unsigned_weights(model, feeds)
    int8 = [t.name for t in rewritten.graph.initializer if t.data_type == TensorProto.INT8]
    assert not int8
    # unoptimized, onnxruntime runs DQ -> float Conv -> Q: the model's own semantics, before and after the rewrite
    np.testing.assert_array_equal(_session_run(rewritten, feeds, False), _session_run(model, feeds, False))
    # optimized (fused to its integer kernels), the rewritten model gives the same values within float rounding
    np.testing.assert_allclose(_session_run(rewritten, feeds), _session_run(model, feeds, False), atol=0.0501)


def test_a_saturating_build_verifies_against_its_recording(tmp_path: Any) -> None:
    src, out = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(_qdq_int8_activations(), src)
    build_onnx(src, out, targets=[host_target()])
    with zipfile.ZipFile(out) as bundle:
        expect = json.loads(bundle.read("plan.json"))["expect"]["y"]
        want = np.load(bundle.open(expect["npy"]))
    model = load_model(out)
    got = model.run({})["y"]  # the example inputs the expectations were recorded for
    np.testing.assert_array_equal(want, got)
    checks = model.loaded.verify()
    assert checks and all(ok for _, ok, _ in checks), checks
