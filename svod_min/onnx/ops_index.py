"""Index and comparison ops: Gather, Equal/Less/Greater (bool results), Not/And/Or/Xor, ArgMax/ArgMin,
and InstanceNormalization; all generated C."""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import csrc, csrc_more
from .ir import Graph, Node
from .lower import Lowering
from .table import ANY, one_of, register

COMPARE = {"Equal": "(x0 == x1)", "Less": "(x0 < x1)", "Greater": "(x0 > x1)", "LessOrEqual": "(x0 <= x1)",
           "GreaterOrEqual": "(x0 >= x1)", "And": "(x0 != 0.0f && x1 != 0.0f)", "Or": "(x0 != 0.0f || x1 != 0.0f)",
           "Xor": "((x0 != 0.0f) != (x1 != 0.0f))", "Not": "(x0 == 0.0f)"}  # fmt: skip


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _gather_check(graph: Graph, node: Node) -> Optional[str]:
    data = graph.values[node.inputs[0]]
    if data.const is None and data.dtype != "float32":
        return "run-time data must be float32"
    if data.const is not None and data.const.dtype != np.float32 and not graph.is_const(node.inputs[1]):
        return "constant data of dtype %s (float32 only)" % data.const.dtype
    return None


@register(["Gather"], "generated C; int64/int32 indices, constant or run-time; negative indices count from the end",
          check=_gather_check, dtypes=("float32", "int64", "int32"), axis=ANY)
def lower_gather(L: Lowering, node: Node) -> None:
    data, indices = node.inputs[0], node.inputs[1]
    shape = L.value(data).shape
    axis = _axis(int(node.attrs.get("axis", 0)), len(shape))
    if L.graph.is_const(indices):
        raw = L.graph.const(indices).astype(np.int64)
        indices = L.const(np.where(raw < 0, raw + shape[axis], raw).reshape(-1), indices)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    index_type = "int" if L.value(indices).dtype == "int32" else "long long"
    kernel = csrc_more.gather(outer, shape[axis], inner, L.value(indices).size, index_type)
    L.source(kernel, [node.outputs[0], data, indices])


@register(["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not"],
          "generated C (broadcasting); bool result", dtypes=("float32", "bool"))
def lower_compare(L: Lowering, node: Node) -> None:
    ins = []
    for name in node.inputs:
        if L.graph.is_const(name):  # a constant of another dtype (int64 zero, ...) compares as float32 here
            data = L.graph.const(name)
            name = L.const(data.astype(bool if data.dtype == np.bool_ else np.float32), name)
        ins.append(name)
    out = node.outputs[0]
    types = [csrc_more.C_TYPES[L.value(n).dtype] for n in ins]
    kernel = csrc.elementwise(L.value(out).shape, [L.value(n).shape for n in ins], COMPARE[node.op], tag=node.op.lower(),
                              in_types=types, out_type="unsigned char")  # fmt: skip
    L.source(kernel, [out] + ins)


@register(["ArgMax", "ArgMin"], "generated C; int64 result", dtypes=("float32", "int64"),
          axis=ANY, keepdims=ANY, select_last_index=one_of(0, 1))
def lower_arg(L: Lowering, node: Node) -> None:
    x = node.inputs[0]
    shape = L.value(x).shape
    axis = _axis(int(node.attrs.get("axis", 0)), len(shape))
    outer, red, inner = int(np.prod(shape[:axis])), shape[axis], int(np.prod(shape[axis + 1:]))
    kernel = csrc_more.arg_reduce(outer, red, inner, node.op == "ArgMax", bool(node.attrs.get("select_last_index", 0)))
    L.source(kernel, [node.outputs[0], x])


@register(["InstanceNormalization"], "generated C; statistics per (N, C) plane", epsilon=ANY)
def lower_instance_norm(L: Lowering, node: Node) -> None:
    x, scale, bias = node.inputs
    shape = L.value(x).shape
    size = int(np.prod(shape[2:]))
    kernel = csrc_more.instance_norm(shape[0] * shape[1], shape[1], size, float(node.attrs.get("epsilon", 1e-5)))
    L.source(kernel, [node.outputs[0], x, scale, bias])
