"""``bench --only tiny`` (svod_min/perf/benchmarks/bench_tiny.py): its models are valid and run in onnxruntime, its
rows' fields and arithmetic (never the times themselves), its markdown, its skip rows, one quick row end to end."""

from __future__ import annotations

import pytest

from svod_min.perf.bench_suite import KEYS
from svod_min.perf.benchmarks import bench_tiny


def test_every_model_is_valid_and_runs_in_onnxruntime() -> None:
    np = pytest.importorskip("numpy")
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    for name, make, shape in bench_tiny.MODELS:
        model = make()
        onnx.checker.check_model(model, full_check=True)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        (y,) = session.run(None, {"x": np.zeros(shape, np.float32)})
        assert y.ndim >= 1 and np.all(np.isfinite(y)), name
    vad = [n.op_type for n in bench_tiny.vad_model().graph.node]
    assert vad.count("Conv") == 2 and "LSTM" in vad and vad[-1] == "Sigmoid"


def test_rows_and_markdown_from_times() -> None:
    rows = bench_tiny.model_rows("Relu 1x16 (the call alone)", {"svod": 4.0, "plan": 1.0, "ort": 6.0}, "ort 1.0")
    assert [set(r) for r in rows] == [set(KEYS)] * 3
    run, plan, overhead = rows
    assert (run["svod_min"], run["peer_value"], run["ratio"], run["met"]) == (4.0, 6.0, 1.5, True)
    assert (plan["ratio"], plan["goal"], plan["met"]) == (6.0, "info", None)
    assert overhead["measure"].startswith("tiny: per-run overhead") and overhead["svod_min"] == 4.0
    slow = bench_tiny.model_rows("MLP", {"svod": 8.0, "plan": 2.0, "ort": 6.0}, "ort 1.0")
    assert len(slow) == 2 and slow[0]["met"] is False and slow[0]["ratio"] == 0.75
    table = bench_tiny.markdown(rows + slow)
    assert "| Relu 1x16 (the call alone) | 4.0 | 1.0 | 6.0 | 1.50 |" in table
    assert "| MLP | 8.0 | 2.0 | 6.0 | 0.75 |" in table


def test_without_a_dependency_every_model_is_a_skip_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_tiny, "missing_dependency", lambda: "onnxruntime is not installed")
    rows = bench_tiny.rows(quick=True)
    assert len(rows) == len(bench_tiny.MODELS)
    assert all(
        r["svod_min"] is None and r["met"] is None and "onnxruntime is not installed" in r["measure"] for r in rows
    )


def test_one_quick_row_end_to_end(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    if bench_tiny.missing_dependency():
        pytest.skip(bench_tiny.missing_dependency())
    rows = bench_tiny.rows(quick=True, only="relu")
    run = rows[0]
    assert run["measure"].startswith("tiny Relu") and "failed" not in run["measure"], run["measure"]
    assert run["svod_min"] > 0 and run["peer_value"] > 0
    assert run["ratio"] == pytest.approx(run["peer_value"] / run["svod_min"], rel=0.02)
    assert rows[-1]["measure"].startswith("onnx op: load average")
