"""`run` on ONNX bundles: verification treats NaN == NaN at the same position (and only there), and the report
gives the bundle's memory as weights bytes and the arena's largest live set."""

from __future__ import annotations

import json
import math

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import graph_model, host_target, single_node  # noqa: E402

from svod_min.__main__ import main  # noqa: E402
from svod_min.planfile.data import Expectation  # noqa: E402
from svod_min.planfile.load import load_plan  # noqa: E402


def _bundle(model, tmp_path):
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    assert main(["build", path, "-o", out, "--target", host_target()]) == 0
    return out


def test_nan_outputs_verify_ok(tmp_path, capsys):
    """Sqrt of the seeded example inputs (uniform in [-1, 1]) is NaN at every negative one, in onnxruntime too."""
    out = _bundle(single_node("Sqrt", [("x", (4, 8))]), tmp_path)
    capsys.readouterr()
    loaded = load_plan(out)
    assert any(math.isnan(float(v)) for v in loaded.expectations[0].values)
    assert main(["run", out]) == 0
    assert "verify y: ok" in capsys.readouterr().out


def _with_values(loaded, values):
    e = loaded.expectations[0]
    loaded.expectations[0] = Expectation(e.buffer, values, e.rtol, e.atol)


def test_nan_where_a_number_is_expected_fails_and_the_reverse(tmp_path):
    out = _bundle(single_node("Sqrt", [("x", (4, 8))]), tmp_path)
    loaded = load_plan(out)
    loaded.plan.execute()
    values = list(loaded.expectations[0].values)
    nan_at = [i for i, v in enumerate(values) if math.isnan(v)]
    number_at = [i for i, v in enumerate(values) if not math.isnan(v)]
    assert nan_at and number_at
    assert loaded.verify()[0][1]
    _with_values(loaded, [1.0 if i == nan_at[0] else v for i, v in enumerate(values)])  # the output holds NaN there
    assert not loaded.verify()[0][1]
    _with_values(loaded, [float("nan") if i == number_at[0] else v for i, v in enumerate(values)])  # a number there
    assert not loaded.verify()[0][1]


def test_run_json_reports_weights_and_arena_peak(tmp_path, capsys):
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((16, 32)).astype(np.float32)
    w2 = rng.standard_normal((32, 8)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Exp", ["h"], ["e"]),
        helper.make_node("Add", ["h", "e"], ["s"]),
        helper.make_node("MatMul", ["s", "w2"], ["y"]),
    ]
    out = _bundle(graph_model(nodes, [("x", (4, 16))], ["y"], 13, {"w1": w1, "w2": w2}), tmp_path)
    capsys.readouterr()
    assert main(["run", out, "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    assert memory["weights_bytes"] == w1.nbytes + w2.nbytes
    # h, e and s (4x32 float32 each) are all live while Add runs; y is an output, not in the arena
    assert memory["arena_peak_live_bytes"] == 3 * 4 * 32 * 4
    assert main(["run", out]) == 0
    assert (
        "memory: weights %d bytes, arena peak live %d bytes" % (w1.nbytes + w2.nbytes, 1536) in capsys.readouterr().out
    )


def test_memory_figures_count_aliased_views_once():
    from svod_min.planfile.load import memory_figures

    class Buf:
        def __init__(self, nbytes):
            self.nbytes = nbytes

    specs = {
        "w": {"dtype": "float32", "shape": [10], "init": {"npy": "w.npy"}},
        "x": {"dtype": "float32", "shape": [4], "input": True},
        "y": {"dtype": "float32", "shape": [4], "output": True},
        "arena": {"dtype": "int8", "shape": [256]},
        "a": {"view_of": "arena", "offset": 0},
        "a2": {"view_of": "a", "offset": 16},
        "b": {"view_of": "arena", "offset": 64},
        "c": {"view_of": "arena", "offset": 0},
    }
    buffers = {
        "w": Buf(40),
        "x": Buf(16),
        "y": Buf(16),
        "arena": Buf(256),
        "a": Buf(64),
        "a2": Buf(16),
        "b": Buf(32),
        "c": Buf(64),
    }
    ops = [
        {"kernel": "k", "buffers": ["a", "x"]},
        {"kernel": "k", "buffers": ["a2", "w"]},
        {"copy": {"dst": "b", "src": "a"}},
        {"kernel": "k", "buffers": ["c", "b"]},
        {"kernel": "k", "buffers": ["y", "c"]},
    ]
    # a2 lies inside a: a + b = 96 bytes at op 2; c reuses a's bytes once a is dead: c + b = 96 as well
    assert memory_figures(specs, ops, buffers) == {"weights_bytes": 40, "arena_peak_live_bytes": 96}
