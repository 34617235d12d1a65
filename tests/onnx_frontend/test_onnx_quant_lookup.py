"""8-bit elementwise cones of QDQ models as one 256-entry table lookup (frontend/quant_lookup.py): which cones
become a ``svod.Lookup8`` node and which stay, and the results against onnxruntime on every input byte.

The table computes each op in float32 (transcendental functions correctly rounded to float32), onnxruntime with
its own float32 kernels (MLAS' Sigmoid and Tanh approximations, or its QLinear ops where it fuses a QDQ group): a
value within an ulp or two of a quantization boundary may round one quantum the other way, so the results must
agree within one quantum and exactly on nearly every byte."""

from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, host_target, run_ort  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.onnx import build_onnx  # noqa: E402
from svod_min.onnx.build import prepared_graph  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402
from svod_min.onnx.frontend.quant_lookup import LOOKUP  # noqa: E402
from svod_min.onnx.frontend.ranged import DimRange  # noqa: E402
from svod_min.onnx.frontend.table import OPS  # noqa: E402

ELEM = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
SHAPE = [2, 8, 16]  # 256 elements: every byte once


def _consts(dtype: str) -> Dict[str, Any]:
    """Input and output scales and zero points (uint8's zero points off centre, so a wrong offset shows)."""
    zin, zout = (37, 11) if dtype == "uint8" else (-9, 5)
    return {
        "s_in": np.array(0.047, np.float32),
        "z_in": np.array(zin, dtype),
        "s_mid": np.array(1.0 / 255.0, np.float32),
        "z_mid": np.array(0 if dtype == "uint8" else -128, dtype),
        "s_out": np.array(0.031, np.float32),
        "z_out": np.array(zout, dtype),
    }


def _model(
    nodes: List[Any],
    dtype: str,
    inputs: Sequence[str] = ("x",),
    outputs: Sequence[str] = ("y",),
    extra: Optional[Dict[str, Any]] = None,
    domains: Sequence[Tuple[str, int]] = (),
    shape: Sequence[Any] = SHAPE,
) -> Any:
    consts = dict(_consts(dtype), **(extra or {}))
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, ELEM[dtype], list(shape)) for n in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def _dq(x: str, y: str, s: str = "s_in", z: str = "z_in") -> Any:
    return helper.make_node("DequantizeLinear", [x, s, z], [y])


def _q(x: str, y: str, s: str = "s_out", z: str = "z_out") -> Any:
    return helper.make_node("QuantizeLinear", [x, s, z], [y])


def _every_byte(dtype: str, seed: int = 0) -> Any:
    values = np.arange(256).astype(np.uint8).view(np.dtype(dtype))
    return np.random.default_rng(seed).permutation(values).reshape(SHAPE)


def _lowered_ops(model: Any, tmp_path: Any) -> List[str]:
    """The ops of the graph the op table lowers (after the passes)."""
    path = os.path.join(str(tmp_path), "ops.onnx")
    onnx.save(model, path)
    return [n.op for n in prepared_graph(read_graph(path, {}, {}, OPS)).nodes]


def _check(model: Any, tmp_path: Any, feeds: Dict[str, Any], exact_share: float = 0.97) -> None:
    """svod_min's outputs within one quantum of onnxruntime's, and equal on at least ``exact_share`` of them."""
    want = run_ort(model, feeds)
    got = build_and_load(model, str(tmp_path)).run(feeds)
    for out, w in zip(model.graph.output, want):
        g = got[out.name]
        assert g.dtype == w.dtype and g.shape == w.shape
        if g.dtype == np.float32:  # a float value beside the cone
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
            continue
        diff = np.abs(g.astype(np.int64) - w.astype(np.int64))
        assert diff.max() <= 1, (out.name, int(diff.max()))
        assert np.mean(diff == 0) >= exact_share, (out.name, float(np.mean(diff == 0)))


def _silu(dtype: str, shape: Sequence[Any] = SHAPE) -> Any:
    nodes = [
        _dq("x", "xf"),
        helper.make_node("Sigmoid", ["xf"], ["sig"]),
        _q("sig", "sig_q", "s_mid", "z_mid"),
        _dq("sig_q", "sig_f", "s_mid", "z_mid"),
        helper.make_node("Mul", ["xf", "sig_f"], ["m"]),
        _q("m", "y"),
    ]
    return _model(nodes, dtype, shape=shape)


def _unary(op: str, dtype: str, **attrs: Any) -> Any:
    return _model([_dq("x", "xf"), helper.make_node(op, ["xf"], ["a"], **attrs), _q("a", "y")], dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_silu_in_qdq_form_is_one_lookup(dtype: str, tmp_path: Any) -> None:
    model = _silu(dtype)
    assert _lowered_ops(model, tmp_path) == [LOOKUP]
    _check(model, tmp_path, {"x": _every_byte(dtype)})


@pytest.mark.parametrize("op,attrs", [("Sigmoid", {}), ("HardSwish", {}), ("Tanh", {}), ("LeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_unary_op_is_one_lookup(op: str, attrs: Dict[str, Any], dtype: str, tmp_path: Any) -> None:
    model = _unary(op, dtype, **attrs)
    assert _lowered_ops(model, tmp_path) == [LOOKUP]
    _check(model, tmp_path, {"x": _every_byte(dtype, 1)})


def test_relu_clip_and_scalar_arithmetic_chain_is_one_lookup(tmp_path: Any) -> None:
    extra = {"lo": np.array(-1.0, np.float32), "hi": np.array(2.5, np.float32), "k": np.array([1.75], np.float32)}
    nodes = [
        _dq("x", "xf"),
        helper.make_node("Sub", ["xf", "k"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"]),
        helper.make_node("Mul", ["k", "b"], ["c"]),
        helper.make_node("Clip", ["c", "lo", "hi"], ["d"]),
        _q("d", "y"),
    ]
    model = _model(nodes, "uint8", extra=extra)
    assert _lowered_ops(model, tmp_path) == [LOOKUP]
    _check(model, tmp_path, {"x": _every_byte("uint8", 2)}, exact_share=1.0)  # arithmetic only: exact


def test_chain_of_cones_merges_into_one_lookup(tmp_path: Any) -> None:
    nodes = [
        _dq("x", "xf"),
        helper.make_node("Sigmoid", ["xf"], ["a"]),
        _q("a", "a_q", "s_mid", "z_mid"),
        _dq("a_q", "af", "s_mid", "z_mid"),
        helper.make_node("HardSwish", ["af"], ["b"]),
        _q("b", "y"),
    ]
    model = _model(nodes, "int8")
    assert _lowered_ops(model, tmp_path) == [LOOKUP]
    _check(model, tmp_path, {"x": _every_byte("int8", 3)})


@pytest.mark.parametrize(
    "op,attrs,dtype", [("QLinearSigmoid", {}, "uint8"), ("QLinearLeakyRelu", {"alpha": 0.2}, "int8")]
)
def test_qlinear_contrib_op_is_one_lookup(op: str, attrs: Dict[str, Any], dtype: str, tmp_path: Any) -> None:
    ins = ["x", "s_in", "z_in", "s_out", "z_out"]
    node = helper.make_node(op, ins, ["y"], domain="com.microsoft", **attrs)
    model = _model([node], dtype, domains=[("com.microsoft", 1)])
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", ELEM[dtype], SHAPE))  # no inference
    assert _lowered_ops(model, tmp_path) == [LOOKUP]
    _check(model, tmp_path, {"x": _every_byte(dtype, 4)})


def _no_lookup(model: Any, tmp_path: Any, feeds: Dict[str, Any]) -> None:
    assert LOOKUP not in _lowered_ops(model, tmp_path)
    _check(model, tmp_path, feeds)


def test_per_channel_dequantize_is_not_a_lookup(tmp_path: Any) -> None:
    extra = {"s_ch": np.linspace(0.01, 0.05, 8).astype(np.float32), "z_ch": np.arange(8).astype(np.uint8)}
    dq = helper.make_node("DequantizeLinear", ["x", "s_ch", "z_ch"], ["xf"], axis=1)
    tanh = helper.make_node("Tanh", ["xf"], ["a"])  # onnxruntime fuses a Sigmoid here and then refuses the model
    model = _model([dq, tanh, _q("a", "y")], "uint8", extra=extra)
    _no_lookup(model, tmp_path, {"x": _every_byte("uint8", 5)})


def test_two_sources_are_not_a_lookup(tmp_path: Any) -> None:
    nodes = [_dq("x", "xf"), _dq("x2", "x2f"), helper.make_node("Add", ["xf", "x2f"], ["a"]), _q("a", "y")]
    model = _model(nodes, "uint8", inputs=("x", "x2"))
    _no_lookup(model, tmp_path, {"x": _every_byte("uint8", 6), "x2": _every_byte("uint8", 7)})


def test_value_read_outside_the_cone_is_not_a_lookup(tmp_path: Any) -> None:
    nodes = [_dq("x", "xf"), helper.make_node("Sigmoid", ["xf"], ["a"]), _q("a", "y")]
    nodes.append(helper.make_node("Concat", ["a", "xf"], ["z"], axis=0))
    model = _model(nodes, "uint8", outputs=("y", "z"))
    _no_lookup(model, tmp_path, {"x": _every_byte("uint8", 8)})


def test_non_scalar_constant_operand_is_not_a_lookup(tmp_path: Any) -> None:
    extra = {"k": np.linspace(-1, 1, 16).astype(np.float32)}
    nodes = [_dq("x", "xf"), helper.make_node("Mul", ["xf", "k"], ["a"]), _q("a", "y")]
    model = _model(nodes, "uint8", extra=extra)
    _no_lookup(model, tmp_path, {"x": _every_byte("uint8", 9)})


def test_lookup_kernel_refuses_wider_types_by_name() -> None:
    from svod_min.error import NotSupportedError
    from svod_min.onnx.kernels.quant import lookup_kernel

    with pytest.raises(NotSupportedError, match="int16 to int8"):
        lookup_kernel("int16", "int8", 64)


@pytest.mark.parametrize("also_output", [False, True])
def test_shared_leaf_dequantize_stays_for_its_other_reader(also_output: bool, tmp_path: Any) -> None:
    """A leaf DequantizeLinear read outside the cone (by a Relu, or as a graph output) stays beside the lookup."""
    nodes = [_dq("x", "xf"), helper.make_node("Sigmoid", ["xf"], ["a"]), _q("a", "y")]
    if not also_output:
        nodes.append(helper.make_node("Relu", ["xf"], ["z"]))
    model = _model(nodes, "uint8", outputs=("y", "xf" if also_output else "z"))
    ops = _lowered_ops(model, tmp_path)
    assert ops.count(LOOKUP) == 1 and "Sigmoid" not in ops and "DequantizeLinear" in ops
    _check(model, tmp_path, {"x": _every_byte("uint8", 10)})


def test_lookup_in_a_ranged_batch_build_runs_the_bound_rows(tmp_path: Any) -> None:
    """A lookup of several calls per batch row (65,536 bytes a row) in a build for 1..5 rows: run at 5, 1, 3 and 5
    rows (a later run must not see rows an earlier one left), each within one quantum of onnxruntime."""
    model = _silu("int8", ["N", 64, 1024])
    path, bundle = os.path.join(str(tmp_path), "r.onnx"), os.path.join(str(tmp_path), "r.svod")
    onnx.save(model, path)
    build_onnx(path, bundle, targets=[host_target()], expect=False, dims={"N": DimRange(1, 5)})
    with zipfile.ZipFile(bundle) as zf:
        ops = [op for op in json.loads(zf.read("plan.json"))["ops"] if "lut8" in op.get("kernel", "")]
    assert len(ops) == 1 and "ceildiv" in str(ops[0]["global_size"][0])  # only the bound rows' calls run
    loaded = load_model(bundle)
    rng = np.random.default_rng(11)
    for n in (5, 1, 3, 5):
        x = rng.integers(-128, 128, [n, 64, 1024]).astype(np.int8)
        got, want = loaded.run({"x": x})["y"], run_ort(model, {"x": x})[0]
        assert got.shape == want.shape == (n, 64, 1024)
        assert np.abs(got.astype(np.int64) - want).max() <= 1


def test_inner_pair_read_outside_ends_the_cone_there(tmp_path: Any) -> None:
    """The 8-bit value between two cones is an output too: two lookups, the second reading it."""
    nodes = [
        _dq("x", "xf"),
        helper.make_node("Sigmoid", ["xf"], ["a"]),
        _q("a", "a_q", "s_mid", "z_mid"),
        _dq("a_q", "af", "s_mid", "z_mid"),
        helper.make_node("HardSwish", ["af"], ["b"]),
        _q("b", "y"),
    ]
    model = _model(nodes, "uint8", outputs=("y", "a_q"))
    assert _lowered_ops(model, tmp_path) == [LOOKUP, LOOKUP]
    _check(model, tmp_path, {"x": _every_byte("uint8", 12)})


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_vbmi_and_portable_lookups_agree(dtype: str, tmp_path: Any, monkeypatch: Any) -> None:
    # the AVX512-VBMI way (64 bytes at a time, bit 4 of svod_int8_isa) and the byte loop give the same bytes, on a
    # length no multiple of 64 (the tail runs the loop); each against the table the build computed
    from svod_min.jit_loader.rt_helpers import int8_isa, set_int8_isa

    if not int8_isa() & 4:
        pytest.skip("this CPU has no AVX512-VBMI")
    monkeypatch.setenv("SVOD_TARGET", "x86_64-v4")
    model = _silu(dtype, [1, 5, 61])
    rng = np.random.default_rng(11)
    info = np.iinfo(dtype)
    x = rng.integers(int(info.min), int(info.max) + 1, [1, 5, 61]).astype(dtype)
    path = os.path.join(str(tmp_path), "silu.onnx")
    onnx.save(model, path)
    bundle = os.path.join(str(tmp_path), "silu.svod")
    build_onnx(path, bundle, targets=["x86_64-v4"], expect=False)
    got = {}
    for bits in (0, 4):
        old = set_int8_isa(bits)
        try:
            got[bits] = load_model(bundle).run({"x": x})["y"]
        finally:
            set_int8_isa(old)
    np.testing.assert_array_equal(got[4], got[0])
    table = np.array([got[0].reshape(-1)[np.flatnonzero(x.reshape(-1) == v)[0]] for v in np.unique(x)])
    assert len(set(table.tolist())) > 16  # the cone's bytes vary: a lookup that ignored its input would not
