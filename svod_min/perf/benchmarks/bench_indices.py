"""Checked indices: what the run-time index check costs on an embedding lookup (docs/onnx.md, "Indices").

    python -m svod_min bench --only indices
    python -m svod_min.perf.benchmarks.bench_indices [--json] [--quick] [--threads 1,2]

The model is a transformer's input embedding: Gather from a 32000 x 256 float32 table (an input) with 8 x 128
int64 token ids, plus a positional Add. Two bundles hold it: one takes the ids as an input (the kernel checks each id,
the plan reads its status buffer after the run), the other has the same ids as a constant (checked at build, an
unchecked kernel, no status buffer). Both plans are replayed in turn in this process (round-robin, medians of
``execute()``); ratio = constant / checked, goal >= 0.98 (the check costs under 2%). onnxruntime runs the
input-ids model beside them (info).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from svod_min.perf.benchmarks.bench_onnx import build_bundle, missing_dependency
from svod_min.perf.benchmarks.bench_onnx_ops import load_row, ort_session

#: The checked plan at least this fraction of the constant-ids plan's speed.
GOAL = 0.98
#: (vocabulary, width, batch, sequence): a small transformer's input embedding.
SHAPE = (32000, 256, 8, 128)
QUICK_SHAPE = (4000, 64, 4, 32)


def _models(shape: Tuple[int, int, int, int]) -> Tuple[Any, Any, Any]:
    """(the model with ids as an input, the same with ids constant, the ids, a table). The table is an input of
    both: a constant table with constant ids would fold into a constant at build."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    vocab, width, batch, seq = shape
    rng = np.random.default_rng(0)
    table = helper.make_tensor_value_info("table", TensorProto.FLOAT, [vocab, width])  # an input: never folded
    pos = numpy_helper.from_array(rng.standard_normal((seq, width)).astype(np.float32), "pos")
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
        helper.make_node("Add", ["e", "pos"], ["y"]),
    ]
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, width])]

    def model(inputs: List[Any], inits: List[Any]) -> Any:
        m = helper.make_model(helper.make_graph(nodes, "embedding", inputs, out, inits))
        del m.opset_import[:]
        m.opset_import.extend([helper.make_opsetid("", 13)])
        m.ir_version = 8
        return m

    by_input = model([table, helper.make_tensor_value_info("ids", TensorProto.INT64, [batch, seq])], [pos])
    constant = model([table], [pos, numpy_helper.from_array(ids, "ids")])
    return by_input, constant, ids, rng.standard_normal((vocab, width)).astype(np.float32)


def build(directory: str, shape: Tuple[int, int, int, int]) -> Any:
    """Both bundles built in ``directory`` (``checked.svod``, ``constant.svod``, and ``checked.onnx`` for
    onnxruntime); returns the ids and a table."""
    import onnx

    by_input, constant, ids, table = _models(shape)
    for name, model in (("checked", by_input), ("constant", constant)):
        path = os.path.join(directory, name + ".onnx")
        onnx.save(model, path)
        build_bundle(path, path[:-5] + ".svod")
    return ids, table


def measure(directory: str, ids: Any, table: Any, threads: int, rounds: int, reps: int) -> Dict[str, float]:
    """Median over ``rounds`` of each plan's median ``execute()`` seconds (and onnxruntime's run), in turn."""
    import numpy as np

    from svod_min.devices.cpu.device import CpuDevice
    from svod_min.perf.bench_suite import paired_median_s
    from svod_min.planfile.load import load_model

    models = {}
    for name in ("checked", "constant"):
        models[name] = load_model(os.path.join(directory, name + ".svod"), device=CpuDevice(threads=threads))
    feeds = {"checked": {"table": table, "ids": ids}, "constant": {"table": table}}
    got = {name: m.run(feeds[name])["y"] for name, m in models.items()}
    np.testing.assert_array_equal(got["checked"], got["constant"])  # the same lookup, or no comparison
    session = ort_session(os.path.join(directory, "checked.onnx"), threads)
    plans = [(name, m.loaded.plan.execute) for name, m in models.items()]
    samples: Dict[str, List[float]] = {name: [] for name, _ in plans}
    for r in range(rounds):  # the two plans alternate who goes first; onnxruntime apart (it evicts the caches)
        for key, seconds in paired_median_s(dict(plans if r % 2 else plans[::-1]), reps).items():
            samples[key].append(seconds)
    out = {k: statistics.median(v) for k, v in samples.items()}
    out.update(paired_median_s({"onnxruntime": lambda: session.run(None, feeds["checked"])}, reps))
    return out


def rows(quick: bool = False, threads: Sequence[int] = (1, 2)) -> List[Dict[str, Any]]:
    """One row per thread count against the constant-ids plan (quick: a small table whose run is mostly the call,
    info only), one against onnxruntime (info), and the load average."""
    why = missing_dependency()
    shape = QUICK_SHAPE if quick else SHAPE
    label = "indices: embedding lookup %dx%d table, %dx%d int64 ids" % shape
    if why is not None:
        return [{"measure": label, "svod_min": None, "peer": why, "peer_value": None, "ratio": None, "goal": "info"}]
    out = []
    with tempfile.TemporaryDirectory(prefix="svod_bench_indices_") as directory:
        ids, table = build(directory, shape)
        for t in threads:
            m = measure(directory, ids, table, t, 3 if quick else 15, 20 if quick else 200)
            out.extend(table_rows(label, t, m, quick))
    return out + [load_row()]


def table_rows(label: str, threads: int, m: Dict[str, float], quick: bool) -> List[Dict[str, Any]]:
    ratio = m["constant"] / m["checked"]
    return [
        {
            "measure": "%s, %d thread(s): plan execute() s, ids checked at run vs constant ids" % (label, threads),
            "svod_min": m["checked"],
            "peer": "the same plan with constant ids",
            "peer_value": m["constant"],
            "ratio": ratio,
            "goal": "info" if quick else ">= %g" % GOAL,
            "met": None if quick else ratio >= GOAL,
        },
        {
            "measure": "%s, %d thread(s): plan execute() s vs onnxruntime run" % (label, threads),
            "svod_min": m["checked"],
            "peer": "onnxruntime",
            "peer_value": m["onnxruntime"],
            "ratio": m["onnxruntime"] / m["checked"],
            "goal": "info",
            "met": None,
        },
    ]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--quick", action="store_true", help="a smaller table, fewer timed runs")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated (default 1,2)")
    args = p.parse_args(argv)
    table = rows(args.quick, tuple(int(t) for t in args.threads.split(",")))
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        from svod_min.perf.bench_suite import format_table

        print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
