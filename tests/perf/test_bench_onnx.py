"""``bench --only onnx`` (svod_min/perf/benchmarks/bench_onnx.py): its rows on one tiny model, its skip rows.

The light models take minutes; these tests give the benchmark a three-node model built with
onnx.helper, at one thread, in quick mode, and check the rows' fields and arithmetic (never the
times themselves: speed lives in the benchmark's ratios).
"""

from __future__ import annotations

import math
import sys
from typing import Any, Dict, List

import pytest

from svod_min.perf.bench_suite import KEYS
from svod_min.perf.benchmarks import bench_onnx


def _tiny_model() -> Any:
    """Conv 3->8 3x3 + Relu + GlobalAveragePool on 1x3x16x16, weights as initializers."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, 8).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["y"])]  # fmt: skip
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16]),
                                              helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 3, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1, 1])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _by_kind(table: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    kinds = {"load average": "load", "geometric mean": "mean", "median run": "speed", "peak RSS": "rss", "cold start": "cold",
             "profile": "profile"}  # fmt: skip
    found = {}
    for row in table:
        kind = [k for text, k in kinds.items() if text in row["measure"]]
        assert len(kind) == 1, row["measure"]
        assert kind[0] not in found, row["measure"]
        found[kind[0]] = row
    return found


def test_rows_of_one_tiny_model(pyz: str) -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    table = bench_onnx.rows(quick=True, threads=(1,), models=[("tiny", _tiny_model)], profile="all", pyz=pyz)
    assert all(set(row) == set(KEYS) for row in table)
    assert not [row for row in table if "failed" in row["measure"]], table
    rows = _by_kind(table)
    assert set(rows) == {"load", "mean", "speed", "rss", "cold", "profile"}
    assert rows["load"]["goal"] == "info" and "at the start" in rows["load"]["measure"]
    speed = rows["speed"]
    assert speed["measure"] == "onnx tiny, 1 thread: median run [ms]" and "1 thread" in speed["peer"]
    assert speed["svod_min"] > 0 and speed["peer_value"] > 0
    assert speed["ratio"] == pytest.approx(speed["peer_value"] / speed["svod_min"], rel=0.05, abs=0.02)
    assert speed["met"] == (speed["ratio"] >= bench_onnx.GOAL_FLOOR)
    assert rows["mean"]["ratio"] == speed["ratio"] and rows["mean"]["met"] == (speed["ratio"] >= bench_onnx.GOAL_GEOMEAN)
    for kind in ("rss", "cold"):
        row = rows[kind]
        assert row["svod_min"] > 0 and row["peer_value"] > 0 and row["peer"].startswith("onnxruntime ")
        assert row["ratio"] == pytest.approx(row["peer_value"] / row["svod_min"], rel=0.05, abs=0.02)
    assert rows["rss"]["svod_min"] < 1024  # MiB: a tiny model's process, not the benchmark's own size
    assert rows["rss"]["met"] == (rows["rss"]["svod_min"] <= bench_onnx.GOAL_RSS * rows["rss"]["peer_value"])
    assert rows["cold"]["met"] == (rows["cold"]["svod_min"] <= rows["cold"]["peer_value"])
    text = bench_onnx.markdown(table)
    assert "\n| tiny | " in text and text.count("\n| tiny | ") == 1 and "geometric mean of 1 models" in text
    profile = rows["profile"]
    assert "conv" in profile["measure"] and "C=3 H=16 W=16 OC=8 KH=3 KW=3" in profile["measure"]
    assert "(svod_min vs onnxruntime): Conv " in profile["measure"]  # both engines' time per kind of op
    assert profile["peer"] == "onnxruntime, a Conv of the same shape" and profile["peer_value"] > 0  # its 8 channels padded to 16


def test_a_model_svod_min_refuses_is_a_failed_row() -> None:
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    def refused() -> Any:
        node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="svod.test")
        graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])  # fmt: skip
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("svod.test", 1)])

    table = [row for row in bench_onnx.rows(quick=True, threads=(1,), models=[("bad", refused)], profile="none")
             if "load average" not in row["measure"]]  # fmt: skip
    assert len(table) == 1 and table[0]["measure"].startswith("onnx bad: failed: svod_min build bad.onnx failed")
    assert table[0]["met"] is False and "NoSuchOp" in table[0]["measure"]


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
    model = bench_onnx.constant_initializers(_tiny_model())
    assert [i.name for i in model.graph.input] == ["x"]
    assert sorted(t.name for t in model.graph.initializer) == ["b", "w"]


def test_the_geometric_mean_row() -> None:
    row = bench_onnx.geomean_row(2, [0.5, 2.0, 1.0], "peer")
    assert row["ratio"] == 1.0 and row["met"] is True and "3 models" in row["measure"] and "2 threads" in row["measure"]
    row = bench_onnx.geomean_row(1, [0.5, 0.5], "peer")
    assert math.isclose(row["ratio"], 0.5) and row["met"] is False


def test_op_profile_matches_a_convolution_to_onnxruntime_s_padded_one() -> None:
    from svod_min.perf import op_profile

    fixed = dict(N=1, C=512, H=13, W=13, OC=1000, KH=1, KW=1, sh=1, sw=1, pt=0, pl=0, pb=0, pr=0, dh=1, dw=1, groups=1)
    key = op_profile.conv_key(fixed)
    assert key == (1000, 512, 1, 1, 13, 13, 13, 13)
    strided = op_profile.conv_key(dict(fixed, H=224, W=224, KH=7, KW=7, sh=2, sw=2, pt=3, pl=3, pb=3, pr=3))
    assert strided is not None and strided[-2:] == (112, 112)
    nodes = [op_profile.OrtNode("a", "Conv", 0.002, (1008, 512, 1, 1, 13, 13, 13, 13)),  # 1000 channels padded to 1008
             op_profile.OrtNode("b", "FusedConv", 0.004, (1008, 512, 1, 1, 13, 13, 13, 13)),
             op_profile.OrtNode("c", "Conv", 1.0, (1024, 512, 1, 1, 13, 13, 13, 13)),  # another layer: more channels
             op_profile.OrtNode("d", "MaxPool", 1.0, None)]  # fmt: skip
    assert op_profile.ort_conv_seconds(nodes, key) == pytest.approx(0.003)
    assert op_profile.conv_key({"N": 1, "C": 4}) is None
    assert [op_profile.kind_of(n) for n in ("svod_conv2d_gemm_f32", "svod_onnx_pool_1a", "FusedGemm", "svod_onnx_ew")] == \
        ["Conv", "Pool", "Gemm", "other"]


def test_generated_kernels_count_by_family() -> None:
    from svod_min.perf import op_profile

    times = [op_profile.OpTime(0, "svod_onnx_conv_dce6cae76ced", "", 0.002, None),
             op_profile.OpTime(1, "svod_onnx_conv_57f7f6c78b0a", "", 0.002, None),
             op_profile.OpTime(2, "svod_conv2d_gemm_f32_8x32_relu_bias", "C=3", 0.003, 10 ** 6),
             op_profile.OpTime(3, "svod_permute_x4", "", 0.001, None)]  # fmt: skip
    assert op_profile.kernel_families(times) == [("svod_onnx_conv", 0.004), ("svod_conv2d_gemm_f32_8x32_relu_bias", 0.003),
                                                 ("svod_permute_x4", 0.001)]  # fmt: skip
