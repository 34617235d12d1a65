"""``python -m svod_min run PLAN --input x=FILE.npy`` on a plan with ranged dims: the binding printed before the
run, outputs saved at their bound shape (equal to numpy's), expectations not compared at another binding,
refusals exit 2; and the same on an interpreter without numpy (the zipapp's run path needs none)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest
from conftest import needs_cc
from support.plan_file import REPO, needs_numpy, np
from support.ranged_plan import COLS, ranged_plan, reference, rows_of

pytestmark = [needs_numpy, needs_cc]


def _cli(tmp_path: Path, *args: str, python: List[str] = [sys.executable]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [*python, "-m", "svod_min", *args], capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path)
    )


@pytest.fixture
def plan(tmp_path: Path) -> str:
    (tmp_path / "plan.json").write_text(json.dumps(ranged_plan()))
    return "plan.json"


def test_run_prints_the_binding_and_saves_the_bound_shape(tmp_path: Path, plan: str) -> None:
    x, z = rows_of(3, seed=3)
    np.save(str(tmp_path / "x.npy"), x)
    np.save(str(tmp_path / "z.npy"), z)
    result = _cli(tmp_path, "run", plan, "--input", "x=x.npy", "--input", "z=z.npy", "--save", "d")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "binding: batch=3"  # before the run's report
    assert "verify: skipped: the expectations were recorded at batch=8, this run binds batch=3" in lines
    assert not any(line.startswith("verify y") for line in lines)
    y = np.load(str(tmp_path / "d" / "y.npy"))
    assert y.shape == (3, COLS)
    np.testing.assert_allclose(y, reference(x, z), rtol=1e-6)
    assert np.load(str(tmp_path / "d" / "seen.npy")).tolist() == [3]


def test_a_feed_at_the_defaults_still_runs_and_json_carries_the_binding(tmp_path: Path, plan: str) -> None:
    np.save(str(tmp_path / "x.npy"), np.arange(32, dtype=np.float32).reshape(8, 4))
    result = _cli(tmp_path, "run", plan, "--input", "x=x.npy", "--json", "--once")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["binding"] == {"batch": 8} and report["binding_differs"] == {}


@pytest.mark.parametrize(
    "rows, extra, message",
    [
        (9, [], "error: input 'x' axis 0 binds batch=9, outside its range [1, 8]"),
        (3, ["--var", "batch=4"], "error: variable batch=4 was given, but input 'x' axis 0 binds batch=3"),
    ],
)
def test_a_refused_binding_exits_2_before_running(
    tmp_path: Path, plan: str, rows: int, extra: List[str], message: str
) -> None:
    np.save(str(tmp_path / "x.npy"), np.zeros((rows, COLS), np.float32))
    result = _cli(tmp_path, "run", plan, "--input", "x=x.npy", "--save", "d", *extra)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == message
    assert result.stdout == "" and not (tmp_path / "d").exists()


def test_the_run_path_binds_without_numpy(tmp_path: Path, plan: str) -> None:
    """``-S``: no site-packages, so no numpy; the package itself comes from PYTHONPATH."""
    bare = [sys.executable, "-S"]
    probe = subprocess.run([*bare, "-c", "import numpy"], capture_output=True, timeout=60)
    if probe.returncode == 0:
        pytest.skip("numpy is importable without site-packages here")
    x, z = rows_of(5, seed=5)
    np.save(str(tmp_path / "x.npy"), x)
    np.save(str(tmp_path / "z.npy"), z)
    result = _cli(tmp_path, "run", plan, "--input", "x=x.npy", "--input", "z=z.npy", "--save", "d", python=bare)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "binding: batch=5"
    np.testing.assert_allclose(np.load(str(tmp_path / "d" / "y.npy")), reference(x, z), rtol=1e-6)
    np.save(str(tmp_path / "big.npy"), np.zeros((9, COLS), np.float32))
    refused = _cli(tmp_path, "run", plan, "--input", "x=big.npy", python=bare)
    assert refused.returncode == 2 and "binds batch=9, outside its range [1, 8]" in refused.stderr
