"""The nine light CNNs of the onnx wheel with seeded random weights (the ONNX benchmark and the tests use them).

The light models under ``onnx/backend/test/data/light/`` make every weight with
``ConstantOfShape(0.02)``: every output is then uniform and proves nothing, and a benchmark would
time a model no one runs. :func:`randomized` replaces those weights with seeded random
initializers (He scale for Conv/Gemm weights, BatchNormalization scale/var in [0.5, 1.5],
mean/bias and other shifts small), so activations keep a sane range through 50+ layers.

Needs numpy and onnx (the ``onnx`` extra); both are imported when a function is called, so
importing this module costs nothing without them.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

if TYPE_CHECKING:  # pragma: no cover - names for the annotations only
    import numpy as np
    import onnx

#: The light models of the onnx wheel, smallest first by run time.
LIGHT_MODELS: Tuple[str, ...] = (
    "squeezenet",
    "shufflenet",
    "inception_v1",
    "bvlc_alexnet",
    "zfnet512",
    "inception_v2",
    "resnet50",
    "densenet121",
    "vgg19",
)


def light_model_names() -> Tuple[str, ...]:
    """The names :func:`randomized` takes (``light_<name>.onnx`` in the onnx wheel)."""
    return LIGHT_MODELS


def light_path(name: str) -> str:
    """Where the onnx wheel keeps ``light_<name>.onnx``."""
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_%s.onnx" % name)


def randomized(name: str, seed: int = 0) -> "onnx.ModelProto":
    """A light model with its ConstantOfShape weights replaced by seeded random initializers."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

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


def random_inputs(model: "onnx.ModelProto", seed: int = 0) -> Dict[str, "np.ndarray"]:
    """Seeded uniform [-2, 2) float32 arrays for every graph input that is not an initializer."""
    import numpy as np

    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = rng.uniform(-2, 2, shape).astype(np.float32)
    return out


def _logits_as_output(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """Random weights through 50+ layers saturate the final softmax (one-hot outputs compare exactly): the
    softmax's input becomes an output too, so a comparison sees every logit."""
    import onnx

    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if not softmax:
        return model
    inferred = onnx.shape_inference.infer_shapes(_skeleton(model))
    info = [vi for vi in inferred.graph.value_info if vi.name == softmax[-1].input[0]]
    model.graph.output.extend(info)
    return model


#: Initializers of at most this many elements keep their values in :func:`_skeleton` (a Reshape's shape, an axis).
SKELETON_VALUES = 64


def _skeleton(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """``model`` for shape inference: the big initializers as their dtype and dims alone (shape inference serialises
    the model it is given, half a gigabyte of weights in VGG-19), the small ones whole."""
    from onnx import TensorProto, helper

    inits = [
        t if math.prod(t.dims) <= SKELETON_VALUES else TensorProto(name=t.name, data_type=t.data_type, dims=t.dims)
        for t in model.graph.initializer
    ]
    g = model.graph
    graph = helper.make_graph(list(g.node), g.name, list(g.input), list(g.output), inits, value_info=list(g.value_info))
    return helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version)


def _keep_only(field: Any, wanted: Any) -> None:
    kept = [x for x in field if wanted(x)]
    del field[:]
    field.extend(kept)


def _weight(
    rng: Any, shape: List[int], uses: List[Tuple[Any, int]], readers: Dict[str, List[Tuple[Any, int]]]
) -> "np.ndarray":
    """A weight judged by its first reader: He-scaled for Conv/Gemm, near 1 for scales, small for shifts."""
    import numpy as np

    node, index = uses[0] if uses else (None, -1)
    op = node.op_type if node is not None else ""
    if op == "Unsqueeze":  # densenet's per-channel scale/shift: judge by what reads the unsqueezed value
        nxt = readers.get(node.output[0], [(None, -1)])[0][0]
        op, index = ("Mul", 1) if nxt is not None and nxt.op_type == "Mul" else ("Add", 1)
    if op in ("Conv", "Gemm") and index == 1:
        fan_in = int(np.prod(shape[1:])) if op == "Conv" else shape[-1]
        gain = 2.0 if _feeds_relu(node, readers) else 1.0
        return (rng.standard_normal(shape) * np.sqrt(gain / max(fan_in, 1))).astype(np.float32)
    if op == "BatchNormalization" and index in (1, 4) or op == "Mul":
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return rng.uniform(-0.1, 0.1, shape).astype(np.float32)


def _feeds_relu(node: Any, readers: Dict[str, List[Tuple[Any, int]]]) -> bool:
    """Whether ``node``'s output reaches a Relu (through a BatchNormalization or a bias Add): He's gain of 2 makes up
    for the half a Relu zeroes; a layer without one keeps gain 1, or the values double at each (a ShuffleNet's
    logits reach 1e7 that way, past float16's range)."""
    for _ in range(3):
        uses = readers.get(node.output[0], [])
        if not uses:
            return False
        node = uses[0][0]
        if node.op_type == "Relu":
            return True
        if node.op_type not in ("BatchNormalization", "Add"):
            return False
    return False
