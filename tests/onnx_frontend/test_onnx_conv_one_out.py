"""A convolution with one output channel runs the row kernel (each tap adds a scaled input row to the output row),
checked against a float64 numpy convolution over strides, dilations, asymmetric pads, rows longer than one span,
a batch, and a fused Sigmoid."""

from __future__ import annotations

import os
from typing import Any, Dict, Sequence

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model  # noqa: E402

from svod_min.onnx.build import lower_model  # noqa: E402


def reference(x: Any, w: Any, b: Any, pads: Sequence[int], strides: Sequence[int], dilations: Sequence[int]) -> Any:
    """float64 convolution of one group: the padded input's strided window per tap, summed over channels."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    pt, pl, pb, pr = pads
    sh, sw = strides
    dh, dw = dilations
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i * dh : i * dh + sh * (oh - 1) + 1 : sh, j * dw : j * dw + sw * (ow - 1) + 1 : sw]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j])
    return out + (0.0 if b is None else b.astype(np.float64)[None, :, None, None])


CASES: Dict[str, Dict[str, Any]] = {
    # basic-pitch's head: 5x5 same padding, bias, Sigmoid in the store
    "head_sigmoid": {"x": (1, 8, 9, 23), "k": (5, 5), "pads": (2, 2, 2, 2), "sigmoid": True},
    # a strided 1-D filter over a row longer than a span (600 -> 296 outputs), no bias
    "strided_long_row": {"x": (1, 1, 1, 600), "k": (1, 9), "strides": (1, 2), "bias": False},
    # asymmetric pads wider than the window's reach on one side, dilation, batch 2, 33 channels
    "pads_dilation_batch": {"x": (2, 33, 7, 11), "k": (3, 3), "pads": (0, 3, 2, 1), "dilations": (2, 1)},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_output_channel_matches_numpy(case: str, tmp_path: Any) -> None:
    spec = CASES[case]
    rng = np.random.default_rng(7)
    x = rng.standard_normal(spec["x"]).astype(np.float32)
    w = rng.standard_normal((1, spec["x"][1]) + spec["k"]).astype(np.float32)
    b = rng.standard_normal(1).astype(np.float32) if spec.get("bias", True) else None
    pads = spec.get("pads", (0, 0, 0, 0))
    strides, dilations = spec.get("strides", (1, 1)), spec.get("dilations", (1, 1))
    consts = {"w": w} if b is None else {"w": w, "b": b}
    conv_out = "c" if spec.get("sigmoid") else "y"
    nodes = [
        helper.make_node(
            "Conv",
            ["x", "w"] + ([] if b is None else ["b"]),
            [conv_out],
            kernel_shape=list(spec["k"]),
            pads=[pads[0], pads[1], pads[2], pads[3]],
            strides=list(strides),
            dilations=list(dilations),
        )
    ]
    if spec.get("sigmoid"):
        nodes.append(helper.make_node("Sigmoid", ["c"], ["y"]))
    model = graph_model(nodes, [("x", spec["x"])], ["y"], 17, consts)
    path = os.path.join(str(tmp_path), "k.onnx")
    onnx.save(model, path)
    assert any("conv_one_out" in name for name in lower_model(path).doc["kernels"])
    want = reference(x, w, b, pads, strides, dilations)
    if spec.get("sigmoid"):
        want = 1.0 / (1.0 + np.exp(-want))
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    assert got.shape == want.shape
    # float32 sums of up to 297 products of unit normals: within 1e-5 relative, 1e-5 of the output's scale absolute
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
