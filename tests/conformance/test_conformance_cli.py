"""A sample of ONNX's node tests through the command line a user types: ``python -m svod_min build MODEL.onnx``
(``--shape`` per input, ``--pin`` where the model's shapes depend on an input's value) then ``python -m svod_min run
BUNDLE --input NAME=FILE.npy --save DIR``, the saved outputs held to the suite's data by ONNX's rule. One test per
kind of path: float32 kernels, library convolution, indices, integer and float16 dtypes, quantized integers, a
pinned input, an op expanded from its function body."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List

import pytest
from support.paths import REPO_DIR

if not os.path.isdir(os.path.join(REPO_DIR, "conformance")):
    pytest.skip("conformance/ is only in the source tree", allow_module_level=True)
np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
sys.path.insert(0, REPO_DIR)

from conformance.outcome import PASS, compare  # noqa: E402
from conformance.suite import DEFAULT_DATA, find_tests, read_data_set  # noqa: E402
from svod_min.compiler.targets import host_target  # noqa: E402

#: test name -> the inputs pinned at build (their values decide shapes)
SAMPLE: Dict[str, List[str]] = {
    "test_relu": [],
    "test_conv_with_strides_padding": [],
    "test_gather_elements_negative_indices": [],
    "test_mod_mixed_sign_int32": [],
    "test_cast_FLOAT_to_FLOAT16": [],
    "test_qlinearmatmul_2D_uint8_float32": [],
    "test_reshape_extended_dims": ["shape"],
    "test_mvn": [],
}

if not os.path.isdir(DEFAULT_DATA):
    pytest.skip("no ONNX node tests at %s (set SVOD_ONNX_NODE_TESTS)" % DEFAULT_DATA, allow_module_level=True)
TESTS = {t.name: t for t in find_tests(DEFAULT_DATA, list(SAMPLE))}


def _cli(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "svod_min"] + list(args), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, "svod_min %s: exit %d\n%s" % (args[0], proc.returncode, proc.stderr[-2000:])


def test_the_sample_is_there() -> None:
    assert sorted(TESTS) == sorted(SAMPLE)


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_build_then_run_on_the_command_line(name: str, tmp_path) -> None:
    test = TESTS[name]
    data = read_data_set(test)
    build = ["build", test.model, "-o", str(tmp_path / "m.svod"), "--target", host_target(), "--no-expect"]
    run = ["run", str(tmp_path / "m.svod"), "--once", "--save", str(tmp_path / "out")]
    for i, (input_name, value) in enumerate(data.inputs.items()):
        path = str(tmp_path / ("input%d.npy" % i))
        np.save(path, value)
        build += ["--shape", "%s=%s" % (input_name, ",".join(str(d) for d in value.shape))]
        if input_name in SAMPLE[name]:
            build += ["--pin", "%s=%s" % (input_name, path)]
        run += ["--input", "%s=%s" % (input_name, path)]
    _cli(*build)
    _cli(*run)
    got = {out: np.load(str(tmp_path / "out" / (out.replace("/", "_") + ".npy"))) for out, _ in data.outputs}
    outcome = compare(got, data.outputs)
    assert outcome.kind == PASS, outcome.detail
