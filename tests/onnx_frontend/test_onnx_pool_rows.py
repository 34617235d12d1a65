"""The generated MaxPool / AveragePool against onnxruntime over edge windows: stride larger than the window,
dilation, asymmetric pads up to the window less one (onnxruntime refuses wider), ceil_mode windows that hang
past the padded input, count_include_pad both ways, a 1x1 image, batch 2, 1-D windows, and NaN propagation
through a max."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, run_both, single_node  # noqa: E402

#: (op, input shape, attributes)
CASES = [
    ("MaxPool", (2, 3, 9, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 2, 10, 10), {"kernel_shape": [2, 2], "strides": [3, 3]}),  # stride > window
    ("MaxPool", (1, 2, 9, 9), {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 0, 1, 1]}),
    ("MaxPool", (1, 1, 1, 1), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # 1x1 image, pads wider than the image
    ("MaxPool", (1, 2, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 2, 7, 13), {"kernel_shape": [1, 3], "strides": [1, 2], "pads": [0, 1, 0, 1]}),
    ("MaxPool", (1, 3, 17), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),  # 1-D
    ("AveragePool", (2, 3, 9, 11), {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 2, 9, 11), {"kernel_shape": [3, 3], "pads": [2, 1, 0, 2], "count_include_pad": 1}),
    ("AveragePool", (1, 2, 8, 8), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]}),
    (
        "AveragePool",
        (1, 2, 8, 8),
        {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    ("AveragePool", (1, 2, 10, 10), {"kernel_shape": [2, 2], "strides": [4, 3]}),
    ("AveragePool", (1, 1, 1, 1), {"kernel_shape": [2, 2], "pads": [1, 1, 0, 0]}),
    # rows stride 2 with ceil_mode's extra window
    ("MaxPool", (1, 2, 8, 9), {"kernel_shape": [3, 3], "strides": [2, 1], "ceil_mode": 1, "pads": [0, 1, 0, 1]}),
    (
        "AveragePool",
        (1, 2, 8, 9),
        {"kernel_shape": [3, 2], "strides": [2, 1], "ceil_mode": 1, "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    ("AveragePool", (1, 4, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception-v2's 7x7 stage
    # wider output rows
    ("MaxPool", (2, 3, 9, 41), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 2, 9, 45), {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 0, 1, 1]}),
    ("MaxPool", (1, 2, 8, 44), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ("MaxPool", (1, 2, 5, 30), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),  # every row touches padding
    ("AveragePool", (1, 3, 7, 30), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 3, 7, 30), {"kernel_shape": [3, 3], "pads": [1, 2, 1, 0], "count_include_pad": 1}),
    ("AveragePool", (1, 2, 8, 47), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]}),
    ("AveragePool", (1, 2, 10, 100), {"kernel_shape": [2, 4], "strides": [3, 4]}),
]


def _case_id(case: Tuple[str, Tuple[int, ...], Dict[str, Any]]) -> str:
    op, shape, attrs = case
    return "%s-%s-%s" % (op, "x".join(map(str, shape)), "-".join("%s%s" % (k[:2], v) for k, v in sorted(attrs.items())))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_pool_matches_onnxruntime(case: Tuple[str, Tuple[int, ...], Dict[str, Any]], tmp_path: Any) -> None:
    op, shape, attrs = case
    wants, gots = run_both(single_node(op, [("x", shape)], **attrs), str(tmp_path))
    want, got = wants[0], gots["y"]
    assert got.shape == want.shape
    assert np.allclose(got, want, rtol=1e-6, atol=1e-6), float(np.max(np.abs(got - want)))


def test_maxpool_propagates_nan(tmp_path: Any) -> None:
    model = single_node("MaxPool", [("x", (1, 1, 4, 6))], kernel_shape=[2, 2], strides=[2, 2])
    x = np.arange(24, dtype=np.float32).reshape(1, 1, 4, 6)
    x[0, 0, 1, 3] = np.nan  # in window (0, 1) and not its first tap
    got = build_and_load(model, str(tmp_path))(x=x)["y"]
    assert np.isnan(got[0, 0, 0, 1]) and np.isfinite(np.delete(got.reshape(-1), 1)).all()
