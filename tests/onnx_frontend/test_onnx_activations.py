"""Gelu and PRelu as epilogues: fused into the Conv (blocked and conv2d_gemm) and Gemm before them, checked
against onnxruntime, and checked fused (no Gelu or PRelu node left after the passes); PRelu on its own, with a
broadcasting slope that is a graph input."""

from __future__ import annotations

import collections
import os
from typing import Any, Dict, List, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model, max_rel_error, random_inputs, run_ort  # noqa: E402

from svod_min.onnx import build  # noqa: E402,F401 - fills the op table
from svod_min.onnx.frontend.layout import block_channels  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402
from svod_min.onnx.frontend.passes import run_passes  # noqa: E402
from svod_min.onnx.frontend.table import check_graph  # noqa: E402

OPSET = 20  # Gelu's first opset
RNG = np.random.default_rng(21)


def _ops_after_passes(model: Any, directory: str) -> Dict[str, int]:
    path = os.path.join(directory, "passes.onnx")
    onnx.save(model, path)
    graph = read_graph(path, {}, {})
    check_graph(graph)
    return dict(collections.Counter(n.op for n in block_channels(run_passes(graph)).nodes))


def _check(model: Any, tmp_path: Any, gone: str) -> Dict[str, int]:
    ops = _ops_after_passes(model, str(tmp_path))
    assert ops.get(gone, 0) == 0, ops
    feeds = random_inputs(model)
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    # each engine is up to ~1e-4 from float64 at the measure's floor (1e-3 x the largest output) on these 144-term
    # sums, in an order that differs by target (AVX2 hosts included), so the two may be 2e-4 apart
    assert max_rel_error(got["y"], want[0]) < 3e-4
    assert float(np.std(want[0])) > 0
    return ops


def _conv_then(act: List[Any], oc: int, consts: Dict[str, Any]) -> Any:
    consts = dict(
        consts,
        w=(RNG.standard_normal((oc, 16, 3, 3)) * 0.2).astype(np.float32),
        b=(RNG.standard_normal(oc) * 0.3).astype(np.float32),
    )
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1])] + act
    return graph_model(nodes, [("x", (1, 16, 9, 10))], ["y"], OPSET, consts)


CONV_CASES: List[Tuple[str, int, List[Any], Dict[str, Any]]] = [
    ("gelu-blocked", 32, [helper.make_node("Gelu", ["c"], ["y"])], {}),
    ("gelu-tanh-blocked", 32, [helper.make_node("Gelu", ["c"], ["y"], approximate="tanh")], {}),
    ("gelu-conv2d_gemm", 8, [helper.make_node("Gelu", ["c"], ["y"])], {}),  # < 16 output channels: not blocked
    ("prelu-scalar-blocked", 32, [helper.make_node("PRelu", ["c", "s"], ["y"])], {"s": np.array([0.3], np.float32)}),
    (
        "prelu-scalar-conv2d_gemm",
        8,
        [helper.make_node("PRelu", ["c", "s"], ["y"])],
        {"s": np.array([-0.7], np.float32)},
    ),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[c[0] for c in CONV_CASES])
def test_conv_activation_is_fused(case: Tuple[str, int, List[Any], Dict[str, Any]], tmp_path: Any) -> None:
    label, oc, act, consts = case
    _check(_conv_then(act, oc, consts), tmp_path, act[0].op_type)


@pytest.mark.parametrize("act", ["Gelu", "PRelu"])
def test_gemm_activation_is_fused(act: str, tmp_path: Any) -> None:
    consts = {"b": (RNG.standard_normal((20, 12)) * 0.3).astype(np.float32), "s": np.array(0.25, np.float32)}
    nodes = [
        helper.make_node("Gemm", ["x", "b"], ["g"]),
        helper.make_node(act, ["g"] + (["s"] if act == "PRelu" else []), ["y"]),
    ]
    _check(graph_model(nodes, [("x", (3, 20))], ["y"], OPSET, consts), tmp_path, act)


def test_prelu_with_a_broadcast_input_slope(tmp_path: Any) -> None:
    model = graph_model(
        [helper.make_node("PRelu", ["x", "s"], ["y"])], [("x", (2, 6, 4, 5)), ("s", (6, 1, 1))], ["y"], OPSET, {}
    )
    feeds = random_inputs(model)
    want = run_ort(model, feeds)
    assert np.array_equal(build_and_load(model, str(tmp_path)).run(feeds)["y"], want[0])


SILU_CASES = {
    # a per-channel scale and shift (an Affine, as the dequantization of an int8-dynamic model's convolution ends)
    "affine": (
        [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Add", ["m", "t"], ["a"])],
        {
            "s": (RNG.uniform(0.5, 2.0, (6, 1, 1))).astype(np.float32),
            "t": (RNG.standard_normal((6, 1, 1))).astype(np.float32),
        },
    ),
    "add": (
        [helper.make_node("Add", ["x", "z"], ["a"])],
        {"z": (RNG.standard_normal((1, 6, 5, 7)) * 3).astype(np.float32)},
    ),
}


@pytest.mark.parametrize("order", ["a-first", "sigmoid-first"])
@pytest.mark.parametrize("case", sorted(SILU_CASES))
def test_silu_after_an_elementwise_node_runs_in_its_store(case: str, order: str, tmp_path: Any) -> None:
    """``a * Sigmoid(a)`` (either operand order) after an Affine or an Add: no Sigmoid or Mul kernel is left, and the
    result matches onnxruntime's (inputs up to +-10: both tails of the sigmoid)."""
    head, consts = SILU_CASES[case]
    mul_inputs = ["a", "sg"] if order == "a-first" else ["sg", "a"]
    nodes = head + [helper.make_node("Sigmoid", ["a"], ["sg"]), helper.make_node("Mul", mul_inputs, ["y"])]
    model = graph_model(nodes, [("x", (1, 6, 5, 7))], ["y"], OPSET, consts)
    ops = _ops_after_passes(model, str(tmp_path))
    assert ops.get("Sigmoid", 0) == 0 and ops.get("Mul", 0) == 0, ops
    feeds = {"x": RNG.uniform(-10, 10, (1, 6, 5, 7)).astype(np.float32)}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    assert max_rel_error(got["y"], want[0]) < 1e-4


def test_a_sigmoid_read_elsewhere_is_not_fused(tmp_path: Any) -> None:
    """The Sigmoid's result is also an output: the SiLU cannot swallow it."""
    nodes = [
        helper.make_node("Add", ["x", "z"], ["a"]),
        helper.make_node("Sigmoid", ["a"], ["sg"]),
        helper.make_node("Mul", ["a", "sg"], ["y"]),
    ]
    consts = {"z": np.ones((1, 6, 5, 7), np.float32)}
    model = graph_model(nodes, [("x", (1, 6, 5, 7))], ["y", "sg"], OPSET, consts)
    ops = _ops_after_passes(model, str(tmp_path))
    assert ops.get("Sigmoid", 0) == 1, ops
    feeds = {"x": RNG.uniform(-4, 4, (1, 6, 5, 7)).astype(np.float32)}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    assert max_rel_error(got["y"], want[0]) < 1e-4 and max_rel_error(got["sg"], want[1]) < 1e-4
