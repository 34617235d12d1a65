"""CumSum, Clip with run-time bounds and on integers, LayerNormalization's Mean and InvStdDev, Hardmax,
LpNormalization, LpPool, EyeLike, GatherND, ScatterND, ScatterElements and OneHot against onnxruntime on seeded
random data; the index-taking ones also with a bad index from data (IndexOutOfRangeError at run, nothing written
through it). Each model holds several cases, so one build compiles them all."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.error import IndexOutOfRangeError  # noqa: E402

F, D, I32, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64
I8, U8 = TensorProto.INT8, TensorProto.UINT8
NP = {F: np.float32, D: np.float64, I32: np.int32, I64: np.int64, I8: np.int8, U8: np.uint8}


def _feeds(inputs, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape, t in inputs:
        kind = np.dtype(NP[t]).kind
        if kind == "f":
            out[name] = rng.standard_normal(shape).astype(NP[t])
        else:
            info = np.iinfo(NP[t])
            lo, hi = max(info.min, -100), min(info.max, 100)
            out[name] = rng.integers(lo, hi + 1, shape).astype(NP[t])
    return out


def _check(tmp_path, nodes, inputs, outputs, opset=17, consts=None, feeds=None, exact=False, name="m"):
    """Build ``nodes`` once, run svod_min and onnxruntime on the same feeds, compare every output."""
    model = typed_model(nodes, inputs, outputs, opset, consts or {})
    feeds = _feeds(inputs) if feeds is None else feeds
    want = run_ort(model, feeds)
    m = build_and_load(model, str(tmp_path), name)
    got = m.run(feeds)
    for o, w in zip(outputs, want):
        g = got[o]
        assert g.dtype == w.dtype and g.shape == w.shape, (o, g.dtype, w.dtype, g.shape, w.shape)
        if exact or w.dtype.kind not in "f":
            np.testing.assert_array_equal(g, w, err_msg=o)
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=o)
    return model, m


def test_cumsum_every_dtype_axis_exclusive_and_reverse(tmp_path):
    nodes, outputs = [], []
    axes = {}
    for t, shape in ((F, (3, 4, 5)), (D, (3, 4, 5)), (I32, (3, 4, 5)), (I64, (3, 4, 5))):
        for axis in (0, 1, -1) if t == F else (1,):  # every axis on float32, the middle one on the others
            for exclusive in (0, 1):
                for reverse in (0, 1):
                    a = "a%d" % axis
                    axes[a] = np.array(axis, np.int64)
                    y = "y_%d_%d_%d_%d" % (t, axis + 1, exclusive, reverse)
                    nodes.append(helper.make_node("CumSum", ["x%d" % t, a], [y], exclusive=exclusive, reverse=reverse))
                    outputs.append(y)
    inputs = [("x%d" % t, (3, 4, 5), t) for t in (F, D, I32, I64)]
    nodes.append(helper.make_node("CumSum", ["v", "a32"], ["y_1d"]))  # a 1-D input, an int32 axis
    axes["a32"] = np.array([0], np.int32)
    _check(tmp_path, nodes, inputs + [("v", (7,), F)], outputs + ["y_1d"], opset=14, consts=axes, exact=True)


def test_hardmax_and_lp_normalization(tmp_path):
    nodes = [
        helper.make_node("Hardmax", ["x"], ["h0"], axis=0),
        helper.make_node("Hardmax", ["x"], ["h1"], axis=1),
        helper.make_node("Hardmax", ["x"], ["h2"]),
        helper.make_node("Hardmax", ["t"], ["ht"]),
        helper.make_node("LpNormalization", ["x"], ["l1"], axis=1, p=1),
        helper.make_node("LpNormalization", ["x"], ["l2"]),
        helper.make_node("LpNormalization", ["x"], ["l20"], axis=0, p=2),
        helper.make_node("LpNormalization", ["d"], ["ld"], axis=1, p=2),
    ]
    inputs = [("x", (3, 4, 5), F), ("t", (4, 3), F), ("d", (2, 6), D)]
    feeds = _feeds(inputs)
    # ties: the first largest wins; a NaN never wins, and a line that starts with one is all 0 (onnxruntime)
    feeds["t"] = np.array([[1, 3, 3], [0, 0, 0], [1, np.nan, 2], [np.nan, 5, 1]], np.float32)
    feeds["x"][1, :, 2] = 0  # a zero norm along axis 1
    _check(tmp_path, nodes, inputs, ["h0", "h1", "h2", "ht", "l1", "l2", "l20", "ld"], opset=13, feeds=feeds)


def test_clip_with_bounds_fed_at_run_time_and_on_integers(tmp_path):
    nodes = [
        helper.make_node("Clip", ["x", "lo", "hi"], ["both"]),
        helper.make_node("Clip", ["x", "", "hi"], ["upper"]),
        helper.make_node("Clip", ["x", "lo"], ["lower"]),
        helper.make_node("Clip", ["x", "hi", "lo"], ["crossed"]),  # min > max: every element becomes max
        helper.make_node("Clip", ["i8", "lo8", "hi8"], ["c8"]),
        helper.make_node("Clip", ["i8"], ["c8_none"]),
        helper.make_node("Clip", ["i32", "k_lo32", "k_hi32"], ["c32"]),  # constant bounds on int32
        helper.make_node("Clip", ["i64", "", "k_hi64"], ["c64"]),
        helper.make_node("Clip", ["u8", "k_lou8"], ["cu8"]),
        helper.make_node("Clip", ["d", "dlo", "k_dhi"], ["cd"]),
        helper.make_node("Add", ["x", "x"], ["twice"]),  # a float32 Add before a run-time Clip: not fused
        helper.make_node("Clip", ["twice", "lo", "hi"], ["after_add"]),
        helper.make_node("Add", ["i32", "i32"], ["i32_twice"]),  # an int32 Add before a constant Clip: not fused
        helper.make_node("Clip", ["i32_twice", "k_lo32", "k_hi32"], ["i32_after_add"]),
    ]
    inputs = [
        ("x", (3, 5), F), ("lo", (), F), ("hi", (), F), ("i8", (4, 6), I8), ("lo8", (), I8), ("hi8", (), I8),
        ("i32", (2, 9), I32), ("i64", (11,), I64), ("u8", (5,), U8), ("d", (2, 3), D), ("dlo", (), D),
    ]  # fmt: skip
    consts = {
        "k_lo32": np.array(-20, np.int32),
        "k_hi32": np.array(35, np.int32),
        "k_hi64": np.array(7, np.int64),
        "k_lou8": np.array(50, np.uint8),
        "k_dhi": np.array(0.25, np.float64),
    }
    feeds = _feeds(inputs)
    feeds.update(lo=np.array(-0.5, np.float32), hi=np.array(0.75, np.float32))
    feeds.update(lo8=np.array(-30, np.int8), hi8=np.array(40, np.int8), dlo=np.array(-0.1))
    outputs = ["both", "upper", "lower", "crossed", "c8", "c8_none", "c32", "c64", "cu8", "cd", "after_add"]
    _, m = _check(tmp_path, nodes, inputs, outputs + ["i32_after_add"], opset=13, consts=consts, feeds=feeds)
    feeds.update(lo=np.array(0.1, np.float32), hi=np.array(0.2, np.float32), lo8=np.array(5, np.int8))
    got = m.run(feeds)  # other bounds, same bundle
    np.testing.assert_array_equal(got["both"], np.clip(feeds["x"], 0.1, 0.2))
    np.testing.assert_array_equal(got["c8"], np.clip(feeds["i8"], 5, 40))


def test_layer_normalization_mean_and_inv_std_dev(tmp_path):
    nodes = [
        helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv"], axis=-1, epsilon=1e-3),
        helper.make_node("LayerNormalization", ["x", "s2"], ["y2", "", "inv2"], axis=1),  # no bias, no Mean
        helper.make_node("LayerNormalization", ["x", "s", "b"], ["y3", "mean3"]),
    ]
    inputs = [("x", (2, 3, 5), F), ("s", (5,), F), ("b", (5,), F), ("s2", (3, 5), F)]
    feeds = _feeds(inputs)
    feeds["x"] = feeds["x"] * 3 + 1  # a mean away from 0
    _check(tmp_path, nodes, inputs, ["y", "mean", "inv", "y2", "inv2", "y3", "mean3"], opset=17, feeds=feeds)


def test_lp_pool_1d_2d_3d(tmp_path):
    nodes = [
        helper.make_node("LpPool", ["x1"], ["p1"], kernel_shape=[3], p=1),
        helper.make_node("LpPool", ["x2"], ["p2"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]),
        helper.make_node("LpPool", ["x2"], ["p2s"], kernel_shape=[2, 3], auto_pad="SAME_LOWER", p=3),
        helper.make_node("LpPool", ["x2"], ["p2d"], kernel_shape=[2, 2], dilations=[2, 1]),
        helper.make_node("LpPool", ["x3"], ["p3"], kernel_shape=[2, 2, 2], strides=[1, 2, 1]),
    ]
    inputs = [("x1", (1, 2, 9), F), ("x2", (2, 3, 7, 6), F), ("x3", (1, 2, 4, 5, 3), F)]
    _check(tmp_path, nodes, inputs, ["p1", "p2", "p2s", "p2d", "p3"], opset=18)


def test_eye_like_dtypes_and_diagonals(tmp_path):
    nodes = [
        helper.make_node("EyeLike", ["x"], ["e0"]),
        helper.make_node("EyeLike", ["x"], ["e_up"], k=2),
        helper.make_node("EyeLike", ["x"], ["e_down"], k=-1, dtype=I32),
        helper.make_node("EyeLike", ["i"], ["e_i"], dtype=D),
        helper.make_node("EyeLike", ["i"], ["e_far"], k=9),  # past the last column: all zeros
    ]
    inputs = [("x", (3, 5), F), ("i", (4, 2), I64)]
    _check(tmp_path, nodes, inputs, ["e0", "e_up", "e_down", "e_i", "e_far"], opset=13, exact=True)


def test_one_hot_axes_dtypes_and_out_of_range_indices(tmp_path):
    """The index/values/depth dtype triples onnxruntime has kernels for."""
    nodes = [
        helper.make_node("OneHot", ["i", "depth", "v"], ["h_last"]),
        helper.make_node("OneHot", ["i", "depth", "v"], ["h0"], axis=0),
        helper.make_node("OneHot", ["i32", "depth32", "v"], ["h_mid"], axis=1),
        helper.make_node("OneHot", ["f", "depth", "vi"], ["h_float"], axis=-2),
        helper.make_node("OneHot", ["i", "depthf", "k_v32"], ["h_const_values"]),
    ]
    inputs = [("i", (2, 3), I64), ("v", (2,), F), ("i32", (4,), I32), ("vi", (2,), I64), ("f", (3, 2), F)]
    feeds = {
        "i": np.array([[0, 4, -1], [-6, 5, 100]], np.int64),  # -6, 5 and 100 are outside [-5, 4]: all off
        "v": np.array([-1.5, 2.5], np.float32),
        "i32": np.array([3, -2, 7, 0], np.int32),
        "vi": np.array([7, -9], np.int64),
        "f": np.array([[1.7, -0.5], [-4.2, 9.0], [3.0, 2.0]], np.float32),
    }
    consts = {
        "depth": np.array(5, np.int64),
        "depth32": np.array([5], np.int32),
        "depthf": np.array(5.0, np.float32),
        "k_v32": np.array([0, 1], np.int32),
    }
    outputs = ["h_last", "h0", "h_mid", "h_float", "h_const_values"]
    _check(tmp_path, nodes, inputs, outputs, opset=11, consts=consts, feeds=feeds)


def test_gather_nd_scatter_nd_scatter_elements_with_constant_indices(tmp_path):
    nodes = [
        helper.make_node("GatherND", ["x", "k_nd"], ["g"]),
        helper.make_node("GatherND", ["x", "k_nd1"], ["g_rows"]),
        helper.make_node("GatherND", ["x", "k_batch"], ["g_batch"], batch_dims=1),
        helper.make_node("GatherND", ["xi", "k_nd"], ["g_int"]),
        helper.make_node("ScatterND", ["x", "k_snd", "u_snd"], ["s_nd"]),
        helper.make_node("ScatterND", ["x", "k_dup", "u_dup"], ["s_nd_add"], reduction="add"),
        helper.make_node("ScatterND", ["xi", "k_dup", "u_dup_i"], ["s_nd_mul"], reduction="mul"),
        helper.make_node("ScatterElements", ["x", "k_se", "u_se"], ["s_el"], axis=1),
        helper.make_node("ScatterElements", ["x", "k_se", "u_se"], ["s_el_max"], axis=1, reduction="max"),
        helper.make_node("ScatterElements", ["x", "k_se0", "u_se0"], ["s_el_min"], axis=0, reduction="min"),
        helper.make_node("ScatterElements", ["xi", "k_se", "u_se_i"], ["s_el_add"], axis=-2, reduction="add"),
        # data computed and read by the scatter alone: written in place into the output, no copy
        helper.make_node("Mul", ["x", "x"], ["sq"]),
        helper.make_node("ScatterND", ["sq", "k_snd", "u_snd"], ["s_nd_sq"]),
        helper.make_node("Mul", ["x", "x"], ["sq2"]),
        helper.make_node("ScatterElements", ["sq2", "k_se", "u_se"], ["s_el_sq"], axis=1),
        helper.make_node("Add", ["s_el_sq", "x"], ["s_el_sq_plus"]),  # and read after it
    ]
    inputs = [("x", (3, 4, 2), F), ("xi", (3, 4, 2), I64)]
    rng = np.random.default_rng(1)
    consts = {
        "k_nd": np.array([[0, 3, 1], [2, -1, 0]], np.int64),
        "k_nd1": np.array([[[2], [-3]]], np.int64),
        "k_batch": np.array([[1, 0], [3, 1], [-4, 1]], np.int64),
        "k_snd": np.array([[1, 2], [-1, 0]], np.int64),
        "u_snd": rng.standard_normal((2, 2)).astype(np.float32),
        "k_dup": np.array([[1], [1], [0]], np.int64),  # duplicates reduce in order
        "u_dup": rng.standard_normal((3, 4, 2)).astype(np.float32),
        "u_dup_i": rng.integers(-3, 4, (3, 4, 2)).astype(np.int64),
        "k_se": np.array([[[1, 0], [3, -1]], [[0, 0], [2, 2]]], np.int64),
        "u_se": rng.standard_normal((2, 2, 2)).astype(np.float32),
        "u_se_i": rng.integers(-50, 50, (2, 2, 2)).astype(np.int64),
        "k_se0": np.array([[[2, -1]], [[0, 2]]], np.int32),
        "u_se0": rng.standard_normal((2, 1, 2)).astype(np.float32),
    }
    # max and min as onnxruntime compares: a NaN update wins, an update replaces a NaN element
    consts["u_se"][0, 0, 0] = consts["u_se0"][1, 0, 1] = np.nan
    feeds = _feeds(inputs)
    feeds["x"][0, 3, 0] = feeds["x"][2, 0, 1] = np.nan
    outputs = ["g", "g_rows", "g_batch", "g_int", "s_nd", "s_nd_add", "s_nd_mul", "s_el", "s_el_max", "s_el_min"]
    outputs += ["s_el_add", "s_nd_sq", "s_el_sq_plus"]
    _check(tmp_path, nodes, inputs, outputs, opset=18, consts=consts, feeds=feeds, exact=True)
    from svod_min.onnx.build import lower_model

    copied = {op["copy"]["dst"] for op in lower_model(str(tmp_path / "m.onnx")).doc["ops"] if "copy" in op}
    assert {"s_nd", "s_el"} <= copied and not {"s_nd_sq", "s_el_sq"} & copied, copied


# -- indices from data: checked by the kernel at run (docs/onnx.md, "Indices") ------------------------------------

FAR = 1 << 40


@pytest.fixture(scope="module")
def indexed_model(tmp_path_factory):
    """GatherND, ScatterND (add) and ScatterElements with their indices fed at run time, in one bundle."""
    nodes = [
        helper.make_node("GatherND", ["x", "i_gnd"], ["g"], name="gnd"),
        helper.make_node("ScatterND", ["x", "i_snd", "u_snd"], ["s"], name="snd", reduction="add"),
        helper.make_node("ScatterElements", ["x", "i_se", "u_se"], ["e"], name="se", axis=1),
        helper.make_node("Scatter", ["x", "i_old", "u_se"], ["o"], name="old", axis=-1),
    ]
    inputs = [
        ("x", (3, 4, 2), F), ("i_gnd", (2, 2), I64), ("i_snd", (3, 2), I64), ("u_snd", (3, 2), F),
        ("i_se", (2, 2, 2), I32), ("u_se", (2, 2, 2), F), ("i_old", (2, 2, 2), I64),
    ]  # fmt: skip
    model = typed_model(nodes[:3], inputs[:6], ["g", "s", "e"], 16, {})
    opset10 = typed_model(nodes[3:], [inputs[0], inputs[5], inputs[6]], ["o"], 10, {})
    directory = tmp_path_factory.mktemp("indexed")
    return (model, build_and_load(model, str(directory))), (opset10, build_and_load(opset10, str(directory), "old"))


def _good_feeds():
    rng = np.random.default_rng(3)
    return {
        "x": rng.standard_normal((3, 4, 2)).astype(np.float32),
        "i_gnd": np.array([[2, -4], [0, 3]], np.int64),
        "i_snd": np.array([[1, 1], [-3, 0], [1, 1]], np.int64),  # a duplicate: both added
        "u_snd": rng.standard_normal((3, 2)).astype(np.float32),
        "i_se": np.array([[[3, 0], [-4, 1]], [[2, 2], [0, -1]]], np.int32),
        "u_se": rng.standard_normal((2, 2, 2)).astype(np.float32),
        "i_old": np.array([[[1, 0], [-2, 1]], [[0, 1], [1, -1]]], np.int64),
    }


#: input -> (a bad index, its position, the bound, the node's label, the other inputs its node reads)
BAD = {
    "i_gnd": ((1, 1), FAR, "[1, 1]", "[-4, 3]", "(GatherND, 'gnd')"),
    "i_snd": ((2, 0), -4, "[2, 0]", "[-3, 2]", "(ScatterND, 'snd')"),
    "i_se": ((1, 0, 1), 4, "[1, 0, 1]", "[-4, 3]", "(ScatterElements, 'se')"),
    "i_old": ((0, 1, 0), -3, "[0, 1, 0]", "[-2, 1]", "(Scatter, 'old')"),
}


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_index_from_data_is_reported_and_never_followed(indexed_model, name, native):
    (model, m), (opset10, old) = indexed_model
    model, m, outputs = (opset10, old, ["o"]) if name == "i_old" else (model, m, ["g", "s", "e"])
    assert m.loaded.plan.set_native_replay(native) == native
    feeds = _good_feeds()
    feeds = {k: v for k, v in feeds.items() if k in {i.name for i in model.graph.input}}
    want = run_ort(model, feeds)
    got = m.run(feeds)
    for o, w in zip(outputs, want):
        np.testing.assert_array_equal(got[o], w, err_msg=o)
    at, value, position, bound, label = BAD[name]
    bad = dict(feeds)
    bad[name] = feeds[name].copy()
    bad[name][at] = value
    with pytest.raises(Exception):  # onnxruntime refuses it too
        run_ort(model, bad)
    with pytest.raises(IndexOutOfRangeError) as info:
        m.run(bad)
    text = str(info.value)
    assert info.value.exit_code == 2
    for word in (label, "index %d at position %s" % (value, position), repr(name), bound):
        assert word in text, (word, text)
    again = m.run(feeds)  # not poisoned: good indices run again and are right
    for o, w in zip(outputs, want):
        np.testing.assert_array_equal(again[o], w, err_msg=o)


def test_cumsum_axis_fed_at_run_time_is_checked(tmp_path):
    nodes = [
        helper.make_node("CumSum", ["x", "axis"], ["y"], name="scan", reverse=1),
        helper.make_node("CumSum", ["i", "axis32"], ["yi"], exclusive=1),
    ]
    inputs = [("x", (3, 4, 5), F), ("axis", (), I64), ("i", (2, 70), I32), ("axis32", (1,), I32)]
    model = typed_model(nodes, inputs, ["y", "yi"], 14, {})
    m = build_and_load(model, str(tmp_path))
    feeds = _feeds(inputs)
    for native in (True, False):  # native replay, the Python path
        assert m.loaded.plan.set_native_replay(native) == native
        for a, b in ((0, 0), (1, 1), (2, -2), (-1, -1), (-3, 1)):
            feeds.update(axis=np.array(a, np.int64), axis32=np.array([b], np.int32))
            got, want = m.run(feeds), run_ort(model, feeds)
            np.testing.assert_array_equal(got["y"], want[0])
            np.testing.assert_array_equal(got["yi"], want[1])
        feeds.update(axis=np.array(3, np.int64))
        with pytest.raises(IndexOutOfRangeError) as info:
            m.run(feeds)
        text = str(info.value)
        for word in ("(CumSum, 'scan')", "index 3 at position []", "axis 'axis'", "[-3, 2]", "'x' has 3 dims"):
            assert word in text, (word, text)


def _guarded_plan(kernel, out_size, inputs, guard=16):
    """``kernel`` alone in a plan: its output a view between two guard bands of one float32 buffer, its inputs
    (name -> (dtype, size)) fed, its status buffer last."""
    from svod_min.planfile.load import load_plan
    from svod_min.planfile.status import SLOT_WORDS

    buffers = {
        "mem": {"dtype": "float32", "shape": [out_size + 2 * guard]},
        "out": {"dtype": "float32", "shape": [out_size], "view_of": "mem", "offset": 4 * guard},
        "svod.status": {"dtype": "int64", "shape": [kernel.chunks * SLOT_WORDS]},
        "done": {"dtype": "float32", "shape": [1], "output": True},
    }
    for name, (dtype, size) in inputs.items():
        buffers[name] = {"dtype": dtype, "shape": [size], "input": True}
    names = ["out"] + list(inputs) + ["svod.status"]
    doc = {
        "svod_plan": 1,
        "buffers": buffers,
        "kernels": {
            kernel.name: {
                "source": kernel.source,
                "buffers": len(names),
                "outputs": [0, len(names) - 1],
                "vars": ["core_id"],
                "global_size": [kernel.chunks, 1, 1],
                "extents": {str(i): e for i, e in enumerate(kernel.extents)},
            }
        },
        "ops": [{"kernel": kernel.name, "buffers": names}, {"copy": {"dst": "done", "src": "done"}}],
        "checks": {
            "buffer": "svod.status",
            "records": [{"offset": 0, "slots": kernel.chunks, "node": "k", "what": "idx", "shape": [9], "why": "-"}],
        },
    }
    return load_plan(doc)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("op", ["GatherND", "ScatterND", "ScatterElements"])
def test_a_bad_index_writes_nothing_past_the_output_nor_its_own_element(op, native):
    """Each index-taking kernel on a plan of its own, a bad index among good ones: the guard bands around the output
    stay as they were, the bad index's slice or element is left alone, the good ones are done."""
    from svod_min.onnx.kernels.indexed import gather_nd, scatter_elements, scatter_nd

    guard = 16
    x = np.arange(24, dtype=np.float32).reshape(4, 6) + 1
    u = -np.arange(1, 4, dtype=np.float32)
    if op == "GatherND":  # rows x[idx], one component per tuple
        k, idx, out_size = gather_nd(1, 3, [4], 6, 24, "float32", True), np.array([2, 7, -1]), 18
        inputs = {"x": ("float32", 24), "idx": ("int64", 3)}
        feeds = {"x": x.reshape(-1), "idx": idx}
        start = np.full(out_size, -7.0, np.float32)
        want = start.reshape(3, 6).copy()
        want[0], want[2] = x[2], x[3]
    elif op == "ScatterND":  # elements x[i, j] = u
        k, out_size = scatter_nd(3, [4, 6], 1, "none", "float32", True), 24
        idx = np.array([[1, 2], [0, 6], [-1, -1]])
        inputs = {"idx": ("int64", 6), "u": ("float32", 3)}
        feeds, start = {"idx": idx.reshape(-1), "u": u}, x.reshape(-1)
        want = x.copy()
        want[1, 2], want[3, 5] = u[0], u[2]
    else:  # along axis 1 of a [1, 6] row
        k, out_size = scatter_elements([1, 6], [1, 3], 1, "add", "long long", "float32", True), 6
        idx = np.array([[5, -7, 0]])
        inputs = {"idx": ("int64", 3), "u": ("float32", 3)}
        feeds, start = {"idx": idx.reshape(-1), "u": u}, x[0]
        want = x[:1].copy()
        want[0, 5] += u[0]
        want[0, 0] += u[2]
    loaded = _guarded_plan(k, out_size, inputs, guard)
    assert loaded.plan.set_native_replay(native) == native
    loaded.buffers["mem"].copyin(
        np.concatenate([np.full(guard, -9.0), start, np.full(guard, -9.0)]).astype(np.float32).tobytes()
    )
    for name, value in feeds.items():
        loaded.set_input(name, inputs[name][0], (value.size,), np.ascontiguousarray(value, inputs[name][0]).tobytes())
    with pytest.raises(IndexOutOfRangeError):
        loaded.plan.execute()
    mem = np.frombuffer(loaded.buffers["mem"].copyout(), np.float32)
    assert (mem[:guard] == -9).all() and (mem[-guard:] == -9).all(), "a guard band was written"
    np.testing.assert_array_equal(mem[guard:-guard], want.reshape(-1))


def test_scatter_nd_updates_of_another_shape_are_refused_by_name(tmp_path):
    """The kernel reads each update slice by the shape the indices address; onnx's shape inference lets updates of
    another shape through, so the op's check refuses them (exit 2) before a kernel could read past them."""
    from svod_min.error import UnsupportedModelError
    from svod_min.onnx.build import lower_model

    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"])
    inputs = [("x", (4, 3), F), ("i", (2, 1), I64), ("u", (2, 2), F)]
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info(n, t, list(s)) for n, s, t in inputs],
        [helper.make_tensor_value_info("y", F, ["a", "b"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    with pytest.raises(
        UnsupportedModelError,
        match=r"updates of shape \[2, 2\] where indices \[2, 1\] on data \[4, 3\] "
        r"address \[2, 3\]",
    ) as info:
        lower_model(path)
    assert info.value.exit_code == 2
