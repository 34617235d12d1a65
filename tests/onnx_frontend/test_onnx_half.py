"""float16 and bfloat16 models through the ops that compute in float32 only (svod_min/onnx/frontend/half.py), against
onnxruntime: one float16 node per op family, a float16 conversion of a light CNN, bfloat16 nodes, and the IR the pass
writes (float32 between consecutive float32 nodes, Casts only at the region's edges, graph I/O in the model's dtypes).

onnxruntime has no float16 kernel for these ops on x86-64: it computes them in float32 between Casts, as svod_min
now does, so both round one float32 result to float16 and differ by float32's summation order only. The tolerance is
therefore one float16 ulp of the expected value (``ulps``), where float16's own rounding alone allows up to half.
bfloat16: onnxruntime refuses those nodes, so the reference is onnxruntime on the same node between explicit Casts
(bfloat16 -> float32 -> bfloat16), which is what svod_min computes; one bfloat16 ulp likewise.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
ml_dtypes = pytest.importorskip("ml_dtypes")

import onnx  # noqa: E402
from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, randomized, run_ort  # noqa: E402

from svod_min.error import ModelFileError  # noqa: E402
from svod_min.onnx.build import OPS  # noqa: E402
from svod_min.onnx.frontend.half import compute_halves_in_float, with_halves  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402

H = np.float16


def half_model(
    nodes: List[Any],
    inputs: Sequence[Tuple[str, Sequence[int]]],
    outputs: Sequence[str],
    consts: Dict[str, Any],
    opset: int = 17,
    elem: int = TP.FLOAT16,
) -> onnx.ModelProto:
    """A model whose graph inputs are ``elem`` (float16 by default), its constants as given, shapes inferred."""
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, elem, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info(o, TP.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def ulps(got: Any, want: Any) -> int:
    """The most float16/bfloat16 steps between two arrays of one of those dtypes (their bits as ordered integers)."""
    assert got.shape == want.shape and got.dtype.itemsize == want.dtype.itemsize == 2

    def ordered(a: Any) -> Any:
        bits = a.view(np.uint16).astype(np.int64)
        return np.where(bits & 0x8000, 0x8000 - bits, bits)  # -0.0 and +0.0 both 0; negatives below

    return int(np.max(np.abs(ordered(got) - ordered(want)))) if got.size else 0


def rand(rng: Any, shape: Sequence[int], scale: float = 1.0) -> Any:
    return (rng.standard_normal(shape) * scale).astype(H)


def node(op: str, inputs: Sequence[str], **attrs: Any) -> Any:
    return helper.make_node(op, list(inputs), ["y"], **attrs)


def _cases() -> Dict[str, Tuple[Any, Dict[str, Any]]]:
    """Op family -> (float16 model, feeds): one node each, with float16 constants where the op has weights."""
    rng = np.random.default_rng(7)
    x4 = ("x", [2, 3, 9, 9])
    c = {
        "w": rand(rng, (4, 3, 3, 3), 0.3),
        "b": rand(rng, (4,)),
        "m": rand(rng, (6, 5), 0.4),
        "bias": rand(rng, (5,)),
        "s": (rng.uniform(0.5, 1.5, 3)).astype(H),
        "o": rand(rng, (3,), 0.2),
        "mean": rand(rng, (3,), 0.2),
        "var": (rng.uniform(0.5, 1.5, 3)).astype(H),
        "ln_s": rand(rng, (6,)),
        "ln_b": rand(rng, (6,)),
    }
    cases = {
        "Conv": (node("Conv", ["x", "w", "b"], pads=[1, 1, 1, 1], strides=[2, 1]), [x4], ["w", "b"]),
        "ConvTranspose": (node("ConvTranspose", ["x", "wt"], strides=[2, 2]), [x4], ["wt"]),
        "MatMul": (node("MatMul", ["a", "m"]), [("a", [2, 4, 6])], ["m"]),
        "Gemm": (node("Gemm", ["a", "m", "bias"], alpha=0.5, beta=2.0), [("a", [4, 6])], ["m", "bias"]),
        "MaxPool": (node("MaxPool", ["x"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), [x4], []),
        "AveragePool": (node("AveragePool", ["x"], kernel_shape=[3, 3], strides=[2, 2]), [x4], []),
        "GlobalAveragePool": (node("GlobalAveragePool", ["x"]), [x4], []),
        "BatchNormalization": (
            node("BatchNormalization", ["x", "s", "o", "mean", "var"]),
            [x4],
            ["s", "o", "mean", "var"],
        ),
        "InstanceNormalization": (node("InstanceNormalization", ["x", "s", "o"]), [x4], ["s", "o"]),
        "LayerNormalization": (node("LayerNormalization", ["a", "ln_s", "ln_b"]), [("a", [4, 6])], ["ln_s", "ln_b"]),
        "Softmax": (node("Softmax", ["x"], axis=1), [x4], []),
        "ReduceMean": (node("ReduceMean", ["x"], axes=[2, 3]), [x4], []),
        "Resize": (node("Resize", ["x", "", "scales"], mode="linear"), [x4], ["scales"]),
    }
    c["wt"] = rand(rng, (3, 2, 2, 2), 0.5)
    c["scales"] = np.array([1, 1, 2, 1.5], np.float32)
    out = {}
    for family, (n, inputs, names) in cases.items():
        model = half_model([n], inputs, ["y"], {k: c[k] for k in names})
        feeds = {name: rand(rng, shape, 2.0) for name, shape in inputs}
        out[family] = (model, feeds)
    return out


CASES = _cases()


@pytest.mark.parametrize("family", sorted(CASES))
def test_float16_node_matches_onnxruntime(family: str, tmp_path: Any) -> None:
    model, feeds = CASES[family]
    want = run_ort(model, feeds)[0]
    got = build_and_load(model, str(tmp_path))(**feeds)["y"]
    assert got.dtype == want.dtype == np.float16
    assert ulps(got, want) <= 1, (family, ulps(got, want))


def convert_to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """What onnxconverter-common's float16 conversion (with its graph I/O converted too) makes of a float32 CNN:
    every float32 initializer, graph input and output float16, shapes inferred again."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for i, t in enumerate(out.graph.initializer):
        if t.data_type == TP.FLOAT:
            out.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(H), t.name))
    for vi in list(out.graph.input) + list(out.graph.output):
        if vi.type.tensor_type.elem_type == TP.FLOAT:
            vi.type.tensor_type.elem_type = TP.FLOAT16
    del out.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(out)


def test_float16_light_cnn_matches_onnxruntime(tmp_path: Any) -> None:
    """The float16 conversion of the light SqueezeNet (random weights) against onnxruntime's float16 run and against
    the float32 computation of the same model rounded once (onnxruntime on the float32 model whose weights hold the
    float16 values): within one ulp of both (measured: the probabilities equal to both bit for bit, 3 of 1,000 logits
    one ulp apart)."""
    base = randomized("squeezenet", seed=3)
    model = convert_to_float16(base)
    for i, t in enumerate(base.graph.initializer):
        if t.data_type == TP.FLOAT:
            values = numpy_helper.to_array(t).astype(H).astype(np.float32)
            base.graph.initializer[i].CopyFrom(numpy_helper.from_array(values, t.name))
    weights = {t.name for t in model.graph.initializer}
    (inp,) = [i.name for i in model.graph.input if i.name not in weights]
    x = np.random.default_rng(3).uniform(-2, 2, (1, 3, 224, 224)).astype(H)
    wants = run_ort(model, {inp: x})
    wants32 = run_ort(base, {inp: x.astype(np.float32)})
    gots = build_and_load(model, str(tmp_path))(**{inp: x})
    for out, want, want32 in zip(model.graph.output, wants, wants32):  # the logits and the probabilities
        got, want32 = gots[out.name], want32.astype(H)
        assert got.dtype == np.float16 and np.all(np.isfinite(want)) and np.ptp(want) > 0
        assert ulps(got, want) <= 1 and ulps(got, want32) <= 1, (out.name, ulps(got, want), ulps(got, want32))


def _graph(model: onnx.ModelProto, tmp_path: Any) -> Any:
    path = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, path)
    return compute_halves_in_float(read_graph(path, {}, {}, with_halves(OPS)), OPS)


def test_chain_stays_float32_between_nodes(tmp_path: Any) -> None:
    """Conv -> Relu -> Softmax: one Cast in, float32 between the three, one Cast out, constants converted at build;
    onnxruntime also keeps float32 between them (it drops its own Cast pairs), so the outputs agree within an ulp
    where rounding the Conv's result to float16 first would differ by more."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Softmax", ["r"], ["y"], axis=1),
    ]
    w = rand(rng, (8, 3, 3, 3), 2.0)
    model = half_model(nodes, [("x", [1, 3, 8, 8])], ["y"], {"w": w})
    graph = _graph(model, tmp_path)
    assert [n.op for n in graph.nodes] == ["Cast", "Conv", "Relu", "Softmax", "Cast"]
    inner = [o for n in graph.nodes[1:4] for o in n.outputs]
    assert all(graph.values[o].dtype == "float32" for o in inner)
    assert graph.values[graph.nodes[1].inputs[1]].const.dtype == np.float32
    assert graph.values["x"].dtype == graph.values["y"].dtype == "float16"
    x = rand(rng, (1, 3, 8, 8), 2.0)
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path))(x=x)["y"]
    assert ulps(got, want) <= 1
    # the alternative this pass avoids: the Conv rounded to float16 before the Softmax
    conv16 = run_ort(half_model(nodes[:1], [("x", [1, 3, 8, 8])], ["c"], {"w": w}), {"x": x})[0]
    rounded = run_ort(half_model(nodes[2:], [("r", [1, 8, 8, 8])], ["y"], {}), {"r": np.maximum(conv16, 0)})[0]
    assert ulps(rounded, want) > 1


def test_half_nodes_alone_are_left_in_half(tmp_path: Any) -> None:
    """A graph of ops that run on float16 (Add, Relu) gets no Casts."""
    nodes = [helper.make_node("Add", ["x", "z"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]
    graph = _graph(half_model(nodes, [("x", [4]), ("z", [4])], ["y"], {}), tmp_path)
    assert [n.op for n in graph.nodes] == ["Add", "Relu"]
    assert graph.values["a"].dtype == "float16"


def test_model_cast_keeps_its_rounding(tmp_path: Any) -> None:
    """A Cast of the model's own after a float32 node reads the float16 value the spec gives it (rounded), not the
    float32 one (onnxruntime drops that Cast pair; the spec does not)."""
    nodes = [helper.make_node("MatMul", ["x", "m"], ["p"]), helper.make_node("Cast", ["p"], ["y"], to=TP.FLOAT)]
    model = half_model(nodes, [("x", [2, 3])], ["y"], {"m": rand(np.random.default_rng(4), (3, 5))})
    graph = _graph(model, tmp_path)
    assert [n.op for n in graph.nodes] == ["Cast", "MatMul", "Cast", "Cast"]
    assert graph.nodes[-1].inputs == ["p"] and graph.values["p"].dtype == "float16"


def test_half_neighbours_join_the_float32_region(tmp_path: Any) -> None:
    """Add before a MatMul and Relu after it compute in float32 too (no float16 rounding between them); an
    output that is both a graph output and read inside the region is cast back once."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("Add", ["x", "z"], ["a"]),
        helper.make_node("MatMul", ["a", "m"], ["p"]),
        helper.make_node("Relu", ["p"], ["y"]),
        helper.make_node("Neg", ["p"], ["q"]),
    ]
    model = half_model(nodes, [("x", [3, 5]), ("z", [3, 5])], ["y", "p"], {"m": rand(rng, (5, 4))})
    graph = _graph(model, tmp_path)
    ops = [n.op for n in graph.nodes]
    assert ops == ["Cast", "Cast", "Add", "MatMul", "Cast", "Relu", "Cast", "Neg"], ops
    assert graph.values[graph.nodes[3].inputs[0]].dtype == "float32"
    assert "q" not in graph.values and graph.values["p"].dtype == "float16"
    feeds = {"x": rand(rng, (3, 5), 3.0), "z": rand(rng, (3, 5), 3.0)}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path))(**feeds)
    assert ulps(got["y"], want[0]) <= 1 and ulps(got["p"], want[1]) <= 1


def _bf16(x: Any) -> Any:
    return np.asarray(x, np.float32).astype(ml_dtypes.bfloat16)


#: op -> (attributes, constant weights' shapes, input shape, opset); Conv takes bfloat16 from opset 22 on.
BF16_CASES = {
    "MatMul": ({}, {"m": (6, 3)}, (4, 6), 17),
    "Softmax": ({"axis": -1}, {}, (4, 6), 17),
    "ReduceSum": ({"keepdims": 0}, {}, (4, 6), 17),
    "Conv": ({"pads": [1, 1, 1, 1]}, {"w": (3, 2, 3, 3)}, (1, 2, 5, 5), 22),
}


@pytest.mark.parametrize("op", sorted(BF16_CASES))
def test_bfloat16_node_matches_onnxruntime_in_float32(op: str, tmp_path: Any) -> None:
    """onnxruntime has no bfloat16 kernel for these: the reference is onnxruntime on the float32 node between
    explicit Casts (bfloat16 inputs fed as float32, exact; the result rounded to bfloat16 by onnxruntime's Cast)."""
    attrs, weights, shape, opset = BF16_CASES[op]
    rng = np.random.default_rng(5)
    consts = {k: _bf16(rng.standard_normal(s)) for k, s in weights.items()}
    ints = {"axes": np.array([1], np.int64)} if op == "ReduceSum" else {}
    n = helper.make_node(op, ["a"] + list(consts) + list(ints), ["y"], **attrs)
    model = half_model([n], [("a", shape)], ["y"], {**consts, **ints}, opset, TP.BFLOAT16)
    cast = [
        helper.make_node("Cast", ["y"], ["yb"], to=TP.BFLOAT16),
        helper.make_node("Cast", ["yb"], ["y32"], to=TP.FLOAT),
    ]
    f32 = {k: v.astype(np.float32) for k, v in consts.items()}
    reference = half_model([n] + cast, [("a", shape)], ["y32"], {**f32, **ints}, opset, TP.FLOAT)
    a = _bf16(rng.standard_normal(shape) * 3)
    want = run_ort(reference, {"a": a.astype(np.float32)})[0].astype(ml_dtypes.bfloat16)
    got = build_and_load(model, str(tmp_path))(a=a)["y"]
    assert got.dtype == np.uint16  # a bfloat16 output comes back as its bits
    assert ulps(got.view(ml_dtypes.bfloat16), want) <= 1


def test_bfloat16_node_onnx_forbids_is_refused(tmp_path: Any) -> None:
    """Conv's ONNX schema takes no bfloat16 before opset 22 (onnxruntime refuses the model): refused by name."""
    n = helper.make_node("Conv", ["x", "w"], ["y"])
    w = helper.make_tensor("w", TP.BFLOAT16, [2, 1, 1, 1], [0x3F80, 0x3F80])
    graph = helper.make_graph(
        [n],
        "t",
        [helper.make_tensor_value_info("x", TP.BFLOAT16, [1, 1, 3, 3])],
        [helper.make_tensor_value_info("y", TP.BFLOAT16, [1, 2, 3, 3])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(ModelFileError, match="bfloat16"):
        build_and_load(model, str(tmp_path))


def test_float16_quantize_linear_matches_onnxruntime(tmp_path: Any) -> None:
    """QuantizeLinear of float16 x by a float16 scale (the table's kernel takes float32): x and the scale widen
    exactly, so the int8 result equals onnxruntime's bit for bit, NaN, +-inf and ties included."""
    x = (np.random.default_rng(6).standard_normal(500) * 40).astype(H)
    x[:6] = [np.nan, np.inf, -np.inf, -0.0, 0.5, 1.5]
    n = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"])
    model = half_model([n], [("x", [500])], ["y"], {"s": np.array(0.5, H), "z": np.array(3, np.int8)}, 19)
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path))(x=x)["y"]
    assert got.dtype == want.dtype == np.int8
    np.testing.assert_array_equal(got, want)


def test_a_float16_bundle_verifies_where_onnxruntime_rounds_elsewhere(tmp_path: Any) -> None:
    """onnxruntime computes LayerNormalization in float16 itself, svod_min in float32 after the MatMul: a small output
    element differs by the large ones' ulp (0.004), within the half model's recorded tolerance, so run verifies."""
    import subprocess
    import sys

    rng = np.random.default_rng(5)
    consts = {
        "w": (rng.standard_normal((64, 64)) * 0.3).astype(np.float16),
        "g": (rng.standard_normal(64) + 1).astype(np.float16),
        "b": rng.standard_normal(64).astype(np.float16),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("LayerNormalization", ["m", "g", "b"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", TP.FLOAT16, [16, 64])],
        [helper.make_tensor_value_info("y", TP.FLOAT16, [16, 64])],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, path)
    from support.onnx_models import host_target

    cmd = [sys.executable, "-m", "svod_min"]
    build = subprocess.run(cmd + ["build", path, "-o", path + ".svod", "--target", host_target()], capture_output=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run(cmd + ["run", path + ".svod"], capture_output=True, text=True)
    assert run.returncode == 0 and "verify y: ok" in run.stdout, run.stdout + run.stderr
