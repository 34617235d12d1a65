"""ONNX helpers for tests/onnx_frontend (not tests/onnx: tests/ is on sys.path, and a folder named onnx there would
shadow the onnx package where it is not installed): single-node models, the light CNNs with random weights, svod vs
onnxruntime.

The light models in the onnx wheel make every weight with ``ConstantOfShape(0.02)``: every output
is then uniform and proves nothing, so ``randomized`` (from :mod:`svod_min.perf.light_models`, which the
ONNX benchmark shares) replaces those weights with seeded random initializers.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from svod_min.onnx.peer_reference import with_unsigned_weights
from svod_min.perf.light_models import random_inputs, randomized  # noqa: F401 - one implementation, for the tests and the bench

LIGHT_MODELS = (
    "bvlc_alexnet",
    "zfnet512",
    "squeezenet",
    "shufflenet",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "vgg19",
    "densenet121",
)


def light_path(name: str) -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_%s.onnx" % name)


def host_target() -> str:
    from svod_min.compiler.targets import host_target as host

    return host()


def single_node(
    op: str,
    inputs: Sequence[Tuple[str, Sequence[int]]],
    outputs: Sequence[str] = ("y",),
    *,
    opset: int = 17,
    consts: Optional[Dict[str, np.ndarray]] = None,
    **attrs: Any,
) -> onnx.ModelProto:
    """A model of one node: float32 inputs by (name, shape), constant inputs as initializers, shapes inferred."""
    consts = consts or {}
    node = helper.make_node(
        op, [n for n, _ in inputs] + [n for n in consts if n not in dict(inputs)], list(outputs), **attrs
    )
    return graph_model([node], inputs, outputs, opset, consts)


def graph_model(
    nodes: List[Any],
    inputs: Sequence[Tuple[str, Sequence[int]]],
    outputs: Sequence[str],
    opset: int,
    consts: Dict[str, np.ndarray],
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def run_ort(model: onnx.ModelProto, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """onnxruntime's outputs at one thread; uint8 x int8 operands are fed to it as uint8 x uint8, the same values,
    where its kernels are exact on every host (svod_min/onnx/peer_reference.py)."""
    import onnxruntime as ort

    model, feeds = with_unsigned_weights(model, feeds)
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


def run_both(
    model: onnx.ModelProto, directory: str, feeds: Optional[Dict[str, np.ndarray]] = None
) -> Tuple[List[np.ndarray], Dict[str, np.ndarray]]:
    """onnxruntime's outputs (by position) and svod_min's (by name, the bundle built for this host) on the same
    feeds: ``feeds``, or seeded random inputs."""
    feeds = random_inputs(model) if feeds is None else feeds
    return run_ort(model, feeds), build_and_load(model, directory).run(feeds)


def max_rel_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max(|want|, 1e-3 * max |want|): relative, without blowing up near zero."""
    floor = max(1e-3 * float(np.max(np.abs(want))) if want.size else 0.0, 1e-12)
    return float(np.max(np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), floor))) if want.size else 0.0


def typed_model(
    nodes: List[Any],
    inputs: Sequence[Tuple[str, Sequence[int], int]],
    outputs: Sequence[str],
    opset: int,
    consts: Dict[str, np.ndarray],
) -> onnx.ModelProto:
    """:func:`graph_model` with an element type per input (``TensorProto.INT64``, ``BOOL``, ...)."""
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info(n, t, list(s)) for n, s, t in inputs],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
        [numpy_helper.from_array(v, n) for n, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)


def bare_python38() -> Optional[str]:
    """A CPython 3.8 to run the one-file runtime with: ``python3.8`` on PATH (.ci/run puts pyenv's there), else
    pyenv's ``versions/3.8.*`` (PYENV_ROOT or ~/.pyenv); None when there is none."""
    import glob
    import shutil

    found = shutil.which("python3.8")
    if found and "shims" not in found.split(os.sep):  # a pyenv shim needs PATH and pyenv itself to start
        return found
    root = os.environ.get("PYENV_ROOT") or os.path.join(os.path.expanduser("~"), ".pyenv")
    candidates = sorted(glob.glob(os.path.join(root, "versions", "3.8.*", "bin", "python3.8")))
    return candidates[-1] if candidates else None


def build_pyz_case(name: str, directory: str, seed: int = 0) -> Dict[str, Any]:
    """A light model with random weights built for this host's target at ``directory/NAME.svod``, its random
    inputs written as .npy files, onnxruntime's outputs: what a zipapp run with ``--input``/``--save`` needs."""
    from svod_min.onnx import build_onnx

    model = randomized(name, seed)
    feeds = random_inputs(model, seed)
    want = run_ort(model, feeds)
    path = os.path.join(directory, name + ".onnx")
    onnx.save(model, path)
    bundle = os.path.join(directory, name + ".svod")
    build_onnx(path, bundle, targets=[host_target()], expect=False)
    os.remove(path)  # the big models' weights twice over would cost disk for nothing
    inputs = {}
    for i, (input_name, value) in enumerate(sorted(feeds.items())):
        inputs[input_name] = os.path.join(directory, "%s-input-%d.npy" % (name, i))
        np.save(inputs[input_name], value)
    return {
        "name": name,
        "bundle": bundle,
        "inputs": inputs,
        "out_dir": os.path.join(directory, name + "-out"),
        "want": {o.name: w for o, w in zip(model.graph.output, want)},
    }
