"""build MODEL.onnx / run --input / --save by ONNX name, and the bundle running with no onnx and no numpy."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import host_target, run_ort  # noqa: E402

from svod_min.__main__ import main  # noqa: E402


def _model():
    nodes = [
        helper.make_node("Conv", ["gpu_0/data_0", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Flatten", ["r"], ["gpu_0/out_1"]),
    ]
    w = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("gpu_0/data_0", TensorProto.FLOAT, [1, 3, 5, 5])],
        [helper.make_tensor_value_info("gpu_0/out_1", TensorProto.FLOAT, [1, 50])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_build_run_verify_input_save(tmp_path, capsys):
    model = _model()
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    assert main(["build", path, "-o", out, "--target", host_target()]) == 0
    assert main(["run", out]) == 0
    assert "verify gpu_0/out_1: ok" in capsys.readouterr().out
    x = np.random.default_rng(3).standard_normal((1, 3, 5, 5)).astype(np.float32)
    np.save(str(tmp_path / "x.npy"), x)
    save = str(tmp_path / "saved")
    assert main(["run", out, "--input", "gpu_0/data_0=%s" % (tmp_path / "x.npy"), "--save", save]) == 0
    assert "verify: skipped" in capsys.readouterr().out
    got = np.load(os.path.join(save, "gpu_0_out_1.npy"))
    want = run_ort(model, {"gpu_0/data_0": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    np.save(str(tmp_path / "bad.npy"), x[:, :2])
    assert main(["run", out, "--input", "gpu_0/data_0=%s" % (tmp_path / "bad.npy")]) == 2
    assert "gpu_0/data_0" in capsys.readouterr().err


def test_build_reports_the_models_nodes_and_the_plans_ops(tmp_path):
    from svod_min.onnx import build_onnx

    path = str(tmp_path / "m.onnx")
    onnx.save(_model(), path)
    lines = []
    result = build_onnx(path, str(tmp_path / "m.svod"), targets=[host_target()], expect=False, progress=lines.append)
    assert result.nodes == 3  # Conv, Relu, Flatten: the Relu fuses into the Conv's store, the Flatten is a view
    assert 1 <= result.plan_ops < result.nodes
    assert any("3 model nodes, %d plan ops" % result.plan_ops in line for line in lines)


def test_bundle_runs_without_onnx_or_numpy(tmp_path):
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(_model(), path)
    assert main(["build", path, "-o", out, "--target", host_target()]) == 0
    blocker = tmp_path / "block"
    blocker.mkdir()
    for name in ("onnx", "numpy", "onnxruntime"):  # importing any of them fails in the child
        (blocker / name).mkdir()
        (blocker / name / "__init__.py").write_text("raise ImportError('blocked')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker), os.getcwd()]))
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", out], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "verify gpu_0/out_1: ok" in proc.stdout


def test_doc_op_table_is_the_registered_one():
    from svod_min.onnx import build  # noqa: F401 - fills the table
    from svod_min.onnx.frontend.table import markdown_table

    doc = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "onnx.md"), encoding="utf-8").read()
    begin, end = "<!-- onnx:ops -->\n", "\n<!-- /onnx:ops -->"
    assert doc[doc.index(begin) + len(begin) : doc.index(end)] == markdown_table()
