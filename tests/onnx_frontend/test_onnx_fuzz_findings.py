"""What the front-end fuzzer found (docs/fuzzing.md), each as the smallest model that showed it: svod_min now
refuses by name (exit 2) where it raised an internal error, and agrees with onnxruntime where it did not."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")

from support.onnx_models import build_and_load, graph_model, run_ort, single_node, typed_model  # noqa: E402

from svod_min.error import ModelFileError, UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402


def test_clip_bounds_of_shape_1_are_refused_by_name(tmp_path):
    """ONNX's Clip takes scalar min/max; a [1] bound raised TypeError in the activation fusion (fuzz seed 7,
    case 130)."""
    import onnx

    model = single_node(
        "Clip", [("x", (4, 2))], consts={"lo": np.array([-0.5], np.float32), "hi": np.array(0.7, np.float32)}
    )
    path = str(tmp_path / "clip.onnx")
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError, match=r"min/max must be scalars .*'lo' is \[1\]"):
        lower_model(path)


@pytest.mark.parametrize("lo, hi", [(np.inf, 3.4e38), (2.0, -1.0)])
def test_clip_with_min_above_max_gives_max_as_onnxruntime_does(tmp_path, lo, hi):
    """ONNX: when min > max every value becomes max; the kernel gave min (fuzz seed 1, case 2: lo=inf)."""
    pytest.importorskip("onnxruntime")
    model = single_node(
        "Clip", [("x", (2, 5))], consts={"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    )
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)


def _lstm(w_shape, hidden: int, r_dtype=np.float32):
    """An LSTM without its optional Y output (the contract was skipped for a node whose first output is unnamed)."""
    from onnx import helper

    rng = np.random.default_rng(0)
    consts = {
        "W": rng.standard_normal(w_shape).astype(np.float32),
        "R": rng.standard_normal((1, 12, 3)).astype(r_dtype),
        "B": np.zeros((1, 24), np.float32),
    }
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["", "h"], hidden_size=hidden)
    return graph_model([node], [("x", (4, 2, 5))], ["h"], 14, consts)


def _float_out(model, rank: int):
    """``model`` with its outputs declared float32 of ``rank`` unnamed dims (shape inference, refusing the node,
    leaves them untyped, which the checker refuses)."""
    from onnx import TensorProto

    for out in model.graph.output:
        out.type.tensor_type.elem_type = TensorProto.FLOAT
        for i in range(rank):
            out.type.tensor_type.shape.dim.add().dim_param = "d%d" % i
    return model


def _refused_models():
    """(id, model, what the refusal says) for each model onnxruntime refuses that svod_min built or crashed on."""
    from onnx import TensorProto, helper, numpy_helper

    f32 = np.float32
    gather = helper.make_node("Gather", ["e", "i"], ["y"], axis=2**40)  # constant data: inference skips the axis
    yield (
        "softmax-axis",
        single_node("Softmax", [("x", (2, 5, 3))], axis=2**40),
        r"attribute axis=1099511627776 is out of range \[-3, 2\]",
    )
    yield (
        "gather-axis",
        _float_out(typed_model([gather], [("i", (2,), TensorProto.INT64)], ["y"], 13, {"e": np.ones(39, f32)}), 1),
        r"attribute axis=1099511627776 is out of range \[-1, 0\]",
    )
    yield "lstm-w-rank-1", _lstm((59,), 3), r"'W' \[59\] must be \[1, 12, 5\]"
    yield "lstm-hidden-size", _lstm((1, 12, 5), 64), r"'W' \[1, 12, 5\] must be \[1, 256, 5\]"
    yield (
        "lstm-int64-r",
        _lstm((1, 12, 5), 3, np.int64),
        r"node 0 \(LSTM\).*R typestr: T, has unsupported type: tensor\(int64\)",
    )
    yield "transpose-short-perm", single_node("Transpose", [("x", (2, 3, 4))], perm=[0, 1]), r"perm \[0, 1\] is not a"
    yield (
        "conv-uint8-weight",
        single_node("Conv", [("x", (1, 2, 5, 5))], consts={"w": np.ones((3, 2, 3, 3), np.uint8)}),
        r"node 0 \(Conv\).*W typestr: T, has unsupported type: tensor\(uint8\)",
    )
    bn = {"s": np.ones(2, f32), "b": np.zeros(2, bool), "m": np.zeros(2, f32), "v": np.ones(2, f32)}
    yield (
        "batchnorm-bool-bias",
        single_node("BatchNormalization", [("x", (1, 2, 3))], consts=bn),
        r"B typestr: T1, has unsupported type: tensor\(bool\)",
    )
    two = np.array([0, 1], np.int64)
    ends = {"st": two, "en": np.array([[2, 3]], np.int64), "ax": two, "sp": np.array([1, 1], np.int64)}
    yield (
        "slice-2d-ends",
        _float_out(single_node("Slice", [("x", (4, 5))], consts=ends), 2),
        r"must be 1-D and of one length",
    )
    rng = graph_model(
        [helper.make_node("Range", ["a", "b", "c"], ["r"]), helper.make_node("Add", ["x", "r"], ["y"])],
        [("x", (3,))],
        ["y"],
        17,
        {"a": np.zeros(0, f32), "b": np.array(3, f32), "c": np.array(1, f32)},
    )
    yield "range-empty-start", _float_out(rng, 1), r"Range.*should be scalars"
    mixed = dict(ends, en=np.array([2, 3], np.int32))
    yield "slice-int32-ends", single_node("Slice", [("x", (4, 5))], consts=mixed), r"ends has inconsistent type"
    # a node with an empty result folds away; its contract and its input types are still checked
    empty_gather = single_node("Gather", [("x", (5, 3))], consts={"i": np.zeros(0, np.uint8)})
    yield "gather-empty-uint8-indices", empty_gather, r"node 0 \(Gather\).*unsupported type: tensor\(uint8\)"
    gemm = single_node("Gemm", [("a", (3, 5))], consts={"b": np.zeros((0, 5), f32), "c": np.ones(4, f32)}, transB=1)
    yield "gemm-c-of-an-empty-result", gemm, r"C 'c' \[4\] does not broadcast to the result \[3, 0\]"
    norm = single_node("LayerNormalization", [("x", (0,))], consts={"g": np.ones(8, f32), "bb": np.zeros(8, f32)})
    yield (
        "layernorm-scale-of-an-empty-input",
        norm,
        r"'g' \[8\] does not broadcast to the normalized dims \[0\] of input 'x'",
    )
    pads = {"p": np.array([0, 5, 0, 0, 1, 0], np.int64)}
    reflect = single_node("Pad", [("x", (2, 3, 4))], consts=pads, mode="reflect")
    yield "pad-reflect-beyond-the-edge", reflect, r"reflect pads 5 and 1 on axis 1 of 'x' \[2, 3, 4\]"
    inorm = single_node(
        "InstanceNormalization", [("x", (2, 3, 4))], consts={"s": np.ones(3, f32), "b": np.zeros((1, 3), f32)}
    )
    yield "instancenorm-2d-bias", inorm, r"'b' \[1, 3\] must be 1-D"
    lstm = _lstm((1, 12, 5), 3)
    lstm.graph.node[0].input.extend(["", "h0"])
    lstm.graph.initializer.append(numpy_helper.from_array(np.zeros((1, 3, 3), f32), "h0"))
    yield "lstm-initial-h-batch", lstm, r"'h0' \[1, 3, 3\] must be \[1, 2, 3\]"
    yield "lrn-size-0", single_node("LRN", [("x", (1, 3, 4, 4))], size=0), r"attribute size \(required, 1 or more\)"
    yield "lrn-of-a-vector", single_node("LRN", [("x", (5,))], size=3), r"'x' \[5\] has no channel axis"
    split = single_node("Split", [("x", (6,))], ("y", "z"), opset=13, consts={"s": np.array([[2, 4]], np.int64)})
    yield "split-2d-sizes", split, r"split sizes 's' \[1, 2\] must be 1-D"


@pytest.mark.parametrize("case", list(_refused_models()), ids=lambda c: c[0])
def test_models_onnxruntime_refuses_are_refused_by_name(tmp_path, case):
    """Each built (or raised IndexError/TypeError) before: fuzz seeds 7, 11 and 13 (docs/fuzzing.md)."""
    import onnx

    _, model, message = case
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(ModelFileError, match=message):
        lower_model(path)


def test_a_graph_returning_its_input_runs(tmp_path):
    """A graph whose only node was bypassed (its output is its input) built a plan without ops that run refused
    (fuzz seed 11, case 1038); the output is the input, as onnxruntime gives."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    want = run_ort(model, {"x": x})[0] if _have_ort() else x
    np.testing.assert_array_equal(build_and_load(model, str(tmp_path)).run({"x": x})["x"], want)


def _have_ort() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_graph_without_outputs_is_refused_by_name(tmp_path):
    import onnx
    from onnx import helper

    model = graph_model([helper.make_node("Relu", ["x"], ["y"])], [("x", (2, 3))], [], 17, {})
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(ModelFileError, match="the model's graph has no outputs"):
        lower_model(path)


def test_an_empty_result_whose_other_dims_overflow_is_refused_by_name(tmp_path):
    # DepthToSpace of 8 channels by a block of 2^31: inference gives [1, 0, 2^32, 3 * 2^31], which numpy cannot
    # hold even empty (it raised ValueError from the parser)
    import onnx

    model = single_node("DepthToSpace", [("x", (1, 8, 2, 3))], opset=13, blocksize=2**31, mode="DCR")
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(ModelFileError, match=r"tensor 'y' has shape \[1, 0, 4294967296, 6442450944\]"):
        lower_model(path)
