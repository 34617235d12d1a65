"""Shape contradictions decidable at build are refused at build (exit 2), naming the node and the shapes or the axis
and rank: never a bundle that fails at run. Models declare their output shapes, as an exporter's would."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from svod_min.error import ModelFileError, SvodError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402

N = helper.make_node


def _ones(*shape):
    return np.ones(shape, np.float32)


def _model(nodes, inputs, outputs, consts, opset=17):
    """Float32 inputs by (name, shape) and outputs by (name, declared shape); no shape inference here."""
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


I64 = lambda *v: np.array(v, np.int64)  # noqa: E731

CASES = [
    # (id, nodes, inputs, outputs, consts, opset, what the message must say)
    (
        "reshape_count",
        [N("Reshape", ["x", "s"], ["y"])],
        [("x", [3, 3])],
        [("y", [2, 5])],
        {"s": I64(2, 5)},
        17,
        r"node 0 \(Reshape\).*'x' \[3, 3\] \(9 elements\) to 'y' \[2, 5\] \(10 elements\)",
    ),
    (
        "add_broadcast",
        [N("Add", ["a", "b"], ["y"])],
        [("a", [2, 3]), ("b", [4])],
        [("y", [2, 3])],
        {},
        17,
        r"node 0 \(Add\).*Incompatible dimensions \(inputs 'a' \[2, 3\], 'b' \[4\]\)",
    ),
    (
        "where_broadcast",
        [N("Where", ["c", "a", "b"], ["y"])],
        [("a", [2, 3]), ("b", [3, 3])],
        [("y", [2, 3])],
        {"c": np.array([True, False, True])},
        17,
        r"node 0 \(Where\).*'a' \[2, 3\], 'b' \[3, 3\]",
    ),
    (
        "concat_axis",
        [N("Concat", ["a", "b"], ["y"], axis=2)],
        [("a", [2, 3]), ("b", [2, 3])],
        [("y", [2, 6])],
        {},
        17,
        r"node 0 \(Concat\).*axis must be in \[-rank, rank-1\].*'a' \[2, 3\]",
    ),
    (
        "concat_parts",
        [N("Concat", ["a", "b"], ["y"], axis=0)],
        [("a", [2, 3]), ("b", [2, 4])],
        [("y", [4, 3])],
        {},
        17,
        r"node 0 \(Concat\).*'a' \[2, 3\], 'b' \[2, 4\]",
    ),
    (
        "softmax_axis",
        [N("Softmax", ["a"], ["y"], axis=3)],
        [("a", [2, 3])],
        [("y", [2, 3])],
        {},
        17,
        r"node 0 \(Softmax\).*'axis' must be in \[-2 , 1\]. Its actual value is: 3",
    ),
    (
        "reduce_axis",
        [N("ReduceSum", ["a", "ax"], ["y"])],
        [("a", [2, 3])],
        [("y", [2, 3])],
        {"ax": I64(2)},
        18,
        r"node 0 \(ReduceSum\).*axis must be in \[-rank, rank-1\]. Input rank was 2",
    ),
    (
        "gather_axis",
        [N("Gather", ["a", "i"], ["y"], axis=2)],
        [("a", [2, 3])],
        [("y", [2, 3])],
        {"i": I64(0)},
        17,
        r"node 0 \(Gather\).*axis",
    ),
    (
        "split_axis",
        [N("Split", ["a"], ["y", "z"], axis=2)],
        [("a", [2, 4])],
        [("y", [2, 2]), ("z", [2, 2])],
        {},
        11,
        r"node 0 \(Split\).*Rank=2 Value=2",
    ),
    (
        "split_sizes",
        [N("Split", ["a", "s"], ["y", "z"], axis=1)],
        [("a", [2, 4])],
        [("y", [2, 1]), ("z", [2, 2])],
        {"s": I64(1, 2)},
        17,
        r"node 0 \(Split\).*sum of 'split' \(3\).*\(4\)",
    ),
    (
        "transpose_perm",
        [N("Transpose", ["a"], ["y"], perm=[0, 2])],
        [("a", [2, 4])],
        [("y", [2, 4])],
        {},
        17,
        r"node 0 \(Transpose\).*perm",
    ),
    (
        "squeeze_axis",
        [N("Squeeze", ["a", "ax"], ["y"])],
        [("a", [2, 1])],
        [("y", [2])],
        {"ax": I64(2)},
        17,
        r"node 0 \(Squeeze\).*axis value: 2",
    ),
    (
        "unsqueeze_axis",
        [N("Unsqueeze", ["a", "ax"], ["y"])],
        [("a", [2, 1])],
        [("y", [2, 1, 1])],
        {"ax": I64(5)},
        17,
        r"node 0 \(Unsqueeze\).*axis value: 5",
    ),
    (
        "matmul_k",
        [N("MatMul", ["a", "b"], ["y"])],
        [("a", [2, 3]), ("b", [4, 5])],
        [("y", [2, 5])],
        {},
        17,
        r"node 0 \(MatMul\).*'a' \[2, 3\], 'b' \[4, 5\]",
    ),
    (
        "conv_channels",
        [N("Conv", ["a", "w"], ["y"])],
        [("a", [1, 3, 5, 5])],
        [("y", [1, 2, 3, 3])],
        {"w": _ones(2, 4, 3, 3)},
        17,
        r"node 0 \(Conv\).*'a' \[1, 3, 5, 5\] has 3 channels; weight 'w' \[2, 4, 3, 3\]",
    ),
    (
        "conv_bias",
        [N("Conv", ["a", "w", "b"], ["y"])],
        [("a", [1, 3, 5, 5])],
        [("y", [1, 2, 3, 3])],
        {"w": _ones(2, 3, 3, 3), "b": _ones(5)},
        17,
        r"node 0 \(Conv\).*bias 'b' \[5\]",
    ),
    (
        "conv_group",
        [N("Conv", ["a", "w"], ["y"], group=2)],
        [("a", [1, 4, 5, 5])],
        [("y", [1, 3, 3, 3])],
        {"w": _ones(3, 2, 3, 3)},
        17,
        r"node 0 \(Conv\).*3 output channels, not a multiple of group=2",
    ),
    (
        "convtranspose_channels",
        [N("ConvTranspose", ["a", "w"], ["y"])],
        [("a", [1, 3, 5, 5])],
        [("y", [1, 2, 7, 7])],
        {"w": _ones(4, 2, 3, 3)},
        17,
        r"node 0 \(ConvTranspose\).*has 3 channels",
    ),
    (
        "instancenorm_scale",
        [N("InstanceNormalization", ["a", "s", "b"], ["y"])],
        [("a", [1, 3, 5, 5])],
        [("y", [1, 3, 5, 5])],
        {"s": _ones(4), "b": _ones(3)},
        17,
        r"node 0 \(InstanceNormalization\).*'s' \[4\]",
    ),
    (
        "prelu_slope",
        [N("PRelu", ["a", "s"], ["y"])],
        [("a", [1, 3, 5, 5])],
        [("y", [1, 3, 5, 5])],
        {"s": _ones(4, 1, 1)},
        17,
        r"node 0 \(PRelu\).*slope 's' \[4, 1, 1\]",
    ),
    (
        "gemm_c",
        [N("Gemm", ["a", "b", "c"], ["y"])],
        [("a", [2, 3])],
        [("y", [2, 4])],
        {"b": _ones(3, 4), "c": _ones(3)},
        17,
        r"node 0 \(Gemm\).*C 'c' \[3\] does not broadcast to the result \[2, 4\]",
    ),
    (
        "lstm_weights",
        [N("LSTM", ["a", "w", "r"], ["y"], hidden_size=2)],
        [("a", [3, 1, 2])],
        [("y", [3, 1, 1, 2])],
        {"w": _ones(1, 8, 3), "r": _ones(1, 8, 2)},
        17,
        r"node 0 \(LSTM\).*'w' \[1, 8, 3\] must be \[1, 8, 2\]",
    ),
]


@pytest.mark.parametrize(
    "nodes, inputs, outputs, consts, opset, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_contradiction_is_refused_at_build_naming_the_node(tmp_path, nodes, inputs, outputs, consts, opset, message):
    path = str(tmp_path / "m.onnx")
    onnx.save(_model(nodes, inputs, outputs, consts, opset), path)
    with pytest.raises(SvodError, match=message) as err:
        lower_model(path)
    assert err.value.exit_code == 2


def test_the_failing_node_is_found_among_several_of_its_op(tmp_path) -> None:
    """onnx names only the op type: the node list is bisected to say which of three Adds contradicts its inputs."""
    nodes = [N("Add", ["a", "a"], ["t1"], name="first"), N("Add", ["t1", "t1"], ["t2"]), N("Add", ["t2", "b"], ["y"])]
    path = str(tmp_path / "m.onnx")
    onnx.save(_model(nodes, [("a", [2, 3]), ("b", [4])], [("y", [2, 3])], {}), path)
    with pytest.raises(ModelFileError, match=r"^node 2 \(Add\), opset 17: .*inputs 't2' \[2, 3\], 'b' \[4\]"):
        lower_model(path)


def test_a_reshape_to_another_size_exits_2_from_the_cli(tmp_path) -> None:
    """The issue's case: it built and was refused only at run."""
    path = str(tmp_path / "m.onnx")
    onnx.save(_model(*CASES[0][1:5]), path)
    result = subprocess.run(
        [sys.executable, "-m", "svod_min", "build", path, "-o", str(tmp_path / "m.svod"), "--no-expect"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "node 0 (Reshape)" in result.stderr and "the element counts differ" in result.stderr
    assert not os.path.exists(str(tmp_path / "m.svod"))


def test_a_contract_reading_a_missing_dim_refuses_instead_of_raising() -> None:
    """A scalar where the op reads a dim (a mutated model): a refusal naming the inputs, never an IndexError."""
    from svod_min.onnx.frontend.contracts import contract_violation
    from svod_min.onnx.frontend.ir import Graph, Node, Value

    values = {
        "x": Value("x", (), "float32"),
        "w": Value("w", (1, 8, 2), "float32", _ones(1, 8, 2)),
        "r": Value("r", (1, 8, 2), "float32", _ones(1, 8, 2)),
        "y": Value("y", (1, 1, 1, 2), "float32"),
    }
    graph = Graph(values, [], ["x"], ["y"], 17)
    why = contract_violation(graph, Node("LSTM", "", 0, ["x", "w", "r"], ["y"], {"hidden_size": 2}))
    assert why == "inputs of ranks LSTM cannot take (inputs 'x' [], 'w' [1, 8, 2], 'r' [1, 8, 2])"
