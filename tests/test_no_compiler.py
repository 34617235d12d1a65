"""No C compiler on PATH: prebuilt objects and library kernels still run, inline C fails clearly."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.hardening import (  # noqa: F401 - fixtures
    ENERGY_1,
    no_compiler_env,
    one_line_error,
    run_python,
    state_objects,
)

from svod_min.__main__ import EXIT_DEVICE
from svod_min.error import SvodError

INLINE_C_PLAN = {
    "svod_plan": 1,
    "buffers": {"x": {"shape": [4], "init": "arange"}, "y": {"shape": [4], "output": True}},
    "kernels": {
        "twice": {
            "source": "void twice(float* restrict y, const float* restrict x) "
            "{ for (int i = 0; i < 4; ++i) y[i] = 2 * x[i]; }",
            "buffers": 2,
        }
    },
    "ops": [{"kernel": "twice", "buffers": ["y", "x"]}],
    "expect": {"y": {"values": [0, 2, 4, 6]}},
}


def test_no_compiler_inline_c_fails_clearly_but_library_plan_runs(tmp_path) -> None:
    env = no_compiler_env(tmp_path)
    plan = tmp_path / "inline.json"
    plan.write_text(json.dumps(INLINE_C_PLAN))
    # a plan file with inline C needs a compiler: one clear line, exit 3, nothing ran
    result = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", str(plan)], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == EXIT_DEVICE == 3, result.stderr
    line = one_line_error(result.stderr)
    assert line.startswith("error: no C compiler found"), line
    assert "install clang or gcc, or set SVOD_CC" in line
    assert "verify" not in result.stdout
    # the default plan is built from the kernel library: prebuilt objects, no compiler needed
    result = subprocess.run(
        [sys.executable, "-m", "svod_min", "run"], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    assert "verify y: ok" in result.stdout
    info = subprocess.run(
        [sys.executable, "-m", "svod_min", "info"], capture_output=True, text=True, timeout=120, env=env
    )
    assert info.returncode == 0 and "compiler: none found" in info.stdout, info.stdout + info.stderr


_NO_CC_API = r"""
import ctypes, sys
from svod_min.devices.cpu import CpuDevice
from svod_min.error import CompilerNotFoundError
from svod_min.jit_loader import load_object
with open(sys.argv[1], "rb") as fh:
    obj = fh.read()
with load_object(obj) as lo:  # a prebuilt object needs no compiler
    print("energy", lo.function("energy", ctypes.c_float, ctypes.c_float)(1.0))
    print("bump", lo.function("bump", ctypes.c_int)())
try:
    CpuDevice(threads=1).compile("void f(float* o) { o[0] = 1; }", "f", buf_count=1)
except CompilerNotFoundError as exc:
    print("compile:", str(exc).splitlines()[0])
"""


def test_no_compiler_prebuilt_objects_still_load_and_inline_c_is_refused(state_objects, tmp_path) -> None:
    path = tmp_path / "prebuilt.o"
    path.write_bytes(next(iter(state_objects.values())))
    result = run_python(_NO_CC_API, str(path), env=no_compiler_env(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = dict(ln.split(None, 1) for ln in result.stdout.strip().splitlines())
    assert float(lines["energy"]) == pytest.approx(ENERGY_1, rel=1e-6)
    assert lines["bump"] == "101"
    assert lines["compile:"].startswith("no C compiler found: tried clang, gcc, cc on PATH")


_NO_CC_LIBRARY = r"""
from svod_min import kernels
from svod_min.devices.cpu import CpuDevice
k = kernels.get("add", dtype="float32")
dev = CpuDevice(threads=2)
n = 1000
out, a, b = (dev.allocate([n], "float32") for _ in range(3))
a.copyin([float(i) for i in range(n)])
b.copyin([0.5] * n)
k.run([out, a, b], n=n)
print(k.prebuilt, out.tolist()[:3], out.tolist()[-1])
"""


def test_no_compiler_library_kernels_run_from_prebuilt_objects(tmp_path) -> None:
    try:
        from svod_min import kernels

        if kernels.get("add", dtype="float32").prebuilt is not True:
            pytest.skip("no prebuilt library object for this host")
    except (ImportError, SvodError, AttributeError) as exc:
        pytest.skip("kernel library not available: %s" % exc)
    result = run_python(_NO_CC_LIBRARY, env=no_compiler_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "[0.5,", "1.5,", "2.5]", "999.5"], result.stdout


def _skip_without_prebuilt_library() -> None:
    from svod_min.kernels import host_variant

    if host_variant() is None:
        pytest.skip("no prebuilt library object for this host")


def test_no_compiler_selfcheck_verifies_the_prebuilt_library_and_says_compiling_was_skipped(tmp_path) -> None:
    _skip_without_prebuilt_library()
    env = no_compiler_env(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "svod_min", "selfcheck"], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    note, table = result.stdout.split("\n", 1)
    assert note.startswith("compiling skipped: no C compiler found: tried clang, gcc, cc on PATH; not a failure"), note
    for kernel in ("add", "matmul", "softmax", "reduce_sum", "transpose"):
        assert "\n%s " % kernel in "\n" + table
    assert "FAIL" not in table
    as_json = subprocess.run(
        [sys.executable, "-m", "svod_min", "selfcheck", "--json"], capture_output=True, text=True, timeout=120, env=env
    )
    assert as_json.returncode == 0 and as_json.stderr.startswith("compiling skipped: "), as_json.stderr
    assert {r["origin"].split()[0] for r in json.loads(as_json.stdout)} == {"prebuilt"}


def test_no_compiler_selfcheck_detects_a_wrong_prebuilt_answer(monkeypatch, tmp_path) -> None:
    _skip_without_prebuilt_library()
    from svod_min.kernels import selfcheck

    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("SVOD_CC", raising=False)
    real = selfcheck._library_wants

    def wrong_add(*args: object) -> dict:
        wants = real(*args)  # type: ignore[arg-type]
        wants["add"] = [v + 1.0 for v in wants["add"]]
        return wants

    monkeypatch.setattr(selfcheck, "_library_wants", wrong_add)
    results = {r.name: r for r in selfcheck.run_selfcheck()}
    assert results["add"].ok is False and results["matmul"].ok is True
    assert results["add"].origin.startswith("prebuilt ")


def test_no_compiler_and_no_prebuilt_library_selfcheck_exits_3(tmp_path) -> None:
    env = dict(no_compiler_env(tmp_path), SVOD_KERNELS_VARIANT="none")
    result = subprocess.run(
        [sys.executable, "-m", "svod_min", "selfcheck"], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == EXIT_DEVICE, result.stdout + result.stderr
    line = one_line_error(result.stderr)
    assert line.startswith("error: no C compiler found") and "selfcheck has nothing it can run here" in line, line
