"""``python -m svod_min bench`` (svod_min.perf.bench_suite): the packaged benchmarks, installed or in a checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs_cc
from support.paths import REPO as REPO_PATH

from svod_min.error import NotSupportedError
from svod_min.perf import bench_suite

PACKAGE = Path(bench_suite.__file__).resolve().parents[1]  # svod_min/, above perf/
CHECKOUT_BENCH = REPO_PATH / "bench"  # tox tests an installed copy: not PACKAGE.parent
PACKAGED = {"bench_compile.py", "bench_kernels.py", "bench_loader.py", "bench_plan.py"}


def test_packaged_benchmarks_are_found_without_a_checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench_suite, "PACKAGE_PARENT", str(tmp_path))  # as installed: no bench/ next to the package
    assert bench_suite.find_bench_dir() is None
    names = [name for name, _ in bench_suite._bench_files(None)]
    assert PACKAGED <= set(names)


def test_package_parent_is_where_svod_min_imports_from() -> None:
    """Children of a benchmark put PACKAGE_PARENT on PYTHONPATH: it must hold the package, not be inside it."""
    parent = Path(bench_suite.PACKAGE_PARENT)
    assert (parent / "svod_min" / "__init__.py").is_file()
    assert parent == PACKAGE.parent


def test_checkout_shims_do_not_run_twice() -> None:
    bench_dir = CHECKOUT_BENCH
    names = [name for name, _ in bench_suite._bench_files(str(bench_dir))]
    assert len(names) == len(set(names))
    assert PACKAGED <= set(names) and "bench_cuda.py" in names  # a checkout adds the ones that need it


def test_a_missing_explicit_bench_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NotSupportedError, match="not a directory"):
        bench_suite.run_suite(str(tmp_path / "nowhere"), only=["none"])


@needs_cc
def test_an_installed_copy_measures_its_machine(tmp_path: Path) -> None:
    # An installed package: svod_min alone in a site directory, run from a directory with no bench/.
    site, work = tmp_path / "site", tmp_path / "work"
    shutil.copytree(str(PACKAGE), str(site / "svod_min"), ignore=shutil.ignore_patterns("__pycache__"))
    work.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site), SVOD_OBJECT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "bench", "--quick", "--only", "bench_loader", "--json"],
        cwd=str(work),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    measures = [r["measure"] for r in rows]
    assert any(m.startswith("cold load") for m in measures), measures
    assert not any("failed" in m for m in measures), proc.stderr
    assert all(r["svod_min"] is not None for r in rows if r["measure"].startswith(("cold", "warm")))


def test_checkout_shim_runs_the_packaged_benchmark() -> None:
    shim = CHECKOUT_BENCH / "bench_loader.py"
    proc = subprocess.run([sys.executable, str(shim), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "--repeat" in proc.stdout, proc.stderr


def test_svod_cc_makes_a_single_compiler_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name if name in ("gcc", "clang") else None)
    monkeypatch.setenv("SVOD_CC", "gcc")
    assert bench_suite.bench_compilers() == ["gcc"]
    monkeypatch.delenv("SVOD_CC")
    assert bench_suite.bench_compilers() == ["clang", "gcc"]
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/gcc" if name == "gcc" else None)
    assert bench_suite.bench_compilers() == ["gcc"]  # a machine with gcc only
