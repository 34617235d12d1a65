"""``bench --only onnx_ops`` (svod_min/perf/benchmarks/bench_onnx_ops.py): its case table, its selection, its rows on
two tiny cases at one thread in quick mode (fields and arithmetic, never the times themselves), its skip rows."""

from __future__ import annotations

from typing import Any

import pytest

from svod_min.perf.bench_suite import KEYS
from svod_min.perf.benchmarks import bench_onnx_ops

TINY_CASES = (
    bench_onnx_ops.OpCase("Softmax axis 1 of 2x5x7", "Softmax", (2, 5, 7), {"axis": 1}),
    bench_onnx_ops.OpCase(
        "Resize linear x2 1x2x3x5",
        "Resize",
        (1, 2, 3, 5),
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel"},
        (1.0, 1.0, 2.0, 2.0),
    ),
)


def test_select_and_quick_cases() -> None:
    assert bench_onnx_ops.select("") == bench_onnx_ops.CASES
    picked = bench_onnx_ops.select("LRN, cubic")
    assert picked and all(c.op == "LRN" or c.attrs.get("mode") == "cubic" for c in picked)
    assert bench_onnx_ops.select("no such op") == ()
    quick = bench_onnx_ops.quick_cases(bench_onnx_ops.CASES)
    assert {c.op for c in quick} == {c.op for c in bench_onnx_ops.CASES}
    assert {c.attrs.get("mode") for c in quick if c.op == "Resize"} == {"nearest", "linear", "cubic"}
    assert len(quick) < len(bench_onnx_ops.CASES)


def test_every_case_is_a_valid_model() -> None:
    pytest.importorskip("numpy")
    onnx = pytest.importorskip("onnx")
    for case in bench_onnx_ops.CASES:
        model = bench_onnx_ops.make_model(case)
        onnx.checker.check_model(model)
        assert model.graph.node[0].op_type == case.op


def test_rows_of_tiny_cases() -> None:
    pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    table = bench_onnx_ops.rows(quick=True, threads=(1,), cases=TINY_CASES)
    assert [set(r) for r in table] == [set(KEYS)] * len(table)
    assert len(table) == 2 * len(TINY_CASES) + 1 and "load average" in table[-1]["measure"]
    for run, plan in zip(table[0:-1:2], table[1:-1:2]):
        assert "median run" in run["measure"] and "plan execute alone" in plan["measure"]
        assert run["goal"] == "info (tiny tensor)" and run["met"] is None and plan["met"] is None
        for row in (run, plan):
            assert row["svod_min"] > 0 and row["peer_value"] > 0
            assert row["ratio"] == pytest.approx(row["peer_value"] / row["svod_min"], rel=0.02, abs=0.01)
    text = bench_onnx_ops.markdown(table)
    assert text.count("\n| Softmax axis 1 of 2x5x7 | 1 |") == 1 and "Resize linear x2 1x2x3x5" in text


def test_case_rows_apply_the_goal_to_large_tensors() -> None:
    case = bench_onnx_ops.CASES[2]  # 64x128x128
    run, plan = bench_onnx_ops.case_rows(case, 2, {"svod": 2.0, "plan": 1.0, "ort": 1.0}, "peer")
    assert run["ratio"] == 0.5 and run["met"] is False and run["goal"] == ">= 0.7x peer"
    assert plan["ratio"] == 1.0 and plan["met"] is None and "2 threads" in plan["measure"]


def test_skip_rows_without_a_dependency(monkeypatch: Any) -> None:
    monkeypatch.setattr(bench_onnx_ops, "missing_dependency", lambda: "skipped: needs onnxruntime")
    table = bench_onnx_ops.rows(cases=TINY_CASES)
    assert [r["peer"] for r in table] == ["skipped: needs onnxruntime"] * len(TINY_CASES)
    assert all(r["svod_min"] is None and r["met"] is None for r in table)
