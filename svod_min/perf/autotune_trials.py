"""The autotuner's measurements: candidates' inputs, their verification, and round-robin timing.

Inputs are allocated once with random data; every candidate runs once and
its outputs are checked - against a pure-Python reference on small
matmuls, otherwise against the outputs most candidates agree on (ties: the
earliest) - and a wrong candidate is marked, never timed. The survivors are
timed round-robin (:func:`svod_min.perf.benchmark.round_robin_min`) so none is
judged at a clock the others did not see. :mod:`svod_min.perf.autotune` picks
the candidates and the winner.
"""

from __future__ import annotations

import math
import random
import statistics
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..dtypes import dtype as to_dtype
from ..dtypes import pack_values, unpack_values
from ..error import KernelParamError
from ..kernels.sig import compile_expr
from .benchmark import BenchmarkConfig, flush_caches, round_robin_min, warm_clock, warmup_thread_pool

#: The pure-Python matmul reference is used up to this many multiply-adds.
REFERENCE_MAX_WORK = 1 << 18
#: Allowed difference between two results, relative to the largest |value| (ints: exact).
REL_TOL = {"float64": 1e-9, "float32": 1e-3, "float16": 3e-2, "bfloat16": 3e-2}
#: Random inputs repeat with this period (a prime, so rows and columns do not line up).
DATA_PERIOD = 65521
#: Largest total buffer size a tuning run allocates (it also keeps a host copy of each buffer).
MAX_TUNE_BYTES = 1 << 31


@dataclass
class TuneRow:
    """One candidate: its tuning params, timings (None when dropped) and what happened."""

    params: Dict[str, Any]
    entry_point: str = ""
    prebuilt: bool = False
    status: str = "ok"  # "ok", "wrong result: ...", "failed: ...", "skipped: ..."
    min_s: Optional[float] = None
    median_s: Optional[float] = None
    gflops: Optional[float] = None
    chosen: bool = False

    def to_dict(self) -> Dict[str, Any]:
        return dict(self.__dict__)


@dataclass(eq=False)
class Candidate:
    """One candidate being measured: its row, kernel, bound call, timings and outputs."""

    row: TuneRow
    kernel: Any = None  # LibraryKernel
    call: Optional[Callable[[], None]] = None
    times: List[float] = field(default_factory=list)
    outputs: Dict[str, bytes] = field(default_factory=dict)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --- data and verification ----------------------------------------------------------------


def _random_values(dtype: str, rng: random.Random, count: int) -> List[Any]:
    if dtype == "bool":
        return [rng.random() < 0.5 for _ in range(count)]
    if dtype in REL_TOL:
        return [rng.uniform(0.5, 1.5) for _ in range(count)]  # positive: log / sqrt / div stay finite
    return [rng.randint(1, 9) for _ in range(count)]


def allocate(sig: Any, env: Mapping[str, int], device: Any) -> Tuple[Dict[str, Any], Dict[str, bytes]]:
    """One buffer per argument, filled with random data once; returns buffers and their initial bytes."""
    counts = {arg.name: max(1, compile_expr(arg.count)(env)) for arg in sig.buffers}
    need = sum(counts[arg.name] * to_dtype(arg.dtype).itemsize for arg in sig.buffers)
    if need > MAX_TUNE_BYTES:  # each buffer is held twice (device + its initial bytes for restores)
        raise KernelParamError(
            "%s with %s needs %d bytes of buffers; tuning is limited to %d (tune a smaller "
            "shape of the same kind)" % (sig.name, dict(env), need, MAX_TUNE_BYTES)
        )
    rng = random.Random(0x5EED)
    bufs, initial = {}, {}
    try:
        for arg in sig.buffers:
            dt, count = to_dtype(arg.dtype), counts[arg.name]
            period = min(count, DATA_PERIOD)
            block = pack_values(dt, _random_values(dt.name, rng, period))
            data = block * (count // period) + block[: (count % period) * dt.itemsize]
            bufs[arg.name] = device.allocate(count * dt.itemsize, dt.name).copyin(data)
            initial[arg.name] = data
    except MemoryError:
        raise KernelParamError(
            "%s with %s: not enough memory for %d bytes of buffers" % (sig.name, dict(env), need)
        ) from None
    return bufs, initial


def _restore(bufs: Mapping[str, Any], initial: Mapping[str, bytes]) -> None:
    for name, buf in bufs.items():
        buf.copyin(initial[name])


def _values(dtype: str, raw: bytes) -> List[Any]:
    return unpack_values(to_dtype(dtype), raw)


def _mismatch(dtype: str, got: Sequence[Any], want: Sequence[Any]) -> Optional[str]:
    """None when ``got`` matches ``want`` within the dtype's tolerance, else why not."""
    if dtype not in REL_TOL:
        bad = sum(1 for g, w in zip(got, want) if g != w)
        return "%d of %d elements differ" % (bad, len(want)) if bad else None
    scale = max((abs(w) for w in want if math.isfinite(w)), default=0.0)
    tol = REL_TOL[dtype] * max(1.0, scale)
    worst = 0.0
    for g, w in zip(got, want):
        if math.isnan(g) or math.isnan(w) or math.isinf(g) or math.isinf(w):
            if not (g == w or (math.isnan(g) and math.isnan(w))):
                return "non-finite value differs (%r vs %r)" % (g, w)
            continue
        worst = max(worst, abs(g - w))
    return "max |err| %.3g > %.3g" % (worst, tol) if worst > tol else None


def _compare(sig: Any, got: Mapping[str, bytes], want: Mapping[str, Any]) -> Optional[str]:
    """``want`` holds bytes (another candidate) or value lists (the pure reference)."""
    for arg in sig.buffers:
        if arg.name not in want:
            continue
        expect = want[arg.name]
        if isinstance(expect, bytes) and expect == got[arg.name]:
            continue
        ref = _values(arg.dtype, expect) if isinstance(expect, bytes) else expect
        why = _mismatch(arg.dtype, _values(arg.dtype, got[arg.name])[: len(ref)], ref)
        if why:
            return "%s: %s" % (arg.name, why)
    return None


def _matmul_reference(inputs: Mapping[str, bytes], env: Mapping[str, int], sig: Any) -> Dict[str, List[float]]:
    m, n, k = env["M"], env["N"], env["K"]
    dt = {b.name: b.dtype for b in sig.buffers}
    a = _values(dt["a"], inputs["a"])[: m * k]
    b = _values(dt["b"], inputs["b"])[: k * n]
    cols = [b[j::n] for j in range(n)]
    return {"c": [sum(x * y for x, y in zip(a[i * k : (i + 1) * k], col)) for i in range(m) for col in cols]}


#: Pure-Python references by kernel name: (initial input bytes, variables, sig) -> expected outputs
REFERENCES: Dict[str, Callable[..., Dict[str, List[float]]]] = {"matmul": _matmul_reference}


def _reference(name: str, sig: Any, env: Mapping[str, int], initial: Mapping[str, bytes]) -> Optional[Dict[str, Any]]:
    fn = REFERENCES.get(name)
    if fn is None or compile_expr(sig.work)(env) > REFERENCE_MAX_WORK:
        return None
    return fn(initial, env, sig)


def _run_once(cand: Candidate, bufs: Mapping[str, Any], initial: Mapping[str, bytes]) -> None:
    """Run on fresh inputs and keep the written buffers' bytes."""
    _restore(bufs, initial)
    try:
        assert cand.call is not None
        cand.call()
    except Exception as exc:  # a failing candidate is data, not a crash
        cand.row.status = "failed: %s" % first_line(exc)
        return
    cand.outputs = {b.name: bufs[b.name].copyout() for b in cand.kernel.sig.buffers if b.writes}


def _judge(cands: List[Candidate], reference: Optional[Dict[str, Any]]) -> None:
    """Mark every candidate whose outputs are wrong: vs ``reference``, else vs the largest agreeing group."""
    live = [c for c in cands if c.row.status == "ok"]
    if reference is None and live:
        groups: List[List[Candidate]] = []
        for c in live:
            home = next((g for g in groups if _compare(c.kernel.sig, c.outputs, g[0].outputs) is None), None)
            if home is None:
                groups.append([c])
            else:
                home.append(c)
        reference = max(groups, key=len)[0].outputs  # max keeps the first of equal sizes
    for c in live:
        why = _compare(c.kernel.sig, c.outputs, reference)
        if why:
            c.row.status = "wrong result: %s" % why


# --- timing ---------------------------------------------------------------------------------


def _timer(cand: Candidate, flush: bool) -> Callable[[], float]:
    call, times = cand.call, cand.times
    assert call is not None

    def timed() -> float:
        if flush:
            flush_caches()
        start = time.perf_counter()
        call()
        elapsed = time.perf_counter() - start
        times.append(elapsed)
        return elapsed

    return timed


def warm_up(cands: List[Candidate], config: BenchmarkConfig) -> None:
    if cands:
        warmup_thread_pool(cands[0].kernel.program.device)
    for c in cands:
        try:
            for _ in range(config.warmup_runs):
                c.call()  # type: ignore[misc]
        except Exception as exc:  # a failing candidate is data, not a crash
            c.row.status = "failed: %s" % first_line(exc)
    budget = config.clock_budget
    live = [c for c in cands if c.row.status == "ok"]
    if budget is not None and live:
        call = live[0].call
        assert call is not None
        warm_clock(lambda: _wall(call), budget)


def _wall(call: Callable[[], None]) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def time_all(cands: List[Candidate], config: BenchmarkConfig, flops: float) -> None:
    live = [c for c in cands if c.row.status == "ok"]
    mins = round_robin_min([_timer(c, config.clear_l2) for c in live], config.timing_runs)
    for c, best in zip(live, mins):
        if best is None:
            c.row.status = "failed: error while timing"
            continue
        c.row.min_s, c.row.median_s = best, float(statistics.median(c.times or [best]))
        c.row.gflops = flops / best / 1e9 if flops > 0 and best > 0 else None


def score(c: Candidate, config: BenchmarkConfig) -> float:
    assert c.row.min_s is not None
    return c.row.min_s if config.take_minimum or not c.times else math.fsum(c.times) / len(c.times)


def verify_all(name: str, cands: List[Candidate], env: Dict[str, int], dev: Any, threads: Optional[int] = None) -> None:
    """Run every loaded candidate once on the same random inputs (at ``threads``, None: automatic) and mark
    the wrong ones."""
    live = [c for c in cands if c.kernel is not None]
    if live:
        sig = live[0].kernel.sig
        bufs, initial = allocate(sig, env, dev)
        for c in live:
            c.call = c.kernel.bind(bufs, threads=threads, **_user_vars(c.kernel.sig, env))
            _run_once(c, bufs, initial)
        _judge(cands, _reference(name, sig, env, initial))


def _user_vars(sig: Any, env: Mapping[str, int]) -> Dict[str, Any]:
    """The shape as ``bind`` takes it (f32 variables back as floats)."""
    out: Dict[str, Any] = {}
    for var in sig.vars:
        if var.name in env:
            v = env[var.name]
            out[var.name] = struct.unpack("<f", struct.pack("<i", v))[0] if var.kind == "f32" else v
    return out


__all__ = [
    "Candidate",
    "DATA_PERIOD",
    "MAX_TUNE_BYTES",
    "REFERENCES",
    "REFERENCE_MAX_WORK",
    "REL_TOL",
    "TuneRow",
    "allocate",
    "first_line",
    "score",
    "time_all",
    "verify_all",
    "warm_up",
]
