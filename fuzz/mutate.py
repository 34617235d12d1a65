"""Graph-level mutations of an ONNX model: attributes, shapes, constants, dtypes, edges, nodes, the opset.

Each mutator edits the ``onnx.ModelProto`` in place with the choices of one ``random.Random`` and returns a line
saying what it did, or None where the model offers it nothing to mutate (no attribute, no initializer ...). The
values are the ones that break code: 0, 1, -1, the bounds of int32/int64, NaN and infinities, sizes that are huge
or empty, indices just past either end of an axis.
"""

from __future__ import annotations

import random
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

Mutator = Callable[[onnx.ModelProto, random.Random], Optional[str]]

INTS = (0, 1, -1, 2, 3, -2, 7, 64, 1 << 31, -(1 << 31), (1 << 31) - 1, 1 << 40, (1 << 63) - 1, -(1 << 63))
FLOATS = (0.0, -0.0, 1.0, -1.0, 0.5, 1e-30, 1e30, 3.4e38, float("nan"), float("inf"), float("-inf"))
STRINGS = (
    "",
    "NOTSET",
    "SAME_UPPER",
    "SAME_LOWER",
    "VALID",
    "linear",
    "nearest",
    "cubic",
    "reflect",
    "edge",
    "wrap",
    "constant",
    "tanh",
    "none",
    "half_pixel",
    "align_corners",
    "asymmetric",
    "floor",
    "ceil",
    "round_prefer_floor",
    "Relu",
    "Tanh",
    "Sigmoid",
    "forward",
    "reverse",
    "bidirectional",
    "\xff" * 3,
)
DIMS = (0, 1, 2, 3, 5, 17, 1 << 20, 1 << 31, 1 << 40, -1)
DTYPES = (
    TensorProto.FLOAT,
    TensorProto.DOUBLE,
    TensorProto.FLOAT16,
    TensorProto.INT64,
    TensorProto.INT32,
    TensorProto.INT8,
    TensorProto.UINT8,
    TensorProto.BOOL,
    TensorProto.BFLOAT16,
    TensorProto.STRING,
)


def _pick_int(rng: random.Random, near: Optional[int] = None) -> int:
    """An int64 value: one of :data:`INTS`, or one near ``near``."""
    if near is not None and rng.random() < 0.5:
        return max(min(near + rng.choice((-2, -1, 1, 2, 100)), (1 << 63) - 1), -(1 << 63))
    return rng.choice(INTS)


def _value_names(model: onnx.ModelProto) -> List[str]:
    names = [i.name for i in model.graph.input] + [t.name for t in model.graph.initializer]
    for node in model.graph.node:
        names += [o for o in node.output if o]
    return list(dict.fromkeys(names))


def _nodes_with(model: onnx.ModelProto, want: Callable[[Any], bool]) -> List[Any]:
    return [n for n in model.graph.node if want(n)]


# -- attributes ------------------------------------------------------------------------------------------------


def attr_value(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """One attribute gets another value of its own type (an element of a list, the list's length, a string)."""
    nodes = _nodes_with(model, lambda n: any(a.type != AttributeProto.GRAPH for a in n.attribute))
    if not nodes:
        return None
    node = rng.choice(nodes)
    attr = rng.choice([a for a in node.attribute if a.type != AttributeProto.GRAPH])
    if attr.type == AttributeProto.INT:
        attr.i = _pick_int(rng, attr.i)
        what = attr.i
    elif attr.type == AttributeProto.FLOAT:
        attr.f = rng.choice(FLOATS)
        what = attr.f
    elif attr.type == AttributeProto.STRING:
        attr.s = rng.choice(STRINGS).encode("utf-8", "surrogatepass")
        what = attr.s
    elif attr.type == AttributeProto.INTS:
        values = list(attr.ints)
        _mutate_list(values, rng, lambda: _pick_int(rng, values[0] if values else None))
        del attr.ints[:]
        attr.ints.extend(values)
        what = values
    elif attr.type == AttributeProto.FLOATS:
        values = list(attr.floats)
        _mutate_list(values, rng, lambda: rng.choice(FLOATS))
        del attr.floats[:]
        attr.floats.extend(values)
        what = values
    elif attr.type == AttributeProto.TENSOR:
        what = _mutate_tensor(attr.t, rng)
    else:
        return None
    return "attr value: %s.%s = %r" % (_label(node), attr.name, what)


def _mutate_list(values: List[Any], rng: random.Random, fresh: Callable[[], Any]) -> None:
    roll = rng.random()
    if values and roll < 0.5:
        values[rng.randrange(len(values))] = fresh()
    elif values and roll < 0.7:
        del values[rng.randrange(len(values))]
    elif roll < 0.9:
        values.insert(rng.randrange(len(values) + 1), fresh())
    else:
        del values[:]


def attr_type(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """One attribute keeps its name and gets a value of another type (int <-> float <-> list <-> string)."""
    nodes = _nodes_with(model, lambda n: len(n.attribute) > 0)
    if not nodes:
        return None
    node = rng.choice(nodes)
    index = rng.randrange(len(node.attribute))
    name = node.attribute[index].name
    value = rng.choice([rng.choice(INTS), rng.choice(FLOATS), [1, 2], [0.5], "x", [b"a"]])
    node.attribute[index].CopyFrom(helper.make_attribute(name, value))
    return "attr type: %s.%s = %r" % (_label(node), name, value)


def attr_remove(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    nodes = _nodes_with(model, lambda n: len(n.attribute) > 0)
    if not nodes:
        return None
    node = rng.choice(nodes)
    index = rng.randrange(len(node.attribute))
    name = node.attribute[index].name
    del node.attribute[index]
    return "attr removed: %s.%s" % (_label(node), name)


def attr_add(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """An attribute the op's table entry names (or a stray one) is added with a random value."""
    from svod_min.onnx.build import OPS

    if not model.graph.node:
        return None
    node = rng.choice(list(model.graph.node))
    spec = OPS.get(node.op_type)
    known = [a for a in (spec.attrs if spec else {}) if not a.startswith("_")]
    present = {a.name for a in node.attribute}
    names = [a for a in known if a not in present] or ["svod_fuzz_stray"]
    name = rng.choice(names)
    value = rng.choice(
        [
            rng.choice(INTS),
            rng.choice(FLOATS),
            [rng.choice(INTS) for _ in range(rng.randrange(1, 5))],
            rng.choice(STRINGS),
        ]
    )
    node.attribute.append(helper.make_attribute(name, value))
    return "attr added: %s.%s = %r" % (_label(node), name, value)


# -- shapes and dtypes of the graph's inputs --------------------------------------------------------------------


def _runtime_inputs(model: onnx.ModelProto) -> List[Any]:
    inits = {t.name for t in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def input_dim(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """One dim of a fed input: 0, 1, huge, off by one, symbolic; or the input's rank changes."""
    inputs = [i for i in _runtime_inputs(model) if i.type.HasField("tensor_type")]
    if not inputs:
        return None
    inp = rng.choice(inputs)
    shape = inp.type.tensor_type.shape
    dims = shape.dim
    roll = rng.random()
    if roll < 0.15:
        dims.add().dim_value = rng.choice((1, 2, 3))
        what = "rank + 1"
    elif roll < 0.25 and len(dims):
        del dims[rng.randrange(len(dims))]
        what = "rank - 1"
    elif roll < 0.3 and len(dims):
        dims[rng.randrange(len(dims))].dim_param = "n"
        what = "symbolic"
    elif len(dims):
        k = rng.randrange(len(dims))
        old = dims[k].dim_value
        new = rng.choice(DIMS) if rng.random() < 0.7 else max(old + rng.choice((-1, 1, 2)), 0)
        dims[k].dim_value = new
        what = "dim %d: %d -> %d" % (k, old, new)
    else:
        return None
    _forget_shapes(model)
    return "input shape: %s %s" % (inp.name, what)


def input_dtype(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    inputs = [i for i in _runtime_inputs(model) if i.type.HasField("tensor_type")]
    if not inputs:
        return None
    inp = rng.choice(inputs)
    inp.type.tensor_type.elem_type = rng.choice(DTYPES)
    _forget_shapes(model)
    return "input dtype: %s -> %s" % (inp.name, TensorProto.DataType.Name(inp.type.tensor_type.elem_type))


def _forget_shapes(model: onnx.ModelProto) -> None:
    """Inferred shapes recorded in the model would contradict the mutation: :func:`reinfer` makes them again."""
    del model.graph.value_info[:]


def reinfer(model: onnx.ModelProto) -> None:
    """The outputs' types as shape inference sees the (mutated) graph; where it cannot tell, the old type stays
    (the checker wants a shape on every output, and svod_min infers its own anyway)."""
    del model.graph.value_info[:]
    bare = onnx.ModelProto()
    bare.CopyFrom(model)
    for out in bare.graph.output:
        out.type.tensor_type.ClearField("shape")
    try:
        inferred = onnx.shape_inference.infer_shapes(bare)
    except Exception:  # noqa: BLE001 - a graph inference rejects keeps its old output types
        return
    types = {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    for out in model.graph.output:
        got = types.get(out.name)
        if got is not None and got.tensor_type.HasField("shape") and got.tensor_type.elem_type:
            out.type.CopyFrom(got)
        elif not out.type.tensor_type.HasField("shape"):
            out.type.tensor_type.shape.SetInParent()


# -- constants: initializers and Constant nodes -----------------------------------------------------------------


def _tensors(model: onnx.ModelProto) -> List[Tuple[str, TensorProto]]:
    found = [(t.name, t) for t in model.graph.initializer]
    for node in model.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.type == AttributeProto.TENSOR:
                    found.append((node.output[0] if node.output else node.name, a.t))
    return found


def const_value(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """Values of an initializer or Constant: NaN/inf, indices past either end, huge, negative, zero."""
    tensors = _tensors(model)
    if not tensors:
        return None
    name, tensor = rng.choice(tensors)
    return "const value: %s %s" % (name, _mutate_tensor(tensor, rng))


def _mutate_tensor(tensor: TensorProto, rng: random.Random) -> str:
    try:
        data = numpy_helper.to_array(tensor).copy()
    except Exception:  # a tensor numpy cannot hold (strings of odd types ...): leave it
        return "unchanged"
    if data.size == 0 or data.dtype.kind not in "fiub":
        return "unchanged"
    flat = data.reshape(-1)
    count = 1 if rng.random() < 0.7 else flat.size
    picks = [rng.randrange(flat.size) for _ in range(count)]
    if data.dtype.kind == "f":
        value: Any = rng.choice(FLOATS)
    elif data.dtype.kind == "b":
        value = rng.random() < 0.5
    else:
        info = np.iinfo(data.dtype)
        near = int(flat[picks[0]])
        value = int(
            np.clip(rng.choice((_pick_int(rng, near), near * 2 + 1, -near - 1, info.max, info.min)), info.min, info.max)
        )
    for p in picks:
        flat[p] = value
    tensor.CopyFrom(numpy_helper.from_array(data, tensor.name))
    return "[%s] = %r" % ("all" if count > 1 else picks[0], value)


def const_shape(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """An initializer or Constant gets another shape: an element fewer or more, a dim added, zero elements."""
    tensors = _tensors(model)
    if not tensors:
        return None
    name, tensor = rng.choice(tensors)
    try:
        data = numpy_helper.to_array(tensor)
    except Exception:
        return None
    roll = rng.random()
    flat = data.reshape(-1)
    if roll < 0.3:
        new = flat[:-1] if flat.size else flat
    elif roll < 0.55:
        new = np.concatenate([flat, flat[:1] if flat.size else np.zeros(1, data.dtype)])
    elif roll < 0.75:
        new = data.reshape((1,) + data.shape)
    elif roll < 0.9:
        new = np.zeros((0,) + data.shape[1:], data.dtype)
    else:
        new = flat.reshape(-1)[:1].reshape(()) if flat.size else flat
    tensor.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(new), tensor.name))
    _forget_shapes(model)
    return "const shape: %s %s -> %s" % (name, list(data.shape), list(new.shape))


def const_dtype(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    tensors = _tensors(model)
    if not tensors:
        return None
    name, tensor = rng.choice(tensors)
    try:
        data = numpy_helper.to_array(tensor)
    except Exception:
        return None
    to = rng.choice((np.float64, np.float16, np.int64, np.int32, np.int8, np.uint8, np.bool_, np.float32))
    with np.errstate(all="ignore"):
        new = data.astype(to)
    tensor.CopyFrom(numpy_helper.from_array(new, tensor.name))
    _forget_shapes(model)
    return "const dtype: %s %s -> %s" % (name, data.dtype, np.dtype(to).name)


# -- edges ------------------------------------------------------------------------------------------------------


def edge_rewire(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """A node reads another value instead of one of its inputs: most often one defined before it (the graph stays
    in order and the checker lets it through), sometimes its own or a later node's output (a cycle)."""
    candidates = [k for k, n in enumerate(model.graph.node) if len(n.input) > 0]
    if not candidates:
        return None
    at = rng.choice(candidates)
    node = model.graph.node[at]
    k = rng.randrange(len(node.input))
    before = [i.name for i in model.graph.input] + [t.name for t in model.graph.initializer]
    before += [o for n in model.graph.node[:at] for o in n.output if o]
    if rng.random() < 0.15 or not before:
        target = rng.choice([o for n in model.graph.node[at:] for o in n.output if o] or _value_names(model))
    else:
        target = rng.choice(before)
    old = node.input[k]
    node.input[k] = target
    _forget_shapes(model)
    return "edge rewired: %s input %d %r -> %r" % (_label(node), k, old, target)


def edge_drop(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    nodes = _nodes_with(model, lambda n: len(n.input) > 0)
    if not nodes:
        return None
    node = rng.choice(nodes)
    k = rng.randrange(len(node.input))
    old = node.input[k]
    if rng.random() < 0.5:
        node.input[k] = ""  # an omitted optional input
    else:
        del node.input[k]
    _forget_shapes(model)
    return "edge dropped: %s input %d %r" % (_label(node), k, old)


def edge_duplicate(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    nodes = _nodes_with(model, lambda n: len(n.input) > 0)
    if not nodes:
        return None
    node = rng.choice(nodes)
    k = rng.randrange(len(node.input))
    node.input.insert(rng.randrange(len(node.input) + 1), node.input[k])
    _forget_shapes(model)
    return "edge duplicated: %s input %d %r" % (_label(node), k, node.input[k])


# -- nodes, outputs, opset --------------------------------------------------------------------------------------


def node_remove(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """A node goes; half the time its readers read its first input instead (a bypass), else they dangle."""
    if not model.graph.node:
        return None
    k = rng.randrange(len(model.graph.node))
    node = model.graph.node[k]
    label = _label(node)
    if rng.random() < 0.5 and node.input and node.input[0]:
        source = node.input[0]
        for other in model.graph.node:
            for i, name in enumerate(other.input):
                if name in node.output:
                    other.input[i] = source
        for out in model.graph.output:
            if out.name in node.output:
                out.name = source
        what = "bypassed"
    else:
        what = "removed"
    del model.graph.node[k]
    _forget_shapes(model)
    return "node %s: %s" % (what, label)


def node_duplicate(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """A node is copied: with the same outputs (two producers of one value) or renamed ones (a dead branch)."""
    if not model.graph.node:
        return None
    k = rng.randrange(len(model.graph.node))
    copy = onnx.NodeProto()
    copy.CopyFrom(model.graph.node[k])
    if rng.random() < 0.5:
        for i, name in enumerate(copy.output):
            copy.output[i] = name + "_fuzzcopy" if name else name
        copy.name = copy.name + "_fuzzcopy"
        what = "renamed outputs"
    else:
        what = "same outputs"
    model.graph.node.insert(k + 1, copy)
    _forget_shapes(model)
    return "node duplicated (%s): %s" % (what, _label(copy))


def node_swap(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """Two nodes change places: the graph is no longer in topological order."""
    if len(model.graph.node) < 2:
        return None
    a, b = rng.sample(range(len(model.graph.node)), 2)
    na, nb = onnx.NodeProto(), onnx.NodeProto()
    na.CopyFrom(model.graph.node[a])
    nb.CopyFrom(model.graph.node[b])
    model.graph.node[a].CopyFrom(nb)
    model.graph.node[b].CopyFrom(na)
    return "nodes swapped: %d <-> %d" % (a, b)


def output_change(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    """An intermediate value becomes a graph output, or an output is dropped."""
    names = [o for n in model.graph.node for o in n.output if o]
    if rng.random() < 0.7 and names:
        name = rng.choice(names)
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.UNDEFINED, None))
        return "output added: %r" % name
    if len(model.graph.output) > 0:
        name = model.graph.output[-1].name
        del model.graph.output[-1]
        return "output dropped: %r" % name
    return None


def opset_change(model: onnx.ModelProto, rng: random.Random) -> Optional[str]:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            old = imp.version
            imp.version = rng.choice((1, 6, 7, 9, 10, 11, 12, 13, 16, 18, 21, 22, 23, 30, old - 1, old + 1))
            return "opset: %d -> %d" % (old, imp.version)
    return None


#: Mutators by name, with their weights (how often a step picks each).
MUTATORS: Dict[str, Tuple[Mutator, int]] = {
    "attr_value": (attr_value, 6),
    "attr_type": (attr_type, 1),
    "attr_remove": (attr_remove, 2),
    "attr_add": (attr_add, 2),
    "input_dim": (input_dim, 5),
    "input_dtype": (input_dtype, 1),
    "const_value": (const_value, 6),
    "const_shape": (const_shape, 3),
    "const_dtype": (const_dtype, 1),
    "edge_rewire": (edge_rewire, 2),
    "edge_drop": (edge_drop, 1),
    "edge_duplicate": (edge_duplicate, 1),
    "node_remove": (node_remove, 1),
    "node_duplicate": (node_duplicate, 1),
    "node_swap": (node_swap, 1),
    "output_change": (output_change, 1),
    "opset_change": (opset_change, 1),
}


def mutate(
    model: onnx.ModelProto, rng: random.Random, steps: int, only: Sequence[str] = (), infer: bool = True
) -> List[str]:
    """Apply ``steps`` mutations (from ``only`` when given), then :func:`reinfer` (unless ``infer`` is False: onnx's
    shape inference can crash on a mutant); the lines say what each did."""
    names = [n for n in MUTATORS if not only or n in only]
    weights = [MUTATORS[n][1] for n in names]
    done: List[str] = []
    tries = 0
    while len(done) < steps and tries < steps * 8:
        tries += 1
        name = rng.choices(names, weights)[0]
        try:
            line = MUTATORS[name][0](model, rng)
        except (ValueError, TypeError, OverflowError) as exc:  # a value protobuf will not hold: the step is lost
            line = "%s: not applied (%s)" % (name, str(exc)[:80])
        if line is not None:
            done.append(line)
    if infer:
        reinfer(model)
    return done


def _label(node: Any) -> str:
    return "%s %r" % (node.op_type, node.name) if node.name else node.op_type
