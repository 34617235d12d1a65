"""The models the fuzzer starts from: small graphs of each op family, the light zoo, the conformance models.

Every seed is an ``onnx.ModelProto`` made on demand from a name (``ops/<family>``, ``light/<model>`` or
``node/<test>``), so a run's case list depends on the seed set's names alone and a case can be remade from its
name. The op-family graphs are small (a case builds and runs in well under a second); the light CNNs get a small
input where the model allows it (squeezenet and the like end in a global pool).
"""

from __future__ import annotations

import glob
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .mutate import reinfer

F, I64, I32, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL
#: The environment variable naming the ONNX backend test data's node directory (``.../backend/test/data/node``).
CONFORMANCE_ENV = "SVOD_FUZZ_CONFORMANCE"
#: The ``light`` seeds: the light models that build in seconds, with the input side each takes (squeezenet ends
#: in a global pool, so 64 x 64 will do). The other seven are the ``zoo`` seeds, at 224 x 224: tens of seconds
#: to build each (densenet121 and inception_v1 compile 70-140 kernels), for long runs.
LIGHT = {"squeezenet": 64, "shufflenet": 224}

Spec = Tuple[List[Any], List[Tuple[str, Sequence[int], int]], List[str], int, Dict[str, np.ndarray]]


def _w(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.3).astype(np.float32)


def model_of(spec: Spec) -> onnx.ModelProto:
    """nodes, typed inputs (name, shape, elem type), output names, opset, initializers -> a model."""
    nodes, inputs, outputs, opset, consts = spec
    graph = helper.make_graph(
        nodes,
        "seed",
        [helper.make_tensor_value_info(n, t, list(s)) for n, s, t in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    reinfer(model)
    return model


def _one(op: str, inputs: Sequence[Tuple[str, Sequence[int]]], consts: Dict[str, np.ndarray], **attrs: Any) -> Spec:
    opset = attrs.pop("_opset", 17)
    names = [n for n, _ in inputs] + list(consts)
    node = helper.make_node(op, names, ["y"], **attrs)
    return [node], [(n, s, F) for n, s in inputs], ["y"], opset, consts


def _family_specs(rng: np.random.Generator) -> Dict[str, Callable[[], Spec]]:
    w = lambda *s: _w(rng, *s)  # noqa: E731 - a short local spelling for the table
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    mk = helper.make_node
    return {
        "unary": lambda: (
            [mk("Relu", ["x"], ["a"]), mk("Sigmoid", ["a"], ["b"]), mk("Exp", ["b"], ["c"]), mk("Sqrt", ["c"], ["y"])],
            [("x", (2, 3, 4), F)],
            ["y"],
            17,
            {},
        ),
        "activations": lambda: (
            [
                mk("LeakyRelu", ["x"], ["a"], alpha=0.2),
                mk("Elu", ["a"], ["b"], alpha=0.7),
                mk("HardSwish", ["b"], ["y"]),
            ],
            [("x", (4, 9), F)],
            ["y"],
            17,
            {},
        ),
        "binary": lambda: _one("Add", [("a", (2, 3, 4)), ("b", (3, 1))], {}),
        "div_const": lambda: _one("Div", [("a", (2, 3))], {"b": np.array([2.0, 0.5, 4.0], np.float32)}),
        "variadic": lambda: _one("Max", [("a", (2, 3)), ("b", (2, 3)), ("c", (3,))], {}),
        "clip": lambda: _one(
            "Clip", [("x", (4, 9))], {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}
        ),
        "conv": lambda: _one("Conv", [("x", (1, 3, 9, 9))], {"w": w(4, 3, 3, 3), "b": w(4)}, pads=[1, 1, 1, 1]),
        "conv_group": lambda: _one("Conv", [("x", (1, 4, 6, 6))], {"w": w(6, 2, 3, 3)}, group=2, strides=[2, 2]),
        "conv1d": lambda: _one("Conv", [("x", (1, 3, 10))], {"w": w(2, 3, 3)}, pads=[1, 1], dilations=[2]),
        "convtranspose": lambda: _one(
            "ConvTranspose", [("x", (1, 3, 4, 5))], {"w": w(3, 2, 3, 3), "b": w(2)}, strides=[2, 2]
        ),
        "maxpool": lambda: _one(
            "MaxPool", [("x", (1, 2, 7, 7))], {}, kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1]
        ),
        "avgpool": lambda: _one(
            "AveragePool", [("x", (1, 2, 8, 8))], {}, kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1
        ),
        "globalpool": lambda: _one("GlobalAveragePool", [("x", (2, 3, 4, 5))], {}),
        "batchnorm": lambda: _one(
            "BatchNormalization",
            [("x", (2, 3, 4, 4))],
            {"s": w(3) + 1, "bb": w(3), "m": w(3), "v": np.abs(w(3)) + 0.5},
            epsilon=1e-3,
        ),
        "instancenorm": lambda: _one("InstanceNormalization", [("x", (2, 3, 4, 5))], {"s": w(3) + 1, "b": w(3)}),
        "layernorm": lambda: _one("LayerNormalization", [("x", (3, 8))], {"g": w(8) + 1, "bb": w(8)}, epsilon=1e-5),
        "lrn": lambda: _one("LRN", [("x", (1, 7, 3, 3))], {}, size=3, alpha=0.01, beta=0.6, bias=1.5),
        "gemm": lambda: _one("Gemm", [("a", (3, 5))], {"b": w(4, 5), "c": w(4)}, transB=1, alpha=0.5, beta=2.0),
        "matmul": lambda: _one("MatMul", [("a", (2, 3, 5))], {"b": w(5, 4)}),
        "reduce": lambda: _one("ReduceSum", [("x", (2, 3, 4))], {"ax": i64(1, 2)}, keepdims=0, _opset=13),
        "reduce_attr": lambda: _one("ReduceMean", [("x", (2, 3, 4))], {}, axes=[1], _opset=11),
        "argmax": lambda: _one("ArgMax", [("x", (3, 4, 5))], {}, axis=1),
        "softmax": lambda: _one("Softmax", [("x", (2, 5, 3))], {}, axis=1),
        "logsoftmax": lambda: _one("LogSoftmax", [("x", (3, 10))], {}),
        "concat": lambda: _one("Concat", [("a", (1, 2, 3)), ("b", (1, 4, 3))], {}, axis=1),
        "split": lambda: (
            [mk("Split", ["x", "s"], ["p", "q"], axis=1), mk("Mul", ["p", "q"], ["y"])],
            [("x", (2, 6), F)],
            ["y"],
            13,
            {"s": i64(3, 3)},
        ),
        "slice": lambda: _one(
            "Slice", [("x", (5, 6))], {"st": i64(1, 0), "en": i64(4, 6), "ax": i64(0, 1), "sp": i64(2, 2)}
        ),
        "gather": lambda: _one("Gather", [("x", (5, 3))], {"i": i64(4, -1, 0, 2)}),
        "gather_data": lambda: (
            [mk("Gather", ["e", "i"], ["y"], axis=0)],
            [("i", (3, 2), I64)],
            ["y"],
            13,
            {"e": w(10, 4)},
        ),
        "reshape": lambda: _one("Reshape", [("x", (2, 3, 4))], {"s": i64(4, -1)}),
        "shape_chain": lambda: (
            [
                mk("Shape", ["x"], ["s"]),
                mk("Gather", ["s", "zero"], ["n"], axis=0),
                mk("Unsqueeze", ["n", "ax0"], ["n1"]),
                mk("Concat", ["n1", "m1"], ["shape"], axis=0),
                mk("Reshape", ["x", "shape"], ["y"]),
            ],
            [("x", (2, 3, 4), F)],
            ["y"],
            13,
            {"zero": np.array(0, np.int64), "ax0": i64(0), "m1": i64(-1)},
        ),
        "flatten": lambda: _one("Flatten", [("x", (2, 3, 4))], {}, axis=2),
        "squeeze": lambda: _one("Squeeze", [("x", (2, 1, 4))], {"ax": i64(1)}),
        "unsqueeze": lambda: _one("Unsqueeze", [("x", (2, 4))], {"ax": i64(0, 2)}),
        "transpose": lambda: _one("Transpose", [("x", (2, 3, 4))], {}, perm=[2, 0, 1]),
        "expand": lambda: _one("Expand", [("x", (3, 1))], {"s": i64(2, 3, 4)}),
        "pad": lambda: _one("Pad", [("x", (2, 3))], {"p": i64(1, 0, 0, 2), "v": np.array(0.5, np.float32)}),
        "pad_reflect": lambda: _one("Pad", [("x", (2, 3, 4))], {"p": i64(0, 2, 1, 0, 1, 3)}, mode="reflect"),
        "resize": lambda: (
            [mk("Resize", ["x", "", "sc"], ["y"], mode="linear")],
            [("x", (1, 2, 3, 4), F)],
            ["y"],
            13,
            {"sc": np.array([1, 1, 2, 1.5], np.float32)},
        ),
        "upsample": lambda: _one(
            "Upsample", [("x", (1, 2, 3, 3))], {"sc": np.array([1, 1, 2, 2], np.float32)}, _opset=9
        ),
        "where": lambda: (
            [mk("Less", ["a", "b"], ["c"]), mk("Not", ["c"], ["d"]), mk("Where", ["d", "a", "b"], ["y"])],
            [("a", (2, 3, 4), F), ("b", (3, 1), F)],
            ["y"],
            16,
            {},
        ),
        "cast": lambda: (
            [mk("Cast", ["x"], ["c"], to=F), mk("Relu", ["c"], ["y"])],
            [("x", (2, 3), F)],
            ["y"],
            13,
            {},
        ),
        "prelu": lambda: _one("PRelu", [("x", (2, 3, 4))], {"s": w(3, 1)}),
        "dropout": lambda: _one("Dropout", [("x", (2, 3))], {}),
        "lstm": lambda: (
            [mk("LSTM", ["x", "W", "R", "B"], ["", "h"], hidden_size=3)],
            [("x", (4, 2, 5), F)],
            ["h"],
            14,
            {"W": w(1, 12, 5), "R": w(1, 12, 3), "B": w(1, 24)},
        ),
        "gru": lambda: (
            [mk("GRU", ["x", "W", "R"], ["y"], hidden_size=3, linear_before_reset=1)],
            [("x", (3, 2, 4), F)],
            ["y"],
            14,
            {"W": w(1, 9, 4), "R": w(1, 9, 3)},
        ),
        "cnn": lambda: (
            [
                mk("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
                mk("Relu", ["c1"], ["r1"]),
                mk("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
                mk("Flatten", ["p1"], ["f"]),
                mk("Gemm", ["f", "w2", "b2"], ["g"], transB=1),
                mk("Softmax", ["g"], ["y"]),
            ],
            [("x", (1, 2, 6, 6), F)],
            ["y", "g"],
            13,
            {"w1": w(4, 2, 3, 3), "b1": w(4), "w2": w(5, 36), "b2": w(5)},
        ),
    }


def family_names() -> List[str]:
    return ["ops/" + name for name in _family_specs(np.random.default_rng(0))]


def light_names(zoo: bool = False) -> List[str]:
    """``light/<model>`` (the quick ones, :data:`LIGHT`) or, with ``zoo``, ``zoo/<model>`` (the others)."""
    from svod_min.perf.light_models import light_model_names, light_path

    names = [n for n in light_model_names() if os.path.isfile(light_path(n)) and (n in LIGHT) != zoo]
    return [("zoo/" if zoo else "light/") + n for n in names]


def conformance_names(directory: Optional[str]) -> List[str]:
    """``node/<test>`` for each ``<directory>/<test>/model.onnx`` (the ONNX backend test data's node models)."""
    if not directory:
        return []
    return [
        "node/" + os.path.basename(os.path.dirname(p))
        for p in sorted(glob.glob(os.path.join(directory, "*", "model.onnx")))
    ]


def seed_names(kinds: Sequence[str], conformance: Optional[str]) -> List[str]:
    """The seed set: ``ops``, ``light``, ``zoo`` and ``node`` (the conformance models, when ``conformance`` names
    their directory)."""
    names: List[str] = []
    if "ops" in kinds:
        names += family_names()
    if "light" in kinds:
        names += light_names()
    if "zoo" in kinds:
        names += light_names(zoo=True)
    if "node" in kinds:
        names += conformance_names(conformance)
    return names


def load_seed(name: str, conformance: Optional[str] = None) -> onnx.ModelProto:
    """The seed model ``name`` (see :func:`seed_names`), made afresh: mutations never reach a cached copy."""
    kind, _, rest = name.partition("/")
    if kind == "ops":
        return model_of(_family_specs(np.random.default_rng(sum(map(ord, rest))))[rest]())
    if kind in ("light", "zoo"):
        from svod_min.perf.light_models import randomized

        model = randomized(rest, seed=0)
        side = LIGHT.get(rest, 224)
        if side != 224:
            _set_spatial(model, side)
        return model
    if kind == "node" and conformance:
        return onnx.load(os.path.join(conformance, rest, "model.onnx"))
    raise KeyError(name)


def _set_spatial(model: onnx.ModelProto, side: int) -> None:
    """The image input's H and W become ``side``; the stale inferred outputs lose their shapes (svod infers them)."""
    inits = {t.name for t in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        dims = inp.type.tensor_type.shape.dim
        if len(dims) == 4:
            dims[2].dim_value = side
            dims[3].dim_value = side
    reinfer(model)
