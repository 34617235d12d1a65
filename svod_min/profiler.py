"""Per-op execution profiles, a text table, and Chrome/Perfetto traces.

A :class:`KernelProfile` is one timed op (kernel, copy, view or custom
function). ``elapsed`` is the number to rank by: device time when the device
measured it, otherwise wall time. ``chrome_trace`` emits the trace-event JSON
format that ``chrome://tracing`` and https://ui.perfetto.dev load directly.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

KINDS = ("kernel", "copy", "view", "custom")


@dataclass
class KernelProfile:
    """One timed op. Times are seconds; ``start_ns``/``end_ns`` are optional stamps."""

    name: str
    device: str
    num_buffers: int
    elapsed: float
    wall: Optional[float] = None  # defaults to ``elapsed``
    start_ns: Optional[int] = None
    end_ns: Optional[int] = None
    flops: Optional[int] = None
    bytes_moved: Optional[int] = None
    op_index: Optional[int] = None
    kind: str = "kernel"
    lane: Optional[str] = None  # trace lane within the device (thread, queue); default: the device

    def __post_init__(self) -> None:
        self.device = str(self.device)  # a DeviceSpec is welcome too
        if self.kind not in KINDS:
            raise ValueError("profile kind must be one of %s, got %r" % (KINDS, self.kind))
        if self.elapsed < 0:
            raise ValueError("elapsed must be >= 0, got %r" % (self.elapsed,))
        if self.wall is None:
            self.wall = self.elapsed

    @property
    def gflops(self) -> Optional[float]:
        """Declared FLOPs per elapsed second, in 1e9; None when undeclared or not timed."""
        return _rate(self.flops, self.elapsed)

    @property
    def gbps(self) -> Optional[float]:
        """Declared bytes moved per elapsed second, in 1e9 (GB/s, decimal)."""
        return _rate(self.bytes_moved, self.elapsed)

    def gpu_or_wall(self) -> float:
        """Seconds between the device stamps when both exist, else wall time."""
        if self.start_ns is not None and self.end_ns is not None and self.end_ns >= self.start_ns:
            return (self.end_ns - self.start_ns) / 1e9
        return float(self.wall if self.wall is not None else self.elapsed)

    def to_dict(self) -> Dict[str, Any]:
        """The fields plus ``gflops``/``gbps`` (JSON-ready)."""
        out = asdict(self)
        out["gflops"] = self.gflops
        out["gbps"] = self.gbps
        return out


def _rate(amount: Optional[int], seconds: float) -> Optional[float]:
    if amount is None or seconds <= 0:
        return None
    return amount / seconds / 1e9


def measure(
    fn: Callable[[], Any],
    name: str,
    device: Any = "CPU",
    *,
    num_buffers: int = 0,
    flops: Optional[int] = None,
    bytes_moved: Optional[int] = None,
    op_index: Optional[int] = None,
    kind: str = "kernel",
) -> KernelProfile:
    """Run ``fn()`` once and return its wall-clock profile (stamps from ``perf_counter_ns``)."""
    start = time.perf_counter_ns()
    fn()
    end = time.perf_counter_ns()
    seconds = (end - start) / 1e9
    return KernelProfile(
        name, str(device), num_buffers, seconds, seconds, start, end, flops, bytes_moved, op_index, kind
    )


# --- text table ------------------------------------------------------------------

_HEADERS = ("name", "device", "time (us)", "GFLOP/s", "GB/s", "% total")
_RIGHT = (False, False, True, True, True, True)


def profile_table(profiles: Sequence[KernelProfile]) -> str:
    """An aligned table, one row per profile, and a total row (rates over declared ops)."""
    total = sum(p.elapsed for p in profiles)
    rows = [_row(p, total) for p in profiles]
    rows.append(_total_row(profiles, total))
    widths = [max(len(r[i]) for r in rows + [_HEADERS]) for i in range(len(_HEADERS))]
    lines = [_fmt_line(_HEADERS, widths), "  ".join("-" * w for w in widths)]
    lines.extend(_fmt_line(r, widths) for r in rows[:-1])
    lines.append("  ".join("-" * w for w in widths))
    lines.append(_fmt_line(rows[-1], widths))
    return "\n".join(lines)


def _row(p: KernelProfile, total: float) -> Tuple[str, ...]:
    return (p.name, p.device, "%.3f" % (p.elapsed * 1e6), _num(p.gflops), _num(p.gbps), _pct(p.elapsed, total))


def _total_row(profiles: Sequence[KernelProfile], total: float) -> Tuple[str, ...]:
    flops = [p for p in profiles if p.flops is not None]
    moved = [p for p in profiles if p.bytes_moved is not None]
    gflops = _rate(sum(p.flops or 0 for p in flops), sum(p.elapsed for p in flops)) if flops else None
    gbps = _rate(sum(p.bytes_moved or 0 for p in moved), sum(p.elapsed for p in moved)) if moved else None
    pct = "100.0" if total > 0 else "-"
    return ("total (%d ops)" % len(profiles), "", "%.3f" % (total * 1e6), _num(gflops), _num(gbps), pct)


def _num(value: Optional[float]) -> str:
    return "-" if value is None else "%.2f" % value


def _pct(part: float, total: float) -> str:
    return "%.1f" % (100.0 * part / total) if total > 0 else "-"


def _fmt_line(cells: Sequence[str], widths: Sequence[int]) -> str:
    parts = [c.rjust(w) if right else c.ljust(w) for c, w, right in zip(cells, widths, _RIGHT)]
    return "  ".join(parts).rstrip()


# --- Chrome / Perfetto trace --------------------------------------------------------


def chrome_trace(
    profiles: Sequence[KernelProfile], *, pid: Optional[int] = None, process_name: str = "svod_min"
) -> Dict[str, Any]:
    """Trace-event JSON: one complete (``X``) event per profile, one lane (tid) per device/lane.

    Stamped profiles are placed relative to the earliest ``start_ns``;
    unstamped ones are laid end to end after the last stamped event.
    ``ts``/``dur`` are microseconds (floats keep sub-µs precision).
    """
    pid = os.getpid() if pid is None else pid
    lanes = _lanes(profiles)
    events: List[Dict[str, Any]] = [_meta(pid, 0, "process_name", process_name)]
    for label, tid in lanes.items():
        events.append(_meta(pid, tid, "thread_name", label))
        events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": tid}})
    for p, (ts, dur) in zip(profiles, _placements(profiles)):
        events.append(_complete(p, pid, lanes[_lane_label(p)], ts, dur))
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def write_chrome_trace(profiles: Sequence[KernelProfile], path: Union[str, "os.PathLike[str]"], **kwargs: Any) -> str:
    """Write :func:`chrome_trace` as JSON to ``path``; returns the path as a string."""
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(chrome_trace(profiles, **kwargs), fh, indent=1)
    return path


def _lane_label(p: KernelProfile) -> str:
    return p.device if p.lane is None else "%s/%s" % (p.device, p.lane)


def _lanes(profiles: Iterable[KernelProfile]) -> Dict[str, int]:
    lanes: Dict[str, int] = {}
    for p in profiles:  # first-appearance order: stable tids for the same input
        lanes.setdefault(_lane_label(p), len(lanes) + 1)
    return lanes


def _placements(profiles: Sequence[KernelProfile]) -> List[Tuple[float, float]]:
    stamped = [p.start_ns for p in profiles if p.start_ns is not None]
    base = min(stamped) if stamped else 0
    spans: List[Optional[Tuple[float, float]]] = []
    cursor = 0.0
    for p in profiles:
        if p.start_ns is None:
            spans.append(None)
            continue
        ts = (p.start_ns - base) / 1e3
        dur = _stamped_dur(p)
        spans.append((ts, dur))
        cursor = max(cursor, ts + dur)
    out = []
    for p, span in zip(profiles, spans):
        if span is None:
            span = (cursor, p.elapsed * 1e6)
            cursor += span[1]
        out.append(span)
    return out


def _stamped_dur(p: KernelProfile) -> float:
    if p.end_ns is not None and p.start_ns is not None and p.end_ns >= p.start_ns:
        return (p.end_ns - p.start_ns) / 1e3
    return p.elapsed * 1e6


def _meta(pid: int, tid: int, name: str, value: str) -> Dict[str, Any]:
    return {"ph": "M", "pid": pid, "tid": tid, "name": name, "args": {"name": value}}


def _complete(p: KernelProfile, pid: int, tid: int, ts: float, dur: float) -> Dict[str, Any]:
    args: Dict[str, Any] = {"device": p.device, "buffers": p.num_buffers, "elapsed_us": p.elapsed * 1e6}
    if p.wall is not None:
        args["wall_us"] = p.wall * 1e6
    for key, value in (("op_index", p.op_index), ("flops", p.flops), ("bytes", p.bytes_moved)):
        if value is not None:
            args[key] = value
    for key, rate in (("gflops", p.gflops), ("gbps", p.gbps)):
        if rate is not None:
            args[key] = rate
    return {
        "name": p.name,
        "cat": p.kind,
        "ph": "X",
        "ts": ts,
        "dur": max(0.0, dur),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


__all__ = ["KINDS", "KernelProfile", "chrome_trace", "measure", "profile_table", "write_chrome_trace"]
