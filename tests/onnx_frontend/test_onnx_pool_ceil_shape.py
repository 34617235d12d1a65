"""ceil_mode pools whose last window starts in the end padding: onnx shape inference keeps that window and
onnxruntime drops it, so the model's declared output shape is not onnxruntime's. svod_min refuses such a
pool by name (running it gave a row of NaN or -inf); a ceil_mode window that starts inside still runs."""

from __future__ import annotations

import os

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, max_rel_error, run_ort, single_node  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402


def _declared_rows(model) -> int:
    return model.graph.output[0].type.tensor_type.shape.dim[2].dim_value


@pytest.mark.parametrize("op", ["AveragePool", "MaxPool"])
def test_a_last_window_in_the_end_padding_is_refused(op, tmp_path):
    model = single_node(
        op, [("x", (1, 2, 20, 16))], kernel_shape=[4, 3], strides=[3, 3], pads=[1, 0, 2, 1], ceil_mode=1
    )
    x = np.random.default_rng(3).standard_normal((1, 2, 20, 16)).astype(np.float32)
    assert run_ort(model, {"x": x})[0].shape[2] == _declared_rows(model) - 1  # the disagreement itself
    path = os.path.join(str(tmp_path), "p.onnx")
    onnx.save(model, path)
    with pytest.raises(
        UnsupportedModelError, match="ceil_mode: the last window of spatial axis 0 starts in the end padding"
    ):
        lower_model(path)


def test_a_ceil_window_starting_inside_still_runs(tmp_path):
    model = single_node(
        "MaxPool", [("x", (1, 2, 21, 16))], kernel_shape=[4, 3], strides=[3, 3], pads=[1, 0, 1, 1], ceil_mode=1
    )
    x = np.random.default_rng(4).standard_normal((1, 2, 21, 16)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    assert want.shape[2] == _declared_rows(model) == 8  # ceil adds a window, starting on the last input row
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    assert got.shape == want.shape and max_rel_error(got, want) < 1e-6
