"""Data-movement ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout, Concat, Transpose, Slice, Split,
Expand, Pad, Tile, Gather, GatherElements) on every ONNX run-time dtype against onnxruntime, bit for bit: these ops
move elements, so a float's NaN payload and -0.0 come out as they went in.

The inputs are random bits (every NaN payload, infinity, subnormal and extreme integer a dtype holds shows up), bool
inputs random 0/1. All ops of one dtype sit in one model (one build per dtype; dtypes of one size share compiled
kernels). The reference runs each op alone in onnxruntime on the same dtype; where onnxruntime's CPU provider has no
kernel for it (bfloat16, some small integers), on the unsigned integer type of the same size fed the same bits: the
op moves bits, so the bits must agree either way.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
ml_dtypes = pytest.importorskip("ml_dtypes")

from onnx import TensorProto as TP  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from support.onnx_models import build_and_load, typed_model  # noqa: E402

#: dtype name -> (ONNX element type, numpy dtype, the unsigned integer type of its size).
DTYPES = {
    "float16": (TP.FLOAT16, np.dtype(np.float16), TP.UINT16),
    "bfloat16": (TP.BFLOAT16, np.dtype(ml_dtypes.bfloat16), TP.UINT16),
    "float32": (TP.FLOAT, np.dtype(np.float32), TP.UINT32),
    "float64": (TP.DOUBLE, np.dtype(np.float64), TP.UINT64),
    "int8": (TP.INT8, np.dtype(np.int8), TP.UINT8),
    "uint8": (TP.UINT8, np.dtype(np.uint8), TP.UINT8),
    "int16": (TP.INT16, np.dtype(np.int16), TP.UINT16),
    "uint16": (TP.UINT16, np.dtype(np.uint16), TP.UINT16),
    "int32": (TP.INT32, np.dtype(np.int32), TP.UINT32),
    "uint32": (TP.UINT32, np.dtype(np.uint32), TP.UINT32),
    "int64": (TP.INT64, np.dtype(np.int64), TP.UINT64),
    "uint64": (TP.UINT64, np.dtype(np.uint64), TP.UINT64),
    "bool": (TP.BOOL, np.dtype(bool), TP.UINT8),
}
#: The unsigned integer of each size: what bits are compared as.
UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
SHAPE = (2, 3, 4)
I64 = np.int64


def _fill(dtype: np.dtype, nan: bool) -> np.ndarray:
    """Pad's constant, never 0 (a default fill would show): the top bit and the lowest (-tiny for floats, a negative
    odd integer), true for bool; ``nan``: a negative NaN with a payload instead."""
    if dtype == np.bool_:
        return np.array([True])
    bits = (1 << (8 * dtype.itemsize - 1)) | 1
    if nan:
        bits = {1: 0x81, 2: 0xFE01, 4: 0xFFC00005, 8: 0xFFF8000000000007}[dtype.itemsize]
    return np.array([bits], UNSIGNED[dtype.itemsize]).view(dtype)


#: Ops whose reference runs on the bits whatever onnxruntime implements for the dtype: its float16 Pad, Tile and
#: Dropout quiet signalling NaNs (of the input, and of Pad's fill in some elements and not others), where the ops
#: only move bits.
BITS_REFERENCE = {"Pad", "Tile", "Dropout"}


def _cases(dtype: np.dtype, float_type: bool) -> List[Tuple[str, List[Any], Dict[str, np.ndarray]]]:
    """(output name, nodes reading x and b and writing it, constants): one case per op and path."""
    node = helper.make_node
    cases = [
        ("reshape", [node("Reshape", ["x", "c_shape"], ["reshape"])], {"c_shape": np.array([4, -1], I64)}),
        ("flatten", [node("Flatten", ["x"], ["flatten"], axis=2)], {}),
        (
            "squeeze",
            [node("Unsqueeze", ["x", "c_ax0"], ["u"]), node("Squeeze", ["u", "c_ax0"], ["squeeze"])],
            {"c_ax0": np.array([0], I64)},
        ),
        ("unsqueeze", [node("Unsqueeze", ["x", "c_ax2"], ["unsqueeze"])], {"c_ax2": np.array([1, 3], I64)}),
        ("identity", [node("Identity", ["x"], ["identity"])], {}),
        ("concat0", [node("Concat", ["x", "b"], ["concat0"], axis=0)], {}),
        ("concat1", [node("Concat", ["b", "x", "b"], ["concat1"], axis=1)], {}),
        ("transpose", [node("Transpose", ["x"], ["transpose"], perm=[2, 0, 1])], {}),
        ("transpose_default", [node("Transpose", ["x"], ["transpose_default"])], {}),
        (
            "slice",
            [node("Slice", ["x", "c_s", "c_e", "c_a", "c_st"], ["slice"])],
            {
                "c_s": np.array([1, -1], I64),
                "c_e": np.array([3, -5], I64),
                "c_a": np.array([1, 2], I64),
                "c_st": np.array([1, -2], I64),
            },
        ),
        (
            "slice_rows",
            [node("Slice", ["x", "c_s0", "c_e0"], ["slice_rows"])],
            {"c_s0": np.array([1], I64), "c_e0": np.array([2], I64)},
        ),
        (
            "split_a",
            [node("Split", ["x", "c_sp"], ["split_a", "split_b"], axis=2)],
            {"c_sp": np.array([1, 3], I64)},
        ),
        # split along the first axis: views of x, the parts then copied into the graph outputs
        ("split_c", [node("Split", ["x"], ["split_c", "split_d"], axis=0, num_outputs=2)], {}),
        ("expand", [node("Expand", ["x", "c_ex"], ["expand"])], {"c_ex": np.array([2, 1, 1, 1], I64)}),
        (
            "pad_constant",
            [node("Pad", ["x", "c_pads", "c_value"], ["pad_constant"])],
            {"c_pads": np.array([0, 1, 2, 1, 0, 1], I64), "c_value": _fill(dtype, False)},
        ),
        (
            "pad_nan",
            [node("Pad", ["x", "c_pads3", "c_nan"], ["pad_nan"])],
            {"c_pads3": np.array([1, 0, 0, 0, 1, 1], I64), "c_nan": _fill(dtype, True)},
        ),
        (
            "pad_crop",
            [node("Pad", ["x", "c_crop"], ["pad_crop"])],
            {"c_crop": np.array([0, -1, 1, 0, 0, -2], I64)},
        ),
        (
            "pad_reflect",
            [node("Pad", ["x", "c_pads2"], ["pad_reflect"], mode="reflect")],
            {"c_pads2": np.array([0, 1, 2, 0, 1, 1], I64)},
        ),
        ("tile", [node("Tile", ["x", "c_rep"], ["tile"])], {"c_rep": np.array([1, 2, 3], I64)}),
        (
            "gather_const",
            [node("Gather", ["x", "c_gi"], ["gather_const"], axis=1)],
            {"c_gi": np.array([2, 0, -1], I64)},
        ),
        ("gather_run", [node("Gather", ["x", "idx"], ["gather_run"], axis=2)], {}),
        (
            "gather_elements",
            [node("GatherElements", ["x", "c_ge"], ["gather_elements"], axis=2)],
            {"c_ge": np.array([[[3, 0], [1, -1], [2, 2]]] * 2, I64)},
        ),
    ]
    if float_type:  # Dropout's T is the float types
        cases.append(("dropout", [node("Dropout", ["x"], ["dropout"])], {}))
    return cases


def _random(dtype: np.dtype, shape: Tuple[int, ...], rng: Any) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    raw = rng.integers(0, 256, int(np.prod(shape)) * dtype.itemsize, dtype=np.uint8)
    out = raw.view(dtype).reshape(shape).copy()
    if dtype.kind == "f" or dtype.name == "bfloat16":  # the edge values stated, besides what random bits give
        unsigned = UNSIGNED[dtype.itemsize]
        flat = out.reshape(-1).view(unsigned)
        top = 1 << (8 * dtype.itemsize - 1)
        flat[:4] = [top, 0, ~np.array(0, unsigned), top | 1]  # -0.0, +0.0, a negative NaN of all ones, -tiny
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view(UNSIGNED[a.dtype.itemsize])


def _ort_bits(
    nodes: List[Any], consts: Dict[str, np.ndarray], elem: int, feeds: Dict[str, np.ndarray], outs: Dict[str, tuple]
) -> Dict[str, np.ndarray]:
    """The bits of ``outs`` (name -> shape) from onnxruntime running ``nodes`` on element type ``elem``; the feeds
    and the constants of x's dtype given as their bits, bound through OrtValues (numpy has no bfloat16)."""
    inits = []
    for name, value in consts.items():
        data = name in ("c_value", "c_nan")  # Pad's value: of x's dtype, given as its bits
        tensor = numpy_helper.from_array(_bits(value) if data else value, name)
        if data:
            tensor.data_type = elem
        inits.append(tensor)
    used = {n for nd in nodes for n in nd.input}
    inputs = [
        helper.make_tensor_value_info(n, elem if n != "idx" else TP.INT64, list(feeds[n].shape))
        for n in ("x", "b", "idx")
        if n in used
    ]
    graph = helper.make_graph(
        nodes, "ref", inputs, [helper.make_tensor_value_info(o, elem, list(s)) for o, s in outs.items()], inits
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    for inp in inputs:
        value = feeds[inp.name] if inp.name == "idx" else _bits(feeds[inp.name])
        kind = TP.INT64 if inp.name == "idx" else elem
        binding.bind_ortvalue_input(inp.name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(value, kind))
    results = {}
    for name, shape in outs.items():
        size = 1 if elem == TP.BOOL else helper.tensor_dtype_to_np_dtype(elem).itemsize
        results[name] = np.zeros(shape, UNSIGNED[size])
        binding.bind_ortvalue_output(name, ort.OrtValue.ortvalue_from_numpy_with_onnx_type(results[name], elem))
    session.run_with_iobinding(binding)
    return results


def _reference(
    nodes: List[Any], consts: Dict[str, np.ndarray], elem: int, same_size: int, feeds: Dict[str, np.ndarray], outs: Any
) -> Dict[str, np.ndarray]:
    """The bits the case must give: onnxruntime on the dtype; where it has no kernel for it (or quiets NaNs), on the
    unsigned type of its size; where it has none for that either, numpy on the bits (Pad; Dropout: x itself)."""
    for kind in ([] if nodes[-1].op_type in BITS_REFERENCE else [elem]) + [same_size]:
        try:
            return _ort_bits(nodes, consts, kind, feeds, outs)
        except Exception as exc:  # noqa: PERF203 - onnxruntime lacks this op for this dtype: the next reference
            if "NOT_IMPLEMENTED" not in str(exc) and "INVALID_GRAPH" not in str(exc):
                raise
    (node,) = nodes
    if node.op_type == "Dropout":  # its T is the float types: not run on the unsigned ones
        return {node.output[0]: _bits(feeds["x"])}
    assert node.op_type == "Pad", node
    pads = consts[node.input[1]].reshape(2, -1)
    x = _bits(feeds["x"])
    x = x[tuple(slice(-min(b, 0), n + min(e, 0)) for b, e, n in zip(pads[0], pads[1], x.shape))]  # crops first
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(pads[0], pads[1])]
    mode = helper.get_node_attr_value(node, "mode").decode() if node.attribute else "constant"
    if mode != "constant":
        return {node.output[0]: np.pad(x, widths, mode=mode)}
    fill = _bits(consts[node.input[2]])[0] if len(node.input) > 2 else 0
    return {node.output[0]: np.pad(x, widths, constant_values=fill)}


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_movement_ops_bitwise(name: str, tmp_path: Any) -> None:
    elem, dtype, same_size = DTYPES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    cases = _cases(dtype, dtype.kind == "f" or name == "bfloat16")
    feeds = {
        "x": _random(dtype, SHAPE, rng),
        "b": _random(dtype, SHAPE, rng),
        "idx": np.array([[3, -4], [0, -1]], I64),
    }
    nodes = [n for _, ns, _ in cases for n in ns]
    consts = {k: v for _, _, cs in cases for k, v in cs.items()}
    outputs = [o for _, ns, _ in cases for o in ns[-1].output]
    model = typed_model(nodes, [("x", SHAPE, elem), ("b", SHAPE, elem), ("idx", (2, 2), TP.INT64)], outputs, 18, consts)
    got = build_and_load(model, str(tmp_path)).run(
        {k: (_bits(v) if name == "bfloat16" and k != "idx" else v) for k, v in feeds.items()}
    )
    checked = []
    for _, case_nodes, case_consts in cases:
        outs = {o: got[o].shape for o in case_nodes[-1].output}
        want = _reference(case_nodes, case_consts, elem, same_size, feeds, outs)
        for o in outs:
            assert np.array_equal(_bits(np.asarray(got[o])).reshape(-1), want[o].reshape(-1)), (name, o)
            checked.append(o)
    assert len(checked) == len(outputs)


def test_int64_transpose_reshape_model(tmp_path: Any) -> None:
    """The issue's case: an int64 graph input through Transpose and Reshape to an int64 graph output, the extremes
    of int64 included."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Reshape", ["t", "s"], ["y"]),
    ]
    model = typed_model(nodes, [("x", (2, 3), TP.INT64)], ["y"], 17, {"s": np.array([-1], I64)})
    info = np.iinfo(np.int64)
    x = np.array([[info.min, -1, 0], [1, info.max, 7]], I64)
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    assert got.dtype == np.int64
    assert got.tolist() == x.T.reshape(-1).tolist()


def test_bfloat16_bundle_records_and_verifies_expectations(tmp_path: Any) -> None:
    """A bfloat16 model's build records onnxruntime's outputs (bound through OrtValues: numpy has no bfloat16 it
    takes) and ``run`` verifies them."""
    from support.onnx_models import host_target

    from svod_min.onnx import build_onnx

    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Concat", ["t", "t"], ["y"], axis=1),
    ]
    path = str(tmp_path / "bf16.onnx")
    onnx.save(typed_model(nodes, [("x", (2, 3), TP.BFLOAT16)], ["y"], 17, {}), path)
    notes: List[str] = []
    build_onnx(path, str(tmp_path / "bf16.svod"), targets=[host_target()], progress=notes.append)
    assert any(n.startswith("expectations recorded from onnxruntime") for n in notes), notes
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", str(tmp_path / "bf16.svod")], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "verify y: ok" in run.stdout, run.stdout


@pytest.mark.parametrize("op", ["Reshape", "Unsqueeze"])
def test_run_time_shape_input_is_refused(op: str, tmp_path: Any) -> None:
    """A shape or axes fed at run time is refused by name, though an int64 tensor is a dtype these ops take: the
    output's shape is fixed at build (the op table refuses it; without the declared output shape, shape inference
    finds none first)."""
    from svod_min.error import UnsupportedModelError

    node = helper.make_node(op, ["x", "s"], ["y"])
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info("x", TP.INT64, [2, 3]), helper.make_tensor_value_info("s", TP.INT64, [1])],
        [helper.make_tensor_value_info("y", TP.INT64, [6] if op == "Reshape" else [1, 2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with pytest.raises(UnsupportedModelError, match="must be a constant|has no static shape"):
        build_and_load(model, str(tmp_path))


def test_op_table_refuses_a_run_time_shape() -> None:
    """The op table's own rule, on IR where the output's shape is known (declared): a Reshape whose shape is a
    run-time int64 tensor is refused naming the input."""
    from svod_min.error import UnsupportedModelError
    from svod_min.onnx.build import OPS  # noqa: F401 - the op table, filled
    from svod_min.onnx.frontend.ir import Graph, Node, Value
    from svod_min.onnx.frontend.table import check_node

    values = {
        "x": Value("x", (2, 3), "int64"),
        "s": Value("s", (1,), "int64"),
        "y": Value("y", (6,), "int64"),
    }
    node = Node("Reshape", "r", 0, ["x", "s"], ["y"], {})
    with pytest.raises(UnsupportedModelError, match="the shape input must be a constant"):
        check_node(Graph(values, [node], ["x", "s"], ["y"], 17), node)
    values["s"] = Value("s", (1,), "int64", np.array([6], I64))
    check_node(Graph(values, [node], ["x"], ["y"], 17), node)


def test_empty_parts_of_other_dtypes(tmp_path: Any) -> None:
    """Empty int64 and bool tensors: Concat skips the empty part, a Transpose of nothing gives nothing, as
    onnxruntime does."""
    node = helper.make_node
    nodes = [
        node("Concat", ["e64", "b64"], ["cat64"], axis=1),
        node("Transpose", ["e64"], ["t64"]),
        node("Concat", ["b1", "e1"], ["cat1"], axis=1),
        node("Slice", ["b1", "c_s", "c_e"], ["s1"]),
    ]
    inputs = [("e64", (2, 0), TP.INT64), ("b64", (2, 3), TP.INT64), ("e1", (2, 0), TP.BOOL), ("b1", (2, 3), TP.BOOL)]
    consts = {"c_s": np.array([1], I64), "c_e": np.array([1], I64)}
    model = typed_model(nodes, inputs, ["cat64", "t64", "cat1", "s1"], 17, consts)
    feeds = {
        "e64": np.zeros((2, 0), I64),
        "b64": np.array([[np.iinfo(I64).min, -1, 0], [1, 2, np.iinfo(I64).max]], I64),
        "e1": np.zeros((2, 0), bool),
        "b1": np.array([[True, False, True], [False, False, True]]),
    }
    got = build_and_load(model, str(tmp_path)).run(feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for name, want in zip(["cat64", "t64", "cat1", "s1"], session.run(None, feeds)):
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        assert got[name].tolist() == want.tolist(), name
