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


def _ranged_cnn() -> Any:
    """Conv (16 channels: the blocked layout) -> HardSwish -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm ->
    Softmax, batch symbolic ("N"), seeded random weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    consts = {
        "w1": (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32),
        "b1": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((5, 16)) * 0.3).astype(np.float32),
        "b2": (rng.standard_normal(5) * 0.1).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("HardSwish", ["c"], ["h"]),
        helper.make_node("MaxPool", ["h"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["p"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w2", "b2"], ["z"], transB=1),
        helper.make_node("Softmax", ["z"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "ranged",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_ranged_bundle_runs_at_two_batch_sizes_on_bare_python38(pyz: str, tmp_path) -> None:
    """One bundle built for batch 1..4 (--dim N=1..4) runs from the zipapp at batch 1 and 3, each against
    onnxruntime on those rows; batch 5 is refused with exit 2 and nothing saved."""
    import onnx
    from support.onnx_models import host_target, run_ort

    tmp = str(tmp_path)
    model = _ranged_cnn()
    path, bundle = os.path.join(tmp, "cnn.onnx"), os.path.join(tmp, "cnn.svod")
    onnx.save(model, path)
    built = subprocess.run(
        ["python3", "-m", "svod_min", "build", path, "-o", bundle, "--dim", "N=1..4", "--target", host_target()],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    rng = np.random.default_rng(4)
    for rows in (1, 3, 5):
        x = rng.uniform(-1, 1, (rows, 3, 20, 20)).astype(np.float32)
        np.save(os.path.join(tmp, "x.npy"), x)
        out_dir = os.path.join(tmp, "out%d" % rows)
        case = {"bundle": bundle, "inputs": {"x": os.path.join(tmp, "x.npy")}, "out_dir": out_dir}
        proc = _run_bare(pyz, case, tmp)
        if rows == 5:
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert "N=5" in proc.stderr and "[1, 4]" in proc.stderr, proc.stderr
            assert not os.path.exists(out_dir)
            continue
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "binding: N=%d" % rows in proc.stdout
        got = np.load(os.path.join(out_dir, "y.npy"))
        want = run_ort(model, {"x": x})[0]
        assert got.shape == want.shape == (rows, 5)
        assert max_rel_error(got, want) < 1e-4, max_rel_error(got, want)
