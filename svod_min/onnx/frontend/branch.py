"""An If whose condition is known at build time becomes the nodes of the branch it takes.

Exporters write ``If`` for a test on a shape or a flag that is a constant once the inputs are bound (torch's
tracing of ``if x.shape[0] > 1``, a model's config flags). The condition folds to a constant like any other
expression; the taken branch's nodes then replace the If: its own values and initializers get names prefixed with
the If's first output (a branch's names may repeat names of the other branch or of the outer graph), names of the
outer scope it reads stay, and an Identity gives each branch output the If's output name. A branch whose nodes carry
subgraphs of their own is left alone (their references to renamed values would need the same renaming): the op
table then refuses the If by name.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np
import onnx
from onnx import helper


def inline_if(node: Any, cond: np.ndarray, model: onnx.ModelProto) -> Optional[List[Any]]:
    """The nodes replacing ``node`` (an If with the constant condition ``cond``); its branch's initializers are
    added to ``model``. None when the branch is not inlined (a nested subgraph, a condition that is not one bool)."""
    if cond.size != 1:
        return None
    branches = {a.name: a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH}
    branch = branches.get("then_branch" if bool(cond.reshape(-1)[0]) else "else_branch")
    if branch is None or len(branch.output) != len(node.output):
        return None
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for n in branch.node for a in n.attribute):
        return None
    prefix = "%s~if~" % (node.output[0] or node.name or "if")
    local = {t.name for t in branch.initializer} | {o for n in branch.node for o in n.output if o}
    rename: Dict[str, str] = {name: prefix + name for name in local}
    for t in branch.initializer:
        copy = onnx.TensorProto()
        copy.CopyFrom(t)
        copy.name = rename[t.name]
        model.graph.initializer.append(copy)
    nodes = []
    for n in branch.node:
        copy = onnx.NodeProto()
        copy.CopyFrom(n)
        copy.input[:] = [rename.get(i, i) for i in n.input]
        copy.output[:] = [rename.get(o, o) for o in n.output]
        if copy.name:
            copy.name = prefix + copy.name
        nodes.append(copy)
    for out, name in zip(branch.output, node.output):
        if name:
            nodes.append(helper.make_node("Identity", [rename.get(out.name, out.name)], [name], name=prefix + name))
    return nodes
