"""TensorScatter (opset 24, a KV cache's update) against onnxruntime: linear and circular modes, write indices fed or
absent, a non-default axis, an integer cache; a bad write index from data is reported at run (IndexOutOfRangeError)
and a constant one refused at build. One model holds the good cases, so one build compiles them all."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.error import IndexOutOfRangeError  # noqa: E402

F, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def _scatter(past, update, w, out, **attrs):
    return helper.make_node("TensorScatter", [past, update, w] if w else [past, update], [out], **attrs)


def test_tensor_scatter_linear_circular_axes_and_dtypes(tmp_path):
    nodes = [
        _scatter("p4", "u4", "w4", "linear", mode="linear"),  # [batch, heads, max, dim], axis -2
        _scatter("p4", "u4", "w4c", "circular", mode="circular"),  # wraps past the end of the cache
        _scatter("p3", "u3", None, "prefill"),  # no write_indices: every batch element at 0
        _scatter("p3a", "u3a", "w3", "axis1", axis=1, mode="circular"),  # [batch, max, heads, dim]
        _scatter("pi", "ui", "wi", "ints"),  # int32 cache: rows moved as bits
    ]
    inputs = [
        ("p4", (3, 2, 6, 4), F), ("u4", (3, 2, 3, 4), F), ("w4", (3,), I64), ("w4c", (3,), I64),
        ("p3", (2, 5, 3), F), ("u3", (2, 5, 3), F),
        ("p3a", (2, 4, 3, 2), F), ("u3a", (2, 3, 3, 2), F), ("w3", (2,), I64),
        ("pi", (2, 4, 3), I32), ("ui", (2, 1, 3), I32), ("wi", (2,), I64),
    ]  # fmt: skip
    outputs = ["linear", "circular", "prefill", "axis1", "ints"]
    model = typed_model(nodes, inputs, outputs, 24, {})
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s, t in inputs if t == F}
    feeds.update(
        pi=rng.integers(-50, 50, (2, 4, 3)).astype(np.int32), ui=rng.integers(-50, 50, (2, 1, 3)).astype(np.int32)
    )
    # linear: the first row, the last possible one (max - seq), one between; circular: past the end and far past it
    feeds.update(w4=np.array([0, 3, 1], np.int64), w4c=np.array([5, 4, 100], np.int64))
    feeds.update(w3=np.array([3, 2], np.int64), wi=np.array([3, 0], np.int64))
    want = run_ort(model, feeds)
    m = build_and_load(model, str(tmp_path))
    got = m.run(feeds)
    for o, w in zip(outputs, want):
        assert got[o].dtype == w.dtype and got[o].shape == w.shape, o
        np.testing.assert_array_equal(got[o], w, err_msg=o)
    bad = dict(feeds, w4=np.array([0, 4, -1], np.int64))  # 4 + 3 rows pass the cache's 6
    with pytest.raises(
        IndexOutOfRangeError, match=r"index 4 at position \[1\] of write_indices 'w4' is out of range \[0, 3\]"
    ):
        m.run(bad)
    neg = dict(feeds, w4c=np.array([1, 2, -3], np.int64))  # circular takes any index but a negative one
    with pytest.raises(IndexOutOfRangeError, match=r"index -3 at position \[2\] of write_indices 'w4c'"):
        m.run(neg)
    np.testing.assert_array_equal(m.run(feeds)["linear"], want[0])  # the plan is not poisoned


def test_tensor_scatter_constant_write_index_out_of_range_is_refused_at_build(tmp_path):
    node = _scatter("p", "u", "w", "y")
    model = typed_model(
        [node], [("p", (2, 4, 3), F), ("u", (2, 2, 3), F)], ["y"], 24, {"w": np.array([1, 3], np.int64)}
    )
    with pytest.raises(IndexOutOfRangeError, match=r"write index 3 at position \[1\] of write_indices 'w'"):
        build_and_load(model, str(tmp_path))
