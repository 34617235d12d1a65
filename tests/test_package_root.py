"""The package root: svod-runtime's root names importable from ``svod_min``, lazily."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import svod_min

REPO = Path(__file__).resolve().parents[1]

# svod-runtime's lib.rs re-exports these at its root.
SEED_ROOT_NAMES = [
    "ExecutionPlan",
    "ExecutionPlanBuilder",
    "PreparedKernel",
    "PreparedCopy",
    "PreparedBufferView",
    "PreparedCustomFunction",
    "PreparedOp",
    "UnifiedExecutor",
    "global_executor",
    "DeviceContext",
    "ExecutionGraph",
    "ExecutionNode",
    "KernelBufferAccess",
    "SyncStrategy",
    "KernelProfile",
    "BenchmarkConfig",
    "BenchmarkResult",
    "benchmark_kernel",
    "warmup_thread_pool",
    "run_custom_function",
    "CpuQueue",
]


@pytest.mark.parametrize("name", SEED_ROOT_NAMES + ["load_plan"])
def test_seed_root_names_resolve_to_their_module_objects(name: str) -> None:
    value = getattr(svod_min, name)
    assert name in svod_min.__all__ and name in dir(svod_min)
    home = sys.modules["svod_min." + svod_min._LAZY[name]]
    assert getattr(home, name) is value


def test_every_public_name_resolves() -> None:
    for name in svod_min.__all__:
        assert getattr(svod_min, name) is not None, name


def test_kernels_subpackage_is_an_attribute() -> None:
    assert isinstance(svod_min.kernels, types.ModuleType)
    assert svod_min.kernels.__name__ == "svod_min.kernels"


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchThing'"):
        svod_min.NoSuchThing  # noqa: B018


def test_import_stays_cheap() -> None:
    """``import svod_min`` loads no plan, device, compiler or kernel module (they load on first use)."""
    code = (
        "import sys, svod_min\n"
        "heavy = sorted(m for m in sys.modules "
        "if m.startswith('svod_min.') and m not in ('svod_min.error', 'svod_min.lazy'))\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", "import svod_min loaded: %s" % out.stdout.strip()
