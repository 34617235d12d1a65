"""Data movement in a QDQ model runs on the quantized bytes.

``quantize_static`` wraps every op in DequantizeLinear / QuantizeLinear, a Concat, Split, Slice, Reshape, Transpose,
MaxPool or nearest Resize too. Where the op's data inputs are dequantized with one (scale, zero point) and each of
its outputs is read only by QuantizeLinear nodes with that same pair, the round trip is exact: the op moves (or, for
MaxPool, picks the largest of) values that are all ``(q - zp) * scale``, and quantizing such a value with the same
pair gives ``q`` back (``(q - zp) * scale / scale`` is within far less than half a unit of the integer ``q - zp``).
So the op takes the integer tensors and writes the QuantizeLinear nodes' outputs itself (a Resize only in the form
svod_min resizes bytes: nearest over the last two axes, by constant scales); the DequantizeLinear nodes no one reads
any more are dropped. onnxruntime's QDQ transformations drop these pairs the same way.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
from onnx import helper, numpy_helper

from .quant_fold import drop_unread_dequantize, per_tensor_params

#: The ops rewritten, each with the positions of its data inputs (None: every input). svod_min's kernels move
#: int8 and uint8 for all of them (MaxPool: ops/pool.py's MAX_DTYPES).
MOVEMENT: Dict[str, Optional[Tuple[int, ...]]] = {
    "Concat": None,
    "Split": (0,),
    "Slice": (0,),
    "Reshape": (0,),
    "Flatten": (0,),
    "Squeeze": (0,),
    "Unsqueeze": (0,),
    "Transpose": (0,),
    "MaxPool": (0,),
    "Resize": (0,),
}

#: A per-tensor quantization: scale (float32), zero point and its integer dtype.
Params = Tuple[float, int, str]


def move_quantized(model: Any) -> int:
    """Rewrite each data-movement node of ``model`` (a ModelProto, in place) whose QDQ pairs around it are exact
    round trips to run on the integer tensors. Returns how many QuantizeLinear nodes that dropped."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output if o}
    readers: Dict[str, List[Any]] = {}
    for n in graph.node:
        for i in n.input:
            readers.setdefault(i, []).append(n)
    outputs = {o.name for o in graph.output}
    dropped: List[Any] = []
    for node in graph.node:
        quantizers = _round_trip(node, inits, producer, readers, outputs)
        if quantizers is None:
            continue
        for i in _data_inputs(node):
            node.input[i] = producer[node.input[i]].input[0]
        for k, out in enumerate(node.output):
            if out:
                _write_quantized(node, k, quantizers[out], readers, outputs)
                dropped += quantizers[out]
    if not dropped:
        return 0
    gone = {id(q) for q in dropped}
    keep = [n for n in graph.node if id(n) not in gone]
    del graph.node[:]
    graph.node.extend(keep)
    drop_unread_dequantize(graph)
    return len({id(q) for q in dropped})


def _data_inputs(node: Any) -> Sequence[int]:
    positions = MOVEMENT[node.op_type]
    return range(len(node.input)) if positions is None else [i for i in positions if i < len(node.input)]


def _round_trip(
    node: Any, inits: Dict[str, Any], producer: Dict[str, Any], readers: Dict[str, List[Any]], outputs: Any
) -> Optional[Dict[str, List[Any]]]:
    """The QuantizeLinear readers of each of ``node``'s outputs where every data input is a DequantizeLinear and
    every reader a QuantizeLinear, all with one per-tensor (scale, zero point); else None."""
    if node.op_type not in MOVEMENT or (node.op_type == "MaxPool" and len(node.output) > 1 and node.output[1]):
        return None  # MaxPool's indices are no quantized values
    if node.op_type == "Resize" and not _nearest_last_two(node, inits):
        return None  # interpolation makes new values; svod_min's byte Resize is nearest over the last two axes
    found = set()
    for i in _data_inputs(node):
        dq = producer.get(node.input[i])
        if dq is None or dq.op_type != "DequantizeLinear":
            return None
        found.add(_params(dq, inits))
    quantizers: Dict[str, List[Any]] = {}
    for out in node.output:
        if not out:
            continue
        qs = readers.get(out, [])
        if out in outputs or not qs or any(q.op_type != "QuantizeLinear" or q.input[0] != out for q in qs):
            return None
        if sum(q.output[0] in outputs for q in qs) > 1:
            return None  # two graph outputs cannot both be the one rewritten value
        found.update(_params(q, inits) for q in qs)
        quantizers[out] = qs
    if len(found) != 1 or None in found:
        return None
    return quantizers


def _nearest_last_two(node: Any, inits: Dict[str, Any]) -> bool:
    """A Resize that picks values (nearest) and scales only its last two axes, by constant scales (the form
    ops/resize.py runs on bytes): each output is one of the inputs."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    mode = attrs.get("mode", b"nearest")
    transform = attrs.get("coordinate_transformation_mode", b"half_pixel")
    if mode not in (b"nearest", "nearest") or transform in (b"tf_crop_and_resize", "tf_crop_and_resize"):
        return False
    if "axes" in attrs or len(node.input) < 3 or node.input[2] not in inits:
        return False
    scales = numpy_helper.to_array(inits[node.input[2]]).reshape(-1).tolist()
    return len(scales) >= 2 and all(v == 1.0 for v in scales[:-2]) and all(v != 1.0 for v in scales[-2:])


def _params(node: Any, inits: Dict[str, Any]) -> Optional[Params]:
    """(scale, zero point, dtype) of a per-tensor QuantizeLinear / DequantizeLinear whose parameters are
    constants and whose zero point is given (its dtype is the integer tensor's), else None."""
    names = per_tensor_params(node, inits)
    if names is None:
        return None
    scale, zp = (numpy_helper.to_array(inits[n]).reshape(-1) for n in names)
    if not np.isfinite(scale).all() or float(scale[0]) <= 0.0:
        return None  # a zero or negative scale is no monotonic round trip
    return float(scale[0]), int(zp[0]), zp.dtype.name


def _write_quantized(node: Any, k: int, qs: List[Any], readers: Dict[str, List[Any]], outputs: Any) -> None:
    """``node``'s output ``k`` becomes the value its QuantizeLinear readers ``qs`` wrote: the first one's name (a
    graph output's, where one is), every reader of the others renamed to it."""
    keep = next((q.output[0] for q in qs if q.output[0] in outputs), qs[0].output[0])
    node.output[k] = keep
    for q in qs:
        old = q.output[0]
        if old == keep:
            continue
        for reader in readers.get(old, []):
            for j, name in enumerate(reader.input):
                if name == old:
                    reader.input[j] = keep
