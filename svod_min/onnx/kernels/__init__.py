"""The C kernels the ONNX lowering generates where the library has none, one module per family.

Every kernel is a :class:`.ckernel.CKernel`: its family's module computes the constants (shapes, strides,
attributes, the work each core_id call does) and renders its Jinja template (``templates/<family>.c.j2``, with the
shared macros of ``templates/prelude.c.j2``); shapes and attributes are compiled in, and the bundle compiles each
kernel for every target at build time.

- :mod:`.ckernel`: the kernel, its name, its chunking, the template renderer.
- :mod:`.libmath`: the kernel library's math functions, and the ONNX kernels' own (``templates/math.c.j2``: erf),
  copied into a kernel that calls them.
- :mod:`.elementwise`: ``out = expr(x0, x1, ...)`` with broadcasting (activations, affines, comparisons).
- :mod:`.copy`: Concat's strided copies, strided gathers, Gather and GatherElements (indices from data checked
  through prelude's ``index_check``), Pad.
- :mod:`.conv`: direct, depthwise, im2col, ConvTranspose's gather and col2im.
- :mod:`.pool`: MaxPool / AveragePool in two passes, and per output.
- :mod:`.norm`: Softmax / LogSoftmax, LRN, InstanceNormalization.
- :mod:`.batch_norm`: BatchNormalization with statistics fed at run time or the batch's own (training_mode=1).
- :mod:`.reduce`: the reductions the library lacks, ArgMax / ArgMin.
- :mod:`.resize`: Resize's per-axis taps and 2-D nearest.
- :mod:`.rnn`: RNN, LSTM and GRU, one kernel looping over time.
- :mod:`.quant`: QuantizeLinear and DequantizeLinear per tensor, per axis or blocked.
- :mod:`.quant_integer`: MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv (int32 sums, float requantization).
- :mod:`.qgemm`: the int8 GEMM of MatMulInteger and QLinearMatMul (VNNI where the CPU has it) and B's packing.
- :mod:`.pinned`: the run-time check of an input pinned at build (``build --pin``).
- :mod:`.axis`: CumSum (its axis compiled in or read and checked at run time), Hardmax, LpNormalization.
- :mod:`.layer_norm`: LayerNormalization with its Mean and InvStdDev outputs.
- :mod:`.lp_pool`: LpPool over 1-D to 3-D windows.
- :mod:`.indexed`: GatherND, ScatterND, ScatterElements (indices from data checked) and OneHot.
- :mod:`.unpool`: MaxUnpool's scatter into a zero output (indices from data checked).
- :mod:`.einsum`: Einsum, one loop per label of the equation.
- :mod:`.matrix`: Trilu's triangle, Det's LU factorisation.
- :mod:`.grid_sample`: GridSample, its taps clamped into the input whatever the grid holds.
- :mod:`.col2im`: Col2Im, each image accumulated from the blocks that land on it (any number of axes).
- :mod:`.deform_conv`: DeformConv (2-D), taps sampled bilinearly at their offsets, every read inside x.
- :mod:`.sequence`: ReverseSequence (lengths from data checked, reported through the status buffer).
- :mod:`.tensor_scatter`: TensorScatter (write indices from data checked, reported through the status buffer).
- :mod:`.topk`: TopK, a heap of the k best per line, then sorted (ties in index order, NaN above every number).
- :mod:`.blocked`, :mod:`.blocked_pool`, :mod:`.blocked_conv`: the blocked channel layout's reorders, pools and
  convolution.
"""
