"""ONNX bundles built on the x86_64 host (tests/foreign/onnx_bundles.py ``build``), executed on another
architecture and compared with the host's run of the same bundle.

- aarch64 and ppc64le: the emulation stages build the bundles on the host and name their folder in
  SVOD_ONNX_BUNDLES inside their Debian roots (.ci/aarch64-stage: arm64; .ci/ppc64le-root-stage:
  ppc64el), where this module runs with the root's own python3 and runs them with svod_min.pyz.
- riscv64 and loongarch64 (no root with Python): .ci/foreign-arch-stage names the folder in
  SVOD_ONNX_REPLAY_BUNDLES on the host, which replays each bundle's plan through the static harness
  under qemu-user (tests/foreign/onnx_replay.py).

Elsewhere those tests skip with their reason; the comparison's own tests run everywhere.
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
REPLAY_BUNDLES = os.environ.get("SVOD_ONNX_REPLAY_BUNDLES", "")
REPLAY_ARCHES = ("riscv64", "loongarch64")


def _models() -> List[Any]:
    if not BUNDLES:
        reason = (
            "SVOD_ONNX_BUNDLES is not set (the aarch64 and ppc64le root stages set it to bundles built on the host)"
        )
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


def _replays() -> List[Any]:
    if not REPLAY_BUNDLES:
        reason = (
            "SVOD_ONNX_REPLAY_BUNDLES is not set "
            "(.ci/foreign-arch-stage sets it to bundles for riscv64 and loongarch64)"
        )
        skip = pytest.mark.skip(reason=reason)
        return [pytest.param(arch, None, marks=skip, id="%s-no-bundles" % arch) for arch in REPLAY_ARCHES]
    models = ob.load_manifest(REPLAY_BUNDLES)["models"]
    return [pytest.param(arch, m, id="%s-%s" % (arch, m["name"])) for arch in REPLAY_ARCHES for m in models]


@pytest.mark.python_independent  # foreign code under qemu
@pytest.mark.parametrize("arch, entry", _replays())
def test_host_built_bundle_replayed_on_arch_as_on_the_host(arch: str, entry: Dict[str, Any], tmp_path) -> None:
    import foreign_support as fs
    import onnx_replay

    tc, reason = fs.toolchain(arch)
    if tc is None:
        pytest.skip("%s: %s" % (arch, reason))
    manifest = ob.load_manifest(REPLAY_BUNDLES)
    if arch not in manifest["targets"]:  # loongarch64 objects need clang 16 or later to build
        pytest.skip("%s: the bundles were built for %s only" % (arch, ", ".join(manifest["targets"])))
    inputs = {name: os.path.join(REPLAY_BUNDLES, path) for name, path in entry["inputs"].items()}
    outputs = onnx_replay.replay_bundle(tc, os.path.join(REPLAY_BUNDLES, entry["bundle"]), arch, inputs, str(tmp_path))
    assert sorted(outputs) == sorted(entry["outputs"])
    out_dir = tmp_path / "saved"
    out_dir.mkdir()
    for name, data in outputs.items():
        shape, _ = ob.read_float32(os.path.join(REPLAY_BUNDLES, entry["outputs"][name]))
        write_npy(ob.saved_file(str(out_dir), name), dtype("float32"), shape, data)
    errors, problems = ob.compare(REPLAY_BUNDLES, entry, str(out_dir))
    assert problems == []
    print("%s on %s (replayed): max relative error against the host: %s" % (entry["name"], arch, errors))


def _write(path: str, values: List[float], shape: tuple) -> None:
    write_npy(path, dtype("float32"), shape, struct.pack("<%df" % len(values), *values))


def _entry(tmp_path) -> Dict[str, Any]:
    _write(str(tmp_path / "want.npy"), [1.0, -2.0, 0.5, 1000.0], (2, 2))
    return {"name": "m", "outputs": {"gpu_0/y": "want.npy"}}


@pytest.mark.parametrize(
    "position, delta, ok",
    [(3, 0.05, True), (3, 0.2, False), (0, 2e-4, False), (2, 8e-5, True), (1, float("nan"), False), (0, 0.0, True)],
)
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
