"""IR -> plan document: library kernel ops, generated C kernels, views, and one arena planned by liveness.

Op lowerings (:mod:`svod_min.onnx.ops`) call :class:`Lowering` to emit plan ops; values are
named after the model's tensors. Reshape-like ops alias their input (``view``), Concat places
its inputs straight into its output where the slices are contiguous (``place_into``), and
after all ops are emitted every value is resolved to a root: a graph input, a graph output, a
constant (weights, as ``.npy`` data), or a region of one arena whose offsets are reused once a
region's last reader has run. Peak memory is then weights + inputs/outputs + the largest live set.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...error import UnsupportedModelError
from ...planfile.status import SLOT_WORDS
from ..frontend.batch_rows import BatchRows
from ..frontend.ir import Graph, Value
from ..kernels.ckernel import CKernel

ARENA = "svod.arena"
#: The status buffer checking kernels report into (planfile/status.py): its own root, never in the arena, so it
#: starts each run zeroed and nothing else writes it.
STATUS = "svod.status"
#: The library kernels the lowering uses. The library's depthwise_conv2d, maxpool2d and avgpool2d run
#: slower than the generated C on the light models' shapes (docs/onnx.md, "Lowering"), so depthwise
#: convolutions and windowed pools stay generated until those kernels catch up; the paths stay tested.
LIBRARY_KERNELS = frozenset({"conv2d_gemm", "global_avgpool"})
#: The params of a float32 library kernel.
F32 = {"dtype": "float32"}
ALIGN = 64
#: The kernel variable a ranged build's generated kernels take the batch in (their ``int svod_batch`` argument).
BATCH_ARG = "batch"
#: Library kernels whose work follows the batch through one variable: kernel -> (variable, whether the variable
#: holds the batch only when the kernel's second buffer, its left operand, is batched too: a matmul's M).
BATCH_LIBRARY_VARS = {
    "conv2d": ("N", False),
    "conv2d_gemm": ("N", False),
    "depthwise_conv2d": ("N", False),
    "global_avgpool": ("N", False),
    "maxpool2d": ("N", False),
    "avgpool2d": ("N", False),
    "matmul": ("M", True),
    "layernorm": ("rows", False),
    "reduce_mean": ("outer", False),
    "reduce_max": ("outer", False),
    "reduce_sum": ("outer", False),
    "reduce_min": ("outer", False),
}
#: Library elementwise kernels: ``n`` counts every element, the batch's rows included.
BATCH_ELEMENTWISE_VAR = "n"


@dataclass
class PlanParts:
    """What the lowering produced: the plan document, the files it names (entry -> bytes), example inputs; the sizes
    and counts the build reports (``model_nodes``: the model's nodes before the passes)."""

    doc: Dict[str, Any]
    files: Dict[str, bytes]
    example_inputs: Dict[str, np.ndarray]
    arena_bytes: int
    weight_bytes: int
    kernels: Dict[str, int] = field(default_factory=dict)
    model_nodes: int = 0


def npy_bytes(data: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(data), allow_pickle=False)
    return buf.getvalue()


class Lowering:
    """Collects plan ops, kernels and aliases while the op table lowers each node."""

    def __init__(self, graph: Graph, batch: Optional[BatchRows] = None) -> None:
        self.graph = graph
        self.batch = batch
        # values that carry the batch, and their rows per batch row: the graph's, then temps that follow one
        self.batched: Dict[str, int] = dict(batch.values) if batch is not None else {}
        self.ops: List[Dict[str, Any]] = []
        self.access: List[List[str]] = []  # value names each op touches
        self.kernels: Dict[str, Dict[str, Any]] = {}
        self.alias: Dict[str, Tuple[str, int]] = {}
        self.counter = 0
        self.checks: List[Dict[str, Any]] = []  # the status buffer's records, one per checking op
        self.examples: Dict[str, np.ndarray] = {}  # inputs whose example value is given (a pinned input's pin)

    # -- values ---------------------------------------------------------------------------------

    def value(self, name: str) -> Value:
        return self.graph.values[name]

    def const(self, data: np.ndarray, hint: str) -> str:
        return self.graph.add_const(hint, np.ascontiguousarray(data))

    def temp(self, shape: Sequence[int], dtype: str = "float32", hint: str = "t") -> str:
        self.counter += 1
        name = "svod.%s%d" % (hint, self.counter)
        self.graph.values[name] = Value(name, tuple(int(d) for d in shape), dtype)
        return name

    def root(self, name: str) -> Tuple[str, int]:
        offset = 0
        while name in self.alias:
            name, extra = self.alias[name]
            offset += extra
        return name, offset

    def is_free(self, name: str) -> bool:
        """A value the lowering may place anywhere: computed at run time, not a graph input/output, not aliased."""
        g = self.graph
        return (
            g.values[name].const is None
            and name not in g.inputs
            and name not in g.outputs
            and name not in self.alias
            and self.root(name)[0] == name
        )

    def follow_batch(self, temps: Sequence[str], like: str) -> None:
        """In a ranged build, ``temps`` (a packed copy of ``like``, batch after batch) carry the batch when ``like``
        does: kernels writing them run only the bound rows' calls."""
        if like in self.batched:
            for name in temps:
                self.batched[name] = self.batched[like]

    def subview(self, base: str, byte_offset: int, shape: Sequence[int], dtype: str = "float32") -> str:
        name = self.temp(shape, dtype, "v")
        self.alias[name] = (base, byte_offset)
        return name

    def view(self, out: str, src: str) -> None:
        """``out`` holds ``src``'s bytes under another shape: an alias, or a copy where ``out`` needs its own buffer."""
        g = self.graph
        if out in g.outputs or src in g.outputs and out in g.inputs:
            self.copy(out, src)
        else:
            self.alias[out] = (src, 0)

    def place_into(self, part: str, whole: str, byte_offset: int) -> bool:
        """Make ``part`` live inside ``whole`` (Concat without a copy); False when ``part`` cannot move."""
        if not self.is_free(part) or part == whole:
            return False
        self.alias[part] = (whole, byte_offset)
        return True

    # -- ops ------------------------------------------------------------------------------------

    def library(self, kernel: str, params: Dict[str, Any], buffers: Sequence[str], variables: Dict[str, Any]) -> None:
        if self.nothing_to_write(buffers[:1]):  # the library's kernels write their first buffer
            return
        key = "lib.%s%s" % (kernel, "".join(".%s=%s" % (k, params[k]) for k in sorted(params) if k != "dtype"))
        self.kernels.setdefault(key, {"library": kernel, "params": dict(params)})
        bound = dict(variables, **self._library_batch(kernel, buffers, variables))
        self._op({"kernel": key, "buffers": list(buffers), "vars": bound}, buffers)

    def _library_batch(self, kernel: str, buffers: Sequence[str], variables: Dict[str, Any]) -> Dict[str, str]:
        """In a ranged build, the library variable that counts the batch's rows, as an expression of the batch."""
        b = self.batch
        if b is None or buffers[0] not in self.batched:
            return {}
        if kernel == "permute":  # its extents e0..e3 are the output's dims, padded with leading 1s
            var = next((k for k in ("e0", "e1", "e2", "e3") if variables.get(k) != 1), "e3")
            needs_left = False
        else:
            var, needs_left = BATCH_LIBRARY_VARS.get(kernel, (BATCH_ELEMENTWISE_VAR, False))
        value = variables.get(var)
        if type(value) is not int or value % b.hi or (needs_left and buffers[1] not in self.batched):
            return {}  # the whole largest batch: right for any binding, only slower
        per_row = value // b.hi
        return {var: b.variable if per_row == 1 else "%s * %d" % (b.variable, per_row)}

    def source(self, kernel: CKernel, buffers: Sequence[str], outputs: Sequence[int] = (0,)) -> None:
        """Run generated ``kernel`` on ``buffers``;
        ``outputs``: the positions it writes (a recurrence writes several)."""
        assert len(buffers) == kernel.buffers, (kernel.name, buffers)
        if self.nothing_to_write([buffers[i] for i in outputs]):
            return
        self.kernels.setdefault(
            kernel.name,
            {
                "source": kernel.source,
                "buffers": kernel.buffers,
                "outputs": list(outputs),
                "vars": ["core_id"] if self.batch is None else [BATCH_ARG, "core_id"],
                "global_size": [kernel.chunks, 1, 1],
                "extents": {str(i): e for i, e in enumerate(kernel.extents)},
            },
        )
        if kernel.flags:
            self.kernels[kernel.name]["flags"] = list(kernel.flags)
        if kernel.flops:
            self.kernels[kernel.name]["flops"] = self._batch_work(kernel.flops, buffers[0])
        self._op(
            dict({"kernel": kernel.name, "buffers": list(buffers)}, **self._source_batch(kernel, buffers)), buffers
        )

    def _batch_work(self, flops: int, written: str) -> Any:
        """A kernel's work, in a ranged build the bound rows' share of it (profiles rate the run's own work)."""
        if self.batch is None or written not in self.batched:
            return flops
        return "%d * %s // %d" % (flops, BATCH_ARG, self.batch.hi)

    def _source_batch(self, kernel: CKernel, buffers: Sequence[str]) -> Dict[str, Any]:
        """In a ranged build, the op's batch binding and, for a kernel whose calls share its first buffer's rows in
        order, a launch of only the calls that cover the bound rows (a superset: the last may run a row more)."""
        b = self.batch
        if b is None:
            return {}
        assert "int svod_batch, int core_id" in kernel.source, kernel.name  # rendered inside ranged_batch()
        out: Dict[str, Any] = {} if b.variable == BATCH_ARG else {"vars": {BATCH_ARG: b.variable}}
        if kernel.rows_first and kernel.chunks > 1 and buffers[0] in self.batched:
            out["global_size"] = ["ceildiv(%s * %d, %d)" % (BATCH_ARG, kernel.chunks, b.hi), 1, 1]
        return out

    def status_slots(
        self, node: str, what: str, shape: Sequence[int], why: str, slots: int, kind: str = "index", dtype: str = ""
    ) -> str:
        """The status buffer's part for one checking op: ``slots`` slots (one per core_id call) and the record that
        names what the op checks (``node``: its label; ``what``: the index input; ``why``: where the bound comes
        from; ``kind`` "pinned": a pinned input's check, ``what`` the input, ``dtype`` its dtype), as a view the
        kernel writes."""
        offset = sum(c["slots"] for c in self.checks) * SLOT_WORDS
        if self.batch is not None:  # a call that covers rows past the bound batch would check stale indices
            raise UnsupportedModelError(
                "ranged batch: %s checks %s, read at run time; this release checks those in fixed builds only: "
                "build with a fixed --shape" % (node, what)
            )
        record = {"offset": offset, "slots": slots, "node": node, "what": what, "shape": [int(d) for d in shape]}
        record["why"] = why
        if kind != "index":  # "index" is the default: index records read as plans before the field had them
            record.update(kind=kind, dtype=dtype)
        self.checks.append(record)
        words = offset + slots * SLOT_WORDS
        self.graph.values[STATUS] = Value(STATUS, (words,), "int64")
        return self.subview(STATUS, 8 * offset, [slots * SLOT_WORDS], "int64")

    def copy(self, dst: str, src: str) -> None:
        if self.nothing_to_write([dst]):
            return
        self._op({"copy": {"dst": dst, "src": src}}, [dst, src])

    def nothing_to_write(self, written: Sequence[str]) -> bool:
        """An op whose every written tensor is empty has no work: it is left out of the plan (a kernel is never
        dispatched on a 0-byte buffer)."""
        return all(self.graph.values[n].size == 0 for n in written)

    def _op(self, op: Dict[str, Any], touched: Sequence[str]) -> None:
        self.ops.append(op)
        self.access.append(list(touched))

    # -- the document ---------------------------------------------------------------------------

    def finish(self, description: str, seed: int = 0) -> PlanParts:
        self._outputs_written()
        used = [n for names in self.access for n in names]
        roots = {n: self.root(n) for n in dict.fromkeys(used)}
        offsets, arena = self._plan_arena(roots)
        files: Dict[str, bytes] = {}
        buffers: Dict[str, Any] = {}
        examples = self._declare_roots(roots, buffers, files, seed)
        weight_bytes = sum(
            self.graph.values[r].nbytes for r, _ in set(roots.values()) if self.graph.values[r].const is not None
        )
        if arena:
            buffers[ARENA] = {"dtype": "int8", "shape": [arena]}
        if self.checks:
            buffers[STATUS] = {"dtype": "int64", "shape": list(self.graph.values[STATUS].shape)}
        for name, (root, off) in roots.items():
            if name in buffers:
                continue
            base, start = (ARENA, offsets[root] + off) if root in offsets else (root, off)
            v = self.graph.values[name]
            buffers[name] = {"dtype": v.dtype, "shape": list(v.shape), "view_of": base, "offset": start}
        ops = [dict(op, deps=[i - 1]) if i else dict(op) for i, op in enumerate(self.ops)]
        doc = {"svod_plan": 1, "description": description, "buffers": buffers, "kernels": self.kernels, "ops": ops}
        self._declare_batch(doc)
        if self.checks:
            doc["checks"] = {"buffer": STATUS, "records": self.checks}
        return PlanParts(doc, files, examples, arena, weight_bytes)

    def _declare_batch(self, doc: Dict[str, Any]) -> None:
        """A ranged build's plan variable, and the dims of the inputs and outputs that carry it (bound at run time)."""
        b = self.batch
        if b is None:
            return
        doc["vars"] = {b.variable: {"min": b.lo, "max": b.hi, "default": b.hi}}
        for name in list(self.graph.inputs) + list(self.graph.outputs):
            buf = doc["buffers"].get(name)
            if buf is not None and name in b.values:
                per_row = b.values[name]
                first = b.variable if per_row == 1 else "%s * %d" % (b.variable, per_row)
                buf["dims"] = [first] + list(buf["shape"][1:])

    def _outputs_written(self) -> None:
        """Graph outputs nothing wrote (a constant result, an input passed through) are copied in."""
        written = {self.root(n)[0] for names in self.access for n in names[:1]}
        first = len(self.ops)
        for out in self.graph.outputs:
            if out in written:
                continue
            v = self.graph.values[out]
            if v.const is not None:
                src = self.const(v.const, out + "~const")
                v.const = None
                self.copy(out, src)
        # the copies run before every other op: the ops may read views of a constant output (a CastLike of it)
        self.ops[:] = self.ops[first:] + self.ops[:first]
        self.access[:] = self.access[first:] + self.access[:first]

    def _plan_arena(self, roots: Dict[str, Tuple[str, int]]) -> Tuple[Dict[str, int], int]:
        """Offsets of the arena's roots: first fit over [first use, last use] intervals, in order of first use."""
        g = self.graph
        span: Dict[str, List[int]] = {}
        for i, names in enumerate(self.access):
            for n in names:
                r = roots[n][0]
                if g.values[r].const is None and r not in g.inputs and r not in g.outputs and r != STATUS:
                    s = span.setdefault(r, [i, i])
                    s[1] = i
        live: List[Tuple[int, int, int]] = []  # (offset, size, last use)
        offsets: Dict[str, int] = {}
        top = 0
        for r in sorted(span, key=lambda n: span[n][0]):
            first, last = span[r]
            size = -(-g.values[r].nbytes // ALIGN) * ALIGN
            live = sorted((o, s, e) for o, s, e in live if e >= first)
            at = 0
            for o, s, _ in live:
                if at + size <= o:
                    break
                at = max(at, o + s)
            offsets[r] = at
            live.append((at, size, last))
            top = max(top, at + size)
        return offsets, top

    def _declare_roots(
        self, roots: Dict[str, Tuple[str, int]], buffers: Dict[str, Any], files: Dict[str, bytes], seed: int
    ) -> Dict[str, np.ndarray]:
        g = self.graph
        rng = np.random.default_rng(seed)
        examples: Dict[str, np.ndarray] = {}
        for i, name in enumerate(g.inputs):
            v = g.values[name]
            data = self.examples[name] if name in self.examples else _example(rng, v)
            examples[name] = data
            files["data/input%d.npy" % i] = npy_bytes(data)
            buffers[name] = {
                "dtype": v.dtype,
                "shape": list(v.shape),
                "init": {"npy": "data/input%d.npy" % i},
                "input": True,
            }
        for name in g.outputs:
            v = g.values[name]
            # an output that is also an input (a graph returning its input) stays the input buffer, marked output too
            buffers[name] = dict(buffers.get(name, {"dtype": v.dtype, "shape": list(v.shape)}), output=True)
        consts = sorted({r for r, _ in roots.values() if g.values[r].const is not None})
        for i, name in enumerate(consts):
            v = g.values[name]
            entry = "data/w%04d.npy" % i
            files[entry] = npy_bytes(v.const)  # type: ignore[arg-type]
            buffers[name] = {"dtype": v.dtype, "shape": list(v.shape), "init": {"npy": entry}}
        return examples


def _example(rng: Any, v: Value) -> np.ndarray:
    """A seeded example input the bundle runs (and verifies) by default."""
    if np.dtype(v.dtype).kind == "f" or v.dtype == "bfloat16":  # ml_dtypes' bfloat16 is of kind V
        return rng.uniform(-1.0, 1.0, v.shape).astype(v.dtype)
    if v.dtype == "bool":
        return rng.integers(0, 2, v.shape).astype(bool)
    return rng.integers(0, 4, v.shape).astype(v.dtype)
