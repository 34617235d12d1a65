"""Single-op benchmark: Softmax, LRN and Resize as ONNX bundles against onnxruntime running the same one-node model.

    python -m svod_min bench --only onnx_ops
    python -m svod_min.perf.benchmarks.bench_onnx_ops [--json] [--quick] [--threads 1,2] [--only softmax,lrn]

Each case is a model of one node made with onnx.helper at realistic shapes (ImageNet's 1000 classes, a
transformer's attention rows, a segmentation head's 21 classes over axis 1, AlexNet/GoogLeNet's LRN, x2
upsampling and a downsample in every Resize mode svod_min lowers). svod_min builds it for this host's
target (``python -m svod_min build``) and runs it through ``load_model``; an
onnxruntime session holds the same model (``intra_op_num_threads`` the same, no spinning between runs).
Both run in this process on the same input, outputs checked to agree first, timed in turn (round-robin,
medians). ratio = onnxruntime / svod_min (> 1: svod_min is faster). Goal >= 0.7; a case whose tensor is
tiny (where a run is mostly the call itself) is info only.
Without numpy, onnx or onnxruntime every row says which is missing and nothing is measured.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from svod_min.perf.benchmarks.bench_onnx import build_bundle, missing_dependency  # the same build and packages

#: The goal: svod_min at least this fraction of onnxruntime's speed.
GOAL = 0.7
#: A case with fewer output elements than this is info only: the call, not the op, is what is timed.
TINY = 1 << 14
#: Outputs of the two engines agree to this (max abs error over max abs value) before anything is timed.
AGREE = 1e-4


class OpCase(NamedTuple):
    """One single-node model: a label, the op, its input shape, attributes, constant float inputs after x."""

    label: str
    op: str
    shape: Tuple[int, ...]
    attrs: Dict[str, Any]
    scales: Tuple[float, ...] = ()

    @property
    def group(self) -> str:
        return self.op.lower()


def _resize(label: str, shape: Tuple[int, ...], scale: float, mode: str, transform: str, **extra: Any) -> OpCase:
    attrs = dict(mode=mode, coordinate_transformation_mode=transform, **extra)
    return OpCase(label, "Resize", shape, attrs, (1.0, 1.0, scale, scale))


CASES: Tuple[OpCase, ...] = (
    OpCase("Softmax 1x1000 (classes)", "Softmax", (1, 1000), {"axis": -1}),
    OpCase("Softmax 8x1000 (batch of classes)", "Softmax", (8, 1000), {"axis": -1}),
    OpCase("Softmax 64x128x128 (attention rows)", "Softmax", (64, 128, 128), {"axis": -1}),
    OpCase("Softmax axis 1 of 1x1000x1x1", "Softmax", (1, 1000, 1, 1), {"axis": 1}),
    OpCase("Softmax axis 1 of 1x21x64x64 (segmentation)", "Softmax", (1, 21, 64, 64), {"axis": 1}),
    OpCase("LogSoftmax axis 1 of 1x21x64x64", "LogSoftmax", (1, 21, 64, 64), {"axis": 1}),
    OpCase("LRN 5 over 1x64x56x56 (GoogLeNet)", "LRN", (1, 64, 56, 56), dict(size=5, alpha=1e-4, beta=0.75, bias=1.0)),
    OpCase("LRN 5 over 1x96x55x55 (AlexNet)", "LRN", (1, 96, 55, 55), dict(size=5, alpha=1e-4, beta=0.75, bias=1.0)),
    OpCase(
        "LRN 5 over 1x192x56x56 (GoogLeNet)", "LRN", (1, 192, 56, 56), dict(size=5, alpha=1e-4, beta=0.75, bias=1.0)
    ),
    _resize("Resize nearest x2 1x64x56x56", (1, 64, 56, 56), 2.0, "nearest", "asymmetric", nearest_mode="floor"),
    _resize("Resize nearest x2 1x256x13x13", (1, 256, 13, 13), 2.0, "nearest", "asymmetric", nearest_mode="floor"),
    _resize("Resize linear asymmetric x2 1x64x56x56", (1, 64, 56, 56), 2.0, "linear", "asymmetric"),
    _resize("Resize linear half_pixel x2 1x64x56x56", (1, 64, 56, 56), 2.0, "linear", "half_pixel"),
    _resize("Resize linear align_corners x2 1x256x13x13", (1, 256, 13, 13), 2.0, "linear", "align_corners"),
    _resize("Resize linear half_pixel /2 1x64x112x112", (1, 64, 112, 112), 0.5, "linear", "half_pixel"),
    _resize("Resize cubic half_pixel x2 1x64x56x56", (1, 64, 56, 56), 2.0, "cubic", "half_pixel"),
)


def make_model(case: OpCase) -> Any:
    """The case as a one-node ModelProto (opset 17), output shape inferred."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inputs, inits = ["x"], []
    if case.scales:
        inputs += ["", "scales"]  # no roi
        inits.append(numpy_helper.from_array(np.array(case.scales, np.float32), "scales"))
    node = helper.make_node(case.op, inputs, ["y"], **case.attrs)
    graph = helper.make_graph(
        [node],
        "one_op",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(case.shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def case_input(case: OpCase) -> Any:
    """Seeded input: softmax rows spread over [-8, 8] (so the max subtraction matters), others standard normal."""
    import numpy as np

    rng = np.random.default_rng(0)
    x = rng.standard_normal(case.shape).astype(np.float32)
    return (x * 4).astype(np.float32) if "Softmax" in case.op else x


def build(case: OpCase, directory: str) -> str:
    """Save the case's model and build its bundle for this host's target with ``python -m svod_min build`` (as
    bench_onnx does: perf sits beside onnx in the layers); the .onnx path (the bundle beside it)."""
    import onnx

    stem = os.path.join(directory, "".join(ch if ch.isalnum() else "_" for ch in case.label))
    onnx.save(make_model(case), stem + ".onnx")
    build_bundle(stem + ".onnx", stem + ".svod")
    return stem + ".onnx"


def ort_session(path: str, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def measure(case: OpCase, onnx_path: str, threads: int, reps: int) -> Dict[str, float]:
    """Median seconds per run of the bundle and of onnxruntime, timed in turn, after their outputs agree."""
    import numpy as np

    from svod_min import load_model
    from svod_min.devices.cpu.device import CpuDevice
    from svod_min.error import ExecutionError
    from svod_min.perf.bench_suite import paired_median_s

    model = load_model(onnx_path[:-5] + ".svod", device=CpuDevice(threads=threads))
    session = ort_session(onnx_path, threads)
    feed = {"x": case_input(case)}
    want = session.run(None, feed)[0]
    got = model.run(feed)["y"].reshape(want.shape)
    err = float(np.max(np.abs(got.astype(np.float64) - want))) / max(float(np.max(np.abs(want))), 1e-30)
    if not err <= AGREE:
        raise ExecutionError(
            "%s: svod_min's output differs from onnxruntime's (max error %.3g of the largest value)" % (case.label, err)
        )
    plan = model.loaded.plan
    return paired_median_s(
        {"svod": lambda: model.run(feed), "plan": plan.execute, "ort": lambda: session.run(None, feed)}, reps
    )


def case_rows(case: OpCase, threads: int, times: Dict[str, float], peer: str) -> List[Dict[str, Any]]:
    """Two rows: ``Model.run`` (inputs copied in, outputs copied out; the goal, info for a tiny tensor) and the
    plan's ops alone (inputs already in place; info: what the kernels take), each against onnxruntime's run."""
    size = 1
    for d in case.shape:
        size *= d
    tiny = size * max(case.scales or (1.0,)) ** 2 < TINY
    label = "%d thread%s" % (threads, "" if threads == 1 else "s")
    out = []
    for key, what in (("svod", "median run [ms]"), ("plan", "plan execute alone, inputs in place [ms]")):
        ratio = times["ort"] / times[key]
        goal, met = ("info (tiny tensor)", None) if tiny else (">= %gx peer" % GOAL, bool(ratio >= GOAL))
        if key == "plan":
            goal, met = "info", None
        out.append(
            {
                "measure": "onnx op %s, %s: %s" % (case.label, label, what),
                "svod_min": _sig(times[key] * 1e3),
                "peer": "%s, %s" % (peer, label),
                "peer_value": _sig(times["ort"] * 1e3),
                "ratio": round(ratio, 2),
                "goal": goal,
                "met": met,
            }
        )
    return out


def _sig(value: float, digits: int = 3) -> float:
    """``value`` to ``digits`` significant digits (a 0.0053 ms run keeps its precision)."""
    if value <= 0 or not math.isfinite(value):
        return value
    return round(value, max(0, digits - 1 - int(math.floor(math.log10(value)))))


def select(only: str, cases: Sequence[OpCase] = CASES) -> Tuple[OpCase, ...]:
    """Cases whose label holds any comma-separated word of ``only`` (case-insensitive); all when empty."""
    words = [w.strip().lower() for w in only.split(",") if w.strip()]
    return tuple(c for c in cases if not words or any(w in c.label.lower() for w in words))


def quick_cases(cases: Sequence[OpCase]) -> Tuple[OpCase, ...]:
    """The first case of each op and Resize mode: a CI-sized run."""
    seen, picked = set(), []
    for case in cases:
        key = (case.op, case.attrs.get("mode"), case.attrs.get("axis", -1) == -1)
        if key not in seen:
            seen.add(key)
            picked.append(case)
    return tuple(picked)


def rows(
    quick: bool = False, threads: Sequence[int] = (1, 2), cases: Optional[Sequence[OpCase]] = None
) -> List[Dict[str, Any]]:
    """A row per case and thread count; a case that fails to build or agree becomes a failed row."""
    chosen = tuple(CASES if cases is None else cases)
    chosen = quick_cases(chosen) if quick and cases is None else chosen
    why = missing_dependency()
    if why:
        return [
            {
                "measure": "onnx op %s" % c.label,
                "svod_min": None,
                "peer": why,
                "peer_value": None,
                "ratio": None,
                "goal": None,
                "met": None,
            }
            for c in chosen
        ]
    import onnxruntime

    peer = "onnxruntime %s" % onnxruntime.__version__
    out: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="svod_bench_ops_") as directory:
        for case in chosen:
            try:
                path = build(case, directory)
                for t in threads:
                    out += case_rows(case, t, measure(case, path, t, 5 if quick else 21), peer)
            except Exception as exc:  # one case failing must not hide the others
                out.append(
                    {
                        "measure": "onnx op %s: failed: %s"
                        % (case.label, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__),
                        "svod_min": None,
                        "peer": None,
                        "peer_value": None,
                        "ratio": None,
                        "goal": None,
                        "met": False,
                    }
                )
    return out + [load_row()]


def load_row() -> Dict[str, Any]:
    """The load average when the run ended: how shared the cores were."""
    try:
        load = " ".join("%.2f" % v for v in os.getloadavg())
    except (AttributeError, OSError):  # not on every platform
        load = "unknown"
    return {
        "measure": "onnx op: load average (1, 5, 15 min) at the end: %s; %d CPUs" % (load, os.cpu_count() or 0),
        "svod_min": None,
        "peer": None,
        "peer_value": None,
        "ratio": None,
        "goal": "info",
        "met": None,
    }


def markdown(table: List[Dict[str, Any]]) -> str:
    """The rows as docs/performance.md shows them: one line per case and thread count."""
    lines = [
        "| case | threads | svod_min run ms | plan alone ms | onnxruntime ms | ratio (run) | ratio (plan alone) |",
        "|---|---|---|---|---|---|---|",
    ]
    runs: Dict[str, Dict[str, Any]] = {}
    for row in table:
        measure = str(row.get("measure") or "")
        head, _, what = measure.partition(": ")
        if row.get("ratio") is None:
            lines.append("| %s | | | | | | %s |" % (measure, row.get("peer") or row.get("goal") or ""))
        elif what.startswith("median run"):
            runs[head] = row
        elif head in runs:
            run = runs.pop(head)
            label, _, threads = head[len("onnx op ") :].rpartition(", ")
            lines.append(
                "| %s | %s | %.3g | %.3g | %.3g | %.2f%s | %.2f |"
                % (
                    label,
                    threads.split()[0],
                    run["svod_min"],
                    row["svod_min"],
                    run["peer_value"],
                    run["ratio"],
                    "" if run["met"] is not False else " (below %g)" % GOAL,
                    row["ratio"],
                )
            )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--markdown", action="store_true", help="print the rows as a markdown table")
    p.add_argument("--quick", action="store_true", help="one case per op and mode, fewer timed runs")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    p.add_argument("--only", default="", help="cases whose label holds one of these comma-separated words")
    args = p.parse_args(argv)
    cases = select(args.only)
    table = rows(
        args.quick, tuple(int(t) for t in args.threads.split(",")), quick_cases(cases) if args.quick else cases
    )
    if args.json:
        print(json.dumps(table, indent=1))
    elif args.markdown:
        print(markdown(table))
    else:
        from svod_min.perf.bench_suite import format_table

        print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
