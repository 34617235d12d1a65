"""Inputs pinned at build (``build --pin NAME=V0,V1,...``): graph inputs whose values decide shapes.

A bundle fixes every shape at build. Where a graph input's *value* decides one (a Reshape's ``shape``, Reduce
``axes``, Slice ``starts``/``ends``, a Range's bounds fed as inputs), the build can only go on if it knows that
value: ``--pin`` gives it. The nodes then read a constant ``NAME~pinned`` in the input's place, so folding and
shape inference see the value, while the input stays a graph input the caller feeds; the lowering adds a kernel
that compares the fed value with the pinned one at every run (planfile/status.py, kind ``"pinned"``).

When the build meets a tensor without a static shape, :func:`deciding_inputs` finds the graph inputs whose values
flow into the operands that decide its shape, so the refusal can name them and suggest ``--pin``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...error import ModelFileError
from .ir import Graph, Node

#: The name of the constant the nodes read in a pinned input's place.
SUFFIX = "~pinned"
#: The operands whose values decide an op's output shape (positions in the node's inputs); an op not named here
#: counts every input that is not float.
SHAPE_OPERANDS: Dict[str, Sequence[int]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "ConstantOfShape": (0,),
    "Tile": (1,),
    "Pad": (1, 3),
    "Slice": (1, 2, 3, 4),
    "Split": (1,),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "TopK": (1,),
    "Range": (0, 1, 2),
    "Resize": (2, 3),
    "Upsample": (1,),
    "OneHot": (1,),
    "CenterCropPad": (1,),
    "Compress": (1,),
    "ReduceSum": (1,),
    "ReduceMean": (1,),
    "ReduceMax": (1,),
    "ReduceMin": (1,),
    "ReduceProd": (1,),
    "ReduceL1": (1,),
    "ReduceL2": (1,),
    "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,),
    "ReduceSumSquare": (1,),
    "NonZero": (0,),
    "Unique": (0,),
    "NonMaxSuppression": (0, 1, 2, 3, 4),
    "Col2Im": (1, 2),
    "AffineGrid": (1,),
    "MaxUnpool": (2,),
    "STFT": (2, 3),
    "DFT": (1,),
    "HannWindow": (0,),
    "HammingWindow": (0,),
    "BlackmanWindow": (0,),
    "MelWeightMatrix": (0, 1),
}
#: Ops whose result depends on their input's shape only: the value search stops there.
SHAPE_ONLY = {"Shape", "Size"}


def _text(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


def pin_text(name: str, data: np.ndarray, limit: int = 16) -> str:
    """How the pin reads on a command line (``--pin axes=0,2``), its values cut after ``limit``."""
    flat = data.reshape(-1).tolist()
    shown = _text(flat[:limit]) + (",...(%d values)" % len(flat) if len(flat) > limit else "")
    return "--pin %s=%s" % (name, shown)


def resolve_pins(
    model: onnx.ModelProto, pins: Mapping[str, Any], shapes: Mapping[str, Sequence[int]]
) -> Dict[str, np.ndarray]:
    """Each pin as an array of its input's declared dtype and a shape its declaration allows; ModelFileError naming
    the pin otherwise. A pin given as a list of numbers (``--pin NAME=V0,V1``) takes the input's shape where it
    is known (a scalar, one dynamic dim, ``--shape``); an array (``--pin NAME=FILE.npy``, ``pins={NAME: array}``)
    keeps its own."""
    inits = {t.name for t in model.graph.initializer}
    real = {i.name: i for i in model.graph.input if i.name not in inits}
    out: Dict[str, np.ndarray] = {}
    for name, given in pins.items():
        if name not in real:
            raise ModelFileError(
                "--pin names %r, not an input of the model (inputs: %s)" % (name, ", ".join(sorted(real)) or "none")
            )
        tt = real[name].type.tensor_type
        if not real[name].type.HasField("tensor_type") or not tt.elem_type:
            raise ModelFileError("--pin %s: the input is not a tensor of a known dtype" % name)
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
        declared: Optional[List[Optional[int]]] = None
        if tt.HasField("shape"):
            declared = [
                int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim
            ]
        if not isinstance(given, np.ndarray):
            _fits(name, np.asarray(given, dtype=object).reshape(-1).tolist(), dtype)
        data = _as_dtype(name, np.asarray(given), dtype)
        if not isinstance(given, np.ndarray):
            data = _values_shape(name, data.reshape(-1), declared, shapes.get(name))
        _check_shape(name, data.shape, declared, shapes.get(name))
        out[name] = np.array(data, order="C")  # ascontiguousarray would make a scalar 1-D
    return out


def _fits(name: str, values: Sequence[Any], dtype: np.dtype) -> None:
    """Python integers given for an integer input lie in its dtype's range (numpy would make floats of them)."""
    if dtype.kind not in "iu":
        return
    info = np.iinfo(dtype)
    for v in values:
        if isinstance(v, int) and not info.min <= v <= info.max:
            raise ModelFileError("--pin %s: the input holds %s, which cannot hold %d" % (name, dtype, v))


def _as_dtype(name: str, data: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``data`` as ``dtype`` where every value is one of that dtype's; ModelFileError naming the pin otherwise."""
    kind = dtype.kind
    if data.dtype.kind not in "biuf":
        raise ModelFileError("--pin %s: values of dtype %s, the input holds %s" % (name, data.dtype, dtype))
    if kind in "iub" and data.dtype.kind == "f":
        raise ModelFileError(
            "--pin %s: the input holds %s, and the pin gives floats (%s): give integers"
            % (name, dtype, _text(data.reshape(-1)[:4].tolist()))
        )
    if kind == "b" and data.size and not np.isin(data, (0, 1)).all():
        raise ModelFileError("--pin %s: the input holds bool, and the pin gives values other than 0 and 1" % name)
    if kind in "iu" and data.size and data.dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = int(data.min()), int(data.max())
        if low < info.min or high > info.max:
            raise ModelFileError(
                "--pin %s: the input holds %s, which cannot hold %d" % (name, dtype, low if low < info.min else high)
            )
    if kind not in "biuf":
        raise ModelFileError("--pin %s: inputs of dtype %s cannot be pinned" % (name, dtype))
    return data.astype(dtype)


def _values_shape(
    name: str, flat: np.ndarray, declared: Optional[List[Optional[int]]], shape: Optional[Sequence[int]]
) -> np.ndarray:
    """A list of values given on the command line, shaped as its input: by ``--shape``, a scalar's one value, a
    rank-1 input's list, or the declared static shape."""
    if shape is not None:
        want: Optional[Sequence[int]] = shape
    elif declared is None or len(declared) == 1:
        want = [flat.size]
    elif not declared:
        want = []
    elif all(d is not None for d in declared):
        want = declared  # type: ignore[assignment]
    else:
        raise ModelFileError(
            "--pin %s: the input has rank %d with dynamic dims; give its shape with --shape %s=... or the value "
            "as a .npy file (--pin %s=FILE.npy)" % (name, len(declared), name, name)
        )
    if int(np.prod(want, dtype=np.int64)) != flat.size:
        raise ModelFileError(
            "--pin %s: %d value(s) do not fill the input's shape %s" % (name, flat.size, list(want))  # type: ignore
        )
    return flat.reshape([int(d) for d in want])  # type: ignore[union-attr]


def _check_shape(
    name: str, got: Sequence[int], declared: Optional[List[Optional[int]]], shape: Optional[Sequence[int]]
) -> None:
    if shape is not None and list(shape) != list(got):
        raise ModelFileError("--pin %s has shape %s, --shape gives %s" % (name, list(got), list(shape)))
    if declared is None:
        return
    if len(declared) != len(got) or any(d is not None and d != g for d, g in zip(declared, got)):
        raise ModelFileError(
            "--pin %s has shape %s, the model's input is %s"
            % (name, list(got), ["?" if d is None else d for d in declared])
        )


def pin_inputs(model: onnx.ModelProto, pinned: Mapping[str, np.ndarray]) -> None:
    """Nodes read each pinned input as its constant ``NAME~pinned``; the input itself stays (it is fed, and
    checked against the pin at run)."""
    for name, data in pinned.items():
        model.graph.initializer.append(numpy_helper.from_array(data, name + SUFFIX))
    for node in model.graph.node if pinned else ():
        for i, name in enumerate(node.input):
            if name in pinned:
                node.input[i] = name + SUFFIX


def pinned_values(graph: Graph, names: Sequence[str]) -> Dict[str, np.ndarray]:
    """The pinned constants of a graph read with :func:`pin_inputs`, by input name."""
    return {n: graph.const(n + SUFFIX) for n in names}


def deciding_inputs(graph: Graph, node: Node, name: str) -> List[str]:
    """The graph inputs whose values decide the shape of ``name``, an output of ``node`` without a static shape:
    the inputs that flow, by value, into the operands that decide the node's output shape (every operand that is
    not float, for an op :data:`SHAPE_OPERANDS` does not list). Empty when no graph input's value is involved."""
    producers = {out: n for n in graph.nodes for out in n.outputs if out}
    if name not in node.outputs:
        node = producers.get(name, node)
    positions = SHAPE_OPERANDS.get(node.op)
    if positions is None:
        seeds = [n for n in node.inputs if n and not _is_float(graph, n)]
    else:
        seeds = [node.inputs[p] for p in positions if p < len(node.inputs) and node.inputs[p]]
    found: List[str] = []
    seen: Set[str] = set()
    while seeds:
        value = seeds.pop()
        if value in seen:
            continue
        seen.add(value)
        if value in graph.inputs:
            found.append(value)
            continue
        if graph.values.get(value) is not None and graph.values[value].const is not None:
            continue
        producer = producers.get(value)
        if producer is not None and producer.op not in SHAPE_ONLY:
            seeds.extend(n for n in producer.inputs if n)
    return sorted(found, key=graph.inputs.index)


def _is_float(graph: Graph, name: str) -> bool:
    v = graph.values.get(name)
    return v is not None and (np.dtype(v.dtype).kind == "f" or v.dtype == "bfloat16")


__all__ = ["SUFFIX", "deciding_inputs", "pin_inputs", "pin_text", "pinned_values", "resolve_pins"]
