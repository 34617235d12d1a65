"""Inputs whose values decide shapes, pinned at build (``build --pin``): the refusal without a pin names the input
and suggests the flag; built with the pin, the bundle equals onnxruntime when fed the pinned value and refuses any
other value by name (input, position, fed and pinned value) on the Python path, the native runner, ``run`` and the
zipapp on a bare Python 3.8; pins of the wrong name, dtype or shape are refused at build."""

from __future__ import annotations

import os
import subprocess

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import bare_python38, build_and_load, host_target, run_ort  # noqa: E402

from svod_min.__main__ import main  # noqa: E402
from svod_min.error import ModelFileError, PinnedInputError, PlanFileError, UnsupportedModelError  # noqa: E402
from svod_min.planfile.status import read_checks  # noqa: E402

F, I64 = TensorProto.FLOAT, TensorProto.INT64
X = np.arange(24, dtype=np.float32).reshape(2, 3, 4) / 7 - 1
AXES = np.array([0, 2], np.int64)
SHAPE = np.array([4, -1], np.int64)
PATHS = [True, False]  # native replay, the Python path


def _model(node, extra, out_rank, opset=18):
    """``node`` reading x [2, 3, 4] and ``extra`` (name, dims, type): a graph input whose value decides the shape."""
    name, dims, elem = extra
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info("x", F, [2, 3, 4]), helper.make_tensor_value_info(name, elem, dims)],
        [helper.make_tensor_value_info("y", F, ["d%d" % k for k in range(out_rank)])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def reduce_model():
    return _model(helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0, name="sum"), ("axes", ["n"], I64), 1)


def reshape_model():
    return _model(helper.make_node("Reshape", ["x", "shape"], ["y"], name="flat"), ("shape", [2], I64), 2)


@pytest.fixture(scope="module")
def reduce_bundle(tmp_path_factory):
    """The ReduceSum built with ``--pin axes=0,2`` through the CLI, and loaded."""
    from svod_min import load_model

    tmp = tmp_path_factory.mktemp("reduce")
    path, bundle = str(tmp / "m.onnx"), str(tmp / "m.svod")
    onnx.save(reduce_model(), path)
    assert main(["build", path, "-o", bundle, "--target", host_target(), "--pin", "axes=0,2"]) == 0
    return bundle, load_model(bundle)


def test_without_a_pin_the_refusal_names_the_input_and_suggests_the_flag(tmp_path):
    for model, name in ((reduce_model(), "axes"), (reshape_model(), "shape")):
        with pytest.raises(UnsupportedModelError) as info:
            build_and_load(model, str(tmp_path), shapes={name: [2]})
        assert "depends on the value of input %r" % name in str(info.value)
        assert "--pin %s=..." % name in str(info.value)
    with pytest.raises(ModelFileError, match=r"dynamic: .*or, if its value decides shapes, --pin axes=V0,V1"):
        build_and_load(reduce_model(), str(tmp_path))  # axes' dim is dynamic too: the first refusal tells of --pin


def test_the_refusal_follows_the_value_through_computed_operands(tmp_path):
    """axes = Add(a, one): the input named is a, not the float data x."""
    nodes = [
        helper.make_node("Add", ["a", "one"], ["axes"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("x", F, [2, 3, 4]), helper.make_tensor_value_info("a", I64, [1])],
        [helper.make_tensor_value_info("y", F, ["d0", "d1"])],
        [onnx.numpy_helper.from_array(np.array([1], np.int64), "one")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(UnsupportedModelError, match=r"input 'a': build with --pin a=\.\.\."):
        build_and_load(model, str(tmp_path))
    m = build_and_load(model, str(tmp_path), pins={"a": np.array([1], np.int64)})
    a = np.array([1], np.int64)
    np.testing.assert_allclose(m.run({"x": X, "a": a})["y"], run_ort(model, {"x": X, "a": a})[0], rtol=1e-6)


@pytest.mark.parametrize("native", PATHS)
def test_pinned_reduce_equals_onnxruntime_and_refuses_other_axes(reduce_bundle, native):
    _, m = reduce_bundle
    assert m.loaded.plan.set_native_replay(native) == native
    want = run_ort(reduce_model(), {"x": X, "axes": AXES})[0]
    np.testing.assert_allclose(m.run({"x": X, "axes": AXES})["y"], want, rtol=1e-6)
    with pytest.raises(PinnedInputError) as info:
        m.run({"x": X, "axes": np.array([0, 1], np.int64)})
    text = str(info.value)
    assert info.value.exit_code == 2
    assert "input 'axes' is fed 1 at position [1], where the bundle pins 2" in text, text
    assert "--pin axes=0,2" in text and "rebuild" in text
    # the check does not poison the plan: the pinned value runs again
    np.testing.assert_allclose(m.run({"x": X, "axes": AXES})["y"], want, rtol=1e-6)


@pytest.mark.parametrize("native", PATHS)
def test_pinned_reshape_through_the_api(native, tmp_path):
    m = build_and_load(reshape_model(), str(tmp_path), pins={"shape": SHAPE})
    assert m.loaded.plan.set_native_replay(native) == native
    got = m.run({"x": X, "shape": SHAPE})["y"]
    np.testing.assert_array_equal(got, run_ort(reshape_model(), {"x": X, "shape": SHAPE})[0])
    with pytest.raises(PinnedInputError, match=r"input 'shape' is fed 6 at position \[0\], where the bundle pins 4"):
        m.run({"x": X, "shape": np.array([6, 4], np.int64)})


def test_scalar_inputs_pin_from_a_list_or_a_0d_array(tmp_path):
    """Range's scalar bounds: a list of one number fills a scalar, a 0-d array keeps its shape."""
    node = helper.make_node("Range", ["start", "limit", "delta"], ["y"])
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info(n, TensorProto.INT32, []) for n in ("start", "limit", "delta")],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8
    feeds = {"start": np.array(10, np.int32), "limit": np.array(1, np.int32), "delta": np.array(-3, np.int32)}
    m = build_and_load(model, str(tmp_path), pins={"start": [10], "limit": feeds["limit"], "delta": [-3]})
    np.testing.assert_array_equal(m.run(feeds)["y"], run_ort(model, feeds)[0])
    with pytest.raises(PinnedInputError, match=r"input 'delta' is fed -2 at position \[\], where the bundle pins -3"):
        m.run(dict(feeds, delta=np.array(-2, np.int32)))


def test_run_and_info_name_the_pin(reduce_bundle, tmp_path, capsys):
    bundle, _ = reduce_bundle
    np.save(str(tmp_path / "x.npy"), X)
    for name, axes, code in (("good", [0, 2], 0), ("bad", [0, -1], 2)):
        np.save(str(tmp_path / (name + ".npy")), np.array(axes, np.int64))
        argv = ["run", bundle, "--once", "--input", "x=%s" % (tmp_path / "x.npy")]
        argv += ["--input", "axes=%s" % (tmp_path / (name + ".npy"))]
        capsys.readouterr()
        assert main(argv) == code
        out = capsys.readouterr()
        assert ("pin" in out.err) == bool(code), out  # nothing new on success
        if code:
            assert "input 'axes' is fed -1 at position [1], where the bundle pins 2" in out.err, out.err
    assert main(["info", bundle]) == 0
    assert "input axes: int64 [2]; pinned at build (--pin axes=0,2)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "pin, words",
    [
        ({"nope": [0]}, "--pin names 'nope', not an input of the model (inputs: axes, x)"),
        ({"axes": [0.5, 2]}, "--pin axes: the input holds int64, and the pin gives floats"),
        ({"axes": np.array([0.0, 2.0])}, "the pin gives floats"),
        ({"axes": np.array([[0, 2]])}, "--pin axes has shape [1, 2], the model's input is ['?']"),
        ({"x": [1.0, 2.0]}, "--pin x: 2 value(s) do not fill the input's shape [2, 3, 4]"),
    ],
)
def test_bad_pins_are_refused_at_build(pin, words, tmp_path):
    with pytest.raises(ModelFileError) as info:
        build_and_load(reduce_model(), str(tmp_path), pins=pin)
    assert info.value.exit_code == 2 and words in str(info.value), str(info.value)


def test_cli_pin_refusals_exit_2(tmp_path, capsys):
    path = str(tmp_path / "m.onnx")
    onnx.save(reshape_model(), path)
    argv = ["build", path, "-o", str(tmp_path / "m.svod"), "--no-expect"]
    assert main(argv + ["--pin", "shape=4,x"]) == 2
    assert "--pin 'shape=4,x'" in capsys.readouterr().err
    assert main(argv + ["--pin", "shape=%d,1" % (1 << 63)]) == 2  # past int64
    assert "--pin shape: the input holds int64, which cannot hold %d" % (1 << 63) in capsys.readouterr().err
    np.save(str(tmp_path / "s.npy"), np.array([4, -1, 1], np.int64))
    assert main(argv + ["--pin", "shape=%s" % (tmp_path / "s.npy")]) == 2
    assert "--pin shape has shape [3], the model's input is [2]" in capsys.readouterr().err
    assert not os.path.exists(str(tmp_path / "m.svod"))


def test_old_check_records_keep_meaning_index_and_kinds_are_checked():
    class Buf:
        dtype, nbytes = "int64", 64

    record = {"offset": 0, "slots": 1, "node": "n", "what": "w", "shape": [2], "why": "y"}
    assert read_checks({"buffer": "s", "records": [record]}, {"s": Buf()}).records[0].kind == "index"
    with pytest.raises(PlanFileError, match="kind"):
        read_checks({"buffer": "s", "records": [dict(record, kind="other")]}, {"s": Buf()})
    with pytest.raises(PlanFileError, match="dtype"):
        read_checks({"buffer": "s", "records": [dict(record, kind="pinned", dtype="int3")]}, {"s": Buf()})


PYTHON38 = bare_python38()


@pytest.mark.skipif(PYTHON38 is None, reason="no Python 3.8 on PATH or under pyenv's versions/3.8.*")
def test_the_zipapp_on_bare_python38_refuses_another_value(reduce_bundle, pyz, tmp_path):
    bundle, _ = reduce_bundle
    np.save(str(tmp_path / "x.npy"), X)
    empty = str(tmp_path / "empty-path")
    os.makedirs(empty)
    env = {"PATH": empty, "SVOD_OBJECT_CACHE": "0", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    for name, axes, code in (("good", [0, 2], 0), ("bad", [2, 2], 2)):
        np.save(str(tmp_path / (name + ".npy")), np.array(axes, np.int64))
        cmd = [PYTHON38, "-I", "-S", pyz, "run", bundle, "--once", "--input", "x=%s" % (tmp_path / "x.npy")]
        cmd += ["--input", "axes=%s" % (tmp_path / (name + ".npy")), "--save", str(tmp_path / name)]
        proc = subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)
        assert proc.returncode == code, proc.stdout + proc.stderr
        if code:
            assert "input 'axes' is fed 2 at position [0], where the bundle pins 0" in proc.stderr, proc.stderr
            assert not os.path.exists(str(tmp_path / name / "y.npy"))
        else:
            want = run_ort(reduce_model(), {"x": X, "axes": AXES})[0]
            np.testing.assert_allclose(np.load(str(tmp_path / name / "y.npy")), want, rtol=1e-6)
