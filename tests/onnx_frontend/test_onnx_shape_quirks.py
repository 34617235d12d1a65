"""Exporters' shape quirks: declared shapes of intermediates and outputs are hints. A stale ``value_info``, a
``-1`` or ``0`` for an unknown dim, an output declared with a shape inference contradicts: each builds, matches
onnxruntime (which runs them too) and the output keeps the shape computed from the bound inputs; an output whose
declared shape differs is warned about. A genuine contradiction (inputs that do not broadcast, an output of another
dtype) is still refused, naming the node or the output."""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import build_and_load, run_ort  # noqa: E402

from svod_min.error import ModelFileError  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402


def _model(
    in_shape: Sequence[Any] = (2, 3),
    out_shape: Optional[Sequence[Any]] = (2, 3),
    stale: Optional[Sequence[int]] = None,
    out_type: int = TensorProto.FLOAT,
    other: Sequence[int] = (2, 3),
) -> Any:
    """y = relu(x) * x + w: ``a`` (relu's output) may carry a stale value_info."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Mul", ["a", "x"], ["m"]),
        helper.make_node("Add", ["m", "w"], ["y"]),
    ]
    w = helper.make_tensor("w", TensorProto.FLOAT, list(other), np.linspace(-1, 1, int(np.prod(other))).tolist())
    graph = helper.make_graph(
        nodes,
        "quirks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))],
        [helper.make_tensor_value_info("y", out_type, None if out_shape is None else list(out_shape))],
        [w],
    )
    if stale is not None:
        graph.value_info.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, list(stale)))
        graph.value_info.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, [7]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _build_and_compare(model: Any, tmp_path: Any, **shapes: Any) -> None:
    x = np.random.default_rng(4).standard_normal((2, 3)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    bundle = build_and_load(model, str(tmp_path), **({"shapes": shapes} if shapes else {}))
    got = bundle.run({"x": x})["y"]
    assert got.shape == want.shape == (2, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_stale_value_info_is_dropped(tmp_path: Any) -> None:
    _build_and_compare(_model(stale=(5, 7)), tmp_path)


@pytest.mark.parametrize("out_shape", [(-1, 3), (0, 3), (4, 3), (6,)], ids=["minus1", "zero", "wrong", "rank"])
def test_declared_output_shape_is_a_hint(out_shape: Sequence[int], tmp_path: Any) -> None:
    model = _model(out_shape=out_shape)
    if -1 in out_shape:
        _build_and_compare(model, tmp_path)
        return
    with pytest.warns(
        UserWarning, match=r"output 'y' is declared with shape \[.*\], but the bound inputs give \[2, 3\]"
    ):
        _build_and_compare(model, tmp_path)


def test_minus_one_input_dim_bound_by_shape(tmp_path: Any) -> None:
    _build_and_compare(_model(in_shape=(-1, 3), out_shape=(-1, 3)), tmp_path, x=(2, 3))


def _read(model: Any, tmp_path: Any, **shapes: Any) -> Any:
    path = os.path.join(str(tmp_path), "m.onnx")
    onnx.save(model, path)
    return read_graph(path, {}, shapes)


def test_minus_one_input_dim_unbound_is_refused(tmp_path: Any) -> None:
    with pytest.raises(ModelFileError, match=r"input 'x' dim 0 .* is dynamic"):
        _read(_model(in_shape=(-1, 3)), tmp_path)


def test_genuine_contradiction_still_refused_by_name(tmp_path: Any) -> None:
    """The bound input does not broadcast with the constant: no hint can fix that."""
    with pytest.raises(ModelFileError, match=r"node 2 \(Add\).*shape inference fails.*'w' \[4, 5\]"):
        _read(_model(other=(4, 5), stale=(2, 3)), tmp_path)


def test_output_of_another_dtype_still_refused(tmp_path: Any) -> None:
    """onnxruntime refuses it too: a declared elem type is not a shape hint."""
    with pytest.raises(ModelFileError, match=r"output .y. is declared int64, but the model computes float"):
        _read(_model(out_type=TensorProto.INT64), tmp_path)
