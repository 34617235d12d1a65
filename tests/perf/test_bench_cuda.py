"""bench/bench_cuda.py: no driver gives one "not available" row; the stand-in driver gives every row.

Timings are only checked for being positive and finite, never against goals:
the stand-in driver (``tests/support/fake_libcuda.c``) runs on the host, so its numbers
mean nothing. The fake reports no device until ``fake_configure`` is called in
the same process, so the fake-driver run happens in a child whose
``sitecustomize`` (a temp dir on ``PYTHONPATH``) does that; the benchmark's own
cold-load child inherits it too.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from typing import Any, Dict, Iterator, List

import pytest
from support.cuda_emu import build_fake_libcuda, find_cc
from support.paths import REPO as REPO_PATH

from svod_min.devices import cuda
from svod_min.perf.bench_suite import KEYS, run_suite

ROOT = REPO_PATH
BENCH = ROOT / "bench" / "bench_cuda.py"
HAVE_CUPY = importlib.util.find_spec("cupy") is not None


def load_bench() -> Any:
    """The bench module, loaded the way ``svod_min.perf.bench_suite`` loads it."""
    spec = importlib.util.spec_from_file_location("svod_bench_bench_cuda_test", str(BENCH))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


@pytest.fixture
def fresh_drivers() -> Iterator[None]:
    """Forget cached drivers before and after: the env settings below must be read again."""
    cuda.reset_driver_cache()
    yield
    cuda.reset_driver_cache()


def assert_not_available(table: List[Dict[str, Any]], why: str) -> None:
    assert len(table) == 1, table
    row = table[0]
    assert set(KEYS) <= set(row)
    assert row["measure"].startswith("CUDA: not available") and why in row["measure"]
    assert row["svod_min"] is None and row["peer_value"] is None and row["met"] is None


# --- no driver -----------------------------------------------------------------------------------


def test_svod_cuda_0_gives_the_not_available_row(monkeypatch: pytest.MonkeyPatch, fresh_drivers: None) -> None:
    monkeypatch.setenv("SVOD_CUDA", "0")
    assert_not_available(load_bench().rows(quick=True), "SVOD_CUDA=0")


def test_missing_library_gives_the_not_available_row(monkeypatch: pytest.MonkeyPatch, fresh_drivers: None) -> None:
    monkeypatch.delenv("SVOD_CUDA", raising=False)
    monkeypatch.setenv("SVOD_CUDA_LIBRARY", "/nonexistent/libcuda-bench.so.1")
    assert_not_available(load_bench().rows(quick=True), "/nonexistent/libcuda-bench.so.1")


def test_suite_runs_it_without_a_driver(monkeypatch: pytest.MonkeyPatch, fresh_drivers: None) -> None:
    monkeypatch.setenv("SVOD_CUDA", "0")
    table = run_suite(str(ROOT / "bench"), quick=True, only=["bench_cuda"])
    assert [r["source"] for r in table] == ["bench_cuda.py"]
    assert table[0]["measure"].startswith("CUDA: not available"), table


def test_standalone_without_a_driver_exits_0() -> None:
    env = dict(os.environ, SVOD_CUDA="0")
    proc = subprocess.run([sys.executable, str(BENCH), "--quick"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "CUDA: not available (CUDA disabled by SVOD_CUDA=0)" in proc.stdout


# --- helpers -------------------------------------------------------------------------------------


def test_rate_row_ratio_is_ours_over_raw() -> None:
    bench = load_bench()
    good = bench.rate_row("x", 9.5, 10.0, "raw")
    assert good["ratio"] == 0.95 and good["met"] is True
    bad = bench.rate_row("x", 8.0, 10.0, "raw")
    assert bad["ratio"] == 0.8 and bad["met"] is False


def test_kernels_below_two_is_refused() -> None:
    with pytest.raises(ValueError, match="kernels must be >= 2"):
        load_bench().rows(quick=True, kernels=1)


# --- the stand-in driver -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    cc = find_cc()
    if cc is None:
        pytest.skip("no C compiler to build the fake libcuda")
    tmp = tmp_path_factory.mktemp("bench_cuda")
    lib = tmp / "libfakecuda.so"
    build_fake_libcuda(str(lib), cc)
    site = tmp / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import ctypes, os\nctypes.CDLL(os.environ['SVOD_CUDA_LIBRARY']).fake_configure(0, 12040, 1)  # one device\n"
    )
    env = dict(os.environ, SVOD_CUDA_LIBRARY=str(lib), PYTHONPATH=os.pathsep.join([str(site), str(ROOT)]))
    env.pop("SVOD_CUDA", None)
    # 32 kernels: the fake holds at most 64 nodes per graph
    cmd = [sys.executable, str(BENCH), "--quick", "--json", "--kernels", "32", "--copy-mib", "2"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {"rows": json.loads(proc.stdout), "stderr": proc.stderr}


def _find(table: List[Dict[str, Any]], start: str) -> Dict[str, Any]:
    found = [r for r in table if r["measure"].startswith(start)]
    assert len(found) == 1, (start, [r["measure"] for r in table])
    return found[0]


def test_fake_driver_gives_every_row(fake_run: Dict[str, Any]) -> None:
    table = fake_run["rows"]
    assert "Fake GPU 0" in fake_run["stderr"]
    for row in table:
        assert set(KEYS) <= set(row), row
        value = row["svod_min"]
        assert isinstance(value, (int, float)) and math.isfinite(value), row
        # per-node figures are differences of two timings: near zero on the stand-in, so noise may flip the sign
        assert value > 0 or "(T_" in row["measure"], row
    assert len(table) == 14, [r["measure"] for r in table]
    for start in (
        "elementwise.ptx",
        "eager launch",
        "graph replay µs per node",
        "graph replay µs fixed",
        "H2D GB/s",
        "D2H GB/s",
        "plan replay µs per kernel, CUDA graphs",
        "plan replay µs per kernel, eager",
    ):
        assert any(r["measure"].startswith(start) for r in table), start
    loads = [r for r in table if r["measure"].startswith("elementwise.ptx")]
    assert len(loads) == 3 and "CUDA_CACHE_DISABLE=1" in loads[2]["measure"]  # the cold child ran
    assert all(r["goal"] == "-" and r["met"] is None for r in loads)


def test_fake_driver_launch_rows(fake_run: Dict[str, Any]) -> None:
    table = fake_run["rows"]
    eager = _find(table, "eager launch µs per kernel (32 x BoundLaunch()")
    node = _find(table, "graph replay µs per node ((T_32 - T_1) / 31")
    assert eager["goal"] == "<= 5" and node["goal"] == "<= 1"
    assert isinstance(eager["met"], bool) and isinstance(node["met"], bool)
    if not HAVE_CUPY:
        for row in (eager, node, _find(table, "graph replay µs fixed")):
            assert row["peer_value"] is None and row["ratio"] is None and row["peer"] == "-"
        assert "no CuPy peer" in fake_run["stderr"]


def test_fake_driver_plan_rows_compare_with_the_raw_paths(fake_run: Dict[str, Any]) -> None:
    table = fake_run["rows"]
    for label, raw_start, peer in (
        ("CUDA graphs", "graph replay µs per node", "raw CudaGraph per node"),
        ("eager", "eager launch µs per kernel", "raw BoundLaunch per kernel"),
    ):
        row = _find(table, "plan replay µs per kernel, %s ((T_32 - T_2) / 30" % label)
        assert row["peer"] == peer and row["peer_value"] == _find(table, raw_start)["svod_min"]
        assert isinstance(row["met"], bool)
        assert _find(table, "plan replay µs fixed, %s" % label)["goal"] == "-"


def test_fake_driver_copy_rows(fake_run: Dict[str, Any]) -> None:
    for start, raw in (
        ("H2D GB/s, 2 MiB: copyin(pageable) + sync, pinned", "cuMemcpyHtoD_v2 from cuMemHostAlloc"),
        ("D2H GB/s, 2 MiB: copyout_into(pageable), pinned", "cuMemcpyDtoH_v2 into cuMemHostAlloc"),
        ("H2D GB/s, 2 MiB: copyin(pageable) + sync vs", "cuMemcpyHtoD_v2 from the same pageable"),
        ("D2H GB/s, 2 MiB: copyout_into(pageable) vs", "cuMemcpyDtoH_v2 into the same pageable"),
    ):
        row = _find(fake_run["rows"], start)
        assert row["peer"].startswith(raw)
        assert row["peer_value"] > 0 and math.isfinite(row["peer_value"])
        assert row["ratio"] == pytest.approx(row["svod_min"] / row["peer_value"], rel=0.05)
        if abs(row["ratio"] - 0.9) > 0.01:  # met uses the unrounded ratio
            assert row["met"] is (row["ratio"] >= 0.9)
