"""The ONNX bench's rows as docs/performance.md shows them (``bench_onnx --markdown``): a table of the models
against onnxruntime (a column per setting, then peak RSS and cold start), a second one against OpenVINO where
the run had it (a column per setting and precision), then the other rows as a list."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

Row = Dict[str, Any]

_SPEED = re.compile(r"^onnx (\S+), (.+): median run \[ms\]")
_PROCESS = re.compile(r"^onnx (\S+): (peak RSS|cold start)")
_SPREAD = re.compile(r"; \d+ runs, ratio ([0-9.]+-[0-9.]+)$")
_UNITS = {"peak RSS": "peak RSS MiB", "cold start": "cold start ms"}
_ERROR = re.compile(r"computes in (\S+), max error ([0-9.e+-]+) ")
#: The mark of an OpenVINO column ("1 thread, OpenVINO f32"): those go to the second table.
_OPENVINO = ", OpenVINO "


def markdown(table: List[Row]) -> str:
    """The rows as docs/performance.md shows them: one line per model (a column per setting, then peak RSS and
    cold start), a second table against OpenVINO where the run had it, then the means, the failures, the profiles,
    the peak, the load."""
    models: Dict[str, Dict[str, Row]] = {}
    columns: List[str] = []
    notes: List[str] = []
    for row in table:
        kind, name = _kind(row)
        if kind is None:
            notes.append(_note(row))
            continue
        if kind not in columns:
            columns.append(kind)
        models.setdefault(name, {})[kind] = row
    columns.sort(key=lambda k: k in _UNITS)  # the speed settings first, in their order
    peers = [k for k in columns if _OPENVINO in k]
    lines = _table(models, [k for k in columns if k not in peers], "ort")
    if peers:
        lines += [""] + _table(models, peers, "OpenVINO")
    return "\n".join(lines + [""] + ["- " + n for n in notes])


def _table(models: Dict[str, Dict[str, Row]], columns: List[str], peer: str) -> List[str]:
    head = ["model"] + ["%s: svod_min / %s (ratio)" % (_UNITS.get(k) or k + " ms", peer) for k in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, kinds in models.items():
        lines.append("| %s | %s |" % (name, " | ".join(_cell(kinds.get(k)) for k in columns)))
    return lines


def _kind(row: Row) -> Tuple[Optional[str], str]:
    """(column, model) of a model's speed, peak RSS or cold start row; (None, "") for any other row."""
    measure = str(row.get("measure") or "")
    if str(row.get("peer") or "").startswith("skipped"):
        return None, ""
    speed_match, process_match = _SPEED.match(measure), _PROCESS.match(measure)
    if speed_match:
        return speed_match.group(2), speed_match.group(1)
    if process_match:
        return process_match.group(2), process_match.group(1)
    return None, ""


def _note(row: Row) -> str:
    measure = str(row.get("measure") or "")
    if str(row.get("peer") or "").startswith("skipped"):
        return "%s: %s" % (measure, row["peer"])
    if "geometric mean" in measure:
        return "%s: **%s** (goal %s: %s)" % (measure, row["ratio"], row["goal"], _met(row["met"]))
    if row.get("svod_min") is None:
        return measure
    peer = "" if row.get("peer") is None else " (%s: %s)" % (row["peer"], row["peer_value"])
    return "%s: %s%s" % (measure, row["svod_min"], peer)


def _cell(row: Optional[Row]) -> str:
    if row is None or row.get("ratio") is None:
        return "-"
    found = _SPREAD.search(str(row.get("measure") or ""))
    ratio = "%.2f" % row["ratio"] + (", runs %s" % found.group(1) if found else "")
    error = _ERROR.search(str(row.get("measure") or ""))
    return "%s / %s (%s%s%s)" % (
        _num(row["svod_min"]),
        _num(row["peer_value"]),
        ratio,
        ", %s error %s" % error.groups() if error else "",
        ", **missed**" if row["met"] is False else "",
    )


def _num(value: Any) -> str:
    return "%.0f" % value if abs(value) >= 100 else "%.3g" % value


def _met(met: Any) -> str:
    return "met" if met else "not met" if met is False else "-"
