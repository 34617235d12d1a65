"""Compile-throughput benchmark: a cold plan's kernels compiled one by one vs in one batch.

    python -m svod_min.perf.benchmarks.bench_compile [--kernels N] [--repeat R] [--single S] [--no-peer] [--json]

Every measurement compiles N distinct tiny kernels (``out[i] = x[i] + c_j``
over 16 floats, fresh random constants each time, so nothing is cached; the
object cache lives in a throwaway directory) and reports milliseconds per
kernel, the median over R repeats:

* ``compile_c`` once per kernel (S kernels: one compiler process each),
* ``compile_many_c`` in one compiler run, and with ``jobs=2``,
* ``compile_many_cached`` (keys + disk cache writes included; default jobs),
  and its disk hits,

for clang and gcc. Peers, measured in the same run: tinygrad 0.14 realising N
new kernels in one schedule (DEV=CPU, CACHELEVEL=0; codegen + compile + load,
in a child process) when it is installed, else its figure from the reference
notes marked "reference (not measured)"; and the compiler given all N kernels
as one C file (what tinygrad-style batching costs; no per-kernel objects).
``ratio`` is peer / svod_min: above 1 means svod_min is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Callable, Dict, List, Optional, Tuple

from svod_min.cache import kernel_cache
from svod_min.compiler import clang
from svod_min.perf.bench_suite import bench_compilers

GOAL_MS = 5.0
REFERENCE_TINYGRAD = "tinygrad 0.14 realize N new kernels: reference (not measured), 94-165 ms"
KERNEL = """void add_c_%d(float* restrict out, const float* restrict x) {
  for (int i = 0; i < 16; i++) out[i] = x[i] + %rf;
}
"""

_TINYGRAD_CHILD = textwrap.dedent(
    """
    import random, sys, time
    from tinygrad import Tensor, dtypes
    from tinygrad.helpers import GlobalCounters
    n = int(sys.argv[1])
    # a real buffer: ops on a virtual (arange/const) tensor would fold away
    x = Tensor([float(i) for i in range(16)], dtype=dtypes.float32).realize()
    (x + random.random()).realize()  # device init and first compile, not counted
    outs = [x + random.random() for _ in range(n)]
    GlobalCounters.reset()
    t0 = time.perf_counter()
    Tensor.realize(*outs)
    elapsed = time.perf_counter() - t0
    assert abs(outs[-1].tolist()[3] - 3.0) < 1.01
    print(elapsed, GlobalCounters.kernel_count)
    """
)


def fresh_sources(n: int) -> List[str]:
    """``n`` kernels never compiled before (random constants)."""
    return [KERNEL % (j, random.random() + j) for j in range(n)]


def per_kernel_ms(fn: Callable[[List[str]], object], n: int, repeat: int) -> float:
    """Median over ``repeat`` runs of ``fn(fresh sources)``, in ms per kernel."""
    times = []
    for _ in range(repeat):
        sources = fresh_sources(n)
        t0 = time.perf_counter()
        fn(sources)
        times.append((time.perf_counter() - t0) * 1000.0 / n)
    return statistics.median(times)


def one_by_one(cc: str) -> Callable[[List[str]], object]:
    return lambda sources: [clang.compile_c(s, compiler=cc) for s in sources]


def batch(cc: str, jobs: int) -> Callable[[List[str]], object]:
    return lambda sources: clang.compile_many_c(sources, compiler=cc, jobs=jobs)


def one_file(cc: str) -> Callable[[List[str]], object]:
    """The peer: every kernel in one C file, one object (tinygrad-style batching)."""
    info = clang.find_compiler(compiler=cc)
    flags = clang.compiler_flags(info, ())

    def run(sources: List[str]) -> object:
        with tempfile.TemporaryDirectory(prefix="svod_min-bench-") as tmp:
            cmd = [info.path, "-c", "-x", "c", *flags, "-", "-o", os.path.join(tmp, "all.o")]
            subprocess.run(cmd, input="\n".join(sources).encode(), check=True, capture_output=True)
        return None

    return run


def tinygrad_peer(n: int) -> Tuple[str, Optional[float]]:
    """(peer label, ms per kernel) for tinygrad realising ``n`` new kernels, or the reference."""
    try:
        import tinygrad  # noqa: F401
    except Exception:
        return REFERENCE_TINYGRAD, None
    with tempfile.TemporaryDirectory(prefix="svod_min-bench-tg-") as tmp:
        env = dict(os.environ, DEV="CPU", CACHELEVEL="0", CACHEDB=os.path.join(tmp, "cache.db"))
        env.pop("DEBUG", None)
        try:
            out = subprocess.run(
                [sys.executable, "-c", _TINYGRAD_CHILD, str(n)],
                env=env,
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=600,
                check=True,
            ).stdout.split()
            elapsed, kernels = float(out[-2]), int(out[-1])
        except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:
            print("tinygrad peer failed: %s" % exc, file=sys.stderr)
            return REFERENCE_TINYGRAD, None
    if kernels < n:
        print("tinygrad made only %d kernels of %d" % (kernels, n), file=sys.stderr)
    label = "tinygrad 0.14 realize %d new kernels (measured)" % kernels
    return label, elapsed * 1000.0 / max(kernels, 1)


def row(measure: str, ours: float, peer: str, peer_value: Optional[float], goal: str, met: Optional[bool]) -> dict:
    ratio = peer_value / ours if (peer_value is not None and ours) else None
    return {
        "measure": measure,
        "svod_min": round(ours, 2),
        "peer": peer,
        "peer_value": None if peer_value is None else round(peer_value, 2),
        "ratio": None if ratio is None else round(ratio, 2),
        "goal": goal,
        "met": met,
    }


def _compiler_rows(cc: str, n: int, repeat: int, single: int, tg: Tuple[str, Optional[float]]) -> List[dict]:
    goal = "<= %g" % GOAL_MS
    clang.compile_many_c(fresh_sources(2), compiler=cc)  # probe the compiler outside the timings
    solo = per_kernel_ms(one_by_one(cc), single, 1)
    many = per_kernel_ms(batch(cc, 1), n, repeat)
    many2 = per_kernel_ms(batch(cc, 2), n, repeat)
    whole = per_kernel_ms(one_file(cc), n, repeat)
    return [
        row("compile ms/kernel, compile_c per kernel (%s)" % cc, solo, tg[0], tg[1], "info", None),
        row(
            "compile ms/kernel, compile_many_c 1 run (%s)" % cc,
            many,
            "%s: one C file, one object" % cc,
            whole,
            goal,
            many <= GOAL_MS,
        ),
        row("compile ms/kernel, compile_many_c jobs=2 (%s)" % cc, many2, tg[0], tg[1], goal, many2 <= GOAL_MS),
    ]


def _cached_rows(n: int, repeat: int, tg: Tuple[str, Optional[float]]) -> List[dict]:
    cold: List[float] = []
    hits: List[float] = []
    for _ in range(repeat):
        sources = fresh_sources(n)
        t0 = time.perf_counter()
        kernel_cache.compile_many_cached(sources)
        t1 = time.perf_counter()
        kernel_cache.OBJECT_MEMORY_CACHE.clear()  # as a new process would find it
        kernel_cache.compile_many_cached(sources)
        t2 = time.perf_counter()
        cold.append((t1 - t0) * 1000.0 / n)
        hits.append((t2 - t1) * 1000.0 / n)
    cc = clang.find_compiler().family
    ours, hit = statistics.median(cold), statistics.median(hits)
    return [
        row(
            "cold plan ms/kernel, compile_many_cached (%s, jobs=%d)" % (cc, clang.default_jobs()),
            ours,
            tg[0],
            tg[1],
            "<= %g" % GOAL_MS,
            ours <= GOAL_MS,
        ),
        row("warm plan ms/kernel, compile_many_cached disk hits", hit, "-", None, "info", None),
    ]


def rows(kernels: int = 100, repeat: int = 3, single: int = 20, peer: bool = True) -> List[dict]:
    """Every row of this benchmark (dicts with measure, svod_min, peer, peer_value, ratio, goal, met)."""
    tg = tinygrad_peer(kernels) if peer else (REFERENCE_TINYGRAD, None)
    saved: Dict[str, Optional[str]] = {k: os.environ.get(k) for k in ("SVOD_OBJECT_CACHE_DIR", "SVOD_OBJECT_CACHE")}
    out: List[dict] = []
    with tempfile.TemporaryDirectory(prefix="svod_min-bench-cache-") as cache_dir:
        os.environ["SVOD_OBJECT_CACHE_DIR"] = cache_dir
        os.environ["SVOD_OBJECT_CACHE"] = "1"
        try:
            for cc in bench_compilers():  # SVOD_CC=gcc: a gcc-only run
                out.extend(_compiler_rows(cc, kernels, repeat, single, tg))
            out.extend(_cached_rows(kernels, repeat, tg))
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return out


def print_table(table: List[dict]) -> None:
    headers = ["measure", "svod_min", "peer", "peer_value", "ratio", "goal", "met"]
    cells = [[str("" if r[h] is None else r[h]) for h in headers] for r in table]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    print("  ".join("-" * w for w in widths))
    for c in cells:
        print("  ".join(v.ljust(w) for v, w in zip(c, widths)))


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--kernels", type=int, default=100, help="kernels per batch (default 100)")
    parser.add_argument("--repeat", type=int, default=3, help="batches per measure; the median is kept")
    parser.add_argument("--single", type=int, default=20, help="kernels compiled one by one (default 20)")
    parser.add_argument("--no-peer", action="store_true", help="skip the tinygrad child process")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    table = rows(args.kernels, args.repeat, args.single, peer=not args.no_peer)
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        print(
            "%d kernels per batch, %d CPUs; ms per kernel, median of %d"
            % (args.kernels, os.cpu_count() or 1, args.repeat)
        )
        print_table(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
