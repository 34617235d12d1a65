"""Ops that ONNX defines as functions of other ops, expanded where svod_min has no lowering of their own.

Many ops of the current opsets carry a function body in their schema (Attention, AffineGrid, RMSNormalization,
RotaryEmbedding, DynamicQuantizeLinear, the window functions, ...); some bodies depend on the node's attributes and
input types (context-dependent functions). A node whose op the table lacks, or whose attribute values or dtypes the
table's lowering does not take, is replaced by its function body before constants are folded, as onnxruntime
inlines functions it has no kernel for. The body's ops then meet the table like any other node, so a body that
uses an op svod_min lacks is still refused by name (the refusal names the expanded node's op).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Set

import onnx
from onnx import defs, helper, inliner, numpy_helper

from .table import OpSpec

#: The private domain the bodies are registered under while onnx's inliner replaces the calls.
_DOMAIN = "svod.function"
#: Bodies may call other function ops (Attention's body uses Softmax, which may call ...): a few rounds suffice.
ROUNDS = 4


def expand_functions(model: onnx.ModelProto, opset: int, table: Mapping[str, OpSpec]) -> Optional[onnx.ModelProto]:
    """``model`` (shape-inferred: context-dependent bodies depend on the inputs' types) with every node that the op
    ``table`` cannot lower and ONNX defines as a function replaced by that function's body; None where there is
    none. One round: a body's own function ops are expanded by the next round, after the caller folds constants
    (a Range of static sizes in Attention's body folds; its own body is a Loop)."""
    if not _any_candidate(model):
        return None
    types = _value_types(model)
    constants = {t.name for t in model.graph.initializer} | {
        o for n in model.graph.node if n.op_type == "Constant" for o in n.output
    }
    calls = [
        (i, body)
        for i, node in enumerate(model.graph.node)
        for body in [_body(node, opset, types, table, constants)]
        if body
    ]
    return _inline(model, calls, opset) if calls else None


def set_default_attributes(model: onnx.ModelProto, opset: int, table: Mapping[str, OpSpec]) -> None:
    """Nodes of function ops the table lacks get their schema's defaults written out before anything infers
    shapes: onnx infers such a node through its body, which fails where the body refers to an unset attribute
    (MeanVarianceNormalization's axes)."""
    for node in model.graph.node:
        if node.domain in ("", "ai.onnx") and node.op_type not in table and _schema_function(node.op_type):
            _set_defaults(node, opset)


def _set_defaults(node: Any, opset: int) -> None:
    """``node`` given every attribute its schema has a default for: a body refers to its attributes by name
    (HannWindow's ``periodic``), and onnx's inliner drops a reference the call leaves unset."""
    present = {a.name for a in node.attribute}
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        return  # no such op at this opset: the checker or the table names it
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if name not in present and default.type != onnx.AttributeProto.UNDEFINED:
            node.attribute.append(default)


def _any_candidate(model: onnx.ModelProto) -> bool:
    return any(node.domain in ("", "ai.onnx") and _schema_function(node.op_type) for node in model.graph.node)


def _schema_function(op: str) -> bool:
    try:
        schema = defs.get_schema(op, "")
    except defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def _body(
    node: Any, opset: int, types: Dict[str, onnx.TypeProto], table: Mapping[str, OpSpec], constants: Set[str]
) -> Optional[onnx.FunctionProto]:
    """The function body replacing ``node``, or None where the table lowers it (or ONNX gives no body)."""
    if node.domain not in ("", "ai.onnx") or _lowered(node, types, table, constants):
        return None
    try:
        schema = defs.get_schema(node.op_type, opset, "")
    except defs.SchemaError:
        return None
    version = _body_version(schema.context_dependent_function_opset_versions, opset)
    if version is not None:
        inputs = [types.get(name, onnx.TypeProto()).SerializeToString() for name in node.input]
        if any(name and name not in types for name in node.input):
            return None  # an input's type unknown: the body cannot be made; the table refuses the node
        try:
            raw = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(), inputs)
        except Exception:  # onnx refuses to make the body (an attribute it rejects): the table names the node
            return None
        return _parsed(raw)
    version = _body_version(schema.function_opset_versions, opset)
    if version is not None:
        return _parsed(schema.get_function_with_opset_version(version))
    return None


def _body_version(versions: List[int], opset: int) -> Optional[int]:
    """The newest body written for an opset the model imports (bodies are written against one opset each)."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


def _parsed(raw: Any) -> Optional[onnx.FunctionProto]:
    if isinstance(raw, onnx.FunctionProto):
        return raw if raw.node else None
    body = onnx.FunctionProto()
    body.ParseFromString(raw)
    return body if body.node else None


def _lowered(node: Any, types: Dict[str, onnx.TypeProto], table: Mapping[str, OpSpec], constants: Set[str]) -> bool:
    """The table lowers this op with these attribute values and (where known) these run-time dtypes: constant
    operands (a Reduce's int64 axes) are the op's own business, as the table's check has them."""
    spec = table.get(node.op_type)
    if spec is None:
        return False
    dtypes = []
    for name in list(node.input) + list(node.output):
        kind = types.get(name) if name and name not in constants else None
        if kind is not None and kind.tensor_type.elem_type:
            dtypes.append((name, helper.tensor_dtype_to_np_dtype(kind.tensor_type.elem_type).name))
    return spec.refusal({a.name: attribute_value(a) for a in node.attribute}, dtypes) is None


def attribute_value(attr: Any) -> Any:
    """An attribute's value as the IR holds it: strings decoded, tensors as arrays (the parser's and the op table's
    reading of a node)."""
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", "replace") for v in value]
    return value


def _value_types(model: onnx.ModelProto) -> Dict[str, onnx.TypeProto]:
    out: Dict[str, onnx.TypeProto] = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if vi.type.HasField("tensor_type"):
            out[vi.name] = vi.type
    for t in model.graph.initializer:
        out[t.name] = helper.make_tensor_type_proto(t.data_type, list(t.dims))
    return out


def _inline(model: onnx.ModelProto, calls: List[Any], opset: int) -> Optional[onnx.ModelProto]:
    """Each (node index, body) registered as a model-local function and called (the node given its attributes'
    defaults), then inlined by onnx; the calls onnx's inliner leaves in place (a body it cannot inline) are put back
    as they were, for the table to refuse."""
    work = onnx.ModelProto()
    work.CopyFrom(model)  # the one copy: the caller's model is kept whole if a call cannot be inlined
    for k, (index, body) in enumerate(calls):
        node = work.graph.node[index]
        _set_defaults(node, opset)
        body.name = "%s_%d" % (node.op_type, k)
        body.domain = _DOMAIN
        if not any(o.domain in ("", "ai.onnx") for o in body.opset_import):
            body.opset_import.add(domain="", version=opset)
        work.functions.append(body)
        node.op_type = body.name
        node.domain = _DOMAIN
    work.opset_import.add(domain=_DOMAIN, version=1)
    try:  # a body written against an older opset is converted to the model's (ReduceSum's axes moved, ...)
        expanded = inliner.inline_local_functions(work, convert_version=True)
    except Exception:
        expanded = inliner.inline_local_functions(work)
    left = {node.op_type for node in expanded.graph.node if node.domain == _DOMAIN}
    if left:
        kept = [(i, body) for i, body in calls if body.name not in left]
        return _inline(model, kept, opset) if kept else None
    del expanded.functions[:]
    imports = [o for o in expanded.opset_import if o.domain != _DOMAIN]
    del expanded.opset_import[:]
    expanded.opset_import.extend(imports)
    return expanded
