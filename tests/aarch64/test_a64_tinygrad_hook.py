"""svod_min as tinygrad's CPU loader on aarch64 (issue 21, item 4).

tinygrad_programs.py runs real tinygrad programs (elementwise, reductions, a matmul, an MLP training
step, a TinyJit loop) and calls the CPU device's own helper programs, twice in subprocesses: as
shipped (tinygrad relocates its arm64 objects itself) and under ``python -m svod_min tinygrad``
(svod_min loads every one). Both must give the same bits, both must match numpy, and the hooked
run must have loaded every ELF program itself.

Needs an arm64 host (or .ci/aarch64-stage, which runs this in its arm64 root under qemu with
tinygrad 0.14 from the wheel and the root's clang), tinygrad 0.14 and clang; elsewhere it skips
with the reason. ``SVOD_A64_TINYGRAD_REQUIRE=1`` (the stage sets it) turns such a skip into a
failure, so the stage cannot pass without running it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from typing import Any, Dict

import numpy as np
import pytest
from a64_support import ON_AARCH64
from tinygrad_programs import inputs, numpy_reference

import svod_min
from svod_min.config import env_flag

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(svod_min.__file__)))
REQUIRE_ENV = "SVOD_A64_TINYGRAD_REQUIRE"
TIMEOUT_S = 1200  # under qemu every kernel is compiled by an emulated clang


def _why_not_runnable() -> str:
    if not ON_AARCH64:
        return "executes aarch64 code: run .ci/aarch64-stage (qemu user-mode emulation) or use an arm64 host"
    if sys.version_info < (3, 11) or importlib.util.find_spec("tinygrad") is None:
        return "tinygrad 0.14 is not importable (Python 3.11+; .ci/aarch64-stage puts its wheel on PYTHONPATH)"
    if shutil.which(os.environ.get("CC", "clang")) is None:
        return "clang is not installed (tinygrad's CPU device compiles its kernels with it)"
    return ""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Dict[str, Any]]:
    reason = _why_not_runnable()
    if reason and env_flag(REQUIRE_ENV, False):
        pytest.fail("%s=1 but this check cannot run: %s" % (REQUIRE_ENV, reason))
    if reason:
        pytest.skip(reason)
    # One compile cache for both runs (the caller's CACHEDB, else one here): the hooked run loads
    # exactly the objects the shipped run loaded, and clang compiles each kernel once.
    cache = os.environ.get("CACHEDB") or str(tmp_path_factory.mktemp("tinygrad-cache") / "cache.db")
    script = os.path.join(HERE, "tinygrad_programs.py")
    return {"shipped": _run(cache, script), "hooked": _run(cache, "-m", "svod_min", "tinygrad", script)}


def _run(cache: str, *argv: str) -> Dict[str, Any]:
    env = dict(
        os.environ,
        DEV="CPU",
        CACHEDB=cache,
        PYTHONPATH=os.pathsep.join(
            [PACKAGE_PARENT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    )
    env.pop("DEBUG", None)
    child = subprocess.run(
        [sys.executable, *argv], env=env, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=HERE
    )
    assert child.returncode == 0, child.stdout[-2000:] + child.stderr[-4000:]
    return json.loads(child.stdout.strip().splitlines()[-1])


def test_hooked_programs_give_the_same_bits_as_tinygrad_as_shipped(runs: Dict[str, Dict[str, Any]]) -> None:
    shipped, hooked = runs["shipped"]["results"], runs["hooked"]["results"]
    assert sorted(hooked) == sorted(shipped)
    for name in shipped:  # the same objects, relocated by each loader: the same results, bit for bit
        assert hooked[name] == shipped[name], name


@pytest.mark.parametrize("mode", ["shipped", "hooked"])
def test_programs_match_numpy(runs: Dict[str, Dict[str, Any]], mode: str) -> None:
    want = numpy_reference(inputs())
    got = runs[mode]["results"]
    assert sorted(got) == sorted(want)
    for name, expected in want.items():
        np.testing.assert_allclose(
            np.asarray(got[name], dtype=np.float64),
            np.asarray(expected),
            rtol=2e-5,
            atol=2e-5,
            err_msg="%s (%s)" % (name, mode),
        )


@pytest.mark.parametrize("mode", ["shipped", "hooked"])
def test_device_helper_programs_run(runs: Dict[str, Dict[str, Any]], mode: str) -> None:
    helpers = runs[mode]["helpers"]
    assert helpers["signalled"] == 123456  # the signal program stored the value, the wait program returned
    assert helpers["timestamp_in_order"]  # the timestamp program called clock_gettime through its pointer
    assert sorted(helpers["svod_loaded"]) == ["signal_prog", "timestamp_prog", "wait_prog", "worker_prog"]


def test_the_hooked_run_loaded_every_program_itself(runs: Dict[str, Dict[str, Any]]) -> None:
    shipped, hooked = runs["shipped"], runs["hooked"]
    assert not shipped["hooked"] and shipped["stats"]["svod_loaded"] == 0
    assert not any(shipped["helpers"]["svod_loaded"].values())
    assert hooked["hooked"] and all(hooked["helpers"]["svod_loaded"].values()), hooked["helpers"]
    stats = hooked["stats"]
    assert stats["svod_loaded"] >= 15, stats  # 4 helper programs + the kernels (21 on x86_64)
    assert stats["tinygrad_elf"] == 0 and stats["tinygrad_non_elf"] == 0 and stats["refused"] == 0, stats
