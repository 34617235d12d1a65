"""``bench --only onnx`` (svod_min/perf/benchmarks/bench_onnx.py): its rows on one tiny model, its agreement gate,
its geometric means and ``--runs`` on made-up timings, its skip rows.

The light models take minutes; these tests give the benchmark a three-node model built with
onnx.helper, in quick mode, and check the rows' fields and arithmetic (never the times themselves:
speed lives in the benchmark's ratios).
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, Dict, List

import pytest

from svod_min.perf import agreement, zoo
from svod_min.perf.bench_suite import KEYS
from svod_min.perf.benchmarks import bench_onnx
from svod_min.planfile.data import Expectation


def _tiny_model() -> Any:
    """Conv 3->8 3x3 + Relu + GlobalAveragePool on 1x3x16x16, weights as initializers."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, 8).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 3, 3, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _by_kind(table: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """Rows by kind; speed rows and geometric means by their setting ("speed 2 threads, spinning")."""
    kinds = {
        "load average": "load",
        "geometric mean": "mean",
        "median run": "speed",
        "peak RSS": "rss",
        "cold start": "cold",
        "profile": "profile",
        "FMA peak": "peak",
    }
    found = {}
    for row in table:
        kind = [k for text, k in kinds.items() if text in row["measure"]]
        assert len(kind) == 1, row["measure"]
        key = kind[0]
        if key in ("speed", "mean"):  # the setting ends the mean's measure, and the speed row's before its colon
            text = row["measure"] if key == "mean" else row["measure"].split(":")[0]
            key += " " + next(label for label in SETTINGS if text.endswith(label))
        assert key not in found, row["measure"]
        found[key] = row
    return found


#: The settings' labels at threads (1, 2): one at 1 thread, both spinning settings at 2.
SETTINGS = ("1 thread", "2 threads, no spinning", "2 threads, spinning")


def test_rows_of_one_tiny_model(pyz: str) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    spin_before = os.environ.get("SVOD_NATIVE_SPIN")
    table = bench_onnx.rows(
        quick=True, threads=(1, 2), models=[("tiny", _tiny_model)], profile="all", pyz=pyz, openvino=False
    )  # OpenVINO's columns: tests/perf/test_bench_onnx_peers.py
    assert os.environ.get("SVOD_NATIVE_SPIN") == spin_before  # the settings leave the environment as they found it
    assert all(set(row) == set(KEYS) for row in table)
    assert not [row for row in table if "failed" in row["measure"]], table
    rows = _by_kind(table)
    assert set(rows) == {"load", "rss", "cold", "profile", "peak"} | {"speed " + s for s in SETTINGS} | {
        "mean " + s for s in SETTINGS
    }
    assert rows["load"]["goal"] == "info" and "at the start" in rows["load"]["measure"]
    for label, peer in zip(SETTINGS, ("1 thread", "2 threads, allow_spinning=0", "2 threads, allow_spinning=1")):
        speed = rows["speed " + label]
        assert speed["measure"] == "onnx tiny, %s: median run [ms]" % label and speed["peer"].endswith(peer)
        assert speed["svod_min"] > 0 and speed["peer_value"] > 0
        assert speed["ratio"] == pytest.approx(speed["peer_value"] / speed["svod_min"], rel=0.05, abs=0.02)
        assert speed["met"] == (speed["ratio"] >= bench_onnx.GOAL_FLOOR)
        mean = rows["mean " + label]
        assert mean["ratio"] == speed["ratio"] and mean["met"] == (speed["ratio"] >= bench_onnx.GOAL_GEOMEAN)
        assert "1 models'" in mean["measure"] and "failed" not in mean["measure"]
    for kind in ("rss", "cold"):
        row = rows[kind]
        assert row["svod_min"] > 0 and row["peer_value"] > 0 and row["peer"].startswith("onnxruntime ")
        assert row["ratio"] == pytest.approx(row["peer_value"] / row["svod_min"], rel=0.05, abs=0.02)
    assert rows["rss"]["svod_min"] < 1024  # MiB: a tiny model's process, not the benchmark's own size
    assert rows["rss"]["met"] == (rows["rss"]["svod_min"] <= bench_onnx.GOAL_RSS * rows["rss"]["peer_value"])
    assert rows["cold"]["met"] == (rows["cold"]["svod_min"] <= rows["cold"]["peer_value"])
    text = bench_onnx.markdown(table)
    assert "\n| tiny | " in text and text.count("\n| tiny | ") == 1 and "geometric mean of 1 models" in text
    assert text.splitlines()[0] == (
        "| model | 1 thread ms: svod_min / ort (ratio) | 2 threads, no spinning ms: svod_min / "
        "ort (ratio) | 2 threads, spinning ms: svod_min / ort (ratio) | peak RSS MiB: svod_min / "
        "ort (ratio) | cold start ms: svod_min / ort (ratio) |"
    )
    profile = rows["profile"]
    assert "conv" in profile["measure"] and "C=3 H=16 W=16 OC=8 KH=3 KW=3" in profile["measure"]
    assert "(svod_min vs onnxruntime): Conv " in profile["measure"]  # both engines' time per kind of op
    assert (
        profile["peer"] == "onnxruntime, a Conv of the same shape" and profile["peer_value"] > 0
    )  # its 8 channels padded to 16
    peak = rows["peak"]  # the top ops' rates are against this core's peak, stated in a row of its own
    assert peak["svod_min"] > 0 and "FLOP/cycle per unit" in peak["measure"] and peak["goal"] == "info"
    top = profile["measure"].split("; top ops (peak %.1f GFLOP/s): " % peak["svod_min"])[1].split("; ")
    assert len(top) == 2 and top[0].startswith("#0 svod_conv2d_gemm") and "GFLOP/s = " in top[0]  # conv, global pool
    assert "% of peak" in top[0] and top[1].startswith("#1 svod_global_avgpool_f32 (C=8 H=16 W=16) ")


def test_the_cold_start_is_the_one_file_runtime_s_own_command() -> None:
    prepared = bench_onnx.Prepared("m", "m.onnx", "m.svod", "gpu_0/data_0", None, "x.npy")
    cmds = bench_onnx.fresh_commands(prepared, "svod_min.pyz")
    assert cmds["svod"] == [sys.executable, "svod_min.pyz", "run", "m.svod", "--input", "gpu_0/data_0=x.npy", "--once"]
    assert cmds["ort"][:2] == [sys.executable, "-c"] and cmds["ort"][-3:] == ["m.onnx", "gpu_0/data_0", "x.npy"]


def test_both_engines_spin_or_neither(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A setting's spinning reaches both engines: onnxruntime's allow_spinning and svod_min's SVOD_NATIVE_SPIN, which
    the bundle's plan binds while it is loaded."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import svod_min

    seen: List[Any] = []
    real_load, real_session = svod_min.load_model, bench_onnx.ort_session
    monkeypatch.setattr(
        svod_min,
        "load_model",
        lambda *a, **k: (
            seen.append(("svod", os.environ.get("SVOD_NATIVE_SPIN"), k["device"].threads)) or real_load(*a, **k)
        ),
    )
    monkeypatch.setattr(
        bench_onnx,
        "ort_session",
        lambda path, threads, spinning: (
            seen.append(("ort", spinning, threads)) or real_session(path, threads, spinning)
        ),
    )
    monkeypatch.setenv("SVOD_NATIVE_SPIN", "on")
    prepared = bench_onnx.prepare("tiny", _tiny_model, str(tmp_path))
    for setting in bench_onnx.timing_settings((1, 2), "both"):
        bench_onnx.speed(prepared, setting, reps=2, pair_seconds=0.0)
    assert seen == [
        ("svod", "on", 1),
        ("ort", False, 1),
        ("svod", "0", 2),
        ("ort", False, 2),
        ("svod", "1", 2),
        ("ort", True, 2),
    ]
    assert os.environ["SVOD_NATIVE_SPIN"] == "on"


# --- the agreement gate: count, names, shapes, then values within the bundle's own tolerance ---------------


def _gate_case(np: Any, change: str) -> Any:
    """svod_min's outputs of a two-output model, changed as ``change`` says, and onnxruntime's."""
    rng = np.random.default_rng(0)
    want = [
        ("y", rng.uniform(-50, 50, (1, 10)).astype(np.float32)),
        ("z", rng.uniform(0.5, 1, (1, 4, 1, 1)).astype(np.float32)),
    ]
    want[0][1][0, :2] = 50.0, 1e-3  # y's largest |value|, and one near zero
    got = {name: value.copy() for name, value in want}
    if change == "beyond":
        got["z"][0, 2] *= 1 + 2e-3
    elif change == "within":
        got["z"][0, 2] *= 1 + 5e-4
        got["y"][0, 1] += 4e-5  # 4 % of a value near zero: within the atol the build records for y (5e-5)
    elif change == "missing":
        del got["z"]
        got["w"] = want[1][1]
    elif change == "fewer":
        del got["z"]
    elif change == "shape":
        got["z"] = got["z"].reshape(1, 4)
    elif change == "nan":
        got["y"][0, 0] = np.nan
    return got, want


GATE = [
    ("same", None),
    ("within", None),
    ("beyond", "output z element 2 is "),
    ("missing", "output z is missing (svod_min gives y, w)"),
    ("fewer", "svod_min gives 1 outputs (y), onnxruntime 2 (y, z)"),
    ("shape", "output z has shape (1, 4), onnxruntime's (1, 4, 1, 1)"),
    ("nan", "output y element 0 is nan"),
]


@pytest.mark.parametrize("change, why", GATE, ids=[c for c, _ in GATE])
def test_the_gate_names_what_differs(change: str, why: Any) -> None:
    np = pytest.importorskip("numpy")
    got, want = _gate_case(np, change)
    pytest.importorskip("onnx")
    from svod_min.onnx.build import RTOL, output_atol

    tols = {name: (RTOL, output_atol(value)) for name, value in want}  # as the build records them
    assert tols["y"][1] == pytest.approx(5e-5) and tols["z"][1] == 1e-5
    found = agreement.disagreement(got, want, tols)
    assert found is None if why is None else found is not None and found.startswith(why), found
    if change == "beyond":
        assert "times the bundle's tolerance (rtol 0.001, atol 1e-05)" in found


def test_the_gate_uses_the_tolerance_the_bundle_records() -> None:
    np = pytest.importorskip("numpy")
    got, want = _gate_case(np, "beyond")
    assert (
        agreement.disagreement(got, want, {"y": (1e-3, 1e-5), "z": (1e-2, 1e-5)}) is None
    )  # a looser record passes it
    assert agreement.disagreement(got, want, {"y": (1e-3, 1e-5)}) == "the bundle records no tolerance for output z"
    model = type("M", (), {"loaded": type("L", (), {"expectations": [Expectation("y", [0.0], 1e-3, 1e-5)]})()})()
    assert agreement.tolerances(model) == {"y": (1e-3, 1e-5)}


class _Changed:
    """A loaded bundle whose outputs come back as a wrong svod_min would give them: 1 % off, missing, or reshaped."""

    def __init__(self, model: Any, change: str) -> None:
        self._model, self._change, self.loaded = model, change, model.loaded

    def run(self, feed: Any) -> Dict[str, Any]:
        out = self._model.run(feed)
        if self._change == "beyond":
            out["y"] = out["y"] * 1.01
        elif self._change == "missing":
            out = {"other": out["y"]}
        elif self._change == "shape":
            out["y"] = out["y"].reshape(1, 8)
        return out


@pytest.mark.parametrize(
    "change, why",
    [
        ("beyond", "1 thread: output y element "),
        ("missing", "1 thread: output y is missing"),
        ("shape", "1 thread: output y has shape (1, 8), onnxruntime's (1, 8, 1, 1)"),
    ],
)
def test_a_model_that_disagrees_is_a_failed_row_not_a_timing(
    change: str, why: str, pyz: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    import svod_min

    real = svod_min.load_model
    monkeypatch.setattr(svod_min, "load_model", lambda *a, **k: _Changed(real(*a, **k), change))
    table = bench_onnx.rows(
        quick=True, threads=(1,), models=[("tiny", _tiny_model)], profile="none", pyz=pyz, openvino=False
    )
    measures = [row["measure"] for row in table if "load average" not in row["measure"]]
    assert len(measures) == 2 and measures[1].startswith("onnx tiny: failed: " + why), measures
    assert not [row for row in table if row["ratio"] is not None]  # nothing was timed
    mean = table[0]
    assert mean["measure"] == "onnx: geometric mean of 0 of 1 models' speed ratios, 1 thread (failed: tiny)"
    assert mean["met"] is False and bench_onnx.markdown(table).count("(goal >= 1, every model measured: not met)") == 1


def test_a_model_svod_min_refuses_is_a_failed_row() -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    def refused() -> Any:
        node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="svod.test")
        graph = helper.make_graph(
            [node],
            "bad",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        )
        return helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("svod.test", 1)]
        )

    table = [
        row
        for row in bench_onnx.rows(quick=True, threads=(1,), models=[("bad", refused)], profile="none", openvino=False)
        if "load average" not in row["measure"]
    ]
    assert len(table) == 2 and table[1]["measure"].startswith("onnx bad: failed: svod_min build bad.onnx failed")
    assert table[1]["met"] is False and "NoSuchOp" in table[1]["measure"]
    assert "0 of 1 models'" in table[0]["measure"] and table[0]["met"] is False and table[0]["ratio"] is None


def test_without_onnxruntime_every_model_gets_a_skip_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    names = ["squeezenet", "resnet50"]
    table = bench_onnx.rows(quick=True, models=[(n, lambda: pytest.fail("nothing is built")) for n in names])
    assert [row["measure"] for row in table] == ["onnx squeezenet", "onnx resnet50"]
    why = bench_onnx.missing_dependency()
    assert why is not None and why.startswith("skipped: needs ")
    assert all(row["peer"] == why and row["met"] is None and row["ratio"] is None for row in table)
    assert bench_onnx.markdown(table).count(": " + why) == 2
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
    except ImportError:
        return
    assert why == "skipped: needs onnxruntime"


def test_initializers_leave_the_graph_inputs() -> None:
    model = zoo.constant_initializers(_tiny_model())
    assert [i.name for i in model.graph.input] == ["x"]
    assert sorted(t.name for t in model.graph.initializer) == ["b", "w"]


# --- the geometric means and --runs, on made-up timings --------------------------------------------------


TWO = bench_onnx.Setting(2, False)


def test_the_geometric_mean_row() -> None:
    row = bench_onnx.geomean_row(TWO, [[0.5, 2.0, 1.0]], [], "v")
    assert row["ratio"] == 1.0 and row["met"] is True and "3 models'" in row["measure"]
    assert (
        row["measure"].endswith("2 threads, no spinning")
        and row["peer"] == "onnxruntime v, 2 threads, allow_spinning=0"
    )
    row = bench_onnx.geomean_row(TWO, [[0.5, 0.5]], [], "v")
    assert math.isclose(row["ratio"], 0.5) and row["met"] is False


def test_a_geometric_mean_with_a_failed_model_is_not_met() -> None:
    row = bench_onnx.geomean_row(TWO, [[2.0, 4.0]], ["vgg19"], "v")
    assert (
        row["ratio"] == pytest.approx(2.83, abs=0.01) and row["met"] is False
    )  # a mean that would be met, without vgg19
    assert (
        row["measure"] == "onnx: geometric mean of 2 of 3 models' speed ratios, 2 threads, no spinning (failed: vgg19)"
    )
    nothing = bench_onnx.geomean_row(TWO, [], ["a", "b"], "v")
    assert nothing["ratio"] is None and nothing["met"] is False and "0 of 2 models'" in nothing["measure"]


def _sample(svod_ms: float, ort_ms: float, rss: Any = (100, 200), cold: Any = (0.2, 0.4)) -> Any:
    fresh = {"svod": [bench_onnx.ChildRun(cold[0], rss[0] << 20)], "ort": [bench_onnx.ChildRun(cold[1], rss[1] << 20)]}
    return bench_onnx.Sample({TWO.label: {"svod": svod_ms / 1e3, "ort": ort_ms / 1e3}}, fresh)


def _settings(runs: int, directory: str = "") -> Any:
    return bench_onnx.Settings((TWO,), 4, 0.0, 1, runs, "v", directory, "svod_min.pyz", "none")


def test_runs_give_each_ratio_its_median_and_spread() -> None:
    samples = {
        "a": [_sample(10, 8), _sample(10, 12), _sample(8, 10, cold=(0.3, 0.3))],  # ratios 0.8, 1.2, 1.25
        "b": [_sample(5, 10), _sample(5, 9), _sample(4, 10)],
    }  # 2.0, 1.8, 2.5
    table = bench_onnx.table_rows(["a", "b"], bench_onnx.Measured(samples, {}, {}), _settings(3))
    rows = {row["measure"].split(":")[0]: row for row in table}
    a = rows["onnx a, 2 threads, no spinning"]
    assert a["measure"] == "onnx a, 2 threads, no spinning: median run [ms]; 3 runs, ratio 0.80-1.25"
    assert (a["svod_min"], a["peer_value"], a["ratio"], a["met"]) == (
        10,
        10,
        1.2,
        True,
    )  # medians of each; median ratio
    mean = table[0]
    assert (
        mean["measure"]
        == "onnx: geometric mean of 2 models' speed ratios, 2 threads, no spinning; 3 runs, ratio 1.26-1.77"
    )
    assert (
        mean["ratio"] == pytest.approx(math.sqrt(1.2 * 1.8), abs=0.005) and mean["met"] is True
    )  # the runs' means 1.26, 1.47, 1.77
    cold = next(r for r in table if r["measure"].startswith("onnx a: cold start"))
    assert cold["measure"].endswith("; 3 runs, ratio 1.00-2.00") and cold["ratio"] == 2.0 and cold["svod_min"] == 200
    assert "| a | 10 / 10 (1.20, runs 0.80-1.25) |" in bench_onnx.markdown(table)


def test_one_run_has_no_spread() -> None:
    table = bench_onnx.table_rows(["a"], bench_onnx.Measured({"a": [_sample(10, 8)]}, {}, {}), _settings(1))
    assert [row["measure"] for row in table][:2] == [
        "onnx: geometric mean of 1 models' speed ratios, 2 threads, no spinning",
        "onnx a, 2 threads, no spinning: median run [ms]",
    ]
    assert table[1]["ratio"] == 0.8 and table[1]["met"] is True


def test_runs_measure_every_model_again_and_drop_a_failed_one(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: List[str] = []
    measured: List[str] = []

    def prepare(name: str, make: Any, directory: str) -> Any:
        built.append(name)
        paths = [os.path.join(directory, name + ext) for ext in (".onnx", ".svod")]
        for path in paths:
            open(path, "w").close()
        return bench_onnx.Prepared(name, paths[0], paths[1], "x", None, "")

    def measure_model(prepared: Any, settings: Any) -> Any:
        measured.append(prepared.name)
        if prepared.name == "flaky" and measured.count("flaky") == 2:
            raise ValueError("outputs differ\nsecond line")
        assert os.path.exists(prepared.svod_path)  # kept between the runs
        return _sample(10, 10)

    monkeypatch.setattr(bench_onnx, "prepare", prepare)
    monkeypatch.setattr(bench_onnx, "measure_model", measure_model)
    result = bench_onnx.measure_all([("a", None), ("flaky", None)], _settings(3, str(tmp_path)))
    assert built == ["a", "flaky"] and measured == ["a", "flaky", "a", "flaky", "a"]
    assert result.failures == {"flaky": "outputs differ"} and len(result.samples["a"]) == 3
    assert os.listdir(str(tmp_path)) == []  # every model's files go after its last run (or its failure)
    table = bench_onnx.table_rows(["a", "flaky"], result, _settings(3))
    assert table[0]["met"] is False and "(failed: flaky)" in table[0]["measure"]
    assert table[-1]["measure"] == "onnx flaky: failed: outputs differ" and table[-1]["ratio"] is None


def test_pairs_alternate_which_engine_runs_first() -> None:
    order: List[str] = []
    medians = bench_onnx.alternating_medians(
        {"svod": lambda: order.append("svod"), "ort": lambda: order.append("ort")}, 4
    )
    assert order == ["svod", "ort", "ort", "svod", "svod", "ort", "ort", "svod"] and set(medians) == {"svod", "ort"}


def test_a_run_after_the_other_engine_waits_for_its_spinning_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    events: List[str] = []
    monkeypatch.setattr(bench_onnx.time, "sleep", lambda s: events.append("pause %g" % s))
    bench_onnx.alternating_medians({"svod": lambda: events.append("svod"), "ort": lambda: events.append("ort")}, 4, 0.1)
    switch = ["pause 0.1"]
    assert events == ["svod"] + switch + ["ort", "ort"] + switch + ["svod", "svod"] + switch + [
        "ort",
        "ort",
    ] + switch + ["svod"]


def test_fresh_processes_alternate_too(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    order: List[str] = []
    monkeypatch.setattr(bench_onnx, "run_child", lambda cmd, env, who: order.append(who) or bench_onnx.ChildRun(0.1, 1))
    pyz = tmp_path / "svod_min.pyz"
    pyz.write_text("")
    prepared = bench_onnx.Prepared("m", "m.onnx", "m.svod", "x", None, "x.npy")
    runs = bench_onnx.fresh_processes(prepared, str(pyz), 2, warm=True)
    assert order == ["svod_min", "onnxruntime"] * 2 + ["onnxruntime", "svod_min"] and len(runs["svod"]) == 2


def test_op_profile_matches_a_convolution_to_onnxruntime_s_padded_one() -> None:
    from svod_min.perf import op_profile

    fixed = dict(N=1, C=512, H=13, W=13, OC=1000, KH=1, KW=1, sh=1, sw=1, pt=0, pl=0, pb=0, pr=0, dh=1, dw=1, groups=1)
    key = op_profile.conv_key(fixed)
    assert key == (1000, 512, 1, 1, 13, 13, 13, 13)
    strided = op_profile.conv_key(dict(fixed, H=224, W=224, KH=7, KW=7, sh=2, sw=2, pt=3, pl=3, pb=3, pr=3))
    assert strided is not None and strided[-2:] == (112, 112)
    nodes = [
        op_profile.OrtNode("a", "Conv", 0.002, (1008, 512, 1, 1, 13, 13, 13, 13)),  # 1000 channels padded to 1008
        op_profile.OrtNode("b", "FusedConv", 0.004, (1008, 512, 1, 1, 13, 13, 13, 13)),
        op_profile.OrtNode("c", "Conv", 1.0, (1024, 512, 1, 1, 13, 13, 13, 13)),  # another layer: more channels
        op_profile.OrtNode("d", "MaxPool", 1.0, None),
    ]
    assert op_profile.ort_conv_seconds(nodes, key) == pytest.approx(0.003)
    assert op_profile.conv_key({"N": 1, "C": 4}) is None
    assert [
        op_profile.kind_of(n) for n in ("svod_conv2d_gemm_f32", "svod_onnx_pool_1a", "FusedGemm", "svod_onnx_ew")
    ] == ["Conv", "Pool", "Gemm", "other"]


def test_generated_kernels_count_by_family() -> None:
    from svod_min.perf import op_profile

    times = [
        op_profile.OpTime(0, "svod_onnx_conv_dce6cae76ced", "", 0.002, None),
        op_profile.OpTime(1, "svod_onnx_conv_57f7f6c78b0a", "", 0.002, None),
        op_profile.OpTime(2, "svod_conv2d_gemm_f32_8x32_relu_bias", "C=3", 0.003, 10**6),
        op_profile.OpTime(3, "svod_permute_x4", "", 0.001, None),
    ]
    assert op_profile.kernel_families(times) == [
        ("svod_onnx_conv", 0.004),
        ("svod_conv2d_gemm_f32_8x32_relu_bias", 0.003),
        ("svod_permute_x4", 0.001),
    ]
