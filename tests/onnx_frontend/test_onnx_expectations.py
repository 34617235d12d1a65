"""The expectations an ONNX build records from onnxruntime (svod_min/onnx/build.py): their tolerance follows what
the model computes in (float32, a half precision, run-time quantization), and a bundle built from a quantized model
verifies against its own recording."""

from __future__ import annotations

import json
import zipfile
from typing import Any, Dict

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import typed_model  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.compiler.targets import host_target  # noqa: E402
from svod_min.onnx.build import RTOL, RTOL_QUANTIZED, build_onnx  # noqa: E402


def _float_mlp() -> Any:
    rng = np.random.default_rng(3)
    consts = {
        "w1": rng.normal(0, 0.3, [16, 32]).astype(np.float32),
        "w2": rng.normal(0, 0.3, [32, 10]).astype(np.float32),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    return typed_model(nodes, [("x", [4, 16], TensorProto.FLOAT)], ["y"], 13, consts)


def _weight_only_int8() -> Any:
    """int8 weights dequantized at build time: nothing is quantized at run time, so nothing can flip a step."""
    rng = np.random.default_rng(4)
    consts = {
        "wq": rng.integers(-127, 128, [16, 10]).astype(np.int8),
        "ws": np.array(0.01, np.float32),
        "wz": np.array(0, np.int8),
    }
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"]),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    return typed_model(nodes, [("x", [4, 16], TensorProto.FLOAT)], ["y"], 13, consts)


def _recorded(model: Any, tmp_path: Any, name: str) -> Dict[str, Any]:
    src, out = str(tmp_path / (name + ".onnx")), str(tmp_path / (name + ".svod"))
    onnx.save(model, src)
    build_onnx(src, out, targets=[host_target()])
    with zipfile.ZipFile(out) as bundle:
        return json.loads(bundle.read("plan.json"))["expect"]["y"]


def test_a_float_model_keeps_the_float_tolerance(tmp_path: Any) -> None:
    assert _recorded(_float_mlp(), tmp_path, "float")["rtol"] == RTOL
    assert _recorded(_weight_only_int8(), tmp_path, "weights")["rtol"] == RTOL


def test_run_time_quantization_records_the_quantized_tolerance(tmp_path: Any) -> None:
    from onnxruntime.quantization import quantize_dynamic

    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(_float_mlp(), src)
    quantize_dynamic(src, dst)
    expect = _recorded(onnx.load(dst), tmp_path, "dynamic")
    assert expect["rtol"] == RTOL_QUANTIZED
    with zipfile.ZipFile(str(tmp_path / "dynamic.svod")) as bundle:
        want = np.load(bundle.open(expect["npy"]))
    assert expect["atol"] == pytest.approx(RTOL_QUANTIZED * float(np.max(np.abs(want))))
    model = load_model(str(tmp_path / "dynamic.svod"))
    model.run({})  # the example inputs the expectations were recorded for
    checks = model.loaded.verify()
    assert checks and all(ok for _, ok, _ in checks), checks
