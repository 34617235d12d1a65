"""ONNX models benchmark: the onnx wheel's nine light CNNs, built with ``svod_min build``, against onnxruntime.

    python -m svod_min bench --only onnx
    python -m svod_min.perf.benchmarks.bench_onnx [--json] [--quick] [--models a,b] [--threads 1,2] [--profile]

Each model gets seeded random weights (:mod:`svod_min.perf.light_models`; the wheel's own weights
are all 0.02), its initializers stay out of the graph inputs (so onnxruntime may fold them), and
it is built for this host's target with ``python -m svod_min build --no-expect``. Then:

* speed, per thread count: the bundle loaded on a CPU device of that many threads and an
  onnxruntime ``InferenceSession`` (``intra_op_num_threads`` the same, ``inter_op_num_threads`` 1,
  no spinning between runs, so its threads take no core from svod_min's turn), same input, same
  process, timed in turn (round-robin, medians); their outputs must agree first.
  ratio = onnxruntime / svod_min (> 1: svod_min is faster). Goal: the geometric mean over the
  models >= 1.0 at every thread count, and no model below 0.7.
* peak resident memory of a fresh process that loads the model and runs it once (``ru_maxrss``
  of that child, from ``wait4``), both at 1 thread. Goal: svod_min <= 1.2x onnxruntime's.
* cold start: wall time of a fresh ``python3`` with ``svod_min.pyz`` on its path that loads the
  bundle, reads the input ``.npy`` and runs to the first output (what ``svod_min.pyz run`` does
  before it verifies, profiles and times), against a fresh ``python3`` that imports onnxruntime,
  creates the session, reads the same ``.npy`` and runs once. Medians; goal: svod_min <= peer.

For a model below 0.7 at 1 thread, a profile row names the op holding it back: its kernel, shape,
share of the run and GFLOP/s, beside the best rate any op reached in the same run.
Without numpy, onnx or onnxruntime every row says which is missing and nothing is measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from svod_min.perf.bench_suite import format_table

#: Speed: geometric mean of onnxruntime / svod_min over the models, at every thread count.
GOAL_GEOMEAN = 1.0
#: Speed: no single model below this ratio.
GOAL_FLOOR = 0.7
#: Peak RSS: svod_min at most this many times onnxruntime's.
GOAL_RSS = 1.2
#: A model's timed pairs last about this long at least (a 10 ms model gets more than 7 pairs) ...
PAIR_SECONDS = 1.0
#: ... up to this many pairs.
MAX_REPS = 41
#: Outputs of the two engines agree to this relative error before anything is timed.
AGREE = 1e-2

#: A model to measure: its name and a function making its ModelProto (made when its turn comes).
ModelSource = Tuple[str, Callable[[], Any]]

SVOD_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from svod_min.npy import read_npy
from svod_min.planfile.load import load_plan
loaded = load_plan(sys.argv[2])
dtype, shape, payload = read_npy(sys.argv[4])
loaded.set_input(sys.argv[3], dtype.name, tuple(shape), payload)
loaded.plan.execute()
outputs = [buf.copyout() for buf in loaded.plan.output_buffers()]
"""

#: Runs its arguments as a child and prints "exit-code seconds ru_maxrss": the launcher is a small
#: process, so the child's peak RSS is its own (a child forked from the benchmark process would
#: start its count from the benchmark's resident size), and its own start-up is not timed.
LAUNCHER = """
import resource, subprocess, sys, time
start = time.perf_counter()
code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)
seconds = time.perf_counter() - start
print(code, seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""

ORT_CHILD = """
import sys
import numpy as np
import onnxruntime as ort
options = ort.SessionOptions()
options.intra_op_num_threads = 1
options.inter_op_num_threads = 1
options.log_severity_level = 3
session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
outputs = session.run(None, {sys.argv[2]: np.load(sys.argv[3])})
"""


class Prepared(NamedTuple):
    """One model on disk: the ONNX file, its bundle, its input (name, array, .npy path)."""

    name: str
    onnx_path: str
    svod_path: str
    input_name: str
    input_array: Any
    npy_path: str


class Settings(NamedTuple):
    """How one run of the benchmark measures: thread counts, repetitions, the peer's name, where files go."""

    threads: Tuple[int, ...]
    reps: int
    pair_seconds: float
    fresh_reps: int
    peer: str
    directory: str
    pyz: str
    profile: str
    ort_spinning: bool


class ChildRun(NamedTuple):
    seconds: float
    max_rss_bytes: int


def missing_dependency() -> Optional[str]:
    """Why the benchmark cannot run here (the first missing package), or None."""
    for module, why in (("numpy", "the onnx extra (numpy)"), ("onnx", "the onnx extra (onnx)"), ("onnxruntime", "onnxruntime")):
        try:
            __import__(module)
        except ImportError:
            return "skipped: needs %s" % why
    return None


def light_sources() -> List[ModelSource]:
    """The nine light models with seed-0 random weights."""
    from svod_min.perf.light_models import light_model_names, randomized

    return [(name, lambda name=name: randomized(name, seed=0)) for name in light_model_names()]


def constant_initializers(model: Any) -> Any:
    """``model`` without its initializers among the graph inputs: onnxruntime treats such an input as
    overridable and folds nothing through it (no BatchNormalization into Conv), which is not how the
    model would be deployed."""
    inits = {t.name for t in model.graph.initializer}
    kept = [i for i in model.graph.input if i.name not in inits]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model


def child_env(threads: int) -> Dict[str, str]:
    """The environment of every child: this svod_min importable, its thread count fixed."""
    import svod_min

    parent = os.path.dirname(os.path.dirname(os.path.abspath(svod_min.__file__)))
    env = dict(os.environ, SVOD_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join([parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def build_bundle(onnx_path: str, svod_path: str) -> None:
    """``python -m svod_min build`` for this host's target, no expectations (onnxruntime is the peer here)."""
    from svod_min.compiler.targets import host_target
    from svod_min.error import BundleError

    cmd = [sys.executable, "-m", "svod_min", "build", onnx_path, "-o", svod_path, "--target", host_target(), "--no-expect"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(1), timeout=1800)
    if proc.returncode != 0:
        raise BundleError("svod_min build %s failed: %s" % (os.path.basename(onnx_path), _tail(proc.stderr)))


def prepare(name: str, make: Callable[[], Any], directory: str) -> Prepared:
    """Save the model and its seeded input, build its bundle."""
    import numpy as np
    import onnx

    from svod_min.perf.light_models import random_inputs

    model = constant_initializers(make())
    onnx_path = os.path.join(directory, name + ".onnx")
    onnx.save(model, onnx_path)
    (input_name, array), = random_inputs(model, seed=0).items()
    npy_path = os.path.join(directory, name + ".input.npy")
    np.save(npy_path, array)
    svod_path = os.path.join(directory, name + ".svod")
    build_bundle(onnx_path, svod_path)
    return Prepared(name, onnx_path, svod_path, input_name, array, npy_path)


def ort_session(path: str, threads: int, spinning: bool = False) -> Any:
    """An onnxruntime session at ``threads`` intra-op threads, one inter-op; its threads spin while they wait
    for work only with ``spinning`` (its own default, off here: its spinning outlasts a run and would take the
    other CPU from the svod_min run timed next on a machine of two; svod_min's workers poll only during a run)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def relative_error(got: Any, want: Any) -> float:
    """max |got - want| / max(|want|, 1e-3 max |want|), in float64."""
    import numpy as np

    want = np.asarray(want, np.float64)
    floor = max(1e-3 * float(np.max(np.abs(want))), 1e-12) if want.size else 1.0
    return float(np.max(np.abs(np.asarray(got, np.float64) - want) / np.maximum(np.abs(want), floor))) if want.size else 0.0


def check_agreement(model: Any, session: Any, prepared: Prepared) -> None:
    """Both engines' outputs, by position, within :data:`AGREE`; a wrong answer is never timed."""
    from svod_min.error import ExecutionError

    got = model.run({prepared.input_name: prepared.input_array})
    want = session.run(None, {prepared.input_name: prepared.input_array})
    for name, value in zip(model.output_names, want):
        err = relative_error(got[name].reshape(value.shape), value)
        if not err <= AGREE:
            raise ExecutionError("%s: output %s differs from onnxruntime's (max relative error %.3g)" % (prepared.name, name, err))


def speed(prepared: Prepared, threads: int, reps: int, pair_seconds: float = PAIR_SECONDS,
          ort_spinning: bool = False) -> Dict[str, float]:  # fmt: skip
    """Median seconds per run of svod_min and onnxruntime, timed in turn in this process."""
    from svod_min import load_model
    from svod_min.devices.cpu.device import CpuDevice
    from svod_min.perf.bench_suite import paired_median_s

    model = load_model(prepared.svod_path, device=CpuDevice(threads=threads))
    session = ort_session(prepared.onnx_path, threads, ort_spinning)
    check_agreement(model, session, prepared)
    svod_feed = {prepared.input_name: prepared.input_array}
    ort_feed = {prepared.input_name: prepared.input_array}
    fns: Dict[str, Callable[[], Any]] = {"svod": lambda: model.run(svod_feed), "ort": lambda: session.run(None, ort_feed)}
    times = paired_median_s(fns, reps_for(fns, reps, pair_seconds), warmup=0)
    del model, session
    gc.collect()  # the next thread count's copies of the weights should not sit beside these
    return times


def reps_for(fns: Dict[str, Callable[[], Any]], reps: int, pair_seconds: float) -> int:
    """``reps``, or more for a fast model: enough pairs for ``pair_seconds`` of timing, at most
    :data:`MAX_REPS` (one run of each, timed here, doubles as the warm-up)."""
    start = time.perf_counter()
    for fn in fns.values():
        fn()
    pair = time.perf_counter() - start
    return max(reps, min(MAX_REPS, int(pair_seconds / max(pair, 1e-6))))


def run_child(cmd: List[str], env: Dict[str, str]) -> ChildRun:
    """Wall time and peak RSS of one child process, through :data:`LAUNCHER`; a failing child raises with its stderr."""
    from svod_min.error import ExecutionError

    proc = subprocess.run([sys.executable, "-c", LAUNCHER] + cmd, capture_output=True, text=True, env=env, timeout=1800)
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 3 or fields[0] != "0":
        raise ExecutionError("a fresh %s process failed (%s): %s" % ("svod_min" if SVOD_CHILD in cmd else "onnxruntime",
                             fields[0] if fields else proc.returncode, _tail(proc.stderr)))  # fmt: skip
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    return ChildRun(float(fields[1]), int(fields[2]) * scale)


def fresh_processes(prepared: Prepared, pyz: str, reps: int, warm: bool) -> Dict[str, List[ChildRun]]:
    """``reps`` fresh processes of each engine, alternating, after one untimed run each when ``warm`` (the
    file cache then holds both models); the .pyz is built at the first call."""
    if not os.path.exists(pyz):
        from svod_min.planfile.pyz import build_pyz

        build_pyz(pyz)
    env = child_env(1)
    cmds = {
        "svod": [sys.executable, "-c", SVOD_CHILD, pyz, prepared.svod_path, prepared.input_name, prepared.npy_path],
        "ort": [sys.executable, "-c", ORT_CHILD, prepared.onnx_path, prepared.input_name, prepared.npy_path],
    }
    for cmd in cmds.values() if warm else ():
        run_child(cmd, env)
    runs: Dict[str, List[ChildRun]] = {k: [] for k in cmds}
    for _ in range(reps):
        for key, cmd in cmds.items():
            runs[key].append(run_child(cmd, env))
    return runs


def speed_row(name: str, threads: int, times: Dict[str, float], peer: str) -> Dict[str, Any]:
    ratio = times["ort"] / times["svod"]
    return {"measure": "onnx %s, %s: median run [ms]" % (name, _threads(threads)), "svod_min": _sig(times["svod"] * 1e3),
            "peer": "%s, %s" % (peer, _threads(threads)), "peer_value": _sig(times["ort"] * 1e3), "ratio": round(ratio, 2),
            "goal": ">= %gx peer" % GOAL_FLOOR, "met": bool(ratio >= GOAL_FLOOR)}  # fmt: skip


def geomean_row(threads: int, ratios: List[float], peer: str) -> Dict[str, Any]:
    mean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    return {"measure": "onnx: geometric mean of %d models' speed ratios, %s" % (len(ratios), _threads(threads)),
            "svod_min": None, "peer": "%s, %s" % (peer, _threads(threads)), "peer_value": None, "ratio": round(mean, 2),
            "goal": ">= %g" % GOAL_GEOMEAN, "met": bool(mean >= GOAL_GEOMEAN)}  # fmt: skip


def process_rows(name: str, runs: Dict[str, List[ChildRun]], peer: str) -> List[Dict[str, Any]]:
    """Peak RSS and cold start rows from the fresh processes' medians."""
    rss = {k: statistics.median(r.max_rss_bytes for r in v) / 2**20 for k, v in runs.items()}
    cold = {k: statistics.median(r.seconds for r in v) * 1e3 for k, v in runs.items()}
    return [
        {"measure": "onnx %s: peak RSS, fresh process, load + 1 run, 1 thread [MiB]" % name, "svod_min": _sig(rss["svod"]),
         "peer": peer, "peer_value": _sig(rss["ort"]), "ratio": round(rss["ort"] / rss["svod"], 2),
         "goal": "<= %gx peer" % GOAL_RSS, "met": bool(rss["svod"] <= GOAL_RSS * rss["ort"])},
        {"measure": "onnx %s: cold start, fresh process to first output, 1 thread [ms]" % name,
         "svod_min": _sig(cold["svod"]), "peer": peer, "peer_value": _sig(cold["ort"]),
         "ratio": round(cold["ort"] / cold["svod"], 2), "goal": "<= peer", "met": bool(cold["svod"] <= cold["ort"])},
    ]  # fmt: skip


def load_row(before: Optional[Tuple[float, ...]], after: Optional[Tuple[float, ...]]) -> Dict[str, Any]:
    """The machine's load average (1, 5, 15 min) when the run began and ended: how shared the cores were."""
    def text(load: Optional[Tuple[float, ...]]) -> str:
        return "unknown" if load is None else " ".join("%.2f" % v for v in load)

    measure = "onnx: load average (1, 5, 15 min) at the start: %s; at the end: %s; %d CPUs" % (
        text(before), text(after), os.cpu_count() or 0)
    return {"measure": measure,
            "svod_min": None, "peer": None, "peer_value": None, "ratio": None, "goal": "info", "met": None}  # fmt: skip


def failed_row(name: str, exc: BaseException) -> Dict[str, Any]:
    return {"measure": "onnx %s: failed: %s" % (name, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__),
            "svod_min": None, "peer": None, "peer_value": None, "ratio": None, "goal": None, "met": False}  # fmt: skip


def skip_rows(names: Sequence[str], why: str) -> List[Dict[str, Any]]:
    return [{"measure": "onnx %s" % name, "svod_min": None, "peer": why, "peer_value": None, "ratio": None,
             "goal": None, "met": None} for name in names]  # fmt: skip


def rows(quick: bool = False, threads: Sequence[int] = (1, 2), models: Optional[Sequence[ModelSource]] = None,
         profile: str = "slow", pyz: Optional[str] = None, ort_spinning: bool = False) -> List[Dict[str, Any]]:  # fmt: skip
    """Speed rows per model and thread count, a geometric mean per thread count, peak RSS and cold start
    rows per model; ``profile``: "slow" (models below 0.7 at the first thread count), "all" or "none";
    ``pyz``: the svod_min.pyz of the cold starts (default: one built from this svod_min into a temporary folder)."""
    sources = light_sources() if models is None else list(models)
    why = missing_dependency()
    if why:
        return skip_rows([name for name, _ in sources], why)
    import onnxruntime

    load_before = _load_average()
    model_rows: List[Dict[str, Any]] = []
    ratios: Dict[int, List[float]] = {t: [] for t in threads}
    with tempfile.TemporaryDirectory(prefix="svod_bench_onnx_") as directory:
        settings = Settings(tuple(threads), 3 if quick else 7, 0.0 if quick else PAIR_SECONDS, 1 if quick else 3,
                            "onnxruntime %s%s" % (onnxruntime.__version__, ", spinning" if ort_spinning else ""), directory,
                            pyz or os.path.join(directory, "svod_min.pyz"), profile, ort_spinning)  # fmt: skip
        for name, make in sources:
            try:
                model_rows += one_model(name, make, settings, ratios)
            except Exception as exc:  # one model failing must not hide the others
                model_rows.append(failed_row(name, exc))
    means = [geomean_row(t, ratios[t], settings.peer) for t in threads if ratios[t]]
    return means + model_rows + [load_row(load_before, _load_average())]


def one_model(name: str, make: Callable[[], Any], settings: Settings, ratios: Dict[int, List[float]]) -> List[Dict[str, Any]]:
    """Every row of one model; its speed ratios are appended to ``ratios`` for the geometric means."""
    prepared = prepare(name, make, settings.directory)
    out = []
    for t in settings.threads:
        row = speed_row(name, t, speed(prepared, t, settings.reps, settings.pair_seconds, settings.ort_spinning), settings.peer)
        ratios[t].append(row["ratio"])
        out.append(row)
    runs = fresh_processes(prepared, settings.pyz, settings.fresh_reps, warm=settings.fresh_reps > 1)
    out += process_rows(name, runs, settings.peer)
    if settings.profile == "all" or settings.profile == "slow" and not out[0]["met"]:
        from svod_min.perf.op_profile import profile_row

        out.append(profile_row(name, prepared.svod_path, {prepared.input_name: prepared.input_array}, prepared.onnx_path))
    for path in (prepared.svod_path, prepared.onnx_path):
        os.unlink(path)  # vgg19's bundle alone is half a gigabyte
    return out


def _load_average() -> Optional[Tuple[float, ...]]:
    try:
        return tuple(os.getloadavg())
    except (AttributeError, OSError):  # not on every platform
        return None


def _sig(value: float, digits: int = 3) -> float:
    """``value`` to ``digits`` significant digits (a tiny model's 0.0123 ms keeps its precision)."""
    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(0, digits - 1 - int(math.floor(math.log10(abs(value))))))


def _threads(n: int) -> str:
    return "%d thread%s" % (n, "" if n == 1 else "s")


def _tail(text: str) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def markdown(table: List[Dict[str, Any]]) -> str:
    """The rows as docs/performance.md shows them: one line per model, then the means, the profiles, the load."""
    models: Dict[str, Dict[str, Any]] = {}
    notes: List[str] = []
    for row in table:
        measure = str(row.get("measure") or "")
        name = measure[5:].split(",")[0].split(":")[0] if measure.startswith("onnx ") else ""
        if str(row.get("peer") or "").startswith("skipped"):
            notes.append("%s: %s" % (measure, row["peer"]))
            continue
        if ": profile" in measure or "failed" in measure or "load average" in measure or "geometric mean" in measure or not name:
            value = "" if row.get("svod_min") is None else ": %s (%s: %s)" % (row["svod_min"], row["peer"], row["peer_value"])
            notes.append(measure + value)
            if "geometric mean" in measure:
                notes[-1] = "%s: **%s** (goal %s: %s)" % (measure, row["ratio"], row["goal"], _met(row["met"]))
            continue
        kind = ("1" if "1 thread: median" in measure else "2" if "2 threads: median" in measure
                else "rss" if "peak RSS" in measure else "cold")  # fmt: skip
        models.setdefault(name, {})[kind] = row
    head = ["model", "1 thread ms: svod_min / ort (ratio)", "2 threads ms: svod_min / ort (ratio)",
            "peak RSS MiB: svod_min / ort (ratio)", "cold start ms: svod_min / ort (ratio)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, kinds in models.items():
        lines.append("| %s | %s |" % (name, " | ".join(_cell(kinds.get(k)) for k in ("1", "2", "rss", "cold"))))
    return "\n".join(lines + [""] + ["- " + n for n in notes])


def _cell(row: Optional[Dict[str, Any]]) -> str:
    if row is None or row.get("ratio") is None:
        return "-"
    return "%s / %s (%.2f%s)" % (_num(row["svod_min"]), _num(row["peer_value"]), row["ratio"], "" if row["met"] else ", **missed**")


def _num(value: Any) -> str:
    return "%.0f" % value if abs(value) >= 100 else "%.3g" % value


def _met(met: Any) -> str:
    return "met" if met else "missed" if met is False else "-"


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--markdown", action="store_true", help="print the rows as docs/performance.md shows them")
    p.add_argument("--from-json", metavar="FILE",
                   help="format the rows of an earlier --json run (of this or of `bench --only onnx`) instead of measuring")
    p.add_argument("--quick", action="store_true", help="fewer timed runs and fresh processes")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument("--models", default="", help="light model names, comma-separated (default: all nine)")
    p.add_argument("--profile", choices=("slow", "all", "none"), default="slow",
                   help="a per-op profile row for models below %g at the first thread count (slow), every model, or none"
                   % GOAL_FLOOR)  # fmt: skip
    p.add_argument("--ort-spinning", action="store_true",
                   help="onnxruntime's intra-op threads spin while they wait for work, its own default (speed rows only)")
    args = p.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as fh:
            table = [r for r in json.load(fh) if str(r.get("measure", "")).startswith("onnx")]
        print(markdown(table) if args.markdown else format_table(table))
        return 0
    sources = light_sources()
    if args.models:
        wanted = args.models.split(",")
        unknown = sorted(set(wanted) - {name for name, _ in sources})
        if unknown:
            p.error("--models: no light model named %s (known: %s)" % (", ".join(unknown), ", ".join(n for n, _ in sources)))
        sources = [s for s in sources if s[0] in wanted]
    table = rows(args.quick, tuple(int(t) for t in args.threads.split(",")), sources, args.profile,
                 ort_spinning=args.ort_spinning)  # fmt: skip
    print(json.dumps(table, indent=1) if args.json else markdown(table) if args.markdown else format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
