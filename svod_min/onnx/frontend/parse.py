"""ONNX file -> :class:`~svod_min.onnx.ir.Graph`: load, check, bind dynamic dims, fold constants, infer shapes.

Old models (IR < 4) list every initializer among the graph inputs too: such an input is a
constant here, not something the caller feeds. Constants are folded on the protobuf level
(shape inference runs again afterwards), so ``Shape -> Gather -> Concat -> Reshape`` chains
and ``ConstantOfShape`` weights become plain initializers before any lowering sees them.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from ...error import IndexOutOfRangeError, ModelFileError, UnsupportedModelError
from .branch import inline_if
from .contracts import contract_violation
from .contrib import rewrite_contrib
from .einsum_syntax import refuse_bad_equations
from .fold_size import too_big_to_fold
from .functions import ROUNDS, attribute_value, expand_functions, set_default_attributes
from .indices import RULES as INDEX_RULES
from .indices import Operand, check_indices
from .inference_error import inference_failure
from .ir import Graph, Node, Value
from .loops import unroll_loop, unroll_scan
from .pins import deciding_inputs, pin_inputs, resolve_pins
from .quant_fold import dequantize_constant, fuse_qdq_groups, quantize_constant
from .quant_movement import move_quantized
from .selected_shapes import DeclaredShapes, selected_shapes
from .table import OpSpec

#: ONNX's integer element types: an input of one without a bound dim is told of --pin too.
INTEGER_TYPES = {onnx.TensorProto.INT32, onnx.TensorProto.INT64}
#: Folded results above this many elements stay nodes (a constant Conv on a 100 MB tensor is not folded).
FOLD_LIMIT = 1 << 26
#: Ops never folded: their result depends on more than their inputs, or they are control flow.
NEVER_FOLD = {
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "If",
    "Loop",
    "Scan",
    "Bernoulli",
}


def load_model(path: str) -> onnx.ModelProto:
    """The model with its external data, checked; ModelFileError for anything that is not a whole ONNX model."""
    if not os.path.isfile(path):
        raise ModelFileError("%s: no such file" % path)
    try:
        model = onnx.load(path, load_external_data=False)
    except Exception as exc:  # protobuf's DecodeError and friends: the file is not (all) a model
        raise ModelFileError(
            "%s: not an ONNX model, or truncated/corrupt (%s)" % (path, str(exc)[:200] or type(exc).__name__)
        ) from None
    if not model.graph.node and not model.graph.output:
        raise ModelFileError("%s: not an ONNX model (no graph): truncated, corrupt or another format" % path)
    _load_external_data(model, os.path.dirname(os.path.abspath(path)), path)
    refuse_bad_equations(model, path)  # before anything runs onnx's shape inference, which loops on some
    try:
        opset = opset_of(model)
    except UnsupportedModelError:
        opset = 0  # refused after the checker has had its say
    if opset:  # before the checker: it refuses onnxruntime's contrib ops of the default domain
        rewrite_contrib(model, opset)
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise ModelFileError(
            "%s: the ONNX checker refuses the model (truncated or corrupt?): %s"
            % (path, str(exc).splitlines()[0][:300])
        ) from None
    return model


def _load_external_data(model: onnx.ModelProto, base_dir: str, path: str) -> None:
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    for tensor in model.graph.initializer:
        if not uses_external_data(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        where = os.path.join(base_dir, info.get("location", ""))
        if not info.get("location") or not os.path.isfile(where):
            raise ModelFileError(
                "%s: initializer %r keeps its data in %r, which is missing"
                % (path, tensor.name, info.get("location", ""))
            )
    try:
        load_external_data_for_model(model, base_dir)
    except Exception as exc:
        raise ModelFileError("%s: external data cannot be read: %s" % (path, exc)) from None


def opset_of(model: onnx.ModelProto) -> int:
    """The default-domain opset the model imports."""
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    raise UnsupportedModelError("the model imports no ai.onnx opset")


def bind_inputs(model: onnx.ModelProto, dims: Mapping[str, int], shapes: Mapping[str, Sequence[int]]) -> List[str]:
    """Give every real input a static shape: ``--shape`` for a whole input, ``--dim`` for a named dim.

    Returns the real input names (inputs that are initializers are constants). A dim that stays
    unbound, a name that matches nothing, or a given shape that contradicts the model is an error.
    """
    inits = {t.name for t in model.graph.initializer}
    real = [i for i in model.graph.input if i.name not in inits]
    names = {i.name for i in real}
    unknown = sorted(set(shapes) - names)
    if unknown:
        raise ModelFileError("--shape names %s, not inputs of the model (inputs: %s)" % (unknown, sorted(names)))
    used_dims = set()
    for inp in real:
        _bind_one(inp, dims, shapes.get(inp.name), used_dims)
    stray = sorted(set(dims) - used_dims)
    if stray:
        raise ModelFileError("--dim names %s, which no input of the model has as a dynamic dim" % stray)
    return [i.name for i in real]


def _bind_one(inp: Any, dims: Mapping[str, int], shape: Optional[Sequence[int]], used: set) -> None:
    tt = inp.type.tensor_type
    if not inp.type.HasField("tensor_type") or not tt.HasField("shape"):
        if shape is None:
            raise ModelFileError(
                "input %r has no shape in the model: give it with --shape %s=D0,D1,..." % (inp.name, inp.name)
            )
        tt.shape.Clear()
        for _ in shape:
            tt.shape.dim.add()
    declared = list(tt.shape.dim)
    if shape is not None and len(shape) != len(declared):
        raise ModelFileError(
            "--shape %s=%s: the model's input has rank %d" % (inp.name, ",".join(map(str, shape)), len(declared))
        )
    for axis, dim in enumerate(declared):
        fixed = dim.dim_value if dim.HasField("dim_value") and dim.dim_value >= 0 else None
        symbol = dim.dim_param if dim.HasField("dim_param") and dim.dim_param else None
        want = shape[axis] if shape is not None else None
        if want is None and symbol is not None and symbol in dims:
            want = dims[symbol]
            used.add(symbol)
        if fixed is not None and want is not None and want != fixed:
            raise ModelFileError("input %r dim %d is %d in the model, not %d as given" % (inp.name, axis, fixed, want))
        value = fixed if fixed is not None else want
        if value is None:
            integer = tt.elem_type in INTEGER_TYPES  # likely an axes, a shape or bounds: its value may decide shapes
            raise ModelFileError(
                "input %r dim %d (%s) is dynamic: bind it with --dim %s=SIZE (or a range MIN..MAX) or --shape %s=..."
                % (inp.name, axis, symbol or "?", symbol or "NAME", inp.name)
                + (" (or, if its value decides shapes, --pin %s=V0,V1,...)" % inp.name if integer else "")
            )
        if value < 0:
            raise ModelFileError("input %r dim %d: %d is not a size (0 or more)" % (inp.name, axis, value))
        dim.Clear()
        dim.dim_value = int(value)


def infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        # check_type: an input of a dtype its op does not take (a float Not, uint8 Gather indices) is refused here,
        # before a fold of an empty result could drop the node unchecked, as onnxruntime refuses it at load
        return shape_inference.infer_shapes(model, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:
        _refuse_bad_constant_index(model)  # shape inference also trips on those; the refusal names the index
        raise ModelFileError(inference_failure(model, str(exc).splitlines()[0][:400], opset_of(model))) from None


def fold_constants(model: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    """Replace every node whose inputs are all constants (or whose result is a static shape) by initializers."""
    for _ in range(8):  # each round folds whole chains; a new shape may unlock one more round
        model = infer(model)
        if not _fold_round(model, opset):
            return model
    return infer(model)


def _fold_round(model: onnx.ModelProto, opset: int) -> bool:
    consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    shapes = _static_shapes(model)
    empties = _empty_values(model)
    keep, folded = [], False
    for node in model.graph.node:
        branch = _unrolled(node, consts, shapes, model, opset)
        if branch is not None:
            keep.extend(branch)
            folded = True
            continue
        results = _try_fold(node, dict(empties, **consts), shapes, opset)
        if results is None and all(name in empties for name in node.output if name) and any(node.output):
            _refuse_contradiction(node, len(keep), shapes, consts, opset)  # the node's contract still holds
            results = [empties[name] if name else np.zeros(0, np.float32) for name in node.output]
        elif results is not None and node.op_type == "ReduceMean" and _known(node.input[0], empties, consts).size == 0:
            # the spec leaves a mean over nothing undefined; onnxruntime gives 0 (numpy and onnx's reference NaN)
            results = [np.zeros_like(r) for r in results]
        if results is None:
            keep.append(node)
            continue
        folded = True
        for name, data in zip(node.output, results):
            if name:
                consts[name] = np.asarray(data)
                model.graph.initializer.append(numpy_helper.from_array(np.asarray(data), name))
    if folded:
        del model.graph.node[:]
        model.graph.node.extend(keep)
        inits = {t.name for t in model.graph.initializer}
        kept_vi = [vi for vi in model.graph.value_info if vi.name not in inits]
        del model.graph.value_info[:]
        model.graph.value_info.extend(kept_vi)
    return folded


def _unrolled(
    node: Any, consts: Dict[str, np.ndarray], shapes: Dict[str, Tuple[int, ...]], model: onnx.ModelProto, opset: int
) -> Optional[List[Any]]:
    """The nodes replacing an If of a constant condition (its branch), a Loop of a constant trip count or a Scan of
    static length (their bodies unrolled: :mod:`.loops`); None for every other node."""
    if node.domain not in ("", "ai.onnx"):
        return None
    if _constant_if(node, consts):
        return inline_if(node, consts[node.input[0]], model)
    if node.op_type == "Loop":
        return unroll_loop(node, consts, model, opset)
    if node.op_type == "Scan":
        return unroll_scan(node, shapes, model, opset)
    return None


def _constant_if(node: Any, consts: Dict[str, np.ndarray]) -> bool:
    return node.op_type == "If" and node.domain in ("", "ai.onnx") and bool(node.input) and node.input[0] in consts


def _refuse_contradiction(
    node: Any, index: int, shapes: Dict[str, Tuple[int, ...]], consts: Dict[str, np.ndarray], opset: int
) -> None:
    """A node about to fold into its empty result is held to its shape contract first (frontend/contracts.py):
    a Gemm C or Conv bias that does not fit the empty result is a fault onnxruntime refuses."""
    values = {}
    for name in list(node.input) + list(node.output):
        shape = tuple(consts[name].shape) if name in consts else shapes.get(name)
        if name and shape is not None:
            values[name] = Value(name, tuple(int(d) for d in shape), "float32")
    ir = _node(node, index)
    if not all(n in values for n in list(ir.inputs) + list(ir.outputs) if n):
        return  # a shape unknown: nothing to hold the node to
    why = contract_violation(Graph(values, [ir], [], [], opset), ir)
    if why is not None:
        raise ModelFileError("%s, opset %d: %s" % (ir.label(), opset, why))


def _static_shapes(model: onnx.ModelProto) -> Dict[str, Tuple[int, ...]]:
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        shape = value_shape(vi)
        if shape is not None:
            out[vi.name] = shape
    return out


def _known(name: str, empties: Dict[str, np.ndarray], consts: Dict[str, np.ndarray]) -> np.ndarray:
    return empties[name] if name in empties else consts[name]


def _empty_values(model: onnx.ModelProto) -> Dict[str, np.ndarray]:
    """Every tensor of a static shape with a 0-sized dim, as its (only possible) value: an empty tensor's contents
    are known at build time, so a node that reads only known tensors (a reduction over nothing, a MatMul with
    K = 0) or writes only empty ones (a Slice that selects nothing) folds into a constant."""
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        data = _empty_of(vi)
        if data is not None:
            out[vi.name] = data
    return out


def _empty_of(vi: Any) -> Optional[np.ndarray]:
    """The value of an empty tensor of a number or bool dtype (None for any other tensor: strings stay nodes, which
    the op table refuses by name)."""
    shape = value_shape(vi)
    elem = vi.type.tensor_type.elem_type
    if shape is None or 0 not in shape or not elem:
        return None
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
    if dtype.kind not in "biuf":
        return None
    try:
        return np.zeros(shape, dtype)
    except ValueError:  # numpy cannot hold even the empty array: its other dims multiply past 2^63 bytes
        raise ModelFileError(
            "tensor %r has shape %s: its dims multiply past what a buffer can address" % (vi.name, list(shape))
        ) from None


def value_shape(vi: Any) -> Optional[Tuple[int, ...]]:
    """A ValueInfo's static shape, or None when any dim is unknown."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    dims = []
    for d in tt.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            return None
        dims.append(int(d.dim_value))
    return tuple(dims)


def _try_fold(
    node: Any, consts: Dict[str, np.ndarray], shapes: Dict[str, Tuple[int, ...]], opset: int
) -> Optional[List[np.ndarray]]:
    if node.domain not in ("", "ai.onnx") or node.op_type in NEVER_FOLD:
        return None
    if node.op_type in ("Shape", "Size") and node.input[0] in shapes and node.input[0] not in consts:
        return _shape_of(node, shapes[node.input[0]])
    if not all((not name) or name in consts for name in node.input):
        return None
    if node.op_type == "Constant" and not node.attribute:
        return None
    if too_big_to_fold(node, consts, shapes, FOLD_LIMIT):  # evaluated, it would be allocated here in numpy
        return None
    if _breaks_index_rule(node, consts, opset):
        return None  # the reference evaluator wraps or clamps some such indices: the op table refuses the node
    if node.op_type in ("QuantizeLinear", "DequantizeLinear"):  # the reference lacks opsets 10-18; round as onnxruntime
        return (quantize_constant if node.op_type == "QuantizeLinear" else dequantize_constant)(node, consts)
    try:
        import warnings

        from onnx.reference import ReferenceEvaluator

        with warnings.catch_warnings():  # numpy's "mean of empty slice" for a reduction over nothing, and such
            warnings.simplefilter("ignore", RuntimeWarning)
            results = ReferenceEvaluator(_one_node_model(node, consts, opset)).run(
                None, {n: consts[n] for n in node.input if n}
            )
    except Exception:  # not foldable here: the lowering sees the node and names what it lacks
        return None
    if any(np.asarray(r).size > FOLD_LIMIT for r in results):
        return None
    return [np.asarray(r) for r in results]


def _refuse_bad_constant_index(model: onnx.ModelProto) -> None:
    """IndexOutOfRangeError for the first node whose constant indices break their op's rule (frontend/indices.py),
    with the shapes a lenient inference finds; nothing when every such index is in range."""
    try:
        lenient = shape_inference.infer_shapes(model, strict_mode=False, data_prop=False)
    except Exception:
        return
    consts = {t.name: numpy_helper.to_array(t) for t in lenient.graph.initializer if t.name}
    shapes = _static_shapes(lenient)
    opset = opset_of(lenient)
    for i, n in enumerate(lenient.graph.node):
        if n.op_type not in INDEX_RULES or n.domain not in ("", "ai.onnx"):
            continue
        operands = [
            Operand(name, tuple(consts[name].shape) if name in consts else shapes.get(name), consts.get(name))
            for name in n.input
        ]
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        bad = check_indices(n.op_type, attrs, operands, opset)
        if bad is not None:
            raise IndexOutOfRangeError("%s, opset %d: %s" % (_node(n, i).label(), opset, bad.message()))


def _breaks_index_rule(node: Any, consts: Dict[str, np.ndarray], opset: int) -> bool:
    if node.op_type not in INDEX_RULES:
        return False
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    operands = [Operand(n, tuple(consts[n].shape) if n else None, consts[n] if n else None) for n in node.input]
    return check_indices(node.op_type, attrs, operands, opset) is not None


def _shape_of(node: Any, shape: Tuple[int, ...]) -> List[np.ndarray]:
    if node.op_type == "Size":
        return [np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    rank = len(shape)
    start = attrs.get("start", 0)
    end = attrs.get("end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(shape[start:end], dtype=np.int64)]


def to_graph(model: onnx.ModelProto, inputs: List[str], opset: int) -> Graph:
    """The IR of a folded, shape-inferred model (every runtime value's shape must be static)."""
    values: Dict[str, Value] = {}
    for t in model.graph.initializer:
        data = numpy_helper.to_array(t)
        values[t.name] = Value(t.name, tuple(int(d) for d in data.shape), data.dtype.name, data)
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        if vi.name in values:
            continue
        shape = value_shape(vi)
        elem = vi.type.tensor_type.elem_type
        if shape is None or not elem:
            continue
        values[vi.name] = Value(vi.name, shape, helper.tensor_dtype_to_np_dtype(elem).name)
    nodes = [_node(n, i) for i, n in enumerate(model.graph.node)]
    graph = Graph(values, nodes, list(inputs), [o.name for o in model.graph.output], opset)
    _check_static(graph, opset)
    return graph


def _node(n: Any, index: int) -> Node:
    attrs = {a.name: attribute_value(a) for a in n.attribute}
    return Node(n.op_type, n.name, index, list(n.input), list(n.output), attrs, n.domain)


def _check_static(graph: Graph, opset: int) -> None:
    """Every tensor a node reads or that someone uses has a static shape; unused outputs without one are dropped."""
    used = {n for node in graph.nodes for n in node.inputs if n} | set(graph.outputs)
    for node in graph.nodes:
        node.outputs = [n if n in graph.values or n in used else "" for n in node.outputs]
        for name in list(node.inputs) + list(node.outputs):
            if name and name not in graph.values:
                deciding = deciding_inputs(graph, node, name)
                raise UnsupportedModelError(
                    "%s, opset %d: tensor %r has no static shape after shape inference " % (node.label(), opset, name)
                    + (
                        "(its shape depends on the value of input %s: build with %s, the values the bundle will be "
                        'fed; docs/onnx.md, "Inputs that decide shapes")'
                        % (", ".join(map(repr, deciding)), " ".join("--pin %s=..." % d for d in deciding))
                        if deciding
                        else "(bind the inputs' dims with --dim/--shape)"
                    )
                )
    for what, names in (("input", graph.inputs), ("output", graph.outputs)):
        for name in names:  # checked here too: a node folded away (an empty result) leaves no node to check them
            v = graph.values.get(name)
            if v is not None and np.dtype(v.dtype).kind not in "biuf" and v.dtype != "bfloat16":  # ml_dtypes' kind V
                raise UnsupportedModelError(
                    "opset %d: model %s %r has dtype %s: svod_min's tensors hold numbers and bools"
                    % (opset, what, name, v.dtype)
                )


def read_graph(
    path: str,
    dims: Mapping[str, int],
    shapes: Mapping[str, Sequence[int]],
    table: Optional[Mapping[str, OpSpec]] = None,
    pins: Optional[Mapping[str, Any]] = None,
) -> Graph:
    """``path`` as an IR graph with the given dims bound and constants folded; with the op ``table`` the lowering
    fills, nodes it cannot lower are expanded into their ONNX function bodies first (:mod:`.functions`). ``pins``:
    inputs whose values the build takes as known (:mod:`.pins`; their constants read back with
    :func:`.pins.pinned_values`)."""
    model = load_model(path)
    if not model.graph.output:  # nothing to compute: onnxruntime refuses it too
        raise ModelFileError("%s: the model's graph has no outputs" % path)
    opset = opset_of(model)
    pinned = resolve_pins(model, pins or {}, shapes)
    inputs = bind_inputs(model, dims, dict(shapes, **{n: list(v.shape) for n, v in pinned.items()}))
    declared = drop_shape_hints(model)
    _empty_inputs_as_constants(model, inputs)
    pin_inputs(model, pinned)
    if table is not None:
        set_default_attributes(model, opset, table)
    if opset >= 10:  # QLinearMatMul's first opset
        move_quantized(model)  # first: a Concat's or MaxPool's DequantizeLinear outputs then feed the groups
        fuse_qdq_groups(model)
    model = fold_constants(model, opset)
    for _ in range(ROUNDS if table is not None else 0):
        expanded = expand_functions(model, opset, table or {})
        if expanded is None:
            break
        model = fold_constants(expanded, opset)
    for _ in range(ROUNDS):  # what follows a Compress or MaxUnpool is inferred (and folded) from its shape now
        if not selected_shapes(model, _static_shapes(model)):
            break
        model = fold_constants(model, opset)
    if _pad1_shapes(model):
        model = infer(model)  # what follows a Pad-1 is inferred from its shape now
    check_declared_outputs(model, declared)
    return to_graph(model, inputs, opset)


def _pad1_shapes(model: onnx.ModelProto) -> bool:
    """The output shapes of Pad-1 nodes, which onnx's shape inference lacks (their pads are the ``paddings``
    attribute): the input's dims plus the pads at both ends. True when one was set."""
    shapes = _static_shapes(model)
    declared = DeclaredShapes(model)
    found = False
    for node in model.graph.node:
        pads = [list(a.ints) for a in node.attribute if a.name == "paddings"]
        src = shapes.get(node.input[0]) if node.input else None
        if node.op_type != "Pad" or not pads or src is None or node.output[0] in shapes:
            continue
        rank = len(src)
        dims = [d + pads[0][i] + pads[0][i + rank] for i, d in enumerate(src)] if len(pads[0]) == 2 * rank else []
        if len(dims) != rank or min(dims, default=0) < 0:
            continue  # refused later, naming the node (no static shape)
        if declared.declare(node.output[0], node.input[0], dims):
            found = True
    return found


def drop_shape_hints(model: onnx.ModelProto) -> Dict[str, Tuple[int, Optional[List[Optional[int]]]]]:
    """Clear the types the model declares for intermediates and outputs; each output's declared elem type and dims
    (None where unknown: a symbol, -1) are returned for :func:`check_declared_outputs`.

    Exporters leave stale ``value_info`` and write ``-1`` or ``0`` for an unknown dim; onnxruntime takes declared
    shapes as hints and runs such models. Strict shape inference would take them as facts and refuse, so shapes are
    inferred from the bound inputs alone. A hint is also never trusted where inference finds nothing: lowering sees
    inferred shapes only.
    """
    del model.graph.value_info[:]
    declared: Dict[str, Tuple[int, Optional[List[Optional[int]]]]] = {}
    names = {i.name for i in model.graph.input} | {t.name for t in model.graph.initializer}
    for out in model.graph.output:
        tt = out.type.tensor_type
        if not out.type.HasField("tensor_type") or out.name in names:
            continue  # an output that is an input or a constant keeps what it is
        dims = None
        if tt.HasField("shape"):
            dims = [int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else None for d in tt.shape.dim]
        declared[out.name] = (tt.elem_type, dims)
        tt.ClearField("shape")
        tt.elem_type = onnx.TensorProto.UNDEFINED
    return declared


def check_declared_outputs(
    model: onnx.ModelProto, declared: Mapping[str, Tuple[int, Optional[List[Optional[int]]]]]
) -> None:
    """Refuse an output whose declared elem type differs from the inferred one (onnxruntime refuses it too); warn
    where its declared shape differs (the inferred one is used: onnxruntime too runs such a model and returns the
    computed shape)."""
    import warnings

    for out in model.graph.output:
        if out.name not in declared:
            continue
        elem, want = declared[out.name]
        got_elem = out.type.tensor_type.elem_type
        if elem and got_elem and elem != got_elem:
            raise ModelFileError(
                "output %r is declared %s, but the model computes %s"
                % (
                    out.name,
                    onnx.TensorProto.DataType.Name(elem).lower(),
                    onnx.TensorProto.DataType.Name(got_elem).lower(),
                )
            )
        got = value_shape(out)
        if want is None or got is None:
            continue
        if len(want) != len(got) or any(w is not None and w != g for w, g in zip(want, got)):
            warnings.warn(
                "output %r is declared with shape %s, but the bound inputs give %s: the model's declaration is a "
                "stale hint, %s is used" % (out.name, ["?" if w is None else w for w in want], list(got), list(got)),
                stacklevel=2,
            )


def _empty_inputs_as_constants(model: onnx.ModelProto, inputs: List[str]) -> None:
    """Nodes read an empty input (a 0-sized dim) as the constant it is: an empty Reduce ``axes`` input is then the
    attribute-like constant the lowering needs, and what reads only known tensors folds. The input itself stays (it
    is fed, and holds 0 bytes)."""
    empty = {}
    for vi in model.graph.input:
        data = _empty_of(vi) if vi.name in inputs else None
        if data is not None:
            empty[vi.name] = vi.name + "~empty"
            model.graph.initializer.append(numpy_helper.from_array(data, empty[vi.name]))
    for node in model.graph.node if empty else ():
        for i, name in enumerate(node.input):
            if name in empty:
                node.input[i] = empty[name]


def _one_node_model(node: Any, consts: Dict[str, np.ndarray], opset: int) -> onnx.ModelProto:
    """``node`` alone in a model importing ``opset``: the reference evaluator given a bare node takes each op's
    newest version whatever opset it is told (opset 9's Unsqueeze with its ``axes`` attribute failed to fold)."""
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(consts[n].dtype), consts[n].shape)
        for n in dict.fromkeys(node.input)
        if n
    ]
    outputs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output if n]
    graph = helper.make_graph([node], "fold", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
