"""``bench --only indices`` (svod_min/perf/benchmarks/bench_indices.py): its two models compute the same lookup as
numpy, its rows' fields and arithmetic (never the times themselves), its skip row."""

from __future__ import annotations

from typing import Any

import pytest

from svod_min.perf.bench_suite import KEYS
from svod_min.perf.benchmarks import bench_indices


def test_both_models_are_the_embedding_lookup() -> None:
    np = pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import numpy_helper

    by_input, constant, ids, table = bench_indices._models((50, 4, 2, 3))
    for model, feeds in ((by_input, {"table": table, "ids": ids}), (constant, {"table": table})):
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        got = session.run(None, feeds)[0]
        assert got.shape == (2, 3, 4)
        pos = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "pos"))
        np.testing.assert_allclose(got, table[ids] + pos, rtol=1e-6)
    assert not any(i.name == "ids" for i in constant.graph.input)


def test_rows_fields_and_goal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_indices, "missing_dependency", lambda: None)
    monkeypatch.setattr(bench_indices, "build", lambda directory, shape: (None, None))
    times = {"checked": 2.0, "constant": 1.9, "onnxruntime": 3.0}
    monkeypatch.setattr(bench_indices, "measure", lambda *a: dict(times))
    rows = bench_indices.rows(quick=False, threads=(1,))
    assert all(set(KEYS) <= set(r) for r in rows)
    check, peer = rows[0], rows[1]
    assert check["ratio"] == pytest.approx(0.95) and check["goal"] == ">= 0.98" and check["met"] is False
    assert peer["ratio"] == pytest.approx(1.5) and peer["goal"] == "info"
    quick = bench_indices.rows(quick=True, threads=(1,))
    assert quick[0]["goal"] == "info" and quick[0]["met"] is None  # a small table: the call, not the check
    times["checked"] = 1.9
    assert bench_indices.rows(threads=(2,))[0]["met"] is True


def test_skip_row_without_the_packages(monkeypatch: Any) -> None:
    monkeypatch.setattr(bench_indices, "missing_dependency", lambda: "skipped: needs onnxruntime")
    (row,) = bench_indices.rows(quick=True)
    assert row["peer"] == "skipped: needs onnxruntime" and row["ratio"] is None
