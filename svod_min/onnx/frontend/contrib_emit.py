"""The builder every contrib rewrite writes with: default-domain nodes named after the contrib node they replace, and
constant initializers of the dtype of the tensor they meet (:mod:`.contrib` runs the rewrites)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...error import ModelFileError, UnsupportedModelError

Known = Tuple[Dict[str, int], Dict[str, int]]  # elem type and rank by tensor name


class Emit:
    """Appends default-domain nodes (fresh names derived from the contrib node's) and constant initializers."""

    def __init__(self, model: onnx.ModelProto, node: Any, index: int, opset: int, known: Known) -> None:
        self.model, self.node, self.index, self.opset = model, node, index, opset
        self.types, self.ranks = known
        self.nodes: List[Any] = []
        self.base = (node.output[0] if node.output and node.output[0] else "contrib%d" % index) + "~" + node.op_type
        self.count = 0

    def label(self) -> str:
        return "node %d (%s%s)" % (self.index, self.node.op_type, ", %r" % self.node.name if self.node.name else "")

    def fresh(self) -> str:
        self.count += 1
        return "%s~%d" % (self.base, self.count)

    def op(self, op: str, inputs: List[str], out: Optional[str] = None, **attrs: Any) -> str:
        out = out or self.fresh()
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def const(self, value: Any, like: str) -> str:
        """A constant of the dtype of ``like`` (an intermediate the rewrite made has the contrib node's input 0's)."""
        dtype = helper.tensor_dtype_to_np_dtype(self.types.get(like) or self.types[self.node.input[0]])
        name = self.fresh()
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype), name))
        return name

    def ints(self, values: Any) -> str:
        """An int64 constant: a list gives a 1-D tensor, an int a scalar."""
        name = self.fresh()
        self.model.graph.initializer.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def attrs(self) -> Dict[str, Any]:
        return {a.name: helper.get_attribute_value(a) for a in self.node.attribute}

    def inp(self, i: int, required: bool = True) -> str:
        name = self.node.input[i] if i < len(self.node.input) else ""
        if required and not name:
            raise ModelFileError("%s: input %d is required and missing" % (self.label(), i))
        return name

    def out(self, i: int) -> str:
        return self.node.output[i] if i < len(self.node.output) else ""

    def refuse(self, what: str) -> UnsupportedModelError:
        return UnsupportedModelError("%s, %s: %s" % (self.label(), self.node.domain or "ai.onnx", what))

    def reduce_mean(self, x: str, axes: List[int]) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", [x, self.ints(axes)], keepdims=1)
        return self.op("ReduceMean", [x], axes=axes, keepdims=1)

    def unsqueeze(self, x: str, axes: List[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.ints(axes)])
        return self.op("Unsqueeze", [x], axes=axes)

    def squeeze(self, x: str, axes: List[int]) -> str:
        if self.opset >= 13:
            return self.op("Squeeze", [x, self.ints(axes)])
        return self.op("Squeeze", [x], axes=axes)

    def split(self, x: str, axis: int, parts: int) -> List[str]:
        """``x`` cut into ``parts`` equal pieces along ``axis``."""
        outs = [self.fresh() for _ in range(parts)]
        attrs: Dict[str, Any] = {"axis": axis}
        if self.opset >= 18:
            attrs["num_outputs"] = parts
        self.nodes.append(helper.make_node("Split", [x], outs, name=outs[0], **attrs))
        return outs

    def slice_last(self, x: str, start: str, end: str) -> str:
        """``x[..., start:end]``, the bounds int64 tensors of one element (opset 10 and later)."""
        return self.op("Slice", [x, start, end, self.ints([-1])])

    def dim(self, x: str, axis: int) -> str:
        """``x``'s size along ``axis`` as an int64 tensor of one element (a build-time constant once shapes fold)."""
        return self.op("Gather", [self.op("Shape", [x]), self.ints([axis])], axis=0)

    def initializer_dims(self, name: str) -> Optional[Tuple[int, ...]]:
        """The dims of constant ``name`` where it is an initializer; None otherwise."""
        for t in self.model.graph.initializer:
            if t.name == name:
                return tuple(int(d) for d in t.dims)
        return None
