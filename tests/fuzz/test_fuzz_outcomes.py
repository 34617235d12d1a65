"""The fuzzer's "nonfinite" outcome: a difference from onnxruntime only where a value is NaN or infinite is not a
wrong answer when onnxruntime's value is the non-finite one, or when the model's constants hold NaN or infinities
(IEEE inf - inf is NaN; onnxruntime's clamping activations return a bound); otherwise it stays a wrong answer."""

from __future__ import annotations

import io
import json
import os
import sys
import zipfile

import pytest
from support.paths import REPO_DIR

if not os.path.isdir(os.path.join(REPO_DIR, "fuzz")):
    pytest.skip("the fuzz package lives in the checkout", allow_module_level=True)
np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
sys.path.insert(0, REPO_DIR)

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fuzz.case import _holds_nonfinite, _nonfinite_only  # noqa: E402


def _case(tmp_path, want, got):
    """A bundle holding ``want`` as its expected output and a saved output ``got``."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(want, dtype=np.float32))
    bundle = str(tmp_path / "m.svod")
    with zipfile.ZipFile(bundle, "w") as z:
        z.writestr("plan.json", json.dumps({"expect": {"y": {"npy": "expect/y.npy", "rtol": 1e-3, "atol": 1e-5}}}))
        z.writestr("expect/y.npy", buf.getvalue())
    saved = tmp_path / "outputs"
    saved.mkdir()
    np.save(str(saved / "y.npy"), np.asarray(got, dtype=np.float32))
    return bundle, str(saved)


def _model(tmp_path, weight):
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.asarray(weight, dtype=np.float32), "w")],
    )
    path = str(tmp_path / "m.onnx")
    onnx.save(helper.make_model(graph), path)
    return path


def test_constants_with_nan_or_inf_are_found(tmp_path):
    assert _holds_nonfinite(_model(tmp_path, [1.0, -np.inf]))
    assert not _holds_nonfinite(_model(tmp_path, [1.0, 2.0]))


def test_onnxruntimes_nonfinite_values_never_count(tmp_path):
    assert _nonfinite_only(*_case(tmp_path, [1.0, np.nan], [1.0, 0.5]))


def test_our_nan_against_a_finite_value_counts_only_with_nonfinite_constants(tmp_path):
    bundle, saved = _case(tmp_path, [1.0, 0.76], [1.0, np.nan])
    assert not _nonfinite_only(bundle, saved)  # a NaN of ours from finite weights is a wrong answer
    assert _nonfinite_only(bundle, saved, model_nonfinite=True)
    # a finite value of ours that differs stays wrong, whatever the constants hold
    assert not _nonfinite_only(*_case(_fresh(tmp_path), [1.0, 0.76], [2.0, np.nan]), model_nonfinite=True)


def _fresh(tmp_path):
    path = tmp_path / "other"
    path.mkdir()
    return path
