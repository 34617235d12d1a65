"""Model bundles: cold start of ``python3 -I svod_min.pyz run MODEL.svod`` and replay per target.

Whole processes, start to result, median of alternated runs: the one-file runtime on a bundle
with the object cache off, against ``python -m svod_min run plan.json`` with a warm object cache
(the source path at its best), and against tinygrad's first run of the same model in a fresh
process (compile included, its disk cache off). Then the replay of each exported model with the
``x86_64-v3`` objects against the portable ``x86_64`` build. Run alone with
``python bench/bench_bundle.py``; ``python -m svod_min bench`` includes it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from svod_min.perf.bench_suite import format_table, make_row, paired_median_s  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples", "tinygrad")
MODELS = ("mlp", "convnet", "attention")

TINYGRAD_FIRST_RUN = r"""
import importlib.util, sys
from tinygrad import Tensor
spec = importlib.util.spec_from_file_location("models", sys.argv[1])
models = importlib.util.module_from_spec(spec); spec.loader.exec_module(models)
make = models.MODELS[sys.argv[2]]
model, inputs, _ = make(symbolic=False) if sys.argv[2] == "mlp" else make()
out = model(**{k: v if isinstance(v, Tensor) else Tensor(v) for k, v in inputs.items()})
[t.numpy() for t in out.values()]
"""


def _wall_ms(cmd: List[str], env: Dict[str, str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = (time.perf_counter() - t0) * 1e3
    if proc.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(cmd[:4]), proc.stderr.strip()[-300:]))
    return elapsed


def _medians(cmds: Dict[str, Any], reps: int) -> Dict[str, float]:
    """Median wall ms of each (cmd, env), the commands alternated so that all see the same machine."""
    times: Dict[str, List[float]] = {k: [] for k in cmds}
    for k, (cmd, env) in cmds.items():
        _wall_ms(cmd, env)  # warm the page cache and the object cache
    for _ in range(reps):
        for k, (cmd, env) in cmds.items():
            times[k].append(_wall_ms(cmd, env))
    return {k: statistics.median(v) for k, v in times.items()}


def _tinygrad_available() -> bool:
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        return False
    return True


def cold_start_rows(work: str, reps: int) -> List[dict]:
    from svod_min.planfile.bundle_build import build_bundle
    from svod_min.planfile.pyz import build_pyz

    pyz = os.path.join(work, "svod_min.pyz")
    build_pyz(pyz)
    base = dict(os.environ, PYTHONPATH=ROOT)
    bare = {"PATH": os.environ.get("PATH", ""), "SVOD_OBJECT_CACHE": "0", "HOME": work}
    warm = dict(base, SVOD_OBJECT_CACHE_DIR=os.path.join(work, "cache"))
    tiny = dict(os.environ, DEV="CPU", CACHELEVEL="0")
    rows = []
    for model in MODELS:
        plan = os.path.join(EXAMPLES, model, "plan.json")
        bundle = os.path.join(work, model + ".svod")
        build_bundle(plan, bundle, targets=["x86_64", "x86_64-v3"])
        cmds: Dict[str, Any] = {
            "bundle": ([sys.executable, "-I", pyz, "run", bundle], bare),
            "source": ([sys.executable, "-m", "svod_min", "run", plan], warm),
        }
        if _tinygrad_available():
            cmds["tinygrad"] = (
                [sys.executable, "-c", TINYGRAD_FIRST_RUN, os.path.join(EXAMPLES, "models.py"), model],
                tiny,
            )
        ms = _medians(cmds, reps)
        met = ms["bundle"] <= 1.2 * ms["source"] and ms["bundle"] <= 200
        rows.append(
            make_row(
                "cold start %s: pyz + bundle, cache off (ms)" % model,
                ms["bundle"],
                ms["source"],
                "python -m svod_min run plan.json, warm cache",
                "<= 1.2x peer and <= 200 ms",
                met,
            )
        )
        if "tinygrad" in ms:
            rows.append(
                make_row(
                    "cold start %s: pyz + bundle vs tinygrad first run (ms)" % model,
                    ms["bundle"],
                    ms["tinygrad"],
                    "tinygrad 0.14 first run, compile included",
                    "faster than peer",
                    ms["bundle"] <= ms["tinygrad"],
                )
            )
    return rows


def replay_rows(work: str, reps: int) -> List[dict]:
    from svod_min.planfile.load import load_plan

    rows = []
    for model in MODELS:
        bundle = os.path.join(work, model + ".svod")
        plans = {}
        for target in ("x86_64", "x86_64-v3"):
            os.environ["SVOD_TARGET"] = target
            try:
                loaded = load_plan(bundle)
            finally:
                del os.environ["SVOD_TARGET"]
            loaded.plan.execute()
            assert all(ok for _, ok, _ in loaded.verify()), (model, target)
            plans[target] = loaded.plan

        def batch(plan: Any) -> Any:
            return lambda: [plan.execute() for _ in range(20)]

        s = paired_median_s({t: batch(p) for t, p in plans.items()}, reps)
        v3, portable = s["x86_64-v3"] / 20 * 1e6, s["x86_64"] / 20 * 1e6
        rows.append(
            make_row(
                "bundle replay %s, x86_64-v3 objects (µs)" % model,
                v3,
                portable,
                "the portable x86_64 objects",
                "at least as fast (within 2%)",
                v3 <= portable * 1.02,
            )
        )
    return rows


def rows(quick: bool = False) -> List[dict]:
    from svod_min.compiler.targets import TARGETS, runnable_here

    with tempfile.TemporaryDirectory(prefix="svod-bench-bundle-") as work:
        table = cold_start_rows(work, 3 if quick else 7)
        if runnable_here(TARGETS["x86_64-v3"]):
            table += replay_rows(work, 5 if quick else 15)
    return table


if __name__ == "__main__":
    print(format_table(rows(quick="--quick" in sys.argv)))
