"""Which op holds a model back: a bundle's per-op profile at 1 thread, summed over its repeats.

    python -m svod_min.perf.op_profile MODEL.svod [--input NAME=FILE.npy] [--top N] [--runs R]

Each op's time is its fastest of ``runs`` profiled runs (the plan's ``execute_profiled``: every op
alone, serially), so a busy machine inflates the ranking less. The table lists the ops that take
the most time with their kernel, shape (the kernel's fixed variables), share of the run and
GFLOP/s; the best rate any op reached in the same run stands beside them as this machine's
practical peak for the kernel library.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Mapping, NamedTuple, Optional

#: Fixed variables that say nothing about an op's shape.
_NOISE = ("core_id_count", "core_id", "N", "dh", "dw", "groups")


class OpTime(NamedTuple):
    index: int
    kernel: str
    shape: str
    seconds: float
    flops: Optional[int]

    @property
    def gflops(self) -> Optional[float]:
        return self.flops / self.seconds / 1e9 if self.flops and self.seconds > 0 else None


def shape_of(op: Any) -> str:
    """An op's shape from its kernel's fixed variables: ``C=256 H=56 W=56 OC=128 KH=1 KW=1 sh=2 ...``."""
    fixed = getattr(op, "fixedvars", None) or {}
    return " ".join("%s=%s" % (k, v) for k, v in fixed.items() if k not in _NOISE)


def op_times(svod_path: str, inputs: Mapping[str, Any], runs: int = 3) -> List[OpTime]:
    """Every op's fastest profiled time over ``runs`` runs at 1 thread, slowest op first."""
    from svod_min import load_model
    from svod_min.devices.cpu.device import CpuDevice

    model = load_model(svod_path, device=CpuDevice(threads=1))
    model.run(dict(inputs))
    plan = model.loaded.plan
    ops = plan.prepared_ops()
    best: Dict[int, Any] = {}
    for _ in range(runs):
        for p in plan.execute_profiled():
            if p.op_index is not None and (p.op_index not in best or p.elapsed < best[p.op_index].elapsed):
                best[p.op_index] = p
    found = [OpTime(i, p.name, shape_of(ops[i]), p.elapsed, p.flops) for i, p in best.items()]
    return sorted(found, key=lambda o: -o.seconds)


def peak_gflops(times: List[OpTime]) -> Optional[float]:
    """The best rate any op reached (ops under 0.1 ms left out: their clocks are too coarse)."""
    rates = [o.gflops for o in times if o.gflops is not None and o.seconds >= 1e-4]
    return max(rates) if rates else None


def profile_row(name: str, svod_path: str, inputs: Mapping[str, Any], runs: int = 3) -> Dict[str, Any]:
    """One benchmark row naming the op that takes the most time, its GFLOP/s beside the run's best."""
    times = op_times(svod_path, inputs, runs)
    total = sum(o.seconds for o in times)
    top = times[0]
    peak = peak_gflops(times)
    share = sum(o.seconds for o in times if o.kernel == top.kernel) / total if total else 0.0
    rate = top.gflops
    return {
        "measure": "onnx %s: profile, 1 thread: slowest op #%d %s (%s) %.0f%% of %.1f ms; its kernel's ops %.0f%% [GFLOP/s]"
                   % (name, top.index, top.kernel, top.shape, 100 * top.seconds / total if total else 0, total * 1e3, 100 * share),
        "svod_min": None if rate is None else round(rate, 1),
        "peer": "best op of the same run [GFLOP/s]",
        "peer_value": None if peak is None else round(peak, 1),
        "ratio": None, "goal": "info", "met": None,
    }  # fmt: skip


def format_ops(times: List[OpTime], top: int) -> str:
    total = sum(o.seconds for o in times) or 1.0
    lines = ["%5s  %-44s  %9s  %6s  %8s  %s" % ("op", "kernel", "time ms", "share", "GFLOP/s", "shape")]
    for o in times[:top]:
        rate = "-" if o.gflops is None else "%.1f" % o.gflops
        lines.append("%5d  %-44s  %9.3f  %5.1f%%  %8s  %s" % (o.index, o.kernel[:44], o.seconds * 1e3, 100 * o.seconds / total, rate, o.shape))
    peak = peak_gflops(times)
    lines.append("total %.3f ms over %d ops; best op rate %s GFLOP/s" % (total * 1e3, len(times), "-" if peak is None else "%.1f" % peak))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle", help="a model bundle (.svod) or plan file")
    p.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="an input (repeatable; default: the bundle's example)")
    p.add_argument("--top", type=int, default=15, help="ops to list (default 15)")
    p.add_argument("--runs", type=int, default=3, help="profiled runs; each op's fastest counts (default 3)")
    args = p.parse_args(argv)
    inputs: Dict[str, Any] = {}
    for item in args.input:
        import numpy as np

        name, _, path = item.rpartition("=")
        inputs[name] = np.load(path)
    print(format_ops(op_times(args.bundle, inputs, args.runs), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
