"""ObjectCache.verify() reads entries as get() does: a planted FIFO or device link is reported, never
hangs (moved from the CPU misuse tests; belongs with tests/cache/test_kernel_cache.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from support.paths import REPO_DIR

_ROOT = REPO_DIR


def _verify_in_a_child(plant: str) -> "subprocess.CompletedProcess[str]":
    code = textwrap.dedent('''
        import os, sys, tempfile
        from svod_min.cache.kernel_cache import ObjectCache
        cache = ObjectCache(tempfile.mkdtemp(prefix="svod-verify-"))
        path = cache.path_for("k")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.mkfifo(path) if sys.argv[1] == "fifo" else os.symlink("/dev/zero", path)
        print(cache.verify() == [path])
    ''')
    return subprocess.run([sys.executable, "-c", code, plant], capture_output=True, text=True, timeout=30, cwd=_ROOT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs and symlinks")
@pytest.mark.parametrize("plant", ["fifo", "devzero"])
def test_cache_verify_reports_a_planted_fifo_or_device_link_instead_of_hanging(plant: str) -> None:
    result = _verify_in_a_child(plant)  # a blocking open() of a FIFO, an endless read of /dev/zero
    assert result.returncode == 0 and result.stdout.strip() == "True", result.stderr[-2000:]
