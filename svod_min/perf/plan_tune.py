"""``build --tune``: time the register tiles of a plan's library kernels on this machine, record the winners.

For every distinct (library kernel, params, shape) among the plan's ops whose kernel has tuning params
(conv2d_gemm, matmul: ``mr`` x ``nr``; a plan variable at its default), the autotuner
(:func:`svod_min.perf.autotune.tune`) verifies and times the candidate tiles at the thread count asked for
(default 1), round-robin, and the fastest wins; a tile other than this host's default must beat the default
by :data:`MARGIN` (noise on a shared machine must not make a bundle carry objects for nothing). Ops are then
regrouped by their choice: each plan kernel gains ``"tuned": {variant: {"mr": .., "nr": ..}}`` for this
host's prebuilt variant, and ops that chose another tile than their kernel's default get a kernel of their
own (key suffixed ``~mr=4.nr=8``). The bundle build compiles the objects a choice needs that the variant's
prebuilt object lacks (:mod:`svod_min.planfile.library_objects`), so a host without a compiler runs it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..error import SvodError
from ..expr import compile_expr
from ..kernels import find_sig, host_variant
from ..kernels.tuning import cpu_model
from ..planfile.schema import var_bounds
from .autotune import format_params, tune, tuning_params
from .benchmark import BenchmarkConfig

#: The library kernels ``--tune`` times (the ones with register-tile params the lowering uses).
TUNABLE = ("conv2d_gemm", "matmul")
#: A tile other than the default wins only when at least this much faster (a share of the default's time).
MARGIN = 0.05

Progress = Callable[[str], None]
ShapeKey = Tuple[str, Tuple[Tuple[str, Any], ...]]


@dataclass
class TunedOp:
    """One distinct (kernel, shape): the tile chosen, the default and the candidates' best times."""

    kernel: str
    shape: Dict[str, Any]
    choice: Dict[str, Any]
    default: Dict[str, Any]
    times: Dict[str, float] = field(default_factory=dict)  # candidate params text -> min seconds
    note: str = ""  # why the shape was not tuned ('' when it was)


@dataclass
class PlanTuning:
    """What :func:`tune_plan` did: the variant tuned for, the threads, the per-shape choices, the time taken."""

    variant: str
    threads: int
    ops: List[TunedOp]
    seconds: float

    def summary(self) -> Dict[str, Any]:
        """The bundle manifest's ``tuned`` record."""
        changed = sum(1 for t in self.ops if t.choice != t.default)
        return {
            "variant": self.variant,
            "cpu": cpu_model(),
            "threads": self.threads,
            "shapes": len(self.ops),
            "non_default": changed,
            "not_tuned": sum(1 for t in self.ops if t.note),
            "seconds": round(self.seconds, 3),
        }


def tune_plan(
    doc: Dict[str, Any],
    progress: Progress = lambda line: None,
    *,
    threads: int = 1,
    candidates: Optional[Sequence[Mapping[str, Any]]] = None,
    config: Optional[BenchmarkConfig] = None,
) -> Optional[PlanTuning]:
    """Tune ``doc``'s library ops in place (see the module doc); None when nothing could be tuned here."""
    variant = host_variant()
    if variant is None:
        progress("note: --tune: no prebuilt kernel variant fits this host; the bundle keeps the defaults")
        return None
    start = time.perf_counter()
    groups = _tunable_ops(doc)
    config = config or BenchmarkConfig(warmup_runs=1, timing_runs=5)
    progress("tuning %d library op shape(s) for %s at %d thread(s)" % (len(groups), variant, threads))
    results: Dict[ShapeKey, TunedOp] = {}
    for i, (skey, kernel_key) in enumerate(groups.items()):
        found = _tune_one(doc["kernels"][kernel_key], dict(skey[1]), variant, threads, candidates, config)
        if found is not None:
            results[skey] = found
            progress(
                "[%d/%d] %s %s: %s" % (i + 1, len(groups), found.kernel, _shape_text(found.shape), _choice_text(found))
            )
    _regroup(doc, results, variant)
    return PlanTuning(variant, threads, list(results.values()), time.perf_counter() - start)


def _tunable_ops(doc: Dict[str, Any]) -> Dict[ShapeKey, str]:
    """(kernel key, sorted variables) -> kernel key, for every op of a tunable library kernel, in op order."""
    out: Dict[ShapeKey, str] = {}
    kernels = doc.get("kernels", {})
    for op in doc.get("ops", []):
        key = op.get("kernel")
        k = kernels.get(key) if isinstance(key, str) else None
        if not isinstance(k, dict) or k.get("library") not in TUNABLE or "tuned" in k:
            continue
        out.setdefault(_shape_key(doc, op), key)
    return out


def _shape_key(doc: Dict[str, Any], op: Mapping[str, Any]) -> ShapeKey:
    """The op's kernel and variables, a plan variable's expression (``"M": "rows"``) at the variables' defaults."""
    defaults = {name: var_bounds(v, "vars.%s" % name)[2] for name, v in (doc.get("vars") or {}).items()}
    values = {}
    for name, value in (op.get("vars") or {}).items():
        try:
            values[name] = compile_expr(value)(defaults) if isinstance(value, str) else value
        except SvodError:  # an expression the defaults do not settle: the tuner names it
            values[name] = value
    return op.get("kernel"), tuple(sorted(values.items()))


def _tune_one(
    kernel: Dict[str, Any],
    shape: Dict[str, Any],
    variant: str,
    threads: int,
    candidates: Optional[Sequence[Mapping[str, Any]]],
    config: BenchmarkConfig,
) -> Optional[TunedOp]:
    """Time the candidates for one shape; None (with the defaults kept) when the tuner cannot."""
    name, params = kernel["library"], dict(kernel.get("params", {}))
    tun = tuning_params(name)
    fixed = {k: v for k, v in params.items() if k not in tun and k != "dtype"}
    default = {k: v for k, v in find_sig(name, variant, **params).params if k in tun}
    try:
        result = tune(
            name,
            dtype=params.get("dtype", "float32"),
            shape=shape,
            params=fixed,
            threads=threads,
            candidates=candidates,
            config=config,
            store=False,
        )
    except SvodError as exc:  # a shape the tuner cannot run (too large, symbolic variables...): the defaults
        return TunedOp(name, shape, default, default, note="not tuned: %s" % str(exc).splitlines()[0][:160])
    times = {format_params(r.params): r.min_s for r in result.rows if r.min_s is not None}
    choice = dict(result.best_params)
    base = times.get(format_params(default))
    if choice != default and base is not None and times[format_params(choice)] > base * (1 - MARGIN):
        choice = default  # within the noise of the default: keep it
    return TunedOp(name, shape, choice, default, times)  # type: ignore[arg-type]


def _regroup(doc: Dict[str, Any], results: Mapping[ShapeKey, TunedOp], variant: str) -> None:
    """Point each tuned op at a kernel recording its choice (``tuned``); drop kernels no op uses any more."""
    kernels = doc["kernels"]
    originals = {key: dict(kernels[key]) for key, _ in results}
    fresh: Dict[str, Dict[str, Any]] = {}
    for op in doc.get("ops", []):
        key = op.get("kernel")
        tuned = results.get(_shape_key(doc, op)) if isinstance(key, str) else None
        if tuned is None:
            continue
        new_key = (
            key
            if tuned.choice == tuned.default
            else "%s~%s" % (key, ".".join("%s=%s" % kv for kv in sorted(tuned.choice.items())))
        )
        fresh.setdefault(new_key, dict(originals[key], tuned={variant: dict(sorted(tuned.choice.items()))}))
        op["kernel"] = new_key
    used = {op.get("kernel") for op in doc.get("ops", [])}
    for key in originals:
        if key not in used:
            del kernels[key]
    kernels.update(fresh)


def _shape_text(shape: Mapping[str, Any]) -> str:
    return ",".join("%s=%s" % kv for kv in shape.items())


def _choice_text(t: TunedOp) -> str:
    if t.note:
        return "%s (default; %s)" % (format_params(t.choice), t.note)
    times = ", ".join("%s %.1f µs" % (p, s * 1e6) for p, s in t.times.items())
    what = "default" if t.choice == t.default else "tuned"
    return "%s (%s; %s)" % (format_params(t.choice), what, times)


__all__ = ["MARGIN", "PlanTuning", "TUNABLE", "TunedOp", "tune_plan"]
