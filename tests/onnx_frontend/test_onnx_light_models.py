"""The nine light CNNs of the onnx wheel, with random weights: built, run, compared with onnxruntime."""

from __future__ import annotations

import time

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, max_rel_error, randomized, random_inputs, run_ort  # noqa: E402

FAST = ["squeezenet", "shufflenet", "inception_v1"]
SLOW = ["bvlc_alexnet", "zfnet512", "resnet50", "inception_v2", "densenet121", "vgg19"]


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


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_big_light_model_matches_onnxruntime(name, tmp_path):
    _check(name, tmp_path)
