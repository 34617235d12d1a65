"""ONNX helpers for tests/onnx_frontend (not tests/onnx: tests/ is on sys.path, and a folder named onnx there would
shadow the onnx package where it is not installed): single-node models, the light CNNs with random weights, svod vs onnxruntime.

The light models in the onnx wheel make every weight with ``ConstantOfShape(0.02)``: every output
is then uniform and proves nothing, so :func:`randomized` replaces those weights with seeded
random initializers (He scale for Conv/Gemm weights, BatchNormalization scale/var in [0.5, 1.5],
mean/bias and other shifts small).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_MODELS = ("bvlc_alexnet", "zfnet512", "squeezenet", "shufflenet", "inception_v1", "inception_v2", "resnet50",
                "vgg19", "densenet121")  # fmt: skip


def light_path(name: str) -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_%s.onnx" % name)


def host_target() -> str:
    from svod_min.compiler.targets import host_target as host

    return host()


def single_node(op: str, inputs: Sequence[Tuple[str, Sequence[int]]], outputs: Sequence[str] = ("y",), *,
                opset: int = 17, consts: Optional[Dict[str, np.ndarray]] = None, **attrs: Any) -> onnx.ModelProto:  # fmt: skip
    """A model of one node: float32 inputs by (name, shape), constant inputs as initializers, shapes inferred."""
    consts = consts or {}
    node = helper.make_node(op, [n for n, _ in inputs] + [n for n in consts if n not in dict(inputs)], list(outputs), **attrs)
    return graph_model([node], inputs, outputs, opset, consts)


def graph_model(nodes: List[Any], inputs: Sequence[Tuple[str, Sequence[int]]], outputs: Sequence[str], opset: int,
                 consts: Dict[str, np.ndarray]) -> onnx.ModelProto:  # fmt: skip
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.uniform(-2, 2, shape).astype(np.float32)
    return out


def run_ort(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def build_and_load(model: onnx.ModelProto, directory: str, name: str = "m", **kwargs: Any) -> Any:
    """Save ``model``, build its bundle for this host's target only, load it."""
    from svod_min import load_model
    from svod_min.onnx import build_onnx

    path = os.path.join(directory, name + ".onnx")
    onnx.save(model, path)
    bundle = os.path.join(directory, name + ".svod")
    build_onnx(path, bundle, targets=[host_target()], expect=False, **kwargs)
    return load_model(bundle)


def max_rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(|want|, 1e-3 * max |want|): relative, without blowing up near zero."""
    floor = max(1e-3 * float(np.max(np.abs(want))) if want.size else 0.0, 1e-12)
    return float(np.max(np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), floor))) if want.size else 0.0


def randomized(name: str, seed: int = 0) -> onnx.ModelProto:
    """A light model with its ConstantOfShape weights replaced by seeded random initializers."""
    model = onnx.load(light_path(name))
    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    readers: Dict[str, List[Tuple[Any, int]]] = {}
    for node in model.graph.node:
        for i, n in enumerate(node.input):
            readers.setdefault(n, []).append((node, i))
    keep = []
    for node in model.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in inits[node.input[0]]]
            data = _weight(rng, shape, readers.get(node.output[0], []), readers)
            model.graph.initializer.append(numpy_helper.from_array(data, node.output[0]))
            continue
        keep.append(node)
    del model.graph.node[:]
    model.graph.node.extend(keep)
    used = {n for node in keep for n in node.input}
    _keep_only(model.graph.initializer, lambda t: t.name in used)
    _keep_only(model.graph.input, lambda i: i.name in used)
    model.ir_version = 4  # initializers need not be graph inputs from IR 4 on
    return _logits_as_output(model)


def _logits_as_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """Random weights through 50+ layers saturate the final softmax (one-hot outputs compare exactly): the
    softmax's input becomes an output too, so the comparison sees every logit."""
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if not softmax:
        return model
    inferred = onnx.shape_inference.infer_shapes(model)
    info = [vi for vi in inferred.graph.value_info if vi.name == softmax[-1].input[0]]
    model.graph.output.extend(info)
    return model


def _keep_only(field: Any, wanted: Any) -> None:
    kept = [x for x in field if wanted(x)]
    del field[:]
    field.extend(kept)


def _weight(rng: Any, shape: List[int], uses: List[Tuple[Any, int]], readers: Dict[str, List[Tuple[Any, int]]]) -> np.ndarray:
    node, index = uses[0] if uses else (None, -1)
    op = node.op_type if node is not None else ""
    if op == "Unsqueeze":  # densenet's per-channel scale/shift: judge by what reads the unsqueezed value
        nxt = readers.get(node.output[0], [(None, -1)])[0][0]
        op, index = ("Mul", 1) if nxt is not None and nxt.op_type == "Mul" else ("Add", 1)
    if op in ("Conv", "Gemm") and index == 1:
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else shape[-1]
        return (rng.standard_normal(shape) * np.sqrt(2.0 / max(fan_in, 1))).astype(np.float32)
    if op == "BatchNormalization" and index in (1, 4) or op == "Mul":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return rng.uniform(-0.1, 0.1, shape).astype(np.float32)


def typed_model(nodes: List[Any], inputs: Sequence[Tuple[str, Sequence[int], int]], outputs: Sequence[str], opset: int,
                consts: Dict[str, np.ndarray]) -> onnx.ModelProto:  # fmt: skip
    """:func:`graph_model` with an element type per input (``TensorProto.INT64``, ``BOOL``, ...)."""
    graph = helper.make_graph(
        nodes, "t", [helper.make_tensor_value_info(n, t, list(s)) for n, s, t in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()])  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)
