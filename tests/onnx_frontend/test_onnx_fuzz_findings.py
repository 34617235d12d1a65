"""What the front-end fuzzer found (docs/fuzzing.md), each as the smallest model that showed it: svod_min now
refuses by name (exit 2) where it raised an internal error, and agrees with onnxruntime where it did not."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")

from support.onnx_models import build_and_load, run_ort, single_node  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402


def test_clip_bounds_of_shape_1_are_refused_by_name(tmp_path):
    """ONNX's Clip takes scalar min/max; a [1] bound raised TypeError in the activation fusion (fuzz seed 7,
    case 130)."""
    import onnx

    model = single_node(
        "Clip", [("x", (4, 2))], consts={"lo": np.array([-0.5], np.float32), "hi": np.array(0.7, np.float32)}
    )
    path = str(tmp_path / "clip.onnx")
    onnx.save(model, path)
    with pytest.raises(UnsupportedModelError, match=r"min/max must be scalars .*'lo' is \[1\]"):
        lower_model(path)


@pytest.mark.parametrize("lo, hi", [(np.inf, 3.4e38), (2.0, -1.0)])
def test_clip_with_min_above_max_gives_max_as_onnxruntime_does(tmp_path, lo, hi):
    """ONNX: when min > max every value becomes max; the kernel gave min (fuzz seed 1, case 2: lo=inf)."""
    pytest.importorskip("onnxruntime")
    model = single_node(
        "Clip", [("x", (2, 5))], consts={"lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
    )
    x = np.linspace(-3, 3, 10, dtype=np.float32).reshape(2, 5)
    want = run_ort(model, {"x": x})[0]
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)
