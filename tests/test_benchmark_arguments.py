"""benchmark.py refuses malformed configurations and devices with named errors (moved from the CPU
misuse tests; belongs with tests/test_benchmark.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest


@pytest.mark.parametrize("kwargs", [dict(timing_runs=True), dict(warmup_runs=False), dict(early_stop=float("nan")),
                                    dict(early_stop=True), dict(warmup_budget=float("nan"))])
def test_benchmark_config_refuses_bools_and_nan(kwargs: Any) -> None:
    from svod_min.benchmark import BenchmarkConfig

    with pytest.raises(ValueError, match="must be"):  # error.py has no configuration error: plain ValueError
        BenchmarkConfig(**kwargs)


@pytest.mark.parametrize("device", [object(), SimpleNamespace(threads=2), SimpleNamespace(threads=True, pool=None)])
def test_warmup_thread_pool_refuses_what_is_not_a_cpu_device(device: Any) -> None:
    from svod_min.benchmark import warmup_thread_pool
    from svod_min.error import DeviceError

    with pytest.raises(DeviceError, match="warmup_thread_pool needs a CPU device"):
        warmup_thread_pool(device)  # was AttributeError: no attribute 'pool'
