"""Fuzz smoke test of the loader on aarch64: seeded structured mutations of real objects.

The mutation engine is bench/fuzz_loader_long.py (no hypothesis needed); the
seeds are its four kernels built by this host's compiler, so every input that
relocates is also mapped and unmapped for real. Only success or a
``LoaderError`` is acceptable; mutated code is never called.
"""

from __future__ import annotations

import collections
import os
import random

import pytest
from a64_support import NOT_AARCH64, ON_AARCH64
from support.fuzz import fuzz_engine

if not ON_AARCH64:
    pytest.skip(NOT_AARCH64, allow_module_level=True)

if fuzz_engine() is None:
    pytest.skip("bench/fuzz_loader_long.py (the mutation engine) is not in this checkout", allow_module_level=True)

INPUTS = int(os.environ.get("SVOD_AARCH64_FUZZ_INPUTS", "3000"))


def test_mutated_objects_only_relocate_map_or_raise_loader_errors() -> None:
    fz = fuzz_engine()
    seeds = fz.compile_seeds(cross=False)
    assert len(seeds) >= 4
    outcomes: collections.Counter = collections.Counter()
    bugs = []
    for index in range(INPUTS):
        rng = random.Random(index)  # input i is reproducible alone
        label, obj = seeds[rng.randrange(len(seeds))]
        mutations, resolver = fz.random_mutations(rng), rng.choice(fz.RESOLVER_NAMES)
        data = fz.apply_mutations(obj, mutations)
        try:
            outcome = fz.run_one(data, resolver, load=True)
        except Exception as exc:  # noqa: BLE001 - anything but a LoaderError is the finding
            bugs.append("0:%d %s %s -> %s: %s" % (index, label, mutations, type(exc).__name__, exc))
            outcome = "BUG"
        finally:
            fz.forget_layouts()
        outcomes[outcome.split(":")[0]] += 1
    print("aarch64 fuzz smoke: %d inputs: %s" % (INPUTS, dict(outcomes)))
    assert not bugs, "\n".join(bugs[:10])
    assert outcomes["ok, mapped"] > 0, outcomes  # some mutated objects were really mapped
    assert sum(n for k, n in outcomes.items() if not k.startswith("ok")) > 0, outcomes
