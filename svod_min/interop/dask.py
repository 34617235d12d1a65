"""Model bundles as batch inference on Dask: :func:`predict_blocks` (arrays) and :func:`predict_partitions`
(dataframes).

The bundle is given as a path every worker can read (shared storage), as its bytes, or as a
:class:`ShippedBundle` (:func:`ship`: the bytes scattered to every worker once, so tasks carry a key,
not the bundle). The driver reads the plan once to know the output's shape and dtype, so ``meta`` is
exact and Dask never calls the model on stand-in arrays; a bundle the driver cannot read fails there,
with svod_min's error, before anything is scheduled. Each worker process loads a bundle once, on its
first task, and keeps it (keyed by the bundle's sha256) for every later task; a call uses as many
kernel threads as the worker runs tasks (calls on one loaded model run one at a time). Importing this
module does not import Dask.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ..error import BundleError, PlanError
from ..planfile.bundle import bundle_digest
from ..planfile.signing import TrustedKeys, TrustPolicy, trust_policy
from .batches import BatchLayout, batch_layout, cached_runner, plan_document


@dataclass(frozen=True)
class ShippedBundle:
    """A bundle's bytes scattered to the workers (``source``: the Dask future), with what the driver knows."""

    source: Any
    digest: str
    layout: BatchLayout
    policy: Optional[TrustPolicy] = None  # the trust policy the driver set; each worker checks the bundle under it


def ship(client: Any, bundle: Union[str, bytes], *, trusted_keys: TrustedKeys = None) -> ShippedBundle:
    """Scatter ``bundle`` (a path the driver reads, or bytes) to every worker of ``client`` once; under a trust
    policy (``trusted_keys``, None: the driver's ``SVOD_TRUSTED_KEYS``) the driver refuses it first.

    Workers that join later (a restarted one) fetch it from a peer when a task needs it.
    """
    data = bundle if isinstance(bundle, bytes) else _read(bundle)
    policy = trust_policy(trusted_keys)
    layout = batch_layout(plan_document(data, policy))
    return ShippedBundle(client.scatter(data, broadcast=True, hash=False), bundle_digest(data), layout, policy)


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:  # the project's error at the driver, as open_bundle gives for a path
        raise BundleError("%s: cannot read the bundle (%s)" % (path, exc.strerror or exc)) from None


def _shipped(bundle: Any, trusted_keys: TrustedKeys = None) -> ShippedBundle:
    """What the tasks get: a :class:`ShippedBundle` as is (``trusted_keys`` replacing its policy when given); a
    path or bytes read here for its layout and digest, under the policy."""
    if isinstance(bundle, ShippedBundle):
        return bundle if trusted_keys is None else replace(bundle, policy=trust_policy(trusted_keys))
    if not isinstance(bundle, (str, bytes)):
        raise PlanError("a bundle is a path, its bytes or a ShippedBundle (ship()), not %s" % type(bundle).__name__)
    policy = trust_policy(trusted_keys)
    return ShippedBundle(bundle, bundle_digest(bundle), batch_layout(plan_document(bundle, policy)), policy)


def worker_threads() -> int:
    """The task threads of the Dask worker this runs on (1 outside a worker)."""
    from distributed import get_worker

    try:
        return max(1, int(get_worker().state.nthreads))
    except ValueError:  # not on a worker: the local scheduler
        return 1


def run_rows(
    source: Any, digest: str, threads: Optional[int], feeds: Mapping[str, Any], policy: Optional[TrustPolicy] = None
) -> Dict[str, Any]:
    """One task's rows through this process's copy of the bundle (loaded by its first task, under ``policy``;
    None: the worker's ``SVOD_TRUSTED_KEYS``)."""
    runner = cached_runner(source, digest=digest, threads=threads or worker_threads(), trusted_keys=policy)
    return runner.run(feeds)


# --- arrays ----------------------------------------------------------------------------


def predict_blocks(
    arrays: Any,
    bundle: Any,
    *,
    output: Optional[str] = None,
    threads: Optional[int] = None,
    trusted_keys: TrustedKeys = None,
) -> Any:
    """The model's ``output`` for every row of ``arrays``: one Dask array (a one-input model) or
    ``{model input: array}``, chunked along the rows only (other axes are rechunked whole).

    Returns a Dask array with the inputs' row chunks and the output's row shape (a flat output of a
    symbolic-batch plan comes back as rows), its ``meta`` an empty array of the output's dtype.
    """
    import dask.array as da
    import numpy as np

    shipped = _shipped(bundle, trusted_keys)
    layout = shipped.layout
    named = _named_arrays(arrays, layout)
    port = layout.output(output) if output else _only_output(layout)
    names = list(named)
    first = named[names[0]]
    whole = [a.rechunk({axis: -1 for axis in range(1, a.ndim)}) for a in named.values()]
    if any(a.chunks[0] != whole[0].chunks[0] for a in whole):
        raise PlanError("inputs %s: their row chunks differ; rechunk them alike" % names)
    out_ndim = 1 + len(port.row_shape)
    return da.map_blocks(
        _predict_block,
        *whole,
        names=names,
        output_name=port.name,
        source=shipped.source,
        digest=shipped.digest,
        threads=threads,
        policy=shipped.policy,
        dtype=np.dtype(port.dtype),
        chunks=(whole[0].chunks[0],) + tuple((d,) for d in port.row_shape),
        meta=np.empty((0,) * out_ndim, dtype=port.dtype),
        drop_axis=list(range(out_ndim, first.ndim)) if out_ndim < first.ndim else [],
        new_axis=list(range(first.ndim, out_ndim)) if out_ndim > first.ndim else None,
    )


def _predict_block(
    *blocks: Any,
    names: List[str],
    output_name: str,
    source: Any,
    digest: str,
    threads: Optional[int],
    policy: Optional[TrustPolicy] = None,
) -> Any:
    return run_rows(source, digest, threads, dict(zip(names, blocks)), policy)[output_name]


def _named_arrays(arrays: Any, layout: BatchLayout) -> Dict[str, Any]:
    if isinstance(arrays, Mapping):
        named = dict(arrays)
    elif len(layout.inputs) == 1:
        named = {layout.inputs[0].name: arrays}
    else:
        raise PlanError(
            "the model takes %d inputs %s: give {input: array}" % (len(layout.inputs), [p.name for p in layout.inputs])
        )
    wanted = sorted(p.name for p in layout.inputs)
    if sorted(named) != wanted:
        raise PlanError("arrays for %s given; the model's inputs are %s" % (sorted(named), wanted))
    return named


def _only_output(layout: BatchLayout) -> Any:
    if len(layout.outputs) != 1:
        raise PlanError("the model has outputs %s: name one with output=" % [p.name for p in layout.outputs])
    return layout.outputs[0]


# --- dataframes ------------------------------------------------------------------------


def predict_partitions(
    frame: Any,
    bundle: Any,
    *,
    inputs: Optional[Mapping[str, Sequence[str]]] = None,
    outputs: Optional[Mapping[str, Sequence[str]]] = None,
    threads: Optional[int] = None,
    trusted_keys: TrustedKeys = None,
) -> Any:
    """``frame`` (a Dask dataframe) with the model's outputs added as columns, partition by partition.

    ``inputs``: ``{model input: [columns]}``, a row's values in the input's row order (default, for a
    one-input model: every column). ``outputs``: ``{model output: [new columns]}`` (default: every output,
    as ``NAME_0``, ``NAME_1``... or ``NAME`` for a one-value row).
    """
    shipped = _shipped(bundle, trusted_keys)
    layout = shipped.layout
    columns_in = _input_columns(inputs, layout, list(frame.columns))
    columns_out = _output_columns(outputs, layout)
    meta = frame._meta.assign(
        **{c: _empty(layout.output(name).dtype) for name, cols in columns_out.items() for c in cols}
    )
    return frame.map_partitions(
        _predict_partition,
        inputs=columns_in,
        outputs=columns_out,
        source=shipped.source,
        digest=shipped.digest,
        threads=threads,
        policy=shipped.policy,
        meta=meta,
    )


def _predict_partition(
    part: Any,
    inputs: Dict[str, List[str]],
    outputs: Dict[str, List[str]],
    source: Any,
    digest: str,
    threads: Optional[int],
    policy: Optional[TrustPolicy] = None,
) -> Any:
    result = run_rows(source, digest, threads, {name: part[cols].to_numpy() for name, cols in inputs.items()}, policy)
    added: Dict[str, Any] = {}
    for name, cols in outputs.items():
        rows = result[name].reshape(len(part), -1)
        added.update((c, rows[:, j]) for j, c in enumerate(cols))
    return part.assign(**added)


def _input_columns(
    inputs: Optional[Mapping[str, Sequence[str]]], layout: BatchLayout, columns: List[str]
) -> Dict[str, List[str]]:
    if inputs is None:
        if len(layout.inputs) != 1:
            raise PlanError(
                "the model takes inputs %s: give inputs={input: [columns]}" % [p.name for p in layout.inputs]
            )
        inputs = {layout.inputs[0].name: columns}
    chosen = {name: [cols] if isinstance(cols, str) else list(cols) for name, cols in inputs.items()}
    absent = sorted(c for cols in chosen.values() for c in cols if c not in columns)
    if absent:
        raise PlanError("column(s) %s not in the dataframe (columns: %s)" % (absent, columns))
    return chosen


def _output_columns(outputs: Optional[Mapping[str, Sequence[str]]], layout: BatchLayout) -> Dict[str, List[str]]:
    if outputs is not None:
        chosen = {name: [cols] if isinstance(cols, str) else list(cols) for name, cols in outputs.items()}
    else:
        chosen = {p.name: _default_columns(p.name, p.row_shape) for p in layout.outputs}
    for name, cols in chosen.items():
        size = 1
        for dim in layout.output(name).row_shape:
            size *= dim
        if len(cols) != size:
            raise PlanError("output %r: %d column(s) %s for rows of %d values" % (name, len(cols), cols, size))
    return chosen


def _default_columns(name: str, row_shape: Sequence[int]) -> List[str]:
    size = 1
    for dim in row_shape:
        size *= dim
    return [name] if size == 1 else ["%s_%d" % (name, j) for j in range(size)]


def _empty(dtype: str) -> Any:
    import numpy as np

    return np.empty(0, dtype=dtype)


__all__ = ["ShippedBundle", "predict_blocks", "predict_partitions", "run_rows", "ship", "worker_threads"]
