"""``python -m svod_min run`` on plan files, end to end: exit codes, one-line errors, --json, --trace, --save."""

from __future__ import annotations

import ctypes.util
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import pytest
from conftest import needs_cc
from support.plan_file import REPO, base

import svod_min.planfile.schema as plan_schema
from svod_min.dtypes import float32
from svod_min.npy import read_npy
from svod_min.planfile.load import load_plan


def _cli(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run(
        [sys.executable, "-m", "svod_min", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=str(cwd) if cwd else None,
    )


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


SAXPY = str(REPO / "examples" / "saxpy_vars.json")


@needs_cc
def test_cli_default_run() -> None:
    result = _cli("run")
    assert result.returncode == 0, result.stderr
    assert "verify y: ok" in result.stdout


@needs_cc
def test_cli_var_changes_the_run_so_verification_fails() -> None:
    result = _cli("run", SAXPY, "--var", "n=300")
    assert result.returncode == 1, result.stderr
    assert "verification failed: y" in result.stderr
    assert "verify y: FAILED" in result.stdout


@needs_cc
@pytest.mark.parametrize(
    "value, message",
    [
        ("n=3000", "error: --var n: variable n=3000 is outside bounds [1, 1000]"),
        ("n=abc", "error: --var 'n=abc': 'abc' is not an integer"),
        ("zz=1", "error: --var zz: unknown variable (plan variables: ['n'])"),
    ],
)
def test_cli_bad_var_exit_2(value: str, message: str) -> None:
    result = _cli("run", SAXPY, "--var", value)
    assert result.returncode == 2
    assert _one_line_error(result) == message
    assert result.stdout == ""


@needs_cc
def test_cli_malformed_plan_exit_2_with_json_path(tmp_path: Path) -> None:
    doc = base()
    doc["ops"][0]["buffers"][1] = "h2"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    result = _cli("run", str(path))
    assert result.returncode == 2
    assert _one_line_error(result) == "error: ops[0].buffers[1]: unknown buffer 'h2'"
    assert result.stdout == ""


def test_cli_missing_file_exit_2(tmp_path: Path) -> None:
    result = _cli("run", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert "cannot read plan file" in _one_line_error(result)


def test_cli_huge_file_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with open(path, "wb") as fh:
        fh.truncate(100 * 1024 * 1024)
    result = _cli("run", str(path))
    assert result.returncode == 2
    assert "the limit is %d" % plan_schema.MAX_PLAN_BYTES in _one_line_error(result)


def test_cli_unsupported_device_exit_3() -> None:
    if ctypes.util.find_library("cuda") is not None:
        pytest.skip("an NVIDIA driver is installed: CUDA is a supported device here (the GPU session runs it)")
    result = _cli("run", "--device", "CUDA")
    assert result.returncode == 3
    assert "not supported" in _one_line_error(result)


def test_cli_invalid_device_spec_exit_2() -> None:
    result = _cli("run", "--device", "CUDA:x")
    assert result.returncode == 2
    assert "invalid device 'CUDA:x'" in _one_line_error(result)


@needs_cc
def test_cli_compile_error_exit_3(tmp_path: Path) -> None:
    doc = base()
    doc["kernels"]["bump"]["source"] = "void bump(int* c, float* y, const float* x, int n) { this is not C; }"
    path = tmp_path / "bad_c.json"
    path.write_text(json.dumps(doc))
    result = _cli("run", str(path))
    assert result.returncode == 3
    assert "error" in _one_line_error(result)


@needs_cc
def test_cli_json_output(tmp_path: Path) -> None:
    result = _cli("run", SAXPY, "--json", "--repeat", "3")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"plan", "verify", "time_s", "profile"} <= set(report)
    assert report["plan"] == SAXPY
    assert report["verify"] == [{"buffer": "y", "ok": True, "max_abs_error": 0.0}]
    assert report["time_s"]["runs"] == 3
    assert [p["name"] for p in report["profile"]] == ["saxpy"]


@needs_cc
def test_cli_trace_is_a_chrome_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    result = _cli("run", "--trace", str(trace))
    assert result.returncode == 0, result.stderr
    data = json.loads(trace.read_text())
    events = data["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    assert [e["name"].rsplit("_", 1)[0] if "matmul" in e["name"] else e["name"] for e in spans] == [
        "svod_matmul_f32",
        "svod_add_relu_f32",
        "svod_matmul_f32",
        "svod_add_relu_f32",
        "svod_softmax_f32",
    ]
    for e in spans:
        assert {"ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0


@needs_cc
def test_cli_save_writes_the_output_as_npy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _cli("run", SAXPY, "--save", str(out))
    assert result.returncode == 0, result.stderr
    assert "saved %s" % (out / "y.npy") in result.stdout
    dt, shape, payload = read_npy(str(out / "y.npy"))
    assert dt is float32 and shape == (1000,)
    assert list(struct.unpack("<1000f", payload)) == [2.0 * i + 1.0 for i in range(1000)]
    # the saved output is a valid expectation for the same plan
    doc = json.loads(Path(SAXPY).read_text())
    doc["expect"]["y"] = {"npy": str(out / "y.npy"), "rtol": 0, "atol": 0}
    loaded = load_plan(doc, base_dir=str(Path(SAXPY).parent))  # its CUDA form names saxpy.ptx
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify())


def test_cli_repeat_0_exit_2() -> None:
    result = _cli("run", "--repeat", "0")
    assert result.returncode == 2
    assert _one_line_error(result) == "error: --repeat must be >= 1, got 0"


def test_cli_debug_shows_a_traceback(tmp_path: Path) -> None:
    result = _cli("--debug", "run", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert "PlanFileError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: cannot read plan file")


def test_regression_cli_non_svod_error_is_one_line_exit_2(tmp_path: Path) -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"shape": [1], "output": True, "init": {"random": {"low": "abc"}}}},
        "ops": [{"custom": "allreduce", "buffers": ["x"]}],
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    result = _cli("run", str(path))
    assert result.returncode == 2
    assert "buffers.x.init.random.low" in _one_line_error(result)


def _plan_path(tmp_path: Path, doc: Dict[str, Any]) -> str:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    return str(path)


@needs_cc
def test_regression_cli_json_is_strict_json_when_an_output_is_nan(tmp_path: Path) -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {"y": {"shape": [2], "output": True}},
        "kernels": {"k": {"source": "void k(float* y) { y[0] = 0.0f / 0.0f; y[1] = 0; }", "buffers": 1}},
        "ops": [{"kernel": "k", "buffers": ["y"]}],
        "expect": {"y": {"values": [0, 0]}},
    }
    result = _cli("run", _plan_path(tmp_path, doc), "--json")
    assert result.returncode == 1, result.stderr

    def refuse(constant: str) -> None:
        raise ValueError("not JSON: %s" % constant)

    report = json.loads(result.stdout, parse_constant=refuse)
    assert report["verify"] == [{"buffer": "y", "ok": False, "max_abs_error": None}]


def test_regression_cli_save_refuses_an_output_name_that_leaves_the_folder(tmp_path: Path) -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"shape": [4], "init": "ones"}, "../escaped": {"shape": [4], "output": True}},
        "ops": [{"copy": {"dst": "../escaped", "src": "x"}}],
    }
    out = tmp_path / "out" / "inner"
    result = _cli("run", _plan_path(tmp_path, doc), "--save", str(out))
    assert result.returncode == 2
    assert _one_line_error(result) == "error: --save: output buffer '../escaped' is not a plain file name"
    assert not (tmp_path / "out" / "escaped.npy").exists()


def test_regression_cli_save_writes_bfloat16_as_uint16_bits(tmp_path: Path) -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "bfloat16", "shape": [3], "init": {"values": [1.0, -2.0, 0.5]}},
            "y": {"dtype": "bfloat16", "shape": [3], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
    }
    out = tmp_path / "out"
    result = _cli("run", _plan_path(tmp_path, doc), "--save", str(out))
    assert result.returncode == 0, result.stderr
    dt, shape, payload = read_npy(str(out / "y.npy"))
    assert (dt.name, shape) == ("uint16", (3,))
    assert list(struct.unpack("<3H", payload)) == [0x3F80, 0xC000, 0x3F00]
