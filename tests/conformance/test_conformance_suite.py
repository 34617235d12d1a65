"""A sample of ONNX's own node tests, through svod_min and onnxruntime: the ops that take indices and the empty
(0-sized) tensors. Each test either passes (ONNX's tolerance) or is refused by name (exit 2) and never crashes,
hangs, dies of a signal or answers wrong; where onnxruntime refuses a test (an out-of-range index), svod_min refuses
it too. The data comes from the onnx 1.19 wheel (.ci/run unpacks it; SVOD_ONNX_NODE_TESTS names it elsewhere)."""

from __future__ import annotations

import os
import sys

import pytest
from support.paths import REPO_DIR

if not os.path.isdir(os.path.join(REPO_DIR, "conformance")):
    pytest.skip("conformance/ is only in the source tree", allow_module_level=True)
pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
sys.path.insert(0, REPO_DIR)

from conformance import runner  # noqa: E402
from conformance.outcome import FAILURES, PASS, REFUSED  # noqa: E402
from conformance.suite import DEFAULT_DATA, find_tests  # noqa: E402

#: Index-taking ops and 0-sized tensors (the untrusted-model rules), by test-name glob.
SAMPLE = (
    "test_gather_*",
    "test_gathernd_*",
    "test_scatter*",
    "test_onehot_*",
    "test_*_empty_set",
    "test_reduce_sum_empty_axes_input_noop*",
    "test_split_zero_size_splits_*",
    "test_reshape_zero_*",
    "test_constantofshape_int_shape_zero",
    "test_tril_zero",
    "test_triu_zero",
    "test_slice_start_out_of_bounds",
    "test_rotary_embedding*_expanded",
)

if not os.path.isdir(DEFAULT_DATA):
    pytest.skip("no ONNX node tests at %s (set SVOD_ONNX_NODE_TESTS)" % DEFAULT_DATA, allow_module_level=True)
TESTS = find_tests(DEFAULT_DATA, SAMPLE)


def test_the_sample_is_there():
    assert len(TESTS) >= 50, [t.name for t in TESTS]


@pytest.mark.parametrize("test", TESTS, ids=[t.name for t in TESTS])
def test_svod_min_passes_or_refuses_by_name(test):
    ours = runner.in_child("svod_min", test, timeout=300)
    assert ours.kind not in FAILURES, ours.detail
    assert ours.kind in (PASS, REFUSED), ours.detail
    if ours.kind == PASS:
        peer = runner.in_child("onnxruntime", test, timeout=300)
        assert peer.kind != REFUSED, "onnxruntime refuses what svod_min runs: %s" % peer.detail
