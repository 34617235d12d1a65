"""Rows in, rows out: a model bundle run over batches of any size (the engine-neutral half of the Ray and
Dask bridges, :mod:`svod_min.interop.ray` and :mod:`svod_min.interop.dask`).

A bundle's inputs have a fixed leading dimension: its batch. :func:`batch_layout` reads, from the plan
document alone (nothing is compiled), how many rows one run takes and the shape and dtype of one row of
each input and output. :class:`BatchRunner` cuts a batch of ``n`` rows into runs of that many: with a
plan batch variable (a symbolic batch, docs/tinygrad.md) each run binds it to its row count (when the inputs
carry ranged dims, docs/plan-format.md, a run is fed only its rows and its outputs come back at their bound
rows), otherwise the last piece is padded with zeros and the padding's outputs dropped. :func:`cached_runner`
keeps one loaded model per process, keyed by the bundle's sha256, so a worker loads a bundle once however many
tasks it runs. numpy is needed here (the engines hand over numpy arrays).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from ..devices.cpu.device import CpuDevice
from ..dtypes import dtype as svod_dtype
from ..error import PlanError
from ..planfile.bundle import BundleSource, bundle_digest, is_bundle, open_bundle
from ..planfile.load import Model, load_model
from ..planfile.schema import read_plan_document
from ..planfile.signing import TrustedKeys, refuse_plan_file, trust_policy

#: The names a plan's batch variable goes by when the plan has several variables.
BATCH_VARIABLE = "batch"


@dataclass(frozen=True)
class Port:
    """One input or output of a model seen as rows: its name, numpy dtype and the shape of one row."""

    name: str
    dtype: str
    row_shape: Tuple[int, ...]


@dataclass(frozen=True)
class BatchLayout:
    """How a model takes rows: ``rows`` per run (the fixed batch, or the batch variable's maximum),
    the plan's batch ``variable`` if it has one, and its input and output ports; ``ranged``: every input's
    leading dim is the batch variable (its dims), so a run takes its rows alone, unpadded."""

    rows: int
    variable: Optional[str]
    inputs: Tuple[Port, ...]
    outputs: Tuple[Port, ...]
    ranged: bool = False

    def output(self, name: str) -> Port:
        for port in self.outputs:
            if port.name == name:
                return port
        raise PlanError(
            "output %r: the model has no such output (outputs: %s)" % (name, ", ".join(p.name for p in self.outputs))
        )


def plan_document(source: BundleSource, trusted_keys: TrustedKeys = None) -> Dict[str, Any]:
    """The plan document of a bundle (path or bytes) or plan file, read and checked, nothing compiled; under a
    trust policy (``trusted_keys``, or ``SVOD_TRUSTED_KEYS``) its signature too, so the driver refuses first."""
    policy = trust_policy(trusted_keys)
    if isinstance(source, str) and not is_bundle(source):
        refuse_plan_file(source, policy)
        return read_plan_document(source)
    return open_bundle(source, trust=policy).plan


def batch_layout(doc: Mapping[str, Any]) -> BatchLayout:
    """The rows a plan document's model takes per run; PlanError naming the buffer that has no row dimension."""
    buffers = doc.get("buffers") or {}
    inputs = [(n, b) for n, b in buffers.items() if b.get("input")]
    outputs = [(n, b) for n, b in buffers.items() if b.get("output")]
    if not inputs:
        raise PlanError("the model has no input buffer: there is nothing to feed rows into")
    leading = {n: (list(b.get("shape") or []) or [0])[0] for n, b in inputs}
    variable = _batch_variable(doc.get("vars") or {}, set(leading.values()))
    rows = _variable_max(doc["vars"][variable]) if variable else leading[inputs[0][0]]
    for name, lead in leading.items():
        if lead != rows or rows < 1:
            raise PlanError(
                "input %r: leading dimension %d; every input needs the same batch dimension (%d)" % (name, lead, rows)
            )
    in_ports = tuple(Port(n, _numpy_name(b), tuple(b["shape"][1:])) for n, b in inputs)
    ranged = variable is not None and all((list(b.get("dims") or []) or [None])[0] == variable for _, b in inputs)
    return BatchLayout(rows, variable, in_ports, tuple(_output_port(n, b, rows) for n, b in outputs), ranged)


def _batch_variable(variables: Mapping[str, Any], leading: set) -> Optional[str]:
    """The plan variable that counts rows: ``batch``, or the only variable, when its maximum is the inputs' batch."""
    names = [BATCH_VARIABLE] if BATCH_VARIABLE in variables else list(variables) if len(variables) == 1 else []
    return next((n for n in names if {_variable_max(variables[n])} == leading), None)


def _variable_max(spec: Any) -> int:
    return int(spec[1]) if isinstance(spec, list) else int(spec["max"])


def _numpy_name(buffer: Mapping[str, Any]) -> str:
    name = svod_dtype(buffer.get("dtype", "float32")).numpy_name
    if name is None:
        raise PlanError("dtype %r has no numpy equivalent to carry rows in" % buffer.get("dtype"))
    return name


def _output_port(name: str, buffer: Mapping[str, Any], rows: int) -> Port:
    """An output's row: its leading dimension is the batch, or (a flat output) its size divides into ``rows``."""
    shape = list(buffer.get("shape") or [])
    if shape and shape[0] == rows:
        return Port(name, _numpy_name(buffer), tuple(shape[1:]))
    size = 1
    for dim in shape:
        size *= dim
    if len(shape) == 1 and size % rows == 0:
        return Port(name, _numpy_name(buffer), (size // rows,))
    raise PlanError("output %r: shape %s has no row per input row (batch %d)" % (name, shape, rows))


class BatchRunner:
    """A loaded model and its layout: :meth:`run` takes any number of rows and returns as many."""

    def __init__(self, model: Model, layout: BatchLayout) -> None:
        self.model = model
        self.layout = layout

    def run(self, columns: Mapping[str, Any]) -> Dict[str, Any]:
        """``{input name: array of n rows}`` -> ``{output name: array of n rows}``, row i from input row i."""
        import numpy as np

        arrays, n = self._rows(columns)
        out = {p.name: np.empty((n,) + p.row_shape, dtype=p.dtype) for p in self.layout.outputs}
        step, ranged = self.layout.rows, self.layout.ranged
        for start in range(0, n, step):
            count = min(step, n - start)
            feed = {
                name: a[start : start + count] if ranged else _padded(a[start : start + count], step)
                for name, a in arrays.items()
            }
            # ranged inputs bind the variable themselves; an explicit value would only repeat it
            variables = {self.layout.variable: count} if self.layout.variable and not ranged else None
            result = self.model.run(feed, variables)
            for port in self.layout.outputs:  # a bound output, or the whole buffer: row i starts at the same place
                out[port.name][start : start + count] = _first_rows(result[port.name], count, port.row_shape)
        return out

    def _rows(self, columns: Mapping[str, Any]) -> Tuple[Dict[str, Any], int]:
        """Each input as a contiguous array of the model's dtype and row shape; the common row count."""
        import numpy as np

        missing = [p.name for p in self.layout.inputs if p.name not in columns]
        if missing:
            raise PlanError(
                "input(s) %s not given (the model takes %s)" % (missing, [p.name for p in self.layout.inputs])
            )
        arrays: Dict[str, Any] = {}
        for port in self.layout.inputs:
            arrays[port.name] = _as_rows(np.asarray(columns[port.name]), port)
        counts = {name: a.shape[0] for name, a in arrays.items()}
        if len(set(counts.values())) > 1:
            raise PlanError("inputs of one batch differ in rows: %s" % counts)
        return arrays, next(iter(counts.values()))


def _as_rows(array: Any, port: Port) -> Any:
    """``array`` as rows of ``port``: a row of the same size is reshaped,
    a same-kind dtype cast (float64 -> float32)."""
    import numpy as np

    size = 1
    for dim in port.row_shape:
        size *= dim
    if array.ndim == 0 or (array.size != array.shape[0] * size):
        raise PlanError(
            "input %r: got shape %s, rows of %s (size %d) expected"
            % (port.name, list(array.shape), list(port.row_shape), size)
        )
    if not np.can_cast(array.dtype, port.dtype, casting="same_kind"):
        raise PlanError("input %r: got %s, the model takes %s" % (port.name, array.dtype, port.dtype))
    return np.ascontiguousarray(array.reshape((array.shape[0],) + port.row_shape), dtype=port.dtype)


def _first_rows(array: Any, count: int, row_shape: Tuple[int, ...]) -> Any:
    """The first ``count`` rows of ``row_shape`` in ``array``'s C-order elements."""
    return array.reshape(-1)[: count * math.prod(row_shape)].reshape((count,) + row_shape)


def _padded(rows: Any, count: int) -> Any:
    """``rows`` with zero rows added up to ``count`` (the model's fixed batch)."""
    import numpy as np

    if rows.shape[0] == count:
        return rows
    pad = np.zeros((count - rows.shape[0],) + rows.shape[1:], dtype=rows.dtype)
    return np.concatenate([rows, pad])


def load_runner(
    source: BundleSource, *, threads: int = 1, device: Any = None, trusted_keys: TrustedKeys = None
) -> BatchRunner:
    """A bundle (path or bytes) loaded onto ``device`` (default: a CPU device of ``threads`` threads); under the
    trust policy ``trusted_keys`` (None: ``SVOD_TRUSTED_KEYS``) only if one of its keys signed it."""
    policy = trust_policy(trusted_keys)
    layout = batch_layout(plan_document(source, policy))
    model = load_model(
        bytes(source) if not isinstance(source, str) else source,
        device=device if device is not None else CpuDevice(threads=max(1, int(threads))),
        trusted_keys=policy,
    )
    return BatchRunner(model, layout)


_RUNNERS: Dict[Tuple[str, int, Optional[Tuple[str, ...]]], BatchRunner] = {}
_RUNNERS_LOCK = threading.Lock()


def cached_runner(
    source: BundleSource, *, digest: Optional[str] = None, threads: int = 1, trusted_keys: TrustedKeys = None
) -> BatchRunner:
    """This process's runner for the bundle whose sha256 is ``digest`` (computed from ``source`` if not given),
    loaded on first use; a bundle's content, not its path, names it (the same file at two paths loads once).
    A runner loaded under one trust policy is not reused under another (the keys are part of the key)."""
    policy = trust_policy(trusted_keys)
    key = (digest or bundle_digest(source), int(threads), policy.key_ids() if policy is not None else None)
    with _RUNNERS_LOCK:
        runner = _RUNNERS.get(key)
        if runner is None:
            runner = _RUNNERS[key] = load_runner(source, threads=threads, trusted_keys=policy)
        return runner


def cached_digests() -> Tuple[str, ...]:
    """The sha256 of every bundle loaded in this process (what a worker holds)."""
    with _RUNNERS_LOCK:
        return tuple(sorted({key[0] for key in _RUNNERS}))


__all__ = [
    "BATCH_VARIABLE",
    "BatchLayout",
    "BatchRunner",
    "Port",
    "batch_layout",
    "cached_digests",
    "cached_runner",
    "load_runner",
    "plan_document",
]
