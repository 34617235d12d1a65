"""Trilu, GridSample, 3-D and integer MaxPool/AveragePool, DepthToSpace, SpaceToDepth, Shrink, ReverseSequence and
Det against onnxruntime on seeded random data (ReverseSequence also with a bad length from data:
IndexOutOfRangeError at run). Each model holds several cases, so one build compiles them all."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import onnx.reference  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.error import IndexOutOfRangeError  # noqa: E402

F, D, I32, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64
H = TensorProto.FLOAT16
I8, U8, B = TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL
NP = {H: np.float16, F: np.float32, D: np.float64, I32: np.int32, I64: np.int64, I8: np.int8, U8: np.uint8, B: np.bool_}


def _feeds(inputs, seed=0):
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape, t in inputs:
        kind = np.dtype(NP[t]).kind
        if kind == "f":
            out[name] = rng.standard_normal(shape).astype(NP[t])
        elif kind == "b":
            out[name] = rng.integers(0, 2, shape).astype(bool)
        else:
            info = np.iinfo(NP[t])
            out[name] = rng.integers(max(info.min, -100), min(info.max, 100) + 1, shape).astype(NP[t])
    return out


def _check(tmp_path, nodes, inputs, outputs, opset=17, consts=None, feeds=None, rtol=1e-5, atol=1e-6, name="m"):
    """Build ``nodes`` once, run svod_min and onnxruntime on the same feeds, compare every output (integers and
    booleans exactly)."""
    model = typed_model(nodes, inputs, outputs, opset, consts or {})
    feeds = _feeds(inputs) if feeds is None else feeds
    want = run_ort(model, feeds)
    m = build_and_load(model, str(tmp_path), name)
    got = m.run(feeds)
    for o, w in zip(outputs, want):
        g = got[o]
        assert g.dtype == w.dtype and g.shape == w.shape, (o, g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind not in "f":
            np.testing.assert_array_equal(g, w, err_msg=o)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=o)
    return model, m


def test_trilu_every_k_and_dtype_constant_or_fed(tmp_path):
    nodes, outputs, consts = [], [], {}
    for upper in (0, 1):
        for k in (-9, -2, 0, 1, 4, 7):  # beyond the matrix too (rows 5, cols 6)
            consts["k%d" % (k + 10)] = np.array(k, np.int64)
            y = "y%d_%d" % (upper, k + 10)
            nodes.append(helper.make_node("Trilu", ["x", "k%d" % (k + 10)], [y], upper=upper))
            outputs.append(y)
        for x, t in (("d", "D"), ("i", "I"), ("b", "B"), ("h", "H")):
            nodes.append(helper.make_node("Trilu", [x, "kf"], ["%s%s%d" % (t, "f", upper)], upper=upper))
            nodes.append(helper.make_node("Trilu", [x], ["%s%s%d" % (t, "n", upper)], upper=upper))
            outputs += ["%sf%d" % (t, upper), "%sn%d" % (t, upper)]
        nodes.append(helper.make_node("Trilu", ["x", "kbig"], ["big%d" % upper], upper=upper))
        outputs.append("big%d" % upper)
    inputs = [
        ("x", (2, 3, 5, 6), F), ("d", (4, 3), D), ("i", (3, 7), I64), ("b", (2, 4, 4), B), ("h", (6, 2), H),
        ("kf", (), I64), ("kbig", (), I64),
    ]  # fmt: skip
    feeds = _feeds(inputs)
    feeds["kf"] = np.array(-1, np.int64)
    feeds["kbig"] = np.array(np.iinfo(np.int64).min, np.int64)  # fed at run time: compared, never used to index
    _check(tmp_path, nodes, inputs, outputs, opset=14, consts=consts, feeds=feeds)


def test_trilu_on_a_dtype_onnxruntime_lacks_equals_numpy(tmp_path):
    nodes = [helper.make_node("Trilu", ["u", "k"], ["up"]), helper.make_node("Trilu", ["u", "k"], ["low"], upper=0)]
    model = typed_model(nodes, [("u", (3, 6, 2), U8), ("k", (), I64)], ["up", "low"], 14, {})
    m = build_and_load(model, str(tmp_path))
    u = _feeds([("u", (3, 6, 2), U8)])["u"]
    for k in (-3, 0, 1):
        got = m.run({"u": u, "k": np.array(k, np.int64)})
        np.testing.assert_array_equal(got["up"], np.triu(u, k))
        np.testing.assert_array_equal(got["low"], np.tril(u, k))


def test_grid_sample_every_mode_padding_and_alignment(tmp_path):
    nodes, outputs = [], []
    for mode in ("nearest", "linear", "cubic"):
        for padding in ("zeros", "border", "reflection"):
            for align in (0, 1):
                y = "y_%s_%s_%d" % (mode, padding, align)
                attrs = dict(mode=mode, padding_mode=padding, align_corners=align)
                nodes.append(helper.make_node("GridSample", ["x", "g"], [y], **attrs))
                outputs.append(y)
                if mode != "cubic":  # volumetric: nearest and linear (onnxruntime has no 3-D cubic)
                    nodes.append(helper.make_node("GridSample", ["v", "gv"], [y + "_3d"], **attrs))
                    outputs.append(y + "_3d")
    nodes.append(helper.make_node("GridSample", ["x", "g"], ["defaults"]))
    inputs = [("x", (2, 3, 5, 7), F), ("g", (2, 4, 6, 2), F), ("v", (1, 2, 3, 4, 5), F), ("gv", (1, 2, 3, 4, 3), F)]
    feeds = _feeds(inputs)
    rng = np.random.default_rng(1)
    feeds["g"] = rng.uniform(-1.7, 1.7, (2, 4, 6, 2)).astype(np.float32)  # beyond [-1, 1]: padding decides
    feeds["gv"] = rng.uniform(-1.4, 1.4, (1, 2, 3, 4, 3)).astype(np.float32)
    feeds["g"][0, 0, :3] = [[-1, -1], [1, 1], [0, 0]]  # corners and the centre
    _check(tmp_path, nodes, inputs, outputs + ["defaults"], opset=20, feeds=feeds, rtol=1e-4, atol=1e-5)


def test_grid_sample_opset_16_names(tmp_path):
    nodes = [
        helper.make_node("GridSample", ["x", "g"], ["bl"], mode="bilinear", padding_mode="reflection"),
        helper.make_node("GridSample", ["x", "g"], ["bc"], mode="bicubic", align_corners=1),
    ]
    inputs = [("x", (1, 2, 4, 3), F), ("g", (1, 5, 2, 2), F)]
    feeds = _feeds(inputs)
    feeds["g"] = np.random.default_rng(2).uniform(-1.3, 1.3, (1, 5, 2, 2)).astype(np.float32)
    _check(tmp_path, nodes, inputs, ["bl", "bc"], opset=16, feeds=feeds, rtol=1e-4, atol=1e-5)


def test_grid_sample_reads_only_the_input_whatever_the_grid(tmp_path):
    """Coordinates far outside, infinite or NaN: nearest returns an element of x or 0 (zeros padding), never a
    read past x; linear and cubic stay finite for finite far coordinates."""
    nodes, outputs = [], []
    for mode in ("nearest", "linear", "cubic"):
        for padding in ("zeros", "border", "reflection"):
            y = "y_%s_%s" % (mode, padding)
            nodes.append(helper.make_node("GridSample", ["x", "g"], [y], mode=mode, padding_mode=padding))
            outputs.append(y)
    model = typed_model(nodes, [("x", (1, 1, 3, 4), F), ("g", (1, 1, 8, 2), F)], outputs, 20, {})
    m = build_and_load(model, str(tmp_path))
    x = np.arange(1, 13, dtype=np.float32).reshape(1, 1, 3, 4)
    far = [[1e30, -1e30], [-3e9, 7e8], [np.inf, 0], [0, -np.inf], [np.nan, 0], [0.5, np.nan], [-1e-30, 2], [5, -5]]
    got = m.run({"x": x, "g": np.array(far, np.float32).reshape(1, 1, 8, 2)})
    for padding in ("zeros", "border", "reflection"):
        nearest = got["y_nearest_%s" % padding].reshape(-1)
        assert all(v == 0 or v in x for v in nearest.tolist() if v == v), (padding, nearest)
    for name in outputs:
        finite = got[name].reshape(-1)[[0, 1, 6, 7]]  # the finite coordinates
        assert np.isfinite(finite).all(), (name, finite)


def test_pools_over_3d_windows(tmp_path):
    def pool(op, y, **attrs):
        return helper.make_node(op, ["x"], [y], **attrs)

    k3 = dict(kernel_shape=[2, 3, 2])
    nodes = [
        pool("MaxPool", "m_plain", **k3),
        pool("MaxPool", "m_strided", kernel_shape=[3, 3, 3], strides=[2, 1, 2], pads=[1, 1, 0, 1, 0, 1]),
        pool("MaxPool", "m_dilated", kernel_shape=[2, 2, 2], dilations=[2, 1, 2], ceil_mode=1, strides=[2, 2, 2]),
        pool("MaxPool", "m_same", kernel_shape=[3, 2, 3], auto_pad="SAME_UPPER", strides=[2, 2, 1]),
        pool("AveragePool", "a_plain", **k3),
        pool("AveragePool", "a_pad0", kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1], strides=[2, 2, 2]),
        pool("AveragePool", "a_pad1", kernel_shape=[3, 3, 3], pads=[1, 1, 1, 1, 1, 1], count_include_pad=1),
        pool("AveragePool", "a_ceil", kernel_shape=[2, 2, 3], strides=[2, 4, 2], ceil_mode=1, count_include_pad=1),
        pool("AveragePool", "a_lower", kernel_shape=[2, 3, 2], auto_pad="SAME_LOWER", strides=[1, 2, 2]),
        pool("AveragePool", "a_dilated", kernel_shape=[2, 2, 2], dilations=[2, 2, 1], pads=[1, 0, 1, 1, 0, 1]),
    ]
    outputs = [n.output[0] for n in nodes]
    inputs = [("x", (2, 3, 5, 6, 7), F), ("xn", (1, 1, 3, 4, 5), F)]
    feeds = _feeds(inputs)
    feeds["xn"][0, 0, 1, 2, 2] = np.nan
    nodes.append(helper.make_node("AveragePool", ["xn"], ["a_nan"], kernel_shape=[2, 3, 2]))
    _, m = _check(tmp_path, nodes, inputs, outputs + ["a_nan"], opset=19, feeds=feeds)
    # NaN wins a 3-D max as in svod_min's 2-D kernels (the ONNX reference's 3-D max drops it; onnxruntime's keeps or
    # drops it depending on the tap's place in the window): every other output is the reference's
    nan_model = typed_model([helper.make_node("MaxPool", ["xn"], ["m_nan"], kernel_shape=[2, 3, 2])], inputs[1:],
                            ["m_nan"], 19, {})  # fmt: skip
    want = onnx.reference.ReferenceEvaluator(nan_model).run(None, {"xn": feeds["xn"]})[0]
    got = build_and_load(nan_model, str(tmp_path), "nan").run({"xn": feeds["xn"]})["m_nan"]
    covers = np.zeros(want.shape, bool)
    covers[0, 0, 0:2, 0:2, 1:3] = True  # the windows holding x[.., 1, 2, 2]
    assert np.isnan(got[covers]).all() and not np.isnan(got[~covers]).any()
    np.testing.assert_array_equal(got[~covers], want[~covers])


def test_max_pool_on_integers_and_float64_with_indices(tmp_path):
    nodes, outputs = [], []
    for x in ("i8", "u8", "d"):
        for rank, attrs in (
            (1, dict(kernel_shape=[3], pads=[1, 1])),
            (2, dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1])),
            (3, dict(kernel_shape=[2, 2, 2], dilations=[1, 2, 1])),
        ):
            y = "%s_%d" % (x, rank)
            nodes.append(helper.make_node("MaxPool", ["%s%d" % (x, rank)], [y], **attrs))
            outputs.append(y)
    for order in (0, 1):  # Indices: the flat position in x, rows first or (storage_order 1) columns first
        nodes.append(
            helper.make_node("MaxPool", ["f2"], ["v%d" % order, "i%d" % order], kernel_shape=[2, 3], strides=[1, 2],
                             pads=[0, 1, 1, 1], storage_order=order)
        )  # fmt: skip
        outputs += ["v%d" % order, "i%d" % order]
    nodes.append(helper.make_node("MaxPool", ["f3"], ["v3", "i3"], kernel_shape=[2, 2, 3], strides=[1, 2, 2]))
    outputs += ["v3", "i3"]
    shapes = {1: (2, 3, 9), 2: (2, 2, 6, 7), 3: (1, 2, 4, 5, 6)}
    inputs = [("%s%d" % (x, r), shapes[r], t) for x, t in (("i8", I8), ("u8", U8), ("d", D)) for r in (1, 2, 3)]
    inputs += [("f2", (2, 3, 5, 8), F), ("f3", (2, 2, 3, 5, 6), F)]
    _check(tmp_path, nodes, inputs, outputs, opset=12)


def _depth_to_space(x, b, mode):
    n, c, h, w = x.shape
    if mode == "DCR":
        t = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        t = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return t.reshape(n, c // (b * b), h * b, w * b)


def _space_to_depth(x, b):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)


def test_depth_to_space_and_space_to_depth(tmp_path):
    nodes = [
        helper.make_node("DepthToSpace", ["x"], ["dcr2"], blocksize=2),
        helper.make_node("DepthToSpace", ["x"], ["crd2"], blocksize=2, mode="CRD"),
        helper.make_node("DepthToSpace", ["x9"], ["dcr3"], blocksize=3, mode="DCR"),
        helper.make_node("DepthToSpace", ["x9"], ["crd3"], blocksize=3, mode="CRD"),
        helper.make_node("SpaceToDepth", ["s"], ["s2"], blocksize=2),
        helper.make_node("SpaceToDepth", ["s"], ["s3"], blocksize=3),
        helper.make_node("DepthToSpace", ["one"], ["dcr_n1"], blocksize=2),  # N = 1, H = W = 1: few merged axes
    ]
    inputs = [("x", (2, 8, 3, 5), F), ("x9", (1, 18, 2, 3), F), ("s", (2, 3, 6, 12), F), ("one", (1, 4, 1, 1), F)]
    _check(tmp_path, nodes, inputs, [n.output[0] for n in nodes], opset=13)


def test_depth_to_space_and_space_to_depth_move_any_dtype(tmp_path):
    nodes = [
        helper.make_node("DepthToSpace", ["u"], ["u_crd"], blocksize=2, mode="CRD"),
        helper.make_node("DepthToSpace", ["i"], ["i_dcr"], blocksize=2),
        helper.make_node("SpaceToDepth", ["h"], ["h_s2d"], blocksize=2),
    ]
    inputs = [("u", (1, 12, 2, 3), U8), ("i", (2, 4, 3, 2), I64), ("h", (1, 2, 4, 6), H)]
    model = typed_model(nodes, inputs, ["u_crd", "i_dcr", "h_s2d"], 13, {})
    feeds = _feeds(inputs)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    np.testing.assert_array_equal(got["u_crd"], _depth_to_space(feeds["u"], 2, "CRD"))
    np.testing.assert_array_equal(got["i_dcr"], _depth_to_space(feeds["i"], 2, "DCR"))
    np.testing.assert_array_equal(got["h_s2d"], _space_to_depth(feeds["h"], 2))


SHRINK_TYPES = {
    "f": F, "d": D, "h": H, "i8": I8, "u8": U8, "i16": TensorProto.INT16, "u16": TensorProto.UINT16, "i32": I32,
    "u32": TensorProto.UINT32, "i64": I64, "u64": TensorProto.UINT64,
}  # fmt: skip


def test_shrink_on_every_numeric_dtype_equals_onnxruntime(tmp_path):
    nodes, outputs, inputs, feeds = [], [], [], {}
    rng = np.random.default_rng(3)
    for name, t in SHRINK_TYPES.items():
        dtype = helper.tensor_dtype_to_np_dtype(t)
        if dtype.kind == "f":
            x = (rng.standard_normal(40) * 3).astype(dtype)
            x[:4] = [np.nan, np.inf, -np.inf, -0.0]
        else:
            info = np.iinfo(dtype)
            x = rng.integers(max(info.min, -50), min(info.max, 50) + 1, 40).astype(dtype)
            x[:4] = [info.min, info.max, info.min + 1, info.max - 1]  # through float: rounded, out of range
        feeds[name] = x
        inputs.append((name, (40,), t))
        for k, attrs in enumerate((dict(lambd=1.5, bias=2.7), dict(lambd=0.0, bias=-1.25), {})):
            nodes.append(helper.make_node("Shrink", [name], ["%s_%d" % (name, k)], **attrs))
            outputs.append("%s_%d" % (name, k))
    _check(tmp_path, nodes, inputs, outputs, opset=13, feeds=feeds)


def test_reverse_sequence_time_or_batch_major_lengths_fed_or_constant(tmp_path):
    nodes = [
        helper.make_node("ReverseSequence", ["x", "lt"], ["time"], time_axis=0, batch_axis=1),
        helper.make_node("ReverseSequence", ["xb", "lb"], ["batch"], time_axis=1, batch_axis=0),
        helper.make_node("ReverseSequence", ["i", "k_lens"], ["ints"], time_axis=1, batch_axis=0),
        helper.make_node("ReverseSequence", ["b2", "lt"], ["bools"]),
    ]
    inputs = [
        ("x", (5, 4, 3, 2), F), ("lt", (4,), I64), ("xb", (3, 6, 7), F), ("lb", (3,), I64), ("i", (4, 3), I64),
        ("b2", (5, 4), B),
    ]  # fmt: skip
    feeds = _feeds(inputs)
    feeds["lt"] = np.array([5, 0, 1, 3], np.int64)  # the whole axis, nothing, one step (nothing moves), some
    feeds["lb"] = np.array([2, 6, 4], np.int64)
    consts = {"k_lens": np.array([1, 3, 0, 2], np.int64)}
    _, m = _check(tmp_path, nodes, inputs, ["time", "batch", "ints", "bools"], opset=10, consts=consts, feeds=feeds)
    bad = dict(feeds, lb=np.array([2, 7, -1], np.int64))  # from data: reported at run, never read past x
    with pytest.raises(
        IndexOutOfRangeError, match=r"index 7 at position \[1\] of sequence_lens 'lb' is out of range \[0, 6\]"
    ):
        m.run(bad)
    assert m.run(feeds)["batch"].shape == (3, 6, 7)  # the plan is not poisoned


def test_reverse_sequence_constant_length_out_of_range_is_refused_at_build(tmp_path):
    node = helper.make_node("ReverseSequence", ["x", "k"], ["y"], time_axis=0, batch_axis=1)
    model = typed_model([node], [("x", (3, 2), F)], ["y"], 10, {"k": np.array([1, 4], np.int64)})
    with pytest.raises(IndexOutOfRangeError, match=r"sequence length 4 at position \[1\] of sequence_lens 'k'"):
        build_and_load(model, str(tmp_path))


def test_det_batches_singular_and_swapped_matrices(tmp_path):
    nodes = [helper.make_node("Det", ["x"], ["y"]), helper.make_node("Det", ["s"], ["ys"])]
    inputs = [("x", (2, 3, 5, 5), F), ("s", (4, 3, 3), F)]
    feeds = _feeds(inputs)
    s = feeds["s"]
    s[0, 2] = s[0, 0]  # singular: two equal rows
    s[1] = np.eye(3, dtype=np.float32)[[2, 0, 1]]  # a permutation: its sign
    s[2] = [[0, 2, 1], [3, 0, 0], [1, 1, 0]]  # a zero first pivot: a row swap
    s[3] = np.diag([1e-3, 2e3, -0.5]).astype(np.float32)
    _check(tmp_path, nodes, inputs, ["y", "ys"], opset=13, feeds=feeds, rtol=1e-5, atol=1e-5)


def test_det_float64_equals_numpy(tmp_path):
    """onnxruntime has no float64 Det: numpy's LU determinant is the reference."""
    model = typed_model([helper.make_node("Det", ["x"], ["y"])], [("x", (3, 6, 6), D)], ["y"], 13, {})
    x = _feeds([("x", (3, 6, 6), D)])["x"]
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, np.linalg.det(x), rtol=1e-12)
