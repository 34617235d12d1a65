"""A graph output that an Identity or Dropout copies into another graph output (a model that exposes an
intermediate under two names, or an exporter's Identity before its output): both outputs hold the value. Dropping
the no-op renamed the producer's output and left the first output unwritten (zeros)."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import graph_model, run_both  # noqa: E402

N = helper.make_node


@pytest.mark.parametrize("noop", ["Identity", "Dropout", "two Identities"])
def test_an_output_copied_to_another_output(tmp_path, noop) -> None:
    copy = {
        "Identity": [N("Identity", ["y"], ["z"])],
        "Dropout": [N("Dropout", ["y"], ["z"])],
        "two Identities": [N("Identity", ["y"], ["w"]), N("Identity", ["w"], ["z"])],
    }[noop]
    # The Relu also reads y: the activation must not be fused into the Add that writes the output y.
    nodes = [N("Add", ["a", "b"], ["y"]), *copy, N("Relu", ["y"], ["r"])]
    model = graph_model(nodes, [("a", [2, 3]), ("b", [2, 3])], ["y", "z", "r"], 17, {})
    want, got = run_both(model, str(tmp_path))
    for name, expected in zip(["y", "z", "r"], want):
        np.testing.assert_array_equal(got[name], expected, err_msg=name)
