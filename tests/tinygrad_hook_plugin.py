"""pytest plugin for running tinygrad's own tests with (or without) svod_min's loader hook.

    SVOD_TINYGRAD_HOOK=1 SVOD_TINYGRAD_RESULTS=out.json python -m pytest -p tinygrad_hook_plugin test_tiny.py

(with this folder on PYTHONPATH). With ``SVOD_TINYGRAD_HOOK=1`` the hook is installed before any
test is collected, so every CPU program of the run, the device's own included, goes through it.
Either way the outcome of every test (by node id) and the loader's counts are written as JSON to
``SVOD_TINYGRAD_RESULTS``, which tests/interop/test_interop_tinygrad_loader.py compares.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict

from svod_min.config import env_flag
from svod_min.interop import tinygrad_loader

_outcomes: Dict[str, str] = {}


def pytest_configure(config: Any) -> None:
    if env_flag("SVOD_TINYGRAD_HOOK", False):
        tinygrad_loader.use_svod_loader()


def pytest_runtest_logreport(report: Any) -> None:
    # a failure in any phase marks the test failed; a skip in setup marks it skipped
    if report.when == "call" or report.outcome != "passed":
        if _outcomes.get(report.nodeid) != "failed":
            _outcomes[report.nodeid] = report.outcome


def pytest_unconfigure(config: Any) -> None:
    hooked = tinygrad_loader.is_installed()
    if hooked:
        tinygrad_loader.restore_tinygrad_loader()
    path = os.environ.get("SVOD_TINYGRAD_RESULTS")
    if path:
        with open(path, "w") as fh:
            json.dump({"hooked": hooked, "outcomes": _outcomes, "stats": tinygrad_loader.loader_stats()._asdict()}, fh)
