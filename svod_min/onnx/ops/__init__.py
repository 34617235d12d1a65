"""Lowerings, one module per op family: each registers its ops in the op table (:mod:`..frontend.table`) and emits
plan ops through :class:`.lowering.Lowering` (library kernels, generated kernels from :mod:`..kernels`, views, copies).

- :mod:`.lowering`: the plan document being built (ops, kernels, aliases, the arena planned by liveness).
- :mod:`.window`: a Conv's or pool's window from its node (pads, auto_pad, :class:`~..geometry.ConvGeom`).
- :mod:`.conv`, :mod:`.conv_transpose`, :mod:`.pool`, :mod:`.matmul`, :mod:`.norm`,
  :mod:`.batch_norm`, :mod:`.reduce`, :mod:`.elementwise`, :mod:`.cast`, :mod:`.shape` (with Gather), :mod:`.resize`,
  :mod:`.rnn`, :mod:`.quant`
  (QuantizeLinear, DequantizeLinear), :mod:`.quant_integer` (MatMulInteger, ConvInteger, QLinearMatMul,
  QLinearConv): the ONNX ops by family.
- :mod:`.clip` (Clip on every dtype, bounds constant or fed at run time), :mod:`.along_axis` (CumSum, Hardmax,
  LpNormalization), :mod:`.lp_pool`, :mod:`.eye_like`, :mod:`.indexed` (GatherND, ScatterND, ScatterElements,
  OneHot; indices from data checked by the kernel).
- :mod:`.matrix` (Trilu, Det), :mod:`.grid_sample`, :mod:`.col2im`, :mod:`.deform_conv`,
  :mod:`.space_depth` (DepthToSpace, SpaceToDepth),
  :mod:`.shrink`, :mod:`.sequence` (ReverseSequence; lengths from data checked by the kernel), :mod:`.topk`,
  :mod:`.tensor_scatter` (TensorScatter; write indices from data checked by the kernel).
- :mod:`.einsum` (the equation parsed into one kernel's loops), :mod:`.compress` (a Gather of the positions a
  condition known at build selects), :mod:`.max_unpool` (indices from data checked by the kernel).
- :mod:`.blocked`: the ops of the blocked channel layout that :mod:`..frontend.layout` emits.
- :mod:`.pinned`: the run-time checks of inputs pinned at build (``build --pin``).
"""
