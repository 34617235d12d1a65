"""Each op's lowering against onnxruntime on single-node models: attributes, broadcasting, library vs generated
paths."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, max_rel_error, random_inputs, run_ort, single_node  # noqa: E402

rng = np.random.default_rng(7)


def _w(*shape):
    return rng.standard_normal(shape).astype(np.float32) * 0.3


CASES = [
    ("relu", "Relu", [("x", (2, 3, 4))], {}, {}),
    ("sigmoid", "Sigmoid", [("x", (5, 7))], {}, {}),
    ("tanh", "Tanh", [("x", (5, 7))], {}, {}),
    ("exp", "Exp", [("x", (33,))], {}, {}),
    ("neg", "Neg", [("x", (33,))], {}, {}),
    ("abs", "Abs", [("x", (33,))], {}, {}),
    ("leaky", "LeakyRelu", [("x", (4, 9))], {}, {"alpha": 0.2}),
    ("hardsigmoid", "HardSigmoid", [("x", (4, 9))], {}, {"alpha": 0.3, "beta": 0.4}),
    ("hardswish", "HardSwish", [("x", (4, 9))], {}, {}),
    ("elu", "Elu", [("x", (4, 9))], {}, {"alpha": 0.7}),
    ("erf", "Erf", [("x", (4, 9))], {}, {}),
    ("gelu", "Gelu", [("x", (4, 9))], {}, {"_opset": 20}),
    ("gelu_tanh", "Gelu", [("x", (4, 9))], {}, {"approximate": "tanh", "_opset": 20}),
    ("softmax_opset11", "Softmax", [("x", (2, 5, 3))], {}, {"axis": 1, "_opset": 11}),
    ("reduce_sum_opset11", "ReduceSum", [("x", (2, 3, 4))], {}, {"axes": [1], "_opset": 11}),
    ("reciprocal", "Reciprocal", [("x", (4, 9))], {}, {}),
    ("clip", "Clip", [("x", (4, 9))], {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}, {}),
    ("add_same", "Add", [("a", (3, 5)), ("b", (3, 5))], {}, {}),
    ("add_bcast", "Add", [("a", (2, 3, 4, 5)), ("b", (3, 1, 5))], {}, {}),
    ("sub_bcast", "Sub", [("a", (2, 3, 4)), ("b", (4,))], {}, {}),
    ("mul_scalar", "Mul", [("a", (2, 3, 4))], {"b": np.array(1.5, np.float32)}, {}),
    ("div_bcast", "Div", [("a", (2, 1, 4)), ("b", (1, 3, 1))], {}, {}),
    ("pow", "Pow", [("a", (2, 3))], {"b": np.array([2.0, 3.0, 1.0], np.float32)}, {}),
    ("sum3", "Sum", [("a", (2, 3)), ("b", (2, 3)), ("c", (3,))], {}, {}),
    ("max3", "Max", [("a", (2, 3)), ("b", (2, 3)), ("c", (1,))], {}, {}),
    ("min2", "Min", [("a", (2, 3)), ("b", (2, 3))], {}, {}),
    ("mean2", "Mean", [("a", (2, 3)), ("b", (2, 3))], {}, {}),
    ("conv", "Conv", [("x", (1, 3, 9, 9))], {"w": _w(4, 3, 3, 3), "b": _w(4)}, {"pads": [1, 1, 1, 1]}),
    (
        "conv_stride_dil",
        "Conv",
        [("x", (2, 3, 11, 10))],
        {"w": _w(4, 3, 3, 2)},
        {"strides": [2, 1], "dilations": [2, 1]},
    ),
    ("conv_1x1", "Conv", [("x", (1, 8, 5, 5))], {"w": _w(6, 8, 1, 1), "b": _w(6)}, {}),
    (
        "conv_groups",
        "Conv",
        [("x", (1, 4, 6, 6))],
        {"w": _w(6, 2, 3, 3), "b": _w(6)},
        {"group": 2, "pads": [1, 1, 1, 1]},
    ),
    ("conv_groups_1x1", "Conv", [("x", (1, 8, 5, 5))], {"w": _w(6, 4, 1, 1), "b": _w(6)}, {"group": 2}),
    (
        "conv_depthwise",
        "Conv",
        [("x", (2, 12, 6, 6))],
        {"w": _w(12, 1, 3, 3)},
        {"group": 12, "pads": [1, 1, 1, 1], "strides": [2, 2]},
    ),
    ("conv_asym", "Conv", [("x", (1, 3, 7, 7))], {"w": _w(2, 3, 3, 3)}, {"pads": [0, 1, 2, 1]}),
    (
        "conv_same_upper",
        "Conv",
        [("x", (1, 3, 7, 8))],
        {"w": _w(2, 3, 3, 3)},
        {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    ),
    ("conv_same_lower", "Conv", [("x", (1, 3, 7, 8))], {"w": _w(2, 3, 4, 4)}, {"auto_pad": "SAME_LOWER"}),
    ("conv1d", "Conv", [("x", (1, 3, 10))], {"w": _w(2, 3, 3)}, {"pads": [1, 1]}),
    ("gemm", "Gemm", [("a", (3, 5))], {"b": _w(4, 5), "c": _w(4)}, {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    ("gemm_transa", "Gemm", [("a", (5, 3)), ("b", (5, 4))], {}, {"transA": 1}),
    ("gemm_c_full", "Gemm", [("a", (3, 5))], {"b": _w(5, 4), "c": _w(3, 4)}, {}),
    ("matmul", "MatMul", [("a", (2, 3, 5))], {"b": _w(5, 4)}, {}),
    ("matmul_batched", "MatMul", [("a", (2, 3, 5)), ("b", (2, 5, 4))], {}, {}),
    ("matmul_bcast", "MatMul", [("a", (3, 5)), ("b", (2, 5, 4))], {}, {}),
    (
        "maxpool",
        "MaxPool",
        [("x", (1, 2, 7, 7))],
        {},
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]},
    ),
    ("maxpool_ceil", "MaxPool", [("x", (1, 2, 8, 8))], {}, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("maxpool_dil", "MaxPool", [("x", (1, 2, 9, 9))], {}, {"kernel_shape": [2, 2], "dilations": [2, 2]}),
    ("avgpool", "AveragePool", [("x", (1, 2, 7, 7))], {}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    (
        "avgpool_incl",
        "AveragePool",
        [("x", (1, 2, 7, 7))],
        {},
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    (
        "avgpool_ceil",
        "AveragePool",
        [("x", (1, 2, 8, 8))],
        {},
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    ),
    ("gap", "GlobalAveragePool", [("x", (2, 3, 4, 5))], {}, {}),
    ("gmp", "GlobalMaxPool", [("x", (2, 3, 4, 5))], {}, {}),
    ("lrn", "LRN", [("x", (1, 7, 3, 3))], {}, {"size": 3, "alpha": 0.01, "beta": 0.6, "bias": 1.5}),
    (
        "bn",
        "BatchNormalization",
        [("x", (2, 3, 4, 4))],
        {"s": _w(3) + 1, "bb": _w(3), "m": _w(3), "v": np.abs(_w(3)) + 0.5},
        {"epsilon": 1e-3},
    ),
    ("concat1", "Concat", [("a", (1, 2, 3)), ("b", (1, 4, 3))], {}, {"axis": 1}),
    ("concat_inner", "Concat", [("a", (2, 2, 3)), ("b", (2, 2, 1))], {}, {"axis": -1}),
    ("reshape", "Reshape", [("x", (2, 3, 4))], {"s": np.array([4, -1], np.int64)}, {}),
    ("flatten", "Flatten", [("x", (2, 3, 4))], {}, {"axis": 2}),
    ("transpose", "Transpose", [("x", (2, 3, 4))], {}, {"perm": [2, 0, 1]}),
    ("transpose5d", "Transpose", [("x", (2, 3, 4, 5, 6))], {}, {"perm": [4, 2, 0, 3, 1]}),
    ("softmax", "Softmax", [("x", (3, 10))], {}, {}),
    ("softmax_axis", "Softmax", [("x", (2, 5, 3))], {}, {"axis": 1}),
    ("logsoftmax", "LogSoftmax", [("x", (3, 10))], {}, {}),
    ("reduce_mean", "ReduceMean", [("x", (2, 3, 4))], {}, {"axes": [1, 2], "keepdims": 0}),
    ("reduce_max", "ReduceMax", [("x", (2, 3, 4))], {}, {"axes": [0]}),
    ("reduce_min", "ReduceMin", [("x", (2, 3, 4))], {}, {"axes": [2]}),
    # axes not in one block: permuted to the end, then one reduction
    ("reduce_mean_split_axes", "ReduceMean", [("x", (2, 3, 4, 5))], {}, {"axes": [0, 2, 3]}),
    ("reduce_l2_split_axes", "ReduceL2", [("x", (2, 3, 4, 5))], {}, {"axes": [1, 3], "keepdims": 0}),
    ("reduce_max_split_axes", "ReduceMax", [("x", (3, 4, 5))], {}, {"axes": [0, 2]}),
    (
        "slice",
        "Slice",
        [("x", (5, 6))],
        {
            "st": np.array([1, 0], np.int64),
            "en": np.array([4, 6], np.int64),
            "ax": np.array([0, 1], np.int64),
            "sp": np.array([2, 2], np.int64),
        },
        {},
    ),
    ("expand", "Expand", [("x", (3, 1))], {"s": np.array([2, 3, 4], np.int64)}, {}),
    ("pad", "Pad", [("x", (2, 3))], {"p": np.array([1, 0, 0, 2], np.int64), "v": np.array(0.5, np.float32)}, {}),
    ("layernorm", "LayerNormalization", [("x", (3, 8))], {"g": _w(8) + 1, "bb": _w(8)}, {"epsilon": 1e-5}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_onnxruntime(case, tmp_path):
    _, op, inputs, consts, attrs = case
    attrs = dict(attrs)
    opset = attrs.pop("_opset", 17)
    model = single_node(op, inputs, opset=opset, consts=consts, **attrs)
    feeds = random_inputs(model)
    want = run_ort(model, feeds)[0]
    m = build_and_load(model, str(tmp_path))
    got = m.run(feeds)["y"]
    assert got.shape == want.shape
    assert max_rel_error(got, want) < 1e-4


def test_fused_conv_bn_relu_chain_matches(tmp_path):
    """Conv -> BatchNormalization -> Mul -> Add -> Relu folds into one conv with bias and activation."""
    from onnx import helper
    from support.onnx_models import graph_model

    consts = {
        "w": _w(4, 3, 3, 3),
        "s": _w(4) + 1,
        "bb": _w(4),
        "m": _w(4),
        "v": np.abs(_w(4)) + 0.5,
        "k": (_w(4, 1, 1) + 1),
        "t": _w(4, 1, 1),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"]),
        helper.make_node("Mul", ["n", "k"], ["p"]),
        helper.make_node("Add", ["p", "t"], ["q"]),
        helper.make_node("Relu", ["q"], ["y"]),
    ]
    model = graph_model(nodes, [("x", (1, 3, 8, 8))], ["y"], 13, consts)
    feeds = random_inputs(model)
    want = run_ort(model, feeds)[0]
    m = build_and_load(model, str(tmp_path))
    assert max_rel_error(m.run(feeds)["y"], want) < 1e-4
    plan = m.loaded.plan
    assert len(plan.prepared_ops()) == 1  # one library conv2d_gemm with bias and relu: BN, Mul, Add folded away
