"""onnxruntime's attention contrib ops (Attention, MultiHeadAttention, RotaryEmbedding; svod_min/onnx/frontend/
contrib_attention.py) against onnxruntime's own CPU kernels on seeded random inputs: each family's variants side by
side in one model (one build each), at a recent opset and at opset 12 (Squeeze/Unsqueeze by attribute); what is not
supported refused by name."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, max_rel_error, run_ort  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402

MS = "com.microsoft"
RNG = np.random.default_rng(41)
B, S, L, N, H = 2, 5, 7, 2, 8
D = N * H


def _r(*shape: int, scale: float = 1.0) -> Any:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _model(nodes: List[Any], feeds: Dict[str, Any], consts: Dict[str, Any], opset: int) -> Any:
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
        for k, v in feeds.items()
    ]
    # each output of its input 0's rank, dims unknown: neither onnx nor its checker knows the contrib ops' shapes
    outputs = [
        helper.make_tensor_value_info(
            n.output[0], TensorProto.FLOAT, ["d%d" % i for i in range(feeds[n.input[0]].ndim)]
        )
        for n in nodes
    ]
    graph = helper.make_graph(
        nodes, "attention", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in consts.items()]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _ms(op: str, inputs: List[str], out: str, **attrs: Any) -> Any:
    return helper.make_node(op, inputs, [out], domain=MS, **attrs)


def _same_as_ort(model: Any, feeds: Dict[str, Any], tmp_path: Any) -> None:
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for out, expected in zip(model.graph.output, want):
        assert got[out.name].shape == expected.shape, out.name
        assert max_rel_error(got[out.name], expected) < 1e-4, out.name


def _padding_mask(rows: int, length: int) -> Any:
    mask = np.ones((rows, length), np.int32)
    mask[0, length - 2 :] = 0
    mask[1, length - 1 :] = 0
    return mask


def test_multi_head_attention(tmp_path: Any) -> None:
    feeds = {"q": _r(B, S, D), "k": _r(B, L, D), "v": _r(B, L, 2 * D), "kpm": _padding_mask(B, L)}
    consts = {"bias": _r(4 * D), "ab": _r(1, N, S, L)}
    nodes = [
        _ms("MultiHeadAttention", ["q", "k", "v"], "plain", num_heads=N),
        _ms("MultiHeadAttention", ["q", "k", "v", "bias"], "biased", num_heads=N),
        _ms("MultiHeadAttention", ["q", "k", "v", "", "", "ab"], "attention_bias", num_heads=N, scale=0.3),
        _ms("MultiHeadAttention", ["q", "k", "v", "", "kpm"], "padding", num_heads=N, mask_filter_value=-1e4),
    ]
    _same_as_ort(_model(nodes, feeds, consts, 17), feeds, tmp_path)


@pytest.mark.parametrize("opset", [17, 12])
def test_attention(opset: int, tmp_path: Any) -> None:
    feeds = {"x": _r(B, S, D), "m2": _padding_mask(B, S), "m3": (RNG.random((B, S, S)) > 0.3).astype(np.int32)}
    feeds["m3"][..., 0] = 1
    consts = {"w": _r(D, 3 * D, scale=0.3), "b": _r(3 * D), "w4": _r(D, 4 * D, scale=0.3), "b4": _r(4 * D)}
    nodes = [
        _ms("Attention", ["x", "w", "b"], "plain", num_heads=N),
        _ms("Attention", ["x", "w", "b", "m2"], "mask2d", num_heads=N),
        _ms("Attention", ["x", "w", "b", "m3"], "mask3d", num_heads=N),
        _ms("Attention", ["x", "w", "b", "m2"], "causal_masked", num_heads=N, unidirectional=1),
        _ms("Attention", ["x", "w4", "b4"], "sizes", num_heads=N, qkv_hidden_sizes=[D, D, 2 * D], scale=0.2),
    ]
    _same_as_ort(_model(nodes, feeds, consts, opset), feeds, tmp_path)


@pytest.mark.parametrize("opset", [17, 12])
def test_rotary_embedding(opset: int, tmp_path: Any) -> None:
    positions = RNG.integers(0, 16, (B, S)).astype(np.int64)
    feeds = {"x3": _r(B, S, D), "x4": _r(B, N, S, H), "pos": positions, "offset": np.array([3], np.int64)}
    consts = {"cos": _r(16, H // 2), "sin": _r(16, H // 2), "cos4": _r(16, 2), "sin4": _r(16, 2)}
    nodes = [
        _ms("RotaryEmbedding", ["x3", "pos", "cos", "sin"], "halves3", num_heads=N),
        _ms("RotaryEmbedding", ["x3", "pos", "cos", "sin"], "pairs3", num_heads=N, interleaved=1),
        _ms("RotaryEmbedding", ["x4", "pos", "cos", "sin"], "halves4"),
        _ms("RotaryEmbedding", ["x4", "offset", "cos", "sin"], "pairs4_offset", interleaved=1),
        _ms("RotaryEmbedding", ["x3", "offset", "cos", "sin"], "heads_from_cache"),
        _ms("RotaryEmbedding", ["x3", "pos", "cos4", "sin4"], "partial", num_heads=N, rotary_embedding_dim=4),
    ]
    _same_as_ort(_model(nodes, feeds, consts, opset), feeds, tmp_path)


@pytest.mark.parametrize(
    "node,feeds,why",
    [
        (
            _ms("MultiHeadAttention", ["q", "k", "v", "", "", "", "pk", "pv"], "y", num_heads=N),
            {"q": _r(B, S, D), "k": _r(B, L, D), "v": _r(B, L, D), "pk": _r(B, N, 3, H), "pv": _r(B, N, 3, H)},
            "past_key",
        ),
        (
            _ms("MultiHeadAttention", ["q", "k", "v"], "y", num_heads=N, unidirectional=1),
            {"q": _r(B, S, D), "k": _r(B, L, D), "v": _r(B, L, D)},
            "unidirectional",
        ),
        (
            _ms("Attention", ["x", "w", "b", "lengths"], "y", num_heads=N),
            {"x": _r(B, S, D), "w": _r(D, 3 * D), "b": _r(3 * D), "lengths": np.array([3, 5], np.int32)},
            "rank 1",
        ),
        (
            _ms("RotaryEmbedding", ["x", "pos", "c", "s"], "y", is_packed_batching=1),
            {"x": _r(B, S, D), "pos": np.zeros((B, S), np.int64), "c": _r(16, H // 2), "s": _r(16, H // 2)},
            "is_packed_batching",
        ),
    ],
    ids=["past", "mha-unidirectional", "mask-lengths", "packed-batching"],
)
def test_unsupported_forms_are_refused_by_name(node: Any, feeds: Dict[str, Any], why: str, tmp_path: Any) -> None:
    with pytest.raises(UnsupportedModelError, match=why) as info:
        build_and_load(_model([node], feeds, {}, 17), str(tmp_path))
    assert node.op_type in str(info.value)
