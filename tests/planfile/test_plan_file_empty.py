"""Plan files with empty tensors: a 0-sized ``.npy`` round trip, 0-byte buffers and copies, ``load_model`` and
``run --save`` returning empty arrays, and a compiled kernel whose launch size is 0 (no work) on
both replay paths."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest
from conftest import needs_cc
from support.plan_file import REPO, needs_numpy, np

from svod_min.dtypes import float32
from svod_min.error import PlanFileError
from svod_min.npy import read_npy, write_npy
from svod_min.planfile.load import load_model, load_plan

COUNT_C = r"""
void count_calls(int* restrict count, int n, int core_id) {
  __atomic_fetch_add(count, 1, __ATOMIC_RELAXED);
}
"""


def _empty_plan(tmp_path: Path) -> Dict[str, Any]:
    write_npy(str(tmp_path / "x.npy"), float32, (2, 0), b"")
    return {
        "svod_plan": 1,
        "description": "empty in, empty out",
        "device": "CPU",
        "buffers": {
            "x": {"dtype": "float32", "shape": [2, 0], "init": {"npy": "x.npy"}, "input": True},
            "y": {"dtype": "float32", "shape": [0, 3], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],  # 0 bytes to 0 bytes
    }


def test_npy_of_a_zero_sized_dim_round_trips(tmp_path: Path) -> None:
    for shape in [(0,), (2, 0), (0, 3, 1)]:
        write_npy(str(tmp_path / "e.npy"), float32, shape, b"")
        assert read_npy(str(tmp_path / "e.npy")) == (float32, shape, b"")
        if np is not None:
            assert np.load(str(tmp_path / "e.npy")).shape == shape


@needs_numpy
def test_a_plan_of_empty_buffers_runs_and_returns_empty_arrays(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_empty_plan(tmp_path)))
    model = load_model(str(path))
    out = model(x=np.zeros((2, 0), np.float32))
    assert out["y"].shape == (0, 3) and out["y"].dtype == np.float32


def test_a_plan_with_no_op_and_a_real_output_is_still_refused(tmp_path: Path) -> None:
    """Only a plan whose outputs are all empty may have no ops (an ONNX model of empty outputs lowers to one)."""
    doc = _empty_plan(tmp_path)
    doc["buffers"]["y"]["shape"] = [1, 3]
    doc["ops"] = []
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFileError, match="a plan needs at least one op"):
        load_plan(str(path))


def test_run_save_writes_an_empty_npy(tmp_path: Path) -> None:
    (tmp_path / "plan.json").write_text(json.dumps(_empty_plan(tmp_path)))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    result = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", "plan.json", "--save", "out", "--input", "x=x.npy"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert read_npy(str(tmp_path / "out" / "y.npy")) == (float32, (0, 3), b"")


@needs_cc
@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_a_compiled_kernel_with_launch_size_zero_is_not_dispatched(tmp_path: Path, native: bool) -> None:
    doc = {
        "svod_plan": 1,
        "device": "CPU",
        "vars": {"n": {"min": 0, "max": 4, "default": 0}},
        "buffers": {"count": {"dtype": "int32", "shape": [1], "output": True}},
        "kernels": {
            "count_calls": {"source": COUNT_C, "buffers": 1, "vars": ["n", "core_id"], "global_size": ["n", 1, 1]}
        },
        "ops": [{"kernel": "count_calls", "buffers": ["count"]}],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    loaded = load_plan(str(path))
    plan = loaded.plan
    plan.set_native_replay(native)
    plan.execute()
    plan.synchronize()
    assert loaded.buffers["count"].tolist() == [0]
    plan.execute_with_vars({"n": 3})
    assert plan.native_replay is native  # the C runner's table holds the kernel again
    plan.execute_with_vars({"n": 0})
    plan.execute_with_vars({"n": 1})
    plan.synchronize()
    assert loaded.buffers["count"].tolist() == [4]


def test_verification_takes_an_infinity_as_equal_to_itself() -> None:
    """A ReduceMax over nothing is -inf: the recorded expectation must verify (|-inf - -inf| is NaN)."""
    from svod_min.planfile.data import Expectation, check_expectation

    class Values:
        def __init__(self, values: Any) -> None:
            self.values = values

        def tolist(self) -> Any:
            return self.values

    inf = float("inf")
    want = Expectation("y", [-inf, inf, 1.0], 1e-3, 1e-5)
    assert check_expectation(Values([-inf, inf, 1.0]), want)[1]
    assert not check_expectation(Values([inf, inf, 1.0]), want)[1]
    assert not check_expectation(Values([-inf, float("nan"), 1.0]), want)[1]
