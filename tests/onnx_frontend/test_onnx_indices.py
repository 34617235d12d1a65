"""Indices against ONNX's rules: constant ones checked at build (refused by name, never folded into a clamp or a
wraparound), indices from data checked by the kernel at run (the bad one reported, nothing written past a buffer),
both run paths, int32 and int64, against onnxruntime and numpy."""

from __future__ import annotations

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import host_target, run_ort  # noqa: E402

from svod_min.__main__ import main  # noqa: E402
from svod_min.error import IndexOutOfRangeError, SvodError  # noqa: E402
from svod_min.onnx.build import lower_model  # noqa: E402
from svod_min.onnx.frontend.indices import Operand, check_indices  # noqa: E402

F, I64, I32 = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32
N = 4  # the size of the indexed axis in every case
FAR = 1 << 40
EDGES = [-N - 1, -N, N - 1, N, FAR, -FAR]
OK = {-N, N - 1}


def _model(nodes, inputs, consts, outputs, opset=13):
    """A model whose outputs carry their rank only (a bad index leaves shape inference nothing to say)."""
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, t, list(s)) for n, s, t in inputs],
        [helper.make_tensor_value_info(o, t, ["d%d" % k for k in range(rank)]) for o, t, rank in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _lower(model, tmp_path):
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    return lower_model(path)


def _refused(model, tmp_path, *words):
    with pytest.raises(IndexOutOfRangeError) as info:
        _lower(model, tmp_path)
    assert info.value.exit_code == 2
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    return str(info.value)


# -- constant indices: refused at build by name, or the right result ---------------------------------------------


def _gather_x(i, dtype=np.int64):
    """Gather of run-time data [2, N] along axis 1 with constant indices [0, i]."""
    nodes = [helper.make_node("Gather", ["x", "idx"], ["y"], axis=1, name="pick")]
    return _model(nodes, [("x", (2, N), F)], {"idx": np.array([0, i], dtype)}, [("y", F, 2)])


def _gather_const(i):
    """Gather of constant data [N] with constant indices [0, i], added to an input: the fold step sees it."""
    nodes = [
        helper.make_node("Gather", ["table", "idx"], ["t"], name="lookup"),
        helper.make_node("Add", ["t", "x"], ["y"]),
    ]
    consts = {"table": np.arange(10, 10 + N, dtype=np.float32), "idx": np.array([0, i], np.int64)}
    return _model(nodes, [("x", (2,), F)], consts, [("y", F, 1)])


def _gather_elements_const(i):
    """GatherElements of constants (onnx's reference evaluator wraps its indices: 4 on an axis of 4 gives 0)."""
    nodes = [
        helper.make_node("GatherElements", ["table", "idx"], ["t"], axis=1, name="ge"),
        helper.make_node("Add", ["t", "x"], ["y"]),
    ]
    consts = {"table": np.arange(2 * N, dtype=np.float32).reshape(2, N), "idx": np.array([[0], [i]], np.int64)}
    return _model(nodes, [("x", (2, 1), F)], consts, [("y", F, 2)])


@pytest.mark.parametrize("i", EDGES)
@pytest.mark.parametrize("make", [_gather_x, _gather_const, _gather_elements_const])
def test_constant_indices_at_the_edges(make, i, tmp_path):
    model = make(i)
    if i in OK:
        _lower(model, tmp_path)
        return
    text = _refused(model, tmp_path, "index %d" % i, "[-%d, %d]" % (N, N - 1), "position [")
    assert "(Gather" in text


def test_constant_gather_result_matches_onnxruntime(tmp_path):
    from support.onnx_models import build_and_load

    for i in (-N, N - 1):
        for dtype in (np.int64, np.int32):
            model = _gather_x(i, dtype)
            x = np.arange(2 * N, dtype=np.float32).reshape(2, N)
            want = run_ort(model, {"x": x})[0]
            got = build_and_load(model, str(tmp_path), "g%d%s" % (i + N, dtype.__name__)).run({"x": x})["y"]
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got, x[:, [0, i]])


def test_the_refusal_names_the_node_the_index_its_position_and_the_bound(tmp_path):
    text = _refused(_gather_x(7), tmp_path, "(Gather, 'pick')", "index 7", "position [1]", "'idx'", "[-4, 3]")
    assert "axis 1 of 'x' has 4 elements" in text


def test_build_exits_2_naming_the_index(tmp_path, capsys):
    path = str(tmp_path / "m.onnx")
    onnx.save(_gather_x(-9), path)
    assert main(["build", path, "-o", str(tmp_path / "m.svod"), "--target", host_target()]) == 2
    err = capsys.readouterr().err
    assert "index -9" in err and "pick" in err
    assert not (tmp_path / "m.svod").exists()


def _nd_model(op, idx, extra=None):
    inputs = ["x", "idx"] + (["u"] if extra is not None else [])
    consts = {"idx": idx}
    if extra is not None:
        consts["u"] = extra
    node = helper.make_node(op, inputs, ["y"], name="nd")
    return _model([node], [("x", (3, N), F)], consts, [("y", F, 1 if op == "GatherND" else 2)])


@pytest.mark.parametrize("i", EDGES)
@pytest.mark.parametrize("op", ["GatherND", "ScatterND", "ScatterElements"])
def test_ops_the_table_does_not_lower_still_name_a_bad_index(op, i, tmp_path):
    """A bad constant index is refused as such, before 'op not supported'; a good one gets that refusal."""
    if op == "ScatterElements":
        model = _nd_model(op, np.array([[0, i]], np.int64), np.ones((1, 2), np.float32))
        model.graph.node[0].attribute.extend([helper.make_attribute("axis", 1)])
    elif op == "ScatterND":
        model = _nd_model(op, np.array([[1, i]], np.int64), np.ones((1,), np.float32))
    else:
        model = _nd_model(op, np.array([[1, i]], np.int64))
    if i in OK:
        with pytest.raises(SvodError) as info:
            _lower(model, tmp_path)
        assert not isinstance(info.value, IndexOutOfRangeError)
        assert "not supported" in str(info.value)
    else:
        _refused(model, tmp_path, "(%s, 'nd')" % op, "index %d" % i, "[-4, 3]")


@pytest.mark.parametrize(
    "op, operands, attrs, opset, want",
    [
        # TopK's k lies in [0, n]
        ("TopK", [("x", (N,), None), ("k", (1,), np.array([N + 1]))], {}, 13, ("k", N + 1, (0,), 0, N)),
        ("TopK", [("x", (N,), None), ("k", (1,), np.array([-1]))], {}, 13, ("k", -1, (0,), 0, N)),
        ("TopK", [("x", (N,), None), ("k", (1,), np.array([N]))], {}, 13, None),
        ("TopK", [("x", (N,), None)], {"k": N + 1}, 1, ("k", N + 1, (0,), 0, N)),
        # Split's sizes lie in [0, n]
        ("Split", [("x", (N,), None), ("s", (2,), np.array([N + 1, -1]))], {}, 13, ("split size", N + 1, (0,), 0, N)),
        ("Split", [("x", (N,), None)], {"split": [2, -2]}, 11, ("split size", -2, (1,), 0, N)),
        # Slice's and Pad's axes lie in [-r, r-1]; starts and ends are clamped by the spec
        (
            "Slice",
            [("x", (2, 3), None), ("s", (1,), np.array([0])), ("e", (1,), np.array([1])), ("a", (1,), np.array([2]))],
            {},
            13,
            ("axis", 2, (0,), -2, 1),
        ),
        (
            "Slice",
            [("x", (2, 3), None), ("s", (1,), np.array([-FAR])), ("e", (1,), np.array([FAR]))],
            {},
            13,
            None,
        ),
        ("Slice", [("x", (2, 3), None)], {"starts": [0], "ends": [1], "axes": [-3]}, 9, ("axis", -3, (0,), -2, 1)),
        (
            "Pad",
            [("x", (2, 3), None), ("p", (2,), np.array([1, 1])), ("", None, None), ("a", (1,), np.array([-3]))],
            {},
            18,
            ("axis", -3, (0,), -2, 1),
        ),
        # OneHot maps an index outside [-depth, depth-1] to all off values: no rule
        ("OneHot", [("i", (1,), np.array([FAR])), ("d", (), np.array(3)), ("v", (2,), np.array([0, 1]))], {}, 13, None),
    ],
)
def test_the_rule_of_each_index_taking_op(op, operands, attrs, opset, want):
    bad = check_indices(op, attrs, [Operand(*o) for o in operands], opset)
    if want is None:
        assert bad is None
        return
    noun, value, position, lo, hi = want
    assert (bad.noun, bad.value, bad.position, bad.lo, bad.hi) == (noun, value, position, lo, hi)
    assert ("%s %d" % (noun, value)) in bad.message()


def test_gather_nd_checks_each_component_against_its_own_axis():
    data = Operand("x", (2, 3, 5), None)
    ok = Operand("i", (2, 2), np.array([[1, 2], [-2, -3]]))
    assert check_indices("GatherND", {}, [data, ok], 13) is None
    bad = check_indices("GatherND", {}, [data, Operand("i", (2, 2), np.array([[1, 2], [-3, 0]]))], 13)
    assert (bad.value, bad.position, bad.lo, bad.hi) == (-3, (1, 0), -2, 1)
    batched = check_indices("GatherND", {"batch_dims": 1}, [data, Operand("i", (2, 1), np.array([[2], [3]]))], 13)
    assert (batched.value, batched.position, batched.lo, batched.hi) == (3, (1, 0), -3, 2)
