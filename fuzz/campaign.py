"""A fuzz round: seeded cases, each a mutant of a seed model through onnxruntime, build and run; the counts.

Case ``i`` of seed ``s`` draws everything (which seed model, how many mutations, each mutation's choices) from
``random.Random(s * 1_000_003 + i)``: a seed gives the same cases on every run and machine, a round cut short by
its time limit is a prefix of the longer one, and ``--case i`` remakes one case alone.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import onnx

from .case import FAILURES, OUTCOMES, Limits, run_case, save_reproducer, signature
from .child import address_space_limit, run_child
from .mutate import mutate
from .seeds import load_seed, seed_names

#: Mutations per case, drawn uniformly: one most often, up to three.
STEPS = (1, 1, 1, 2, 2, 3)
#: How often each kind of seed is drawn: the CNNs take seconds a case, the small graphs a fraction of one.
KIND_WEIGHTS = {"ops": 8, "node": 8, "light": 1, "zoo": 1}
#: The deadlines of a case grow by this factor for a seed of the kind (a zoo CNN compiles a hundred kernels).
KIND_SLOWNESS = {"zoo": 6.0, "light": 2.0}


@dataclass
class Options:
    seed: int = 1
    cases: Optional[int] = None
    seconds: Optional[float] = None
    out: str = "fuzz-out"
    kinds: Tuple[str, ...] = ("ops", "light")
    conformance: Optional[str] = None
    limits: Limits = field(default_factory=Limits)
    only: Sequence[str] = ()
    first: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    keep: Sequence[str] = ()


@dataclass
class Summary:
    cases: int = 0
    seconds: float = 0.0
    outcomes: Counter = field(default_factory=Counter)
    failures: List[str] = field(default_factory=list)
    signatures: Counter = field(default_factory=Counter)
    by_mutator: Dict[str, Counter] = field(default_factory=dict)

    def failed(self) -> int:
        return sum(self.outcomes[o] for o in FAILURES)

    def line(self) -> str:
        counts = ", ".join("%s %d" % (o, self.outcomes[o]) for o in OUTCOMES if self.outcomes[o])
        return "%d cases in %.0f s: %s; %d failure(s)" % (self.cases, self.seconds, counts or "none", self.failed())

    def to_dict(self) -> Dict[str, object]:
        return {
            "cases": self.cases,
            "seconds": round(self.seconds, 1),
            "outcomes": {o: self.outcomes[o] for o in OUTCOMES},
            "failures": self.failures,
            "signatures": dict(self.signatures.most_common()),
            "by_mutator": {k: dict(v) for k, v in sorted(self.by_mutator.items())},
        }


class SeedPool:
    """Seed models by name, each made once and kept serialized; a case parses a fresh copy to mutate."""

    def __init__(self, names: Sequence[str], conformance: Optional[str]) -> None:
        self.by_kind: Dict[str, List[str]] = {}
        for name in names:
            self.by_kind.setdefault(name.split("/", 1)[0], []).append(name)
        self.conformance = conformance
        self._bytes: Dict[str, Optional[bytes]] = {}

    def pick(self, rng: random.Random) -> str:
        """A kind first, then a seed of it: the thousand conformance models do not crowd out the others."""
        kinds = sorted(self.by_kind)
        kind = rng.choices(kinds, [KIND_WEIGHTS.get(k, 1) for k in kinds])[0]
        return rng.choice(self.by_kind[kind])

    def model(self, name: str) -> Optional[onnx.ModelProto]:
        if name not in self._bytes:
            try:
                self._bytes[name] = load_seed(name, self.conformance).SerializeToString()
            except Exception:  # noqa: BLE001 - a seed that cannot be made (a broken test model) is skipped
                self._bytes[name] = None
        data = self._bytes[name]
        return None if data is None else onnx.ModelProto.FromString(data)


def make_case(
    pool: SeedPool, seed: int, index: int, only: Sequence[str], infer: bool = True
) -> Tuple[str, Optional[onnx.ModelProto], List[str]]:
    """Case ``index``: the seed's name, the mutant (None when the seed cannot be made) and what was mutated."""
    rng = random.Random(seed * 1_000_003 + index)
    name = pool.pick(rng)
    model = pool.model(name)
    if model is None:
        return name, None, []
    lines = mutate(model, rng, rng.choice(STEPS), only, infer)
    return name, model, lines


def write_case(
    pool: SeedPool, options: Options, index: int, path: str, limit_bytes: int
) -> Tuple[str, Optional[List[str]]]:
    """Case ``index`` made in a child and written to ``path``: onnx's shape inference, which the mutation step
    runs, can crash on a mutant (a segfault in onnx_cpp2py_export was seen), and the round must go on. Where it
    crashes, the mutant is made again without it (svod_min's build then meets the same model). Returns the seed's
    name and the mutations (None: no mutant)."""
    name = pool.pick(random.Random(options.seed * 1_000_003 + index))
    if pool.model(name) is None:  # made here, once: the children find the seed ready
        return name, None
    work = os.path.dirname(path)
    for infer in (True, False):

        def body() -> int:
            _, model, lines = make_case(pool, options.seed, index, options.only, infer)
            with open(path, "wb") as f:
                f.write(model.SerializeToString())  # type: ignore[union-attr]
            with open(path + ".json", "w") as f:
                json.dump(lines, f)
            return 0

        step = run_child("mutate", ["mutate"], body, work, 60.0, limit_bytes)
        if step.rc == 0:
            with open(path + ".json") as f:
                return name, json.load(f)
    return name, None


def run_round(options: Options, progress: Callable[[str], None] = lambda line: None) -> Summary:
    """Cases from ``options.first`` on until ``options.cases`` ran or ``options.seconds`` passed."""
    names = seed_names(options.kinds, options.conformance)
    if not names:
        raise ValueError(
            "no seed models (kinds %s; the conformance models need --conformance DIR)" % ",".join(options.kinds)
        )
    pool = SeedPool(names, options.conformance)
    work = os.path.join(options.out, "work")
    os.makedirs(work, exist_ok=True)
    saved_env = {k: os.environ.get(k) for k in options.env}
    os.environ.update(options.env)
    summary = Summary()
    start = time.monotonic()
    limit_bytes = address_space_limit(options.limits.memory_bytes)
    try:
        index = options.first
        while True:
            if options.cases is not None and summary.cases >= options.cases:
                break
            if options.seconds is not None and time.monotonic() - start >= options.seconds:
                break
            case_id = "s%d-c%d" % (options.seed, index)
            shutil.rmtree(work, ignore_errors=True)
            os.makedirs(work)
            path = os.path.join(work, "model.onnx")
            seed_name, lines = write_case(pool, options, index, path, limit_bytes)
            index += 1
            if lines is None:
                continue
            slow = KIND_SLOWNESS.get(seed_name.split("/", 1)[0], 1.0)
            limits = replace(
                options.limits,
                build_s=options.limits.build_s * slow,
                run_s=options.limits.run_s * slow,
                ort_s=options.limits.ort_s * slow,
            )
            result = run_case(path, work, limits, limit_bytes)
            summary.cases += 1
            summary.outcomes[result.outcome] += 1
            for line in lines:
                summary.by_mutator.setdefault(line.split(":", 1)[0], Counter())[result.outcome] += 1
            if result.outcome in FAILURES:
                where = save_reproducer(
                    options.out, case_id, path, result, lines, seed_name, options.limits, options.env
                )
                summary.failures.append(where)
                summary.signatures[signature(result)] += 1
                progress("%s %s: %s (%s) -> %s" % (case_id, result.outcome.upper(), seed_name, "; ".join(lines), where))
            else:
                if result.outcome in options.keep:
                    save_reproducer(
                        options.out, case_id, path, result, lines, seed_name, options.limits, options.env, "kept"
                    )
                progress(
                    "%s %s: %s (%s)%s"
                    % (
                        case_id,
                        result.outcome,
                        seed_name,
                        "; ".join(lines),
                        " -- " + result.note if result.note else "",
                    )
                )
    finally:
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(work, ignore_errors=True)
    summary.seconds = time.monotonic() - start
    with open(os.path.join(options.out, "summary.json"), "w") as f:
        json.dump(summary.to_dict(), f, indent=1)
    return summary
