"""The blocked channel layout (NCHWc) in whole ONNX graphs: each small graph, with seeded random weights, is built
into a bundle for this host, run, and compared with onnxruntime; and the layout pass
(``layout.block_channels`` after ``passes.run_passes``, as ``build.lower_graph`` runs them) is checked to take the
path the case is about, by the ops it leaves: how many convolutions run blocked, how many reorders there are and
where. Cases: a convolution chain, ResNet blocks whose residual Add is fused (shortcut blocked, or the graph input
reordered), pools between blocked convolutions, same-shape elementwise ops and unfused activations, the global
average pool writing plain, an unfoldable BatchNormalization as a blocked affine, channel Concats of whole blocks
(blocked) or not (plain), a blocked tensor read by plain ops too or also a graph output, a 3-channel input (never
reordered), the convolutions that stay plain (groups, a 1x1 16->16 from a plain input), a mobile block whose
depthwise convolution runs blocked, SiLU (``y * Sigmoid(y)``) in a blocked convolution's store, and channel
Splits into whole blocks (blocked) or not (plain)."""

from __future__ import annotations

import collections
import os
from typing import Any, Dict, List, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx  # noqa: E402
from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model, max_rel_error, random_inputs, run_ort  # noqa: E402

from svod_min.onnx import build  # noqa: E402,F401 - importing it fills the op table check_graph reads
from svod_min.onnx.frontend.ir import Graph  # noqa: E402
from svod_min.onnx.frontend.layout import (  # noqa: E402
    BLOCKED_AFFINE,
    BLOCKED_CONV,
    BLOCKED_DWCONV,
    BLOCKED_GLOBAL_POOL,
    BLOCKED_POOL,
    FROM_BLOCKED,
    SILU,
    TO_BLOCKED,
    block_channels,
)
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402
from svod_min.onnx.frontend.passes import run_passes  # noqa: E402
from svod_min.onnx.frontend.table import check_graph  # noqa: E402

OPSET = 17


class Net:
    """A graph under construction: nodes, and constants drawn from one seeded generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: List[Any] = []
        self.consts: Dict[str, np.ndarray] = {}

    def const(self, name: str, value: np.ndarray) -> str:
        self.consts[name] = value.astype(np.float32)
        return name

    def conv(
        self,
        x: str,
        y: str,
        c: int,
        oc: int,
        k: int = 3,
        pads: Sequence[int] = (1, 1, 1, 1),
        group: int = 1,
        **attrs: Any,
    ) -> str:
        w = self.rng.standard_normal((oc, c // group, k, k)) / np.sqrt(c // group * k * k)
        inputs = [x, self.const(y + "_w", w), self.const(y + "_b", self.rng.standard_normal(oc) * 0.3)]
        self.nodes.append(
            helper.make_node("Conv", inputs, [y], kernel_shape=[k, k], pads=list(pads), group=group, **attrs)
        )
        return y

    def op(self, op: str, inputs: Sequence[str], y: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [y], **attrs))
        return y

    def batchnorm(self, x: str, y: str, c: int) -> str:
        stats = [
            self.rng.standard_normal(c) * 0.5 + 1.0,
            self.rng.standard_normal(c) * 0.2,
            self.rng.standard_normal(c) * 0.2,
            self.rng.uniform(0.5, 1.5, c),
        ]
        names = [self.const("%s_%s" % (y, part), v) for part, v in zip(("scale", "bias", "mean", "var"), stats)]
        return self.op("BatchNormalization", [x] + names, y)

    def model(
        self, inputs: Sequence[Tuple[str, Sequence[int]]], outputs: Sequence[str], opset: int = OPSET
    ) -> onnx.ModelProto:
        return graph_model(self.nodes, inputs, outputs, opset, self.consts)


def layout_of(model: onnx.ModelProto, directory: str) -> Graph:
    """The graph the lowering lowers: read as ``build`` reads it, checked, passed, laid out."""
    path = os.path.join(directory, "layout.onnx")
    onnx.save(model, path)
    graph = read_graph(path, {}, {})
    check_graph(graph)
    return block_channels(run_passes(graph))


def op_counts(graph: Graph) -> Dict[str, int]:
    return dict(collections.Counter(node.op for node in graph.nodes))


def check(model: onnx.ModelProto, tmp_path: Any, expect: Dict[str, int], tol: float = 5e-4) -> Graph:
    """Assert the laid-out graph holds ``expect``'s op counts (0: none), and that the bundle matches onnxruntime."""
    graph = layout_of(model, str(tmp_path))
    counts = op_counts(graph)
    assert {op: counts.get(op, 0) for op in expect} == expect, counts
    feeds = random_inputs(model)
    want = run_ort(model, feeds)
    m = build_and_load(model, str(tmp_path))
    got = m.run(feeds)
    for value, name in zip(want, m.output_names):
        assert got[name].shape == value.shape, name
        assert max_rel_error(got[name], value) < tol, (name, max_rel_error(got[name], value))
    return graph


def producer_of(graph: Graph, name: str) -> Any:
    return next(node for node in graph.nodes if name in node.outputs)


def test_conv_chain_reorders_once_each_way(tmp_path: Any) -> None:
    net = Net(1)
    net.op("Relu", [net.conv("x", "a", 16, 32)], "ar")
    net.conv("ar", "y", 32, 32)
    check(
        net.model([("x", (1, 16, 12, 12))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 2, TO_BLOCKED: 1, FROM_BLOCKED: 1, "Conv": 0, "Relu": 0},
    )


def test_resnet_block_fuses_a_blocked_shortcut(tmp_path: Any) -> None:
    net = Net(2)
    t = net.op("Relu", [net.conv("x", "a", 16, 32)], "t")
    u = net.op("Relu", [net.conv(t, "b", 32, 32)], "u")
    net.op("Relu", [net.op("Add", [net.conv(u, "c", 32, 32), t], "s")], "y")
    graph = check(
        net.model([("x", (1, 16, 10, 10))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 3, TO_BLOCKED: 1, FROM_BLOCKED: 1, "Add": 0, "Relu": 0},
    )
    fused = [n for n in graph.nodes if n.op == BLOCKED_CONV and len(n.inputs) > 3]
    assert [n.inputs[3] for n in fused] == ["t~nchwc"]


def test_resnet_block_reorders_a_plain_input_shortcut(tmp_path: Any) -> None:
    """The shortcut is the graph input: it is reordered once, for the first convolution and the residual both."""
    net = Net(3)
    t = net.op("Relu", [net.conv("x", "a", 32, 32)], "t")
    net.op("Relu", [net.op("Add", [net.conv(t, "b", 32, 32), "x"], "s")], "y")
    graph = check(
        net.model([("x", (2, 32, 9, 11))], ["y"]), tmp_path, {BLOCKED_CONV: 2, TO_BLOCKED: 1, FROM_BLOCKED: 1, "Add": 0}
    )
    assert producer_of(graph, "x~nchwc").op == TO_BLOCKED
    assert [n.inputs[3] for n in graph.nodes if n.op == BLOCKED_CONV and len(n.inputs) > 3] == ["x~nchwc"]


def test_pools_between_blocked_convs(tmp_path: Any) -> None:
    net = Net(4)
    a = net.op("Relu", [net.conv("x", "a", 16, 32)], "ar")
    p = net.op("MaxPool", [a], "p", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)  # 17 -> 8
    b = net.conv(p, "b", 32, 32)
    q = net.op(
        "AveragePool",
        [b],
        "q",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[1, 1, 1, 1],
        ceil_mode=1,
        count_include_pad=1,
    )
    c = net.conv(q, "c", 32, 48, k=1, pads=(0, 0, 0, 0))
    net.op("AveragePool", [c], "y", kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1], ceil_mode=1)
    check(
        net.model([("x", (2, 16, 17, 17))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 3, BLOCKED_POOL: 3, TO_BLOCKED: 1, FROM_BLOCKED: 1, "MaxPool": 0, "AveragePool": 0},
    )


def test_elementwise_ops_of_blocked_tensors_stay_blocked(tmp_path: Any) -> None:
    """A Mul of two blocked tensors and an activation no producer fuses (after a pool) run on the blocked data."""
    net = Net(13)
    prod = net.op("Mul", [net.conv("x", "a", 16, 32), net.conv("x", "b", 16, 32)], "prod")
    pooled = net.op("MaxPool", [prod], "p", kernel_shape=[2, 2], strides=[2, 2])
    net.conv(net.op("Sigmoid", [pooled], "sig"), "y", 32, 16)
    graph = check(
        net.model([("x", (1, 16, 12, 12))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 3, BLOCKED_POOL: 1, "Mul": 1, "Sigmoid": 1, TO_BLOCKED: 1, FROM_BLOCKED: 1},
    )
    assert producer_of(graph, "prod~nchwc").inputs == ["a~nchwc", "b~nchwc"]
    assert producer_of(graph, "sig~nchwc").inputs == ["p~nchwc"]


@pytest.mark.parametrize("pool", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pool_writes_plain(pool: str, tmp_path: Any) -> None:
    net = Net(5)
    g = net.op(pool, [net.op("Relu", [net.conv("x", "a", 16, 40)], "ar")], "g")
    net.op("Flatten", [g], "y")
    check(
        net.model([("x", (1, 16, 13, 13))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 1, BLOCKED_GLOBAL_POOL: 1, TO_BLOCKED: 1, FROM_BLOCKED: 0},
    )


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_auto_pad_convs_and_pools_run_blocked(mode: str, tmp_path: Any) -> None:
    """auto_pad's padding (here uneven: stride 2 over an even size) is resolved by the geometry, as given pads are."""
    net = Net(15)
    w1 = net.const("w1", net.rng.standard_normal((32, 16, 3, 3)) / 12.0)
    w2 = net.const("w2", net.rng.standard_normal((24, 32, 3, 3)) / 17.0)
    net.nodes.append(helper.make_node("Conv", ["x", w1], ["a"], kernel_shape=[3, 3], strides=[2, 2], auto_pad=mode))
    net.op("MaxPool", ["a"], "p", kernel_shape=[2, 2], auto_pad=mode)
    net.nodes.append(helper.make_node("Conv", ["p", w2], ["y"], kernel_shape=[3, 3], auto_pad=mode))
    check(
        net.model([("x", (1, 16, 14, 12))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 2, BLOCKED_POOL: 1, "Conv": 0, "MaxPool": 0, TO_BLOCKED: 1, FROM_BLOCKED: 1},
    )


def test_unfoldable_batchnorm_is_a_blocked_affine(tmp_path: Any) -> None:
    """A Relu between the convolution and the BatchNormalization keeps it from folding into the weights."""
    net = Net(6)
    a = net.op("Relu", [net.conv("x", "a", 16, 24)], "ar")
    bn = net.op("Relu", [net.batchnorm(a, "bn", 24)], "bnr")
    net.conv(bn, "y", 24, 32)
    graph = check(
        net.model([("x", (1, 16, 11, 11))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 2, BLOCKED_AFFINE: 1, TO_BLOCKED: 1, FROM_BLOCKED: 1, "Relu": 0},
    )
    affine = next(n for n in graph.nodes if n.op == BLOCKED_AFFINE)
    assert affine.fused.get("activation", ("",))[0] == "Relu"


def test_concat_of_whole_blocks_stays_blocked(tmp_path: Any) -> None:
    net = Net(7)
    cat = net.op("Concat", [net.conv("x", "a", 16, 16), net.conv("x", "b", 16, 32)], "cat", axis=1)
    net.conv(cat, "y", 48, 32)
    graph = check(
        net.model([("x", (1, 16, 10, 10))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 3, "Concat": 1, TO_BLOCKED: 1, FROM_BLOCKED: 1},
    )
    concat = producer_of(graph, "cat~nchwc")
    assert concat.op == "Concat" and concat.inputs == ["a~nchwc", "b~nchwc"]


def test_concat_of_partial_blocks_goes_plain(tmp_path: Any) -> None:
    """24 + 40 channels: the second input's channels would not start a block, so the Concat runs plain."""
    net = Net(8)
    cat = net.op("Concat", [net.conv("x", "a", 16, 24), net.conv("x", "b", 16, 40)], "cat", axis=1)
    net.conv(cat, "y", 64, 32)
    graph = check(
        net.model([("x", (1, 16, 10, 10))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 3, "Concat": 1, TO_BLOCKED: 2, FROM_BLOCKED: 3},
    )
    assert producer_of(graph, "cat").op == "Concat"
    assert producer_of(graph, "cat~nchwc").op == TO_BLOCKED


def test_blocked_tensor_read_by_plain_ops_reorders_once(tmp_path: Any) -> None:
    net = Net(9)
    t = net.conv("x", "t", 16, 32)
    net.op("Transpose", [t], "y1", perm=[0, 2, 3, 1])
    net.op("Softmax", [t], "y2", axis=1)
    net.conv(t, "y3", 32, 16)
    graph = check(
        net.model([("x", (1, 16, 8, 8))], ["y1", "y2", "y3"]),
        tmp_path,
        {BLOCKED_CONV: 2, TO_BLOCKED: 1, FROM_BLOCKED: 2, "Transpose": 1, "Softmax": 1},
    )
    reorders = [n for n in graph.nodes if n.op == FROM_BLOCKED]
    assert sorted(n.outputs[0] for n in reorders) == ["t", "y3"]
    order = [n.op for n in graph.nodes]
    assert order.index(FROM_BLOCKED) < order.index("Transpose")  # emitted before its first plain reader


def test_blocked_tensor_that_is_a_graph_output(tmp_path: Any) -> None:
    net = Net(10)
    t = net.op("Relu", [net.conv("x", "a", 16, 32)], "t")
    net.conv(t, "y", 32, 32)
    graph = check(
        net.model([("x", (1, 16, 9, 9))], ["t", "y"]), tmp_path, {BLOCKED_CONV: 2, TO_BLOCKED: 1, FROM_BLOCKED: 2}
    )
    assert sorted(n.outputs[0] for n in graph.nodes if n.op == FROM_BLOCKED) == ["t", "y"]
    second = producer_of(graph, "y~nchwc")
    assert second.op == BLOCKED_CONV and second.inputs[0] == "t~nchwc"


def test_three_channel_input_is_never_reordered(tmp_path: Any) -> None:
    """A 3-channel input is read as it is by a first layer that writes blocked: copying it into 16-lane blocks would
    move five times its size; the convolution after it runs blocked too."""
    net = Net(11)
    a = net.op("Relu", [net.conv("x", "a", 3, 16)], "ar")
    net.conv(a, "y", 16, 32)
    graph = check(
        net.model([("x", (1, 3, 14, 14))], ["y"]),
        tmp_path,
        {"Conv": 0, BLOCKED_CONV: 2, TO_BLOCKED: 0, FROM_BLOCKED: 1},
    )
    readers = [n.op for n in graph.nodes if "x" in n.inputs]
    assert readers == [BLOCKED_CONV], readers
    assert producer_of(graph, "y~nchwc").op == BLOCKED_CONV


@pytest.mark.parametrize("case", ["grouped", "1x1-16-16"])
def test_convs_below_the_rules_stay_plain(case: str, tmp_path: Any) -> None:
    """A grouped convolution, and a 1x1 16->16 from a plain input (16 multiply-adds per copied element, below the
    start threshold), never reorder."""
    net = Net(12)
    if case == "grouped":
        net.conv("x", "y", 32, 32, group=2)
        shape: Tuple[int, ...] = (1, 32, 10, 10)
    else:
        net.conv("x", "y", 16, 16, k=1, pads=(0, 0, 0, 0))
        shape = (2, 16, 10, 10)
    check(net.model([("x", shape)], ["y"]), tmp_path, {"Conv": 1, BLOCKED_CONV: 0, TO_BLOCKED: 0, FROM_BLOCKED: 0})


def test_per_channel_prelu_runs_in_the_blocked_convs_store(tmp_path: Any) -> None:
    """A PRelu with a constant slope per channel, the convolution's only reader, is its epilogue (a slope table)."""
    net = Net(13)
    slope = net.const("slope", net.rng.standard_normal((40, 1, 1)))
    net.op("PRelu", [net.conv("x", "a", 16, 40), slope], "ap")
    net.conv("ap", "y", 40, 16)
    graph = check(net.model([("x", (2, 16, 9, 11))], ["y"]), tmp_path, {BLOCKED_CONV: 2, "PRelu": 0, FROM_BLOCKED: 1})
    assert producer_of(graph, "ap~nchwc").fused["activation"][0] == "PRelu"


def test_prelu_read_by_another_op_too_stays_a_node(tmp_path: Any) -> None:
    """A convolution read by a PRelu and by something else keeps its result: the PRelu runs on its own."""
    net = Net(14)
    slope = net.const("slope", net.rng.standard_normal((1, 32, 1, 1)))
    a = net.conv("x", "a", 16, 32)
    net.op("PRelu", [a, slope], "ap")
    net.op("Add", [a, "ap"], "y")
    check(net.model([("x", (1, 16, 8, 8))], ["y"]), tmp_path, {BLOCKED_CONV: 1, "PRelu": 1})


def test_mobile_block_runs_blocked_end_to_end(tmp_path: Any) -> None:
    """A 3x3 convolution, depthwise stride 2 (HardSwish fused), pointwise: no reorder between them; channels (24)
    not a multiple of 16 and odd sizes."""
    net = Net(15)
    a = net.op("HardSwish", [net.conv("x", "a", 16, 24)], "ah")
    d = net.op("HardSwish", [net.conv(a, "d", 24, 24, group=24, strides=[2, 2])], "dh")
    net.conv(d, "y", 24, 40, k=1, pads=(0, 0, 0, 0))
    graph = check(
        net.model([("x", (1, 16, 13, 11))], ["y"]),
        tmp_path,
        {BLOCKED_CONV: 2, BLOCKED_DWCONV: 1, "Conv": 0, "HardSwish": 0, TO_BLOCKED: 1, FROM_BLOCKED: 1},
    )
    assert producer_of(graph, "dh~nchwc").op == BLOCKED_DWCONV


def test_depthwise_of_a_plain_input_stays_plain(tmp_path: Any) -> None:
    """A depthwise convolution does too little per element to pay for a reorder of its input."""
    net = Net(16)
    net.conv("x", "y", 32, 32, group=32)
    check(net.model([("x", (1, 32, 9, 9))], ["y"]), tmp_path, {"Conv": 1, BLOCKED_DWCONV: 0, TO_BLOCKED: 0})


@pytest.mark.parametrize("order", ["y*s", "s*y"])
def test_silu_runs_in_the_blocked_convs_store(order: str, tmp_path: Any) -> None:
    """``y * Sigmoid(y)`` (either operand order) after a blocked convolution is its epilogue."""
    net = Net(17)
    a = net.conv("x", "a", 16, 24, strides=[2, 2])
    s = net.op("Sigmoid", [a], "s")
    silu = net.op("Mul", [a, s] if order == "y*s" else [s, a], "as")
    net.conv(silu, "y", 24, 16)
    graph = check(
        net.model([("x", (1, 16, 15, 9))], ["y"]), tmp_path, {BLOCKED_CONV: 2, "Sigmoid": 0, "Mul": 0, FROM_BLOCKED: 1}
    )
    assert producer_of(graph, "as~nchwc").fused["activation"][0] == SILU


def test_silu_whose_sigmoid_is_read_elsewhere_stays_nodes(tmp_path: Any) -> None:
    net = Net(18)
    a = net.conv("x", "a", 16, 32)
    s = net.op("Sigmoid", [a], "s")
    net.conv(net.op("Mul", [a, s], "as"), "y", 32, 16)
    check(
        net.model([("x", (1, 16, 8, 8))], ["y", "s"]),
        tmp_path,
        {BLOCKED_CONV: 2, "Sigmoid": 1, "Mul": 1},
    )


@pytest.mark.parametrize("opset", [11, 17])
def test_split_into_whole_blocks_stays_blocked(opset: int, tmp_path: Any) -> None:
    """YOLOv8's C2f: a Split of 48 channels into 16 + 32 (split as an attribute before opset 13, an input after),
    a convolution on one part and a Concat of all three, with no reorder between; batch 2 (the parts are strided
    copies, not views)."""
    net = Net(19)
    a = net.conv("x", "a", 16, 48)
    if opset >= 13:
        net.consts["sizes"] = np.array([16, 32], np.int64)
        net.nodes.append(helper.make_node("Split", [a, "sizes"], ["p", "q"], axis=1))
    else:
        net.nodes.append(helper.make_node("Split", [a], ["p", "q"], axis=1, split=[16, 32]))
    b = net.conv("q", "b", 32, 16)
    net.conv(net.op("Concat", ["p", "q", b], "cat", axis=1), "y", 64, 16)
    graph = check(
        net.model([("x", (2, 16, 9, 11))], ["y"], opset=opset),
        tmp_path,
        {BLOCKED_CONV: 3, "Split": 1, "Concat": 1, TO_BLOCKED: 1, FROM_BLOCKED: 1},
    )
    assert producer_of(graph, "p~nchwc").op == "Split"


def test_split_into_partial_blocks_goes_plain(tmp_path: Any) -> None:
    """Parts of 8 and 24 channels are not block ranges: the Split reads the plain tensor (one reorder for it, one
    for the graph output y)."""
    net = Net(20)
    a = net.conv("x", "a", 16, 32)
    net.nodes.append(helper.make_node("Split", [a], ["p", "q"], axis=1, split=[8, 24]))
    net.conv("q", "y", 24, 16)
    net.op("Relu", ["p"], "z")
    graph = check(net.model([("x", (1, 16, 8, 8))], ["y", "z"], opset=11), tmp_path, {"Split": 1, FROM_BLOCKED: 2})
    assert producer_of(graph, "p").inputs == ["a"]
