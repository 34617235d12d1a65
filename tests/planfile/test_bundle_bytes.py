"""Bundles read from their bytes in memory (as shipped to a worker), the same as from a path; bundle_digest."""

from __future__ import annotations

import hashlib
import json
import platform
from typing import Any

import numpy as np
import pytest
from support.paths import EXAMPLES

from svod_min import load_model
from svod_min.error import BundleError
from svod_min.planfile.bundle import PLAN, bundle_digest, is_bundle_bytes, open_bundle, write_bundle
from svod_min.planfile.load import load_plan

MLP = str(EXAMPLES / "scale" / "mlp.svod")
x86_64_only = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the example bundle carries x86_64 objects only"
)


def _copy_bundle(path: str) -> bytes:
    """A kernel-free bundle (any architecture): input ``x`` [4, 3] float32 copied to output ``y``."""
    plan = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "float32", "shape": [4, 3], "input": True},
            "y": {"dtype": "float32", "shape": [4, 3], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
    }
    write_bundle(path, {PLAN: json.dumps(plan).encode()}, {"svod_min": "test"})
    with open(path, "rb") as fh:
        return fh.read()


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_a_bundle_runs_from_its_bytes(tmp_path: Any, wrap: Any) -> None:
    data = _copy_bundle(str(tmp_path / "copy.svod"))
    x = np.arange(12, dtype=np.float32).reshape(4, 3) - 5.5
    model = load_model(wrap(data))
    assert model.input_names == ["x"] and model.output_names == ["y"]
    np.testing.assert_array_equal(model(x=x)["y"], x)


def test_bytes_and_path_read_the_same_bundle(tmp_path: Any) -> None:
    path = str(tmp_path / "copy.svod")
    data = _copy_bundle(path)
    from_path, from_bytes = open_bundle(path), open_bundle(data)
    assert from_bytes.entries == from_path.entries and from_bytes.plan == from_path.plan
    assert from_bytes.manifest == from_path.manifest
    assert from_path.path == path and from_bytes.path == "<bundle in memory, %d bytes>" % len(data)


@x86_64_only
def test_the_example_bundle_from_bytes_matches_float64_numpy() -> None:
    with open(MLP, "rb") as fh:
        data = fh.read()
    x = np.random.default_rng(3).standard_normal((32, 16)).astype(np.float32)
    got = load_model(data)(x=x)["probs"]
    np.testing.assert_array_equal(got, load_model(MLP)(x=x)["probs"])
    np.testing.assert_allclose(got, _mlp_reference(open_bundle(data), x), rtol=1e-4, atol=1e-6)


def _mlp_reference(bundle: Any, x: Any) -> Any:
    """softmax(tanh(x W1 + b1) W2 + b2) in float64 from the bundle's own weight entries (told apart by shape)."""
    import io

    weights = [
        np.load(io.BytesIO(data)).astype(np.float64)
        for name, data in sorted(bundle.entries.items())
        if name.startswith("data/w")
    ]
    by_shape = {w.shape: w for w in weights}
    w1 = by_shape.get((16, 32), by_shape.get((32, 16), np.zeros(0)).T)
    w2 = by_shape.get((32, 8), by_shape.get((8, 32), np.zeros(0)).T)
    logits = np.tanh(x.astype(np.float64) @ w1 + by_shape[(32,)]) @ w2 + by_shape[(8,)]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_corrupt_bytes_are_refused_naming_the_bundle_in_memory(tmp_path: Any) -> None:
    data = _copy_bundle(str(tmp_path / "copy.svod"))
    with pytest.raises(BundleError, match=r"<bundle in memory, %d bytes>: not a readable bundle" % (len(data) // 2)):
        load_model(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[flipped.index(PLAN.encode()) + len(PLAN) + 3] ^= (
        0xFF  # inside plan.json's data (its local header's name first)
    )
    with pytest.raises(BundleError, match="<bundle in memory"):
        open_bundle(bytes(flipped))


def test_bytes_that_are_not_a_zip_are_refused() -> None:
    assert not is_bundle_bytes(b'{"svod_plan": 1}')
    with pytest.raises(BundleError, match="16 bytes given as a model bundle do not start as one"):
        load_plan(b'{"svod_plan": 1}')


def test_open_bundle_refuses_what_is_neither_path_nor_bytes() -> None:
    with pytest.raises(BundleError, match="a bundle is a path or its bytes, not int"):
        open_bundle(7)  # type: ignore[arg-type]


def test_bundle_digest_is_the_sha256_of_the_bytes_wherever_they_lie(tmp_path: Any) -> None:
    path = str(tmp_path / "copy.svod")
    data = _copy_bundle(path)
    want = hashlib.sha256(data).hexdigest()
    assert bundle_digest(path) == bundle_digest(data) == bundle_digest(memoryview(data)) == want
    with pytest.raises(BundleError, match="cannot read the bundle"):
        bundle_digest(str(tmp_path / "absent.svod"))
