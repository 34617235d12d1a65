"""svod_min as tinygrad's CPU loader vs tinygrad's own loader, over tinygrad's test/test_tiny.py.

Two measures, both sides in the same run:

* per-program load time: a child runs test_tiny.py once (tinygrad as shipped) to collect every CPU
  program it builds, then constructs each program round-robin with tinygrad's loader and with
  svod_min's hook (``CPUProgram(dev, obj)``: relocation, mapping, icache; the drop is not timed);
  the row is the median over programs of each program's median.
* test_tiny.py wall time: the whole file in a fresh ``python -m pytest`` as shipped and hooked
  (``tests/tinygrad_hook_plugin.py``), ``CACHELEVEL=0``; the minimum over rounds, alternating.

Needs tinygrad 0.14 and its 0.14.0 sdist's test_tiny.py (``SVOD_TINYGRAD_TEST_TINY`` or the copy
.ci/run caches); without them the rows say so. Run alone with ``python bench/bench_tinygrad_loader.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from svod_min.perf.bench_suite import format_table, make_row, run_tinygrad_child  # noqa: E402

LOAD_CHILD = r"""
import json, statistics, sys, time
import pytest
from tinygrad import Device
from tinygrad.runtime import ops_cpu
from svod_min.interop import tinygrad_loader
objs, original = [], ops_cpu.CPUProgram.__init__
def collect(self, dev, obj):
    objs.append(obj); original(self, dev, obj)
ops_cpu.CPUProgram.__init__ = collect
pytest.main(["-q", "-p", "no:cacheprovider", sys.argv[1]])
ops_cpu.CPUProgram.__init__ = original
dev, rounds = Device["CPU"], int(sys.argv[2])
objs = [o for o in objs if bytes(o.lib[:4]) == b"\x7fELF"]
samples = {"tinygrad": [[] for _ in objs], "svod": [[] for _ in objs]}
for _ in range(rounds):
    for side in ("tinygrad", "svod"):
        if side == "svod": tinygrad_loader.use_svod_loader()
        for i, obj in enumerate(objs):
            t0 = time.perf_counter(); prog = ops_cpu.CPUProgram(dev, obj); samples[side][i].append(time.perf_counter() - t0)
            del prog
        if side == "svod": tinygrad_loader.restore_tinygrad_loader()
out = {side: statistics.median(statistics.median(s) for s in per) * 1e6 for side, per in samples.items()}
out.update(programs=len(objs), bytes=statistics.median(len(o.lib) for o in objs))
print(json.dumps(out))
"""  # noqa: E501 (the child's source, kept as written)


def find_test_tiny(workdir: str) -> Optional[str]:
    """A copy of test_tiny.py in ``workdir`` (alone: next to the sdist's tinygrad/ it would import that)."""
    explicit = os.environ.get("SVOD_TINYGRAD_TEST_TINY")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    sdist = os.path.join(cache, "svod-ci", "tinygrad-0.14.0", "tinygrad-0.14.0.tar.gz")
    target = os.path.join(workdir, "test_tiny.py")
    if explicit and os.path.isfile(explicit):
        with open(explicit, "rb") as src, open(target, "wb") as dst:
            dst.write(src.read())
        return target
    if not os.path.isfile(sdist):
        return None
    with tarfile.open(sdist) as tar:
        member = tar.extractfile("tinygrad-0.14.0/test/test_tiny.py")
        if member is None:
            return None
        with open(target, "wb") as dst:
            dst.write(member.read())
    return target


def test_tiny_wall_s(test_tiny: str, hooked: bool) -> Optional[float]:
    env = dict(
        os.environ,
        DEV="CPU",
        CACHELEVEL="0",
        SVOD_TINYGRAD_HOOK="1" if hooked else "0",
        PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "tests"), ROOT]),
    )
    env.pop("DEBUG", None)
    t0 = time.perf_counter()
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tinygrad_hook_plugin",
            "-p",
            "no:cacheprovider",
            os.path.basename(test_tiny),
        ],
        cwd=os.path.dirname(test_tiny),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    wall = time.perf_counter() - t0
    if child.returncode != 0:
        print(
            "test_tiny.py (%s) failed: %s" % ("hooked" if hooked else "as shipped", child.stdout[-500:]),
            file=sys.stderr,
        )
        return None
    return wall


def rows(quick: bool = False) -> List[dict]:
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        return [make_row("tinygrad loader: tinygrad not installed", 0.0, None, "-", "-", None)]
    with tempfile.TemporaryDirectory() as workdir:
        test_tiny = find_test_tiny(workdir)
        if test_tiny is None:
            return [
                make_row("tinygrad loader: no tinygrad 0.14.0 sdist (.ci/run fetches it)", 0.0, None, "-", "-", None)
            ]
        table = _load_rows(test_tiny, 3 if quick else 10)
        walls: Dict[bool, List[float]] = {False: [], True: []}
        for _ in range(1 if quick else 3):
            for hooked in (False, True):
                wall = test_tiny_wall_s(test_tiny, hooked)
                if wall is not None:
                    walls[hooked].append(wall)
    ours, theirs = min(walls[True], default=None), min(walls[False], default=None)
    if ours is not None:
        met = None if theirs is None else ours <= 1.1 * theirs
        table.append(
            make_row(
                "test_tiny.py wall s, svod_min as loader", ours, theirs, "tinygrad 0.14 as shipped", "<= 1.1x peer", met
            )
        )
    return table


def _load_rows(test_tiny: str, rounds: int) -> List[dict]:
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + ([saved] if saved else []))  # the child imports svod_min
    try:
        result = run_tinygrad_child(LOAD_CHILD, [test_tiny, str(rounds)])
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved
    if result is None:
        return []
    label = "tinygrad program load µs (median of %d test_tiny programs, %d B)" % (result["programs"], result["bytes"])
    return [
        make_row(label, result["svod"], result["tinygrad"], "tinygrad 0.14 loader (RWX mmap)", "side by side", None)
    ]


if __name__ == "__main__":
    print(format_table(rows(quick="--quick" in sys.argv)))
