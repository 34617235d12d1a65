"""Loader benchmark: cold/warm load, disk-cache hit in a fresh process, compile+load, and peers.

    python -m svod_min.perf.benchmarks.bench_loader [--repeat N] [--json]

Peers measured in the same run: the `-shared` + `ctypes.CDLL` path for the
same source (clang and gcc), and tinygrad 0.14's ELF loader (relocate + RWX
mmap + write) on the same object when tinygrad is installed. Prints one table:
measure, svod_min, peer, ratio (peer / svod_min: > 1 means svod_min is faster),
goal, met.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, List, Optional, Sequence

from svod_min.compiler import clang
from svod_min.jit_loader import load_object
from svod_min.perf.bench_suite import PACKAGE_PARENT, bench_compilers, format_table, make_row

# A small kernel that every loader can take: a static table (PC32), a loop, no libcalls.
KERNEL = r"""
static const float scale[4] = {1.0f, 2.0f, 3.0f, 4.0f};
void kern(float* restrict out, const float* restrict a, const float* restrict b, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] * scale[i & 3] + b[i];
}
"""
# The flags tinygrad uses for its CPU objects (so its loader accepts the object).
TINYGRAD_FLAGS = ["-ffreestanding", "-nostdlib", "-fno-math-errno"]


def medians_us(fns: Sequence[Callable[[], object]], repeat: int) -> List[float]:
    """Median µs of each of ``fns``, called in turn every round so that all see the same machine."""
    times: List[List[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for fn, mine in zip(fns, times):
            t0 = time.perf_counter()
            fn()
            mine.append(time.perf_counter() - t0)
    return [statistics.median(mine) * 1e6 for mine in times]


def median_us(fn: Callable[[], object], repeat: int) -> float:
    return medians_us([fn], repeat)[0]


def _check_runs(lo) -> None:
    fn = lo.function("kern", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
    a = (ctypes.c_float * 8)(*range(8))
    out = (ctypes.c_float * 8)()
    fn(out, a, a, 8)
    assert list(out) == [x * (1 + (i & 3)) + x for i, x in enumerate(range(8))], list(out)


def cold_objects(count: int) -> List[bytes]:
    """``count`` objects of KERNEL that differ in one kept constant: each misses the in-process layout cache."""
    tagged = KERNEL + "__attribute__((used)) static const int bench_variant = %d;\n"
    return clang.compile_many_c([tagged % i for i in range(count)], extra_flags=TINYGRAD_FLAGS)


def cold_load(objs: List[bytes]) -> None:
    load_object(objs.pop()).close()  # a never-seen object: parse + lay out + relocate + map + protect


def warm_load(obj: bytes) -> None:
    load_object(obj).close()  # layout cached in-process: relocate + map + protect


def tinygrad_load(obj: bytes) -> Optional[Callable[[], None]]:
    try:
        from tinygrad.runtime.support.elf import jit_loader
    except Exception:
        return None
    libm = ctypes.CDLL("libm.so.6")

    def run() -> None:
        mem = mmap.mmap(
            -1, len(obj), mmap.MAP_ANON | mmap.MAP_PRIVATE, mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
        )
        addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
        mem.write(jit_loader(obj, base=addr, link_libs=[libm]))
        mem.close()

    try:
        run()
    except Exception as exc:  # its loader lacks many relocation types
        print("tinygrad loader rejected the object: %s" % exc, file=sys.stderr)
        return None
    return run


def shared_cdll(src: str, cc: str, tmp: str) -> None:
    path = os.path.join(tmp, "k_%d.so" % time.perf_counter_ns())
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-x", "c", "-", "-o", path], input=src.encode(), check=True)
    ctypes.CDLL(path)
    os.unlink(path)


_CHILD = r"""
import sys, time
t0 = time.perf_counter()
from svod_min.cache.kernel_cache import compile_cached, object_cache
import svod_min.compiler.clang  # the key needs the compiler identity: import cost, not lookup cost
from svod_min.jit_loader import load_object
t1 = time.perf_counter()
obj = compile_cached(sys.argv[1], extra_flags=sys.argv[2:])
lo = load_object(obj)
t2 = time.perf_counter()
print(object_cache().directory, (t1 - t0) * 1e6, (t2 - t1) * 1e6)
"""


def cache_hit_new_process(src: str, flags: List[str], repeat: int) -> tuple:
    """(median µs from cache lookup to loaded, median import µs) in fresh interpreters."""
    env = dict(os.environ, PYTHONPATH=PACKAGE_PARENT)
    with tempfile.TemporaryDirectory() as cache_dir:
        env["SVOD_OBJECT_CACHE_DIR"] = cache_dir
        env["SVOD_OBJECT_CACHE"] = "1"
        cmd = [sys.executable, "-c", _CHILD, src, *flags]
        subprocess.run(cmd, env=env, check=True, capture_output=True)  # fill the cache
        loads, imports = [], []
        for _ in range(repeat):
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout.split()
            imports.append(float(out[1]))
            loads.append(float(out[2]))
    return statistics.median(loads), statistics.median(imports)


def row(measure: str, ours: float, peer: Optional[float], peer_name: str, goal: str, met: Optional[bool]) -> dict:
    return make_row(measure, ours, peer, peer_name, goal, met)


def rows(repeat: int = 200, quick: bool = False) -> List[dict]:
    """Every loader measurement as table rows (also used by ``python -m svod_min bench``; quick: 20 repeats)."""
    repeat = min(repeat, 20) if quick else repeat
    obj = clang.compile_c(KERNEL, extra_flags=TINYGRAD_FLAGS)
    with load_object(obj) as lo:
        _check_runs(lo)  # benchmark only what is proven to work
    out = []
    tg = tinygrad_load(obj)
    fresh = cold_objects(repeat)
    if tg is None:
        cold, tg_us = median_us(lambda: cold_load(fresh), repeat), None
    else:
        tg_us, cold = medians_us([tg, lambda: cold_load(fresh)], repeat)
    # the goal is tinygrad's own time where it runs (it validates nothing and maps one RWX page)
    goal, met = ("<= peer", cold <= tg_us) if tg_us is not None else ("<= 250", cold <= 250)
    out.append(
        row("cold load µs (parse+relocate+map+protect)", cold, tg_us, "tinygrad 0.14 jit_loader+RWX mmap", goal, met)
    )
    warm = median_us(lambda: warm_load(obj), repeat)
    out.append(
        row("warm load µs (layout cached)", warm, tg_us, "tinygrad 0.14 jit_loader+RWX mmap", "<= 50", warm <= 50)
    )
    hit, imp = cache_hit_new_process(KERNEL, TINYGRAD_FLAGS, max(5, repeat // 20))
    out.append(row("disk-cache hit + load in a new process µs", hit, None, "-", "<= 1000", hit <= 1000))
    out.append(row("import svod_min (cache, clang, loader) µs", imp, None, "-", "info", None))
    n = max(5, repeat // 20)
    with tempfile.TemporaryDirectory() as tmp:
        for cc in bench_compilers():  # SVOD_CC=gcc: a gcc-only run
            ours = median_us(lambda: load_object(clang.compile_c(KERNEL, compiler=cc)).close(), n)
            peer = median_us(lambda: shared_cdll(KERNEL, cc, tmp), n)
            out.append(
                row(
                    "compile+load µs, %s" % cc,
                    ours,
                    peer,
                    "%s -shared + ctypes.CDLL" % cc,
                    "faster than peer",
                    ours < peer,
                )
            )
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    table = rows(args.repeat)
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        print_table(table)
    return 0


def print_table(rows: List[dict]) -> None:
    print(format_table(rows))


if __name__ == "__main__":
    sys.exit(main())
