"""ONNX's backend conformance suite (the node tests) through svod_min's real build and run path.

``python3 -m conformance DATA_DIR`` builds each ``DATA_DIR/<test>/model.onnx`` into a bundle in-process (the same
``build_onnx`` the CLI calls), loads it with ``load_model``, runs it on ``test_data_set_0``'s inputs and compares
with the suite's outputs; onnxruntime, when installed, runs beside it as the peer. Each test runs in a forked
child with a timeout, so a signal or a hang is recorded as such instead of ending the round.

Modules: ``suite`` (finding and reading the tests), ``outcome`` (what a test's run became), ``runner`` (the forked
child and the round), ``report`` (the summary and the per-op table of docs/onnx.md).
"""
