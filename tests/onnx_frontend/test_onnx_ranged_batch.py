"""Ranged-batch builds (``--dim N=1..5`` / ``--shape x=1..4,...``) through the op families: one bundle, run at
batch 1, the largest, an odd size between and the largest again after smaller runs (rows a smaller run left behind
must not leak), against onnxruntime on exactly those rows; the ops that mix batch rows refused by name with nothing
written; the CLI's ``--shape x=LO..HI,...``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper  # noqa: E402
from support.onnx_models import host_target, max_rel_error, run_ort, typed_model  # noqa: E402

from svod_min.error import UnsupportedModelError  # noqa: E402
from svod_min.onnx.build import build_onnx  # noqa: E402
from svod_min.onnx.frontend.ranged import DimRange  # noqa: E402
from svod_min.planfile.load import load_model  # noqa: E402

LO, HI = 1, 5
#: the largest first, then smaller sizes (1 and an odd one between), then the largest again: a later run must not
#: see rows an earlier one left in the buffers
SIZES = (HI, 1, 3, HI)
VAR = "N"

Input = Tuple[str, Sequence[Any], int]  # name, shape (the symbolic "N" first where batched), element type


def _w(seed: int, *shape: int, scale: float = 0.3) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _model(
    nodes: List[Any],
    inputs: Sequence[Input],
    outputs: Sequence[str],
    consts: Optional[Mapping[str, np.ndarray]] = None,
    opset: int = 17,
) -> onnx.ModelProto:
    """A model of ``nodes``: inputs by (name, shape, type), constants as initializers, output shapes inferred."""
    return typed_model(nodes, inputs, outputs, opset, {n: np.asarray(v) for n, v in (consts or {}).items()})


def _f(name: str, *tail: int) -> Input:
    """A float input of shape [N, *tail]."""
    return (name, [VAR, *tail], TensorProto.FLOAT)


def _plan_doc(bundle: str) -> Dict[str, Any]:
    with zipfile.ZipFile(bundle) as zf:
        return json.loads(zf.read("plan.json"))


def _build(model: onnx.ModelProto, directory: str, name: str, **kwargs: Any) -> Tuple[Any, Dict[str, Any]]:
    """The model built ranged (default ``dims={"N": DimRange(LO, HI)}``) for this host, loaded, and its plan."""
    path, bundle = os.path.join(directory, name + ".onnx"), os.path.join(directory, name + ".svod")
    onnx.save(model, path)
    if "dims" not in kwargs and "shapes" not in kwargs:
        kwargs["dims"] = {VAR: DimRange(LO, HI)}
    build_onnx(path, bundle, targets=[host_target()], expect=False, **kwargs)
    return load_model(bundle), _plan_doc(bundle)


def _feeds(model: onnx.ModelProto, n: int, seed: int) -> Dict[str, np.ndarray]:
    """Random inputs of ``n`` rows (int64 inputs: indices below 3; 8-bit ones: their whole range)."""
    rng = np.random.default_rng(seed)
    out = {}
    for value in model.graph.input:
        tensor = value.type.tensor_type
        shape = [n if d.dim_param else d.dim_value for d in tensor.shape.dim]
        if tensor.elem_type == TensorProto.INT64:
            out[value.name] = rng.integers(0, 3, shape).astype(np.int64)
        elif tensor.elem_type in (TensorProto.UINT8, TensorProto.INT8):
            dtype = np.uint8 if tensor.elem_type == TensorProto.UINT8 else np.int8
            out[value.name] = rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)
        else:
            out[value.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _run_rows(loaded: Any, feeds: Mapping[str, np.ndarray], want: Mapping[str, Tuple[int, ...]]) -> Dict[str, Any]:
    """svod_min's outputs for ``feeds`` of some rows, the variable bound from the arrays' leading dim
    (planfile/binding.py): each output of ``want``'s shape (its bound rows, not the buffer's largest batch)."""
    out = loaded.run(dict(feeds))
    for name, shape in want.items():
        assert tuple(out[name].shape) == tuple(shape), (name, out[name].shape, shape)
    return out


def _first_dim(doc: Dict[str, Any], name: str) -> Any:
    return doc["buffers"][name]["dims"][0]


def _check(
    model: onnx.ModelProto,
    loaded: Any,
    doc: Dict[str, Any],
    var: str = VAR,
    sizes: Sequence[int] = SIZES,
    rtol: float = 1e-4,
    reference: Optional[Callable[[Dict[str, np.ndarray]], List[np.ndarray]]] = None,
    unbatched: Sequence[str] = (),
) -> None:
    """The plan ranges ``var`` over LO..HI and every input and output's first dim follows it; each run of ``sizes``
    matches onnxruntime on the same rows (``reference``: how onnxruntime computes the model's outputs, by default
    by running it)."""
    assert doc["vars"][var] == {"min": LO, "max": HI, "default": HI}
    for value in list(model.graph.input) + list(model.graph.output):
        if value.name in unbatched:
            assert "dims" not in doc["buffers"][value.name], value.name
            continue
        first = _first_dim(doc, value.name)
        assert first == var or re.match(r"^%s \* \d+$" % var, str(first)), (value.name, first)
    names = [v.name for v in model.graph.output]
    before: List[Tuple[Dict[str, Any], Dict[str, np.ndarray]]] = []
    for i, n in enumerate(sizes):
        feeds = _feeds(model, n, seed=100 + i)
        want = run_ort(model, feeds) if reference is None else reference(feeds)
        got = _run_rows(loaded, feeds, {name: w.shape for name, w in zip(names, want)})
        for name, w in zip(names, want):
            err = max_rel_error(got[name], w)
            assert err < rtol, "%s at batch %d: max relative error %g" % (name, n, err)
        for returned, copies in before:  # an earlier call's arrays are its own: a later run does not write them
            for name in names:
                np.testing.assert_array_equal(returned[name], copies[name])
        before.append((got, {name: np.array(got[name], copy=True) for name in names}))


# -- the op families ----------------------------------------------------------------------------------------------


def _elementwise() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Tanh", ["x"], ["t"]),
        helper.make_node("Mul", ["t", "scale"], ["m"]),  # a constant broadcast along the last axis
        helper.make_node("Add", ["m", "shift"], ["a"]),  # ... and along the middle one
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Greater", ["x", "zero"], ["pos"]),
        helper.make_node("Where", ["pos", "a", "s"], ["y"]),
        helper.make_node("Sub", ["x", "t"], ["z"]),
        helper.make_node("PRelu", ["x", "slope"], ["pr"]),
        helper.make_node("Cast", ["ids"], ["idf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "idf"], ["xi"]),  # an int64 input beside a float one
        helper.make_node("Equal", ["ids", "one"], ["is1"]),
        helper.make_node("Where", ["is1", "xi", "pr"], ["w"]),
        helper.make_node("Identity", ["x"], ["same"]),  # an input passed through to an output
    ]
    consts = {
        "scale": _w(1, 6) + 1,
        "shift": _w(2, 4, 1),
        "zero": np.array(0.0, np.float32),
        "slope": _w(48, 4, 1),
        "one": np.array(1, np.int64),
    }
    inputs = [_f("x", 4, 6), ("ids", [VAR, 4, 6], TensorProto.INT64)]
    return _model(nodes, inputs, ["y", "z", "w", "same"], consts)


def _conv() -> onnx.ModelProto:
    """Channels >= 16 and 24x24 images: the blocked layout, the convolutions and pools split into several calls."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "wd", "bd"], ["c2"], pads=[1, 1, 1, 1], group=16, strides=[2, 2]),
        helper.make_node("Conv", ["c2", "wg", "bg"], ["y"], pads=[1, 1, 1, 1], group=4),
        helper.make_node("MaxPool", ["r1"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("AveragePool", ["y"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["y"], ["gap"]),
    ]
    consts = {
        "w1": _w(3, 16, 16, 3, 3, scale=0.1),
        "b1": _w(4, 16),
        "wd": _w(5, 16, 1, 3, 3),
        "bd": _w(6, 16),
        "wg": _w(7, 32, 4, 3, 3, scale=0.2),
        "bg": _w(8, 32),
    }
    return _model(nodes, [_f("x", 16, 24, 24)], ["y", "mp", "ap", "gap"], consts)


def _pools() -> onnx.ModelProto:
    nodes = [
        helper.make_node("MaxPool", ["x"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]),
        helper.make_node("AveragePool", ["x"], ["ap"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["x"], ["gap"]),
    ]
    return _model(nodes, [_f("x", 4, 9, 9)], ["mp", "ap", "gap"])


def _batch_norm() -> onnx.ModelProto:
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-4)
    consts = {"s": _w(9, 3) + 1, "b": _w(10, 3), "m": _w(11, 3), "v": np.abs(_w(12, 3)) + 0.5}
    return _model([node], [_f("x", 3, 5, 5)], ["y"], consts)


def _gemm_matmul() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gemm", ["a", "gb", "gc"], ["gemm"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("MatMul", ["a", "w2"], ["mm2"]),  # [N,K] x [K,M]
        helper.make_node("MatMul", ["t", "w3"], ["mm3"]),  # [N,T,K] x [K,M]
        helper.make_node("MatMul", ["t", "u"], ["bmm"]),  # [N,T,K] x [N,K,M]: batched on both sides
        helper.make_node("MatMul", ["left", "u"], ["lmm"]),  # [T,K] x [N,K,M]: the batch on the right
    ]
    consts = {"gb": _w(13, 6, 8), "gc": _w(14, 6), "w2": _w(15, 8, 5), "w3": _w(16, 8, 7), "left": _w(49, 4, 8)}
    outs = ["gemm", "mm2", "mm3", "bmm", "lmm"]
    return _model(nodes, [_f("a", 8), _f("t", 4, 8), _f("u", 8, 3)], outs, consts)


def _softmax_norm() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Softmax", ["x"], ["sm"], axis=-1),
        helper.make_node("LogSoftmax", ["x"], ["lsm"], axis=-1),
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], axis=-1, epsilon=1e-5),
    ]
    return _model(nodes, [_f("x", 3, 10)], ["sm", "lsm", "ln"], {"g": _w(17, 10) + 1, "b": _w(18, 10)})


def _reduce() -> onnx.ModelProto:
    nodes = [
        helper.make_node("ReduceSum", ["x", "axes"], ["keep"], keepdims=1),
        helper.make_node("ReduceMean", ["x", "axes"], ["drop"], keepdims=0),
        helper.make_node("ReduceMax", ["x", "axes"], ["mx"], keepdims=0),
        helper.make_node("ReduceL2", ["x", "axes2"], ["l2"], keepdims=1),
        helper.make_node("ArgMax", ["x"], ["am"], axis=1, keepdims=0),
    ]
    consts = {"axes": np.array([1], np.int64), "axes2": np.array([1, 2], np.int64)}
    return _model(nodes, [_f("x", 4, 5)], ["keep", "drop", "mx", "l2", "am"], consts, opset=18)


def _movement() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Reshape", ["x", "shape"], ["rs"]),  # [N,2,3,4] -> [N,6,4]
        helper.make_node("Flatten", ["x"], ["fl"], axis=1),
        helper.make_node("Transpose", ["x"], ["tp"], perm=[0, 3, 1, 2]),
        helper.make_node("Concat", ["x", "x2"], ["cc"], axis=1),
        helper.make_node("Split", ["cc", "split"], ["s1", "s2"], axis=1),
        helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["sl"]),
        helper.make_node("Resize", ["x", "", "scales"], ["rz"], mode="nearest"),
        helper.make_node("Add", ["s2", "sl"], ["mix"]),
        helper.make_node("Unsqueeze", ["x", "ax2"], ["us"]),
        helper.make_node("Squeeze", ["us", "ax2"], ["sq"]),
        helper.make_node("Slice", ["sq", "starts0", "ends0", "axes0"], ["keep"]),  # axis 0 0..end: every row
    ]
    consts = {
        "shape": np.array([0, 6, 4], np.int64),
        "split": np.array([1, 2], np.int64),
        "starts": np.array([1], np.int64),
        "ends": np.array([3], np.int64),
        "axes": np.array([1], np.int64),
        "steps": np.array([1], np.int64),
        "scales": np.array([1, 1, 2, 2], np.float32),
        "ax2": np.array([2], np.int64),
        "starts0": np.array([0, 1], np.int64),
        "ends0": np.array([np.iinfo(np.int64).max, 2], np.int64),
        "axes0": np.array([0, 2], np.int64),
    }
    outs = ["rs", "fl", "tp", "s1", "mix", "rz", "keep"]
    return _model(nodes, [_f("x", 2, 3, 4), _f("x2", 1, 3, 4)], outs, consts, opset=13)


def _pad_gather() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Pad", ["x", "pads"], ["pc"], mode="constant"),
        helper.make_node("Pad", ["x", "pads"], ["pr"], mode="reflect"),
        helper.make_node("Gather", ["x", "idx"], ["g"], axis=1),
    ]
    consts = {"pads": np.array([0, 0, 1, 2, 0, 1, 2, 1], np.int64), "idx": np.array([[0, 5], [2, 2]], np.int64)}
    return _model(nodes, [_f("x", 6, 4, 5)], ["pc", "pr", "g"], consts)


def _lstm(layout: int = 1) -> onnx.ModelProto:
    hidden, size, steps = 5, 4, 3
    node = helper.make_node(
        "LSTM", ["x", "W", "R", "B"], ["y", "y_h", "y_c"], hidden_size=hidden, layout=layout, direction="forward"
    )
    consts = {"W": _w(19, 1, 4 * hidden, size), "R": _w(20, 1, 4 * hidden, hidden), "B": _w(21, 1, 8 * hidden)}
    shape = [VAR, steps, size] if layout else [steps, VAR, size]
    return _model([node], [("x", shape, TensorProto.FLOAT)], ["y", "y_h", "y_c"], consts, opset=14)


def _shape_reshape() -> onnx.ModelProto:
    """Reshape(x, Concat(Gather(Shape(x), [0]), [-1])): the shape computed from the batch only gives a shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    consts = {"zero": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    return _model(nodes, [_f("x", 3, 4)], ["y"], consts)


def _large_elementwise() -> onnx.ModelProto:
    """A swish chain over 16 K elements a row: generated elementwise kernels of several calls."""
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["x", "s"], ["sw"]),
        helper.make_node("Mul", ["sw", "scale"], ["m"]),
        helper.make_node("Add", ["m", "shift"], ["y"]),
        helper.make_node("Clip", ["x", "lo", "hi"], ["c"]),
        helper.make_node("Max", ["c", "y"], ["z"]),
    ]
    consts = {
        "scale": _w(29, 16, 1, 1) + 1,
        "shift": _w(30, 32),
        "lo": np.array(-0.5, np.float32),
        "hi": np.array(0.5, np.float32),
    }
    return _model(nodes, [_f("x", 16, 32, 32)], ["y", "z"], consts)


def _large_gemm() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["m"]),
        helper.make_node("Add", ["m", "b2"], ["y"]),
    ]
    consts = {"w1": _w(31, 96, 64, scale=0.1), "b1": _w(32, 96), "w2": _w(33, 96, 40, scale=0.1), "b2": _w(34, 40)}
    return _model(nodes, [_f("x", 64)], ["y"], consts)


def _norms() -> onnx.ModelProto:
    """Softmax over a middle axis, InstanceNormalization, LRN, LayerNormalization over two axes, BatchNormalization
    of 16 channels."""
    nodes = [
        helper.make_node("Softmax", ["x"], ["sm1"], axis=1),
        helper.make_node("InstanceNormalization", ["x", "is", "ib"], ["inorm"], epsilon=1e-5),
        helper.make_node("LRN", ["x"], ["lrn"], size=3, alpha=0.01, beta=0.6, bias=1.5),
        helper.make_node("LayerNormalization", ["x", "lg", "lb"], ["ln2"], axis=2, epsilon=1e-5),
        helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["bn"], epsilon=1e-4),
    ]
    consts = {
        "is": _w(35, 16) + 1,
        "ib": _w(36, 16),
        "lg": _w(37, 12, 12) + 1,
        "lb": _w(38, 12, 12),
        "s": _w(39, 16) + 1,
        "b": _w(40, 16),
        "m": _w(41, 16),
        "v": np.abs(_w(42, 16)) + 0.5,
    }
    return _model(nodes, [_f("x", 16, 12, 12)], ["sm1", "inorm", "lrn", "ln2", "bn"], consts)


def _resize_linear() -> onnx.ModelProto:
    """Resize by scales (linear) and by sizes computed from Shape(x) (nearest)."""
    nodes = [
        helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="linear"),
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "rest"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["down"], mode="nearest"),
    ]
    consts = {
        "scales": np.array([1, 1, 2, 1.5], np.float32),
        "zero": np.array([0], np.int64),
        "rest": np.array([3, 3, 4], np.int64),
    }
    return _model(nodes, [_f("x", 3, 6, 8)], ["up", "down"], consts, opset=13)


def _heads_folded() -> onnx.ModelProto:
    """[N, 6, 4] -> [N x 6, 4] (6 rows per batch row: attention heads folded into the batch) -> MatMul, Softmax,
    Relu -> [N, 6, 5] again; the folded value is an output too (its dims N * 6)."""
    nodes = [
        helper.make_node("Reshape", ["x", "fold"], ["f"]),
        helper.make_node("MatMul", ["f", "w"], ["m"]),
        helper.make_node("Softmax", ["m"], ["p"], axis=-1),
        helper.make_node("Relu", ["f"], ["folded"]),
        helper.make_node("Reshape", ["p", "unfold"], ["y"]),
    ]
    consts = {"fold": np.array([-1, 4], np.int64), "unfold": np.array([-1, 6, 5], np.int64), "w": _w(43, 4, 5)}
    return _model(nodes, [_f("x", 6, 4)], ["y", "folded"], consts)


def _attention() -> onnx.ModelProto:
    """Two heads over T = 5 (the largest batch) tokens: Transpose to [N, H, T, D], the heads folded into the batch,
    a batched x batched MatMul, Softmax, back to [N, T, H x D]."""
    t, h, d = 5, 2, 4
    nodes = []
    consts: Dict[str, np.ndarray] = {
        "heads": np.array([0, t, h, d], np.int64),
        "fold": np.array([-1, t, d], np.int64),
        "unfold": np.array([-1, h, t, d], np.int64),
        "merge": np.array([0, t, h * d], np.int64),
    }
    for i, part in enumerate("qkv"):
        consts["w" + part] = _w(44 + i, h * d, h * d)
        nodes += [
            helper.make_node("MatMul", ["x", "w" + part], [part + "0"]),
            helper.make_node("Reshape", [part + "0", "heads"], [part + "1"]),
            helper.make_node("Transpose", [part + "1"], [part + "2"], perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [part + "2", "fold"], [part]),
        ]
    nodes += [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Softmax", ["scores"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["ctx"]),
        helper.make_node("Reshape", ["ctx", "unfold"], ["c1"]),
        helper.make_node("Transpose", ["c1"], ["c2"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["c2", "merge"], ["y"]),
    ]
    return _model(nodes, [_f("x", t, h * d)], ["y"], consts)


def _expand_target(nodes: List[Any]) -> List[Any]:
    """``target`` = [N, 4] computed from Shape(x)."""
    return [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "four"], ["target"], axis=0),
        *nodes,
    ]


def _expand_from_shape() -> onnx.ModelProto:
    """Expand of a batched [N, 1] column to a shape computed from Shape(x)."""
    nodes = _expand_target(
        [
            helper.make_node("ReduceMax", ["x", "one"], ["col"], keepdims=1),
            helper.make_node("Expand", ["col", "target"], ["e"]),
            helper.make_node("Sub", ["x", "e"], ["y"]),
        ]
    )
    consts = {"zero": np.array([0], np.int64), "four": np.array([4], np.int64), "one": np.array([1], np.int64)}
    return _model(nodes, [_f("x", 4)], ["y"], consts, opset=18)


def _expand_const_from_shape() -> onnx.ModelProto:
    """Expand of a constant row to [N, 4] computed from Shape(x) (a position table broadcast over the batch):
    docs/onnx.md lets a constant computed from the batch give Expand its shape."""
    nodes = _expand_target(
        [helper.make_node("Expand", ["row", "target"], ["e"]), helper.make_node("Add", ["x", "e"], ["y"])]
    )
    consts = {"zero": np.array([0], np.int64), "four": np.array([4], np.int64), "row": _w(47, 1, 4)}
    return _model(nodes, [_f("x", 4)], ["y"], consts)


def _conv_misc() -> onnx.ModelProto:
    """ConvTranspose, a 1-D convolution, DepthToSpace and SpaceToDepth, a plain (unblocked) small convolution."""
    nodes = [
        helper.make_node("ConvTranspose", ["x", "wt", "bt"], ["ct"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["s", "w1"], ["c1"], pads=[1, 1], strides=[2]),
        helper.make_node("DepthToSpace", ["x"], ["d2s"], blocksize=2),
        helper.make_node("SpaceToDepth", ["x"], ["s2d"], blocksize=2),
        helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[0, 1, 2, 1], dilations=[2, 1]),
    ]
    consts = {"wt": _w(50, 4, 3, 3, 3), "bt": _w(51, 3), "w1": _w(52, 5, 3, 3), "w2": _w(53, 2, 4, 3, 3)}
    return _model(nodes, [_f("x", 4, 6, 6), _f("s", 3, 10)], ["ct", "c1", "d2s", "s2d", "c2"], consts)


def _i8(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-128, 128, shape).astype(np.int8)


def _quant() -> onnx.ModelProto:
    """The int8 GEMM (QLinearMatMul, MatMulInteger; 40 rows a batch row: several calls), batched x batched
    MatMulInteger (B packed at run time), QLinearConv, ConvInteger, QuantizeLinear and DequantizeLinear."""

    def u8(v: int) -> np.ndarray:
        return np.array(v, np.uint8)

    def f(v: float) -> np.ndarray:
        return np.array(v, np.float32)

    nodes = [
        helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["q"]),
        helper.make_node("MatMulInteger", ["a", "b", "az"], ["mi"]),
        helper.make_node("MatMulInteger", ["p", "pb"], ["pi"]),
        helper.make_node(
            "QLinearConv", ["cx", "cs", "cz", "cw", "cws", "cwz", "cys", "cyz"], ["qc"], pads=[1, 1, 1, 1]
        ),
        helper.make_node("ConvInteger", ["cx", "cw", "cz"], ["ci"], pads=[1, 0, 1, 0]),
        helper.make_node("QuantizeLinear", ["xf", "qs", "qz"], ["qq"]),
        helper.make_node("DequantizeLinear", ["qq", "qs", "qz"], ["dq"]),
    ]
    consts = {
        "as": f(0.02),
        "az": u8(128),
        "b": _i8(57, 130, 70),
        "bs": f(0.01),
        "bz": np.array(0, np.int8),
        "ys": f(2.0),
        "yz": u8(100),
        "cs": f(0.03),
        "cz": u8(120),
        "cw": _i8(58, 8, 4, 3, 3),
        "cws": f(0.02),
        "cwz": np.array(0, np.int8),
        "cys": f(0.4),
        "cyz": u8(90),
        "qs": f(0.05),
        "qz": u8(10),
    }
    inputs = [
        ("a", [VAR, 40, 130], TensorProto.UINT8),
        ("p", [VAR, 6, 8], TensorProto.UINT8),
        ("pb", [VAR, 8, 64], TensorProto.INT8),
        ("cx", [VAR, 4, 11, 13], TensorProto.UINT8),
        _f("xf", 4, 5),
    ]
    return _model(nodes, inputs, ["q", "mi", "pi", "qc", "ci", "dq"], consts, opset=13)


def _misc_rowwise() -> onnx.ModelProto:
    """GridSample (a batched grid), Mod, LpPool, GlobalMaxPool, Tile and Expand off axis 0, Hardmax and
    LpNormalization over another axis."""
    nodes = [
        helper.make_node("GridSample", ["x", "grid"], ["gs"], align_corners=0),
        helper.make_node("Mod", ["x", "md"], ["mo"], fmod=1),
        helper.make_node("LpPool", ["x"], ["lp"], kernel_shape=[2, 2], p=2),
        helper.make_node("GlobalMaxPool", ["x"], ["gm"]),
        helper.make_node("Tile", ["x", "reps"], ["ti"]),
        helper.make_node("Expand", ["col", "eshape"], ["ex"]),
        helper.make_node("Hardmax", ["x"], ["hm"], axis=-1),
        helper.make_node("LpNormalization", ["x"], ["ln"], axis=1),
    ]
    consts = {
        "md": np.array(0.7, np.float32),
        "reps": np.array([1, 2, 1, 3], np.int64),
        "eshape": np.array([1, 3, 1, 4], np.int64),
    }
    inputs = [_f("x", 3, 6, 8), _f("grid", 4, 5, 2), _f("col", 1, 2, 1)]
    return _model(nodes, inputs, ["gs", "mo", "lp", "gm", "ti", "ex", "hm", "ln"], consts, opset=16)


FAMILIES: Dict[str, Callable[[], onnx.ModelProto]] = {
    "elementwise": _elementwise,
    "pools": _pools,
    "batch_norm": _batch_norm,
    "gemm_matmul": _gemm_matmul,
    "softmax_layernorm": _softmax_norm,
    "reduce_axis1": _reduce,
    "movement": _movement,
    "pad_gather": _pad_gather,
    "shape_reshape": _shape_reshape,
    "large_elementwise": _large_elementwise,
    "large_gemm": _large_gemm,
    "norms": _norms,
    "resize_linear": _resize_linear,
    "heads_folded": _heads_folded,
    "attention": _attention,
    "expand_from_shape": _expand_from_shape,
    "conv_misc": _conv_misc,
    "quant": _quant,
    "misc_rowwise": _misc_rowwise,
}


#: first dims the plan must give some outputs (a value with k rows per batch row: "N * k")
FIRST_DIMS = {"heads_folded": {"folded": "N * 6", "y": "N"}, "attention": {"y": "N"}}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_runs_every_batch_like_onnxruntime(family, tmp_path):
    model = FAMILIES[family]()
    loaded, doc = _build(model, str(tmp_path), family)
    for name, first in FIRST_DIMS.get(family, {}).items():
        assert _first_dim(doc, name) == first, (name, doc["buffers"][name]["dims"])
    _check(model, loaded, doc)


def test_expand_of_a_constant_to_a_shape_from_shape_builds_ranged(tmp_path):
    """Expand(constant row, [N, 4] from Shape(x)) + x keeps rows apart (a fixed build runs it) and docs/onnx.md lets a
    constant computed from the batch give Expand its shape; the parser folds the Expand of a constant into a
    batch-sized constant, which the Add then reads as data (the same for Tile and ConstantOfShape)."""
    model = _expand_const_from_shape()
    loaded, doc = _build(model, str(tmp_path), "expand_const")
    _check(model, loaded, doc)


@pytest.mark.parametrize("op", ["TopK", "CumSum"])
def test_topk_and_cumsum_on_another_axis_build_ranged(op, tmp_path):
    if op == "TopK":
        node = helper.make_node("TopK", ["x", "k"], ["y", "i"], axis=-1)
        model = _model([node], [_f("x", 3, 6)], ["y", "i"], {"k": np.array([2], np.int64)})
    else:
        node = helper.make_node("CumSum", ["x", "axis"], ["y"])
        model = _model([node], [_f("x", 3, 6)], ["y"], {"axis": np.array(1, np.int64)})
    loaded, doc = _build(model, str(tmp_path), op)
    _check(model, loaded, doc)


def test_unbatched_input_and_output_beside_batched_ones(tmp_path):
    """An input of fixed shape [1, 4] broadcast over the batch, and an output computed from it alone: no dims, fed and
    returned whole at every binding."""
    nodes = [helper.make_node("Add", ["x", "z"], ["y"]), helper.make_node("Mul", ["z", "z"], ["zz"])]
    model = _model(nodes, [_f("x", 4), ("z", [1, 4], TensorProto.FLOAT)], ["y", "zz"])
    loaded, doc = _build(model, str(tmp_path), "unbatched")
    _check(model, loaded, doc, unbatched=("z", "zz"))


def test_pins_and_a_range_are_refused(tmp_path):
    model = _model([helper.make_node("Add", ["x", "z"], ["y"])], [_f("x", 4), ("z", [1, 4], TensorProto.FLOAT)], ["y"])
    _refused(model, str(tmp_path), r"--pin and a ranged dim", pins={"z": np.zeros((1, 4), np.float32)})


def test_lstm_layout_1_runs_every_batch(tmp_path):
    """onnxruntime refuses layout=1: the reference is the layout-0 model on the transposed rows."""
    model, model0 = _lstm(layout=1), _lstm(layout=0)
    loaded, doc = _build(model, str(tmp_path), "lstm")

    def reference(feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
        y, y_h, y_c = run_ort(model0, {"x": feeds["x"].transpose(1, 0, 2).copy()})
        return [y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)]

    _check(model, loaded, doc, reference=reference)


def test_range_from_two_refuses_one_row(tmp_path):
    """DimRange(2, 5): runs at 2, 5 and 3; one row is outside the range and refused before anything runs."""
    from svod_min.error import VariableBoundsError

    model = _pools()
    loaded, doc = _build(model, str(tmp_path), "two", dims={VAR: DimRange(2, HI)})
    assert doc["vars"][VAR] == {"min": 2, "max": HI, "default": HI}
    for i, n in enumerate((2, HI, 3)):
        feeds = _feeds(model, n, seed=i)
        want = run_ort(model, feeds)
        got = _run_rows(loaded, feeds, {o.name: w.shape for o, w in zip(model.graph.output, want)})
        for o, w in zip(model.graph.output, want):
            assert max_rel_error(got[o.name], w) < 1e-4, (o.name, n)
    with pytest.raises(VariableBoundsError, match=r"N=1, outside its range \[2, 5\]"):
        loaded.run(_feeds(model, 1, seed=9))


def _names(expr: Any) -> List[str]:
    return re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expr) if isinstance(expr, str) else []


def test_conv_blocked_multi_call_follows_the_batch(tmp_path):
    model = _conv()
    loaded, doc = _build(model, str(tmp_path), "conv")
    # the blocked convolutions' launches follow the batch: a global_size expression of a name bound to N
    ranged_launches = [
        op
        for op in doc["ops"]
        if any(
            VAR == name or op.get("vars", {}).get(name) == VAR for e in op.get("global_size", []) for name in _names(e)
        )
    ]
    assert ranged_launches, [op.get("global_size") for op in doc["ops"]]
    assert any("blocked" in op["kernel"] or "bconv" in op["kernel"] for op in doc["ops"])
    _check(model, loaded, doc, rtol=1e-3)  # three convolutions deep: float32 sums in another order


def test_shape_option_names_the_batch_variable(tmp_path):
    """``shapes={"x": [DimRange, ...]}`` (``--shape x=1..5,...``): the plan's variable is "batch"."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    model = _model([node], [("x", ["n", 3, 8, 8], TensorProto.FLOAT)], ["y"], {"w": _w(22, 4, 3, 3, 3)})
    loaded, doc = _build(model, str(tmp_path), "shape", shapes={"x": [DimRange(LO, HI), 3, 8, 8]})
    _check(model, loaded, doc, var="batch")


@pytest.mark.parametrize("name", ["batch_size", "unk__42", "None", "core_id", "if"])
def test_any_symbolic_dim_name_gives_a_bundle_that_loads(name, tmp_path):
    """``--dim NAME=1..5`` for the model's own dim name. A name the plan cannot take as a variable (a Python keyword
    or constant, or ``core_id``, which the plan format reserves) must not give a bundle that the loader refuses: the
    variable gets another name (docs/onnx.md: "the --dim name when it is an identifier, else batch"), or the build
    refuses the name with nothing written."""
    nodes = [helper.make_node("Mul", ["x", "c"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    model = _model(nodes, [("x", [name, 4, 6], TensorProto.FLOAT)], ["y"], {"c": _w(56, 6)})
    path, bundle = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    try:
        build_onnx(path, bundle, targets=[host_target()], expect=False, dims={name: DimRange(LO, HI)})
    except UnsupportedModelError as exc:
        assert name in ("None", "core_id", "if") and name in str(exc), exc
        assert not os.path.exists(bundle)
        return
    doc = _plan_doc(bundle)
    assert len(doc["vars"]) == 1, doc["vars"]
    _check(model, load_model(bundle), doc, var=next(iter(doc["vars"])))


# -- refusals -------------------------------------------------------------------------------------------------------


def _refused(model: onnx.ModelProto, directory: str, match: str, **kwargs: Any) -> None:
    path, bundle = os.path.join(directory, "r.onnx"), os.path.join(directory, "r.svod")
    onnx.save(model, path)
    if "dims" not in kwargs and "shapes" not in kwargs:
        kwargs["dims"] = {VAR: DimRange(LO, HI)}
    with pytest.raises(UnsupportedModelError, match=match):
        build_onnx(path, bundle, targets=[host_target()], expect=False, **kwargs)
    assert not os.path.exists(bundle)


def _one(op: str, *, opset: int = 17, consts: Optional[Mapping[str, np.ndarray]] = None, **attrs: Any) -> Any:
    names = ["x"] + list(consts or {})
    return _model([helper.make_node(op, names, ["y"], **attrs)], [_f("x", 4, 6)], ["y"], consts, opset)


def _shape_as_data() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Shape", ["x"], ["sh"]),
        helper.make_node("Gather", ["sh", "zero"], ["n"], axis=0),
        helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
        helper.make_node("Div", ["x", "nf"], ["y"]),
    ]
    return _model(nodes, [_f("x", 4)], ["y"], {"zero": np.array([0], np.int64)})


def _embedding() -> onnx.ModelProto:
    node = helper.make_node("Gather", ["table", "ids"], ["y"], axis=0)
    return _model([node], [("ids", [VAR, 3], TensorProto.INT64)], ["y"], {"table": _w(23, 10, 4)})


def _bn_training() -> onnx.ModelProto:
    node = helper.make_node(
        "BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1, epsilon=1e-4
    )
    consts = {"s": _w(24, 3) + 1, "b": _w(25, 3), "m": _w(26, 3), "v": np.abs(_w(27, 3)) + 0.5}
    return _model([node], [_f("x", 3, 4, 4)], ["y", "rm", "rv"], consts, opset=15)


def _lstm_sequence() -> onnx.ModelProto:
    """A layout-0 LSTM whose ranged first dim is its sequence: Y alone follows it, the rule on layout refuses."""
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=3)
    consts = {"W": _w(54, 1, 12, 4), "R": _w(55, 1, 12, 3)}
    return _model([node], [("x", [VAR, 2, 4], TensorProto.FLOAT)], ["y"], consts, opset=14)


REFUSALS: Dict[str, Tuple[Callable[[], onnx.ModelProto], str]] = {
    "softmax_axis0": (lambda: _one("Softmax", axis=0), r"ranged batch: .*Softmax.*axis 0"),
    "reduce_sum_axis0": (
        lambda: _one("ReduceSum", consts={"axes": np.array([0], np.int64)}, keepdims=0),
        r"ranged batch: .*ReduceSum.*(axis 0|does not follow the batch)",
    ),
    "reduce_sum_all": (
        lambda: _one("ReduceSum", keepdims=0),
        r"ranged batch: .*ReduceSum.*(every axis|does not follow the batch)",
    ),
    "concat_axis0": (
        lambda: _model([helper.make_node("Concat", ["x", "x"], ["y"], axis=0)], [_f("x", 4)], ["y"]),
        r"ranged batch: .*Concat.*(axis 0|holds 2 rows per batch row)",
    ),
    "batch_norm_training": (_bn_training, r"ranged batch: .*BatchNormalization.*(training mode|'rm' does not follow)"),
    "shape_cast_as_data": (_shape_as_data, r"ranged batch: .*computed from the batch"),
    "embedding_lookup": (_embedding, r"ranged batch: .*Gather"),
    "lstm_layout0": (lambda: _lstm(layout=0), r"ranged batch: value 'x' is \[3, 5, 4\] at batch 5 .*first dim"),
    "lstm_layout0_sequence_ranged": (_lstm_sequence, r"ranged batch: .*LSTM.*layout 0"),
    "tile_axis0": (
        lambda: _one("Tile", consts={"reps": np.array([2, 1, 1], np.int64)}),
        r"ranged batch: .*Tile.*holds 2 rows per batch row",
    ),
    "pad_axis0": (
        lambda: _one("Pad", consts={"pads": np.array([1, 0, 0, 0, 0, 0], np.int64)}),
        r"ranged batch: value 'y' is \[6, 4, 6\] at batch 5",
    ),
    "slice_axis0_drops_a_row": (
        lambda: _one(
            "Slice", consts={"s": np.array([0], np.int64), "e": np.array([-1], np.int64), "a": np.array([0], np.int64)}
        ),
        r"ranged batch: value 'y' is \[4, 4, 6\] at batch 5",
    ),
    "slice_axis0_from_row_1": (
        lambda: _one(
            "Slice",
            consts={"s": np.array([1], np.int64), "e": np.array([1 << 62], np.int64), "a": np.array([0], np.int64)},
        ),
        r"ranged batch: value 'y' is \[4, 4, 6\] at batch 5",
    ),
    "reshape_batch_not_first": (
        lambda: _one("Reshape", consts={"shape": np.array([2, -1, 6], np.int64)}),
        r"ranged batch: value 'y' is \[2, 10, 6\] at batch 5",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_rows_mixing_model_is_refused_with_nothing_written(case, tmp_path):
    build, match = REFUSALS[case]
    _refused(build(), str(tmp_path), match + r".*fixed --shape")


def _plain() -> onnx.ModelProto:
    return _model([helper.make_node("Relu", ["x"], ["y"])], [("x", [VAR, "T", 8], TensorProto.FLOAT)], ["y"])


def test_range_on_a_dim_other_than_the_first_is_refused(tmp_path):
    _refused(_plain(), str(tmp_path), r"--shape x: dim 1 is ranged", shapes={"x": [1, DimRange(1, 4), 8]})


def test_two_different_ranges_are_refused(tmp_path):
    nodes = [helper.make_node("Add", ["x", "z"], ["y"])]
    model = _model(nodes, [_f("x", 4), _f("z", 4)], ["y"])
    shapes = {"x": [DimRange(1, 4), 4], "z": [DimRange(1, 5), 4]}
    _refused(model, str(tmp_path), r"ranges 1\.\.4, 1\.\.5", shapes=shapes)
    _refused(
        model, str(tmp_path), r"must be the same range", dims={VAR: DimRange(2, 4)}, shapes={"x": [DimRange(1, 4), 4]}
    )


@pytest.mark.parametrize("lo, hi", [(0, 4), (5, 2)])
def test_empty_or_reversed_range_is_refused(lo, hi, tmp_path):
    path, bundle = str(tmp_path / "r.onnx"), str(tmp_path / "r.svod")
    onnx.save(_plain(), path)
    with pytest.raises(UnsupportedModelError, match=r"range %d\.\.%d: .*1 <= MIN <= MAX" % (lo, hi)):
        build_onnx(path, bundle, targets=[host_target()], expect=False, shapes={"x": [DimRange(lo, hi), 4, 8]})
    assert not os.path.exists(bundle)


# -- the CLI --------------------------------------------------------------------------------------------------------


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p))
    return subprocess.run(
        [sys.executable, "-m", "svod_min", *args], capture_output=True, text=True, timeout=120, cwd=ROOT, env=env
    )


def test_cli_builds_a_ranged_shape_and_refuses_a_ranged_inner_dim(tmp_path):
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    model = _model([node], [("x", ["n", 3, 8, 8], TensorProto.FLOAT)], ["y"], {"w": _w(28, 2, 3, 3, 3)})
    path, bundle = str(tmp_path / "model.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    proc = _cli("build", path, "-o", bundle, "--shape", "x=1..4,3,8,8", "--target", host_target())
    assert proc.returncode == 0, proc.stderr
    doc = _plan_doc(bundle)
    assert doc["vars"]["batch"] == {"min": 1, "max": 4, "default": 4}
    assert doc["buffers"]["x"]["dims"] == ["batch", 3, 8, 8]
    proc = _cli("run", bundle)  # the expectations onnxruntime recorded at the largest batch
    assert proc.returncode == 0, proc.stderr
    assert "verify y: ok" in proc.stdout, proc.stdout
    x = np.random.default_rng(5).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.save(str(tmp_path / "two.npy"), x)
    proc = _cli("run", bundle, "--input", "x=%s" % (tmp_path / "two.npy"), "--save", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    assert "batch=2" in proc.stdout, proc.stdout
    got = np.load(str(tmp_path / "out" / "y.npy"))
    want = run_ort(model, {"x": x})[0]
    assert got.shape == want.shape == (2, 2, 8, 8)
    assert max_rel_error(got, want) < 1e-4

    path3, bad = str(tmp_path / "model3.onnx"), str(tmp_path / "bad.svod")
    onnx.save(_plain(), path3)
    proc = _cli("build", path3, "-o", bad, "--shape", "x=1,1..4,8", "--target", host_target())
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "dim 1 is ranged" in proc.stderr and "leading (batch) dim only" in proc.stderr
    assert not os.path.exists(bad)


def test_batch_runner_feeds_a_ranged_onnx_bundle_each_run_its_rows(tmp_path):
    """The Ray/Dask bridges' runner (interop.batches) over an ONNX bundle built for 1..5: 1, 5, 7 and 13 rows, cut
    into runs of at most 5, each run bound to its rows (never padded), every row equal to onnxruntime's."""
    from svod_min.interop.batches import load_runner

    model = _conv()
    path, bundle = str(tmp_path / "conv.onnx"), str(tmp_path / "conv.svod")
    onnx.save(model, path)
    build_onnx(path, bundle, targets=[host_target()], expect=False, dims={VAR: DimRange(LO, HI)})
    runner = load_runner(bundle)
    assert runner.layout.variable == VAR and runner.layout.rows == HI
    seen: List[int] = []
    plain = runner.model.run
    runner.model.run = lambda feed, variables=None: seen.append(len(feed["x"])) or plain(feed, variables)  # type: ignore[method-assign]
    for n in (1, HI, 7, 13):
        feeds = _feeds(model, n, seed=n)
        got = runner.run(feeds)
        for out, want in zip(model.graph.output, run_ort(model, feeds)):
            assert got[out.name].shape == want.shape, out.name
            assert max_rel_error(got[out.name], want) < 1e-3, (out.name, n)
    assert seen == [1, HI, HI, 2, HI, HI, 3], seen
