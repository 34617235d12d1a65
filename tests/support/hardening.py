"""Helpers shared by the hardening tests (loader, cache, plans, CLI, no compiler, vendoring):
child processes that test the same svod_min, the kernels they load, leak measurement and fixtures.
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
import textwrap
from typing import Dict, List, Optional

import pytest
from conftest import COMPILERS

import svod_min
from svod_min.compiler import clang
from svod_min.jit_loader import memory

# Where the svod_min under test lives (site-packages under tox, the checkout otherwise):
# child processes get it on PYTHONPATH so they test the same code.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(svod_min.__file__)))


# A kernel with every kind of state the loader must get right: a libm call (GOT or stub),
# .bss (zero-initialised counter), .data (initialised global reached through the GOT).
STATE_SRC = r"""
#include <math.h>
static int counter;
int base_value = 100;
float energy(float x) { return expf(x) + logf(x + 1.0f); }
int bump(void) { counter += 1; return base_value + counter; }
"""


ENERGY_1 = math.exp(1.0) + math.log(2.0)


# A plan-sized kernel: buffers first, int32 variables after (svod's calling convention),
# and a call counter in .bss so tests can prove that nothing was dispatched.
PLAN_SRC = r"""
static int calls;
void scale_add(float* restrict out, const float* restrict x, const int n, const int k) {
    calls += 1;
    for (int i = 0; i < n; ++i) out[i] = x[i] * (float)k + 1.0f;
}
int scale_add_calls(void) { return calls; }
"""


def child_env(**overrides: Optional[str]) -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PACKAGE_ROOT
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run_python(code: str, *args: str, env: Optional[Dict[str, str]] = None, timeout: float = 120, cwd=None):
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or child_env(),
        cwd=cwd,
    )


def maps_lines() -> List[str]:
    with open("/proc/self/maps") as fh:
        return fh.readlines()


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def one_line_error(stderr: str) -> str:
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


@pytest.fixture(scope="module")
def state_objects() -> Dict[str, bytes]:
    if not COMPILERS:
        pytest.skip("no C compiler")
    return {cc: clang.compile_c(STATE_SRC, compiler=cc) for cc in COMPILERS}


@pytest.fixture(scope="module")
def plan_object() -> bytes:
    if not COMPILERS:
        pytest.skip("no C compiler")
    return clang.compile_c(PLAN_SRC)


@pytest.fixture
def wx(monkeypatch: pytest.MonkeyPatch):
    """Set the process's W^X route for one test (restored afterwards)."""

    def set_mode(mode: str) -> None:
        monkeypatch.setattr(memory, "_mode", mode)

    return set_mode


CYCLES = 10_000


WARMUP = 500


RSS_LIMIT = 1 << 20


# Mappings and fds must return to the baseline exactly; one line of slack is allowed for
# glibc malloc, which may split or merge one of its own heap mappings between samples.
MAPS_SLACK = 1


def measure(cycle, cycles: int = CYCLES) -> Dict[str, int]:
    for _ in range(WARMUP):  # thread pools, allocator arenas, ctypes caches, memo tables
        cycle()
    gc.collect()
    rss0, maps0, fds0 = rss_bytes(), len(maps_lines()), fd_count()
    peak_maps = maps0
    for i in range(cycles):
        cycle()
        if i % 500 == 0:
            peak_maps = max(peak_maps, len(maps_lines()))
    gc.collect()
    return {
        "rss_growth": rss_bytes() - rss0,
        "maps0": maps0,
        "maps1": len(maps_lines()),
        "peak_maps": peak_maps,
        "fds0": fds0,
        "fds1": fd_count(),
    }


def assert_no_leak(m: Dict[str, int]) -> None:
    assert m["rss_growth"] < RSS_LIMIT, m
    assert m["maps1"] <= m["maps0"] + MAPS_SLACK, m
    assert m["peak_maps"] <= m["maps0"] + MAPS_SLACK + 4, m  # released promptly, not only at gc.collect
    assert m["fds1"] == m["fds0"], m


def unusable_dirs(tmp_path) -> Dict[str, str]:
    blocker = tmp_path / "a-regular-file"
    blocker.write_text("not a directory")
    return {
        "under a regular file": str(blocker / "objects"),  # root ignores permissions, not ENOTDIR
        "read-only pseudo-filesystem": "/proc/self/svod-objects",
    }


def no_compiler_env(tmp_path) -> Dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir(exist_ok=True)
    return child_env(PATH=str(empty), SVOD_CC=None, CC=None)
