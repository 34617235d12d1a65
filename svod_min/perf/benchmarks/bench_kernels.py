"""Kernel library benchmark: svod_min kernels against numpy / BLAS, measured in the same run.

    python -m svod_min.perf.benchmarks.bench_kernels [--json] [--reps N]

Every measurement runs in its own subprocess with the thread settings fixed
*before* numpy is imported (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS /
MKL_NUM_THREADS, and SVOD_THREADS for svod_min), so BLAS gets exactly the
thread count it is compared at, and OpenBLAS worker threads spinning after
a BLAS call never steal a core from an svod_min measurement. Times are
medians of ``--reps`` runs after warm-up; rates are higher-is-better, so
``ratio = svod_min / peer_value``.

Rows: add of 2^24 float32 vs ``numpy.add(out=)`` (1 thread), and as a
fraction of this machine's 1-thread memcpy bandwidth measured in the same
round (outputs that large use streaming stores, see templates/c/prelude.h.j2); fused
``relu(a*b+c)`` vs the numpy expression ``np.maximum(a*b+c, 0)``; float32
matmul vs numpy's BLAS at 1 and at 2 threads (goal at 1024^2; 256^2, 512^2,
2048^2 and an MLP layer 64x512x784 reported); the speed-up of the
``core_id``-threaded matmul and gelu kernels from 1 to 2 cores; add with 2
threads vs this machine's memcpy bandwidth with 2 threads.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

# The directory holding the svod_min package (a checkout or site-packages): workers import the same svod_min.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
N_ADD = 1 << 24
N_GELU = 1 << 22
N_MM = 1024
# (M, N, K): the goal's square, smaller and larger squares, and an MLP layer (batch 64, 784 -> 512).
MM_SHAPES: Tuple[Tuple[int, int, int], ...] = (
    (1024, 1024, 1024),
    (256, 256, 256),
    (512, 512, 512),
    (2048, 2048, 2048),
    (64, 512, 784),
)
MM_GOAL = 0.9  # of numpy's BLAS at 1024^2, at 1 and at 2 threads


def _paired(fns: Dict[str, Callable[[], Any]], reps: int, warmup: int = 2) -> Dict[str, float]:
    from svod_min.perf.bench_suite import paired_median_s  # svod_min is imported lazily in this script

    return paired_median_s(fns, reps, warmup)


def _median(fn: Callable[[], Any], reps: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]


# --- workers (each in its own process) ---------------------------------------------------


def _arrays(np: Any, n: int, count: int) -> List[Any]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(n).astype(np.float32) for _ in range(count)]


def work_elementwise(reps: int) -> Dict[str, float]:
    import numpy as np

    from svod_min import kernels

    a, b, c = _arrays(np, N_ADD, 3)
    out, ref = np.empty_like(a), np.empty_like(a)
    add = kernels.get("add").bind([out, a, b], n=N_ADD, threads=1)
    add()
    assert np.array_equal(out, a + b)
    try:
        fused = kernels.fused("relu(a*b+c)")
        how = "kernels.fused"
    except Exception:  # no C compiler: the prebuilt kernel renders the same expression
        fused = kernels.get("relu_mul_add")
        how = "prebuilt relu_mul_add"
    run_fused = fused.bind([out, a, b, c], n=N_ADD, threads=1)
    run_fused()
    assert np.allclose(out, np.maximum(a * b + c, 0), rtol=1e-6, atol=1e-6)
    # two separate rounds: the numpy expression frees 64 MiB temporaries, which must not land on add's timing
    import ctypes

    copy_dst = np.empty_like(a)  # memcpy of one 64 MiB array: this machine's 1-thread stream bandwidth
    memcpy1 = lambda: ctypes.memmove(copy_dst.ctypes.data, a.ctypes.data, a.nbytes)  # noqa: E731
    res: Dict[str, Any] = _paired({"add": add, "np_add": lambda: np.add(a, b, out=ref), "memcpy1": memcpy1}, reps)
    res.update(_paired({"fused": run_fused, "np_fused": lambda: np.maximum(a * b + c, 0)}, reps))
    res["fused_how"] = how
    return res


def _matmul_operands(np: Any, shape: Tuple[int, int, int]) -> Tuple[Any, Any, Any]:
    m, n, k = shape
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    return a, b, np.empty((m, n), np.float32)


def work_svod_matmul(reps: int, threads: int) -> Dict[str, Any]:
    import numpy as np

    from svod_min import kernels

    k = kernels.get("matmul", dtype="float32")
    out: Dict[str, Any] = {"tile": "%dx%d" % (k.params["mr"], k.params["nr"]), "variant": str(k.variant)}
    for shape in MM_SHAPES:
        a, b, c = _matmul_operands(np, shape)
        call = k.bind([c, a, b], M=shape[0], N=shape[1], K=shape[2], threads=threads)
        call()
        want = a[:64].astype(np.float64) @ b.astype(np.float64)  # a slice: no BLAS threads, float64 path
        assert np.allclose(c[:64], want, rtol=1e-3, atol=1e-3), shape
        out[_shape_key(shape)] = _median(call, _reps_for(shape, reps))
    return out


def work_blas_matmul(reps: int, threads: int) -> Dict[str, Any]:
    import numpy as np

    blas = "BLAS"
    try:
        cfg = np.show_config(mode="dicts")  # numpy >= 2
        blas = cfg["Build Dependencies"]["blas"]["name"]
    except Exception:
        pass
    out: Dict[str, Any] = {"blas": blas, "numpy": np.__version__}
    for shape in MM_SHAPES:
        a, b, c = _matmul_operands(np, shape)
        out[_shape_key(shape)] = _median(lambda: np.matmul(a, b, out=c), _reps_for(shape, reps))
    return out


def _shape_key(shape: Tuple[int, int, int]) -> str:
    return "%dx%dx%d" % shape


def _reps_for(shape: Tuple[int, int, int], reps: int) -> int:
    """Fewer runs of the big shapes (a 2048^2 float32 matmul is ~0.3 s on one core)."""
    return max(3, reps * (N_MM**3) // max(N_MM**3, shape[0] * shape[1] * shape[2]))


def work_speedup(reps: int) -> Dict[str, float]:
    import numpy as np

    from svod_min import kernels

    rng = np.random.default_rng(2)
    a, b = (rng.standard_normal((N_MM, N_MM)).astype(np.float32) for _ in range(2))
    c = np.empty_like(a)
    mm = kernels.get("matmul", dtype="float32")
    x = rng.standard_normal(N_GELU).astype(np.float32)
    y = np.empty_like(x)
    gelu = kernels.get("gelu")
    calls = {
        "mm1": mm.bind([c, a, b], M=N_MM, N=N_MM, K=N_MM, threads=1),
        "mm2": mm.bind([c, a, b], M=N_MM, N=N_MM, K=N_MM, threads=2),
        "gelu1": gelu.bind([y, x], n=N_GELU, threads=1),
        "gelu2": gelu.bind([y, x], n=N_GELU, threads=2),
    }
    return _paired(calls, reps)  # 1 and 2 cores alternate: both see the same machine state


def work_bandwidth(reps: int) -> Dict[str, float]:
    import ctypes
    import threading

    import numpy as np

    from svod_min import kernels

    a, b = _arrays(np, N_ADD, 2)
    out = np.empty_like(a)
    add = kernels.get("add").bind([out, a, b], n=N_ADD, threads=2)
    src, dst = _arrays(np, N_ADD * 3 // 2, 1)[0], np.empty(N_ADD * 3 // 2, np.float32)
    half = src.nbytes // 2

    def memcpy2() -> None:  # two threads, ctypes.memmove drops the GIL
        ts = [
            threading.Thread(target=ctypes.memmove, args=(dst.ctypes.data + i * half, src.ctypes.data + i * half, half))
            for i in range(2)
        ]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    res = _paired({"add2": add, "memcpy2": memcpy2}, reps)
    res["memcpy_bytes"] = float(src.nbytes)
    return res


WORKERS: Dict[str, Callable[..., Dict[str, Any]]] = {
    "elementwise": work_elementwise,
    "svod_matmul": work_svod_matmul,
    "blas_matmul": work_blas_matmul,
    "speedup": work_speedup,
    "bandwidth": work_bandwidth,
}


def run_worker(name: str, threads: int, reps: int) -> Dict[str, Any]:
    env = dict(os.environ)
    blas_threads = threads if name == "blas_matmul" else 1
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = str(blas_threads)
    env["SVOD_THREADS"] = str(threads)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [
        sys.executable,
        "-m",
        "svod_min.perf.benchmarks.bench_kernels",
        "--worker",
        name,
        "--threads",
        str(threads),
        "--reps",
        str(reps),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit("bench worker %s failed:\n%s" % (name, proc.stderr))
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- the table -------------------------------------------------------------------------------


def _row(measure: str, svod: float, peer: str, peer_value: float, goal: float) -> Dict[str, Any]:
    ratio = svod / peer_value if peer_value else float("nan")
    return {
        "measure": measure,
        "svod_min": round(svod, 2),
        "peer": peer,
        "peer_value": round(peer_value, 2),
        "ratio": round(ratio, 3),
        "goal": goal,
        "met": bool(ratio >= goal),
    }


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "unknown"


def collect(reps: int) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    load = _loadavg()  # other work on the machine skews every row: reported with the table
    ew = run_worker("elementwise", 1, reps)
    mm = {t: run_worker("svod_matmul", t, max(3, reps // 2)) for t in (1, 2)}
    blas = {t: run_worker("blas_matmul", t, max(3, reps // 2)) for t in (1, 2)}
    sp = run_worker("speedup", 2, max(3, reps // 2))
    bw = run_worker("bandwidth", 2, reps)
    gb = lambda nbytes, s: nbytes / s / 1e9  # noqa: E731
    lib = blas[1]["blas"]
    rows = [
        _row(
            "add f32 2^24, 1 thread [GB/s]",
            gb(12 * N_ADD, ew["add"]),
            "numpy.add(out=)",
            gb(12 * N_ADD, ew["np_add"]),
            1.25,
        ),
        _row(
            "add f32 2^24, 1 thread, fraction of memcpy bandwidth [GB/s]",
            gb(12 * N_ADD, ew["add"]),
            "memcpy (memmove) 64 MiB, 1 thread",
            gb(8 * N_ADD, ew["memcpy1"]),
            0.8,
        ),
        _row(
            "relu(a*b+c) f32 2^24, 1 thread, %s [GB/s]" % ew["fused_how"],
            gb(16 * N_ADD, ew["fused"]),
            "numpy np.maximum(a*b+c, 0)",
            gb(16 * N_ADD, ew["np_fused"]),
            2.0,
        ),
        *_matmul_rows(mm, blas, lib),
        _row("matmul core_id speed-up, 2 cores vs 1 [x]", sp["mm1"] / sp["mm2"], "svod_min on 1 core", 1.0, 1.8),
        _row(
            "gelu f32 2^22 core_id speed-up, 2 cores vs 1 [x]",
            sp["gelu1"] / sp["gelu2"],
            "svod_min on 1 core",
            1.0,
            1.8,
        ),
        _row(
            "add f32 2^24, 2 threads [GB/s]",
            gb(12 * N_ADD, bw["add2"]),
            "memcpy (memmove), 2 threads",
            gb(2 * bw["memcpy_bytes"], bw["memcpy2"]),
            0.8,
        ),
    ]
    info = {
        "numpy": blas[1]["numpy"],
        "blas": lib,
        "variant": mm[1]["variant"],
        "reps": reps,
        "load": "%s before, %s after" % (load, _loadavg()),
    }
    return rows, info


def _matmul_rows(mm: Dict[int, Dict[str, Any]], blas: Dict[int, Dict[str, Any]], lib: str) -> List[Dict[str, Any]]:
    """One row per shape and thread count; the goal applies to 1024^2, the other shapes are reported."""
    out = []
    for shape in MM_SHAPES:
        key, flops = _shape_key(shape), 2.0 * shape[0] * shape[1] * shape[2]
        name = "%d^2" % shape[0] if shape[0] == shape[1] == shape[2] else "%dx%dx%d (M,N,K)" % shape
        for t in (1, 2):
            tile = ", tile %s" % mm[t]["tile"] if t == 1 and shape[0] == N_MM else ""
            row = _row(
                "matmul f32 %s, %d thread%s%s [GFLOP/s]" % (name, t, "s" if t > 1 else "", tile),
                flops / mm[t][key] / 1e9,
                "numpy %s, %d thread%s" % (lib, t, "s" if t > 1 else ""),
                flops / blas[t][key] / 1e9,
                MM_GOAL,
            )
            if shape[0] != N_MM:
                row["goal"], row["met"] = 0.0, None  # reported, no goal
            out.append(row)
    return out


def rows(quick: bool = False) -> List[Dict[str, Any]]:
    """The suite's entry point (``python -m svod_min bench``): goals as text, like the other benches."""
    table, _ = collect(5 if quick else 15)
    return [{**r, "goal": ">= %gx peer" % r["goal"] if r["met"] is not None else "info"} for r in table]


def print_table(rows: List[Dict[str, Any]], info: Dict[str, Any]) -> None:
    cols = ["measure", "svod_min", "peer", "peer_value", "ratio", "goal", "met"]
    cells = [
        [str(r[c]) if c != "goal" else (">= %g" % r[c] if r["met"] is not None else "info") for c in cols] for r in rows
    ]
    width = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    print(
        "svod_min kernel library benchmark | %s, %d CPUs | Python %s | numpy %s (%s) | prebuilt %s | median of %d"
        % (
            platform.machine(),
            os.cpu_count() or 0,
            platform.python_version(),
            info["numpy"],
            info["blas"],
            info["variant"],
            info["reps"],
        )
    )
    print("load average: %s (anything else running skews the rows)" % info["load"])
    print(
        "threads: each row names its own; BLAS/OpenMP thread variables are set to the same count before numpy "
        "is imported, svod_min gets SVOD_THREADS=that count and threads= per dispatch"
    )
    print(" | ".join(c.ljust(w) for c, w in zip(cols, width)))
    print("-+-".join("-" * w for w in width))
    for row in cells:
        print(" | ".join(v.ljust(w) for v, w in zip(row, width)))


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--reps", type=int, default=15, help="timed runs per measurement (median)")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        fn = WORKERS[args.worker]
        result = fn(args.reps, args.threads) if args.worker in ("svod_matmul", "blas_matmul") else fn(args.reps)
        print(json.dumps(result))
        return 0
    rows, info = collect(args.reps)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print_table(rows, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
