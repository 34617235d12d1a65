"""LRN against onnxruntime: the betas taken as square roots (0.75, 0.5, 1) and one through powf, window sizes 3 and
5, fewer channels than the window, batch 2, and planes larger than one block of running sums; an even window (which
onnxruntime refuses) against the ONNX definition in float64."""

from __future__ import annotations

from typing import Any, Tuple

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, random_inputs, run_ort, single_node  # noqa: E402

from svod_min.onnx.kernels import norm  # noqa: E402

#: (input shape, size, alpha, beta, bias)
CASES = [
    ((1, 12, 33, 33), 5, 1e-2, 0.75, 1.0),  # AlexNet's beta; 1089 pixels: past one block of LRN_BLOCK
    ((2, 7, 5, 6), 3, 0.3, 0.5, 2.0),
    ((1, 6, 4, 4), 3, 0.5, 1.0, 1.5),
    ((1, 2, 3, 5), 5, 0.2, 0.6, 1.0),  # powf; fewer channels than the window
    ((1, 3, 40, 40), 5, 2.0, 0.75, 0.5),  # large squares: the power matters
]


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_lrn_matches_onnxruntime(case: Tuple[Any, ...], tmp_path: Any) -> None:
    shape, size, alpha, beta, bias = case
    model = single_node("LRN", [("x", shape)], size=size, alpha=alpha, beta=beta, bias=bias)
    feeds = random_inputs(model)
    want = run_ort(model, feeds)[0]
    got = build_and_load(model, str(tmp_path))(**feeds)["y"]
    assert np.allclose(got, want, rtol=3e-6, atol=1e-7), float(np.max(np.abs(got - want) / np.abs(want)))


def test_even_window_matches_the_onnx_definition(tmp_path: Any) -> None:
    """size 4: channels c - 1 .. c + 2 (floor((size-1)/2) before, ceil((size-1)/2) after)."""
    model = single_node("LRN", [("x", (1, 6, 4, 4))], size=4, alpha=0.5, beta=0.75, bias=1.5)
    feeds = random_inputs(model)
    got = build_and_load(model, str(tmp_path))(**feeds)["y"]
    x = feeds["x"].astype(np.float64)
    want = np.empty_like(x)
    for c in range(6):
        s = (x[:, max(0, c - 1) : min(5, c + 2) + 1] ** 2).sum(axis=1)
        want[:, c] = x[:, c] / (1.5 + 0.5 / 4 * s) ** 0.75
    assert np.allclose(got, want, rtol=3e-6, atol=1e-7)


def test_cnn_betas_need_no_powf() -> None:
    assert norm.LRN_BLOCK < 33 * 33
    for beta in (0.75, 0.5, 1.0):
        assert "powf(t" not in norm.lrn(1, 8, 9, 5, 1e-4, beta, 1.0).source
    assert "powf(t" in norm.lrn(1, 8, 9, 5, 1e-4, 0.6, 1.0).source
