"""A structure-aware fuzzer of svod_min's ONNX front end (``python3 -m fuzz``; docs/fuzzing.md).

A developer's tool beside ``codegen/``, not part of the runtime or the wheel: it mutates real ONNX graphs
(attributes, shapes, constants, dtypes, edges, nodes, the opset), feeds each mutant to ``svod_min build`` and
``svod_min run`` in a child process with a deadline and an address-space limit, and compares what runs with
onnxruntime.

Modules: ``seeds`` (the models it starts from), ``mutate`` (the mutations), ``child`` (one step in a forked,
limited child), ``case`` (one case's steps and its outcome, reproducers), ``campaign`` (a seeded round and its
counts), ``__main__`` (the command line).
"""
