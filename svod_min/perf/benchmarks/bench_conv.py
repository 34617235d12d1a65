"""Convolution benchmark: the library's conv kernels against onnxruntime running the same single Conv node.

    python -m svod_min.perf.benchmarks.bench_conv [--json] [--quick] [--threads 1,2] [--only 7x7,14x14]

Shapes are typical CNN layers (batch 1, float32): ResNet-50's 3x3 64->64 and 1x1 256->64 at 56x56
and its 7x7 stride-2 stem 3->64 at 224, SqueezeNet's expand 3x3 16->64 at 55x55, and a MobileNet
depthwise 3x3 over 32 channels at 112x112, and the layers where the light models trailed onnxruntime
most (ResNet-50 at 7x7, 14x14, 28x28, Inception-v2's 3x3 64->192, SqueezeNet's 1x1 512->1000). Each
shape runs on the library's conv2d_gemm with packed weights (the depthwise one on depthwise_conv2d)
and on an onnxruntime session holding one Conv node built with onnx.helper, both in this process,
timed in turn (round-robin, medians) at each thread count. ONNX bundles run these group-1 shapes on
the blocked layout's generated convolution instead (docs/onnx.md); bench_onnx measures that, model
by model.
onnxruntime's threads do not spin between runs, so they take no core from the svod_min timing.
Rates are GFLOP/s (2 x multiply-adds), higher is better: ratio = svod_min / onnxruntime.
Without onnxruntime the rows carry svod_min's figures and say so.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

#: The goal at 1 thread: at least half of onnxruntime's rate.
GOAL = 0.5


class ConvShape(NamedTuple):
    label: str
    c: int
    h: int
    w: int
    oc: int
    k: int
    stride: int
    pad: int
    groups: int

    @property
    def out_hw(self) -> Tuple[int, int]:
        return (
            (self.h + 2 * self.pad - self.k) // self.stride + 1,
            (self.w + 2 * self.pad - self.k) // self.stride + 1,
        )

    @property
    def flops(self) -> float:
        oh, ow = self.out_hw
        return 2.0 * self.oc * oh * ow * (self.c // self.groups) * self.k * self.k


SHAPES: Tuple[ConvShape, ...] = (
    ConvShape("ResNet-50 3x3 64->64 56x56", 64, 56, 56, 64, 3, 1, 1, 1),
    ConvShape("ResNet-50 1x1 256->64 56x56", 256, 56, 56, 64, 1, 1, 0, 1),
    ConvShape("ResNet-50 7x7/2 3->64 224x224", 3, 224, 224, 64, 7, 2, 3, 1),
    ConvShape("SqueezeNet 3x3 16->64 55x55", 16, 55, 55, 64, 3, 1, 1, 1),
    ConvShape("MobileNet depthwise 3x3 32ch 112x112", 32, 112, 112, 32, 3, 1, 1, 32),
    ConvShape("ResNet-50 3x3 512->512 7x7", 512, 7, 7, 512, 3, 1, 1, 1),
    ConvShape("ResNet-50 1x1 2048->512 7x7", 2048, 7, 7, 512, 1, 1, 0, 1),
    ConvShape("ResNet-50 3x3 256->256 14x14", 256, 14, 14, 256, 3, 1, 1, 1),
    ConvShape("ResNet-50 3x3 128->128 28x28", 128, 28, 28, 128, 3, 1, 1, 1),
    ConvShape("Inception-v2 3x3 64->192 56x56", 64, 56, 56, 192, 3, 1, 1, 1),
    ConvShape("SqueezeNet 1x1 512->1000 13x13", 512, 13, 13, 1000, 1, 1, 0, 1),
)


def svod_conv(shape: ConvShape, x: Any, w: Any, out: Any, threads: int) -> Callable[[], None]:
    """A bound svod_min call computing ``shape`` (depthwise_conv2d when groups == C == OC), as an ONNX bundle
    runs it: conv2d_gemm with its weights packed once (and the zero bias the packed instances take)."""
    import numpy as np

    from svod_min import kernels
    from svod_min.kernels.conv_pack import pack_conv_weights

    p = shape.pad
    common = dict(
        N=1,
        C=shape.c,
        H=shape.h,
        W=shape.w,
        KH=shape.k,
        KW=shape.k,
        sh=shape.stride,
        sw=shape.stride,
        pt=p,
        pl=p,
        pb=p,
        pr=p,
        dh=1,
        dw=1,
    )
    if shape.groups == shape.c == shape.oc:
        return kernels.get("depthwise_conv2d", dtype="float32").bind([out, x, w], threads=threads, **common)
    packed, bias = pack_conv_weights(w, shape.groups), np.zeros(shape.oc, np.float32)
    conv = kernels.get("conv2d_gemm", dtype="float32", bias=True, packed=True)
    return conv.bind([out, x, packed, bias], threads=threads, OC=shape.oc, groups=shape.groups, **common)


def ort_conv(shape: ConvShape, w: Any, threads: int) -> Any:
    """An onnxruntime session running one Conv node of ``shape`` (weights as an initializer)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    oh, ow = shape.out_hw
    node = helper.make_node(
        "Conv",
        ["x", "w"],
        ["y"],
        kernel_shape=[shape.k, shape.k],
        strides=[shape.stride] * 2,
        pads=[shape.pad] * 4,
        group=shape.groups,
    )
    graph = helper.make_graph(
        [node],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, shape.c, shape.h, shape.w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, shape.oc, oh, ow])],
        [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def measure(shapes: Sequence[ConvShape], threads: Sequence[int], reps: int) -> Dict[Tuple[str, int], Dict[str, Any]]:
    """(shape label, threads) -> seconds of svod_min and onnxruntime (None when it is not installed)."""
    import numpy as np

    from svod_min.perf.bench_suite import paired_median_s

    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401

        have_ort = True
    except ImportError:
        have_ort = False
    rng = np.random.default_rng(0)
    found: Dict[Tuple[str, int], Dict[str, Any]] = {}
    for shape in shapes:
        oh, ow = shape.out_hw
        x = rng.standard_normal((1, shape.c, shape.h, shape.w)).astype(np.float32)
        w = (rng.standard_normal((shape.oc, shape.c // shape.groups, shape.k, shape.k)) * 0.1).astype(np.float32)
        out = np.empty((1, shape.oc, oh, ow), np.float32)
        for t in threads:
            fns: Dict[str, Callable[[], Any]] = {"svod": svod_conv(shape, x, w, out, t)}
            if have_ort:
                sess = ort_conv(shape, w, t)
                feed = {"x": x}
                fns["ort"] = lambda sess=sess, feed=feed: sess.run(None, feed)
                fns["svod"]()
                want = sess.run(None, feed)[0]
                assert np.allclose(out, want, rtol=1e-3, atol=1e-3), shape.label
            times = paired_median_s(fns, reps)
            found[(shape.label, t)] = {"svod": times["svod"], "ort": times.get("ort")}
    return found


def select(only: str) -> Tuple[ConvShape, ...]:
    """The shapes whose label contains one of the comma-separated words of ``only`` (all when it is empty)."""
    words = [w.strip().lower() for w in only.split(",") if w.strip()]
    return tuple(s for s in SHAPES if not words or any(w in s.label.lower() for w in words))


def rows(quick: bool = False, threads: Sequence[int] = (1, 2), only: str = "") -> List[Dict[str, Any]]:
    """One row per shape and thread count: svod_min GFLOP/s, onnxruntime's, ratio; goal >= 0.5x at 1 thread."""
    try:
        import onnxruntime

        peer_name = "onnxruntime %s Conv" % onnxruntime.__version__
    except ImportError:
        peer_name = "skipped: needs onnxruntime"
    shapes = select(only)
    times = measure(shapes, threads, 7 if quick else 21)
    out = []
    for shape in shapes:
        for t in threads:
            got = times[(shape.label, t)]
            ours = shape.flops / got["svod"] / 1e9
            peer = shape.flops / got["ort"] / 1e9 if got["ort"] else None
            ratio = ours / peer if peer else None
            goal = ">= %gx peer" % GOAL if t == 1 else "info"
            out.append(
                {
                    "measure": "conv %s f32, %d thread%s [GFLOP/s]" % (shape.label, t, "s" if t > 1 else ""),
                    "svod_min": round(ours, 2),
                    "peer": "%s, %d thread%s" % (peer_name, t, "s" if t > 1 else "") if peer else peer_name,
                    "peer_value": None if peer is None else round(peer, 2),
                    "ratio": None if ratio is None else round(ratio, 2),
                    "goal": goal,
                    "met": None if ratio is None or t != 1 else bool(ratio >= GOAL),
                }
            )
    return out


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    p.add_argument("--quick", action="store_true", help="fewer timed runs")
    p.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    p.add_argument("--only", default="", help="shapes whose label contains one of these comma-separated words")
    args = p.parse_args(argv)
    table = rows(args.quick, tuple(int(t) for t in args.threads.split(",")), args.only)
    if args.json:
        print(json.dumps(table, indent=1))
    else:
        from svod_min.perf.bench_suite import format_table

        print(format_table(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
