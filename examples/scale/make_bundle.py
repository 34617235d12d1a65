"""Rebuild the scale-out example bundles from an ONNX graph made here (needs ``svod-min[onnx]``).

    python examples/scale/make_bundle.py

writes ``examples/scale/mlp.svod`` (objects for the x86_64 and x86_64-v3 targets) and ``mlp_aarch64.svod``
(the same model with objects for aarch64 only: the tests' bundle of the wrong architecture). The model: 32
rows of 16 features -> Gemm 16x32 -> Tanh -> Gemm 32x8 -> Softmax, weights from a fixed seed, so every
rebuild has the same weights. The bias + Tanh epilogues are generated C (not library kernels), so the bundle
carries compiled objects and their architecture matters.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, FEATURES, HIDDEN, CLASSES = 32, 16, 32, 8


def mlp_model(seed: int = 7) -> onnx.ModelProto:
    """The example MLP with seeded weights; input ``x`` [32, 16], output ``probs`` [32, 8]."""
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((FEATURES, HIDDEN)).astype(np.float32) * 0.5
    b1 = rng.standard_normal(HIDDEN).astype(np.float32) * 0.1
    w2 = rng.standard_normal((HIDDEN, CLASSES)).astype(np.float32) * 0.5
    b2 = rng.standard_normal(CLASSES).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"]),
        helper.make_node("Tanh", ["h"], ["t"]),
        helper.make_node("Gemm", ["t", "w2", "b2"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "scale_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, FEATURES])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [BATCH, CLASSES])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build(onnx_path: str, out: str, targets: list) -> None:
    cmd = [sys.executable, "-m", "svod_min", "build", onnx_path, "-o", out]
    for target in targets:
        cmd += ["--target", target]
    subprocess.run(cmd, check=True)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "mlp.onnx")
        onnx.save(mlp_model(), onnx_path)
        build(onnx_path, os.path.join(HERE, "mlp.svod"), ["x86_64", "x86_64-v3"])
        build(onnx_path, os.path.join(HERE, "mlp_aarch64.svod"), ["aarch64"])


if __name__ == "__main__":
    main()
