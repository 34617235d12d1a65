"""ONNX's type constraints, checked for the constant inputs of a node.

The op table checks the dtypes of the tensors computed at run time (``OpSpec.dtypes``); a constant input may
legitimately have another dtype (a Reshape's int64 shape, a Gather's indices, a quantized weight), so the table
cannot hold constants to its one list. ONNX's op schema can: each input names a type parameter (``T``, ``Tind``)
with the dtypes it allows, and every input bound to one parameter shares one dtype. A constant that breaks those
rules (a uint8 Conv weight beside a float input, a bool BatchNormalization bias) is a model onnxruntime refuses;
lowered, the kernel would read its bytes as floats.
"""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np
import onnx
from onnx import defs

from .ir import Graph, Node


def _onnx_type(dtype: str) -> Optional[str]:
    """``tensor(float)`` for numpy's ``float32``, and so on; None for a dtype onnx does not map."""
    for code in onnx.TensorProto.DataType.values():
        try:
            if code and np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code)).name == dtype:
                return "tensor(%s)" % onnx.TensorProto.DataType.Name(code).lower()
        except (KeyError, TypeError, ValueError):
            continue
    return None


_TYPES: Dict[str, Optional[str]] = {}


def onnx_type(dtype: str) -> Optional[str]:
    if dtype not in _TYPES:
        _TYPES[dtype] = _onnx_type(dtype)
    return _TYPES[dtype]


def constant_dtype_violation(graph: Graph, node: Node) -> Optional[str]:
    """Why a constant input of ``node`` has a dtype its op's schema does not take there (None when every constant
    fits, or the op has no schema in the default domain)."""
    try:
        schema = defs.get_schema(node.op, graph.opset, "")
    except Exception:  # noqa: BLE001 - onnx raises SchemaError, a private class; no schema: nothing to hold to
        return None
    if not schema.inputs:
        return None
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    bound: Dict[str, str] = {}  # type parameter -> the first input bound to it
    for i, name in enumerate(node.inputs):
        if not name or name not in graph.values:
            continue
        formal = schema.inputs[min(i, len(schema.inputs) - 1)]  # a variadic last input repeats
        param = formal.type_str
        got = onnx_type(graph.values[name].dtype)
        if got is None:
            continue
        const = graph.values[name].const is not None
        if param in allowed:
            if got not in allowed[param] and const:
                return "constant %r (input %d, %s) is %s; %s takes %s there" % (
                    name,
                    i,
                    formal.name,
                    graph.values[name].dtype,
                    node.op,
                    _names(allowed[param]),
                )
            first = bound.setdefault(param, name)
            other = graph.values[first]
            if first != name and onnx_type(other.dtype) != got and (const or other.const is not None):
                return "input %r is %s and input %r is %s; %s takes one dtype for both (type %s)" % (
                    first,
                    other.dtype,
                    name,
                    graph.values[name].dtype,
                    node.op,
                    param,
                )
        elif param.startswith("tensor(") and param != got and const:
            return "constant %r (input %d, %s) is %s; %s takes %s there" % (
                name,
                i,
                formal.name,
                graph.values[name].dtype,
                node.op,
                param[7:-1],
            )
    return None


def _names(types: set) -> str:
    return ", ".join(sorted(t[7:-1] for t in types if t.startswith("tensor(")))


__all__ = ["constant_dtype_violation", "onnx_type"]
