"""ONNX bundles built on the x86_64 host (tests/foreign/onnx_bundles.py ``build``), run by the one-file runtime
on another architecture and compared with the host's run of the same bundle.

The emulation stages build the bundles on the host and name their folder in SVOD_ONNX_BUNDLES inside their
Debian roots (.ci/aarch64-stage: arm64; .ci/ppc64le-root-stage: ppc64el), where this module runs with the
root's own python3. Elsewhere those tests skip; the comparison's own tests run everywhere.
"""

from __future__ import annotations

import os
import struct
from typing import Any, Dict, List

import onnx_bundles as ob
import pytest

from svod_min.dtypes import dtype
from svod_min.jit_loader.arch import host_arch
from svod_min.npy import write_npy

BUNDLES = os.environ.get("SVOD_ONNX_BUNDLES", "")


def _models() -> List[Any]:
    if not BUNDLES:
        reason = "SVOD_ONNX_BUNDLES is not set (the aarch64 and ppc64le root stages set it to bundles built on the host)"
        return [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="no-bundles")]
    return [pytest.param(m, id=m["name"]) for m in ob.load_manifest(BUNDLES)["models"]]


@pytest.mark.parametrize("entry", _models())
def test_host_built_bundle_runs_here_as_on_the_host(entry: Dict[str, Any], tmp_path) -> None:
    manifest = ob.load_manifest(BUNDLES)
    assert host_arch() in manifest["targets"], "the bundles hold %s, this is %s" % (manifest["targets"], host_arch())
    out_dir = str(tmp_path / "out")
    proc = ob.run_bundle(BUNDLES, entry, out_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    errors, problems = ob.compare(BUNDLES, entry, out_dir)
    assert problems == []
    assert sorted(errors) == sorted(entry["outputs"])
    print("%s on %s: max relative error against the host: %s" % (entry["name"], host_arch(), errors))


def _write(path: str, values: List[float], shape: tuple) -> None:
    write_npy(path, dtype("float32"), shape, struct.pack("<%df" % len(values), *values))


def _entry(tmp_path) -> Dict[str, Any]:
    _write(str(tmp_path / "want.npy"), [1.0, -2.0, 0.5, 1000.0], (2, 2))
    return {"name": "m", "outputs": {"gpu_0/y": "want.npy"}}


@pytest.mark.parametrize("position, delta, ok", [(3, 0.05, True), (3, 0.2, False), (0, 2e-4, False), (2, 8e-5, True),
                                                (1, float("nan"), False), (0, 0.0, True)])  # fmt: skip
def test_compare_holds_outputs_to_a_relative_1e4(tmp_path, position: int, delta: float, ok: bool) -> None:
    """The error is relative to max(|want|, 1e-3 * max |want|) = max(|want|, 1.0) here: 0.05 on 1000.0 passes, 2e-4
    on 1.0 fails, 8e-5 on 0.5 passes (the floor), NaN fails."""
    entry = _entry(tmp_path)
    (tmp_path / "out").mkdir()
    got = [1.0, -2.0, 0.5, 1000.0]
    got[position] += delta
    _write(str(tmp_path / "out" / "gpu_0_y.npy"), got, (2, 2))
    errors, problems = ob.compare(str(tmp_path), entry, str(tmp_path / "out"))
    assert (problems == []) == ok, problems
    assert list(errors) == ["gpu_0/y"]


def test_compare_reports_a_missing_output_and_a_wrong_shape(tmp_path) -> None:
    entry = _entry(tmp_path)
    (tmp_path / "out").mkdir()
    assert "was not saved" in ob.compare(str(tmp_path), entry, str(tmp_path / "out"))[1][0]
    _write(str(tmp_path / "out" / "gpu_0_y.npy"), [1.0, -2.0, 0.5, 1000.0], (4,))
    assert "has shape (4,), the host's (2, 2)" in ob.compare(str(tmp_path), entry, str(tmp_path / "out"))[1][0]
