"""Autotuner: pick a library kernel's tuning parameters by measuring them on this machine.

    from svod_min import kernels
    from svod_min.perf import autotune
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
(:func:`svod_min.perf.benchmark.round_robin_min`) so none is judged at a clock the
others did not see.

The measuring lives in :mod:`svod_min.perf.autotune_trials`. The winner is kept
in the tuning store (:mod:`svod_min.kernels.tuning`: ``tuning.json`` under
the cache root, ``SVOD_TUNING_FILE`` overrides), keyed by
kernel, dtype, shape and machine; ``kernels.get(shape=...)`` reads it
without importing this module. The store's names are re-exported here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..error import ExecutionError, KernelNotFoundError, KernelParamError, SvodError
from ..kernels import catalogue, find_sig, get, host_variant
from ..kernels.checks import check_vars
from ..kernels.library import resolve_device
from ..kernels.sig import CORE_COUNT, CORE_ID, compile_expr
from ..kernels.tuning import (
    HOST,
    STORE_FORMAT,
    STORE_NAME,
    TUNING_FILE_ENV,
    best_params,
    cpu_model,
    dtype_name,
    have_compiler,
    machine_fingerprint,
    prebuilt_here,
    shape_dict,
    store_key,
    store_path,
    tuned_params,
    write_store,
)
from .autotune_trials import (
    DATA_PERIOD,
    MAX_TUNE_BYTES,
    REFERENCE_MAX_WORK,
    REFERENCES,
    REL_TOL,
    Candidate,
    TuneRow,
    first_line,
    score,
    time_all,
    verify_all,
    warm_up,
)
from .benchmark import BenchmarkConfig

#: Parameters that select data types, never tuning.
DTYPE_PARAMS = ("dtype", "out_dtype")

Progress = Callable[[str], None]


# --- results ----------------------------------------------------------------------------


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


def record(result: TuneResult) -> bool:
    """Store ``result``'s winner; False (never an error) when the store cannot be written."""
    path = store_path()
    if path is None or not result.best_params:
        return False
    best = next((r for r in result.rows if r.chosen), None)
    entry = {
        "kernel": result.kernel,
        "dtype": result.dtype,
        "shape": result.shape,
        "machine": result.machine,
        "params": result.best_params,
        "min_s": best.min_s if best else None,
        "gflops": best.gflops if best else None,
        "tuned_at": time.time(),
    }
    return write_store(path, store_key(result.kernel, result.dtype, result.shape, result.machine), entry)


# --- candidates ---------------------------------------------------------------------------


def _layout(sig: Any) -> Tuple[Any, ...]:
    return tuple((b.name, b.dtype, b.role, b.count) for b in sig.buffers), sig.var_names


def tuning_params(name: str) -> List[str]:
    """Parameters of ``name`` that only tune: not dtypes, and never changing buffers or variables."""
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


def _base_sig(name: str, dtype: str, fixed: Optional[Mapping[str, Any]] = None) -> Any:
    """The signature ``get(name, dtype=dtype, **fixed)`` uses, else the first such instance of that dtype."""
    fixed = dict(fixed or {})
    try:
        return find_sig(name, host_variant(), dtype=dtype, **fixed)
    except KernelNotFoundError:
        raise
    except KernelParamError:  # no preferred tile for this host (kernels are compiled here)
        insts = [
            i
            for i in catalogue()[name]["instances"]
            if i.get("dtype") == dtype and all(i.get(k) == v for k, v in fixed.items())
        ]
        if not insts:
            raise
        return find_sig(name, **insts[0])


def _fixed_params(name: str, params: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The non-tuning, non-dtype params a tuning run holds fixed (a plan op's act, bias...)."""
    fixed = {k: v for k, v in (params or {}).items() if k not in DTYPE_PARAMS}
    clash = sorted(set(fixed) & set(tuning_params(name)))
    if clash:
        raise KernelParamError("%s: params %s are what tuning chooses; give them as candidates" % (name, clash))
    return fixed


def candidate_params(
    name: str, dtype: Any = "float32", params: Optional[Mapping[str, Any]] = None
) -> List[Dict[str, Any]]:
    """The default candidates: instances for ``dtype`` (and the fixed ``params``) differing only in tuning params.

    Order: what ``get`` uses by default, other prebuilt ones, then those that need a compile.
    """
    dtype = dtype_name(dtype)
    tun = tuning_params(name)
    default = _base_sig(name, dtype, _fixed_params(name, params))
    fixed = {k: v for k, v in default.param_dict.items() if k not in tun}
    ranked = []
    for i, inst in enumerate(catalogue()[name]["instances"]):
        if any(inst.get(k) != v for k, v in fixed.items()):
            continue
        sig = find_sig(name, **inst)
        ranked.append(((sig.entry != default.entry, not prebuilt_here(sig), i), {k: inst[k] for k in tun}))
    return [p for _, p in sorted(ranked, key=lambda r: r[0])]


def _load(name: str, dtype: str, params: Mapping[str, Any], device: Any) -> Any:
    """The LibraryKernel of one candidate (a seam for tests)."""
    return get(name, device=device, dtype=dtype, **params)


def _prepare(
    name: str, dtype: str, params: Dict[str, Any], tun: Sequence[str], device: Any, fixed: Mapping[str, Any]
) -> Candidate:
    sig = find_sig(name, host_variant(), dtype=dtype, **fixed, **params)  # bad candidates are the caller's error
    full = {k: v for k, v in sig.params if k in tun}  # partial candidates as get() completes them
    row = TuneRow(params=full, entry_point=sig.entry, prebuilt=prebuilt_here(sig))
    cand = Candidate(row)
    if not row.prebuilt and not have_compiler():
        row.status = "skipped: not prebuilt here and no C compiler"
        return cand
    try:
        cand.kernel = _load(name, dtype, dict(fixed, **full), device)
    except SvodError as exc:
        row.status = "failed: %s" % first_line(exc)
    return cand


def _candidate_list(
    name: str,
    dtype: str,
    tun: Sequence[str],
    candidates: Optional[Sequence[Mapping[str, Any]]],
    fixed: Mapping[str, Any],
) -> List[Dict[str, Any]]:
    if candidates is None:
        return candidate_params(name, dtype, fixed)
    out: List[Dict[str, Any]] = []
    for c in candidates:
        if not isinstance(c, Mapping) or set(c) - set(tun):
            raise KernelParamError("%s: a candidate is a mapping of tuning params %s, got %r" % (name, list(tun), c))
        if dict(c) not in out:
            out.append(dict(c))
    if not out:
        raise KernelParamError("%s: no candidates given" % name)
    return out


def _unique(cands: List[Candidate]) -> List[Candidate]:
    seen: Dict[str, Candidate] = {}
    for c in cands:
        seen.setdefault(c.row.entry_point, c)
    return list(seen.values())


# --- tune -----------------------------------------------------------------------------------


def _check_shape(name: str, sig: Any, shape: Any) -> Tuple[Dict[str, Any], Dict[str, int]]:
    shape = shape_dict(shape)
    want = [v for v in sig.var_names if v not in (CORE_COUNT, CORE_ID)]
    if sorted(shape) != sorted(want):
        raise KernelParamError("%s: shape needs exactly the variables %s, got %s" % (name, want, sorted(shape)))
    return shape, check_vars(sig, shape)


def _say_row(say: Progress, i: int, total: int, row: TuneRow, what: str) -> None:
    origin = "prebuilt" if row.prebuilt else "compiled"
    say("[%d/%d] %s (%s): %s" % (i + 1, total, format_params(row.params), origin, what))


def tune(
    name: str,
    *,
    dtype: Any = "float32",
    shape: Mapping[str, Any],
    candidates: Optional[Sequence[Mapping[str, Any]]] = None,
    config: Optional[BenchmarkConfig] = None,
    progress: Optional[Progress] = None,
    device: Any = "CPU",
    store: bool = True,
    params: Optional[Mapping[str, Any]] = None,
    threads: Optional[int] = None,
) -> TuneResult:
    """Measure every candidate for ``shape`` (the kernel's variables), keep and return the fastest correct one.

    ``candidates``: tuning-param dicts (default :func:`candidate_params`).
    ``config``: warm-ups and timing rounds (default 1 and 5). ``progress``
    gets one line per event. ``store``: record the winner for ``get``.
    ``params``: the kernel's other params, held fixed (e.g. a plan op's ``act``, ``bias``, ``packed``); the
    store's key does not hold them (``get(shape=...)`` serves the winner for any of them).
    ``threads``: the thread count every candidate runs at (default: automatic, as ``run``).
    """
    config = config or BenchmarkConfig(warmup_runs=1, timing_runs=5)
    say = progress or (lambda line: None)
    dtype = dtype_name(dtype)
    fixed = _fixed_params(name, params)
    sig = _base_sig(name, dtype, fixed)
    shape, env = _check_shape(name, sig, shape)
    dev = resolve_device(device)
    tun = tuning_params(name)
    cands = _unique(
        [_prepare(name, dtype, p, tun, dev, fixed) for p in _candidate_list(name, dtype, tun, candidates, fixed)]
    )
    verify_all(name, cands, env, dev, threads)
    for i, c in enumerate(cands):
        _say_row(say, i, len(cands), c.row, "verified" if c.row.status == "ok" else c.row.status)
    warm_up([c for c in cands if c.row.status == "ok"], config)
    if any(c.row.status == "ok" for c in cands):
        say("timing %d candidate(s), %d round(s)" % (sum(c.row.status == "ok" for c in cands), config.timing_runs))
    time_all(cands, config, float(compile_expr(sig.flops)(env)))
    return _finish(name, dtype, shape, cands, config, say, store)


def _finish(
    name: str,
    dtype: str,
    shape: Dict[str, Any],
    cands: List[Candidate],
    config: BenchmarkConfig,
    say: Progress,
    store: bool,
) -> TuneResult:
    ok = [c for c in cands if c.row.status == "ok"]
    if not ok:
        reasons = "; ".join("%s: %s" % (format_params(c.row.params), c.row.status) for c in cands)
        raise ExecutionError("%s %s: no candidate could be timed (%s)" % (name, dtype, reasons))
    best = min(ok, key=lambda c: score(c, config))
    best.row.chosen = True
    for i, c in enumerate(cands):
        if c.row.status == "ok":
            _say_row(say, i, len(cands), c.row, _timing_text(c.row))
    result = TuneResult(
        name,
        dtype,
        shape,
        machine_fingerprint(),
        dict(best.row.params),
        [c.row for c in cands],
        store_path=store_path(),
    )
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
    body = [
        [
            format_params(r.params) + ("" if r.prebuilt else " (compiled)"),
            "%.1f" % (r.min_s * 1e6) if r.min_s is not None else "-",
            "%.1f" % (r.median_s * 1e6) if r.median_s is not None else "-",
            "%.1f" % r.gflops if r.gflops is not None else "-",
            "*" if r.chosen else ("" if r.status == "ok" else r.status),
        ]
        for r in result.rows
    ]
    widths = [max(len(row[i]) for row in head + body) for i in range(4)]
    lines = [
        "%s %s %s on %s (%s)" % (result.kernel, result.dtype, dims, result.machine["cpu"], result.machine["variant"])
    ]
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
    "DATA_PERIOD",
    "HOST",
    "MAX_TUNE_BYTES",
    "REFERENCES",
    "REFERENCE_MAX_WORK",
    "REL_TOL",
    "STORE_FORMAT",
    "STORE_NAME",
    "TUNING_FILE_ENV",
    "TuneResult",
    "TuneRow",
    "best_params",
    "candidate_params",
    "cpu_model",
    "format_table",
    "have_compiler",
    "machine_fingerprint",
    "record",
    "store_path",
    "tune",
    "tuned_params",
    "tuning_params",
]
