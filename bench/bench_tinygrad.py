"""Exported tinygrad models: svod_min replay of the plan vs tinygrad's TinyJit replay of the model.

The plans are the committed bundles in ``examples/tinygrad/`` (the same kernels tinygrad runs); the
peer builds the same model from ``examples/tinygrad/models.py`` in a child process (``DEV=CPU``,
``CACHELEVEL=0``), captures it with TinyJit and times replays, synchronising the device after each
batch. Both sides take the minimum over rounds of the mean per replay. Run alone with
``python bench/bench_tinygrad.py``; ``python -m svod_min bench`` includes it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from svod_min.perf.bench_suite import format_table, make_row, run_tinygrad_child  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples", "tinygrad")
MODELS = ("mlp", "convnet", "attention")

TINYGRAD_CHILD = r"""
import importlib.util, json, sys, time
from tinygrad import Tensor, TinyJit, Device
spec = importlib.util.spec_from_file_location("models", sys.argv[1])
models = importlib.util.module_from_spec(spec); spec.loader.exec_module(models)
rounds, inner = int(sys.argv[2]), int(sys.argv[3])
out = {}
for name in sys.argv[4:]:
    make = models.MODELS[name]
    model, inputs, _ = make(symbolic=False) if name == "mlp" else make()
    args = {k: (v if isinstance(v, Tensor) else Tensor(v)).realize() for k, v in inputs.items()}
    key = next(iter(model(**args)))
    jit = TinyJit(lambda **kw: model(**kw)[key].realize())
    for _ in range(4):
        jit(**args)
    dev = Device[next(iter(args.values())).device]
    dev.synchronize()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            jit(**args)
        dev.synchronize()
        best = min(best, (time.perf_counter() - t0) / inner)
    out[name] = best * 1e6
print(json.dumps(out))
"""


def svod_replay_us(model: str, rounds: int, inner: int) -> Dict[str, Any]:
    from svod_min.planfile.load import load_plan

    loaded = load_plan(os.path.join(EXAMPLES, model, "plan.json"))
    plan = loaded.plan
    plan.execute()
    if not all(ok for _, ok, _ in loaded.verify()):
        raise RuntimeError("%s: the exported plan no longer matches tinygrad's outputs" % model)
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            plan.execute()
        best = min(best, (time.perf_counter() - t0) / inner)
    return {"us": best * 1e6, "ops": len(plan.prepared_ops())}


def tinygrad_replay_us(rounds: int, inner: int) -> Optional[Dict[str, float]]:
    return run_tinygrad_child(TINYGRAD_CHILD, [os.path.join(EXAMPLES, "models.py"), str(rounds), str(inner), *MODELS])


def rows(quick: bool = False) -> List[dict]:
    rounds, inner = (5, 50) if quick else (15, 200)
    peer = tinygrad_replay_us(rounds, max(10, inner // 4))
    table = []
    for model in MODELS:
        ours = svod_replay_us(model, rounds, inner)
        theirs = peer.get(model) if peer else None
        ratio_met = None if theirs is None else theirs / ours["us"] >= 1.0
        table.append(
            make_row(
                "exported %s replay µs (%d ops)" % (model, ours["ops"]),
                ours["us"],
                theirs,
                "tinygrad 0.14 TinyJit replay" if peer else "-",
                "faster than peer",
                ratio_met,
            )
        )
    return table


if __name__ == "__main__":
    print(format_table(rows(quick="--quick" in sys.argv)))
