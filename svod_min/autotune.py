"""Autotuner: pick a library kernel's tuning parameters by measuring them on this machine.

    from svod_min import autotune, kernels
    result = autotune.tune("matmul", dtype="float32", shape={"M": 256, "N": 256, "K": 256})
    result.best_params                  # {"ku": 4, "mr": 6, "nr": 16}, now stored on disk
    kernels.get("matmul", dtype="float32", shape={"M": 256, "N": 256, "K": 256})  # uses it

Candidates are the catalogue's instances of the kernel for the dtype that
differ only in tuning parameters (matmul: ``mr`` x ``nr`` x ``ku``): the ones
this host has prebuilt first, then those that need a compile (skipped, not
fatal, when there is no C compiler). Inputs are allocated once with random
data; every candidate runs once and its outputs are checked - against a
pure-Python reference on small matmuls, otherwise against the outputs most
candidates agree on (ties: the earliest) - and a wrong candidate is dropped
and reported, never chosen. The survivors are timed round-robin
(:func:`svod_min.benchmark.round_robin_min`) so none is judged at a clock the
others did not see.

The winner is kept in one JSON file, ``tuning.json`` next to the object
cache directory (``SVOD_TUNING_FILE`` overrides), keyed by kernel, dtype,
shape and machine (arch, CPU model, prebuilt variant, svod_min version).
Writes are atomic (temp file + ``os.replace``); a missing, unreadable,
corrupt or read-only store is ignored (debug log), never an error.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import random
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .benchmark import BenchmarkConfig, flush_caches, round_robin_min, warm_clock, warmup_thread_pool
from .error import CompilationError, ExecutionError, SvodError
from .error import KernelParamError

log = logging.getLogger("svod_min.autotune")

STORE_FORMAT = 1
STORE_NAME = "tuning.json"
TUNING_FILE_ENV = "SVOD_TUNING_FILE"
#: Parameters that select data types, never tuning.
DTYPE_PARAMS = ("dtype", "out_dtype")
#: The pure-Python matmul reference is used up to this many multiply-adds.
REFERENCE_MAX_WORK = 1 << 18
#: Allowed difference between two results, relative to the largest |value| (ints: exact).
REL_TOL = {"float64": 1e-9, "float32": 1e-3, "float16": 3e-2, "bfloat16": 3e-2}
#: Random inputs repeat with this period (a prime, so rows and columns do not line up).
DATA_PERIOD = 65521
#: Largest total buffer size a tuning run allocates (it also keeps a host copy of each buffer).
MAX_TUNE_BYTES = 1 << 31

Progress = Callable[[str], None]


# --- results ----------------------------------------------------------------------------


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


@dataclass
class TuneResult:
    """The outcome of :func:`tune`: the winner and one row per candidate."""

    kernel: str
    dtype: str
    shape: Dict[str, Any]
    machine: Dict[str, str]
    best_params: Dict[str, Any]
    rows: List[TuneRow] = field(default_factory=list)
    stored: bool = False
    store_path: Optional[str] = None

    @property
    def table(self) -> List[Tuple[Dict[str, Any], Optional[float], Optional[float], Optional[float]]]:
        """``(params, min_s, median_s, gflops)`` per candidate (None timings: dropped)."""
        return [(r.params, r.min_s, r.median_s, r.gflops) for r in self.rows]

    @property
    def dropped(self) -> List[TuneRow]:
        return [r for r in self.rows if r.status != "ok"]

    def to_dict(self) -> Dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "rows"}
        out["rows"] = [r.to_dict() for r in self.rows]
        return out


# --- machine fingerprint -------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (x86 ``model name``; arm implementer/part), or "unknown"."""
    found: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                key = key.strip().lower()
                if sep and key not in found:
                    found[key] = " ".join(value.split())
    except OSError:
        pass
    if found.get("model name"):
        return found["model name"]
    parts = ["%s %s" % (k, found[k]) for k in ("hardware", "cpu implementer", "cpu part") if found.get(k)]
    return ", ".join(parts) or "unknown"


#: "This host's prebuilt variant" (``None`` is a variant value: kernels are compiled).
HOST: Any = object()


def _variant(variant: Any) -> Optional[str]:
    from .kernels import host_variant

    return host_variant() if variant is HOST else variant


def machine_fingerprint(variant: Any = HOST) -> Dict[str, str]:
    """What a tuning result is valid for: arch, CPU model, prebuilt variant, svod_min version."""
    from . import __version__
    from .clang import host_arch

    return {"arch": host_arch(), "cpu": cpu_model(), "variant": _variant(variant) or "compiled",
            "svod_min": __version__}  # fmt: skip


# --- the store ------------------------------------------------------------------------------

_store_lock = threading.Lock()
_store_memo: Dict[str, Tuple[Tuple[int, int, int], Dict[str, Any]]] = {}


def store_path() -> Optional[str]:
    """``SVOD_TUNING_FILE``, else ``tuning.json`` beside the object cache directory (None: no home)."""
    explicit = os.environ.get(TUNING_FILE_ENV, "").strip()
    if explicit:
        return os.path.abspath(explicit)
    from .kernel_cache import default_cache_dir

    objects = default_cache_dir()
    if not objects:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(objects).rstrip(os.sep)) or os.sep, STORE_NAME)


def _read_store(path: str) -> Dict[str, Any]:
    """The store's entries (empty when missing, unreadable or corrupt); parsed once per file version."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    memo = _store_memo.get(path)
    if memo is not None and memo[0] == stamp:
        return memo[1]
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, RecursionError) as exc:
        log.debug("tuning store %s ignored: %s", path, exc)
        return {}
    entries = doc.get("entries") if isinstance(doc, dict) and doc.get("format") == STORE_FORMAT else None
    if not isinstance(entries, dict):
        log.debug("tuning store %s ignored: not a format-%d tuning store", path, STORE_FORMAT)
        entries = {}
    _store_memo[path] = (stamp, entries)
    return entries


def _write_store(path: str, key: str, entry: Dict[str, Any]) -> bool:
    """Add one entry (re-reading the file first); False when the store cannot be written."""
    with _store_lock:
        entries = dict(_read_store(path))
        entries[key] = entry
        text = json.dumps({"format": STORE_FORMAT, "entries": entries}, indent=1, sort_keys=True) + "\n"
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".part", dir=directory)
        except OSError as exc:
            log.debug("tuning store %s not written: %s", path, exc)
            return False
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
            return True
        except OSError as exc:
            log.debug("tuning store %s not written: %s", path, exc)
            _unlink_quiet(tmp)
            return False


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _shape_dict(shape: Any) -> Dict[str, Any]:
    """``shape`` as ``{name: int or float}``; KernelParamError when it is not such a mapping."""
    if not isinstance(shape, Mapping):
        raise KernelParamError("shape must be a mapping of variable names to numbers, got %r" % (shape,))
    out: Dict[str, Any] = {}
    for k, v in shape.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, (int, float)) and not hasattr(
                v, "__index__"):
            raise KernelParamError("shape entry %r=%r: expected a variable name and a number" % (k, v))
        out[k] = v if isinstance(v, (int, float)) else int(v.__index__())  # numpy ints as ints
    return out


def _key(name: str, dtype: str, shape: Mapping[str, Any], machine: Mapping[str, str]) -> str:
    dims = ",".join("%s=%s" % kv for kv in sorted(shape.items()))
    where = "|".join(machine[k] for k in ("arch", "cpu", "variant", "svod_min"))
    return "%s|%s|%s|%s" % (name, dtype, dims, where)


def _dtype_name(dtype: Any) -> str:
    from .kernels.elementwise import c_dtype

    return c_dtype(dtype).name


def best_params(name: str, dtype: Any, shape: Mapping[str, Any], variant: Any = HOST) -> Optional[Dict[str, Any]]:
    """The stored winner's tuning params for this kernel, dtype, shape and machine (None: not tuned)."""
    path = store_path()
    if path is None:
        return None
    key = _key(name, _dtype_name(dtype), _shape_dict(shape), machine_fingerprint(variant))
    entry = _read_store(path).get(key)
    params = entry.get("params") if isinstance(entry, dict) else None
    if not isinstance(params, dict) or not all(isinstance(v, (int, str, bool)) for v in params.values()):
        return None
    return dict(params)


def record(result: TuneResult) -> bool:
    """Store ``result``'s winner; False (never an error) when the store cannot be written."""
    path = store_path()
    if path is None or not result.best_params:
        return False
    best = next((r for r in result.rows if r.chosen), None)
    entry = {"kernel": result.kernel, "dtype": result.dtype, "shape": result.shape, "machine": result.machine,
             "params": result.best_params, "min_s": best.min_s if best else None,
             "gflops": best.gflops if best else None, "tuned_at": time.time()}  # fmt: skip
    return _write_store(path, _key(result.kernel, result.dtype, result.shape, result.machine), entry)


# --- automatic use (svod_min.kernels.get) --------------------------------------------------


def tuned_params(name: str, params: Mapping[str, Any], shape: Optional[Mapping[str, Any]],
                 prebuilt: Optional[bool] = None, variant: Any = HOST) -> Dict[str, Any]:
    """``params`` plus the stored tuning params for ``shape``, or ``params`` unchanged.

    Unchanged when ``shape`` is None, nothing is stored, the caller gave any
    tuning parameter, or the stored instance cannot be served here (no
    such instance any more, not prebuilt and no compiler, ``prebuilt=True``).
    ``variant``: the prebuilt variant ``get`` uses (default: this host's).
    """
    out = dict(params)
    variant = _variant(variant)
    if shape is None:
        return out
    shape = _shape_dict(shape)
    try:
        from .kernels import _gen

        default = _gen().CATALOGUE[name]["params"].get("dtype", {}).get("default", "float32")
        best = best_params(name, params.get("dtype", default), shape, variant)
    except (KeyError, TypeError, SvodError) as exc:  # bad name / dtype: get() reports it
        log.debug("no tuned params for %s: %s", name, exc)
        return out
    if not best or set(best) & set(params):
        return out
    merged = dict(out, **best)
    return merged if _servable(name, merged, prebuilt, variant) else out


def _servable(name: str, params: Mapping[str, Any], prebuilt: Optional[bool], variant: Optional[str]) -> bool:
    from .kernels import find_sig

    try:
        sig = find_sig(name, variant, **params)
    except SvodError as exc:
        log.debug("stored tuning of %s ignored: %s", name, exc)
        return False
    if _prebuilt_here(sig, prebuilt, variant):
        return True
    return prebuilt is not True and have_compiler()


def _prebuilt_here(sig: Any, prebuilt: Optional[bool] = None, variant: Any = HOST) -> bool:
    """True when ``get`` would serve ``sig`` from this host's prebuilt object."""
    from .kernels import _use_prebuilt
    from .kernels.variants import has_entry

    variant = _variant(variant)
    return _use_prebuilt(prebuilt) and variant is not None and has_entry(variant, sig.entry)


def have_compiler() -> bool:
    """Whether a C compiler is available (kernels that are not prebuilt need one)."""
    from .clang import find_compiler

    try:
        find_compiler()
        return True
    except CompilationError:
        return False


# --- candidates ---------------------------------------------------------------------------


def _layout(sig: Any) -> Tuple[Any, ...]:
    return tuple((b.name, b.dtype, b.role, b.count) for b in sig.buffers), sig.var_names


def tuning_params(name: str) -> List[str]:
    """Parameters of ``name`` that only tune: not dtypes, and never changing buffers or variables."""
    from .kernels import catalogue, find_sig

    find_sig(name)  # KernelNotFoundError for an unknown name
    info = catalogue()[name]
    keys = [k for k in sorted(info["params"]) if k not in DTYPE_PARAMS]
    sigs = [(inst, _layout(find_sig(name, **inst))) for inst in info["instances"]]
    return [k for k in keys if not _structural(k, sigs)]


def _structural(key: str, sigs: Sequence[Tuple[Dict[str, Any], Any]]) -> bool:
    seen: Dict[Tuple[Any, ...], Any] = {}
    for inst, layout in sigs:
        rest = tuple(sorted((k, v) for k, v in inst.items() if k != key))
        if seen.setdefault(rest, layout) != layout:
            return True
    return False


def _base_sig(name: str, dtype: str) -> Any:
    """The signature ``get(name, dtype=dtype)`` uses, else the first instance of that dtype."""
    from .kernels import catalogue, find_sig, host_variant
    from .error import KernelNotFoundError

    try:
        return find_sig(name, host_variant(), dtype=dtype)
    except KernelNotFoundError:
        raise
    except KernelParamError:  # no preferred tile for this host (kernels are compiled here)
        insts = [i for i in catalogue()[name]["instances"] if i.get("dtype") == dtype]
        if not insts:
            raise
        return find_sig(name, **insts[0])


def candidate_params(name: str, dtype: Any = "float32") -> List[Dict[str, Any]]:
    """The default candidates: instances for ``dtype`` differing only in tuning params.

    Order: what ``get`` uses by default, other prebuilt ones, then those that need a compile.
    """
    from .kernels import catalogue, find_sig

    dtype = _dtype_name(dtype)
    tun = tuning_params(name)
    default = _base_sig(name, dtype)
    fixed = {k: v for k, v in default.param_dict.items() if k not in tun}
    ranked = []
    for i, inst in enumerate(catalogue()[name]["instances"]):
        if any(inst.get(k) != v for k, v in fixed.items()):
            continue
        sig = find_sig(name, **inst)
        ranked.append(((sig.entry != default.entry, not _prebuilt_here(sig), i), {k: inst[k] for k in tun}))
    return [p for _, p in sorted(ranked, key=lambda r: r[0])]


@dataclass(eq=False)
class _Candidate:
    row: TuneRow
    kernel: Any = None  # LibraryKernel
    call: Optional[Callable[[], None]] = None
    times: List[float] = field(default_factory=list)
    outputs: Dict[str, bytes] = field(default_factory=dict)


def _load(name: str, dtype: str, params: Mapping[str, Any], device: Any) -> Any:
    """The LibraryKernel of one candidate (a seam for tests)."""
    from .kernels import get

    return get(name, device=device, dtype=dtype, **params)


def _prepare(name: str, dtype: str, params: Dict[str, Any], tun: Sequence[str], device: Any) -> _Candidate:
    from .kernels import find_sig, host_variant

    sig = find_sig(name, host_variant(), dtype=dtype, **params)  # bad candidates are the caller's error
    full = {k: v for k, v in sig.params if k in tun}  # partial candidates as get() completes them
    row = TuneRow(params=full, entry_point=sig.entry, prebuilt=_prebuilt_here(sig))
    cand = _Candidate(row)
    if not row.prebuilt and not have_compiler():
        row.status = "skipped: not prebuilt here and no C compiler"
        return cand
    try:
        cand.kernel = _load(name, dtype, full, device)
    except SvodError as exc:
        row.status = "failed: %s" % _first_line(exc)
    return cand


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _candidate_list(name: str, dtype: str, tun: Sequence[str],
                    candidates: Optional[Sequence[Mapping[str, Any]]]) -> List[Dict[str, Any]]:
    if candidates is None:
        return candidate_params(name, dtype)
    out: List[Dict[str, Any]] = []
    for c in candidates:
        if not isinstance(c, Mapping) or set(c) - set(tun):
            raise KernelParamError("%s: a candidate is a mapping of tuning params %s, got %r" % (name, list(tun), c))
        if dict(c) not in out:
            out.append(dict(c))
    if not out:
        raise KernelParamError("%s: no candidates given" % name)
    return out


def _unique(cands: List[_Candidate]) -> List[_Candidate]:
    seen: Dict[str, _Candidate] = {}
    for c in cands:
        seen.setdefault(c.row.entry_point, c)
    return list(seen.values())


# --- data and verification ----------------------------------------------------------------


def _random_values(dtype: str, rng: random.Random, count: int) -> List[Any]:
    if dtype == "bool":
        return [rng.random() < 0.5 for _ in range(count)]
    if dtype in REL_TOL:
        return [rng.uniform(0.5, 1.5) for _ in range(count)]  # positive: log / sqrt / div stay finite
    return [rng.randint(1, 9) for _ in range(count)]


def _allocate(sig: Any, env: Mapping[str, int], device: Any) -> Tuple[Dict[str, Any], Dict[str, bytes]]:
    """One buffer per argument, filled with random data once; returns buffers and their initial bytes."""
    from .dtypes import dtype as to_dtype, pack_values
    from .kernels.sig import compile_expr

    counts = {arg.name: max(1, compile_expr(arg.count)(env)) for arg in sig.buffers}
    need = sum(counts[arg.name] * to_dtype(arg.dtype).itemsize for arg in sig.buffers)
    if need > MAX_TUNE_BYTES:  # each buffer is held twice (device + its initial bytes for restores)
        raise KernelParamError("%s with %s needs %d bytes of buffers; tuning is limited to %d (tune a smaller "
                               "shape of the same kind)" % (sig.name, dict(env), need, MAX_TUNE_BYTES))  # fmt: skip
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
        raise KernelParamError("%s with %s: not enough memory for %d bytes of buffers" % (sig.name, dict(env), need)) from None
    return bufs, initial


def _restore(bufs: Mapping[str, Any], initial: Mapping[str, bytes]) -> None:
    for name, buf in bufs.items():
        buf.copyin(initial[name])


def _values(dtype: str, raw: bytes) -> List[Any]:
    from .dtypes import dtype as to_dtype, unpack_values

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
    return {"c": [sum(x * y for x, y in zip(a[i * k:(i + 1) * k], col)) for i in range(m) for col in cols]}


#: Pure-Python references by kernel name: (initial input bytes, variables, sig) -> expected outputs
REFERENCES: Dict[str, Callable[..., Dict[str, List[float]]]] = {"matmul": _matmul_reference}


def _reference(name: str, sig: Any, env: Mapping[str, int], initial: Mapping[str, bytes]) -> Optional[Dict[str, Any]]:
    from .kernels.sig import compile_expr

    fn = REFERENCES.get(name)
    if fn is None or compile_expr(sig.work)(env) > REFERENCE_MAX_WORK:
        return None
    return fn(initial, env, sig)


def _run_once(cand: _Candidate, bufs: Mapping[str, Any], initial: Mapping[str, bytes]) -> None:
    """Run on fresh inputs and keep the written buffers' bytes."""
    _restore(bufs, initial)
    try:
        assert cand.call is not None
        cand.call()
    except Exception as exc:  # a failing candidate is data, not a crash
        cand.row.status = "failed: %s" % _first_line(exc)
        return
    cand.outputs = {b.name: bufs[b.name].copyout() for b in cand.kernel.sig.buffers if b.writes}


def _judge(cands: List[_Candidate], reference: Optional[Dict[str, Any]]) -> None:
    """Mark every candidate whose outputs are wrong: vs ``reference``, else vs the largest agreeing group."""
    live = [c for c in cands if c.row.status == "ok"]
    if reference is None and live:
        groups: List[List[_Candidate]] = []
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


def _timer(cand: _Candidate, flush: bool) -> Callable[[], float]:
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


def _warm_up(cands: List[_Candidate], config: BenchmarkConfig) -> None:
    if cands:
        warmup_thread_pool(cands[0].kernel.program.device)
    for c in cands:
        try:
            for _ in range(config.warmup_runs):
                c.call()  # type: ignore[misc]
        except Exception as exc:  # a failing candidate is data, not a crash
            c.row.status = "failed: %s" % _first_line(exc)
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


def _time_all(cands: List[_Candidate], config: BenchmarkConfig, flops: float) -> None:
    live = [c for c in cands if c.row.status == "ok"]
    mins = round_robin_min([_timer(c, config.clear_l2) for c in live], config.timing_runs)
    for c, best in zip(live, mins):
        if best is None:
            c.row.status = "failed: error while timing"
            continue
        c.row.min_s, c.row.median_s = best, float(statistics.median(c.times or [best]))
        c.row.gflops = flops / best / 1e9 if flops > 0 and best > 0 else None


def _score(c: _Candidate, config: BenchmarkConfig) -> float:
    assert c.row.min_s is not None
    return c.row.min_s if config.take_minimum or not c.times else math.fsum(c.times) / len(c.times)


# --- tune -----------------------------------------------------------------------------------


def _check_shape(name: str, sig: Any, shape: Any) -> Tuple[Dict[str, Any], Dict[str, int]]:
    from .kernels import _check_vars
    from .kernels.sig import CORE_COUNT, CORE_ID

    shape = _shape_dict(shape)
    want = [v for v in sig.var_names if v not in (CORE_COUNT, CORE_ID)]
    if sorted(shape) != sorted(want):
        raise KernelParamError("%s: shape needs exactly the variables %s, got %s" % (name, want, sorted(shape)))
    return shape, _check_vars(sig, shape)


def _say_row(say: Progress, i: int, total: int, row: TuneRow, what: str) -> None:
    origin = "prebuilt" if row.prebuilt else "compiled"
    say("[%d/%d] %s (%s): %s" % (i + 1, total, format_params(row.params), origin, what))


def tune(name: str, *, dtype: Any = "float32", shape: Mapping[str, Any],
         candidates: Optional[Sequence[Mapping[str, Any]]] = None, config: Optional[BenchmarkConfig] = None,
         progress: Optional[Progress] = None, device: Any = "CPU", store: bool = True) -> TuneResult:
    """Measure every candidate for ``shape`` (the kernel's variables), keep and return the fastest correct one.

    ``candidates``: tuning-param dicts (default :func:`candidate_params`).
    ``config``: warm-ups and timing rounds (default 1 and 5). ``progress``
    gets one line per event. ``store``: record the winner for ``get``.
    """
    from .kernels import _device
    from .kernels.sig import compile_expr

    config = config or BenchmarkConfig(warmup_runs=1, timing_runs=5)
    say = progress or (lambda line: None)
    dtype = _dtype_name(dtype)
    sig = _base_sig(name, dtype)
    shape, env = _check_shape(name, sig, shape)
    dev = _device(device)
    tun = tuning_params(name)
    cands = _unique([_prepare(name, dtype, p, tun, dev) for p in _candidate_list(name, dtype, tun, candidates)])
    _verify_all(name, cands, env, dev, say)
    _warm_up([c for c in cands if c.row.status == "ok"], config)
    if any(c.row.status == "ok" for c in cands):
        say("timing %d candidate(s), %d round(s)" % (sum(c.row.status == "ok" for c in cands), config.timing_runs))
    _time_all(cands, config, float(compile_expr(sig.flops)(env)))
    return _finish(name, dtype, shape, cands, config, say, store)


def _verify_all(name: str, cands: List[_Candidate], env: Dict[str, int], dev: Any, say: Progress) -> None:
    live = [c for c in cands if c.kernel is not None]
    if live:
        sig = live[0].kernel.sig
        bufs, initial = _allocate(sig, env, dev)
        for c in live:
            c.call = c.kernel.bind(bufs, **_user_vars(c.kernel.sig, env))
            _run_once(c, bufs, initial)
        _judge(cands, _reference(name, sig, env, initial))
    for i, c in enumerate(cands):
        _say_row(say, i, len(cands), c.row, "verified" if c.row.status == "ok" else c.row.status)


def _user_vars(sig: Any, env: Mapping[str, int]) -> Dict[str, Any]:
    """The shape as ``bind`` takes it (f32 variables back as floats)."""
    import struct

    out: Dict[str, Any] = {}
    for var in sig.vars:
        if var.name in env:
            v = env[var.name]
            out[var.name] = struct.unpack("<f", struct.pack("<i", v))[0] if var.kind == "f32" else v
    return out


def _finish(name: str, dtype: str, shape: Dict[str, Any], cands: List[_Candidate], config: BenchmarkConfig,
            say: Progress, store: bool) -> TuneResult:
    ok = [c for c in cands if c.row.status == "ok"]
    if not ok:
        reasons = "; ".join("%s: %s" % (format_params(c.row.params), c.row.status) for c in cands)
        raise ExecutionError("%s %s: no candidate could be timed (%s)" % (name, dtype, reasons))
    best = min(ok, key=lambda c: _score(c, config))
    best.row.chosen = True
    for i, c in enumerate(cands):
        if c.row.status == "ok":
            _say_row(say, i, len(cands), c.row, _timing_text(c.row))
    result = TuneResult(name, dtype, shape, machine_fingerprint(), dict(best.row.params), [c.row for c in cands],
                        store_path=store_path())  # fmt: skip
    if store:
        result.stored = record(result)
    return result


# --- formatting -----------------------------------------------------------------------------


def format_params(params: Mapping[str, Any]) -> str:
    return " ".join("%s=%s" % kv for kv in sorted(params.items())) or "(defaults)"


def _timing_text(row: TuneRow) -> str:
    assert row.min_s is not None and row.median_s is not None
    rate = ", %.1f GFLOP/s" % row.gflops if row.gflops is not None else ""
    return "min %.1f µs, median %.1f µs%s" % (row.min_s * 1e6, row.median_s * 1e6, rate)


def format_table(result: TuneResult) -> str:
    """The results table: params, min µs, median µs, GFLOP/s, chosen (or why dropped)."""
    dims = ",".join("%s=%s" % kv for kv in result.shape.items())
    head = [["params", "min µs", "median µs", "GFLOP/s", "chosen"]]
    body = [[format_params(r.params) + ("" if r.prebuilt else " (compiled)"),
             "%.1f" % (r.min_s * 1e6) if r.min_s is not None else "-",
             "%.1f" % (r.median_s * 1e6) if r.median_s is not None else "-",
             "%.1f" % r.gflops if r.gflops is not None else "-",
             "*" if r.chosen else ("" if r.status == "ok" else r.status)] for r in result.rows]  # fmt: skip
    widths = [max(len(row[i]) for row in head + body) for i in range(4)]
    lines = ["%s %s %s on %s (%s)" % (result.kernel, result.dtype, dims, result.machine["cpu"],
                                      result.machine["variant"])]  # fmt: skip
    for row in head + body:
        cells = [row[0].ljust(widths[0])] + [row[i].rjust(widths[i]) for i in (1, 2, 3)] + [row[4]]
        lines.append("  ".join(cells).rstrip())
    if not result.best_params:
        where = "%s has no tuning params: nothing to store" % result.kernel
    else:
        where = "%s %s" % ("stored in" if result.stored else "not stored:", result.store_path or "no store location")
    lines.append("best: %s (%s)" % (format_params(result.best_params), where))
    return "\n".join(lines)


__all__ = [
    "TuneResult",
    "TuneRow",
    "best_params",
    "candidate_params",
    "format_table",
    "machine_fingerprint",
    "record",
    "store_path",
    "tune",
    "tuned_params",
    "tuning_params",
]
