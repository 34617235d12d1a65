"""Trilu, GridSample, 3-D and integer MaxPool/AveragePool, DepthToSpace, SpaceToDepth, Shrink, ReverseSequence and
Det against onnxruntime on seeded random data (ReverseSequence also with a bad length from data:
IndexOutOfRangeError at run). Each model holds several cases, so one build compiles them all."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

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
