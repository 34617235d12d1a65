"""``bench --only onnx``'s second peer and its profiles: OpenVINO's columns (a fake OpenVINO here, so the test
runs the same with and without the real one), the note without it, the top ops' rates against one core's peak,
and that peak's arithmetic from a given flags string.

No timing is asserted: the figures checked are the rows' arithmetic and text.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import pytest

from svod_min.perf import core_peak, op_profile, openvino_peer
from svod_min.perf.bench_suite import KEYS
from svod_min.perf.benchmarks import bench_onnx, onnx_markdown


def _tiny_model() -> Any:
    """Conv 3->4 1x1 + Relu on 1x3x8x8, weights as initializers."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = (np.random.default_rng(2).standard_normal((4, 3, 1, 1)) * 0.5).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


# --- the peak: FLOP per cycle from the flags, units from the probe, the clock measured or cpuinfo's -----------

AVX512 = "fpu sse sse2 avx fma avx2 avx512f avx512bw"


def test_the_peak_of_an_avx512_core_with_two_units_at_its_measured_clock() -> None:
    peak = core_peak.core_peak(flags=AVX512, mhz=2000.0, probe=lambda isa: (170.0, 2900.0))
    assert peak.isa.flop_per_cycle_per_unit == 32 and peak.isa.vector_bytes == 64  # 16 lanes x (multiply + add)
    assert peak.units == 2 and peak.mhz == 2900.0  # 170 / (32 x 2.9) = 1.8 -> 2
    assert peak.gflops == pytest.approx(32 * 2 * 2.9)
    text = core_peak.peak_row(peak)["measure"]
    assert "185.6 GFLOP/s = 32 FLOP/cycle per unit (AVX-512 FMA) x 2 FMA units (measured: FMA probe)" in text
    assert "x 2900 MHz (measured: dependent integer adds)" in text and "reached 170.0 GFLOP/s" in text


def test_one_unit_and_cpuinfo_s_clock_where_the_probe_says_so() -> None:
    peak = core_peak.core_peak(flags=AVX512, mhz=2000.0, probe=lambda isa: (60.0, None))  # no clock probe here
    assert peak.units == 1 and peak.mhz == 2000.0 and peak.mhz_source == "cpuinfo cpu MHz, nominal"
    assert peak.gflops == pytest.approx(64.0)


@pytest.mark.parametrize(
    "flags, name, per_cycle",
    [
        ("sse2 avx fma avx2", "AVX2 FMA", 16),
        ("sse2 avx avx2", "SSE2 multiply + add", 8),  # AVX2 without FMA: counted at SSE2's width
        ("fp asimd evtstrm", "NEON FMA", 8),
        ("fpu", "scalar", 2),
    ],
)
def test_the_flop_per_cycle_of_other_isas(flags: str, name: str, per_cycle: int) -> None:
    peak = core_peak.core_peak(flags=flags, mhz=1000.0, probe=None)
    assert (peak.isa.name, peak.isa.flop_per_cycle_per_unit) == (name, per_cycle)
    assert peak.units == 1 and peak.units_source.startswith("not measured") and peak.probe_gflops is None
    assert peak.gflops == pytest.approx(per_cycle * 1.0)


def test_the_probe_builds_and_runs_on_this_host() -> None:
    isa = core_peak.isa_of(core_peak.cpu_flags(core_peak.cpuinfo()))
    measured = core_peak.run_probe(isa, seconds=0.005)
    if measured is None:
        pytest.skip("no compiler for the probe here")
    assert measured[0] > 0 and (measured[1] is None or measured[1] > 0)


# --- the profile: the top ops with their rates -----------------------------------------------------------------


def test_top_ops_name_kernel_shape_share_and_rate_against_the_peak() -> None:
    times = [
        op_profile.OpTime(7, "svod_onnx_bconv_1a2b3c4d5e6f", "1x4x8x8x16 <- 1x4x8x8x16", 0.004, 2 * 10**8),
        op_profile.OpTime(2, "svod_onnx_bpool_max_0a1b2c3d4e5f", "", 0.002, None, None, 4 * 10**6),
        op_profile.OpTime(3, "view", "", 0.002, None),
    ]
    text = op_profile.top_ops(times, peak_gflops=100.0, top=3)
    assert text == (
        "#7 svod_onnx_bconv_1a2b3c4d5e6f (1x4x8x8x16 <- 1x4x8x8x16) 50% 50.0 GFLOP/s = 50% of peak; "
        "#2 svod_onnx_bpool_max_0a1b2c3d4e5f (-) 25% 2.0 GB/s; #3 view (-) 25% -"
    )
    assert op_profile.top_ops(times, peak_gflops=None, top=1).endswith("50.0 GFLOP/s")
    gemv = op_profile.OpTime(4, "svod_matmul_f32_8x32", "M=1 K=9216", 0.02, 2 * 9216 * 4096, None, 4 * 9216 * 4096)
    assert op_profile.top_ops([gemv], 100.0) == (  # half a FLOP per byte: its bandwidth says more
        "#4 svod_matmul_f32_8x32 (M=1 K=9216) 100% 3.8 GFLOP/s = 4% of peak, 7.5 GB/s"
    )


class _Buffer:
    def __init__(self, shape: Any, nbytes: int) -> None:
        self.shape, self.nbytes = shape, nbytes


class _Op:
    def __init__(self, fixedvars: Dict[str, int]) -> None:
        self.fixedvars, self.buffer_indices, self.output_indices = fixedvars, [2, 0], [0]


def test_a_generated_kernel_s_shape_is_its_buffers() -> None:
    buffers = [_Buffer((1, 8, 16), 512), None, _Buffer((1, 4, 16, 16), 4096)]
    assert op_profile.shape_of(_Op({}), buffers) == "1x4x16x16 <- 1x8x16"  # written first, then read
    assert op_profile.shape_of(_Op({"C": 3, "N": 1}), buffers) == "C=3"
    assert op_profile.buffer_bytes(_Op({}), buffers) == 4096 + 512


# --- OpenVINO: columns with a (fake) peer, a note without one -------------------------------------------------


def _fake_compile(calls: List[Any], scale: float) -> Any:
    """compile_peer's stand-in: onnxruntime computing the model, its outputs scaled by ``scale`` at the default
    precision (as a bf16 peer's error would be), exact at f32."""

    def compile_peer(onnx_path: str, threads: int, precision: Optional[str]) -> Any:
        session = bench_onnx.ort_session(onnx_path, threads)
        names = [o.name for o in session.get_outputs()]
        calls.append((threads, precision))
        factor = 1.0 if precision == "f32" else scale

        def run(feed: Dict[str, Any]) -> List[Any]:
            return [(n, v * factor) for n, v in zip(names, session.run(None, feed))]

        return run, "f32" if precision == "f32" else "bf16"

    return compile_peer


def test_openvino_columns_appear_beside_onnxruntime_s(pyz: str, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    calls: List[Any] = []
    monkeypatch.setattr(openvino_peer, "openvino_version", lambda: "9.9.9")
    monkeypatch.setattr(openvino_peer, "compile_peer", _fake_compile(calls, 1.01))
    table = bench_onnx.rows(quick=True, threads=(1,), models=[("tiny", _tiny_model)], profile="none", pyz=pyz)
    assert all(set(row) == set(KEYS) for row in table) and calls == [(1, "f32"), (1, None)]
    assert not [row for row in table if "not installed" in row["measure"] or "failed" in row["measure"]]
    by_peer = {
        label: [row for row in table if ", %s" % label in row["measure"]]
        for label in ("OpenVINO f32", "OpenVINO default precision")
    }
    for label, error in (("OpenVINO f32", 0.0), ("OpenVINO default precision", 0.01)):
        speed, mean = (next(r for r in by_peer[label] if k in r["measure"]) for k in ("median run", "geometric"))
        assert speed["measure"].startswith("onnx tiny, 1 thread, %s: median run [ms]; computes in " % label)
        assert speed["peer"] == "%s 9.9.9, 1 thread" % label and speed["svod_min"] > 0 and speed["peer_value"] > 0
        assert speed["ratio"] == pytest.approx(speed["peer_value"] / speed["svod_min"], rel=0.05, abs=0.02)
        reported = float(speed["measure"].split("max error ")[1].split(" ")[0])
        assert reported == pytest.approx(error, abs=1e-6) and "(svod_min's " in speed["measure"]
        assert mean["ratio"] == speed["ratio"] and "1 of 1 models'" in mean["measure"]
        # f32 is held to the goals onnxruntime is; the default precision (bf16) computes another thing: info
        assert (speed["goal"], mean["goal"]) == (
            (">= 0.7x peer", ">= 1, every model measured") if error == 0 else ("info", "info")
        )
    text = onnx_markdown.markdown(table)
    second = text.split("\n\n")[1].splitlines()
    assert second[0] == (
        "| model | 1 thread, OpenVINO f32 ms: svod_min / OpenVINO (ratio) | 1 thread, OpenVINO default "
        "precision ms: svod_min / OpenVINO (ratio) |"
    )
    assert second[2].startswith("| tiny | ") and ", bf16 error 1.0e-02)" in second[2]


def test_a_peer_that_fails_is_its_own_row(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = [{"svod": 0.002, "ort": 0.002, "ov_f32 failed": "Cannot create Conv layer"}]
    rows = openvino_peer.peer_rows("m", "1 thread", runs, "1.0", bench_onnx.spread)
    assert rows[0]["measure"] == "onnx m, 1 thread, OpenVINO f32: failed: Cannot create Conv layer"
    assert rows[1]["measure"] == "onnx m, 1 thread, OpenVINO default precision: failed: not timed"
    assert all(r["ratio"] is None for r in rows)
    means = openvino_peer.peer_means("1 thread", [runs], "1.0", bench_onnx.spread)
    assert means[0]["ratio"] is None and means[0]["met"] is False and "0 of 1 models'" in means[0]["measure"]


def test_peer_means_over_models_and_runs() -> None:
    run = [
        {"svod": 1.0, "ov_f32": 2.0, "ov": 0.5, "ov_f32 error": 0, "ov error": 0, "svod error": 0},
        {"svod": 1.0, "ov_f32": 0.5, "ov": 0.5, "ov_f32 error": 0, "ov error": 0, "svod error": 0},
    ]
    means = openvino_peer.peer_means("1 thread", [run, run], "1.0", bench_onnx.spread)
    assert means[0]["ratio"] == 1.0 and means[0]["met"] is True and "2 of 2 models'" in means[0]["measure"]
    assert math.isclose(means[1]["ratio"], 0.5) and means[1]["met"] is None  # default precision: info


def test_without_openvino_a_note_and_no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openvino_peer, "openvino_version", lambda: None)
    monkeypatch.setattr(bench_onnx, "missing_dependency", lambda: None)
    seen: List[Any] = []

    def measure_all(sources: Any, settings: Any) -> Any:
        seen.append(settings.openvino)
        speed = {"1 thread": {"svod": 0.001, "ort": 0.001}}
        fresh = {k: [bench_onnx.ChildRun(0.1, 2**20)] for k in ("svod", "ort")}
        return bench_onnx.Measured({"m": [bench_onnx.Sample(speed, fresh)]}, {}, {})

    monkeypatch.setattr(bench_onnx, "measure_all", measure_all)
    pytest.importorskip("onnxruntime")
    table = bench_onnx.rows(threads=(1,), models=[("m", None)], profile="none")
    assert seen == [None]
    notes = [r["measure"] for r in table if "OpenVINO" in r["measure"]]
    assert notes == ["onnx: OpenVINO: not installed, no OpenVINO columns (pip install openvino)"]
    assert "svod_min / OpenVINO" not in onnx_markdown.markdown(table)


def test_the_peers_match_the_setting_s_threads() -> None:
    assert openvino_peer.config(2, "f32") == {
        "INFERENCE_NUM_THREADS": 2,
        "NUM_STREAMS": 1,
        "PERFORMANCE_HINT": "LATENCY",
        "ENABLE_CPU_PINNING": False,
        "INFERENCE_PRECISION_HINT": "f32",
    }
    assert "INFERENCE_PRECISION_HINT" not in openvino_peer.config(1, None)


def test_the_scaled_error() -> None:
    np = pytest.importorskip("numpy")
    want = [("a", np.array([100.0, -50.0, 1.0], np.float32)), ("b", np.zeros(3, np.float32))]
    got = [("a", np.array([100.5, -50.0, 1.0], np.float32)), ("b", np.full(3, 7.0, np.float32))]
    assert openvino_peer.scaled_error(got, want) == pytest.approx(0.005)  # an all-zero output has no scale
    assert openvino_peer.scaled_error([("a", np.zeros(2))], want[:1]) == math.inf


def test_the_profile_beside_onnxruntime_feeds_it_the_bundle_s_example_inputs(tmp_path: Any) -> None:
    """Without --input, onnxruntime runs on the inputs the bundle runs on: its example data (an empty feed made
    onnxruntime raise a traceback of its own)."""
    pytest.importorskip("onnxruntime")
    import onnx

    from svod_min.compiler.targets import host_target
    from svod_min.onnx import build_onnx

    path, bundle = str(tmp_path / "tiny.onnx"), str(tmp_path / "tiny.svod")
    onnx.save(_tiny_model(), path)
    build_onnx(path, bundle, targets=[host_target()], expect=False)
    times, nodes = op_profile.profiles(bundle, {}, runs=1, onnx_path=path)
    assert times and {n.op for n in nodes} >= {"Conv"}
