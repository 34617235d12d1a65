"""The light CNNs of the onnx wheel, with random weights: built, run in this process, compared with onnxruntime.

The three cheap ones run here; all nine are built and compared the same way, but run by the one-file
runtime on a bare Python 3.8, in test_onnx_zipapp.py (each big model costs a build: once is enough)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, max_rel_error, random_inputs, randomized, run_ort  # noqa: E402

FAST = ["squeezenet", "shufflenet", "inception_v1"]


def _check(name: str, tmp_path) -> None:
    model = randomized(name)
    feeds = random_inputs(model)
    want = run_ort(model, feeds)
    m = build_and_load(model, str(tmp_path), name)
    got = m.run(feeds)
    for value, out in zip(want, m.output_names):
        assert got[out].shape == value.shape
        assert max_rel_error(got[out], value) < 1e-3, (name, out)
        assert float(np.std(value)) > 0  # random weights: the outputs differ, so the comparison means something


@pytest.mark.parametrize("name", FAST)
def test_light_model_matches_onnxruntime(name, tmp_path):
    _check(name, tmp_path)


@pytest.mark.parametrize("name", ["shufflenet", "resnet50"])
def test_random_weights_keep_the_logits_in_float16_range(name):
    """The float16 conversions of the light models are meaningful only if their values fit float16 (65504): a layer
    without a Relu after it gets gain 1, not He's 2, or the deep nets' logits double per layer (to 2e7)."""
    model = randomized(name)
    logits = run_ort(model, random_inputs(model))[-1]
    assert 1.0 < float(np.max(np.abs(logits))) < 65504 / 2
