"""``python -m svod_min build MODEL.onnx -o MODEL.svod``: read, check, pass, lower, record expectations, bundle.

Everything that can refuse the model (the file, the shapes, every node's op, attributes and
dtypes) runs before the bundle is written, and the bundle is written to a temporary file that is
renamed into place: a refused or failed build leaves nothing at ``-o``.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..error import UnsupportedModelError
from ..planfile.bundle_build import BuildReport, PlanTuner, build_bundle_from_document
from ..planfile.memory_budget import build_warning, check_build_values, recording_refusal
from .frontend.batch_rows import BatchRows, batched_values
from .frontend.half import compute_halves_in_float, with_halves
from .frontend.ir import Graph
from .frontend.layout import block_channels
from .frontend.parse import load_model, read_graph
from .frontend.passes import run_passes
from .frontend.pins import pinned_values
from .frontend.ranged import BatchRange, Dim, at_size, batch_range
from .frontend.table import OPS, check_graph
from .kernels.ckernel import ranged_batch
from .ops import (  # noqa: F401 - they fill the op table
    along_axis,
    blocked,
    cast,
    clip,
    col2im,
    compress,
    conv,
    conv_transpose,
    deform_conv,
    einsum,
    elementwise,
    eye_like,
    grid_sample,
    indexed,
    lp_pool,
    matmul,
    matrix,
    max_unpool,
    norm,
    pool,
    quant,
    quant_integer,
    reduce,
    resize,
    rnn,
    sequence,
    shape,
    shrink,
    space_depth,
    tensor_scatter,
    topk,
)
from .ops.lowering import Lowering, PlanParts, npy_bytes
from .ops.pinned import check_pins
from .peer_reference import with_unsigned_weights

#: Tolerance recorded with the expected outputs (onnxruntime's float32 sums run in another order): an element may
#: differ by ATOL + RTOL x its value, where ATOL is at least NEAR_ZERO x RTOL x the output's largest |value| (an
#: element near zero of logits in the hundreds carries the float32 rounding of sums that large).
RTOL, ATOL, NEAR_ZERO = 1e-3, 1e-5, 1e-3
#: A model that computes in float16 or bfloat16 anywhere (values stored in it between ops) carries that rounding into
#: float32 outputs: one float16 rounding is 4.9e-4 relative, one bfloat16 rounding 3.9e-3, and tens of layers add a
#: few; onnxruntime rounds at other places than svod_min where it has half kernels of its own. Its absolute part is
#: that of the output's largest value (NEAR_ZERO 1): a half intermediate rounds a small element of a large output by
#: the large element's ulp (an Inception v2 logit of 0.1 beside one of 69, float16's ulp there 0.06).
RTOL_HALF = {"float16": 1e-2, "bfloat16": 5e-2}
#: A model that quantizes run-time values (DynamicQuantizeLinear, QuantizeLinear of an activation): a float32
#: rounding difference before a quantizer moves a value one step (1/255 of its range) now and then, and later layers
#: spread that step (onnxruntime's own int8 runs of the light shufflenet and the zoo's PP-LCNet end 1.1% and 2.2% of
#: the largest output from svod_min's, both as far from the float model). Its absolute part is the largest value's.
RTOL_QUANTIZED = 5e-2
QUANTIZED_DTYPES = ("int8", "uint8", "int16", "uint16")


def output_atol(values: np.ndarray, rtol: float = RTOL) -> float:
    """The absolute tolerance recorded for one output: ATOL, or more for an output of large values (for a half
    model's rtol, the largest value's own tolerance)."""
    largest = float(np.max(np.abs(values))) if values.size else 0.0
    near_zero = 1.0 if rtol > RTOL else NEAR_ZERO
    return max(ATOL, near_zero * rtol * largest) if np.isfinite(largest) else ATOL


def model_rtol(buffers: Mapping[str, Any]) -> float:
    """The relative tolerance of a plan's outputs: RTOL, the coarsest half precision any of its buffers holds, or
    RTOL_QUANTIZED where it quantizes run-time values (an 8- or 16-bit integer value computed by a run: one placed
    in the arena, or an output; the arena itself is bytes)."""
    halves = [RTOL_HALF[b.get("dtype")] for b in buffers.values() if b.get("dtype") in RTOL_HALF]
    computed = [b for b in buffers.values() if "view_of" in b or b.get("output")]
    quantized = [RTOL_QUANTIZED for b in computed if b.get("dtype") in QUANTIZED_DTYPES]
    return max([RTOL] + halves + quantized)


@dataclass
class OnnxBuild:
    """What an ONNX build produced: the bundle report plus the model's numbers (``nodes``: the model's, before the
    passes fuse and fold them; ``plan_ops``: the plan's)."""

    report: BuildReport
    nodes: int
    plan_ops: int
    kernels: Dict[str, int]
    arena_bytes: int
    weight_bytes: int
    expectations: str


def prepared_graph(graph: Graph) -> Graph:
    """Checked IR -> the graph the op table lowers: float16/bfloat16 nodes of float32-only ops computed in float32
    first (:mod:`.frontend.half`), checked, passed, channels blocked."""
    graph = compute_halves_in_float(graph, OPS)
    check_graph(graph)
    check_build_values(
        ((name, v.shape, v.dtype) for name, v in graph.values.items() if v.const is None),
        ((name, graph.values[name].shape, graph.values[name].dtype) for name in graph.inputs),
    )
    return block_channels(run_passes(graph))


def lower_graph(
    graph: Graph,
    description: str,
    pinned: Optional[Mapping[str, np.ndarray]] = None,
    batch: Optional[Callable[[Graph], BatchRows]] = None,
) -> PlanParts:
    """Checked IR -> plan document and files (:func:`prepared_graph` first); ``batch``: a ranged build's batch, found
    from the prepared graph."""
    model_nodes = len(graph.nodes)
    graph = prepared_graph(graph)
    rows = batch(graph) if batch is not None else None
    lowering = Lowering(graph, rows)
    with ranged_batch(rows.hi) if rows is not None else contextlib.nullcontext():
        for node in graph.nodes:
            OPS[node.op].lower(lowering, node)
    check_pins(lowering, pinned or {})  # inputs pinned at build: fed values compared with the pins at each run
    parts = lowering.finish(description)
    parts.model_nodes = model_nodes
    parts.kernels = {
        "library": sum(1 for k in parts.doc["kernels"].values() if "library" in k),
        "generated C": sum(1 for k in parts.doc["kernels"].values() if "source" in k),
    }
    return parts


def lower_model(
    path: str,
    dims: Optional[Mapping[str, Dim]] = None,
    shapes: Optional[Mapping[str, Sequence[Dim]]] = None,
    pins: Optional[Mapping[str, Any]] = None,
) -> PlanParts:
    """``pins``: inputs whose values the build takes as known (``build --pin``, :mod:`.frontend.pins`); a dim given as
    a :class:`DimRange` makes a ranged-batch build (:mod:`.frontend.ranged`)."""
    ranged = batch_range(dims or {}, shapes or {})
    if ranged is not None and pins:
        raise UnsupportedModelError("--pin and a ranged dim together are not supported: build with a fixed --shape")
    fixed_dims, fixed_shapes = at_size(dims or {}, shapes or {}, ranged.hi if ranged else 0)
    graph = read_graph(path, fixed_dims, fixed_shapes, with_halves(OPS), pins)  # half nodes: see lower_graph
    pinned = pinned_values(graph, list(pins or {}))
    outs = ", ".join("%s %s" % (o, list(graph.values[o].shape)) for o in graph.outputs)
    ins = ", ".join("%s %s" % (i, list(graph.values[i].shape)) for i in graph.inputs)
    description = "ONNX model %s (opset %d): inputs %s -> outputs %s" % (os.path.basename(path), graph.opset, ins, outs)
    if ranged is not None:
        description += "; %s ranged %d..%d" % (ranged.variable, ranged.lo, ranged.hi)
    batch = None if ranged is None else functools.partial(_batch_rows, path, dims or {}, shapes or {}, ranged)
    return lower_graph(graph, description, pinned, batch)


def _batch_rows(
    path: str, dims: Mapping[str, Dim], shapes: Mapping[str, Sequence[Dim]], ranged: BatchRange, graph: Graph
) -> BatchRows:
    """The batched values of ``graph`` (prepared at the range's largest size), found against the model read and
    prepared at a second size."""
    alt_dims, alt_shapes = at_size(dims, shapes, ranged.alternate)
    other = prepared_graph(read_graph(path, alt_dims, alt_shapes, with_halves(OPS)))
    values = batched_values(graph, other, ranged.hi, ranged.alternate)
    if not any(name in values for name in graph.inputs):
        raise UnsupportedModelError("ranged batch: no input of the model carries the ranged dim")
    return BatchRows(ranged.variable, ranged.lo, ranged.hi, values)


def record_expectations(
    path: str, parts: PlanParts, dims: Mapping[str, int], shapes: Mapping[str, Sequence[int]]
) -> str:
    """Expected outputs for the example inputs from onnxruntime, when it is installed (else a note why not)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "no expectations recorded (onnxruntime is not installed)"
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    try:
        source, feeds = _reference_model(path, parts)
        session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        results = _run_session(ort, session, parts, feeds)
    except Exception as exc:  # onnxruntime refusing a model we lower is worth a note, not a failed build
        return "no expectations recorded (onnxruntime: %s)" % str(exc).splitlines()[0][:200]
    expect: Dict[str, Any] = {}
    rtol = model_rtol(parts.doc["buffers"])
    for i, (meta, value) in enumerate(zip(session.get_outputs(), results)):
        entry = "expect/out%d.npy" % i
        parts.files[entry] = npy_bytes(np.asarray(value))
        shown = np.asarray(value)
        if parts.doc["buffers"][meta.name]["dtype"] == "bfloat16":  # its bits: the values are their top halves
            shown = (shown.astype(np.uint32) << 16).view(np.float32)
        expect[meta.name] = {"npy": entry, "rtol": rtol, "atol": output_atol(shown, rtol)}
    parts.doc["expect"] = expect
    return "expectations recorded from onnxruntime %s for the example inputs" % ort.__version__


def _reference_model(path: str, parts: PlanParts) -> Tuple[Union[str, bytes], Dict[str, np.ndarray]]:
    """What onnxruntime runs for the expectations: the model file itself, or, where the plan holds 8-bit tensors
    (onnxruntime's int8 kernels may saturate there), the model rewritten to its exact uint8 form
    (:mod:`.peer_reference`), with the example inputs to match."""
    feeds = dict(parts.example_inputs)
    if not any(b.get("dtype") in ("int8", "uint8") for b in parts.doc["buffers"].values()):
        return path, feeds
    model, feeds = with_unsigned_weights(load_model(path), feeds, in_place=True)
    return model.SerializeToString(), feeds


def _run_session(ort: Any, session: Any, parts: PlanParts, feeds: Dict[str, np.ndarray]) -> List[np.ndarray]:
    """onnxruntime's outputs for the example inputs. numpy has no bfloat16 onnxruntime takes: where an input or an
    output is bfloat16 its bits are bound as OrtValues of that type, and the output comes back as its uint16 bits
    (the form a bfloat16 expectation is stored in, docs/plan-format.md)."""
    buffers = parts.doc["buffers"]
    names = [o.name for o in session.get_outputs()]
    if all(buffers[n]["dtype"] != "bfloat16" for n in list(parts.example_inputs) + names):
        return session.run(None, feeds)
    binding = session.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, _ort_value(ort, np.ascontiguousarray(value), buffers[name]["dtype"]))
    results = []
    for name in names:
        b = buffers[name]
        out = np.zeros(b["shape"], "uint16" if b["dtype"] == "bfloat16" else b["dtype"])
        binding.bind_ortvalue_output(name, _ort_value(ort, out, b["dtype"]))
        results.append(out)
    session.run_with_iobinding(binding)
    return results


def _ort_value(ort: Any, array: np.ndarray, dtype: str) -> Any:
    """``array`` as an OrtValue sharing its memory: a bfloat16 one (ml_dtypes' or its uint16 bits) as ONNX's
    BFLOAT16 (element type 16)."""
    if dtype == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), 16)
    return ort.OrtValue.ortvalue_from_numpy(array)


def build_onnx(
    path: str,
    out: str,
    *,
    targets: Optional[Sequence[str]] = None,
    compiler: Optional[str] = None,
    dims: Optional[Mapping[str, int]] = None,
    shapes: Optional[Mapping[str, Sequence[int]]] = None,
    expect: bool = True,
    progress: Callable[[str], None] = lambda line: None,
    tune: Optional[PlanTuner] = None,
    sign: Optional[Callable[[bytes], bytes]] = None,
    pins: Optional[Mapping[str, Any]] = None,
) -> OnnxBuild:
    """Lower, record expectations, tune (``tune``: ``build --tune``'s step, None: the defaults), bundle (signed
    by ``sign``: ``build --sign KEY``, :func:`svod_min.planfile.signing.signer`); ``pins``: inputs built for one
    value (``build --pin``), checked at each run."""
    parts = lower_model(path, dims, shapes, pins)
    progress(
        "lowered %s: %d model nodes, %d plan ops, %d library + %d generated kernels, arena %d bytes, weights %d bytes"
        % (
            path,
            parts.model_nodes,
            len(parts.doc["ops"]),
            parts.kernels["library"],
            parts.kernels["generated C"],
            parts.arena_bytes,
            parts.weight_bytes,
        )
    )
    warning = build_warning(parts.doc)  # a host like this one would refuse to run it: said, not refused
    if warning:
        progress(warning)
    unrecordable = recording_refusal(parts.doc) if expect else "--no-expect"
    note = (
        record_expectations(path, parts, dims or {}, shapes or {})
        if unrecordable is None
        else "no expectations recorded (%s)" % unrecordable
    )
    progress(note)
    report = build_bundle_from_document(
        parts.doc,
        parts.files,
        out,
        targets=targets,
        compiler=compiler,
        progress=progress,
        created_by="python -m svod_min build (ONNX %s)" % os.path.basename(path),
        tune=tune,
        sign=sign,
    )
    return OnnxBuild(
        report, parts.model_nodes, len(parts.doc["ops"]), parts.kernels, parts.arena_bytes, parts.weight_bytes, note
    )
