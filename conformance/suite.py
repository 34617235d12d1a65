"""The node tests on disk: one folder each, ``model.onnx`` and ``test_data_set_0/{input,output}_N.pb``."""

from __future__ import annotations

import fnmatch
import glob
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

#: Where .ci/run keeps the suite's data, unpacked from the onnx 1.19 wheel (1.23 no longer ships it);
#: ``SVOD_ONNX_NODE_TESTS`` names another folder.
DEFAULT_DATA = os.environ.get("SVOD_ONNX_NODE_TESTS") or os.path.join(
    os.path.expanduser("~"), ".cache", "svod-ci", "onnx-node-tests", "node"
)


@dataclass(frozen=True)
class NodeTest:
    """One test folder."""

    name: str
    path: str

    @property
    def model(self) -> str:
        return os.path.join(self.path, "model.onnx")


@dataclass
class DataSet:
    """The first data set of a test: inputs by the model's input names, outputs in the model's order."""

    inputs: Dict[str, Any]
    outputs: List[Tuple[str, Any]]
    op_types: List[str]
    not_tensors: List[str]  # graph inputs or outputs that are sequences, maps or optionals


def find_tests(data_dir: str, patterns: Sequence[str] = ()) -> List[NodeTest]:
    """Every test folder under ``data_dir`` (sorted), or those whose name matches one of ``patterns`` (globs)."""
    names = sorted(d for d in os.listdir(data_dir) if os.path.isfile(os.path.join(data_dir, d, "model.onnx")))
    if patterns:
        names = [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    return [NodeTest(n, os.path.join(data_dir, n)) for n in names]


def read_data_set(test: NodeTest) -> DataSet:
    """Read the model's signature and ``test_data_set_0``; non-tensor values are named, not read."""
    import onnx

    model = onnx.load(test.model, load_external_data=False)
    graph = model.graph
    initializers = {t.name for t in graph.initializer}
    graph_inputs = [i for i in graph.input if i.name not in initializers]
    not_tensors = [v.name for v in list(graph_inputs) + list(graph.output) if not v.type.HasField("tensor_type")]
    ops: List[str] = []
    for node in graph.node:
        if node.op_type not in ops:
            ops.append(node.op_type)
    if not_tensors:
        return DataSet({}, [], ops, not_tensors)
    folder = os.path.join(test.path, "test_data_set_0")
    inputs = [_read_tensor(p) for p in _numbered(folder, "input")]
    outputs = [_read_tensor(p) for p in _numbered(folder, "output")]
    return DataSet(
        dict(zip((i.name for i in graph_inputs), inputs)),
        list(zip((o.name for o in graph.output), outputs)),
        ops,
        [],
    )


def _numbered(folder: str, kind: str) -> List[str]:
    paths = glob.glob(os.path.join(folder, "%s_*.pb" % kind))
    return sorted(paths, key=lambda p: int(os.path.basename(p)[len(kind) + 1 : -3]))


def _read_tensor(path: str) -> Any:
    import onnx
    from onnx import numpy_helper

    proto = onnx.TensorProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    return numpy_helper.to_array(proto)
