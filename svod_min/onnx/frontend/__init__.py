"""From an ONNX file to the graph the lowering reads: parse (:mod:`.parse`: onnx.load, checks, dims bound, constants
folded, shapes inferred; :mod:`.quant_fold`: Q/DequantizeLinear of constants; :mod:`.fold_size`: what a fold would
allocate, told before it runs; :mod:`.inference_error`: which node a failed shape inference is about; :mod:`.functions`:
ops ONNX defines as functions, expanded where the table has no lowering; :mod:`.pins`: inputs pinned at build,
``build --pin``; :mod:`.branch` and :mod:`.loops`: If, Loop and Scan known at build time, inlined and
unrolled; :mod:`.selected_shapes`: the output shapes of Compress and MaxUnpool that a constant decides;
:mod:`.einsum_syntax`: Einsum equations checked before onnx's inference reads them) into the IR
(:mod:`.ir`; :mod:`.half`: float16/bfloat16 nodes of float32-only ops computed in float32), checks against the op
table (:mod:`.table`; :mod:`.indices`: the index rules; :mod:`.contracts`: the shape contracts onnx's inference leaves
unchecked), the graph passes (:mod:`.passes`: folds, fusions; :mod:`.gelu_chain`: the exporters' Gelu formulas back
into one Gelu) and the layout pass (:mod:`.layout`: the blocked channel layout). A ranged-batch build
(:mod:`.ranged`: ``--shape x=1..8,...``) reads the model at two batch sizes and :mod:`.batch_rows` finds the batched
values and refuses ops that mix batch rows.
"""
