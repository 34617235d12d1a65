"""Profiler: KernelProfile arithmetic, the text table, Chrome traces."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from svod_min.devices.registry import DeviceSpec
from svod_min.profiler import KernelProfile, chrome_trace, measure, profile_table, write_chrome_trace


def _p(name: str, elapsed: float, **kw: Any) -> KernelProfile:
    kw.setdefault("device", "CPU")
    kw.setdefault("num_buffers", 2)
    return KernelProfile(name=name, elapsed=elapsed, **kw)


# --- KernelProfile -----------------------------------------------------------------


def test_rates() -> None:
    p = _p("gemm", 0.5, flops=2 * 10**9, bytes_moved=3 * 10**9)
    assert p.gflops == pytest.approx(4.0)
    assert p.gbps == pytest.approx(6.0)


def test_rates_none_when_undeclared_or_untimed() -> None:
    assert _p("k", 0.5).gflops is None
    assert _p("k", 0.5).gbps is None
    zero = _p("k", 0.0, flops=100, bytes_moved=100)
    assert zero.gflops is None and zero.gbps is None


def test_wall_defaults_and_gpu_or_wall() -> None:
    p = _p("k", 0.25)
    assert p.wall == 0.25 and p.gpu_or_wall() == 0.25
    stamped = _p("k", 0.001, wall=0.002, start_ns=1_000, end_ns=5_000)
    assert stamped.gpu_or_wall() == pytest.approx(4e-6)
    assert _p("k", 0.001, wall=0.002, start_ns=1_000).gpu_or_wall() == 0.002


def test_device_spec_and_validation() -> None:
    assert _p("k", 1.0, device=DeviceSpec("CUDA", 1)).device == "CUDA:1"
    with pytest.raises(ValueError, match="kind"):
        _p("k", 1.0, kind="bogus")
    with pytest.raises(ValueError, match="elapsed"):
        _p("k", -1.0)


def test_to_dict_is_json_ready() -> None:
    d = _p("k", 0.5, flops=10**9, op_index=3, kind="copy").to_dict()
    assert d["name"] == "k" and d["kind"] == "copy" and d["op_index"] == 3
    assert d["gflops"] == pytest.approx(2.0) and d["gbps"] is None
    assert json.loads(json.dumps(d)) == d


def test_measure_stamps_a_call() -> None:
    calls: List[int] = []
    p = measure(lambda: calls.append(1), "noop", DeviceSpec("CPU"), num_buffers=1, flops=8)
    assert calls == [1]
    assert p.device == "CPU" and p.num_buffers == 1 and p.flops == 8
    assert p.start_ns is not None and p.end_ns is not None and p.end_ns >= p.start_ns
    assert p.elapsed == pytest.approx((p.end_ns - p.start_ns) / 1e9)


# --- table ----------------------------------------------------------------------------


def test_table_has_rows_and_total() -> None:
    profiles = [
        _p("matmul_kernel", 3e-3, flops=6 * 10**6),
        _p("copy_in", 1e-3, kind="copy", bytes_moved=4 * 10**6, device="CUDA:0"),
    ]
    text = profile_table(profiles)
    lines = text.splitlines()
    assert "matmul_kernel" in text and "copy_in" in text and "CUDA:0" in text
    assert lines[0].split()[:2] == ["name", "device"]
    assert "GFLOP/s" in lines[0] and "GB/s" in lines[0]
    assert "total (2 ops)" in lines[-1]
    assert "4000.000" in lines[-1] and "100.0" in lines[-1]  # 4 ms in µs
    row = next(line for line in lines if line.startswith("matmul_kernel"))
    assert "3000.000" in row and "2.00" in row and "75.0" in row  # 6 MFLOP / 3 ms = 2 GFLOP/s
    copy_row = next(line for line in lines if line.startswith("copy_in"))
    assert "4.00" in copy_row and "25.0" in copy_row
    assert lines[1].replace(" ", "").strip("-") == ""


def test_table_columns_align() -> None:
    text = profile_table([_p("a", 1e-6), _p("a_much_longer_name", 2e-6, device="CUDA:1")])
    lines = text.splitlines()
    col = lines[0].index("device")
    assert all(line[col - 2 : col] == "  " for line in lines if not set(line) <= {"-", " "})


def test_empty_table() -> None:
    text = profile_table([])
    assert "total (0 ops)" in text


# --- Chrome trace --------------------------------------------------------------------------


def _check_trace(trace: Dict[str, Any]) -> None:
    assert trace["displayTimeUnit"] == "ns"
    events = trace["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(e["ph"] == "M" and e["name"] == "process_name" for e in events)
    for e in events:
        assert e["ph"] in ("X", "M")
        if e["ph"] == "X":
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float)
            assert e["ts"] >= 0 and e["dur"] >= 0
            assert isinstance(e["pid"], int) and e["tid"] in lanes
            assert "buffers" in e["args"]


def test_chrome_trace_round_trip(tmp_path: Path) -> None:
    profiles = [
        _p("k0", 2e-6, op_index=0, flops=4000),
        _p("up", 1e-6, device="CUDA:0", kind="copy", bytes_moved=1024, op_index=1),
        _p("k1", 3e-6, op_index=2, lane="worker-1"),
    ]
    path = write_chrome_trace(profiles, tmp_path / "trace.json")
    trace = json.loads(Path(path).read_text())
    assert trace == json.loads(json.dumps(chrome_trace(profiles, pid=trace["traceEvents"][0]["pid"])))
    _check_trace(trace)
    events = trace["traceEvents"]
    lanes = {e["args"]["name"]: e["tid"] for e in events if e["name"] == "thread_name"}
    assert set(lanes) == {"CPU", "CUDA:0", "CPU/worker-1"}
    xs = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in xs] == ["k0", "up", "k1"]
    assert [e["tid"] for e in xs] == [lanes["CPU"], lanes["CUDA:0"], lanes["CPU/worker-1"]]
    assert xs[0]["args"]["flops"] == 4000 and xs[1]["args"]["bytes"] == 1024 and xs[1]["cat"] == "copy"
    # Unstamped profiles are laid end to end.
    assert xs[0]["ts"] == 0.0 and xs[0]["dur"] == pytest.approx(2.0)
    assert xs[1]["ts"] == pytest.approx(2.0) and xs[2]["ts"] == pytest.approx(3.0)


def test_chrome_trace_uses_stamps() -> None:
    profiles = [
        _p("a", 1e-6, start_ns=10_000, end_ns=12_500),
        _p("b", 1e-6, start_ns=11_000, end_ns=11_500, device="CUDA:0"),
        _p("late", 4e-6),  # no stamps: after the last stamped event
    ]
    trace = chrome_trace(profiles, pid=7)
    _check_trace(trace)
    xs = {e["name"]: e for e in trace["traceEvents"] if e["ph"] == "X"}
    assert (xs["a"]["ts"], xs["a"]["dur"]) == (0.0, pytest.approx(2.5))
    assert (xs["b"]["ts"], xs["b"]["dur"]) == (pytest.approx(1.0), pytest.approx(0.5))
    assert xs["late"]["ts"] == pytest.approx(2.5) and xs["late"]["dur"] == pytest.approx(4.0)
    assert all(e["pid"] == 7 for e in trace["traceEvents"])


def test_chrome_trace_empty() -> None:
    trace = chrome_trace([])
    _check_trace(trace)
    assert [e["ph"] for e in trace["traceEvents"]] == ["M"]
