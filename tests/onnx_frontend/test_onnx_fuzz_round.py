"""The fuzzer's CI round (docs/fuzzing.md): seeded mutants of the op-family graphs and the quick light CNNs through
build and run; any traceback, signal, hang, allocation past the budget or answer onnxruntime disagrees with fails.

Bounded by a case count and a time cap (a slower machine runs a prefix of the same cases); the counts are printed.
"""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.paths import REPO_DIR  # noqa: E402

if not os.path.isdir(os.path.join(REPO_DIR, "fuzz")):
    pytest.skip("the fuzz package lives in the checkout, not the wheel", allow_module_level=True)
sys.path.insert(0, REPO_DIR)

from fuzz.campaign import Options, run_round  # noqa: E402
from fuzz.case import FAILURES, Limits  # noqa: E402

#: The round: this seed's first CASES cases, or as many as SECONDS allow (CI's budget for it is 90 s).
SEED, CASES, SECONDS = 1, 150, 70.0


def test_fuzz_round_has_no_failures(tmp_path):
    from svod_min.compiler.targets import host_target

    options = Options(
        seed=SEED,
        cases=CASES,
        seconds=SECONDS,
        out=str(tmp_path),
        kinds=("ops", "light"),
        limits=Limits(build_s=30.0, run_s=15.0, ort_s=15.0, memory_bytes=4 << 30, target=host_target()),
        env={"SVOD_MAX_MEMORY": str(4 << 30)},
    )
    lines = []
    summary = run_round(options, lines.append)
    print(summary.line())
    failed = [ln for ln in lines if ln.split(" ", 2)[1].rstrip(":").lower() in FAILURES]
    assert summary.cases >= 20, summary.line()
    assert summary.outcomes["pass"] > 0, "no mutant built and ran: the round tests nothing (%s)" % summary.line()
    distinct = "\n".join("%d x %s" % (n, sig) for sig, n in summary.signatures.most_common())
    assert not failed, "%s\n%s\n%s" % (summary.line(), distinct, "\n".join(failed))


def test_a_seed_gives_the_same_cases():
    from fuzz.campaign import SeedPool, make_case
    from fuzz.seeds import seed_names

    pool = SeedPool(seed_names(("ops",), None), None)
    first = [make_case(pool, 5, i, ()) for i in range(30)]
    again = [make_case(pool, 5, i, ()) for i in range(30)]
    assert [(n, m.SerializeToString(), ln) for n, m, ln in first] == [
        (n, m.SerializeToString(), ln) for n, m, ln in again
    ]
    assert len({m.SerializeToString() for _, m, _ in first}) > 20  # and the cases differ from one another


def test_every_mutator_applies_to_every_op_family_seed():
    """Each mutation leaves a model protobuf can serialize (the round never stops at a mutation)."""
    import random

    from fuzz.mutate import MUTATORS, reinfer
    from fuzz.seeds import family_names, load_seed

    applied = 0
    for name in family_names():
        for mutator, _ in MUTATORS.values():
            model = load_seed(name)
            if mutator(model, random.Random(name)) is not None:
                applied += 1
            reinfer(model)
            model.SerializeToString()
    assert applied > len(family_names()) * len(MUTATORS) // 2
