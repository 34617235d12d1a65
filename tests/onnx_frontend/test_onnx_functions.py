"""Ops ONNX defines as functions, expanded where the op table has no lowering of their own: each against onnxruntime's
own kernels on seeded random inputs; ops the table lowers stay themselves; a body that needs an op svod_min lacks is
still refused by name."""

from __future__ import annotations

import os

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model, max_rel_error, run_ort, typed_model  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import OPS  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402

RNG = np.random.default_rng(41)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = [
    # (name, node, inputs, constants, opset)
    (
        "Attention-causal",
        helper.make_node("Attention", ["q", "k", "v"], ["y"], is_causal=1),
        [("q", (2, 3, 6, 8)), ("k", (2, 3, 6, 8)), ("v", (2, 3, 6, 8))],
        {},
        23,
    ),
    (
        "Attention-3d-gqa-mask",
        helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], q_num_heads=4, kv_num_heads=2),
        [("q", (2, 5, 32)), ("k", (2, 7, 16)), ("v", (2, 7, 16))],
        {"mask": _r(5, 7)},
        23,
    ),
    (
        "RMSNormalization",
        helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=1e-5),
        [("x", (2, 5, 16))],
        {"scale": _r(16)},
        23,
    ),
    ("Swish", helper.make_node("Swish", ["x"], ["y"], alpha=0.7), [("x", (3, 17))], {}, 24),
    (
        "RotaryEmbedding",
        helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"]),
        [("x", (2, 3, 4, 8))],
        {"cos": _r(6, 4), "sin": _r(6, 4), "pos": np.array([[0, 2, 4, 5], [1, 1, 3, 0]], np.int64)},
        23,
    ),
]


@pytest.mark.parametrize("name, node, inputs, consts, opset", CASES, ids=[c[0] for c in CASES])
def test_function_op_matches_onnxruntime(tmp_path, name, node, inputs, consts, opset):
    model = graph_model([node], inputs, ["y"], opset, consts)
    feeds = {n: _r(*s) for n, s in inputs}
    want = run_ort(model, feeds)[0]
    got = build_and_load(model, str(tmp_path)).run(feeds)["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    assert max_rel_error(got, want) < 1e-4  # float32 sums in another order


def _graph(tmp_path, model):
    path = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, path)
    return read_graph(path, {}, {}, OPS)


def test_an_op_the_table_lowers_is_not_expanded(tmp_path):
    model = graph_model([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", (2, 8))], ["y"], 13, {})
    assert [n.op for n in _graph(tmp_path, model).nodes] == ["Softmax"]


def test_attention_becomes_ops_the_table_lowers(tmp_path):
    model = CASES[0]
    graph = _graph(tmp_path, graph_model([model[1]], model[2], ["y"], model[4], model[3]))
    ops = {n.op for n in graph.nodes}
    assert "Attention" not in ops and {"MatMul", "Softmax"} <= ops and ops <= set(OPS)


def test_a_body_needing_an_op_svod_min_lacks_is_refused_by_name(tmp_path):
    # CenterCropPad's size comes from a graph input here: its body's Pad has no static shape, named in the refusal
    node = helper.make_node("CenterCropPad", ["x", "shape"], ["y"])
    inputs = [("x", (4, 6), onnx.TensorProto.FLOAT), ("shape", (2,), onnx.TensorProto.INT64)]
    model = typed_model([node], inputs, ["y"], 18, {})
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["h", "w"]))
    with pytest.raises(UnsupportedModelError, match="no static shape"):
        _graph(tmp_path, model)
