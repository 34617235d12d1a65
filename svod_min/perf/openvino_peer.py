"""OpenVINO as the ONNX bench's second peer, when it is installed (``pip install openvino``, or the
``bench-openvino`` extra); the bench runs without it and says so.

Two peers, both OpenVINO's CPU plugin reading the same ``.onnx`` file:

* ``ov_f32``: ``INFERENCE_PRECISION_HINT`` f32, float32 throughout, as svod_min and onnxruntime compute;
* ``ov``: OpenVINO's default precision, which is bf16 on a host with AMX or AVX512-BF16 (its
  ``OPTIMIZATION_CAPABILITIES`` list BF16) and f32 elsewhere; its error is reported beside its speed.

Threads match the setting: ``INFERENCE_NUM_THREADS`` the setting's count, one stream
(``NUM_STREAMS`` 1: a stream is a group of threads serving one request at a time, and a second
would only help parallel requests), ``PERFORMANCE_HINT`` LATENCY, and ``ENABLE_CPU_PINNING`` off,
as onnxruntime and svod_min leave their threads unpinned (pinned threads of two engines in one
process on a shared host would contend for the same cores). OpenVINO's TBB pool has no spinning
switch: the same configuration serves both spinning settings.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

#: The peers: (key in a sample's times, label, INFERENCE_PRECISION_HINT or None for OpenVINO's default).
PEERS: Tuple[Tuple[str, str, Optional[str]], ...] = (
    ("ov_f32", "OpenVINO f32", "f32"),
    ("ov", "OpenVINO default precision", None),
)


def openvino_version() -> Optional[str]:
    """OpenVINO's version, or None when it is not installed (or does not import)."""
    try:
        import openvino
    except Exception:  # an install that fails to import counts as none: the bench must still run
        return None
    return str(getattr(openvino, "__version__", "unknown")).split("-")[0]


def config(threads: int, precision: Optional[str]) -> Dict[str, Any]:
    """The CPU plugin's properties of one peer at ``threads`` threads."""
    out: Dict[str, Any] = {
        "INFERENCE_NUM_THREADS": threads,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": False,
    }
    if precision is not None:
        out["INFERENCE_PRECISION_HINT"] = precision
    return out


#: A compiled peer: feed -> [(output name, array)], and the precision it computes in.
Runner = Tuple[Callable[[Dict[str, Any]], List[Tuple[str, Any]]], str]


def compile_peer(onnx_path: str, threads: int, precision: Optional[str]) -> Runner:
    """One OpenVINO peer of the model at ``onnx_path``: a callable running one request, and its precision."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(onnx_path, "CPU", config(threads, precision))
    request = compiled.create_infer_request()
    names = [o.get_any_name() for o in compiled.outputs]

    def run(feed: Dict[str, Any]) -> List[Tuple[str, Any]]:
        result = request.infer(feed)
        return [(n, result[i]) for i, n in enumerate(names)]

    precision_used = compiled.get_property("INFERENCE_PRECISION_HINT")
    return run, str(getattr(precision_used, "get_type_name", lambda: precision_used)())


def scaled_error(got: Sequence[Tuple[str, Any]], want: Sequence[Tuple[str, Any]]) -> float:
    """The largest |got - want| of any output over that output's largest |want| (0 for an all-zero output):
    one figure for outputs of any scale, the float32 reference's rounding near 1e-7."""
    import numpy as np

    worst = 0.0
    for (_, g), (_, w) in zip(got, want):
        g64, w64 = np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64)
        if g64.shape != w64.shape:
            return float("inf")
        scale = float(np.max(np.abs(w64))) if w64.size else 0.0
        if scale > 0:
            worst = max(worst, float(np.max(np.abs(g64 - w64))) / scale)
    return worst


#: A peer ready to time: its callable, and the facts its row reports (its error, its precision, or why it failed).
Peer = Tuple[Optional[Callable[[], Any]], Dict[str, Any]]


def peers_of(
    onnx_path: str, threads: int, feed: Dict[str, Any], want: Sequence[Tuple[str, Any]], svod: Dict[str, Any]
) -> Dict[str, Peer]:
    """Both peers of one model at ``threads``: each compiled, run once on ``feed``, its error against onnxruntime's
    outputs ``want`` measured (beside svod_min's own, from its outputs ``svod``). A peer that fails to compile or
    run is kept as its reason, and the model's other figures stand."""
    out: Dict[str, Peer] = {}
    svod_error = scaled_error([(n, svod[n]) for n, _ in want], want)
    for key, _, precision in PEERS:
        try:
            run, used = compile_peer(onnx_path, threads, precision)
            error = scaled_error(run(feed), want)
        except Exception as exc:  # OpenVINO refusing a model is a fact about OpenVINO, not a failed model
            text = str(exc).strip().splitlines()
            out[key] = (None, {key + " failed": (text[0] if text else type(exc).__name__)[:200]})
            continue
        facts = {key + " error": error, key + " precision": used, "svod error": svod_error}
        out[key] = (lambda run=run: run(feed), facts)
    return out


def peer_rows(
    name: str, setting: str, runs: Sequence[Dict[str, Any]], version: str, spread: Callable[[Sequence[float]], str]
) -> List[Dict[str, Any]]:
    """One row per OpenVINO peer of one model in one setting: medians over the runs, ratio = OpenVINO / svod_min,
    the peer's error and svod_min's against onnxruntime; a peer that failed is a row saying why."""
    import statistics

    out = []
    for key, label, precision in PEERS:
        timed = [r for r in runs if key in r]
        if not timed:
            why = next((r[key + " failed"] for r in runs if key + " failed" in r), "not timed")
            out.append(_row("onnx %s, %s, %s: failed: %s" % (name, setting, label, why), None, label, None, None))
            continue
        ratios = [r[key] / r["svod"] for r in timed]
        ratio = statistics.median(ratios)
        last = timed[-1]
        measure = "onnx %s, %s, %s: median run [ms]; computes in %s, max error %.1e of the largest |output| " % (
            name,
            setting,
            label,
            last[key + " precision"],
            max(r[key + " error"] for r in timed),
        ) + "(svod_min's %.1e), both against onnxruntime%s" % (max(r["svod error"] for r in timed), spread(ratios))
        out.append(
            _row(
                measure,
                _sig(statistics.median(r["svod"] for r in timed) * 1e3),
                "%s %s, %s" % (label, version, setting),
                _sig(statistics.median(r[key] for r in timed) * 1e3),
                round(ratio, 2),
                precision is not None,
            )
        )
    return out


def peer_means(
    setting: str,
    runs: Sequence[Sequence[Dict[str, Any]]],
    version: str,
    spread: Callable[[Sequence[float]], str],
) -> List[Dict[str, Any]]:
    """Per peer, the geometric mean of OpenVINO / svod_min over the models it ran, per run (``runs``: each run's
    times of the models), then its median over the runs."""
    import math
    import statistics

    out = []
    for key, label, precision in PEERS:
        means, counts = [], []
        for run in runs:
            ratios = [m[key] / m["svod"] for m in run if key in m]
            if ratios:
                means.append(math.exp(sum(math.log(r) for r in ratios) / len(ratios)))
                counts.append(len(ratios))
        models = "%d of %d models'" % (min(counts) if counts else 0, len(runs[0]) if runs else 0)
        mean = statistics.median(means) if means else None
        measure = "onnx: geometric mean of %s speed ratios, %s, %s%s" % (models, setting, label, spread(means))
        row = _row(measure, None, "%s %s" % (label, version), None, None if mean is None else round(mean, 2))
        if precision is not None:  # the float32 peer is held to the goal onnxruntime is; bf16 is another precision
            every = bool(counts) and min(counts) == len(runs[0])
            row.update(goal=">= 1, every model measured", met=bool(mean is not None and mean >= 1.0 and every))
        out.append(row)
    return out


def missing_row() -> Dict[str, Any]:
    """The note of a run without OpenVINO."""
    return _row("onnx: OpenVINO: not installed, no OpenVINO columns (pip install openvino)", None, None, None, None)


def _row(
    measure: str, svod: Any, peer: Any, peer_value: Any, ratio: Any, goal: Optional[bool] = None
) -> Dict[str, Any]:
    """A bench row; ``goal``: True for a speed row held to the 0.7 floor, else an "info" row."""
    return {
        "measure": measure,
        "svod_min": svod,
        "peer": peer,
        "peer_value": peer_value,
        "ratio": ratio,
        "goal": ">= 0.7x peer" if goal else "info",
        "met": bool(ratio >= 0.7) if goal and ratio is not None else None,
    }


def _sig(value: float, digits: int = 3) -> float:
    import math

    if value == 0 or not math.isfinite(value):
        return value
    return round(value, max(0, digits - 1 - int(math.floor(math.log10(abs(value))))))
