"""The light CNNs built on this host, run by the one-file runtime on a bare Python 3.8 (``-I -S``: no numpy,
no site-packages; PATH an empty folder: no compiler; the object cache off), ``--input``/``--save`` .npy
files, the saved outputs compared with onnxruntime's."""

from __future__ import annotations

import os
import subprocess
from typing import Any, Dict

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import bare_python38, build_pyz_case, max_rel_error  # noqa: E402

FAST = ["squeezenet", "shufflenet", "inception_v1"]
SLOW = ["bvlc_alexnet", "zfnet512", "inception_v2", "resnet50", "vgg19", "densenet121"]
PYTHON38 = bare_python38()
pytestmark = pytest.mark.skipif(PYTHON38 is None, reason="no Python 3.8 on PATH or under pyenv's versions/3.8.*")


def _run_bare(pyz: str, case: Dict[str, Any], tmp: str) -> subprocess.CompletedProcess:
    empty = os.path.join(tmp, "empty-path")
    os.makedirs(empty, exist_ok=True)
    cmd = [PYTHON38, "-I", "-S", pyz, "run", case["bundle"], "--save", case["out_dir"]]
    for name, path in case["inputs"].items():
        cmd += ["--input", "%s=%s" % (name, path)]
    env = {"PATH": empty, "SVOD_OBJECT_CACHE": "0", "HOME": tmp, "LANG": "C.UTF-8"}
    return subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True, timeout=600)


def _check(pyz: str, case: Dict[str, Any], tmp: str) -> None:
    proc = _run_bare(pyz, case, tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "verify: skipped: inputs replaced" in proc.stdout  # the replaced inputs are the ones that ran
    for name, want in case["want"].items():
        path = os.path.join(case["out_dir"], name.replace("/", "_").replace("\\", "_") + ".npy")
        assert ("saved %s" % path) in proc.stdout
        got = np.load(path)  # numpy reads what svod_min.npy wrote without numpy
        assert got.dtype == want.dtype and got.shape == want.shape, (case["name"], name)
        assert max_rel_error(got, want) < 1e-3, (case["name"], name, max_rel_error(got, want))
        assert float(np.std(want)) > 0  # random weights: the outputs differ, so the comparison means something


@pytest.fixture(scope="module")
def fast_cases(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Dict[str, Any]]:
    """The three cheap models, each built once for this host's target, with onnxruntime's outputs."""
    root = str(tmp_path_factory.mktemp("zipapp-fast"))
    return {name: build_pyz_case(name, root) for name in FAST}


@pytest.mark.parametrize("name", FAST)
def test_light_model_runs_from_the_zipapp_on_bare_python38(name: str, fast_cases, pyz: str, tmp_path) -> None:
    _check(pyz, fast_cases[name], str(tmp_path))


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_big_light_model_runs_from_the_zipapp_on_bare_python38(name: str, pyz: str, tmp_path) -> None:
    case = build_pyz_case(name, str(tmp_path))
    _check(pyz, case, str(tmp_path))
