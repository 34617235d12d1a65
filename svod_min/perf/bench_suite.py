"""``python -m svod_min bench``: every benchmark of the project, one table.

The benchmarks ship with the package (:mod:`svod_min.perf.benchmarks`), so an
installed svod_min measures its own machine; a source checkout's ``bench/``
adds the few that need the checkout. Each ``bench_*.py`` exposes
``rows(...) -> list[dict]`` with the keys measure, svod_min, peer,
peer_value, ratio, goal, met; peers are measured in the same run.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..config import env_str
from ..error import NotSupportedError

KEYS = ("measure", "svod_min", "peer", "peer_value", "ratio", "goal", "met")


def paired_median_s(fns: Dict[str, Callable[[], Any]], reps: int, warmup: int = 2) -> Dict[str, float]:
    """Median seconds of each callable, timed round-robin so that all see the same machine state."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples: Dict[str, List[int]] = {k: [] for k in fns}
    for _ in range(reps):
        for key, fn in fns.items():
            t0 = time.perf_counter_ns()
            fn()
            samples[key].append(time.perf_counter_ns() - t0)
    return {k: statistics.median(v) / 1e9 for k, v in samples.items()}


#: The directory holding the svod_min package (a checkout, or site-packages): child processes of a
#: benchmark put it on PYTHONPATH so that they import this same svod_min.
PACKAGE_PARENT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
)  # svod_min/perf/ -> its parent
PACKAGED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks")


def bench_compilers() -> List[str]:
    """The C compilers a benchmark compares: ``SVOD_CC`` alone when set (a gcc-only run), else clang and gcc."""
    chosen = env_str("SVOD_CC")
    names = [chosen] if chosen else ["clang", "gcc"]
    return [cc for cc in names if shutil.which(cc)]


def find_bench_dir(explicit: Optional[str] = None) -> Optional[str]:
    """The checkout's extra benchmarks: ``explicit``, else ./bench, else the checkout next to this package.

    None when there is none (an installed package): the packaged benchmarks still run.
    """
    if explicit:
        if not os.path.isdir(explicit):
            raise NotSupportedError("--bench-dir %s is not a directory" % explicit)
        return explicit
    for path in (os.path.join(os.getcwd(), "bench"), os.path.join(PACKAGE_PARENT, "bench")):
        if os.path.isdir(path):
            return path
    return None


def _load(path: str) -> Any:
    name = "svod_bench_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _bench_files(directory: Optional[str]) -> List[Tuple[str, Callable[[], Any]]]:
    """(file name, loader) of every benchmark: the packaged ones, then the checkout's others."""
    found: List[Tuple[str, Callable[[], Any]]] = []
    for name in sorted(os.listdir(PACKAGED)):
        if name.startswith("bench_") and name.endswith(".py"):
            module = "svod_min.perf.benchmarks." + name[:-3]
            found.append((name, lambda module=module: importlib.import_module(module)))
    packaged = {name for name, _ in found}
    for name in sorted(os.listdir(directory)) if directory else []:
        if name.startswith("bench_") and name.endswith(".py") and name not in packaged:  # a shim of a packaged one
            found.append((name, lambda path=os.path.join(directory, name): _load(path)))  # type: ignore[arg-type]
    return found


def _normalise(row: Dict[str, Any], source: str) -> Dict[str, Any]:
    out = {k: row.get(k) for k in KEYS}
    out["source"] = source
    return out


def run_suite(
    bench_dir: Optional[str] = None, quick: bool = False, only: Optional[List[str]] = None
) -> List[Dict[str, Any]]:
    """Run every benchmark with a ``rows()`` function; a failing one becomes an error row.

    The benchmarks installed with the package (:mod:`svod_min.perf.benchmarks`) always run; a source
    checkout's ``bench/`` adds the ones that need it (found as :func:`find_bench_dir` says).
    """
    rows: List[Dict[str, Any]] = []
    for name, load in _bench_files(find_bench_dir(bench_dir)):
        if only and not any(o in name for o in only):
            continue
        try:
            fn = getattr(load(), "rows", None)
            if fn is None:
                continue
            kwargs = {"quick": True} if quick and "quick" in inspect.signature(fn).parameters else {}
            rows.extend(_normalise(r, name) for r in fn(**kwargs))
        except Exception as exc:  # one broken benchmark must not hide the others
            rows.append(
                {**{k: None for k in KEYS}, "measure": "%s failed: %s" % (name, exc), "met": False, "source": name}
            )
            traceback.print_exc(file=sys.stderr)
    return rows


def run_tinygrad_child(code: str, args: List[str], timeout: float = 900) -> Optional[Any]:
    """Run ``code`` in a child Python with tinygrad on the CPU; its last stdout line is JSON.

    None (with the reason on stderr) when tinygrad is not installed or the child fails: a
    benchmark then reports no peer rather than failing. A child keeps tinygrad's imports,
    caches and threads out of the measuring process.
    """
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        return None
    env = dict(os.environ, DEV="CPU", CACHELEVEL="0")
    env.pop("DEBUG", None)
    try:
        result = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired:
        print("tinygrad peer timed out", file=sys.stderr)
        return None
    if result.returncode != 0:
        print("tinygrad peer failed: %s" % (result.stderr.strip().splitlines() or ["?"])[-1], file=sys.stderr)
        return None
    return json.loads(result.stdout.strip().splitlines()[-1])


def make_row(
    measure: str, ours: float, peer: Optional[float], peer_name: str, goal: str, met: Optional[bool], digits: int = 2
) -> Dict[str, Any]:
    """One benchmark row; ratio = peer / svod_min (> 1: svod_min is faster for time-like measures)."""
    ratio = (peer / ours) if (peer is not None and ours) else None
    return {
        "measure": measure,
        "svod_min": round(ours, digits),
        "peer": peer_name,
        "peer_value": None if peer is None else round(peer, digits),
        "ratio": None if ratio is None else round(ratio, 2),
        "goal": goal,
        "met": met,
    }


def format_table(rows: List[Dict[str, Any]]) -> str:
    headers = list(KEYS)
    cells = [[_cell(r.get(h)) for h in headers] for r in rows]
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.ljust(w) for v, w in zip(c, widths)) for c in cells]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return "%.3g" % value if abs(value) < 1000 else "%.0f" % value
    return str(value)
