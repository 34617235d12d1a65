"""Ranged-batch bundles against fixed builds of the same batch and onnxruntime.

    python -m svod_min bench --only ranged
    python -m svod_min.perf.benchmarks.bench_ranged [--models a,b] [--max 4] [--sizes 1,3,4] [--reps 9] [--json]

For each zoo model whose batch is symbolic (:mod:`svod_min.perf.zoo`), one bundle is built with
``--shape INPUT=1..MAX,...`` (docs/onnx.md, "Ranged batch"), and at each batch of ``--sizes`` a bundle is
built for that batch alone; all three are timed in turn in this process at one thread (medians of ``--reps``
rounds, the order alternating):

* ``ranged/fixed``: the ranged bundle's speed as a fraction of the fixed bundle's at the same batch
  (fixed time / ranged time). Goal: >= 0.9 at every size.
* ``ort/ranged``: onnxruntime's time over the ranged bundle's (> 1: svod_min is faster).
* ``error``: the ranged bundle's largest difference from onnxruntime on the same rows, relative to the
  output's largest value.
* at the largest size, the peak resident memory of a fresh process of each: the ranged bundle run at its
  largest binding (``svod_min.pyz run``), and onnxruntime (a session, one run). Goal: <= 1.2x onnxruntime's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence

from svod_min.perf import zoo
from svod_min.perf.benchmarks.bench_onnx import (
    ORT_CHILD,
    alternating_medians,
    child_env,
    missing_dependency,
    ort_session,
    run_child,
)

#: The zoo models whose first input dim is the batch, and whose graph keeps batch rows apart.
MODELS = ("pplcnet-orientation", "yolov8n-nudenet", "basic-pitch", "smart-turn-int8")


def build(onnx_path: str, out: str, input_name: str, dims: Sequence[str]) -> None:
    """``python -m svod_min build`` for this host's target only (``dims``: ``"1..4"`` ranges one)."""
    from svod_min.compiler.targets import host_target
    from svod_min.error import BundleError

    shape = "%s=%s" % (input_name, ",".join(dims))
    cmd = [sys.executable, "-m", "svod_min", "build", onnx_path, "-o", out, "--target", host_target()]
    proc = subprocess.run(
        cmd + ["--shape", shape, "--no-expect"], capture_output=True, text=True, env=child_env(1), timeout=1800
    )
    if proc.returncode != 0:
        raise BundleError("svod_min build %s --shape %s failed: %s" % (os.path.basename(onnx_path), shape, proc.stderr))


def relative_error(got: Dict[str, Any], want: List[Any], names: Sequence[str]) -> float:
    import numpy as np

    worst = 0.0
    for name, ref in zip(names, want):
        ref = np.asarray(ref, dtype=np.float64)
        diff = np.abs(np.asarray(got[name], dtype=np.float64) - ref).max() if ref.size else 0.0
        worst = max(worst, float(diff) / max(1e-12, float(np.abs(ref).max()) if ref.size else 1.0))
    return worst


def measure_model(name: str, hi: int, sizes: Sequence[int], reps: int, directory: str) -> List[Dict[str, Any]]:
    """One row per batch size of ``sizes`` (each <= ``hi``) for zoo model ``name``."""
    import numpy as np

    from svod_min import load_model
    from svod_min.devices.cpu.device import CpuDevice

    model = zoo.by_name(name)
    path = zoo.fetch(model)
    ((input_name, dims),) = model.shapes
    rest = list(dims[1:])
    ranged_path = os.path.join(directory, "%s.ranged.svod" % name)
    build(path, ranged_path, input_name, ["1..%d" % hi] + [str(d) for d in rest])
    ranged = load_model(ranged_path, device=CpuDevice(threads=1))
    session = ort_session(path, 1)
    names = [o.name for o in session.get_outputs()]
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        fixed_path = os.path.join(directory, "%s.fixed%d.svod" % (name, n))
        build(path, fixed_path, input_name, [str(d) for d in [n] + rest])
        fixed = load_model(fixed_path, device=CpuDevice(threads=1))
        feed = {input_name: rng.uniform(-1.0, 1.0, [n] + rest).astype(np.float32)}
        error = relative_error(ranged.run(feed), session.run(None, feed), names)
        runs = {"ranged": ranged.run, "fixed": fixed.run, "ort": lambda f: session.run(None, f)}
        times = alternating_medians({k: (lambda run=run, f=feed: run(f)) for k, run in runs.items()}, reps)
        row = {"model": name, "batch": n, "range": "1..%d" % hi, "error": error}
        row.update({"%s_ms" % k: v * 1e3 for k, v in times.items()})
        row["ranged/fixed"] = times["fixed"] / times["ranged"]
        row["ort/ranged"] = times["ort"] / times["ranged"]
        if n == hi:
            row.update(peak_memory(ranged_path, path, input_name, feed[input_name], directory))
        rows.append(row)
    return rows


def peak_memory(bundle: str, onnx_path: str, input_name: str, array: Any, directory: str) -> Dict[str, Any]:
    """Peak RSS of a fresh svod_min process running ``bundle`` on ``array`` and of onnxruntime's equivalent."""
    import numpy as np

    from svod_min.planfile.pyz import build_pyz

    pyz = os.path.join(directory, "svod_min.pyz")
    if not os.path.exists(pyz):
        build_pyz(pyz)
    npy = os.path.join(directory, "input.npy")
    np.save(npy, array)
    env = dict(os.environ, SVOD_THREADS="1")
    svod = run_child(
        [sys.executable, pyz, "run", bundle, "--input", "%s=%s" % (input_name, npy), "--once"], env, "svod"
    )
    ort = run_child([sys.executable, "-c", ORT_CHILD, onnx_path, input_name, npy], env, "onnxruntime")
    return {"svod_rss_mb": svod.max_rss_bytes / 2**20, "ort_rss_mb": ort.max_rss_bytes / 2**20}


def rows(quick: bool = False) -> List[Dict[str, Any]]:
    """The bench suite's rows (:mod:`svod_min.perf.bench_suite`): per model and batch, the ranged bundle against the
    fixed build (goal >= 0.9) and against onnxruntime; ``quick``: one model, fewer rounds."""
    missing = missing_dependency()
    if missing:
        return [{"measure": "ranged batch", "svod_min": None, "peer": missing, "met": None}]
    out: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="svod-bench-ranged-") as directory:
        for name in MODELS[:1] if quick else MODELS:
            for r in measure_model(name, 4, (1, 3, 4), 3 if quick else 9, directory):
                where = "%s at batch %d of a 1..4 bundle" % (r["model"], r["batch"])
                out.append(_row(where + ", ms", r["ranged_ms"], "fixed build", r["fixed_ms"], r["ranged/fixed"], 0.9))
                out.append(_row(where + ", ms", r["ranged_ms"], "onnxruntime", r["ort_ms"], r["ort/ranged"], 1.0))
    return out


def _row(measure: str, mine: float, peer: str, theirs: float, ratio: float, goal: float) -> Dict[str, Any]:
    return {
        "measure": measure,
        "svod_min": round(mine, 3),
        "peer": peer,
        "peer_value": round(theirs, 3),
        "ratio": round(ratio, 3),
        "goal": ">= %.1f" % goal,
        "met": ratio >= goal,
    }


def markdown(rows: Sequence[Dict[str, Any]]) -> str:
    """The rows as docs/performance.md shows them."""
    lines = [
        "| model | batch (range) | ranged ms | fixed ms | ranged/fixed | onnxruntime ms | ort/ranged | error | "
        "peak RSS MB (svod / ort) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rss = "%.0f / %.0f" % (r["svod_rss_mb"], r["ort_rss_mb"]) if "svod_rss_mb" in r else ""
        figures = (r["ranged_ms"], r["fixed_ms"], r["ranged/fixed"], r["ort_ms"], r["ort/ranged"], r["error"])
        lines.append(
            "| %s | %d (%s) | %.2f | %.2f | %.2f | %.2f | %.2f | %.1e | %s |"
            % ((r["model"], r["batch"], r["range"]) + figures + (rss,))
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS), help="zoo models, comma-separated")
    p.add_argument("--max", type=int, default=4, help="the range's largest batch (default 4)")
    p.add_argument("--sizes", default="1,3,4", help="batches to time, comma-separated (default 1,3,4)")
    p.add_argument("--reps", type=int, default=9, help="timed rounds per size (default 9)")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    args = p.parse_args(argv)
    if not 1 <= args.max:
        p.error("--max must be >= 1")
    missing = missing_dependency()
    if missing:
        print("bench_ranged: nothing measured: %s" % missing)
        return 0
    sizes = [int(s) for s in args.sizes.split(",")]
    if any(not 1 <= s <= args.max for s in sizes):
        p.error("--sizes must lie in 1..--max")
    measured: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="svod-bench-ranged-") as directory:
        for name in [m for m in args.models.split(",") if m]:
            measured.extend(measure_model(name, args.max, sizes, args.reps, directory))
    print(json.dumps(measured, indent=1) if args.json else markdown(measured))
    return 0


if __name__ == "__main__":
    sys.exit(main())
