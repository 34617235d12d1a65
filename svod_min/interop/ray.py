"""Model bundles as batch inference on Ray Data: ``Dataset.map_batches(BundlePredictor, ...)``.

:class:`BundlePredictor` is the callable class Ray Data constructs once per actor: it loads the bundle
(a path every node can read, its bytes, or an ``ObjectRef`` to its bytes) with as many kernel threads
as the actor has CPUs, then takes batches (dicts of numpy arrays) of any size and returns them with the
model's outputs added as columns. :func:`predict` is ``map_batches`` with these arguments filled in and
retries bounded, so nothing is retried forever.
Importing this module does not import Ray; constructing a predictor does.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Union

from ..error import PlanError, SvodError
from ..planfile.signing import TrustedKeys, trust_policy
from .batches import BatchLayout, load_runner

#: Columns named after the model's outputs (a mapping), or the outputs to keep under their own names (a list).
OutputColumns = Optional[Union[Mapping[str, str], Sequence[str]]]


class BundlePredictor:
    """Loads ``bundle`` once (per Ray actor) and adds its outputs to each batch.

    ``inputs``: ``{model input: batch column}`` (default: columns named as the inputs). ``outputs``:
    ``{model output: new column}`` or a list of outputs (default: every output, under its own name).
    ``threads``: kernel threads (default: the CPUs Ray assigned to this actor, at least 1). ``trusted_keys``: the
    trust policy (a TrustPolicy, a key directory the actor can read; None: the actor's ``SVOD_TRUSTED_KEYS``).
    """

    def __init__(
        self,
        bundle: Any,
        inputs: Optional[Mapping[str, str]] = None,
        outputs: OutputColumns = None,
        threads: Optional[int] = None,
        trusted_keys: TrustedKeys = None,
    ) -> None:
        self.threads = int(threads) if threads else actor_cpus()
        self.load_error: Optional[SvodError] = None
        try:
            self.runner = load_runner(_resolved(bundle), threads=self.threads, trusted_keys=trusted_keys)
        except SvodError as exc:
            # raised by the first batch instead: a failed batch reaches the driver as this error and is not
            # retried, where a failed actor start reaches it as an ActorDiedError once Ray Data has spent its
            # budget of failed starts
            self.load_error = exc
            return
        layout = self.runner.layout
        self.inputs = dict(inputs) if inputs else {p.name: p.name for p in layout.inputs}
        unknown = sorted(set(self.inputs) - {p.name for p in layout.inputs})
        missing = sorted({p.name for p in layout.inputs} - set(self.inputs))
        if unknown or missing:
            raise PlanError(
                "inputs %s: the model's inputs are %s (missing %s, unknown %s)"
                % (self.inputs, [p.name for p in layout.inputs], missing, unknown)
            )
        self.outputs = output_columns(outputs, layout)

    def __call__(self, batch: Mapping[str, Any]) -> Dict[str, Any]:
        if self.load_error is not None:
            raise self.load_error
        absent = sorted(c for c in self.inputs.values() if c not in batch)
        if absent:
            raise PlanError("batch column(s) %s not found (columns: %s)" % (absent, sorted(batch)))
        result = self.runner.run({name: batch[column] for name, column in self.inputs.items()})
        out = dict(batch)
        for name, column in self.outputs.items():
            out[column] = result[name]
        return out


def output_columns(outputs: OutputColumns, layout: BatchLayout) -> Dict[str, str]:
    """``{model output: column}`` from what the caller gave; PlanError for an output the model lacks."""
    if outputs is None:
        chosen = {p.name: p.name for p in layout.outputs}
    elif isinstance(outputs, Mapping):
        chosen = dict(outputs)
    else:
        chosen = {name: name for name in outputs}
    for name in chosen:
        layout.output(name)
    return chosen


def actor_cpus() -> int:
    """The CPUs Ray assigned to the calling actor or task, rounded to a thread count (1 outside Ray)."""
    import ray

    if not ray.is_initialized():
        return 1
    cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 1.0)
    return max(1, int(round(cpus)))


def _resolved(bundle: Any) -> Any:
    """An ``ObjectRef`` to a bundle's bytes fetched; a path or bytes as given."""
    import ray

    return ray.get(bundle) if isinstance(bundle, ray.ObjectRef) else bundle


def predict(
    dataset: Any,
    bundle: Any,
    *,
    inputs: Optional[Mapping[str, str]] = None,
    outputs: OutputColumns = None,
    actors: int = 1,
    num_cpus: float = 1,
    batch_size: Optional[int] = None,
    max_retries: Optional[int] = 3,
    raise_original: bool = True,
    trusted_keys: TrustedKeys = None,
    **map_batches_args: Any,
) -> Any:
    """``dataset.map_batches`` with :class:`BundlePredictor` on a pool of ``actors`` actors of ``num_cpus`` CPUs.

    An actor whose process dies is restarted and its batches re-run, at most ``max_retries`` times each
    (Ray's own default, ``None`` here, is forever; Ray 2.60 warns that it will stop taking these two
    arguments in 2.64). A bundle that cannot load fails the first batch, which is not retried; with
    ``raise_original`` (it sets ``raise_original_map_exception`` in the dataset's ``DataContext``, which
    the whole pipeline shares) the driver gets svod_min's error itself (``BundleError``...) rather than
    Ray Data's ``UserCodeException`` wrapping its text. Ship a large bundle once:
    ``ray.put(bundle_bytes)``, and pass the ``ObjectRef``. ``trusted_keys`` (None: the driver's
    ``SVOD_TRUSTED_KEYS``) is read here and its keys sent to the actors, which load only a bundle they signed.
    """
    from ray.data import ActorPoolStrategy

    policy = trust_policy(trusted_keys)

    args: Dict[str, Any] = dict(
        fn_constructor_kwargs={"bundle": bundle, "inputs": inputs, "outputs": outputs, "trusted_keys": policy},
        batch_format="numpy",
        compute=ActorPoolStrategy(size=actors),
        num_cpus=num_cpus,
    )
    if max_retries is not None:
        args.update(max_restarts=max_retries, max_task_retries=max_retries)
    if batch_size is not None:
        args["batch_size"] = batch_size
    args.update(map_batches_args)
    result = dataset.map_batches(BundlePredictor, **args)
    if raise_original:
        result.context.raise_original_map_exception = True
    return result


__all__ = ["BundlePredictor", "OutputColumns", "actor_cpus", "output_columns", "predict"]
