"""Which op holds a model back: a bundle's per-op profile at 1 thread, beside onnxruntime's for the same model.

    python -m svod_min.perf.op_profile MODEL.svod [--onnx MODEL.onnx] [--input NAME=FILE.npy] [--top N] [--runs R]

Each op's time is its fastest of ``runs`` profiled runs (the plan's ``execute_profiled``: every op
alone, serially), so a busy machine inflates the ranking less. The table lists the ops that take
the most time with their kernel, shape (the kernel's fixed variables), share of the run and
GFLOP/s; the best rate any op reached in the same run stands beside them as this machine's
practical peak for the kernel library. With ``--onnx``, onnxruntime's own profile of the model
(1 thread, each node's fastest of ``runs``) gives its time per kind of op (Conv, Pool, Gemm, other)
beside svod_min's, and its rate for a convolution of the same shape as the slowest op.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

#: Below this many FLOP per byte of its buffers an op is bound by memory on one core (~180 GFLOP/s over ~20 GB/s):
#: its top-ops entry gives its GB/s beside its GFLOP/s (a matrix-vector product's 2% of peak is its bandwidth).
MEMORY_BOUND_FLOP_PER_BYTE = 8.0

#: Fixed variables that say nothing about an op's shape.
_NOISE = ("core_id_count", "core_id", "N", "dh", "dw", "groups")


class OpTime(NamedTuple):
    index: int
    kernel: str
    shape: str
    seconds: float
    flops: Optional[int]
    conv: Optional[Tuple[int, ...]] = None
    bytes_moved: Optional[int] = None

    @property
    def gflops(self) -> Optional[float]:
        return self.flops / self.seconds / 1e9 if self.flops and self.seconds > 0 else None

    @property
    def gbytes(self) -> Optional[float]:
        return self.bytes_moved / self.seconds / 1e9 if self.bytes_moved and self.seconds > 0 else None


def shape_of(op: Any, buffers: Sequence[Any] = ()) -> str:
    """An op's shape from its kernel's fixed variables: ``C=256 H=56 W=56 OC=128 KH=1 KW=1 sh=2 ...``; a generated
    kernel, whose sizes are constants in its C, by its buffers: ``1x64x56x56 <- 1x64x56x56, 36864``
    (what it writes, then the others, as the plan lays them out: a blocked tensor in its blocked shape)."""
    fixed = getattr(op, "fixedvars", None) or {}
    text = " ".join("%s=%s" % (k, v) for k, v in fixed.items() if k not in _NOISE)
    if text or not buffers:
        return text
    shapes = [_dims(buffers[i]) for i in getattr(op, "buffer_indices", []) if i < len(buffers)]
    written = set(getattr(op, "output_indices", None) or [0])
    outs = [s for n, s in enumerate(shapes) if n in written]
    ins = [s for n, s in enumerate(shapes) if n not in written]
    return "%s <- %s" % (", ".join(outs), ", ".join(ins)) if outs and ins else ", ".join(outs + ins)


def _dims(buffer: Any) -> str:
    shape = getattr(buffer, "shape", None)
    return "x".join(str(d) for d in shape) if shape else "?"


def buffer_bytes(op: Any, buffers: Sequence[Any]) -> Optional[int]:
    """The bytes of an op's buffers, each read or written once: the least its kernel moves (the GB/s of an op
    whose kernel declares no FLOP count and no bytes of its own)."""
    sizes = [getattr(buffers[i], "nbytes", 0) for i in getattr(op, "buffer_indices", []) if i < len(buffers)]
    return sum(s for s in sizes if s) or None


def profiles(
    svod_path: str, inputs: Mapping[str, Any], runs: int = 3, onnx_path: Optional[str] = None
) -> Tuple[List[OpTime], List["OrtNode"]]:
    """svod_min's ops (slowest first) and, with ``onnx_path``, onnxruntime's nodes, both at 1 thread: each op's
    fastest time over ``runs`` runs, the two engines' runs alternating so that both see the same load."""
    from svod_min import load_model
    from svod_min.devices.cpu.device import CpuDevice

    model = load_model(svod_path, device=CpuDevice(threads=1))
    model.run(dict(inputs))
    # onnxruntime runs on the same inputs: those not given are the bundle's example data
    inputs = {name: inputs[name] if name in inputs else model.array(name) for name in model.input_names}
    plan = model.loaded.plan
    best: Dict[int, Any] = {}
    with tempfile.TemporaryDirectory(prefix="svod_ort_profile_") as directory:
        session = _ort_profiling_session(onnx_path, directory) if onnx_path else None
        for _ in range(runs):
            for p in plan.execute_profiled():
                if p.op_index is not None and (p.op_index not in best or p.elapsed < best[p.op_index].elapsed):
                    best[p.op_index] = p
            if session is not None:
                session.run(None, dict(inputs))
        nodes = _ort_nodes(session, directory) if session is not None else []
    ops, buffers = plan.prepared_ops(), plan.buffers()
    found = [
        OpTime(
            i,
            p.name,
            shape_of(ops[i], buffers),
            p.elapsed,
            p.flops,
            conv_key(getattr(ops[i], "fixedvars", None) or {}),
            p.bytes_moved or buffer_bytes(ops[i], buffers),
        )
        for i, p in best.items()
    ]
    return sorted(found, key=lambda o: -o.seconds), nodes


def op_times(svod_path: str, inputs: Mapping[str, Any], runs: int = 3) -> List[OpTime]:
    """Every op's fastest profiled time over ``runs`` runs at 1 thread, slowest op first."""
    return profiles(svod_path, inputs, runs)[0]


def kind_of(name: str) -> str:
    """The kind of op a kernel or ONNX op name computes: Conv, Pool, Gemm or other."""
    low = name.lower()
    for kind, marks in (("Conv", ("conv",)), ("Pool", ("pool",)), ("Gemm", ("gemm", "matmul"))):
        if any(m in low for m in marks):
            return kind
    return "other"


def conv_key(fixed: Mapping[str, Any]) -> Optional[Tuple[int, ...]]:
    """(OC, C/groups, KH, KW, H, W, OH, OW) of a svod_min convolution op, None for another op."""
    try:
        c, h, w, oc, kh, kw = (int(fixed[k]) for k in ("C", "H", "W", "OC", "KH", "KW"))
        c //= int(fixed.get("groups", 1))
        oh = (h + int(fixed["pt"]) + int(fixed["pb"]) - int(fixed.get("dh", 1)) * (kh - 1) - 1) // int(fixed["sh"]) + 1
        ow = (w + int(fixed["pl"]) + int(fixed["pr"]) - int(fixed.get("dw", 1)) * (kw - 1) - 1) // int(fixed["sw"]) + 1
    except (KeyError, TypeError, ValueError):
        return None
    return (oc, c, kh, kw, h, w, oh, ow)


class OrtNode(NamedTuple):
    name: str
    op: str
    seconds: float
    conv: Optional[Tuple[int, ...]]


def _ort_profiling_session(onnx_path: str, directory: str) -> Any:
    """An onnxruntime session at 1 thread that writes its profile under ``directory``."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(directory, "ort")
    return ort.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])


def _ort_nodes(session: Any, directory: str) -> List[OrtNode]:
    """Each node's fastest time in the session's profile (its first run is the slowest: it does not count)."""
    session.end_profiling()
    with open(sorted(glob.glob(os.path.join(directory, "ort*.json")))[-1]) as fh:
        events = json.load(fh)
    best: Dict[str, OrtNode] = {}
    for e in events:
        if e.get("cat") != "Node" or not str(e.get("name", "")).endswith("_kernel_time"):
            continue
        args = e.get("args", {})
        node = OrtNode(e["name"], str(args.get("op_name", "")), float(e.get("dur", 0)) / 1e6, _ort_conv_key(args))
        if node.name not in best or node.seconds < best[node.name].seconds:
            best[node.name] = node
    return list(best.values())


def _ort_conv_key(args: Mapping[str, Any]) -> Optional[Tuple[int, ...]]:
    """(OC, C/groups, KH, KW, H, W, OH, OW) of an onnxruntime Conv event: the weight's shape as given, the
    input's and output's spatial sizes (their channels may be padded to onnxruntime's blocked layout)."""
    if "Conv" not in str(args.get("op_name", "")):
        return None
    try:
        shapes = [list(s.values())[0] for s in args["input_type_shape"]]
        out = list(args["output_type_shape"][0].values())[0]
        (_, _, h, w), (oc, cg, kh, kw) = shapes[0], shapes[1]
        return (oc, cg, kh, kw, h, w, out[2], out[3])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return None


def kind_totals(times: List[OpTime], nodes: List[OrtNode]) -> Dict[str, Tuple[float, float]]:
    """Seconds per run by kind of op: {kind: (svod_min, onnxruntime)}."""
    totals: Dict[str, List[float]] = {}
    for o in times:
        totals.setdefault(kind_of(o.kernel), [0.0, 0.0])[0] += o.seconds
    for n in nodes:
        totals.setdefault(kind_of(n.op), [0.0, 0.0])[1] += n.seconds
    return {k: (v[0], v[1]) for k, v in sorted(totals.items(), key=lambda kv: -kv[1][0])}


def ort_conv_seconds(nodes: List[OrtNode], key: Optional[Tuple[int, ...]]) -> Optional[float]:
    """onnxruntime's time for a convolution of shape ``key`` (the mean where the model has several)."""
    same = [n.seconds for n in nodes if key is not None and n.conv is not None and _same_conv(key, n.conv)]
    return sum(same) / len(same) if same else None


def _same_conv(ours: Tuple[int, ...], theirs: Tuple[int, ...]) -> bool:
    """The same convolution, onnxruntime's output and input channels
    maybe padded to a multiple of 16 (its blocked layout)."""

    def padded(n: int, m: int) -> bool:
        return m == n or m == -(-n // 16) * 16

    return padded(ours[0], theirs[0]) and padded(ours[1], theirs[1]) and ours[2:] == theirs[2:]


def peak_gflops(times: List[OpTime]) -> Optional[float]:
    """The best rate any op reached (ops under 0.1 ms left out: their clocks are too coarse)."""
    rates = [o.gflops for o in times if o.gflops is not None and o.seconds >= 1e-4]
    return max(rates) if rates else None


def top_ops(times: List[OpTime], peak_gflops: Optional[float], top: int = 5) -> str:
    """The ``top`` ops by time: ``#12 svod_conv2d_gemm_f32 (C=64 H=56 ...) 21% 118.2 GFLOP/s = 63% of peak``,
    an op without a FLOP count at its GB/s (of the bytes its kernel declares it moves), "-" without either; an op
    of fewer than :data:`MEMORY_BOUND_FLOP_PER_BYTE` FLOP per byte at both."""
    total = sum(o.seconds for o in times)
    parts = []
    for o in times[:top]:
        if o.gflops is not None:
            of_peak = " = %.0f%% of peak" % (100 * o.gflops / peak_gflops) if peak_gflops else ""
            rate = "%.1f GFLOP/s%s" % (o.gflops, of_peak)
            if o.gbytes is not None and o.gflops < MEMORY_BOUND_FLOP_PER_BYTE * o.gbytes:
                rate += ", %.1f GB/s" % o.gbytes
        elif o.gbytes is not None:
            rate = "%.1f GB/s" % o.gbytes
        else:
            rate = "-"
        share = 100 * o.seconds / total if total else 0
        parts.append("#%d %s (%s) %.0f%% %s" % (o.index, o.kernel, o.shape or "-", share, rate))
    return "; ".join(parts)


def profile_row(
    name: str,
    svod_path: str,
    inputs: Mapping[str, Any],
    onnx_path: Optional[str] = None,
    runs: int = 3,
    peak: Any = None,
) -> Dict[str, Any]:
    """One benchmark row naming the op that takes the most time, with its GFLOP/s; with ``onnx_path``,
    onnxruntime's time per kind of op and its GFLOP/s for a convolution of the same shape; then the top ops with
    their rates, against ``peak`` (a :class:`svod_min.perf.core_peak.CorePeak`) where given."""
    times, nodes = profiles(svod_path, inputs, runs, onnx_path)
    total = sum(o.seconds for o in times)
    top = times[0]
    kinds = (
        ", ".join("%s %.1f/%.1f" % (k, s * 1e3, o * 1e3) for k, (s, o) in kind_totals(times, nodes).items())
        if nodes
        else ""
    )
    peer_seconds = ort_conv_seconds(nodes, top.conv)
    peer_rate = top.flops / peer_seconds / 1e9 if peer_seconds and top.flops else None
    families = ", ".join("%s %.0f%%" % (f, 100 * t / total) for f, t in kernel_families(times)[:3]) if total else ""
    measure = (
        "onnx %s: profile, 1 thread: %skernels by time: %s; slowest op #%d %s (%s) %.0f%% of %.1f ms [GFLOP/s]"
        % (
            name,
            "ms per op kind (svod_min vs onnxruntime): %s; " % kinds if kinds else "",
            families,
            top.index,
            top.kernel,
            top.shape,
            100 * top.seconds / total if total else 0,
            total * 1e3,
        )
    )
    peak_rate = getattr(peak, "gflops", None)
    measure += "; top ops%s: %s" % (" (peak %.1f GFLOP/s)" % peak_rate if peak_rate else "", top_ops(times, peak_rate))
    return {
        "measure": measure,
        "svod_min": None if top.gflops is None else round(top.gflops, 1),
        "peer": "onnxruntime, a Conv of the same shape" if peer_rate else "best op of the same run",
        "peer_value": round(peer_rate, 1) if peer_rate else _rounded(peak_gflops(times)),
        "ratio": round(top.gflops / peer_rate, 2) if peer_rate and top.gflops else None,
        "goal": "info",
        "met": None,
    }


def kernel_families(times: List[OpTime]) -> List[Tuple[str, float]]:
    """Seconds per kernel, most first; generated kernels (``svod_onnx_conv_1a2b3c4d5e6f``) count by their
    family (``svod_onnx_conv``), so forty small generated convolutions show as the one kernel they are."""
    found: Dict[str, float] = {}
    for o in times:
        head, _, tail = o.kernel.rpartition("_")
        family = head if head and len(tail) >= 8 and all(c in "0123456789abcdef" for c in tail) else o.kernel
        found[family] = found.get(family, 0.0) + o.seconds
    return sorted(found.items(), key=lambda kv: -kv[1])


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 1)


def format_kinds(times: List[OpTime], nodes: List[OrtNode]) -> str:
    lines = ["%-6s  %12s  %15s" % ("kind", "svod_min ms", "onnxruntime ms")]
    lines += ["%-6s  %12.3f  %15.3f" % (k, s * 1e3, o * 1e3) for k, (s, o) in kind_totals(times, nodes).items()]
    return "\n".join(lines)


def format_ops(times: List[OpTime], top: int, nodes: Optional[List[OrtNode]] = None) -> str:
    total = sum(o.seconds for o in times) or 1.0
    lines = ["%5s  %-44s  %9s  %6s  %8s  %8s  %s" % ("op", "kernel", "time ms", "share", "GFLOP/s", "ort", "shape")]
    for o in times[:top]:
        rate = "-" if o.gflops is None else "%.1f" % o.gflops
        peer = ort_conv_seconds(nodes or [], o.conv)
        peer_rate = "-" if not peer or not o.flops else "%.1f" % (o.flops / peer / 1e9)
        lines.append(
            "%5d  %-44s  %9.3f  %5.1f%%  %8s  %8s  %s"
            % (o.index, o.kernel[:44], o.seconds * 1e3, 100 * o.seconds / total, rate, peer_rate, o.shape)
        )
    peak = peak_gflops(times)
    lines.append("by kernel: " + ", ".join("%s %.3f ms" % (f, t * 1e3) for f, t in kernel_families(times)[:6]))
    best = "-" if peak is None else "%.1f" % peak
    lines.append("total %.3f ms over %d ops; best op rate %s GFLOP/s" % (total * 1e3, len(times), best))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundle", help="a model bundle (.svod) or plan file")
    p.add_argument("--onnx", help="the ONNX model the bundle was built from: onnxruntime's profile beside svod_min's")
    p.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input (repeatable; default: the bundle's example)",
    )
    p.add_argument("--top", type=int, default=15, help="ops to list (default 15)")
    p.add_argument("--runs", type=int, default=3, help="profiled runs; each op's fastest counts (default 3)")
    args = p.parse_args(argv)
    inputs: Dict[str, Any] = {}
    for item in args.input:
        import numpy as np

        name, _, path = item.rpartition("=")
        inputs[name] = np.load(path)
    times, nodes = profiles(args.bundle, inputs, args.runs, args.onnx)
    print(format_ops(times, args.top, nodes))
    if args.onnx:
        print(format_kinds(times, nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
