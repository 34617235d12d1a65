"""From an ONNX file to the graph the lowering reads: parse (:mod:`.parse`: onnx.load, checks, dims bound, constants
folded, shapes inferred) into the IR (:mod:`.ir`), checks against the op table (:mod:`.table`; :mod:`.indices`: the index rules), the graph passes
(:mod:`.passes`: folds, fusions) and the layout pass (:mod:`.layout`: the blocked channel layout).
"""
