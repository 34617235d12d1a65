"""Plan replay benchmark: overhead per kernel for a plan of 100 tiny kernels.

    python -m svod_min.perf.benchmarks.bench_plan [--repeat N] [--kernels K] [--no-peer] [--quick] [--json]

``rows(quick=False)`` returns the table rows for ``python -m svod_min bench``.

Two plan shapes, each K kernels on 16-float buffers, built from a plan document
(``svod_min.planfile.load.load_plan``) and replayed with ``ExecutionPlan.execute()``:

* independent: ``o_j = x + c_j`` — every op in one Kahn level; with more than one
  device thread the plan overlaps them on the pool, so it is also measured with a
  one-thread device (the plain serial Python path);
* chain: ``o_j = o_{j-1} + c_j`` — K levels of one op each.

Both replay paths of ``execute()`` are measured: the Python path
(``plan.set_native_replay(False)``: one bound ctypes call per kernel from Python) and
the native path (the default where available: one foreign call walks a packed call
table). Per kernel = (T_K − T_1) / (K − 1); fixed per replay = T_1 − per kernel. The floor is
the same K kernels called straight through ctypes with prebuilt arguments. The peer is
tinygrad 0.14's TinyJit replay of the same K kernels, timed the same way (``DEV=CPU``, ``CACHELEVEL=0``,
measured in a child process) when tinygrad is importable. Prints one table: measure,
svod_min, peer, peer_value, ratio (peer / svod_min: > 1 means svod_min is faster),
goal, met.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from svod_min.perf.bench_suite import format_table, make_row, run_tinygrad_child

N = 16  # floats per buffer
GOAL_US = 3.0
#: Independent tiny kernels on a pooled device: each below the grain runs on the calling thread, so a
#: kernel costs no more than a ctypes call (no pool wake-up per kernel).
POOLED_GOAL_US = 1.0


def const(j: int) -> float:
    return j + 0.5


def kernel_source(k: int) -> str:
    """One C text with entry points add_0 .. add_{k-1}: o[i] = a[i] + c_j (compiled once)."""
    return "\n".join(
        "void add_%d(float* restrict o, const float* restrict a) { for (int i = 0; i < %d; i++) o[i] = a[i] + %.1ff; }"
        % (j, N, const(j))
        for j in range(k)
    )


def plan_doc(k: int, chain: bool, source: str) -> Dict[str, Any]:
    buffers: Dict[str, Any] = {"x": {"dtype": "float32", "shape": [N], "init": "arange"}}
    kernels: Dict[str, Any] = {}
    ops = []
    for j in range(k):
        buffers["o%d" % j] = {"dtype": "float32", "shape": [N], "output": (not chain) or j == k - 1}
        kernels["add_%d" % j] = {"source": source, "buffers": 2}
        src = "o%d" % (j - 1) if chain and j > 0 else "x"
        ops.append({"kernel": "add_%d" % j, "buffers": ["o%d" % j, src]})
    return {
        "svod_plan": 1,
        "description": "%d tiny kernels (%s)" % (k, "chain" if chain else "independent"),
        "buffers": buffers,
        "kernels": kernels,
        "ops": ops,
    }


def expected(k: int, chain: bool) -> Dict[str, List[float]]:
    x = [float(i) for i in range(N)]
    out, acc = {}, x
    for j in range(k):
        acc = [v + const(j) for v in (acc if chain else x)]
        out["o%d" % j] = acc
    return out


def per_call_us(fn: Callable[[], Any], repeat: int, inner: int) -> float:
    """Best of ``repeat`` batches of ``inner`` calls (as timeit does), in µs per call.

    The per-kernel figure is a difference of two such times; the best batch is far
    less noisy than the median for sub-microsecond differences.
    """
    for _ in range(max(3, inner // 4)):
        fn()  # warm up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return min(samples) * 1e6


def load(k: int, chain: bool, source: str, device: Any, native: bool) -> Any:
    from svod_min.planfile.load import load_plan

    loaded = load_plan(plan_doc(k, chain, source), device=device)
    if loaded.plan.set_native_replay(native) != native:
        raise RuntimeError("native replay is not available here")
    loaded.plan.execute()
    want = expected(k, chain)
    for name, values in want.items():  # benchmark only what is proven to compute the right thing
        got = loaded.buffers[name].tolist()
        assert got == values, (name, got[:4], values[:4])
    return loaded


def svod_replay(k: int, chain: bool, device: Any, repeat: int, native: bool) -> Tuple[float, float, Any]:
    source = kernel_source(k)
    one, many = load(1, chain, source, device, native), load(k, chain, source, device, native)
    t1 = per_call_us(one.plan.execute, repeat, 200)
    tk = per_call_us(many.plan.execute, repeat, max(5, 2000 // k))
    per = (tk - t1) / (k - 1)
    return per, t1 - per, many


def ctypes_floor(loaded: Any, repeat: int) -> float:
    """The plan's kernels called directly: prebuilt c_void_p args, no plan machinery."""
    plan = loaded.plan
    bufs = plan.buffers()
    calls = [
        op.kernel.program.bind([bufs[i] for i in op.buffer_indices], list(op.vals)) for op in plan.prepared_kernels()
    ]

    def run() -> None:
        for c in calls:
            c()

    return per_call_us(run, repeat, max(5, 2000 // len(calls))) / len(calls)


# --- the tinygrad peer (child process) ---------------------------------------------------------

TINYGRAD_CHILD = r"""
import json, os, statistics, sys, time
from tinygrad import Tensor, TinyJit, Device
from tinygrad.helpers import GlobalCounters
N, K, repeat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
consts = [j + 0.5 for j in range(K)]

def make(k, chain):
    cs = consts[:k]
    if chain:
        def f(x):
            outs, y = [], x
            for c in cs:
                y = (y + c).realize()
                outs.append(y)
            return outs
    else:
        def f(x):
            return [(x + c).realize() for c in cs]
    return TinyJit(f)

def measure(k, chain):
    x = Tensor([float(i) for i in range(N)]).realize()
    jit = make(k, chain)
    for _ in range(3):
        outs = jit(x)
    dev = Device[x.device]
    GlobalCounters.reset()
    outs = jit(x)
    dev.synchronize()
    kernels = GlobalCounters.kernel_count
    acc = list(range(N))
    for j, o in enumerate(outs):
        acc = [v + consts[j] for v in (acc if chain else range(N))]
        assert o.tolist() == acc, (j, o.tolist()[:4], acc[:4])
    inner = max(2, 500 // k)
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            jit(x)
        dev.synchronize()
        samples.append((time.perf_counter() - t0) / inner)
    return min(samples) * 1e6, kernels

out = {}
for chain in (False, True):
    t1, k1 = measure(1, chain)
    tk, kk = measure(K, chain)
    per = (tk - t1) / (K - 1)
    out["chain" if chain else "independent"] = {"per_kernel": per, "fixed": t1 - per, "kernels": kk, "t1": t1, "tk": tk}
print(json.dumps(out))
"""


def tinygrad_peer(k: int, repeat: int) -> Optional[Dict[str, Any]]:
    data = run_tinygrad_child(TINYGRAD_CHILD, [str(N), str(k), str(max(5, repeat // 2))])
    if data is None:
        return None
    for shape in data.values():
        if shape["kernels"] != k:
            print("tinygrad ran %d kernels per replay, expected %d" % (shape["kernels"], k), file=sys.stderr)
    return data


# --- table --------------------------------------------------------------------------------------


def row(measure: str, ours: float, peer: Optional[float], peer_name: str, goal: str, met: Optional[bool]) -> dict:
    return make_row(measure, ours, peer, peer_name, goal, met)


def native_available() -> bool:
    try:
        from svod_min.plan import native_replay

        return bool(native_replay.available())
    except Exception:  # pragma: no cover - older builds have no native path
        return False


def rows(quick: bool = False, repeat: Optional[int] = None, kernels: int = 100, peer: bool = True) -> List[dict]:
    """The benchmark table as a list of row dicts (measure, svod_min, peer, peer_value, ratio, goal, met)."""
    from svod_min.devices.cpu.device import CpuDevice
    from svod_min.devices.registry import DEVICE_FACTORIES

    k = kernels
    repeat = repeat or (9 if quick else 30)
    pooled = DEVICE_FACTORIES.device("CPU")
    serial = CpuDevice(threads=1)
    tg_data = tinygrad_peer(k, repeat) if peer else None
    tg = "tinygrad 0.14 TinyJit replay" if tg_data else "-"

    def peer_of(shape: str, key: str) -> Optional[float]:
        return tg_data[shape][key] if tg_data else None

    goal = "<= %g" % GOAL_US
    out = []
    fixed: List[Tuple[str, float, str]] = []
    paths = [("Python path", False)] + ([("native path", True)] if native_available() else [])
    floor_plan = None
    for label, native in paths:
        per, fix, loaded = svod_replay(k, False, serial, repeat, native)
        floor_plan = floor_plan or loaded
        out.append(
            row(
                "%s: per kernel µs, %d independent x+c_j, 1 thread" % (label, k),
                per,
                peer_of("independent", "per_kernel"),
                tg,
                goal,
                per <= GOAL_US,
            )
        )
        fixed.append(("%s: fixed µs per replay, independent, 1 thread" % label, fix, "independent"))
        if pooled.threads > 1:
            per, fix, _ = svod_replay(k, False, pooled, repeat, native)
            out.append(
                row(
                    "%s: per kernel µs, %d independent x+c_j, %d threads" % (label, k, pooled.threads),
                    per,
                    peer_of("independent", "per_kernel"),
                    tg,
                    "<= %g" % POOLED_GOAL_US,
                    per <= POOLED_GOAL_US,
                )
            )
            # no fixed-cost row: T_1 (one op) never touches the pool, so T_1 - per kernel is meaningless
        per, fix, _ = svod_replay(k, True, pooled, repeat, native)
        out.append(
            row(
                "%s: per kernel µs, chain of %d" % (label, k),
                per,
                peer_of("chain", "per_kernel"),
                tg,
                goal,
                per <= GOAL_US,
            )
        )
        fixed.append(("%s: fixed µs per replay, chain" % label, fix, "chain"))
    for measure, value, shape in fixed:
        out.append(row(measure, value, peer_of(shape, "fixed"), tg, "info", None))
    floor = ctypes_floor(floor_plan, repeat)
    out.append(row("floor: ctypes call per kernel µs (prebuilt args, from Python)", floor, None, "-", "info", None))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=None, help="timed batches per measure (best of; default 30)")
    parser.add_argument("--kernels", type=int, default=100, help="kernels per plan (default 100)")
    parser.add_argument("--no-peer", action="store_true", help="skip the tinygrad peer")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.kernels < 2:
        parser.error("--kernels must be >= 2")
    table = rows(quick=args.quick, repeat=args.repeat, kernels=args.kernels, peer=not args.no_peer)
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        print_table(table)
    return 0


def print_table(rows: List[dict]) -> None:
    print(format_table(rows))


if __name__ == "__main__":
    sys.exit(main())
