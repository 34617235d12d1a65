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
from svod_min.error import IndexOutOfRangeError  # noqa: E402
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
    for i in (-N, N - 1):  # GatherElements of run-time data with constant indices (not folded)
        idx = np.array([[0, i], [i, 1]], np.int64)
        nodes = [helper.make_node("GatherElements", ["x", "idx"], ["y"], axis=1)]
        model = _model(nodes, [("x", (2, N), F)], {"idx": idx}, [("y", F, 2)])
        x = np.arange(2 * N, dtype=np.float32).reshape(2, N)
        got = build_and_load(model, str(tmp_path), "ge%d" % (i + N)).run({"x": x})["y"]
        np.testing.assert_array_equal(got, run_ort(model, {"x": x})[0])
        np.testing.assert_array_equal(got, np.take_along_axis(x, idx % N, axis=1))


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
def test_the_nd_and_scatter_ops_name_a_bad_constant_index(op, i, tmp_path):
    """A bad constant index is refused as such; a good one lowers (ops/indexed.py)."""
    if op == "ScatterElements":
        model = _nd_model(op, np.array([[0, i]], np.int64), np.ones((1, 2), np.float32))
        model.graph.node[0].attribute.extend([helper.make_attribute("axis", 1)])
    elif op == "ScatterND":
        model = _nd_model(op, np.array([[1, i]], np.int64), np.ones((1,), np.float32))
    else:
        model = _nd_model(op, np.array([[1, i]], np.int64))
    if i in OK:
        _lower(model, tmp_path)
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


# -- indices from data: checked by the kernel at run, on both run paths ------------------------------------------

PATHS = [True, False]  # native replay, the Python path


def _set_path(model, native):
    assert model.loaded.plan.set_native_replay(native) == native
    return model


@pytest.fixture(scope="module")
def data_gathers(tmp_path_factory):
    """Gather and GatherElements of x [2, N, 3] along axis 1 with indices from an int64 and an int32 input, built
    once: Gather's indices [2], GatherElements' [1, 2, 1]."""
    from support.onnx_models import build_and_load

    out = {}
    for op, shape, rank in (("Gather", (2,), 3), ("GatherElements", (1, 2, 1), 3)):
        for name, dtype in (("int64", I64), ("int32", I32)):
            nodes = [helper.make_node(op, ["x", "idx"], ["y"], axis=1, name="pick")]
            model = _model(nodes, [("x", (2, N, 3), F), ("idx", shape, dtype)], {}, [("y", F, rank)])
            directory = str(tmp_path_factory.mktemp("%s_%s" % (op, name)))
            out[op, name] = (model, build_and_load(model, directory))
    return out


X = np.arange(2 * N * 3, dtype=np.float32).reshape(2, N, 3) + 1
#: op -> (the indices [0, i] in its index shape, the position of i, numpy's result for in-range indices)
DATA_CASES = {
    "Gather": (lambda i, t: np.array([0, i], t), "[1]", lambda idx: np.take(X, idx, axis=1)),
    "GatherElements": (
        lambda i, t: np.array([0, i], t).reshape(1, 2, 1),
        "[0, 1, 0]",
        lambda idx: np.take_along_axis(X[:1, :, :1], idx.astype(np.int64) % N, axis=1),
    ),
}


@pytest.mark.parametrize("native", PATHS)
@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("op", sorted(DATA_CASES))
def test_indices_from_data_at_the_edges(data_gathers, op, dtype, native):
    model, m = data_gathers[op, dtype]
    make, position, reference = DATA_CASES[op]
    _set_path(m, native)
    for i in EDGES:
        if dtype == "int32" and abs(i) >= 1 << 31:
            i = int(np.sign(i)) * ((1 << 31) - 1)  # as far out as an int32 goes
        idx = make(i, dtype)
        if i in OK:
            got = m.run({"x": X, "idx": idx})["y"]
            np.testing.assert_array_equal(got, run_ort(model, {"x": X, "idx": idx})[0])
            np.testing.assert_array_equal(got, reference(idx))
            continue
        with pytest.raises(Exception):  # onnxruntime refuses it too
            run_ort(model, {"x": X, "idx": idx})
        with pytest.raises(IndexOutOfRangeError) as info:
            m.run({"x": X, "idx": idx})
        text = str(info.value)
        assert info.value.exit_code == 2
        for word in ("node 0 (%s, 'pick')" % op, "index %d at position %s" % (i, position), "'idx'", "[-4, 3]"):
            assert word in text, (word, text)
    # not poisoned: the next call with good indices runs and is right
    good = make(N - 1, dtype)
    np.testing.assert_array_equal(m.run({"x": X, "idx": good})["y"], reference(good))


@pytest.mark.parametrize("native", PATHS)
def test_the_lowest_bad_position_is_named_whatever_the_calls(native, tmp_path):
    """Enough work for several core_id calls, bad indices in more than one: the report names the lowest position."""
    from support.onnx_models import build_and_load

    inner, count = 4096, 32
    nodes = [helper.make_node("Gather", ["x", "idx"], ["y"], axis=0, name="rows")]
    model = _model(nodes, [("x", (N, inner), F), ("idx", (count,), I64)], {}, [("y", F, 2)])
    m = _set_path(build_and_load(model, str(tmp_path)), native)
    slots = m.loaded.buffers["svod.status"].nbytes // 64
    assert slots > 1, "the case must split the rows over several calls"
    x = np.random.default_rng(0).standard_normal((N, inner)).astype(np.float32)
    idx = np.arange(count, dtype=np.int64) % N
    idx[[29, 11, 30]] = [FAR, -N - 1, N]
    with pytest.raises(IndexOutOfRangeError, match=r"index -5 at position \[11\]"):
        m.run({"x": x, "idx": idx})
    idx[[29, 11, 30]] = [-1, 2, 3]
    np.testing.assert_array_equal(m.run({"x": x, "idx": idx})["y"], x[idx])


@pytest.mark.parametrize("native", PATHS)
def test_computed_indices_are_checked(native, tmp_path):
    """Indices computed in the graph (ArgMax over 6 elements) gathering along an axis of 4."""
    from support.onnx_models import build_and_load

    nodes = [
        helper.make_node("ArgMax", ["s"], ["k"], axis=1, keepdims=0),
        helper.make_node("Gather", ["x", "k"], ["y"], axis=0, name="by_argmax"),
    ]
    model = _model(nodes, [("x", (N, 3), F), ("s", (2, 6), F)], {}, [("y", F, 2)])
    m = _set_path(build_and_load(model, str(tmp_path)), native)
    x = np.arange(N * 3, dtype=np.float32).reshape(N, 3)
    s = np.zeros((2, 6), np.float32)
    s[0, 3], s[1, 1] = 1, 1
    np.testing.assert_array_equal(m.run({"x": x, "s": s})["y"], run_ort(model, {"x": x, "s": s})[0])
    s[1, 1], s[1, 5] = 0, 1
    with pytest.raises(IndexOutOfRangeError, match=r"by_argmax.*index 5 at position \[1\]"):
        m.run({"x": x, "s": s})


def test_run_exits_2_naming_the_node_for_an_int64_npy(tmp_path, capsys):
    nodes = [helper.make_node("Gather", ["x", "idx"], ["y"], axis=1, name="pick")]
    model = _model(nodes, [("x", (2, N, 3), F), ("idx", (2,), I64)], {}, [("y", F, 3)])
    path, bundle = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    assert main(["build", path, "-o", bundle, "--target", host_target(), "--no-expect"]) == 0
    np.save(str(tmp_path / "x.npy"), X)
    for name, idx, code in (("good", [3, -4], 0), ("bad", [1, FAR], 2)):
        np.save(str(tmp_path / (name + ".npy")), np.array(idx, np.int64))
        argv = ["run", bundle, "--once", "--input", "x=%s" % (tmp_path / "x.npy")]
        argv += ["--input", "idx=%s" % (tmp_path / (name + ".npy")), "--save", str(tmp_path / name)]
        assert main(argv) == code, capsys.readouterr()
        if code:
            err = capsys.readouterr().err
            assert "node 0 (Gather, 'pick')" in err and "index %d at position [1]" % FAR in err, err
        else:
            np.testing.assert_array_equal(np.load(str(tmp_path / name / "y.npy")), np.take(X, idx, axis=1))


@pytest.mark.parametrize("native", PATHS)
def test_nothing_is_written_past_the_output(native):
    """The gather kernel on a plan of its own: its output a view between two guard bands of one buffer, the data a
    view inside another; a bad index leaves the guards and its own rows untouched and the good rows written."""
    from svod_min.onnx.kernels.copy import gather
    from svod_min.planfile.load import load_plan
    from svod_min.planfile.status import SLOT_WORDS

    outer, inner, count, guard = 2, 3, 3, 16
    k = gather(outer, N, inner, count, "long long")
    rows = outer * count * inner
    doc = {
        "svod_plan": 1,
        "buffers": {
            "mem": {"dtype": "float32", "shape": [rows + 2 * guard]},
            "out": {"dtype": "float32", "shape": [rows], "view_of": "mem", "offset": 4 * guard},
            "src": {"dtype": "float32", "shape": [outer * N * inner + 2 * guard]},
            "x": {"dtype": "float32", "shape": [outer * N * inner], "view_of": "src", "offset": 4 * guard},
            "idx": {"dtype": "int64", "shape": [count], "input": True},
            "svod.status": {"dtype": "int64", "shape": [k.chunks * SLOT_WORDS]},
            "done": {"dtype": "float32", "shape": [1], "output": True},
        },
        "kernels": {
            k.name: {
                "source": k.source,
                "buffers": 4,
                "outputs": [0, 3],
                "vars": ["core_id"],
                "global_size": [k.chunks, 1, 1],
                "extents": {str(i): e for i, e in enumerate(k.extents)},
            }
        },
        "ops": [
            {"kernel": k.name, "buffers": ["out", "x", "idx", "svod.status"]},
            {"copy": {"dst": "done", "src": "done"}},
        ],
        "checks": {
            "buffer": "svod.status",
            "records": [
                {"offset": 0, "slots": k.chunks, "node": "the gather", "what": "idx", "shape": [count], "why": "4"}
            ],
        },
    }
    loaded = load_plan(doc)
    assert loaded.plan.set_native_replay(native) == native
    sentinel = np.full(rows + 2 * guard, -7.0, np.float32)
    data = np.arange(outer * N * inner + 2 * guard, dtype=np.float32)
    loaded.buffers["mem"].copyin(sentinel.tobytes())
    loaded.buffers["src"].copyin(data.tobytes())
    idx = np.array([1, N, -1], np.int64)
    loaded.set_input("idx", "int64", (count,), idx.tobytes())
    with pytest.raises(IndexOutOfRangeError, match=r"the gather: index 4 at position \[1\] of idx"):
        loaded.plan.execute()
    mem = np.frombuffer(loaded.buffers["mem"].copyout(), np.float32)
    assert (mem[:guard] == -7).all() and (mem[-guard:] == -7).all(), "a guard band was written"
    got = mem[guard:-guard].reshape(outer, count, inner)
    x = data[guard:-guard].reshape(outer, N, inner)
    np.testing.assert_array_equal(got[:, 0], x[:, 1])
    np.testing.assert_array_equal(got[:, 2], x[:, N - 1])
    assert (got[:, 1] == -7).all(), "the bad index's rows were written"
    assert not any(loaded.buffers["svod.status"].copyout()), "the status is cleared for the next run"
