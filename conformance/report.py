"""The round's summary and the per-op table of docs/onnx.md."""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any, Dict, List, Optional

from .outcome import DISPUTED, FAILURES, PASS, REFUSED, STALE_DATA

SVOD, ORT = "svod_min", "onnxruntime"


def op_of(record: Dict[str, Any], known: Optional[Dict[str, str]] = None) -> str:
    """The op a test is about: its only node's op; for a multi-node graph, the op its name starts with among
    ``known`` (lower-case op name without underscores -> op), "Op (expanded)" for a function's expanded body; else
    the test's name in parentheses."""
    ops = record.get("ops") or []
    if len(ops) == 1:
        return ops[0]
    name = record["test"][len("test_") :]
    words = name.split("_expanded")[0].split("_")
    for n in range(len(words), 0, -1):  # the longest leading words that spell a known op
        op = (known or {}).get("".join(words[:n]).lower())
        if op:
            return "%s (expanded)" % op if "_expanded" in name else op
    return "%s (expanded)" % name.split("_expanded")[0] if "_expanded" in name else "(%s)" % name


#: The suite's short names for ops in its test names.
TEST_NAME_ALIASES = {
    "nllloss": "NegativeLogLikelihoodLoss",
    "sce": "SoftmaxCrossEntropyLoss",
    "mvn": "MeanVarianceNormalization",
}


def known_ops(records: List[Dict[str, Any]]) -> Dict[str, str]:
    """The ops of the single-node tests, by their lower-case name without underscores, and the suite's aliases."""
    known = dict(TEST_NAME_ALIASES)
    known.update((ops[0].lower(), ops[0]) for ops in (r.get("ops") or [] for r in records) if len(ops) == 1)
    return known


def summary(records: List[Dict[str, Any]]) -> List[str]:
    """Counts per engine, and svod_min's share of the tests onnxruntime passes."""
    lines = []
    for engine in (SVOD, ORT):
        if records and engine in records[0]:
            counts = Counter(r[engine]["kind"] for r in records)
            lines.append("%s: %s" % (engine, ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    if records and SVOD in records[0] and ORT in records[0]:
        peer = [r for r in records if r[ORT]["kind"] == PASS]
        both = sum(1 for r in peer if r[SVOD]["kind"] == PASS)
        lines.append(
            "svod_min passes %d of the %d tests onnxruntime passes (%.1f%%)"
            % (both, len(peer), 100.0 * both / max(1, len(peer)))
        )
        pinned = sum(1 for r in peer if r[SVOD]["kind"] == PASS and r[SVOD]["detail"].startswith("pinned "))
        if pinned:  # the build refused them until the inputs whose values decide shapes were pinned (build --pin)
            lines.append("  of which %d with inputs pinned at build" % pinned)
    questioned = [r for r in records if SVOD in r and r[SVOD]["kind"] in (STALE_DATA, DISPUTED)]
    if questioned:  # not failures, but each named: the data, not svod_min, is what these hold against
        lines.append("svod_min outcomes whose data is stale or disputed: %d" % len(questioned))
        lines += ["  %s: %s %s" % (r["test"], r[SVOD]["kind"], r[SVOD]["detail"][:200]) for r in questioned]
    bad = [r for r in records if SVOD in r and r[SVOD]["kind"] in FAILURES]
    lines.append("svod_min crashes, hangs, signals and wrong answers: %d" % len(bad))
    lines += ["  %s: %s %s" % (r["test"], r[SVOD]["kind"], r[SVOD]["detail"][:200]) for r in bad]
    return lines


def op_table(records: List[Dict[str, Any]]) -> List[str]:
    """A Markdown table: per op, the tests, svod_min's passes and refusals, onnxruntime's passes."""
    by_op: "OrderedDict[str, List[Dict[str, Any]]]" = OrderedDict()
    known = known_ops(records)
    for record in sorted(records, key=lambda r: op_of(r, known).lower()):
        by_op.setdefault(op_of(record, known), []).append(record)
    lines = [
        "| op | tests | svod_min pass | svod_min refused | onnxruntime pass | first refusal |",
        "|---|---|---|---|---|---|",
    ]
    for op, group in by_op.items():
        kinds = Counter(r[SVOD]["kind"] for r in group)
        peer = sum(1 for r in group if r.get(ORT, {}).get("kind") == PASS)
        refusal = next((r[SVOD]["detail"] for r in group if r[SVOD]["kind"] == REFUSED), "")
        lines.append(
            "| %s | %d | %d | %d | %d | %s |"
            % (op, len(group), kinds[PASS], kinds[REFUSED], peer, _cell(refusal.split(": ", 1)[-1][:90]))
        )
    return lines


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
