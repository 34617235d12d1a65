"""CUDA device benchmark: launch overhead, graph replay, host<->device bandwidth, PTX module load.

    python3 bench/bench_cuda.py [--quick] [--json] [--kernels K] [--copy-mib M] [--chunk-mib C] [--copy-threads T]
                                [--no-peer] [--no-cold]
    python3 -m svod_min bench --only cuda        # the same rows inside the suite's table

``rows(quick=False, ...)`` returns the table rows (measure, svod_min, peer,
peer_value, ratio, goal, met); ``ratio`` > 1 always means svod_min did better
than its peer. Every peer is measured in the same run on the same GPU. Without
an NVIDIA driver or GPU there is a single "CUDA: not available (why)" row and the
script exits 0; without CuPy the CuPy peers are left empty (a note on stderr).

What is measured (goals from the issue in brackets):

1. Eager launch overhead [<= 5 µs per kernel]: K ``BoundLaunch`` objects of the
   shipped ``add`` float32 kernel (``svod_cuda_add_f32`` in ``elementwise.ptx``,
   16 floats, one block) are called back to back, then the stream is
   synchronized once; per kernel = that time / K, best of several batches after
   warm-up. Peer: ``cupy.RawModule(path=<the same elementwise.ptx>)`` and its
   ``RawKernel`` launched K times with the same grid and block on a non-blocking
   CuPy stream, then that stream synchronized - the same PTX, launched the same way.
2. Graph replay [<= 1 µs per node]: one ``CudaGraph`` of the K launches and one of
   the first launch alone; each replay is ``graph.launch()`` + synchronize, and
   per node = (T_K - T_1) / (K - 1). T_1 is reported too (fixed cost per replay).
   Peer: the same kernels captured by CuPy (``Stream.begin_capture`` /
   ``end_capture``) and replayed with ``Graph.launch`` + synchronize.
2b. Whole plans: ``ExecutionPlan.execute()`` + synchronize of a K-op chain plan of
   the same library ``add`` (a plan document loaded on the device, output checked),
   with CUDA-graph replay and with eager launches; per kernel = (T_K - T_2) / (K - 2),
   against the raw ``CudaGraph`` / ``BoundLaunch`` numbers of 1. and 2. (the plan
   layer's own cost), plus the fixed cost of a 2-op plan.
3. Bandwidth [>= 90% of raw]: ``CudaBuffer.copyin`` from pageable host memory
   (+ synchronize: copyin returns before the last DMA ends) and
   ``copyout_into`` pageable memory, both through the device's pinned staging
   pool, against raw ``cuMemcpyHtoD_v2`` / ``cuMemcpyDtoH_v2`` from and into one
   ``cuMemHostAlloc`` block (synchronous copies), and against the driver's own
   copies from and into the same pageable buffers; 64 MiB (quick: 8 MiB), medians
   of round-robin repeats; here ratio = svod_min / raw. ``--chunk-mib`` sets
   ``StagingPool.chunk`` and ``--copy-threads`` ``StagingPool.threads`` for tuning.
4. PTX module load of ``elementwise.ptx`` (``CudaModule`` = ``cuModuleLoadDataEx``
   with log buffers; informational, no goal): the first load in this process
   (the driver's JIT cache, ``~/.nv/ComputeCache``, may already hold it), the
   median of repeated loads (warm JIT cache), and the median of loads in a child
   process with ``CUDA_CACHE_DISABLE=1`` (a real JIT every time). The module
   cache of ``CudaDevice.module`` is bypassed. With lazy loading (the driver's
   default since CUDA 12.2) per-kernel loading is deferred to first use.

On the GPU machine, from the repository root::

    python3 bench/bench_cuda.py                 # full run, typically well under a minute
    python3 bench/bench_cuda.py --json > $OUT/bench_cuda.json
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import time
from array import array
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from svod_min.devices import cuda  # noqa: E402
from svod_min.kernels import cuda_library_kernel, ptx_path  # noqa: E402
from svod_min.perf.bench_suite import KEYS, format_table, make_row, paired_median_s  # noqa: E402

N = 16  # floats per tiny kernel: one block, launch cost dominates
MODULE = "elementwise"
ENTRY = "svod_cuda_add_f32"
LAUNCH_GOAL_US = 5.0
NODE_GOAL_US = 1.0
COPY_GOAL = 0.9

# (quick, full) repetition counts
SETTINGS = {
    "batches": (10, 50),  # best-of batches for launch timings
    "replays": (10, 50),  # graph replays per timed batch
    "copy_reps": (5, 15),  # round-robin repeats per copy (median)
    "copy_mib": (8, 64),
    "loads": (3, 10),  # repeated in-process module loads (median)
    "cold_loads": (2, 3),  # loads in the JIT-cache-off child (median)
}


def settings(quick: bool) -> Dict[str, int]:
    return {k: v[0] if quick else v[1] for k, v in SETTINGS.items()}


def note(text: str) -> None:
    print("bench_cuda: %s" % text, file=sys.stderr)


# --- timing ------------------------------------------------------------------------------------


def elapsed_ns(fn: Callable[[], Any]) -> int:
    t0 = time.perf_counter_ns()
    fn()
    return time.perf_counter_ns() - t0


def best_us(fn: Callable[[], Any], per: int, batches: int, warmup: int = 3) -> float:
    """Best of ``batches`` timed calls of ``fn`` (each doing ``per`` items), µs per item."""
    for _ in range(warmup):
        fn()
    return min(elapsed_ns(fn) for _ in range(batches)) / per / 1e3


# --- rows --------------------------------------------------------------------------------------


def empty_row(measure: str) -> Dict[str, Any]:
    """A row with nothing measured (shown blank by format_table, met None)."""
    return {**{k: None for k in KEYS}, "measure": measure, "peer": "-", "goal": "-"}


def info_row(measure: str, value: float, digits: int = 3) -> Dict[str, Any]:
    return make_row(measure, value, None, "-", "-", None, digits=digits)


def rate_row(measure: str, ours: float, raw: float, peer_name: str) -> Dict[str, Any]:
    """Higher is better: ratio = svod_min / raw."""
    row = make_row(measure, ours, raw, peer_name, ">= %g x raw" % COPY_GOAL, ours >= COPY_GOAL * raw)
    row["ratio"] = round(ours / raw, 2) if raw else None
    return row


def open_device() -> Tuple[Optional[cuda.CudaDevice], str]:
    """CUDA:0, or None and why (never raises for a missing driver or GPU)."""
    drv = cuda.load_driver()
    if drv is None:
        return None, cuda.driver_unavailable_reason() or cuda.NO_DRIVER_REASON
    if drv.device_count < 1:
        return None, "the NVIDIA driver reports no GPU"
    return drv.device(0), ""


# --- 4. module load ----------------------------------------------------------------------------


def read_module() -> bytes:
    with open(ptx_path(MODULE), "rb") as fh:
        return fh.read()


def load_ms(dev: cuda.CudaDevice, raw: bytes) -> float:
    """One ``cuModuleLoadDataEx`` of ``raw`` (a fresh CudaModule: the device's module cache is bypassed)."""
    t0 = time.perf_counter_ns()
    mod = cuda.CudaModule(dev, raw, name="%s (bench)" % MODULE)
    ms = (time.perf_counter_ns() - t0) / 1e6
    mod.function(ENTRY)  # the load produced a usable module
    mod.unload()
    return ms


def cold_child(count: int) -> List[float]:
    """Run in a child with CUDA_CACHE_DISABLE=1: ``count`` load times in ms."""
    dev, why = open_device()
    if dev is None:
        raise SystemExit("no CUDA device in the cold-load child: %s" % why)
    raw = read_module()
    return [load_ms(dev, raw) for _ in range(count)]


def cold_load_ms(count: int) -> Optional[float]:
    """Median load time with the driver's JIT cache off (a child process: the setting is read at cuInit)."""
    env = dict(
        os.environ,
        CUDA_CACHE_DISABLE="1",
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p),
    )
    cmd = [sys.executable, os.path.abspath(__file__), "--cold-child", str(count)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        note("the cold-load child timed out")
        return None
    if proc.returncode != 0:
        note("the cold-load child failed: %s" % (proc.stderr.strip().splitlines() or ["?"])[-1])
        return None
    return statistics.median(json.loads(proc.stdout.strip().splitlines()[-1]))


def module_rows(dev: cuda.CudaDevice, cfg: Dict[str, int], cold: bool) -> List[Dict[str, Any]]:
    raw = read_module()
    what = "%s.ptx (%d KiB, %d entries)" % (MODULE, len(raw) >> 10, len(re.findall(rb"\.entry\s", raw)))
    first = load_ms(dev, raw)  # before anything else in this run loads the module
    repeated = statistics.median(load_ms(dev, raw) for _ in range(cfg["loads"]))
    out = [
        info_row("%s load ms, first in this process (JIT cache may be warm)" % what, first, 4),
        info_row("%s load ms, median of %d repeated loads" % (what, cfg["loads"]), repeated, 4),
    ]
    label = "%s load ms, JIT cache off (CUDA_CACHE_DISABLE=1, child), median of %d" % (what, cfg["cold_loads"])
    cold_ms = cold_load_ms(cfg["cold_loads"]) if cold else None
    out.append(info_row(label, cold_ms, 4) if cold_ms is not None else empty_row(label + ": not measured"))
    return out


# --- 1./2. launches and graphs -----------------------------------------------------------------


class Launches:
    """K bound ``add`` launches on 16 floats: out_j = a + b, all proven correct before timing."""

    def __init__(self, dev: cuda.CudaDevice, k: int) -> None:
        self.dev, self.k = dev, k
        self.prog = cuda_library_kernel(dev, "add", dtype="float32")
        self.a = dev.allocate((N,), "float32").copyin(array("f", range(N)))
        self.b = dev.allocate((N,), "float32").copyin(array("f", [0.5] * N))
        self.outs = [dev.allocate((N,), "float32") for _ in range(k)]
        self.bound = [self.prog.bind([o, self.a, self.b], [N]) for o in self.outs]
        self.want = [float(i) + 0.5 for i in range(N)]

    def run_all(self) -> None:
        for launch in self.bound:
            launch()
        self.dev.synchronize()

    def clear(self) -> None:
        zeros = bytes(4 * N)
        for o in self.outs:
            o.copyin(zeros)

    def check(self, what: str) -> None:
        for j, o in enumerate(self.outs):
            got = list(array("f", o.copyout()))
            if got != self.want:
                raise RuntimeError("%s: output %d is %s, want %s" % (what, j, got[:4], self.want[:4]))


def graph_replay_us(graph: Any, sync: Callable[[], Any], cfg: Dict[str, int]) -> float:
    """µs per replay (launch + synchronize), best of batches."""
    replays = cfg["replays"]

    def run() -> None:
        for _ in range(replays):
            graph.launch()
            sync()

    return best_us(run, replays, cfg["batches"])


def svod_launch_times(ls: Launches, cfg: Dict[str, int]) -> Dict[str, float]:
    ls.run_all()
    ls.check("eager launches")
    eager = best_us(ls.run_all, ls.k, cfg["batches"])
    one, many = cuda.CudaGraph(ls.bound[:1]), cuda.CudaGraph(ls.bound)
    ls.clear()
    many.launch()
    ls.dev.synchronize()
    ls.check("graph replay")
    t1, tk = graph_replay_us(one, ls.dev.synchronize, cfg), graph_replay_us(many, ls.dev.synchronize, cfg)
    one.close()
    many.close()
    return {"eager": eager, "fixed": t1, "node": (tk - t1) / (ls.k - 1)}


def cupy_launch_times(ls: Launches, cfg: Dict[str, int]) -> Optional[Dict[str, float]]:
    """The CuPy peer, or None (with a note) when CuPy is missing or fails."""
    try:
        import cupy
        import numpy as np
    except Exception as exc:  # ImportError, or a CuPy that cannot find its CUDA libraries
        note("no CuPy peer (%s: %s)" % (type(exc).__name__, exc))
        return None
    try:
        return _cupy_times(cupy, np, ls, cfg)
    except Exception as exc:
        note("CuPy peer failed (%s: %s)" % (type(exc).__name__, exc))
        return None
    finally:
        ls.dev.activate(force=True)  # CuPy may have changed the thread's current context


def _cupy_times(cupy: Any, np: Any, ls: Launches, cfg: Dict[str, int]) -> Dict[str, float]:
    kern = cupy.RawModule(path=ptx_path(MODULE)).get_function(ENTRY)
    grid, block = tuple(ls.bound[0].grid), tuple(ls.bound[0].block)
    a = cupy.asarray(np.arange(N, dtype=np.float32))  # host copies: no CuPy-compiled kernels involved
    b = cupy.asarray(np.full(N, 0.5, dtype=np.float32))
    outs = [cupy.empty(N, dtype=np.float32) for _ in range(ls.k)]
    args = [(o, a, b, np.int32(N)) for o in outs]
    stream = cupy.cuda.Stream(non_blocking=True)

    def check(what: str) -> None:
        for o in outs:
            if cupy.asnumpy(o).tolist() != ls.want:
                raise RuntimeError("CuPy %s computed the wrong sum" % what)

    def eager() -> None:
        for arg in args:
            kern(grid, block, arg)
        stream.synchronize()

    def capture(sub: Sequence[Any]) -> Any:
        stream.begin_capture()
        for arg in sub:
            kern(grid, block, arg)
        return stream.end_capture()

    class Replay:  # graph.launch() on our stream, like CudaGraph.launch
        def __init__(self, graph: Any) -> None:
            self.graph = graph

        def launch(self) -> None:
            self.graph.launch(stream)

    with stream:
        eager()
        check("eager launches")
        out = {"eager": best_us(eager, ls.k, cfg["batches"])}
        one, many = capture(args[:1]), capture(args)
        for o in outs:
            o.data.memset_async(0, o.nbytes)  # a memset: no CuPy-compiled kernel
        many.launch(stream)
        stream.synchronize()
        check("graph replay")
        t1 = graph_replay_us(Replay(one), stream.synchronize, cfg)
        tk = graph_replay_us(Replay(many), stream.synchronize, cfg)
    out.update(fixed=t1, node=(tk - t1) / (ls.k - 1))
    return out


def launch_rows(
    dev: cuda.CudaDevice, k: int, cfg: Dict[str, int], peer: bool
) -> Tuple[List[Dict[str, Any]], Dict[str, float]]:
    """The launch rows, and svod_min's own raw numbers (the plan rows compare against them)."""
    ls = Launches(dev, k)
    ours = svod_launch_times(ls, cfg)
    theirs = cupy_launch_times(ls, cfg) if peer else None

    def peer_of(key: str) -> Optional[float]:
        return theirs.get(key) if theirs else None

    eager_peer = "CuPy RawKernel, same PTX" if theirs else "-"
    graph_peer = "CuPy stream capture + Graph.launch" if theirs else "-"
    kernel = "add f32 n=%d" % N
    return ours, [
        make_row(
            "eager launch µs per kernel (%d x BoundLaunch() of %s, then one sync)" % (k, kernel),
            ours["eager"],
            peer_of("eager"),
            eager_peer,
            "<= %g" % LAUNCH_GOAL_US,
            ours["eager"] <= LAUNCH_GOAL_US,
            digits=3,
        ),
        make_row(
            "graph replay µs per node ((T_%d - T_1) / %d, launch + sync)" % (k, k - 1),
            ours["node"],
            peer_of("node"),
            graph_peer,
            "<= %g" % NODE_GOAL_US,
            ours["node"] <= NODE_GOAL_US,
            digits=3,
        ),
        make_row(
            "graph replay µs fixed (1-node graph, launch + sync)",
            ours["fixed"],
            peer_of("fixed"),
            graph_peer,
            "-",
            None,
            digits=3,
        ),
    ]


# --- 2b. whole plans: ExecutionPlan.execute() over the same kernels --------------------------------


def chain_plan_doc(k: int) -> Dict[str, Any]:
    """o_0 = x + b, o_j = o_{j-1} + b: K library ``add`` ops in K dependency levels (o_{K-1} = x + K)."""
    buffers: Dict[str, Any] = {
        "x": {"dtype": "float32", "shape": [N], "init": "arange"},
        "b": {"dtype": "float32", "shape": [N], "init": "ones"},
    }
    for j in range(k):
        buffers["o%d" % j] = {"dtype": "float32", "shape": [N], "output": j == k - 1}
    ops = [
        {"kernel": "add", "buffers": ["o%d" % j, "o%d" % (j - 1) if j else "x", "b"], "vars": {"n": N}}
        for j in range(k)
    ]
    return {
        "svod_plan": 1,
        "buffers": buffers,
        "kernels": {"add": {"library": "add", "params": {"dtype": "float32"}}},
        "ops": ops,
    }


def plan_replay_us(dev: cuda.CudaDevice, k: int, graphs: bool, cfg: Dict[str, int]) -> float:
    """µs per ``execute()`` + synchronize of the K-op chain plan, after checking its output."""
    from svod_min.planfile.load import load_plan

    plan = load_plan(chain_plan_doc(k), device=dev).plan
    if plan.set_graph_replay(graphs) != graphs:
        raise RuntimeError("the plan did not switch graph replay %s" % ("on" if graphs else "off"))
    plan.execute()
    got = list(array("f", plan.output_buffer().copyout()))
    if got != [float(i + k) for i in range(N)]:
        raise RuntimeError("plan of %d adds computed %s" % (k, got[:4]))
    replays = cfg["replays"]

    def run() -> None:
        for _ in range(replays):
            plan.execute()
            plan.synchronize()

    return best_us(run, replays, cfg["batches"])


def plan_rows(dev: cuda.CudaDevice, k: int, cfg: Dict[str, int], raw: Dict[str, float]) -> List[Dict[str, Any]]:
    """Per-kernel cost of a whole plan replay (graph and eager); the peer is the raw launch path measured above."""
    out = []
    for graphs, key, goal, label in (
        (True, "node", NODE_GOAL_US, "CUDA graphs"),
        (False, "eager", LAUNCH_GOAL_US, "eager"),
    ):
        t2, tk = plan_replay_us(dev, 2, graphs, cfg), plan_replay_us(dev, k, graphs, cfg)
        per = (tk - t2) / (k - 2)
        peer = "raw CudaGraph per node" if graphs else "raw BoundLaunch per kernel"
        out.append(
            make_row(
                "plan replay µs per kernel, %s ((T_%d - T_2) / %d of execute() + sync, %d-op chain)"
                % (label, k, k - 2, k),
                per,
                raw[key],
                peer,
                "<= %g" % goal,
                per <= goal,
                digits=3,
            )
        )
        out.append(info_row("plan replay µs fixed, %s (2-op plan, execute() + sync)" % label, t2))
    return out


# --- 3. bandwidth ------------------------------------------------------------------------------


class PinnedHost:
    """A ``cuMemHostAlloc`` block, freed with ``cuMemFreeHost`` on close."""

    def __init__(self, dev: cuda.CudaDevice, nbytes: int) -> None:
        self.dev, self.nbytes = dev, nbytes
        ptr = ctypes.c_void_p()
        dev.activate()
        dev.lib.call("cuMemHostAlloc", ctypes.byref(ptr), nbytes, 0)
        self.address: int = ptr.value or 0

    def close(self) -> None:
        if self.address:
            self.dev.activate()
            self.dev.lib.call("cuMemFreeHost", ctypes.c_void_p(self.address))
            self.address = 0


def copy_rates(dev: cuda.CudaDevice, nbytes: int, reps: int) -> Dict[str, float]:
    """GB/s of svod_min's copies and the raw driver copies, each proven to move the right bytes."""
    host = bytearray(bytes(range(256)) * (nbytes // 256))  # written: its pages are resident
    out = bytearray(nbytes)
    buf = dev.allocate(nbytes)
    pinned = PinnedHost(dev, nbytes)
    lib, address = dev.lib, buf.address
    try:
        buf.copyin(host)
        if buf.copyout_into(out) != host:
            raise RuntimeError("copyin / copyout_into did not round-trip")
        dev.activate()
        ctypes.memset(pinned.address, 0, nbytes)
        lib.call("cuMemcpyDtoH_v2", pinned.address, address, nbytes)
        if ctypes.string_at(pinned.address, nbytes) != host:
            raise RuntimeError("raw cuMemcpyDtoH_v2 returned the wrong bytes")
        buf.copyin(bytes(nbytes))
        dev.synchronize()  # copyin is queued on svod_min's non-blocking stream; a plain cuMemcpy does not wait for it
        lib.call("cuMemcpyHtoD_v2", address, pinned.address, nbytes)
        if buf.copyout_into(out) != host:
            raise RuntimeError("raw cuMemcpyHtoD_v2 moved the wrong bytes")

        def svod_h2d() -> None:
            buf.copyin(host)
            dev.synchronize()  # copyin returns once the last chunk is queued

        def raw_h2d() -> None:  # synchronous for pinned memory
            lib.call("cuMemcpyHtoD_v2", address, pinned.address, nbytes)

        def raw_d2h() -> None:
            lib.call("cuMemcpyDtoH_v2", pinned.address, address, nbytes)

        # the driver's own path for the same pageable buffers (it stages internally)
        host_ptr = ctypes.addressof((ctypes.c_char * nbytes).from_buffer(host))
        out_ptr = ctypes.addressof((ctypes.c_char * nbytes).from_buffer(out))

        def pageable_h2d() -> None:
            lib.call("cuMemcpyHtoD_v2", address, host_ptr, nbytes)

        def pageable_d2h() -> None:
            lib.call("cuMemcpyDtoH_v2", out_ptr, address, nbytes)

        times = paired_median_s(
            {
                "svod_h2d": svod_h2d,
                "raw_h2d": raw_h2d,
                "pageable_h2d": pageable_h2d,
                "svod_d2h": lambda: buf.copyout_into(out),
                "raw_d2h": raw_d2h,
                "pageable_d2h": pageable_d2h,
            },
            reps,
        )
        if out != host:
            raise RuntimeError("a timed device -> host copy returned the wrong bytes")
    finally:
        pinned.close()
    return {k: nbytes / s / 1e9 for k, s in times.items()}


def copy_rows(
    dev: cuda.CudaDevice, cfg: Dict[str, int], chunk_mib: Optional[int], copy_threads: Optional[int] = None
) -> List[Dict[str, Any]]:
    pool = dev.staging
    old_chunk, old_threads = pool.chunk, pool.threads
    if chunk_mib:
        pool.release()  # blocks are allocated at the chunk size: drop them
        pool.chunk = chunk_mib << 20
    if copy_threads:
        pool.threads = copy_threads
    try:
        rates = copy_rates(dev, cfg["copy_mib"] << 20, cfg["copy_reps"])
        staging = "pinned staging 2 x %g MiB, %d host thread(s)" % (pool.chunk / (1 << 20), pool.threads)
    finally:
        pool.threads = old_threads
        if pool.chunk != old_chunk:
            pool.release()
            pool.chunk = old_chunk
    size = "%d MiB" % cfg["copy_mib"]
    return [
        rate_row(
            "H2D GB/s, %s: copyin(pageable) + sync, %s" % (size, staging),
            rates["svod_h2d"],
            rates["raw_h2d"],
            "cuMemcpyHtoD_v2 from cuMemHostAlloc memory",
        ),
        rate_row(
            "D2H GB/s, %s: copyout_into(pageable), %s" % (size, staging),
            rates["svod_d2h"],
            rates["raw_d2h"],
            "cuMemcpyDtoH_v2 into cuMemHostAlloc memory",
        ),
        rate_row(
            "H2D GB/s, %s: copyin(pageable) + sync vs the driver's pageable copy" % size,
            rates["svod_h2d"],
            rates["pageable_h2d"],
            "cuMemcpyHtoD_v2 from the same pageable buffer",
        ),
        rate_row(
            "D2H GB/s, %s: copyout_into(pageable) vs the driver's pageable copy" % size,
            rates["svod_d2h"],
            rates["pageable_d2h"],
            "cuMemcpyDtoH_v2 into the same pageable buffer",
        ),
    ]


# --- the table ---------------------------------------------------------------------------------


def rows(
    quick: bool = False,
    kernels: int = 100,
    copy_mib: Optional[int] = None,
    chunk_mib: Optional[int] = None,
    peer: bool = True,
    cold: bool = True,
    copy_threads: Optional[int] = None,
) -> List[Dict[str, Any]]:
    """Every CUDA measurement as table rows (also used by ``python -m svod_min bench``)."""
    if kernels < 2:
        raise ValueError("kernels must be >= 2 (per node = (T_K - T_1) / (K - 1); plan rows need 3)")
    dev, why = open_device()
    if dev is None:
        return [empty_row("CUDA: not available (%s)" % why)]
    cfg = settings(quick)
    if copy_mib:
        cfg["copy_mib"] = copy_mib
    note("%s, %s, driver %s" % (dev.info.name, dev.arch, dev.driver.version_string))
    out = module_rows(dev, cfg, cold)  # first: it times the first load of the module in this process
    raw, launches = launch_rows(dev, kernels, cfg, peer)
    out += launches
    out += plan_rows(dev, kernels, cfg, raw) if kernels > 2 else []
    out += copy_rows(dev, cfg, chunk_mib, copy_threads)
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 8 MiB copies")
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    parser.add_argument("--kernels", type=int, default=100, help="kernels per batch / graph nodes (default 100)")
    parser.add_argument("--copy-mib", type=int, default=None, help="copy size in MiB (default 64, quick 8)")
    parser.add_argument("--chunk-mib", type=int, default=None, help="StagingPool.chunk in MiB for this run")
    parser.add_argument(
        "--copy-threads",
        type=int,
        default=None,
        help="host threads per staged chunk for this run (default: SVOD_CUDA_COPY_THREADS or 1)",
    )
    parser.add_argument("--no-peer", action="store_true", help="skip the CuPy peers")
    parser.add_argument("--no-cold", action="store_true", help="skip the JIT-cache-off child process")
    parser.add_argument("--cold-child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cold_child is not None:
        print(json.dumps(cold_child(args.cold_child)))
        return 0
    if args.kernels < 2:
        parser.error("--kernels must be >= 2")
    table = rows(
        quick=args.quick,
        kernels=args.kernels,
        copy_mib=args.copy_mib,
        chunk_mib=args.chunk_mib,
        peer=not args.no_peer,
        cold=not args.no_cold,
        copy_threads=args.copy_threads,
    )
    print(json.dumps(table, indent=1) if args.json else format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
