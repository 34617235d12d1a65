"""ONNX models benchmark: the onnx wheel's nine light CNNs, built with ``svod_min build``, against onnxruntime.

    python -m svod_min bench --only onnx
    python -m svod_min.perf.benchmarks.bench_onnx [--json] [--quick] [--models a,b] [--threads 1,2] [--runs N]
                                                  [--spinning both|off|on] [--profile slow|all|none]

Each model gets seeded random weights (:mod:`svod_min.perf.light_models`; the wheel's own weights
are all 0.02), its initializers stay out of the graph inputs (so onnxruntime may fold them), and
it is built for this host's target with ``python -m svod_min build``, which records onnxruntime's
outputs for the bundle's example inputs with a tolerance. Then:

* speed, per setting: the bundle loaded on a CPU device of that many threads and an onnxruntime
  ``InferenceSession`` (``intra_op_num_threads`` the same, ``inter_op_num_threads`` 1), same input,
  same process, timed in turn (pairs, svod_min first in even pairs and onnxruntime first in odd
  ones; medians). Above one thread each engine's idle pool threads either both spin
  (``session.intra_op.allow_spinning`` 1, ``SVOD_NATIVE_SPIN`` on) or both sleep (0 and off), and
  both settings are timed. First the outputs must agree: as many as onnxruntime's, each of its
  shape, each within the bundle's own recorded tolerance; else the model is a failed row.
  ratio = onnxruntime / svod_min (> 1: svod_min is faster). Goal: the geometric mean over the
  models >= 1.0 in every setting with every model measured, and no model below 0.7.
* peak resident memory of a fresh process that loads the model and runs it once (``ru_maxrss``
  of that child, from ``wait4``), both at 1 thread. Goal: svod_min <= 1.2x onnxruntime's.
* cold start: wall time of ``python3 svod_min.pyz run MODEL.svod --input NAME=x.npy --once`` (load,
  read the input, run once, exit), against a fresh ``python3`` that imports onnxruntime, creates
  the session, reads the same ``.npy`` and runs once. Medians; goal: svod_min <= peer.

* OpenVINO, where it is installed (:mod:`svod_min.perf.openvino_peer`): two more peers in the same
  timed pairs, float32 forced and its default precision (bf16 on an AMX/AVX512-BF16 host), at the
  setting's thread count; ratio = OpenVINO / svod_min, a geometric mean per peer and setting, each
  peer's error against onnxruntime beside its speed. Without it a note row says so.

``--runs N`` measures the whole table N times (the bundles stay on disk meanwhile) and reports each
ratio's median over the runs, with its spread (lowest-highest) in the measure.
Each model gets a profile row (``--profile all``, the default; ``slow``: only those below 0.7 at the
first setting): the op holding it back, and the top ops with their kernel, shape, share of the run and
GFLOP/s (or GB/s) against one core's float32 peak (:mod:`svod_min.perf.core_peak`, a row of its own).
Without numpy, onnx or onnxruntime every row says which is missing and nothing is measured.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from svod_min.perf import openvino_peer, zoo
from svod_min.perf.agreement import disagreement, tolerances
from svod_min.perf.bench_suite import format_table
from svod_min.perf.benchmarks.onnx_markdown import markdown
from svod_min.plan.native_replay import SPIN_ENV

#: Speed: geometric mean of onnxruntime / svod_min over the models, in every setting.
GOAL_GEOMEAN = 1.0
#: Speed: no single model below this ratio.
GOAL_FLOOR = 0.7
#: Peak RSS: svod_min at most this many times onnxruntime's.
GOAL_RSS = 1.2
#: A model's timed pairs last about this long at least (a 10 ms model gets more than 8 pairs) ...
PAIR_SECONDS = 1.0
#: ... up to this many pairs.
MAX_REPS = 42
#: Where the engines' pool threads spin, a run starts this long after the other engine's last one: onnxruntime's
#: idle intra-op threads spin on after its run (up to 2^20 polls) and would otherwise take both CPUs of a 2-CPU
#: host from the svod_min run timed next.
SETTLE_S = 0.1

#: A model to measure: its name and a function making its ModelProto (made when its turn comes).
ModelSource = Tuple[str, Callable[[], Any]]
Row = Dict[str, Any]

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


class Setting(NamedTuple):
    """One way the two engines are timed: the thread count and, above one thread, whether idle pool
    threads spin (None at one thread: neither engine has a pool then)."""

    threads: int
    spin: Optional[bool]

    @property
    def label(self) -> str:
        if self.spin is None:
            return _threads(self.threads)
        return "%s, %s" % (_threads(self.threads), "spinning" if self.spin else "no spinning")

    def peer(self, version: str) -> str:
        spinning = "" if self.spin is None else ", allow_spinning=%d" % self.spin
        return "onnxruntime %s, %s%s" % (version, _threads(self.threads), spinning)


class Settings(NamedTuple):
    """How one benchmark measures: the speed settings, repetitions, runs, the peer's version, where files go."""

    timing: Tuple[Setting, ...]
    reps: int
    pair_seconds: float
    fresh_reps: int
    runs: int
    version: str
    directory: str
    pyz: str
    profile: str
    openvino: Optional[str] = None  # OpenVINO's version where it is timed too
    peak: Any = None  # this core's CorePeak, the profile rows' yardstick


class ChildRun(NamedTuple):
    seconds: float
    max_rss_bytes: int


class Sample(NamedTuple):
    """One run's figures of one model: per setting label the median seconds per engine, and the fresh processes."""

    speed: Dict[str, Dict[str, float]]
    fresh: Dict[str, List[ChildRun]]


class Measured(NamedTuple):
    """Every run's samples of the models measured in all of them, the others' first failure, the profile rows."""

    samples: Dict[str, List[Sample]]
    failures: Dict[str, str]
    profiles: Dict[str, Row]


def missing_dependency() -> Optional[str]:
    """Why the benchmark cannot run here (the first missing package), or None."""
    for module, why in (
        ("numpy", "the onnx extra (numpy)"),
        ("onnx", "the onnx extra (onnx)"),
        ("onnxruntime", "onnxruntime"),
    ):
        try:
            __import__(module)
        except ImportError:
            return "skipped: needs %s" % why
    return None


def light_sources() -> List[ModelSource]:
    """The nine light models with seed-0 random weights."""
    from svod_min.perf.light_models import light_model_names, randomized

    return [(name, lambda name=name: randomized(name, seed=0)) for name in light_model_names()]


def child_env(threads: int) -> Dict[str, str]:
    """The environment of a build: this svod_min importable, its thread count fixed."""
    import svod_min

    parent = os.path.dirname(os.path.dirname(os.path.abspath(svod_min.__file__)))
    env = dict(os.environ, SVOD_THREADS=str(threads))
    env["PYTHONPATH"] = os.pathsep.join([parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def build_bundle(onnx_path: str, svod_path: str, expect: bool = False) -> None:
    """``python -m svod_min build`` for this host's target; ``expect``: record onnxruntime's outputs with their
    tolerance in the bundle (this benchmark's agreement gate reads that tolerance)."""
    from svod_min.compiler.targets import host_target
    from svod_min.error import BundleError

    cmd = [sys.executable, "-m", "svod_min", "build", onnx_path, "-o", svod_path, "--target", host_target()]
    proc = subprocess.run(
        cmd + ([] if expect else ["--no-expect"]), capture_output=True, text=True, env=child_env(1), timeout=1800
    )
    if proc.returncode != 0:
        raise BundleError("svod_min build %s failed: %s" % (os.path.basename(onnx_path), _tail(proc.stderr)))


def prepare(name: str, make: Callable[[], Any], directory: str) -> Prepared:
    """Save the model and its seeded input, build its bundle."""
    import numpy as np
    import onnx

    from svod_min.perf.light_models import random_inputs

    model = zoo.constant_initializers(make())
    onnx_path = os.path.join(directory, name + ".onnx")
    onnx.save(model, onnx_path)
    ((input_name, array),) = random_inputs(model, seed=0).items()
    npy_path = os.path.join(directory, name + ".input.npy")
    np.save(npy_path, array)
    svod_path = os.path.join(directory, name + ".svod")
    build_bundle(onnx_path, svod_path, expect=True)
    return Prepared(name, onnx_path, svod_path, input_name, array, npy_path)


def ort_session(path: str, threads: int, spinning: bool = False) -> Any:
    """An onnxruntime session at ``threads`` intra-op threads, one inter-op; with ``spinning`` (its own default)
    its idle intra-op threads spin for a while before they block, else they block at once."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def svod_spinning(spin: Optional[bool]) -> Iterator[None]:
    """``SVOD_NATIVE_SPIN`` set to ``spin`` meanwhile (None: left as it is); a plan binds it when it is built."""
    old = os.environ.get(SPIN_ENV)
    if spin is not None:
        os.environ[SPIN_ENV] = "1" if spin else "0"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(SPIN_ENV, None)
        else:
            os.environ[SPIN_ENV] = old


def check_agreement(model: Any, session: Any, prepared: Prepared, label: str) -> Tuple[Any, List[Tuple[str, Any]]]:
    """Both engines' outputs agree (:func:`disagreement`) before anything is timed; ExecutionError naming the
    setting and what differs otherwise. Returns both engines' outputs."""
    from svod_min.error import ExecutionError

    feed = {prepared.input_name: prepared.input_array}
    got = model.run(feed)
    want = list(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    why = disagreement(got, want, tolerances(model))
    if why is not None:
        raise ExecutionError("%s: %s" % (label, why))
    return got, want


def speed(
    prepared: Prepared, setting: Setting, reps: int, pair_seconds: float = PAIR_SECONDS, openvino: bool = False
) -> Dict[str, Any]:
    """Median seconds per run of svod_min and onnxruntime in ``setting``, timed in turn in this process; with
    ``openvino`` OpenVINO's two peers too (:mod:`svod_min.perf.openvino_peer`), with their errors."""
    from svod_min import load_model
    from svod_min.devices.cpu.device import CpuDevice

    with svod_spinning(setting.spin):
        model = load_model(prepared.svod_path, device=CpuDevice(threads=setting.threads))
        session = ort_session(prepared.onnx_path, setting.threads, bool(setting.spin))
        got, want = check_agreement(model, session, prepared, setting.label)
        feed = {prepared.input_name: prepared.input_array}
        peers = openvino_peer.peers_of(prepared.onnx_path, setting.threads, feed, want, got) if openvino else {}
        extra = {k: fn for k, (fn, _) in peers.items() if fn is not None}
        times: Dict[str, Any] = _timed_pairs(
            model, session, prepared, reps, pair_seconds, SETTLE_S if setting.spin else 0.0, extra
        )
        for _, facts in peers.values():
            times.update(facts)
    del model, session, peers, extra
    gc.collect()  # the next setting's copies of the weights should not sit beside these
    return times


def _timed_pairs(
    model: Any,
    session: Any,
    prepared: Prepared,
    reps: int,
    pair_seconds: float,
    settle: float,
    extra: Optional[Dict[str, Callable[[], Any]]] = None,
) -> Dict[str, float]:
    """Median seconds per run of the loaded bundle, the onnxruntime session and any ``extra`` peer on the input."""
    feed = {prepared.input_name: prepared.input_array}
    fns: Dict[str, Callable[[], Any]] = {"svod": lambda: model.run(feed), "ort": lambda: session.run(None, feed)}
    fns.update(extra or {})
    return alternating_medians(fns, reps_for(fns, reps, pair_seconds), settle)


def alternating_medians(fns: Dict[str, Callable[[], Any]], reps: int, settle: float = 0.0) -> Dict[str, float]:
    """Median seconds of each callable over ``reps`` pairs, the order reversed in every odd pair: neither
    engine always runs right after the other (whose caches it inherits); ``settle``: seconds of pause before a
    run that follows the other engine's (whose threads may still spin)."""
    keys = list(fns)
    samples: Dict[str, List[int]] = {k: [] for k in keys}
    previous = None
    for i in range(reps):
        for key in keys if i % 2 == 0 else keys[::-1]:
            if settle and previous not in (None, key):
                time.sleep(settle)
            previous = key
            t0 = time.perf_counter_ns()
            fns[key]()
            samples[key].append(time.perf_counter_ns() - t0)
    return {k: statistics.median(v) / 1e9 for k, v in samples.items()}


def reps_for(fns: Dict[str, Callable[[], Any]], reps: int, pair_seconds: float) -> int:
    """``reps``, or more for a fast model: enough pairs for ``pair_seconds`` of timing, at most
    :data:`MAX_REPS`, rounded up to even so both orders count alike (one run of each, timed here,
    doubles as the warm-up)."""
    start = time.perf_counter()
    for fn in fns.values():
        fn()
    pair = time.perf_counter() - start
    wanted = max(reps, min(MAX_REPS, int(pair_seconds / max(pair, 1e-6))))
    return wanted + wanted % 2


def run_child(cmd: List[str], env: Dict[str, str], who: str) -> ChildRun:
    """Wall time and peak RSS of one child process, through :data:`LAUNCHER`; a failing child raises with its stderr."""
    from svod_min.error import ExecutionError

    proc = subprocess.run([sys.executable, "-c", LAUNCHER] + cmd, capture_output=True, text=True, env=env, timeout=1800)
    fields = proc.stdout.split()
    if proc.returncode != 0 or len(fields) != 3 or fields[0] != "0":
        raise ExecutionError(
            "a fresh %s process failed (%s): %s" % (who, fields[0] if fields else proc.returncode, _tail(proc.stderr))
        )
    scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB elsewhere
    return ChildRun(float(fields[1]), int(fields[2]) * scale)


def fresh_commands(prepared: Prepared, pyz: str) -> Dict[str, List[str]]:
    """The two fresh processes: the one-file runtime's own command line, and a script doing onnxruntime's
    equivalent (import, session, read the .npy, run once)."""
    feed = "%s=%s" % (prepared.input_name, prepared.npy_path)
    return {
        "svod": [sys.executable, pyz, "run", prepared.svod_path, "--input", feed, "--once"],
        "ort": [sys.executable, "-c", ORT_CHILD, prepared.onnx_path, prepared.input_name, prepared.npy_path],
    }


def fresh_processes(prepared: Prepared, pyz: str, reps: int, warm: bool) -> Dict[str, List[ChildRun]]:
    """``reps`` fresh processes of each engine, the order reversed in every odd pair, after one untimed run each
    when ``warm`` (the file cache then holds both models); the .pyz is built at the first call."""
    if not os.path.exists(pyz):
        from svod_min.planfile.pyz import build_pyz

        build_pyz(pyz)
    env = dict(os.environ, SVOD_THREADS="1")
    cmds = fresh_commands(prepared, pyz)
    names = {"svod": "svod_min", "ort": "onnxruntime"}
    for key in cmds if warm else ():
        run_child(cmds[key], env, names[key])
    runs: Dict[str, List[ChildRun]] = {k: [] for k in cmds}
    for i in range(reps):
        for key in ("svod", "ort") if i % 2 == 0 else ("ort", "svod"):
            runs[key].append(run_child(cmds[key], env, names[key]))
    return runs


# --- rows: each figure is the median over the runs, its ratio with the runs' spread ----------------


def spread(ratios: Sequence[float]) -> str:
    """The measure's suffix for ratios over several runs ("; 3 runs, ratio 0.81-0.95"); "" for one run."""
    if len(ratios) < 2:
        return ""
    return "; %d runs, ratio %.2f-%.2f" % (len(ratios), min(ratios), max(ratios))


def speed_row(name: str, setting: Setting, runs: Sequence[Dict[str, float]], version: str) -> Row:
    """One model in one setting: per-engine medians over the runs, the median of the runs' ratios."""
    ratios = [_ratio(r) for r in runs]
    ratio = statistics.median(ratios)
    return {
        "measure": "onnx %s, %s: median run [ms]%s" % (name, setting.label, spread(ratios)),
        "svod_min": _sig(statistics.median(r["svod"] for r in runs) * 1e3),
        "peer": setting.peer(version),
        "peer_value": _sig(statistics.median(r["ort"] for r in runs) * 1e3),
        "ratio": round(ratio, 2),
        "goal": ">= %gx peer" % GOAL_FLOOR,
        "met": bool(ratio >= GOAL_FLOOR),
    }


def geomean(ratios: Sequence[float]) -> float:
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def geomean_row(setting: Setting, run_ratios: Sequence[Sequence[float]], failed: Sequence[str], version: str) -> Row:
    """The geometric mean of the measured models' ratios, per run, then its median over the runs. Met only when
    every model was measured: one that failed is missing from the mean, and its absence could lift it."""
    means = [geomean(r) for r in run_ratios if r]
    measured = len(run_ratios[0]) if run_ratios else 0
    models = "%d models'" % measured if not failed else "%d of %d models'" % (measured, measured + len(failed))
    why = " (failed: %s)" % ", ".join(failed) if failed else ""
    mean = statistics.median(means) if means else None
    return {
        "measure": "onnx: geometric mean of %s speed ratios, %s%s%s" % (models, setting.label, why, spread(means)),
        "svod_min": None,
        "peer": setting.peer(version),
        "peer_value": None,
        "ratio": None if mean is None else round(mean, 2),
        "goal": ">= %g, every model measured" % GOAL_GEOMEAN,
        "met": bool(not failed and mean is not None and mean >= GOAL_GEOMEAN),
    }


def process_rows(name: str, runs: Sequence[Dict[str, List[ChildRun]]], version: str) -> List[Row]:
    """Peak RSS and cold start rows: each run's medians of its fresh processes, then their medians over the runs."""
    rss = [{k: statistics.median(c.max_rss_bytes for c in v) / 2**20 for k, v in r.items()} for r in runs]
    cold = [{k: statistics.median(c.seconds for c in v) * 1e3 for k, v in r.items()} for r in runs]
    return [
        _process_row(
            "onnx %s: peak RSS, fresh process, load + 1 run, 1 thread [MiB]" % name,
            rss,
            version,
            "<= %gx peer" % GOAL_RSS,
            lambda s, o: s <= GOAL_RSS * o,
        ),
        _process_row(
            "onnx %s: cold start, fresh process to first output, 1 thread [ms]" % name,
            cold,
            version,
            "<= peer",
            lambda s, o: s <= o,
        ),
    ]


def _process_row(
    measure: str, runs: Sequence[Dict[str, float]], version: str, goal: str, met: Callable[[float, float], bool]
) -> Row:
    ratios = [_ratio(r) for r in runs]
    svod, ort = statistics.median(r["svod"] for r in runs), statistics.median(r["ort"] for r in runs)
    return {
        "measure": measure + spread(ratios),
        "svod_min": _sig(svod),
        "peer": "onnxruntime %s" % version,
        "peer_value": _sig(ort),
        "ratio": round(statistics.median(ratios), 2),
        "goal": goal,
        "met": bool(met(svod, ort)),
    }


def load_row(before: Optional[Tuple[float, ...]], after: Optional[Tuple[float, ...]]) -> Row:
    """The machine's load average (1, 5, 15 min) when the run began and ended: how shared the cores were."""

    def text(load: Optional[Tuple[float, ...]]) -> str:
        return "unknown" if load is None else " ".join("%.2f" % v for v in load)

    measure = "onnx: load average (1, 5, 15 min) at the start: %s; at the end: %s; %d CPUs" % (
        text(before),
        text(after),
        os.cpu_count() or 0,
    )
    return {
        "measure": measure,
        "svod_min": None,
        "peer": None,
        "peer_value": None,
        "ratio": None,
        "goal": "info",
        "met": None,
    }


def failed_row(name: str, why: str) -> Row:
    return {
        "measure": "onnx %s: failed: %s" % (name, why),
        "svod_min": None,
        "peer": None,
        "peer_value": None,
        "ratio": None,
        "goal": None,
        "met": False,
    }


def skip_rows(names: Sequence[str], why: str) -> List[Row]:
    return [
        {
            "measure": "onnx %s" % name,
            "svod_min": None,
            "peer": why,
            "peer_value": None,
            "ratio": None,
            "goal": None,
            "met": None,
        }
        for name in names
    ]


def table_rows(names: Sequence[str], measured: Measured, settings: Settings) -> List[Row]:
    """The geometric means first (one per setting), then each model's rows in order, or its failed row."""
    failed = [n for n in names if n in measured.failures]
    ok = [n for n in names if n not in measured.failures]
    out = []
    for s in settings.timing:
        per_run = (
            [[_ratio(measured.samples[n][r].speed[s.label]) for n in ok] for r in range(settings.runs)] if ok else []
        )
        out.append(geomean_row(s, per_run, failed, settings.version))
        if settings.openvino and ok:
            runs = [[measured.samples[n][r].speed[s.label] for n in ok] for r in range(settings.runs)]
            out += openvino_peer.peer_means(s.label, runs, settings.openvino, spread)
    for name in names:
        out += model_rows(name, measured, settings)
    return out


def model_rows(name: str, measured: Measured, settings: Settings) -> List[Row]:
    if name in measured.failures:
        return [failed_row(name, measured.failures[name])]
    samples = measured.samples[name]
    out = [speed_row(name, s, [x.speed[s.label] for x in samples], settings.version) for s in settings.timing]
    for s in settings.timing if settings.openvino else ():
        out += openvino_peer.peer_rows(name, s.label, [x.speed[s.label] for x in samples], settings.openvino, spread)
    out += process_rows(name, [x.fresh for x in samples], settings.version)
    return out + ([measured.profiles[name]] if name in measured.profiles else [])


def _ratio(times: Dict[str, float]) -> float:
    """onnxruntime's time over svod_min's: above 1, svod_min is faster (smaller is better for both figures)."""
    return times["ort"] / times["svod"]


# --- measuring: every model in every run, each model's files kept until its last run --------------


def rows(
    quick: bool = False,
    threads: Sequence[int] = (1, 2),
    models: Optional[Sequence[ModelSource]] = None,
    profile: str = "all",
    pyz: Optional[str] = None,
    spinning: str = "both",
    runs: int = 1,
    openvino: bool = True,
) -> List[Row]:
    """Speed rows per model and setting, a geometric mean per setting, peak RSS and cold start rows per model;
    ``spinning`` above one thread: "both", "off" or "on"; ``runs``: how often the whole table is measured;
    ``profile``: "slow" (models below 0.7 at the first setting), "all" or "none", with one core's float32 peak
    (:mod:`svod_min.perf.core_peak`) as their yardstick; ``pyz``: the svod_min.pyz of the cold starts (default:
    one built from this svod_min into a temporary folder); ``openvino``: time OpenVINO too where it is installed
    (a note row says when it is not)."""
    from svod_min.error import ConfigError

    if runs < 1:
        raise ConfigError("runs must be at least 1, got %d" % runs)
    sources = light_sources() if models is None else list(models)
    why = missing_dependency()
    if why:
        return skip_rows([name for name, _ in sources], why)
    import onnxruntime

    from svod_min.perf.core_peak import core_peak, peak_row

    ov_version = openvino_peer.openvino_version() if openvino else None
    notes = [] if ov_version or not openvino else [openvino_peer.missing_row()]
    peak = core_peak() if profile != "none" else None
    load_before = _load_average()
    with tempfile.TemporaryDirectory(prefix="svod_bench_onnx_") as directory:
        settings = Settings(
            timing_settings(threads, spinning),
            4 if quick else 8,
            0.0 if quick else PAIR_SECONDS,
            1 if quick else 3,
            runs,
            onnxruntime.__version__,
            directory,
            pyz or os.path.join(directory, "svod_min.pyz"),
            profile,
            ov_version,
            peak,
        )
        measured = measure_all(sources, settings)
    notes += [peak_row(peak)] if peak is not None else []
    return (
        table_rows([name for name, _ in sources], measured, settings) + notes + [load_row(load_before, _load_average())]
    )


def timing_settings(threads: Sequence[int], spinning: str) -> Tuple[Setting, ...]:
    """One setting per thread count, two above one thread with ``spinning`` "both" (no spinning first)."""
    spins = {"both": (False, True), "off": (False,), "on": (True,)}[spinning]
    return tuple(Setting(t, s) for t in threads for s in ((None,) if t == 1 else spins))


def measure_all(sources: Sequence[ModelSource], settings: Settings) -> Measured:
    """Every model in every run (a model that fails is not measured again); a model's files go after its last run."""
    measured = Measured({name: [] for name, _ in sources}, {}, {})
    prepared: Dict[str, Prepared] = {}
    for run in range(settings.runs):
        for name, make in sources:
            if name in measured.failures:
                continue
            try:
                if name not in prepared:
                    prepared[name] = prepare(name, make, settings.directory)
                measured.samples[name].append(measure_model(prepared[name], settings))
                if run == settings.runs - 1:
                    profile_if_slow(prepared[name], measured, settings)
            except Exception as exc:  # one model failing must not hide the others
                measured.failures[name] = _one_line(exc)
            if name in prepared and (run == settings.runs - 1 or name in measured.failures):
                _remove(prepared.pop(name))  # vgg19's bundle alone is half a gigabyte
    return measured


def measure_model(prepared: Prepared, settings: Settings) -> Sample:
    """One run of one model: every speed setting, then the fresh processes."""
    times = {
        s.label: speed(prepared, s, settings.reps, settings.pair_seconds, bool(settings.openvino))
        for s in settings.timing
    }
    fresh = fresh_processes(prepared, settings.pyz, settings.fresh_reps, warm=settings.fresh_reps > 1)
    return Sample(times, fresh)


def profile_if_slow(prepared: Prepared, measured: Measured, settings: Settings) -> None:
    """The profile row of a model below the goal at the first setting (over the runs), or of every model."""
    first = settings.timing[0].label
    ratio = statistics.median(_ratio(x.speed[first]) for x in measured.samples[prepared.name])
    if settings.profile == "all" or settings.profile == "slow" and ratio < GOAL_FLOOR:
        from svod_min.perf.op_profile import profile_row

        feed = {prepared.input_name: prepared.input_array}
        measured.profiles[prepared.name] = profile_row(
            prepared.name, prepared.svod_path, feed, prepared.onnx_path, peak=settings.peak
        )


def _remove(prepared: Prepared) -> None:
    for path in (prepared.svod_path, prepared.onnx_path):
        if os.path.exists(path):
            os.unlink(path)


def _one_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__


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


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--markdown", action="store_true", help="print the rows as docs/performance.md shows them")
    p.add_argument(
        "--from-json",
        metavar="FILE",
        help="format the rows of an earlier --json run (of this or of `bench --only onnx`) instead of measuring",
    )
    p.add_argument("--quick", action="store_true", help="fewer timed runs and fresh processes")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument(
        "--models",
        default="",
        help="model names, comma-separated: light models, zoo models and their conversions (NAME.fp16, "
        "NAME.int8-dynamic, for the light models too), or 'zoo' for every zoo model and conversion (default: the "
        "nine light models)",
    )
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="measure the whole table N times; each figure is the median over the runs, each ratio with its "
        "spread (default 1)",
    )
    p.add_argument(
        "--spinning",
        choices=("both", "off", "on"),
        default="both",
        help="above one thread: time both engines with idle pool threads that block (off: onnxruntime "
        "allow_spinning=0, SVOD_NATIVE_SPIN=0), that spin (on: allow_spinning=1, svod_min's default), "
        "or both settings (default)",
    )
    p.add_argument(
        "--profile",
        choices=("slow", "all", "none"),
        default="all",
        help="a per-op profile row (the top kernels, their rates against one core's peak) for every model (all, "
        "the default), for models below %g at the first setting (slow), or none" % GOAL_FLOOR,
    )
    p.add_argument(
        "--openvino",
        choices=("auto", "off"),
        default="auto",
        help="time OpenVINO (f32 forced, and its default precision) beside onnxruntime where it is installed "
        "(auto, the default), or not (off)",
    )
    args = p.parse_args(argv)
    if args.from_json:
        with open(args.from_json) as fh:
            table = [r for r in json.load(fh) if str(r.get("measure", "")).startswith("onnx")]
        print(markdown(table) if args.markdown else format_table(table))
        return 0
    if args.runs < 1:
        p.error("--runs must be at least 1")
    sources = light_sources()
    if args.models:
        known = sources + zoo.converted(sources) + zoo.sources()
        wanted = [n for w in args.models.split(",") for n in ([k for k, _ in zoo.sources()] if w == "zoo" else [w])]
        unknown = sorted(set(wanted) - {name for name, _ in known})
        if unknown:
            p.error("--models: no model named %s (known: %s)" % (", ".join(unknown), ", ".join(n for n, _ in known)))
        sources = [s for s in known if s[0] in wanted]
    table = rows(
        args.quick,
        tuple(int(t) for t in args.threads.split(",")),
        sources,
        args.profile,
        spinning=args.spinning,
        runs=args.runs,
        openvino=args.openvino == "auto",
    )
    print(json.dumps(table, indent=1) if args.json else markdown(table) if args.markdown else format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
