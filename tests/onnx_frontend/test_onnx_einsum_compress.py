"""Einsum, Compress, bool ReduceMax/ReduceMin and MaxUnpool against onnxruntime (and numpy where onnxruntime has no
kernel), and their refusals: a malformed or unimplemented equation, a run-time condition without a pin, an
output_shape that onnx's reference and onnxruntime read differently, MaxUnpool indices outside the output (constant:
refused at build; from data: reported at run, nothing written)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.error import IndexOutOfRangeError, ModelFileError, UnsupportedModelError  # noqa: E402

F, D, I64, B = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.BOOL

#: (equation, operand shapes): matmul, batched, diagonal, trace, ellipsis broadcast (a dim of 1 against 5), implicit
#: output (transposed, contracted), three operands, an outer product, a sum to a scalar, a repeated letter kept,
#: upper-case letters, and permuted matmuls.
EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(5, 5)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (2, 5, 4, 2)]),
    ("ba", [(3, 2)]),
    ("ij,jk", [(2, 3), (3, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->", [(3, 4)]),
    ("bii->bi", [(2, 3, 3)]),
    ("i...->...", [(3, 2, 2)]),
    ("Ab,bC->AC", [(2, 3), (3, 2)]),
    # float32 contractions of two operands run as matmuls: operands and result permuted where their layout differs
    ("bqd,bkd->bqk", [(2, 3, 4), (2, 5, 4)]),
    ("ik,kj->ji", [(3, 4), (4, 2)]),
    ("kib,bkj->jbi", [(4, 3, 2), (2, 4, 5)]),
    ("ij,jk->k", [(2, 3), (3, 4)]),  # i summed within one operand: the kernel
]


def _einsum_model(dtype, opset=12):
    nodes, inputs, outputs = [], [], []
    for k, (eq, shapes) in enumerate(EQUATIONS):
        names = ["e%d_%d" % (k, j) for j in range(len(shapes))]
        nodes.append(helper.make_node("Einsum", names, ["y%d" % k], equation=eq))
        inputs += [(n, s, dtype) for n, s in zip(names, shapes)]
        outputs.append("y%d" % k)
    return typed_model(nodes, inputs, outputs, opset, {}), inputs


@pytest.mark.parametrize("dtype", [F, D, I64])
def test_einsum_equations_match_onnxruntime(tmp_path, dtype):
    model, inputs = _einsum_model(dtype)
    rng = np.random.default_rng(0)
    np_dtype = {F: np.float32, D: np.float64, I64: np.int64}[dtype]
    feeds = {n: (rng.standard_normal(s) * 3).astype(np_dtype) for n, s, _ in inputs}
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for k, (eq, _) in enumerate(EQUATIONS):
        y = got["y%d" % k]
        assert y.shape == want[k].shape and y.dtype == want[k].dtype, eq
        if dtype == I64:
            np.testing.assert_array_equal(y, want[k], err_msg=eq)
        else:
            np.testing.assert_allclose(y, want[k], rtol=1e-5, atol=1e-5, err_msg=eq)


def _one_einsum(equation, shapes):
    names = ["x%d" % j for j in range(len(shapes))]
    node = helper.make_node("Einsum", names, ["y"], equation=equation)
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info(n, F, list(s)) for n, s in zip(names, shapes)],
        [helper.make_tensor_value_info("y", F, ["d"])],  # a shape, so the checker lets the model through
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 8
    return model


@pytest.mark.filterwarnings("ignore:output 'y' is declared with shape")  # the declaration these models carry
@pytest.mark.parametrize(
    "equation, shapes, error, words",
    [
        # a label of two sizes, the inputs' ellipsis dropped from the output: the node and equation named
        ("ij,ij->i", [(2, 3), (3, 2)], UnsupportedModelError, ["node 0 (Einsum)", "'ij,ij->i'", "label 'i'"]),
        ("...ij->ij", [(5, 2, 3)], UnsupportedModelError, ["node 0 (Einsum)", "ellipsis dims must appear"]),
        # onnx's own shape inference loops forever on these: refused before it runs
        ("i.j->ij", [(2, 3)], ModelFileError, ["equation 'i.j->ij' is malformed"]),
        ("..ij->ij", [(2, 3)], ModelFileError, ["malformed"]),
    ],
)
def test_einsum_refusals_name_the_equation(tmp_path, equation, shapes, error, words):
    with pytest.raises(error) as info:
        build_and_load(_one_einsum(equation, shapes), str(tmp_path))
    assert info.value.exit_code == 2
    for word in words:
        assert word in str(info.value), (word, str(info.value))


# -- Compress ---------------------------------------------------------------------------------------------------


def _compress(cond, axis=None, as_input=False):
    attrs = {} if axis is None else {"axis": axis}
    node = helper.make_node("Compress", ["x", "c"], ["y"], **attrs)
    inputs = [("x", (3, 4), F)] + ([("c", cond.shape, B)] if as_input else [])
    return typed_model([node], inputs, ["y"], 11, {} if as_input else {"c": cond})


@pytest.mark.parametrize(
    "cond, axis",
    [
        (np.array([True, False, True]), 0),
        (np.array([False, True, True, False]), -1),
        (np.array([True, False]), 1),  # shorter than the axis: the rest is discarded
        (np.array([0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 1], bool), None),  # the flattened input
        (np.zeros(3, bool), 0),  # nothing selected: an empty output
    ],
)
def test_compress_constant_condition_matches_onnxruntime(tmp_path, cond, axis):
    model = _compress(cond, axis)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_compress_runtime_condition_needs_a_pin_and_runs_pinned(tmp_path):
    cond = np.array([True, False, True])
    model = _compress(cond, 0, as_input=True)
    with pytest.raises(UnsupportedModelError, match="--pin c="):
        build_and_load(model, str(tmp_path))
    m = build_and_load(model, str(tmp_path), name="pinned", pins={"c": cond})
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(m.run({"x": x, "c": cond})["y"], x[[0, 2]])


def test_compress_condition_past_the_axis_is_refused(tmp_path):
    model = _compress(np.array([True, False, True, True]), 0)
    with pytest.raises(UnsupportedModelError, match="selects position 3, past the 3 positions of axis 0"):
        build_and_load(model, str(tmp_path))


# -- ReduceMax / ReduceMin on bool --------------------------------------------------------------------------------


@pytest.mark.parametrize("keepdims", [0, 1])
def test_bool_reduce_max_is_any_and_min_is_all(tmp_path, keepdims):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 2, (3, 4, 5)).astype(bool)
    x[1, :, 2] = True  # a line of all true and one of all false along axis 1
    x[2, :, 3] = False
    cases = [([1], "a"), ([0, 2], "b"), ([], "c")]  # one axis, axes not in one block, empty: every axis
    nodes, consts, outputs = [], {}, []
    for axes, tag in cases:
        consts["axes_" + tag] = np.array(axes, np.int64)
        for op in ("ReduceMax", "ReduceMin"):
            out = "%s_%s" % (op, tag)
            nodes.append(helper.make_node(op, ["x", "axes_" + tag], [out], keepdims=keepdims))
            outputs.append(out)
    nodes.append(helper.make_node("ReduceMax", ["x", "axes_c"], ["noop"], noop_with_empty_axes=1))
    outputs.append("noop")
    model = typed_model(nodes, [("x", x.shape, B)], outputs, 20, consts)
    got = build_and_load(model, str(tmp_path)).run({"x": x})
    for axes, tag in cases:
        ax = tuple(axes) or None
        np.testing.assert_array_equal(got["ReduceMax_" + tag], np.any(x, axis=ax, keepdims=bool(keepdims)))
        np.testing.assert_array_equal(got["ReduceMin_" + tag], np.all(x, axis=ax, keepdims=bool(keepdims)))
    np.testing.assert_array_equal(got["noop"], x)
    want = run_ort(model, {"x": x})
    for name, w in zip(outputs, want):
        np.testing.assert_array_equal(got[name], w, err_msg=name)


# -- MaxUnpool ----------------------------------------------------------------------------------------------------


def _unpool(indices=None, output_shape=None, pads=(0, 0, 0, 0)):
    """MaxPool(x) -> (v, i) -> MaxUnpool(v, i); or, with ``indices``, MaxUnpool of fed values at those indices."""
    attrs = dict(kernel_shape=[2, 2], strides=[2, 2], pads=list(pads))
    consts = {} if output_shape is None else {"shape": np.array(output_shape, np.int64)}
    extra = [] if output_shape is None else ["shape"]
    if indices is None:
        nodes = [
            helper.make_node("MaxPool", ["x"], ["v", "i"], **attrs),
            helper.make_node("MaxUnpool", ["v", "i"] + extra, ["y"], **attrs),
        ]
        return _declared_y(typed_model(nodes, [("x", (2, 3, 4, 6), F)], ["y"], 22, consts))
    node = helper.make_node("MaxUnpool", ["v", "i"] + extra, ["y"], **attrs)
    inputs = [("v", (1, 1, 2, 2), F)]
    if isinstance(indices, np.ndarray):
        consts["i"] = indices
    else:
        inputs.append(("i", (1, 1, 2, 2), I64))
    return _declared_y(typed_model([node], inputs, ["y"], 22, consts))


def _declared_y(model):
    """y declared float of rank 4: onnx's inference leaves MaxUnpool's output open where output_shape is given."""
    y = model.graph.output[0]
    y.type.tensor_type.elem_type = F
    if not y.type.tensor_type.HasField("shape"):
        for d in "nchw":
            y.type.tensor_type.shape.dim.add().dim_param = d
    return model


def test_max_unpool_of_max_pool_matches_onnxruntime(tmp_path):
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 6)).astype(np.float32)
    for k, shape in enumerate([None, [2, 3, 4, 6]]):  # the default shape, given or not
        model = _unpool(output_shape=shape)
        got = build_and_load(model, str(tmp_path), name="m%d" % k).run({"x": x})["y"]
        want = run_ort(model, {"x": x})[0]
        assert got.shape == want.shape == (2, 3, 4, 6)
        np.testing.assert_array_equal(got, want)


def test_max_unpool_indices_from_data_are_checked(tmp_path):
    m = build_and_load(_unpool(indices="fed"), str(tmp_path))
    v = np.array([1, 2, 3, 4], np.float32).reshape(1, 1, 2, 2)
    good = np.array([0, 15, 15, 5], np.int64).reshape(1, 1, 2, 2)  # two at one position: the later one stays
    want = np.zeros(16, np.float32)
    want[[0, 15, 5]] = [1, 3, 4]
    np.testing.assert_array_equal(m.run({"v": v, "i": good})["y"].reshape(-1), want)
    for bad, value, at in [([0, 16, 1, 2], 16, 1), ([0, 1, 2, -1], -1, 3), ([1 << 40, 1, 2, 3], 1 << 40, 0)]:
        with pytest.raises(IndexOutOfRangeError) as info:
            m.run({"v": v, "i": np.array(bad, np.int64).reshape(1, 1, 2, 2)})
        text = str(info.value)
        assert "index %d at position [0, 0, %d, %d]" % (value, at // 2, at % 2) in text, text
        assert "out of range [0, 15]" in text and "MaxUnpool" in text, text
    np.testing.assert_array_equal(m.run({"v": v, "i": good})["y"].reshape(-1), want)  # the plan is not poisoned


def test_max_unpool_constant_index_out_of_range_is_refused_at_build(tmp_path):
    model = _unpool(indices=np.array([0, 1, 16, 2], np.int64).reshape(1, 1, 2, 2))
    with pytest.raises(IndexOutOfRangeError, match=r"index 16 at position \[0, 0, 1, 0\].*out of range \[0, 15\]"):
        build_and_load(model, str(tmp_path))


def test_max_unpool_other_output_shape_is_refused(tmp_path):
    with pytest.raises(UnsupportedModelError, match=r"output_shape \[2, 3, 5, 7\] differs from the default shape"):
        build_and_load(_unpool(output_shape=[2, 3, 5, 7]), str(tmp_path))
