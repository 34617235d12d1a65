"""The vendored drop-in: a copy of svod_min (and pyelftools) runs without being installed,
in an empty venv without numpy and isolated with numpy available."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Dict

import pytest
from conftest import needs_cc

import svod_min


def _vendor(tmp_path) -> str:
    elftools = pytest.importorskip("elftools")
    vendor = tmp_path / "vendored"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(os.path.dirname(os.path.abspath(svod_min.__file__)), str(vendor / "svod_min"), ignore=ignore)
    shutil.copytree(os.path.dirname(os.path.abspath(elftools.__file__)), str(vendor / "elftools"), ignore=ignore)
    return str(vendor)


def _clean_env() -> Dict[str, str]:
    drop = ("VIRTUAL_ENV", "__PYVENV_LAUNCHER__")
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k not in drop}


@needs_cc
def test_vendored_copy_runs_in_an_empty_venv_without_numpy(tmp_path) -> None:
    vendor = _vendor(tmp_path)
    venv = tmp_path / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], capture_output=True, text=True, timeout=120
    )
    if made.returncode != 0:
        pytest.skip("cannot create a virtual environment: %s" % made.stderr.strip()[-300:])
    python = str(venv / "bin" / "python")
    env = _clean_env()
    probe = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util as u, svod_min, elftools, sys; "
            "print(u.find_spec('numpy') is None, svod_min.__file__, elftools.__file__, sys.prefix)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=vendor,
        env=env,
    )
    assert probe.returncode == 0, probe.stderr
    no_numpy, svod_file, elf_file, prefix = probe.stdout.split()
    assert no_numpy == "True", "the fresh venv must not see numpy"
    assert svod_file.startswith(vendor) and elf_file.startswith(vendor)
    assert os.path.realpath(prefix) == os.path.realpath(str(venv))
    result = subprocess.run(
        [python, "-m", "svod_min", "run"], capture_output=True, text=True, timeout=300, cwd=vendor, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify y: ok" in result.stdout


_WITH_NUMPY = r"""
import sys
sys.path.insert(0, sys.argv[1])
import numpy, runpy, svod_min, elftools
assert svod_min.__file__.startswith(sys.argv[1]), svod_min.__file__
assert elftools.__file__.startswith(sys.argv[1]), elftools.__file__
print("numpy", numpy.__version__, file=sys.stderr)
sys.argv = ["svod_min", "run"]
runpy.run_module("svod_min", run_name="__main__", alter_sys=True)
"""


@needs_cc
def test_vendored_copy_runs_isolated_with_numpy_available(tmp_path) -> None:
    pytest.importorskip("numpy")
    vendor = _vendor(tmp_path)
    result = subprocess.run(
        [sys.executable, "-I", "-c", _WITH_NUMPY, vendor],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
        env=_clean_env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify y: ok" in result.stdout
    assert result.stderr.startswith("numpy ")
