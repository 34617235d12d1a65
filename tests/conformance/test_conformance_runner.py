"""The conformance runner classifies each outcome right: pass, refusal, wrong answer, crash, signal, hang."""

from __future__ import annotations

import os
import signal
import sys

import pytest
from support.paths import REPO_DIR

if not os.path.isdir(os.path.join(REPO_DIR, "conformance")):
    pytest.skip("conformance/ is only in the source tree", allow_module_level=True)
sys.path.insert(0, REPO_DIR)

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
from onnx import helper, numpy_helper  # noqa: E402

from conformance import runner  # noqa: E402
from conformance.outcome import CRASH, HANG, PASS, REFUSED, SIGNAL, STALE_DATA, WRONG, Outcome, compare  # noqa: E402
from conformance.report import op_table, summary  # noqa: E402
from conformance.suite import find_tests, read_data_set  # noqa: E402


def write_test(root, name, node, inputs, outputs, opset=17):
    """One node test folder as the ONNX suite lays it out."""
    folder = os.path.join(str(root), name)
    os.makedirs(os.path.join(folder, "test_data_set_0"))
    graph = helper.make_graph(
        [node],
        name,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs],
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in outputs],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.save(model, os.path.join(folder, "model.onnx"))
    for kind, values in (("input", inputs), ("output", outputs)):
        for i, (_, array) in enumerate(values):
            with open(os.path.join(folder, "test_data_set_0", "%s_%d.pb" % (kind, i)), "wb") as f:
                f.write(numpy_helper.from_array(array).SerializeToString())
    return folder


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("node")
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    write_test(root, "test_relu", helper.make_node("Relu", ["x"], ["y"]), [("x", x)], [("y", np.maximum(x, 0))])
    wrong = np.maximum(x, 0) + np.float32(0.5) * (x > 1)
    write_test(root, "test_relu_wrong_expectation", helper.make_node("Relu", ["x"], ["y"]), [("x", x)], [("y", wrong)])
    write_test(
        root,
        "test_multinomial_refused",  # random sampling: svod_min has no lowering, and pinning x would not help
        helper.make_node("Multinomial", ["x"], ["y"], sample_size=2),
        [("x", np.array([[0.0, 1.0, 2.0]], dtype=np.float32))],
        [("y", np.array([[2, 2]], dtype=np.int32))],
    )
    return str(root)


def test_the_suite_is_found_and_read(suite):
    tests = find_tests(suite)
    assert [t.name for t in tests] == ["test_multinomial_refused", "test_relu", "test_relu_wrong_expectation"]
    assert [t.name for t in find_tests(suite, ["*_refused"])] == ["test_multinomial_refused"]
    data = read_data_set(tests[1])
    assert list(data.inputs) == ["x"] and data.inputs["x"].shape == (3, 4)
    assert data.outputs[0][0] == "y" and data.op_types == ["Relu"]


@pytest.mark.parametrize(
    "name, engine, kind",
    [
        ("test_relu", "svod_min", PASS),
        ("test_relu", "onnxruntime", PASS),
        ("test_relu_wrong_expectation", "svod_min", STALE_DATA),
        ("test_multinomial_refused", "svod_min", REFUSED),
    ],
)
def test_each_engine_is_classified(suite, name, engine, kind):
    if engine == "onnxruntime":
        pytest.importorskip("onnxruntime")
    (test,) = find_tests(suite, [name])
    outcome = runner.in_child(engine, test, timeout=120)
    assert outcome.kind == kind, outcome.detail
    if kind == STALE_DATA:  # the planted data contradicts onnx's reference evaluator, which svod_min equals
        assert "reference evaluator" in outcome.detail and "3 of 12 elements differ" in outcome.detail


def test_a_mismatch_with_the_data_and_the_reference_stays_wrong(suite):
    (test,) = find_tests(suite, ["test_relu_wrong_expectation"])
    data = read_data_set(test)
    got = {"y": np.maximum(data.inputs["x"], 0) - np.float32(1)}  # equal to neither the data nor the reference
    outcome = runner.against_current_spec(test, data, got, compare(got, data.outputs))
    assert outcome.kind == WRONG and "elements differ" in outcome.detail
    right = {"y": np.maximum(data.inputs["x"], 0)}
    assert runner.against_current_spec(test, data, right, compare(right, data.outputs)).kind == STALE_DATA


def test_a_disputed_test_equal_to_onnxruntime_is_disputed_else_wrong(suite, monkeypatch):
    pytest.importorskip("onnxruntime")
    from conformance import outcome as outcomes

    (test,) = find_tests(suite, ["test_relu_wrong_expectation"])
    monkeypatch.setitem(outcomes.DISPUTED_TESTS, test.name, "a planted dispute")
    data = read_data_set(test)
    peer = {"y": np.maximum(data.inputs["x"], 0)}  # onnxruntime's Relu
    assert runner.against_onnxruntime(test, data, peer, compare(peer, data.outputs)).kind == outcomes.DISPUTED
    other = {"y": peer["y"] + np.float32(1)}
    assert runner.against_onnxruntime(test, data, other, compare(other, data.outputs)).kind == WRONG


def _die(test, data):
    os.kill(os.getpid(), signal.SIGSEGV)


def _hang(test, data):
    import time

    time.sleep(60)


def _raise(test, data):
    raise RuntimeError("a bug")


@pytest.mark.parametrize("engine, kind", [(_die, SIGNAL), (_hang, HANG), (_raise, CRASH)])
def test_a_signal_a_hang_and_a_traceback_are_outcomes_not_the_end_of_the_round(suite, monkeypatch, engine, kind):
    monkeypatch.setitem(runner.ENGINES, "probe", engine)
    (test,) = find_tests(suite, ["test_relu"])
    outcome = runner.in_child("probe", test, timeout=2)
    assert outcome.kind == kind
    if kind == CRASH:
        assert "RuntimeError: a bug" in outcome.detail


def test_compare_holds_dtype_shape_and_nan():
    want = [("y", np.array([1.0, np.nan], dtype=np.float32))]
    assert compare({"y": np.array([1.0005, np.nan], dtype=np.float32)}, want).kind == PASS
    assert compare({"y": np.array([1.01, np.nan], dtype=np.float32)}, want).kind == WRONG
    assert compare({"y": np.array([1.0, np.nan], dtype=np.float64)}, want).kind == WRONG
    assert compare({"y": np.array([1.0], dtype=np.float32)}, want).kind == WRONG
    assert compare({}, want).kind == WRONG
    assert compare({"y": np.array([True])}, [("y", np.array([False]))]).kind == WRONG


def test_the_report_counts_failures_and_tables_ops():
    records = [
        {"test": "test_relu", "ops": ["Relu"], "svod_min": Outcome(PASS).as_dict(), "onnxruntime": {"kind": PASS}},
        {
            "test": "test_gelu_expanded",
            "ops": ["Mul", "Erf"],
            "svod_min": Outcome(WRONG, "y: 1 of 2 elements differ").as_dict(),
            "onnxruntime": {"kind": PASS},
        },
    ]
    lines = summary(records)
    assert "svod_min passes 1 of the 2 tests onnxruntime passes (50.0%)" in lines
    assert "svod_min crashes, hangs, signals and wrong answers: 1" in lines
    table = op_table(records)
    assert table[2].startswith("| gelu (expanded) | 1 | 0 | 0 | 1 |")
    assert table[3].startswith("| Relu | 1 | 1 | 0 | 1 |")
