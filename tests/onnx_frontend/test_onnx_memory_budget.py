"""Memory bombs in ONNX models: an Expand of a [1, 4] input to [2^30, 4] (16 GiB) builds, with a warning when
the build host could not run it, and ``run`` refuses it before allocating; constant folding never materialises
a giant tensor at build time."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import host_target  # noqa: E402
from support.plan_file import REPO  # noqa: E402

from svod_min.onnx.build import build_onnx  # noqa: E402
from svod_min.onnx.frontend import parse  # noqa: E402
from svod_min.onnx.frontend.fold_size import fold_elements  # noqa: E402

ROWS = 1 << 30  # [2^30, 4] float32: 16 GiB


def _expand_model(constant: bool) -> onnx.ModelProto:
    """y = Expand(x, [ROWS, 4]) + 0: x the model's [1, 4] input, or (constant) an initializer."""
    inits = [numpy_helper.from_array(np.array([ROWS, 4], np.int64), "shape")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    if constant:
        inits.append(numpy_helper.from_array(np.ones((1, 4), np.float32), "c"))
    nodes = [helper.make_node("Expand", ["c" if constant else "x", "shape"], ["e"], name="bomb")]
    nodes.append(helper.make_node("Add", ["e", "x"], ["y"], name="add"))
    graph = helper.make_graph(
        nodes, "bomb", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, 4])], inits
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def bomb(tmp_path_factory):
    """The input-Expand model built under a 1 GiB budget: (bundle path, the build's progress lines)."""
    where = tmp_path_factory.mktemp("bomb")
    path = str(where / "bomb.onnx")
    onnx.save(_expand_model(constant=False), path)
    lines = []
    old = os.environ.get("SVOD_MAX_MEMORY")
    os.environ["SVOD_MAX_MEMORY"] = "1G"
    try:
        build_onnx(path, str(where / "bomb.svod"), targets=[host_target()], progress=lines.append)
    finally:
        if old is None:
            del os.environ["SVOD_MAX_MEMORY"]
        else:
            os.environ["SVOD_MAX_MEMORY"] = old
    return str(where / "bomb.svod"), lines


def test_build_warns_when_the_model_exceeds_the_hosts_budget_and_skips_onnxruntime(bomb):
    _, lines = bomb
    warning = [ln for ln in lines if ln.startswith("warning:")]
    assert len(warning) == 1, lines
    assert "about 32.0 GiB at its peak" in warning[0] and "(SVOD_MAX_MEMORY=1G)" in warning[0]
    assert "buffer 'y' (float32 [1073741824, 4]) 16.0 GiB" in warning[0]
    assert "no expectations recorded (output 'y' is 16.0 GiB, more than a bundle entry may hold (4.0 GiB))" in lines


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_run_refuses_the_expand_bomb_at_once_with_exit_2(bomb, how):
    """Under 3 GiB of address space: a 16 GiB mapping attempted would fail otherwise, with another message."""
    bundle, _ = bomb
    code = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
        "from svod_min.__main__ import main; sys.exit(main(sys.argv[1:]))"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    args = [sys.executable, "-c", code, "run", bundle, "--once"]
    if how == "flag":
        args += ["--max-memory", "2G"]
    else:
        env["SVOD_MAX_MEMORY"] = "2G"
    proc = subprocess.run(args, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "over the memory budget of 2.0 GiB (%s)" % (
        "--max-memory 2G" if how == "flag" else "SVOD_MAX_MEMORY=2G"
    ) in (proc.stderr)
    assert "buffer 'y' (float32 [1073741824, 4]) 16.0 GiB" in proc.stderr
    assert "nothing was allocated" in proc.stderr


def test_folding_never_evaluates_an_expand_of_a_constant_to_16_gib(monkeypatch, tmp_path):
    evaluated = []
    real = parse._one_node_model

    def spy(node, consts, opset):
        evaluated.append(node.op_type)
        return real(node, consts, opset)

    monkeypatch.setattr(parse, "_one_node_model", spy)
    model = parse.fold_constants(parse.infer(_expand_model(constant=True)), 17)
    assert "Expand" not in evaluated  # refused before the reference evaluator could allocate it
    assert [n.op_type for n in model.graph.node] == ["Expand", "Add"]


@pytest.mark.parametrize(
    "op, inputs",
    [
        ("Expand", [np.ones((3, 1), np.float32), np.array([2, 1, 5], np.int64)]),
        ("ConstantOfShape", [np.array([4, 0, 3], np.int64)]),
        ("ConstantOfShape", [np.array([7, 6], np.int64)]),
        ("Tile", [np.ones((2, 3), np.float32), np.array([3, 2], np.int64)]),
        ("Range", [np.array(1.0, np.float32), np.array(9.5, np.float32), np.array(2.0, np.float32)]),
        ("Range", [np.array(10, np.int64), np.array(1, np.int64), np.array(-3, np.int64)]),
        ("Range", [np.array(5, np.int64), np.array(1, np.int64), np.array(1, np.int64)]),
    ],
)
def test_the_size_a_fold_would_have_matches_the_reference_evaluators_result(op, inputs):
    from onnx.reference import ReferenceEvaluator

    names = ["i%d" % k for k in range(len(inputs))]
    node = helper.make_node(op, names, ["out"])
    consts = dict(zip(names, inputs))
    got = fold_elements(node, consts, {})  # no inferred shape: from the operands' values
    model = parse._one_node_model(node, consts, 17)
    assert got == ReferenceEvaluator(model).run(None, consts)[0].size
