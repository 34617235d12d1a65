"""`python -m svod_min`: the main job, info, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import List

import pytest
from conftest import needs_cc
from support.hardening import child_env, one_line_error, unusable_dirs

from svod_min.__main__ import EXIT_BAD_INPUT, EXIT_DEVICE, EXIT_OK, main


def _cli(*args: str, env: "dict | None" = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "svod_min", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, **(env or {})),
    )


@needs_cc
def test_run_default_plan_verifies_and_profiles() -> None:
    result = _cli("run")
    assert result.returncode == EXIT_OK, result.stderr
    assert "verify y: ok" in result.stdout
    assert "svod_matmul_f32" in result.stdout and "svod_softmax_f32" in result.stdout  # per-op profile table
    assert "total:" in result.stdout


@needs_cc
def test_selfcheck_command_passes_and_prints_a_table() -> None:
    result = _cli("selfcheck")
    assert result.returncode == EXIT_OK, result.stderr
    for kernel in ("add", "softplus", "weighted", "matmul"):
        assert kernel in result.stdout
    assert "FAIL" not in result.stdout


@needs_cc
def test_selfcheck_detects_a_wrong_answer(monkeypatch) -> None:
    from svod_min.kernels import selfcheck

    monkeypatch.setattr(selfcheck, "SOURCE", selfcheck.SOURCE.replace("a[i] + b[i]", "a[i] - b[i]"))
    results = {r.name: r.ok for r in selfcheck.run_selfcheck()}
    assert results["add"] is False and results["weighted"] is True


def test_info_lists_compilers_wx_mode_and_cache() -> None:
    result = _cli("info")
    assert result.returncode == EXIT_OK
    assert "devices: CPU" in result.stdout
    assert "W^X mode:" in result.stdout
    assert "object cache:" in result.stdout


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["run", "--device", "CUDA"], EXIT_DEVICE, "CUDA"),
        (["run", "--device", "CPU:x"], EXIT_BAD_INPUT, "invalid device 'CPU:x'"),
        (["run", "no-such-plan.json"], EXIT_BAD_INPUT, "cannot read plan file no-such-plan.json"),
        (["run", "--var", "rows=99"], EXIT_BAD_INPUT, "outside bounds [1, 8]"),
    ],
)
def test_errors_are_one_line_with_exit_codes(args, code, message, capsys) -> None:
    if "CUDA" in args and __import__("ctypes.util").util.find_library("cuda"):
        pytest.skip("a CUDA driver is present")
    assert main(args) == code
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_no_command_prints_help_and_exits_2(capsys) -> None:
    assert main([]) == EXIT_BAD_INPUT
    assert "run" in capsys.readouterr().out


# --- bad input and hostile paths (from test_hardening.py) ------------------------------------


@needs_cc
def test_cli_runs_with_an_unusable_cache_dir(tmp_path) -> None:
    path = unusable_dirs(tmp_path)["under a regular file"]
    result = subprocess.run(
        [sys.executable, "-m", "svod_min", "run"],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env(SVOD_OBJECT_CACHE_DIR=path),
    )
    assert result.returncode == 0, result.stderr
    assert "verify y: ok" in result.stdout
    assert result.stderr == ""  # the debug message stays at debug level


def _cli_in_process(argv: List[str], capsys) -> tuple:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


CLI_BAD = [
    (["run", "--device", "TPU"], "invalid device 'TPU': unknown kind 'TPU'"),
    (["run", "--device", "CPU:1"], "CPU takes no device index"),
    (["run", "--var", "rows"], "expected NAME=INT"),
    (["run", "--var", "=3"], "expected NAME=INT"),
    (["run", "--var", "nosuch=1"], "unknown variable"),
    (["run", "--var", "rows=1.5"], "is not an integer"),
    (["run", "--repeat", "-3"], "--repeat must be >= 1"),
    (["run", "--once", "--repeat", "2"], "--once stops after the first run"),
    (["run", "--once", "--profile"], "--once stops after the first run"),
]


@pytest.mark.parametrize("argv, message", CLI_BAD, ids=[" ".join(c[0]) for c in CLI_BAD])
def test_cli_bad_input_is_one_line_and_exit_2(argv: List[str], message: str, capsys) -> None:
    code, out, err = _cli_in_process(argv, capsys)
    assert code == EXIT_BAD_INPUT == 2, err
    assert message in one_line_error(err)
    assert "verify" not in out  # nothing ran


def test_cli_plan_path_is_a_directory(tmp_path, capsys) -> None:
    code, _out, err = _cli_in_process(["run", str(tmp_path)], capsys)
    assert "cannot read plan file" in one_line_error(err)
    assert code == EXIT_BAD_INPUT


def test_cli_empty_device_is_refused(capsys) -> None:
    code, _out, err = _cli_in_process(["run", "--device", ""], capsys)
    assert code == EXIT_BAD_INPUT
    assert "empty device spec" in err


@needs_cc
@pytest.mark.parametrize("option", ["--trace", "--save"])
def test_cli_output_path_under_a_regular_file(option: str, tmp_path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, _out, err = _cli_in_process(["run", option, str(blocker / "out")], capsys)
    line = one_line_error(err)
    assert "internal error" not in line and str(blocker) in line
    assert code == EXIT_BAD_INPUT


@needs_cc
def test_run_once_stops_at_the_first_output(tmp_path, monkeypatch, capsys) -> None:
    """`run --once` runs the plan once (verified, saved) and nothing after: the ONNX bench times that command as a
    cold start. Without it, `run` profiles and times further runs."""
    from svod_min.plan.execution_plan import ExecutionPlan

    calls: List[str] = []
    for name in ("execute", "execute_profiled"):
        real = getattr(ExecutionPlan, name)
        monkeypatch.setattr(
            ExecutionPlan, name, lambda self, _real=real, _name=name: calls.append(_name) or _real(self)
        )
    code, out, err = _cli_in_process(["run", "--once", "--json", "--save", str(tmp_path)], capsys)
    assert code == EXIT_OK, err
    report = json.loads(out)
    assert calls == ["execute"] and report["time_s"]["runs"] == 1 and report["profile"] == []
    assert [c["ok"] for c in report["verify"]] == [True]  # the one run is the verified one
    assert os.path.isfile(os.path.join(str(tmp_path), "y.npy"))
    calls.clear()
    code, out, err = _cli_in_process(["run", "--repeat", "2"], capsys)
    assert code == EXIT_OK, err
    assert calls == ["execute", "execute_profiled", "execute", "execute"] and "total:" in out
