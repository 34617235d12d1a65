"""Plans on aarch64: the default plan with no compiler on PATH, the example plans, selfcheck,
and the prebuilt variant an arm64 host picks.

Each runs as ``python -m svod_min`` in a child process, the way a user runs
it; the plan's own verification (expected outputs) must pass.
Model bundles (issue 16) are not here yet: that issue has not landed.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from typing import Dict, List

import pytest
from a64_support import NOT_AARCH64, ON_AARCH64

if not ON_AARCH64:
    pytest.skip(NOT_AARCH64, allow_module_level=True)

from svod_min import kernels  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE_PLANS = sorted(glob.glob(os.path.join(REPO, "examples", "tinygrad", "*", "plan.json")))
EXAMPLE_PLANS += [p for p in (os.path.join(REPO, "examples", "arena_views_copy.json"),) if os.path.isfile(p)]


def svod_min(args: List[str], path: str, tmp_path) -> Dict:
    env = dict(os.environ, PATH=path, PYTHONPATH=REPO, SVOD_OBJECT_CACHE_DIR=str(tmp_path / "cache"))
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, "svod_min %s failed (%d):\n%s%s" % (args, proc.returncode, proc.stdout, proc.stderr)
    return json.loads(proc.stdout) if "--json" in args else {"out": proc.stdout}


def test_default_plan_runs_from_the_prebuilt_object_with_no_compiler(tmp_path) -> None:
    empty = tmp_path / "empty-path"
    empty.mkdir()
    result = svod_min(["run", "--json"], str(empty), tmp_path)
    assert result["verify"] and all(v["ok"] for v in result["verify"]), result["verify"]


@pytest.mark.skipif(not EXAMPLE_PLANS, reason="examples/ are not part of this checkout")
@pytest.mark.parametrize("plan", EXAMPLE_PLANS, ids=[os.path.relpath(p, REPO) for p in EXAMPLE_PLANS])
def test_example_plan_runs_and_verifies(plan: str, tmp_path) -> None:
    result = svod_min(["run", "--json", plan], os.environ.get("PATH", "/usr/bin:/bin"), tmp_path)
    assert result["verify"] and all(v["ok"] for v in result["verify"]), result["verify"]


def test_selfcheck_compiles_and_verifies(tmp_path) -> None:
    svod_min(["selfcheck"], os.environ.get("PATH", "/usr/bin:/bin"), tmp_path)


def test_the_aarch64_prebuilt_variant_is_the_one_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SVOD_KERNELS_VARIANT", raising=False)
    monkeypatch.setenv("SVOD_KERNELS_PREBUILT", "1")
    assert kernels.host_variant() == "aarch64-baseline"
