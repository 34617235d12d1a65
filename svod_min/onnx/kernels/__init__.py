"""The C kernels the ONNX lowering generates where the library has none, one module per family.

Every kernel is a :class:`.ckernel.CKernel`. Shapes and attributes are compiled in as constants (the bundle
compiles each kernel for every target at build time).
"""
