"""Tiny models benchmark: the per-run cost of a bundle against onnxruntime's, where the call is most of the run.

    python -m svod_min bench --only tiny
    python -m svod_min.perf.benchmarks.bench_tiny [--json] [--markdown] [--quick] [--runs N]

Four models made with onnx.helper, each a tenth of a millisecond of arithmetic or (much) less: one Relu on [1, 16]
(nothing but the call: its svod_min time is the per-run overhead), a 2-layer MLP on [1, 64] (Gemm 64x128, Relu,
Gemm 128x8) and a voice-activity-style net (two Conv1d of kernel 3 over 16 then 32 channels, an LSTM of hidden 64,
a Gemm and a Sigmoid head) over 8 frames (4 LSTM steps) and over 64 (32 steps). Each is built for this host's
target (``python -m svod_min build``) and run through ``load_model(path).run(feed)``; an onnxruntime
``InferenceSession`` holds the same model at one intra-op thread, one inter-op, ``allow_spinning`` 0 (as
bench_onnx and bench_onnx_ops set it). Both run in this process on the same numpy input at one thread,
outputs checked to agree first, timed in turn (round-robin, medians over ``--runs`` rounds of many calls).
ratio = onnxruntime / svod_min (> 1: svod_min is faster). Goal: every model >= 1.0. The Relu rows also say
the per-run overhead in microseconds of both engines (the time of a call that does next to nothing).
Without numpy, onnx or onnxruntime every row says which is missing and nothing is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from svod_min.perf.benchmarks.bench_onnx import build_bundle, missing_dependency  # the same build and packages
from svod_min.perf.benchmarks.bench_onnx_ops import load_row, ort_session

#: The goal: svod_min at least as fast as onnxruntime on each tiny model.
GOAL = 1.0
#: Outputs of the two engines agree to this (max abs error over max abs value) before anything is timed.
AGREE = 1e-4
#: Calls timed per engine and round (a round alternates the engines call by call).
CALLS = 2000


def _f32(rng: Any, *shape: int, scale: float = 0.3) -> Any:
    import numpy as np

    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes: List[Any], x_shape: List[int], inits: List[Any]) -> Any:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def relu_model() -> Any:
    """One Relu on [1, 16]: a run of it is the call and nothing else."""
    from onnx import helper

    return _model([helper.make_node("Relu", ["x"], ["y"])], [1, 16], [])


def mlp_model() -> Any:
    """Gemm 64->128, Relu, Gemm 128->8 on [1, 64]."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(_f32(rng, 128, 64), "w1"),
        numpy_helper.from_array(_f32(rng, 128), "b1"),
        numpy_helper.from_array(_f32(rng, 8, 128), "w2"),
        numpy_helper.from_array(_f32(rng, 8), "b2"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1),
    ]
    return _model(nodes, [1, 64], inits)


def vad_model(frames: int = 8) -> Any:
    """A voice-activity-style net on [1, 16, frames] (channels, frames): Conv1d 16->32 k3 s2 + Relu, Conv1d 32->32
    k3 + Relu (frames / 2 left), LSTM hidden 64 over those steps, the last step's state through a Gemm 64->1 and a
    Sigmoid."""
    import numpy as np
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(2)
    hidden = 64
    inits = [
        numpy_helper.from_array(_f32(rng, 32, 16, 3), "c1w"),
        numpy_helper.from_array(_f32(rng, 32), "c1b"),
        numpy_helper.from_array(_f32(rng, 32, 32, 3, scale=0.2), "c2w"),
        numpy_helper.from_array(_f32(rng, 32), "c2b"),
        numpy_helper.from_array(_f32(rng, 1, 4 * hidden, 32, scale=0.2), "W"),
        numpy_helper.from_array(_f32(rng, 1, 4 * hidden, hidden, scale=0.1), "R"),
        numpy_helper.from_array(_f32(rng, 1, 8 * hidden, scale=0.1), "B"),
        numpy_helper.from_array(_f32(rng, 1, hidden), "hw"),
        numpy_helper.from_array(_f32(rng, 1), "hb"),
        numpy_helper.from_array(np.array([1, hidden], np.int64), "hshape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], kernel_shape=[3], strides=[2], pads=[1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "c2w", "c2b"], ["c2"], kernel_shape=[3], pads=[1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("Transpose", ["r2"], ["seq"], perm=[2, 0, 1]),  # [frames, batch, channels]
        helper.make_node("LSTM", ["seq", "W", "R", "B"], ["", "h_last"], hidden_size=hidden),
        helper.make_node("Reshape", ["h_last", "hshape"], ["h"]),
        helper.make_node("Gemm", ["h", "hw", "hb"], ["logit"], transB=1),
        helper.make_node("Sigmoid", ["logit"], ["y"]),
    ]
    return _model(nodes, [1, 16, frames], inits)


#: name, model maker, input shape
MODELS: Tuple[Tuple[str, Callable[[], Any], Tuple[int, ...]], ...] = (
    ("Relu 1x16 (the call alone)", relu_model, (1, 16)),
    ("MLP 64-128-8 on 1x64", mlp_model, (1, 64)),
    ("VAD-style: 2 Conv1d, LSTM h64 x4 steps, Sigmoid", vad_model, (1, 16, 8)),
    ("VAD-style over 64 frames: LSTM h64 x32 steps", lambda: vad_model(64), (1, 16, 64)),
)


def build(name: str, make: Callable[[], Any], directory: str) -> str:
    """Save the model and build its bundle for this host's target; the .onnx path (the bundle beside it)."""
    import onnx

    stem = os.path.join(directory, "".join(ch if ch.isalnum() else "_" for ch in name))
    onnx.save(make(), stem + ".onnx")
    build_bundle(stem + ".onnx", stem + ".svod")
    return stem + ".onnx"


def round_robin_us(fns: Dict[str, Callable[[], Any]], calls: int, runs: int) -> Dict[str, float]:
    """Median microseconds per call of each callable: ``runs`` rounds, each the median of ``calls`` calls made
    alternately (so both see the same machine state); the median of the rounds' medians."""
    for fn in fns.values():
        for _ in range(50):  # warm-up: first replays time ops, caches fill
            fn()
    per_run: Dict[str, List[float]] = {k: [] for k in fns}
    clock = time.perf_counter_ns
    for _ in range(runs):
        samples: Dict[str, List[int]] = {k: [] for k in fns}
        for _ in range(calls):
            for key, fn in fns.items():
                t0 = clock()
                fn()
                samples[key].append(clock() - t0)
        for key, values in samples.items():
            per_run[key].append(statistics.median(values) / 1e3)
    return {k: statistics.median(v) for k, v in per_run.items()}


def measure(onnx_path: str, shape: Tuple[int, ...], calls: int, runs: int) -> Dict[str, float]:
    """Median µs per call of the bundle's ``Model.run``, its plan's execute alone and onnxruntime's run, after the
    two engines' outputs agree."""
    import numpy as np

    from svod_min import load_model
    from svod_min.devices.cpu.device import CpuDevice
    from svod_min.error import ExecutionError

    model = load_model(onnx_path[:-5] + ".svod", device=CpuDevice(threads=1))
    session = ort_session(onnx_path, 1)
    feed = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}
    want = session.run(None, feed)[0]
    got = model.run(feed)["y"].reshape(want.shape)
    err = float(np.max(np.abs(got.astype(np.float64) - want))) / max(float(np.max(np.abs(want))), 1e-30)
    if not err <= AGREE:
        raise ExecutionError("svod_min's output differs from onnxruntime's (max error %.3g of the largest value)" % err)
    plan = model.loaded.plan
    return round_robin_us(
        {"svod": lambda: model.run(feed), "plan": plan.execute, "ort": lambda: session.run(None, feed)}, calls, runs
    )


def model_rows(name: str, times: Dict[str, float], peer: str) -> List[Dict[str, Any]]:
    """The run against onnxruntime's (the goal), and the plan's execute alone (info: no copies, no Model.run)."""
    ratio = times["ort"] / times["svod"]
    out = [
        {
            "measure": "tiny %s, 1 thread: median run [us]" % name,
            "svod_min": round(times["svod"], 2),
            "peer": "%s, 1 thread" % peer,
            "peer_value": round(times["ort"], 2),
            "ratio": round(ratio, 2),
            "goal": ">= %gx peer" % GOAL,
            "met": bool(ratio >= GOAL),
        },
        {
            "measure": "tiny %s, 1 thread: plan execute alone [us]" % name,
            "svod_min": round(times["plan"], 2),
            "peer": "%s, 1 thread" % peer,
            "peer_value": round(times["ort"], 2),
            "ratio": round(times["ort"] / times["plan"], 2),
            "goal": "info",
            "met": None,
        },
    ]
    if name.startswith("Relu"):
        out.append(
            {
                "measure": "tiny: per-run overhead [us] (a call of the Relu model)",
                "svod_min": round(times["svod"], 2),
                "peer": "%s, 1 thread" % peer,
                "peer_value": round(times["ort"], 2),
                "ratio": round(ratio, 2),
                "goal": "info",
                "met": None,
            }
        )
    return out


def _failed(name: str, why: str) -> Dict[str, Any]:
    return {
        "measure": "tiny %s: %s" % (name, why),
        "svod_min": None,
        "peer": None,
        "peer_value": None,
        "ratio": None,
        "goal": None,
        "met": False,
    }


def rows(quick: bool = False, runs: int = 3, only: str = "") -> List[Dict[str, Any]]:
    """Rows per model; a model that fails to build or agree becomes a failed row."""
    words = [w.strip().lower() for w in only.split(",") if w.strip()]
    chosen = [m for m in MODELS if not words or any(w in m[0].lower() for w in words)]
    why = missing_dependency()
    if why:
        return [dict(_failed(name, why), met=None) for name, _, _ in chosen]
    import onnxruntime

    peer = "onnxruntime %s" % onnxruntime.__version__
    out: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="svod_bench_tiny_") as directory:
        for name, make, shape in chosen:
            try:
                path = build(name, make, directory)
                times = measure(path, shape, 300 if quick else CALLS, 1 if quick else runs)
                out += model_rows(name, times, peer)
            except Exception as exc:  # one model failing must not hide the others
                text = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                out.append(_failed(name, "failed: " + text))
    return out + [load_row()]


def markdown(table: List[Dict[str, Any]]) -> str:
    """The rows as docs/performance.md shows them: one line per model."""
    lines = [
        "| model | svod_min run µs | plan alone µs | onnxruntime µs | ratio |",
        "|---|---|---|---|---|",
    ]
    runs: Dict[str, Dict[str, Any]] = {}
    for row in table:
        measure = str(row.get("measure") or "")
        head, _, what = measure.partition(": ")
        if row.get("ratio") is None:
            lines.append("| %s | | | | %s |" % (measure, row.get("peer") or row.get("goal") or ""))
        elif what.startswith("median run"):
            runs[head] = row
        elif what.startswith("plan execute") and head in runs:
            run = runs.pop(head)
            lines.append(
                "| %s | %.1f | %.1f | %.1f | %.2f |"
                % (
                    head[len("tiny ") :].rsplit(", ", 1)[0],
                    run["svod_min"],
                    row["svod_min"],
                    run["peer_value"],
                    run["ratio"],
                )
            )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--markdown", action="store_true", help="print the rows as a markdown table")
    p.add_argument("--quick", action="store_true", help="fewer timed calls, one round")
    p.add_argument("--runs", type=int, default=3, help="rounds of timed calls (median of their medians)")
    p.add_argument("--only", default="", help="models whose name holds one of these comma-separated words")
    args = p.parse_args(argv)
    table = rows(args.quick, max(1, args.runs), args.only)
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
