"""onnxruntime's contrib ops (com.microsoft, and the default domain's RMS norm) rewritten into ONNX ops at the front
end: each against onnxruntime's own CPU kernels on seeded random inputs, at an opset with Gelu/LayerNormalization
(rewritten into them) and at an older one (decomposed); unsupported ones refused by name."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, max_rel_error, run_ort  # noqa: E402

from svod_min.error import ModelFileError, UnsupportedModelError  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402

RNG = np.random.default_rng(40)
MS = "com.microsoft"


def _model(
    nodes: List[Any],
    inputs: Sequence[Tuple[str, Sequence[int]]],
    outputs: Sequence[str],
    opset: int,
    consts: Dict[str, Any],
) -> Any:
    graph = helper.make_graph(
        nodes,
        "contrib",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
        # outputs of the input's rank, dims unknown: neither onnx nor the checker knows the contrib ops' shapes
        [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, ["d%d" % i for i in range(len(inputs[0][1]))])
            for o in outputs
        ],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _r(*shape: int, scale: float = 1.0) -> Any:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


H = 16
X = [("x", (2, 5, H))]
NORM = {"skip": _r(2, 5, H), "gamma": _r(H) + 1, "beta": _r(H), "bias": _r(H)}
CASES: List[Tuple[str, List[Any], Any, List[str], Dict[str, Any]]] = [
    ("Gelu", [helper.make_node("Gelu", ["x"], ["y"], domain=MS)], X, ["y"], {}),
    ("BiasGelu", [helper.make_node("BiasGelu", ["x", "b"], ["y"], domain=MS)], X, ["y"], {"b": _r(H)}),
    ("FastGelu", [helper.make_node("FastGelu", ["x"], ["y"], domain=MS)], X, ["y"], {}),
    ("FastGelu-bias", [helper.make_node("FastGelu", ["x", "b"], ["y"], domain=MS)], X, ["y"], {"b": _r(H)}),
    ("QuickGelu", [helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=1.5)], X, ["y"], {}),
    (
        "SkipLayerNormalization",
        [
            helper.make_node(
                "SkipLayerNormalization",
                ["x", "skip", "gamma", "beta", "bias"],
                ["y", "", "", "sum"],
                domain=MS,
                epsilon=1e-5,
            )
        ],
        X,
        ["y", "sum"],
        NORM,
    ),
    (
        "SkipLayerNormalization-nobias",
        [helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y"], domain=MS)],
        X,
        ["y"],
        NORM,
    ),
    (
        "SkipSimplifiedLayerNormalization",
        [
            helper.make_node(
                "SkipSimplifiedLayerNormalization",
                ["x", "skip", "gamma", "bias"],
                ["y", "", "", "sum"],
                domain=MS,
                epsilon=1e-6,
            )
        ],
        X,
        ["y", "sum"],
        NORM,
    ),
    (
        "SimplifiedLayerNormalization",
        [helper.make_node("SimplifiedLayerNormalization", ["x", "gamma"], ["y"], epsilon=1e-6, axis=-1)],
        X,
        ["y"],
        NORM,
    ),
    (
        "FusedMatMul",
        [helper.make_node("FusedMatMul", ["x", "w"], ["y"], domain=MS, alpha=0.5, transA=0, transB=1)],
        X,
        ["y"],
        {"w": _r(2, 7, H)},
    ),
    (
        "FusedMatMul-transA",
        [helper.make_node("FusedMatMul", ["x", "w"], ["y"], domain=MS, alpha=2.0, transA=1)],
        X,
        ["y"],
        {"w": _r(5, 3)},
    ),
    (
        "FusedConv-relu-Z",
        [
            helper.make_node(
                "FusedConv",
                ["c", "w", "b", "z"],
                ["y"],
                domain=MS,
                activation="Relu",
                pads=[1, 1, 1, 1],
                kernel_shape=[3, 3],
            )
        ],
        [("c", (1, 4, 6, 7))],
        ["y"],
        {"w": _r(8, 4, 3, 3, scale=0.3), "b": _r(8), "z": _r(1, 8, 6, 7)},
    ),
    (
        "FusedConv-clip",
        [
            helper.make_node(
                "FusedConv",
                ["c", "w"],
                ["y"],
                domain=MS,
                activation="Clip",
                activation_params=[-0.5, 0.7],
                strides=[2, 2],
            )
        ],
        [("c", (1, 4, 6, 7))],
        ["y"],
        {"w": _r(8, 4, 3, 3, scale=0.3)},
    ),
    (
        "FusedConv-leaky",
        [
            helper.make_node(
                "FusedConv", ["c", "w", "b"], ["y"], domain=MS, activation="LeakyRelu", activation_params=[0.1]
            )
        ],
        [("c", (1, 4, 6, 7))],
        ["y"],
        {"w": _r(8, 4, 3, 3, scale=0.3), "b": _r(8)},
    ),
]
#: the newer opset rewrites into Gelu / LayerNormalization; the older one decomposes them
OPSETS = {"Gelu": (13, 20), "FastGelu": (13, 20), "SkipLayerNormalization": (13, 17), "FusedConv-clip": (9, 13)}


@pytest.mark.parametrize(
    "name,opset",
    [(c[0], o) for c in CASES for o in OPSETS.get(c[0], (13,))],
    ids=lambda v: str(v),
)
def test_contrib_op_matches_onnxruntime(name: str, opset: int, tmp_path: Any) -> None:
    _, nodes, inputs, outputs, consts = next(c for c in CASES if c[0] == name)
    model = _model(nodes, inputs, outputs, opset, {k: v for k, v in consts.items() if k in _used(nodes)})
    feeds = {n: _r(*s) for n, s in inputs}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for out, ref in zip(outputs, want):
        assert got[out].shape == ref.shape
        assert float(np.std(ref)) > 0
        assert max_rel_error(got[out], ref) < 1e-4, (name, out)


def test_bias_add_matches_numpy(tmp_path: Any) -> None:
    """BiasAdd has no CPU kernel in onnxruntime: numpy (float64) is the reference."""
    consts = {"b": _r(H), "s": _r(2, 5, H)}
    model = _model([helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)], X, ["y"], 13, consts)
    x = _r(2, 5, H)
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    want = x.astype(np.float64) + consts["b"] + consts["s"]
    assert max_rel_error(got, want) < 1e-5  # two float32 roundings


def _used(nodes: List[Any]) -> set:
    return {n for node in nodes for n in node.input}


def _read(model: Any, tmp_path: Any) -> Any:
    path = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, path)
    return read_graph(path, {}, {})


def test_rewrite_leaves_no_contrib_node(tmp_path: Any) -> None:
    nodes = [helper.make_node("FastGelu", ["x"], ["y"], domain=MS)]
    graph = _read(_model(nodes, X, ["y"], 20, {}), tmp_path)
    assert [n.op for n in graph.nodes] == ["Gelu"] and graph.nodes[0].attrs["approximate"] == "tanh"


def test_unsupported_contrib_op_refused_by_name(tmp_path: Any) -> None:
    nodes = [helper.make_node("GroupQueryAttention", ["x"], ["y"], domain=MS, name="att0", num_heads=2)]
    with pytest.raises(
        UnsupportedModelError,
        match=r"node 0 \(GroupQueryAttention, 'att0'\): com.microsoft op GroupQueryAttention is not",
    ):
        _read(_model(nodes, X, ["y"], 13, {}), tmp_path)


def test_read_training_output_refused(tmp_path: Any) -> None:
    nodes = [
        helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y", "mean"], domain=MS),
        helper.make_node("Add", ["y", "mean"], ["z"]),
    ]
    with pytest.raises(UnsupportedModelError, match=r"output 1 \(mean, 'mean'\) is read"):
        _read(_model(nodes, X, ["z"], 13, NORM), tmp_path)


def test_fused_conv_unknown_activation_refused(tmp_path: Any) -> None:
    nodes = [helper.make_node("FusedConv", ["c", "w"], ["y"], domain=MS, activation="Elu")]
    model = _model(nodes, [("c", (1, 4, 6, 7))], ["y"], 13, {"w": _r(8, 4, 3, 3)})
    with pytest.raises(UnsupportedModelError, match=r"FusedConv.*activation 'Elu' is not supported"):
        _read(model, tmp_path)


def test_attribute_of_the_wrong_kind_refused(tmp_path: Any) -> None:
    nodes = [helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha="big")]
    with pytest.raises(ModelFileError, match=r"node 0 \(QuickGelu\): an attribute has a value of the wrong kind"):
        _read(_model(nodes, X, ["y"], 13, {}), tmp_path)


def _lstm_weights(directions: int, rows: int, hidden: int, dtype: Any, per_column: bool) -> Dict[str, Any]:
    info = np.iinfo(dtype)
    columns = [directions, 4 * hidden] if per_column else [directions]
    return {
        "q": RNG.integers(info.min, info.max + 1, [directions, rows, 4 * hidden]).astype(dtype),
        "scale": (RNG.random(columns) * 0.02 + 0.005).astype(np.float32),
        # onnxruntime takes int8 weights with zero point 0 only
        "zero": (RNG.integers(120, 137, columns) if info.min == 0 else np.zeros(columns)).astype(dtype),
    }


@pytest.mark.parametrize("dtype,per_column,direction", [(np.int8, True, "bidirectional"), (np.uint8, False, "forward")])
def test_dynamic_quantize_lstm(dtype: Any, per_column: bool, direction: str, tmp_path: Any) -> None:
    """Against onnxruntime's LSTM on the dequantized weights (the same computation), and within onnxruntime's own
    quantization of X and H of its DynamicQuantizeLSTM."""
    steps, batch, size, hidden = 6, 2, 5, 4
    directions = 2 if direction == "bidirectional" else 1
    w = _lstm_weights(directions, size, hidden, dtype, per_column)
    r = _lstm_weights(directions, hidden, hidden, dtype, per_column)
    bias = _r(directions, 8 * hidden, scale=0.1)
    names = ["x", "W", "R", "B", "", "", "", "", "ws", "wz", "rs", "rz"]
    node = helper.make_node(
        "DynamicQuantizeLSTM", names, ["y", "yh"], domain=MS, hidden_size=hidden, direction=direction
    )
    consts = {"W": w["q"], "R": r["q"], "B": bias, "ws": w["scale"], "wz": w["zero"], "rs": r["scale"], "rz": r["zero"]}
    graph = helper.make_graph(
        [node],
        "dql",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [steps, batch, size])],
        [
            helper.make_tensor_value_info(o, TensorProto.FLOAT, ["d%d" % i for i in range(n)])
            for o, n in (("y", 4), ("yh", 3))
        ],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8

    def dequantized(q: Dict[str, Any]) -> Any:
        scale, zero = q["scale"], q["zero"].astype(np.float32)
        if scale.ndim == 1:
            scale, zero = scale[:, None], zero[:, None]
        return ((q["q"].astype(np.float32) - zero[:, None, :]) * scale[:, None, :]).transpose(0, 2, 1).copy()

    float_graph = helper.make_graph(
        [helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=hidden, direction=direction)],
        "lstm",
        list(graph.input),
        list(graph.output),
        [numpy_helper.from_array(a, k) for k, a in (("W", dequantized(w)), ("R", dequantized(r)), ("B", bias))],
    )
    float_model = helper.make_model(float_graph, opset_imports=[helper.make_opsetid("", 17)])
    x = _r(steps, batch, size)
    got = build_and_load(model, str(tmp_path)).run({"x": x})
    for name, same, quantized in zip(("y", "yh"), run_ort(float_model, {"x": x}), run_ort(model, {"x": x})):
        assert max_rel_error(got[name], same) < 1e-4, name
        largest = float(np.max(np.abs(quantized)))
        assert float(np.max(np.abs(got[name] - quantized))) < 5e-2 * largest, name
