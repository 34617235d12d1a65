"""Plan files: a versioned JSON description of buffers, kernels and ops.

See docs/plan-format.md. :func:`load_plan` validates the whole document —
every error names its JSON path (``ops[3].buffers[1]: unknown buffer 'h2'``)
— compiles the kernels, builds the :class:`ExecutionPlan` and returns it
with what is needed to verify it. Nothing is dispatched on bad input.

The reader is split by concept: :mod:`svod_min.planfile.schema` (typed checks of
JSON values, reading the document), :mod:`svod_min.planfile.data` (files beside the
plan, buffers and their initial data, expectations), :mod:`svod_min.planfile.kernels`
(each kernel form validated and loaded); this module builds the ops and the plan.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..cache.kernel_cache import CachedKernel
from ..devices.registry import DEVICE_FACTORIES
from ..error import BundleError, PlanError, PlanFileError, SvodError
from ..expr import compile_expr
from ..plan.execution_plan import (
    ExecutionPlan,
    ExecutionPlanBuilder,
    PreparedBufferView,
    PreparedCopy,
    PreparedCustomFunction,
    PreparedKernel,
    RuntimeVar,
)
from ..plan.ops import custom_function_kinds
from .binding import Binding, Dim, read_dims
from .bundle import is_bundle, is_bundle_bytes, open_bundle
from .data import MAX_BUFFER_BYTES, Expectation, PlanData
from .host_io import HostIO, checked_feed, host_dtype_name
from .kernels import CPU_ONLY_VARS, KernelReader, check_threading, global_size_exprs, with_global_size
from .memory_budget import (
    COPY_OUTPUTS,
    bundle_limits,
    check_bundle,
    check_document,
    memory_budget,
    memory_figures_of,
)
from .schema import (
    FORMAT_VERSION,
    MAX_PLAN_BYTES,
    as_bool,
    as_int,
    as_list,
    as_object,
    as_text,
    float32_bits,
    known_keys,
    missing,
    need,
    read_plan_document,
    var_bounds,
)
from .signing import TrustedKeys, refuse_plan_file, trust_policy
from .status import read_checks
from .verify import verify_buffer

_TOP_KEYS = {"svod_plan", "device", "vars", "buffers", "kernels", "ops", "expect", "description", "checks"}


@dataclass
class LoadedPlan:
    """A built plan plus its names, variables and expectations."""

    plan: ExecutionPlan
    buffers: Dict[str, Any]
    variables: Dict[str, RuntimeVar]
    defaults: Dict[str, int]
    expectations: List[Expectation] = field(default_factory=list)
    description: str = ""
    inputs: List[str] = field(default_factory=list)
    outputs: List[str] = field(default_factory=list)
    #: ``weights_bytes`` (constant data) and ``arena_peak_live_bytes`` (the largest set of arena views live at once)
    memory: Dict[str, int] = field(default_factory=dict)
    #: the inputs' and outputs' ranged dims (planfile/binding.py); None when no buffer has any
    binding: Optional[Binding] = None

    def verify(self) -> List[Tuple[str, bool, float]]:
        """(buffer, ok, max abs error) for every expectation; NaN where NaN is expected counts as equal."""
        return [verify_buffer(self.buffers[e.buffer], e) for e in self.expectations]

    def set_input(self, name: str, dtype_name: str, shape: Tuple[int, ...], payload: Any) -> None:
        """Replace input buffer ``name``'s contents from ``payload`` (bytes-like: its bytes; shape and dtype must be
        the plan's); PlanError naming it otherwise."""
        if name not in self.inputs:
            raise PlanError(
                "input %r: the plan has no such input (inputs: %s)"
                % (name, ", ".join(repr(n) for n in self.inputs) or "none")
            )
        buf = self.buffers[name]
        dtype = buf.dtype.name if hasattr(buf.dtype, "name") else str(buf.dtype)
        shape = tuple(shape)
        if self.binding is not None and name in self.binding.inputs and shape != tuple(buf.shape):
            self.binding.bind({name: shape})  # a bound shape: it must fit the dims; it lies at the buffer's start
            buf = buf.view(0, math.prod(shape) * buf.dtype.itemsize, shape=shape)
        buf.copyin(checked_feed(name, (dtype, tuple(buf.shape)), dtype_name, shape, payload))

    def bind(self, shapes: Mapping[str, Tuple[int, ...]], given: Optional[Mapping[str, int]] = None) -> Dict[str, int]:
        """The variables that feeds of ``shapes`` (input name -> shape) bind through the inputs' dims, checked
        (planfile/binding.py ``Binding.bind``); {} when the plan has no dims."""
        return {} if self.binding is None else self.binding.bind(shapes, given)

    def execute_bound(self, values: Mapping[str, int]) -> None:
        """Run once with ``values`` set (none: as the plan stands); variables that only dims name are kept by the
        binding, the plan's ops knowing nothing of them."""
        binding = self.binding
        plan_values, loose = binding.split(values) if binding is not None else (dict(values), {})
        current = self.plan.current_var_values()
        if any(current.get(name) != value for name, value in plan_values.items()):
            self.plan.execute_with_vars(plan_values)
        else:  # the values the plan holds (checked when they were set): a call at one size pays no re-binding
            self.plan.execute()
        if loose:
            binding.loose.update(loose)  # type: ignore[union-attr]

    def bound_shape(self, name: str, env: Optional[Mapping[str, int]] = None) -> Tuple[int, ...]:
        """Buffer ``name``'s shape at ``env`` (default: the current variables, :meth:`var_env`): its dims
        evaluated, or its shape when it has none."""
        binding = self.binding
        if binding is None or name not in binding.dims:
            return tuple(self.buffers[name].shape)
        return binding.shape(name, self.var_env() if env is None else env)

    def var_env(self) -> Dict[str, int]:
        """Every plan variable's current value: the plan's, and those only dims name (kept by the binding)."""
        env = self.plan.current_var_values()
        if self.binding is not None:
            env.update(self.binding.loose)
        return env


def load_plan(
    source: Any,
    *,
    device: Any = None,
    base_dir: Optional[str] = None,
    var_values: Optional[Mapping[str, int]] = None,
    trusted_keys: TrustedKeys = None,
    max_memory: Any = None,
    run_copies: Iterable[str] = (),
) -> LoadedPlan:
    """Build a plan from a path (a plan file, or a model bundle ``.svod``), a bundle's bytes (in memory, as
    shipped to a worker) or an already parsed document. ``trusted_keys`` (a directory of ``*.pub`` keys, a
    key file or a TrustPolicy; None: ``SVOD_TRUSTED_KEYS``) sets a trust policy: then only a bundle signed by
    one of its keys loads (planfile/signing.py), every entry checked before any code is mapped. The plan's peak
    memory (``run_copies``: what a run copies besides, memory_budget.COPY_*) must fit ``max_memory`` (bytes or
    a size, ``2G``; None: ``SVOD_MAX_MEMORY``, else the host's room): MemoryBudgetError before any allocation."""
    policy = trust_policy(trusted_keys)
    budget = memory_budget(max_memory)
    if isinstance(source, (bytes, bytearray, memoryview)) and not is_bundle_bytes(source):
        raise BundleError(
            "%d bytes given as a model bundle do not start as one (a .svod bundle is a zip)" % len(source)
        )
    if (isinstance(source, str) and is_bundle(source)) or is_bundle_bytes(source):
        # checked whole before anything runs: its large arrays as they are read into their buffers, the
        # rest now, any array no buffer read after the build
        bundle = open_bundle(source, bundle_limits(budget), defer_arrays=True, trust=policy)
        try:
            peak = check_bundle(bundle, budget, run_copies)
            reader = _PlanReader(bundle.plan, base_dir or os.getcwd(), device, var_values or {}, bundle.files())
            if policy is not None:  # arrays no buffer took are checked before the kernels, not after
                reader.before_code = bundle.read_rest
            loaded = reader.build()
            bundle.verify_rest()
        finally:
            bundle.close()
        loaded.memory.update(memory_figures_of(peak, budget))
        return loaded
    if isinstance(source, str):
        refuse_plan_file(source, policy)
        base_dir = base_dir or os.path.dirname(os.path.abspath(source))
        doc = read_plan_document(source)
    else:
        doc = as_object(source, "$")
    peak = check_document(doc, budget, source if isinstance(source, str) else "the plan", run_copies)
    loaded = _PlanReader(doc, base_dir or os.getcwd(), device, var_values or {}).build()
    loaded.memory.update(memory_figures_of(peak, budget))
    return loaded


def memory_figures(specs: Dict[str, Any], ops: List[Any], buffers: Mapping[str, Any]) -> Dict[str, int]:
    """The plan's two memory figures, read from its buffers and ops.

    Weights: buffers with initial data (not zeros) that are neither inputs nor outputs nor views. Arena
    peak: the arenas are the bases of views that are neither inputs, outputs nor initialised; a view is
    live from the first op that names it to the last, and the peak is the largest union of live byte
    ranges at any op (views that alias one another count once).
    """

    def root_of(name: str) -> Tuple[str, int]:
        offset = 0
        while "view_of" in specs[name]:
            offset += int(specs[name].get("offset", 0))
            name = specs[name]["view_of"]
        return name, offset

    def is_plain_data(name: str) -> bool:
        spec = specs[name]
        return not spec.get("input") and not spec.get("output") and spec.get("init", "zeros") == "zeros"

    weights = sum(
        int(buffers[n].nbytes)
        for n, spec in specs.items()
        if "view_of" not in spec
        and spec.get("init", "zeros") != "zeros"
        and not spec.get("input")
        and not spec.get("output")
    )
    spans: Dict[str, List[int]] = {}
    for i, op in enumerate(ops):
        for name in _op_buffer_names(op):
            if name in specs and "view_of" in specs[name] and is_plain_data(root_of(name)[0]):
                spans.setdefault(name, [i, i])[1] = i
    return {"weights_bytes": int(weights), "arena_peak_live_bytes": _peak_live(spans, root_of, buffers)}


def _op_buffer_names(op: Any) -> List[str]:
    if not isinstance(op, dict):
        return []
    if isinstance(op.get("copy"), dict):
        return [n for n in (op["copy"].get("dst"), op["copy"].get("src")) if isinstance(n, str)]
    if isinstance(op.get("view"), str):
        return [op["view"]]
    return [n for n in op.get("buffers", []) if isinstance(n, str)]


def _peak_live(spans: Dict[str, List[int]], root_of: Any, buffers: Mapping[str, Any]) -> int:
    """The largest union of live byte ranges, checked where a view's life starts (the union only grows there)."""
    lives = []
    for name, (first, last) in spans.items():
        root, lo = root_of(name)
        lives.append((first, last, root, lo, lo + int(buffers[name].nbytes)))
    lives.sort()
    peak, active, k = 0, [], 0  # active: the lives begun so far and not yet over
    for start in sorted({life[0] for life in lives}):
        while k < len(lives) and lives[k][0] <= start:
            active.append(lives[k])
            k += 1
        active = [life for life in active if life[1] >= start]
        peak = max(peak, _union_bytes(sorted(life[2:] for life in active)))
    return peak


def _union_bytes(ranges: List[Tuple[str, int, int]]) -> int:
    """Bytes covered by (root, lo, hi) ranges sorted by root and lo."""
    total, base, end = 0, None, 0
    for root, lo, hi in ranges:
        if root != base:
            base, end = root, lo
        total += max(0, hi - max(lo, end))
        end = max(end, hi)
    return total


class Model:
    """A loaded plan or bundle called like a function: ``model(x=array)`` -> ``{output name: numpy array}``.

    Inputs not given keep their current contents (the bundle's example data at first). One call
    runs at a time (a lock): the plan's buffers are shared, so calls from several threads queue.
    """

    def __init__(self, loaded: LoadedPlan) -> None:
        import threading

        self.loaded = loaded
        self.input_names = list(loaded.inputs)
        self.output_names = list(loaded.outputs)
        self._lock = threading.Lock()
        self._io: Optional[HostIO] = None  # the buffers' numpy views, made by the first call (numpy needed then)

    def __call__(self, **inputs: Any) -> Dict[str, Any]:
        return self.run(inputs)

    def run(self, inputs: Mapping[str, Any], var_values: Optional[Mapping[str, int]] = None) -> Dict[str, Any]:
        """The same call with a mapping (input names need not be identifiers: ``gpu_0/data_0``); ``var_values``
        sets plan variables for this run (a symbolic batch: ``{"batch": 9}``), checked against their bounds.
        Each call returns new arrays (never overwritten by a later call)."""
        with self._lock:
            io = self._io
            if io is None:
                io = self._io = HostIO(self.loaded)
            if self.loaded.binding is not None:
                return self._run_bound(io, self.loaded.binding, inputs, var_values)
            for name, value in inputs.items():
                if not io.copy_in(name, value):  # an array of the buffer's dtype and shape: one assignment
                    self._set_input(name, value)
            plan = self.loaded.plan
            if var_values:
                plan.execute_with_vars(var_values)
            else:
                plan.execute()
            plan.synchronize()
            out = {}
            for name in self.output_names:
                arr = io.copy_out(name)
                out[name] = self.array(name) if arr is None else arr
            return out

    def _run_bound(
        self, io: HostIO, binding: Binding, inputs: Mapping[str, Any], var_values: Optional[Mapping[str, int]]
    ) -> Dict[str, Any]:
        """``run`` for a plan with ranged dims: the variables bound from the inputs' shapes (every refusal before
        anything is copied), each input written at the start of its buffer, the outputs read at their bound
        shapes."""
        shapes = {name: _shape_of(value) for name, value in inputs.items() if name in binding.inputs}
        bound = binding.bind(shapes, var_values)
        for name, value in inputs.items():
            if not io.copy_in(name, value) and not (name in binding.inputs and io.copy_in_prefix(name, value)):
                self._set_input(name, value)
        values = dict(var_values or {})
        values.update(bound)
        self.loaded.execute_bound(values)
        self.loaded.plan.synchronize()
        out = {}
        env = self.loaded.var_env()
        for name in self.output_names:
            shape = binding.shape(name, env) if name in binding.dims else None
            arr = io.copy_out(name) if shape is None else io.copy_out_prefix(name, shape)
            if arr is None:  # no host view: the whole buffer, then its prefix
                arr = self.array(name)
                if shape is not None:
                    arr = arr.reshape(-1)[: math.prod(shape)].reshape(shape).copy()
            out[name] = arr
        return out

    def _set_input(self, name: str, value: Any) -> None:
        """The general way in: any array-like, checked by set_input (which names what does not match)."""
        import numpy as np

        arr = np.ascontiguousarray(value)
        if arr.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: its bits
            arr = arr.view(np.uint16)
        payload = memoryview(arr).cast("B") if arr.nbytes else b""  # the array's bytes, not a copy
        self.loaded.set_input(name, arr.dtype.name, tuple(arr.shape), payload)

    def array(self, name: str) -> Any:
        """A copy of buffer ``name`` as a numpy array: an output after a call, or an input's current contents (the
        bundle's example data until a call replaces it)."""
        import numpy as np

        buf = self.loaded.buffers[name]
        dt = host_dtype_name(buf.dtype.name) if hasattr(buf.dtype, "name") else str(buf.dtype)
        return buf.copyout_into(np.empty(tuple(buf.shape), dtype=dt))  # one copy, on any device


def _shape_of(value: Any) -> Tuple[int, ...]:
    """A feed's shape: an array's, or what numpy makes of a nested list."""
    shape = getattr(value, "shape", None)
    if shape is None:
        import numpy as np

        shape = np.shape(value)
    return tuple(shape)


def load_model(source: Any, *, device: Any = None, trusted_keys: TrustedKeys = None, max_memory: Any = None) -> Model:
    """A plan file or model bundle (``.svod``, a path or its bytes) ready to call: ``load_model("m.svod")(x=array)``;
    ``trusted_keys`` and ``max_memory`` as :func:`load_plan` takes them (a call's returned arrays counted)."""
    return Model(
        load_plan(source, device=device, trusted_keys=trusted_keys, max_memory=max_memory, run_copies=(COPY_OUTPUTS,))
    )


class _CheckedAtLoad:
    """An op's library argument check, run by the loader so that a failure names the op. The plan binds every
    op once as it is built, with the same variables and buffers: that first bind is the check just done, so it
    is not run twice; every later bind checks again."""

    __slots__ = ("check", "pending")

    def __init__(self, check: Callable[[Mapping[str, int], Sequence[Any]], None], env: Dict[str, int], bufs: List[Any]):
        check(env, bufs)
        self.check = check
        self.pending: Optional[Tuple[Dict[str, int], List[Any]]] = (env, bufs)

    def __call__(self, env: Mapping[str, int], bufs: Sequence[Any]) -> None:
        pending, self.pending = self.pending, None
        if pending is not None and pending[0] == env and _same_objects(pending[1], bufs):
            return
        self.check(env, bufs)


def _same_objects(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class _PlanReader:
    """One document -> one plan: device, variables, buffers, kernels, ops, expectations, in that order."""

    def __init__(
        self, doc: Dict[str, Any], base_dir: str, device: Any, var_values: Mapping[str, int], files: Any = None
    ) -> None:
        self.doc = doc
        self.files = files
        self.base_dir = base_dir
        self.device_override = device
        self.var_values = dict(var_values)
        self.device: Any = None
        self.variables: Dict[str, RuntimeVar] = {}
        self.values: Dict[str, int] = {}
        self.buffers: Dict[str, Any] = {}
        self.buffer_index: Dict[str, int] = {}
        self.kernels: Dict[str, Tuple[CachedKernel, Dict[str, Any]]] = {}
        self.dims: Dict[str, Tuple[Dim, ...]] = {}
        self.data: Any = None  # a PlanData once the device is known
        self.before_code: Any = None  # called once the buffers are filled, before any kernel is loaded

    def build(self) -> LoadedPlan:
        doc = self.doc
        known_keys(doc, _TOP_KEYS, "$")
        need("svod_plan" in doc, "svod_plan", 'missing: a plan file starts with "svod_plan": %d' % FORMAT_VERSION)
        need(
            type(doc["svod_plan"]) is int and doc["svod_plan"] == FORMAT_VERSION,
            "svod_plan",
            "unsupported version %r (this svod_min reads %d)" % (doc["svod_plan"], FORMAT_VERSION),
        )
        self._device()
        self.data = PlanData(self.base_dir, self.device, self.files)
        self._vars(as_object(doc.get("vars", {}), "vars"))
        builder = ExecutionPlanBuilder(self.device)
        builder.set_var_values(self.values)
        self._buffers(builder, as_object(doc.get("buffers"), "buffers") if "buffers" in doc else missing("buffers"))
        if self.before_code is not None:
            self.before_code()
        self.kernels = KernelReader(self.device, self.data).read(as_object(doc.get("kernels", {}), "kernels"))
        ops = as_list(doc.get("ops"), "ops") if "ops" in doc else missing("ops")
        for i, op in enumerate(ops):
            builder.add_op(self._op(i, as_object(op, "ops[%d]" % i)))
        outputs = [self.buffer_index[n] for n, spec in self.doc["buffers"].items() if spec.get("output")]
        need(bool(outputs), "buffers", 'no buffer is marked "output": true')
        # a plan without ops computes nothing: each output is empty or is an input (a graph returning its input)
        given = all(
            self.buffers[n].nbytes == 0 or spec.get("input")
            for n, spec in self.doc["buffers"].items()
            if spec.get("output")
        )
        need(
            len(ops) > 0 or given,
            "ops",
            "a plan needs at least one op (only one whose outputs are empty or inputs has none)",
        )
        builder.set_output_buffers(outputs)
        expectations = self.data.expectations(as_object(doc.get("expect", {}), "expect"), self.buffers)
        plan = builder.build()
        if "checks" in doc:  # what checking kernels report, read after every run (planfile/status.py)
            plan.after_run.append(read_checks(doc["checks"], self.buffers))
        description = as_text(doc["description"], "description") if doc.get("description", "") != "" else ""
        inputs = [n for n, spec in self.doc["buffers"].items() if spec.get("input")]
        output_names = [n for n, spec in self.doc["buffers"].items() if spec.get("output")]
        memory = memory_figures(self.doc["buffers"], ops, self.buffers)
        binding = None
        if self.dims:
            full = {n: tuple(self.buffers[n].shape) for n in self.dims}
            runtime = frozenset(plan.runtime_vars())
            binding = Binding(self.dims, full, inputs, self.variables, self.values, runtime)
        return LoadedPlan(
            plan,
            self.buffers,
            self.variables,
            dict(self.values),
            expectations,
            description,
            inputs,
            output_names,
            memory,
            binding,
        )

    # -- device and variables ------------------------------------------------------------

    def _device(self) -> None:
        if self.device_override is not None and not isinstance(self.device_override, str):
            self.device = self.device_override  # an already created device object
            return
        if self.device_override is not None:
            spec = self.device_override  # from --device: the registry names what is wrong with it
        else:
            spec = as_text(self.doc.get("device", "CPU"), "device")
        self.device = DEVICE_FACTORIES.device(spec)

    def _vars(self, spec: Dict[str, Any]) -> None:
        for name, v in spec.items():
            path = "vars.%s" % name
            need(
                name.isidentifier() and name != "core_id", path, "variable names are identifiers (core_id is reserved)"
            )
            lo, hi, default = var_bounds(v, path)
            self.variables[name] = RuntimeVar(name, lo, hi)
            self.values[name] = default
        for name, value in self.var_values.items():
            var = self.variables.get(name)
            need(var is not None, "--var %s" % name, "unknown variable (plan variables: %s)" % sorted(self.variables))
            need(
                type(value) is int and var.min_val <= value <= var.max_val,
                "--var %s" % name,
                "variable %s=%r is outside bounds [%d, %d]" % (name, value, var.min_val, var.max_val),
            )
            self.values[name] = value

    # -- buffers ------------------------------------------------------------------------

    def _buffers(self, builder: ExecutionPlanBuilder, spec: Dict[str, Any]) -> None:
        need(len(spec) > 0, "buffers", "a plan needs at least one buffer")
        for ast_id, (name, b) in enumerate(spec.items()):
            path = "buffers.%s" % name
            b = as_object(b, path)
            known_keys(b, {"dtype", "shape", "init", "output", "input", "view_of", "offset", "dims"}, path)
            for flag in ("output", "input"):
                if flag in b:
                    as_bool(b[flag], "%s.%s" % (path, flag))
            need(
                "offset" not in b or "view_of" in b,
                path + ".offset",
                "an offset needs view_of (it places a view in its base)",
            )
            buf = self.data.view(name, b, path, self.buffers) if "view_of" in b else self.data.allocate(b, path)
            self.buffers[name] = buf
            if "dims" in b:
                self.dims[name] = read_dims(b, tuple(buf.shape), self.variables, path)
            self.buffer_index[name] = builder.add_buffer(ast_id, buf)
            if b.get("input"):
                builder.declare_input(self.buffer_index[name])

    # -- ops ------------------------------------------------------------------------------

    def _op(self, i: int, op: Dict[str, Any]) -> Any:
        path = "ops[%d]" % i
        kinds = [k for k in ("kernel", "copy", "view", "custom") if k in op]
        if len(kinds) != 1:
            raise PlanFileError(
                path, "an op has exactly one of kernel, copy, view, custom (got %s)" % (kinds or "none")
            )
        op_id = as_int(op.get("id", i), path + ".id", 0)
        deps = as_list(op.get("deps", []), path + ".deps")
        if not all(type(d) is int and d >= 0 for d in deps):  # the paths only for the message
            deps = [as_int(d, "%s.deps[%d]" % (path, j), 0) for j, d in enumerate(deps)]
        kind = kinds[0]
        if kind == "kernel":
            return self._kernel_op(op, op_id, deps, path)
        extra = {"custom": {"buffers", "attrs"}}.get(kind, set())
        known_keys(op, {kind, "id", "deps"} | extra, path)
        if kind == "copy":
            c = as_object(op["copy"], path + ".copy")
            known_keys(c, {"dst", "src"}, path + ".copy")
            return PreparedCopy(
                op_id, [self._buf(c.get("dst"), path + ".copy.dst"), self._buf(c.get("src"), path + ".copy.src")], deps
            )
        if kind == "view":
            name = as_text(op["view"], path + ".view")
            spec = self.doc["buffers"].get(name, {})
            need("view_of" in spec, path + ".view", "buffer %r is not declared with view_of" % name)
            base = self.buffers[spec["view_of"]]
            view = self.buffers[name]
            return PreparedBufferView(
                op_id,
                [self._buf(name, path + ".view"), self._buf(spec["view_of"], path + ".view")],
                view.offset - base.offset,
                view.nbytes,
                deps,
            )
        custom = as_text(op["custom"], path + ".custom")
        registered = custom_function_kinds()
        need(
            custom in registered,
            path + ".custom",
            "custom function %r is not registered (registered: %s)" % (custom, registered),
        )
        bufs = self._bufs(as_list(op.get("buffers", []), path + ".buffers"), path + ".buffers")
        attrs = as_object(op.get("attrs", {}), path + ".attrs")
        return PreparedCustomFunction(op_id, custom, bufs, attrs, {}, deps)

    def _buf(self, name: Any, path: str) -> int:
        name = as_text(name, path)
        if name not in self.buffer_index:
            raise PlanFileError(path, "unknown buffer %r" % name)
        return self.buffer_index[name]

    def _bufs(self, names: List[Any], path: str) -> List[int]:
        """Buffer indices of an op's ``buffers`` list (``path``); each entry's path is made only for an error."""
        index = self.buffer_index
        if all(type(b) is str and b != "" and b in index for b in names):  # as _buf takes them
            return [index[b] for b in names]
        return [self._buf(b, "%s[%d]" % (path, j)) for j, b in enumerate(names)]

    def _kernel_op(self, op: Dict[str, Any], op_id: int, deps: List[int], path: str) -> PreparedKernel:
        known_keys(op, {"kernel", "buffers", "vars", "global_size", "id", "deps"}, path)
        name = as_text(op["kernel"], path + ".kernel")
        if name not in self.kernels:
            raise PlanFileError(path + ".kernel", "unknown kernel %r (declared: %s)" % (name, sorted(self.kernels)))
        kernel, meta = self.kernels[name]
        names = as_list(op.get("buffers"), path + ".buffers")
        if len(names) != len(kernel.globals):
            raise PlanFileError(
                path + ".buffers", "kernel %s takes %d buffers, got %d" % (name, len(kernel.globals), len(names))
            )
        bufs = self._bufs(names, path + ".buffers")
        gpu = kernel.program.grid_in_blocks
        if "global_size" in op:
            gsize = global_size_exprs(op["global_size"], path + ".global_size")
            if not gpu:  # the CPU launch (core_id invocations); a GPU form launches its own grid
                check_threading(gsize, kernel.var_names, path + ".global_size")
                kernel = with_global_size(kernel, gsize)
        bindings = dict(as_object(op.get("vars", {}), path + ".vars"))
        if gpu:  # portable plans may bind the CPU thread-split variables; the GPU form has none
            for cpu_only in CPU_ONLY_VARS:
                if cpu_only not in kernel.var_names:
                    bindings.pop(cpu_only, None)
        if (
            "core_id_count" in kernel.var_names
            and "core_id_count" not in bindings
            and "core_id_count" not in self.variables
        ):
            bindings["core_id_count"] = max(1, int(self.device.threads))  # library kernels: one chunk per thread
        vals, fixed, runtime, exprs = self._bind_vars(kernel, bindings, path + ".vars", meta.get("f32", ()))
        try:
            env = dict(zip(kernel.var_names, vals))
            arg_check = meta.get("arg_check")
            if arg_check is not None:  # now, to name the op; the plan re-checks at every later bind
                arg_check = _CheckedAtLoad(arg_check, env, [self.buffers[n] for n in names])
            for work in ("flops", "bytes"):  # a profile must not be the first to find a division by zero
                if isinstance(meta.get(work), str):
                    compile_expr(meta[work])(env)
            return PreparedKernel(
                op_id,
                kernel,
                bufs,
                list(kernel.outs),
                vals,
                fixed,
                deps,
                runtime,
                extents=meta["extents"],
                flops=meta["flops"],
                bytes_moved=meta["bytes"],
                var_exprs=exprs,
                arg_check=arg_check,
            )
        except SvodError as exc:
            raise PlanFileError(path, str(exc)) from None

    def _bind_vars(
        self, kernel: CachedKernel, bindings: Dict[str, Any], path: str, f32: Iterable[str] = ()
    ) -> Tuple[List[int], Dict[str, int], List[RuntimeVar], Dict[str, str]]:
        extra = sorted(set(bindings) - set(kernel.var_names))
        if extra:
            raise PlanFileError(
                path, "kernel %s has no variable(s) %s (it takes %s)" % (kernel.entry_point, extra, kernel.var_names)
            )
        vals, fixed, runtime, exprs = [], {}, [], {}
        for name in kernel.var_names:
            if name == "core_id":
                vals.append(0)  # set per invocation by the dispatcher
                continue
            bound = bindings.get(name, name)
            if name in f32:  # a real-valued parameter (layernorm's eps): the kernel gets its float32 bits
                bits = float32_bits(bound, "%s.%s" % (path, name))
                vals.append(bits)
                fixed[name] = bits
            elif type(bound) is int:
                if not -(1 << 31) <= bound <= (1 << 31) - 1:  # the path only for the message
                    as_int(bound, "%s.%s" % (path, name), -(1 << 31), (1 << 31) - 1)
                vals.append(bound)
                fixed[name] = bound
            elif bound == name and name in self.variables:
                vals.append(self.values[name])
                runtime.append(self.variables[name])
            elif isinstance(bound, str) and bound != name:
                value, used = self._var_expr(bound, "%s.%s" % (path, name))
                vals.append(value)
                exprs[name] = bound
                runtime.extend(self.variables[v] for v in sorted(used))
            else:
                raise PlanFileError(
                    "%s.%s" % (path, name),
                    "bind kernel variable %r to an integer, a plan variable "
                    "or an expression over plan variables (plan variables: %s)" % (name, sorted(self.variables)),
                )
        return vals, fixed, runtime, exprs

    def _var_expr(self, text: str, path: str) -> Tuple[int, FrozenSet[str]]:
        """Evaluate an op's variable expression with the plan variables' current values."""
        try:
            expr = compile_expr(text)
        except PlanError as exc:
            raise PlanFileError(path, str(exc)) from None
        unknown = sorted(expr.names - set(self.variables))
        if unknown:
            raise PlanFileError(
                path, "expression %r uses %s, not plan variables %s" % (text, unknown, sorted(self.variables))
            )
        try:
            value = expr(self.values)
        except PlanError as exc:
            raise PlanFileError(path, str(exc)) from None
        need(-(1 << 31) <= value < (1 << 31), path, "expression %r = %d does not fit int32" % (text, value))
        return value, expr.names


__all__ = [
    "FORMAT_VERSION",
    "MAX_BUFFER_BYTES",
    "MAX_PLAN_BYTES",
    "Expectation",
    "LoadedPlan",
    "PlanFileError",
    "load_plan",
    "load_model",
    "Model",
    "read_plan_document",
]
