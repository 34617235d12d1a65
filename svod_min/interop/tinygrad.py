"""Export a tinygrad (0.14.x) CPU computation as a svod_min plan bundle.

On a development machine with tinygrad::

    from svod_min.interop.tinygrad import export_tinygrad
    export_tinygrad(lambda x: model(x), "out/mlp", inputs={"x": x_array})

captures the schedule tinygrad would run for the returned tensors: every
kernel's C source and entry point, its buffer arguments in order, its
variables (tinygrad's thread variable ``core_id`` is svod_min's, symbolic
shapes become plan variables), copies, and the contents of every buffer that
exists before the run (inputs, weights, constants). It then runs the schedule
with tinygrad itself and stores tinygrad's outputs as the plan's ``expect``.
The bundle is::

    out/mlp/plan.json        the plan (docs/plan-format.md)
    out/mlp/kernels/*.c      tinygrad's kernel sources, compiled by svod_min
    out/mlp/data/*.npy       initial buffer contents
    out/mlp/expect/*.npy     tinygrad's outputs

``python -m svod_min run out/mlp/plan.json`` runs and verifies it with
svod_min alone. tinygrad is imported only by this module, lazily.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..dtypes import DType, unpack_values
from ..dtypes import dtype as to_dtype
from ..error import ExportError
from ..npy import write_npy
from .tinygrad_loader import loader_stats, restore_tinygrad_loader, svod_loader, use_svod_loader  # noqa: F401 - re-exported: the bridge's names for the loader hook

#: The tinygrad release line whose schedule structures this module reads.
SUPPORTED_TINYGRAD = "0.14."

# tinygrad dtype (struct format char) -> svod_min dtype name.
_DTYPES_BY_FMT = {
    "f": "float32",
    "d": "float64",
    "e": "float16",
    "b": "int8",
    "B": "uint8",
    "h": "int16",
    "H": "uint16",
    "i": "int32",
    "I": "uint32",
    "q": "int64",
    "Q": "uint64",
    "?": "bool",
}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class ExportResult:
    """What :func:`export_tinygrad` wrote."""

    plan_path: str
    kernels: int
    ops: int
    outputs: Dict[str, Any]  #: output name -> tinygrad's values (flat list, valid prefix only)
    variables: Dict[str, Tuple[int, int, int]] = field(default_factory=dict)  #: name -> (min, max, default)
    beam: int = 0  #: tinygrad's BEAM width the kernels were searched with (0: its hand-coded optimisations)
    compile_seconds: float = 0.0  #: tinygrad's kernel search and compilation at export, BEAM search included


# --- tinygrad access ------------------------------------------------------------------------


def require_tinygrad() -> Any:
    """Import tinygrad, checking the release line this exporter understands."""
    try:
        import tinygrad
    except ImportError:
        raise ExportError(
            "tinygrad is not installed: exporting needs it (pip install 'svod-min[tinygrad]'); "
            "running an exported plan does not"
        ) from None
    version = _tinygrad_version(tinygrad)
    if not version.startswith(SUPPORTED_TINYGRAD):
        raise ExportError(
            "tinygrad %s is installed; this exporter reads the schedules of tinygrad %sx"
            % (version, SUPPORTED_TINYGRAD)
        )
    return tinygrad


def _tinygrad_version(module: Any) -> str:
    version = getattr(module, "__version__", None)
    if version:
        return str(version)
    try:
        from importlib.metadata import version as dist_version

        return dist_version("tinygrad")
    except Exception:
        return "unknown"


# --- buffers ----------------------------------------------------------------------------------


@dataclass
class _PlanBuffer:
    name: str
    dtype: DType
    count: int
    view_of: Optional[str] = None
    offset: int = 0
    init: Optional[bytes] = None
    input: bool = False
    output: bool = False
    shape: Optional[Tuple[int, ...]] = None  # the tensor's shape when it is static and fills the buffer

    def to_json(self, data_dir: str) -> Dict[str, Any]:
        out: Dict[str, Any] = {"dtype": self.dtype.name, "shape": list(self.shape or (self.count,))}
        if self.view_of is not None:
            out.update(view_of=self.view_of, offset=self.offset)
        elif self.init is not None:
            out["init"] = {"npy": "%s/%s.npy" % (data_dir, self.name)}
        if self.input:
            out["input"] = True
        if self.output:
            out["output"] = True
        return out


class _Buffers:
    """tinygrad Buffers (bases and byte-offset views) -> named plan buffers, bases first."""

    def __init__(
        self,
        inputs: Mapping[int, str],
        outputs: Mapping[int, str],
        weights: Mapping[int, str],
        shapes: Mapping[int, Tuple[int, ...]],
    ) -> None:
        self.by_key: Dict[Tuple[Any, ...], _PlanBuffer] = {}
        self.order: List[_PlanBuffer] = []
        self._names, self._outputs, self._weights = dict(inputs), dict(outputs), dict(weights)
        self._shapes = dict(shapes)
        self._keep: List[Any] = []  # keeps the Buffers alive so their ids stay unique
        self._counts = {"w": 0, "t": 0, "arena": 0}

    def name_of(self, buf: Any, where: str) -> str:
        base = getattr(buf, "_base", None)
        if base is None:
            return self._base(buf, where).name
        parent = self._base(base, where)
        key = ("view", id(base), buf.offset, _dtype_of(buf.dtype, where), buf.size)
        if key not in self.by_key:
            self._keep.append(buf)
            name = "%s_at%d" % (parent.name, buf.offset)
            view = _PlanBuffer(self._unique(name), key[3], buf.size, view_of=parent.name, offset=buf.offset)
            self._add(key, view)
        return self.by_key[key].name

    def storage(self, buf: Any) -> Tuple[int, int, int]:
        """(base id, first byte, end byte) of the storage ``buf`` covers: for hazard analysis."""
        base = getattr(buf, "_base", None)
        start = buf.offset if base is not None else 0
        return id(base if base is not None else buf), start, start + buf.nbytes

    def _base(self, buf: Any, where: str) -> _PlanBuffer:
        key = ("base", id(buf))
        if key not in self.by_key:
            self._keep.append(buf)
            dt = _dtype_of(buf.dtype, where)
            if id(buf) in self._names:
                name = self._names[id(buf)]
            elif id(buf) in self._outputs:
                name = self._outputs[id(buf)]
            elif id(buf) in self._weights:
                name = self._weights[id(buf)]
            else:
                name = self._auto_name(buf, dt)
            plan_buf = _PlanBuffer(
                self._unique(name),
                dt,
                buf.size,
                input=id(buf) in self._names,
                output=id(buf) in self._outputs,
                shape=self._shapes.get(id(buf)),
            )
            if buf.is_allocated():  # exists before the run: inputs, weights, constants
                plan_buf.init = _read(buf)
            self._add(key, plan_buf)
        return self.by_key[key]

    def _auto_name(self, buf: Any, dt: DType) -> str:
        prefix = "w" if buf.is_allocated() else ("arena" if dt.name == "int8" and buf.size >= 64 else "t")
        self._counts[prefix] += 1
        return "%s%d" % (prefix, self._counts[prefix] - 1)

    def _unique(self, name: str) -> str:
        taken = {b.name for b in self.order}
        out, n = name, 1
        while out in taken:
            n += 1
            out = "%s_%d" % (name, n)
        return out

    def _add(self, key: Tuple[Any, ...], buf: _PlanBuffer) -> None:
        self.by_key[key] = buf
        self.order.append(buf)


def _read(buf: Any) -> bytes:
    """A tinygrad buffer's bytes, after its device finished any queued work on it."""
    from tinygrad import Device

    Device[buf.device].synchronize()
    return bytes(buf.as_memoryview())


def _dtype_of(tg_dtype: Any, where: str) -> DType:
    fmt = getattr(tg_dtype, "fmt", None)
    name = _DTYPES_BY_FMT.get(fmt) if fmt else ("bfloat16" if "bf16" in str(getattr(tg_dtype, "name", "")) else None)
    if name is None:
        raise ExportError("%s: tinygrad dtype %s has no svod_min equivalent" % (where, tg_dtype))
    return to_dtype(name)


# --- the schedule -------------------------------------------------------------------------------


@dataclass
class _Kernel:
    name: str
    entry: str
    source: str
    buffers: int
    outputs: List[int]
    var_names: List[str]
    global_size: List[Any]


@dataclass
class _Op:
    doc: Dict[str, Any]
    touches: List[Tuple[Tuple[int, int, int], bool]]  # (storage range, writes)


class _Capture:
    """Walks a compiled tinygrad LINEAR and turns each CALL into plan ops."""

    def __init__(self, tg: Any, buffers: _Buffers, var_vals: Mapping[str, int]) -> None:
        self.tg, self.buffers, self.var_vals = tg, buffers, dict(var_vals)
        self.kernels: Dict[str, _Kernel] = {}
        self._by_source: Dict[str, str] = {}
        self.ops: List[_Op] = []
        self.plan_vars: Dict[str, Tuple[int, int, int]] = {}

    def walk(self, linear: Any) -> None:
        from tinygrad.uop.ops import Ops

        for i, call in enumerate(linear.src):
            ast = call.src[0]
            where = "schedule item %d" % i
            if ast.op is Ops.PROGRAM:
                self._kernel(call, ast, where)
            elif ast.op is Ops.COPY:
                self._copy(call, where)
            else:
                raise ExportError(
                    "%s: tinygrad %s %r has no plan equivalent (only kernels and copies export)"
                    % (where, ast.op, getattr(ast, "arg", None))
                )

    def _arg_buffers(self, call: Any, where: str) -> List[Any]:
        from tinygrad.engine.realize import get_call_arg_uops

        out = []
        for j, uop in enumerate(get_call_arg_uops(call)):
            try:
                buf = uop.buffer
            except Exception as exc:
                raise ExportError(
                    "%s: argument %d (%s) is not a concrete buffer: %s" % (where, j, uop.op, exc)
                ) from None
            if type(buf).__name__ == "MultiBuffer":
                raise ExportError("%s: multi-device buffers cannot be exported" % where)
            out.append(buf)
        return out

    def _kernel(self, call: Any, prg: Any, where: str) -> None:
        from tinygrad.engine.realize import get_call_var_uops
        from tinygrad.uop.ops import Ops

        info = prg.arg
        where = "%s (%s)" % (where, info.function_name)
        device = prg.device if isinstance(prg.device, str) else prg.device[0]
        if not str(device).startswith("CPU"):
            raise ExportError("%s: runs on tinygrad device %s; export from the CPU device (DEV=CPU)" % (where, device))
        source = next((s.arg for s in prg.src if s.op is Ops.SOURCE), None)
        if not isinstance(source, str) or not re.search(r"\b%s\s*\(" % re.escape(info.function_name), source):
            raise ExportError(
                "%s: no C source for the entry point (tinygrad target %s); use the CPU device's "
                "default Clang renderer" % (where, info.target)
            )
        args = self._arg_buffers(call, where)
        bufs = [args[slot] for slot in info.globals]
        outputs = [info.globals.index(slot) for slot in info.outs]
        var_names, bindings = self._vars(info.vars, get_call_var_uops(call, prg), where)
        kernel = self._kernel_entry(info, source, len(bufs), outputs, var_names, where)
        doc: Dict[str, Any] = {"kernel": kernel.name, "buffers": [self.buffers.name_of(b, where) for b in bufs]}
        if bindings:
            doc["vars"] = bindings
        touches = [(self.buffers.storage(b), k in outputs) for k, b in enumerate(bufs)]
        self.ops.append(_Op(doc, touches))

    def _vars(self, params: Sequence[Any], values: Sequence[Any], where: str) -> Tuple[List[str], Dict[str, Any]]:
        """Kernel variable names, and the op's bindings for those that are not plan variables."""
        names: List[str] = []
        bindings: Dict[str, Any] = {}
        for param, value in zip(params, values):
            name = str(param.expr)
            if not _IDENT.match(name):
                raise ExportError("%s: variable name %r is not an identifier" % (where, name))
            names.append(name)
            if name == "core_id":
                continue  # svod_min's dispatcher sets it, chunk by chunk
            const = _const_int(value)
            if const is not None:
                bindings[name] = const
                continue
            bound = str(getattr(value, "expr", ""))
            if bound not in self.var_vals:
                raise ExportError("%s: variable %s is neither a constant nor bound to a value" % (where, name))
            self.plan_vars[bound] = (int(value.vmin), int(value.vmax), int(self.var_vals[bound]))
            if bound != name:
                bindings[name] = bound
        return names, bindings

    def _kernel_entry(
        self, info: Any, source: str, nbuf: int, outputs: List[int], var_names: List[str], where: str
    ) -> _Kernel:
        if source in self._by_source:
            return self.kernels[self._by_source[source]]
        name, n = info.function_name, 1
        while name in self.kernels:
            n += 1
            name = "%s_%d" % (info.function_name, n)
        gsize = [self._size(g, where) for g in info.global_size]
        if gsize[0] != 1 and "core_id" not in var_names:
            raise ExportError("%s: launch size %s without a core_id variable" % (where, gsize))
        kernel = _Kernel(name, info.function_name, source, nbuf, outputs, var_names, gsize)
        self.kernels[name] = kernel
        self._by_source[source] = name
        return kernel

    def _size(self, value: Any, where: str) -> Any:
        const = _const_int(value)
        if const is not None:
            return const
        raise ExportError("%s: symbolic launch size %r is not supported" % (where, value))

    def _copy(self, call: Any, where: str) -> None:
        dst, src = self._arg_buffers(call, where)[:2]
        if dst.nbytes != src.nbytes:
            raise ExportError("%s: copy of %d bytes into %d bytes" % (where, src.nbytes, dst.nbytes))
        doc = {"copy": {"dst": self.buffers.name_of(dst, where), "src": self.buffers.name_of(src, where)}}
        self.ops.append(_Op(doc, [(self.buffers.storage(dst), True), (self.buffers.storage(src), False)]))


def _const_int(value: Any) -> Optional[int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if getattr(getattr(value, "op", None), "name", "") == "CONST" and isinstance(value.arg, int):
        return int(value.arg)
    return None


def _dependencies(ops: Sequence[_Op]) -> List[List[int]]:
    """For each op, the earlier ops it must follow: overlapping storage where either side writes."""
    deps: List[List[int]] = []
    for i, op in enumerate(ops):
        mine: List[int] = []
        for j in range(i):
            if any(_conflict(a, b) for a in op.touches for b in ops[j].touches):
                mine.append(j)
        deps.append(mine)
    return deps


def _conflict(a: Tuple[Tuple[int, int, int], bool], b: Tuple[Tuple[int, int, int], bool]) -> bool:
    (base_a, lo_a, hi_a), write_a = a
    (base_b, lo_b, hi_b), write_b = b
    return base_a == base_b and (write_a or write_b) and lo_a < hi_b and lo_b < hi_a


# --- the export -------------------------------------------------------------------------------------


def export_tinygrad(
    fn: Callable[..., Any],
    out_dir: str,
    *,
    inputs: Optional[Mapping[str, Any]] = None,
    weights: Optional[Mapping[str, Any]] = None,
    description: Optional[str] = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    flags: Sequence[str] = (),
    beam: int = 0,
) -> ExportResult:
    """Capture ``fn(**inputs)``'s tinygrad CPU schedule and write a plan bundle to ``out_dir``.

    ``fn`` returns a Tensor, a sequence of Tensors (outputs ``out0``, ``out1``, ...) or a dict
    ``name -> Tensor``. ``inputs`` maps names to numpy arrays or Tensors; they are realized on
    the CPU, passed as keyword arguments, and become the plan's ``input`` buffers. ``weights``
    names other tensors the computation reads (they keep their names in the plan). Symbolic
    shapes (tinygrad ``Variable(...).bind(v)``) become plan variables with tinygrad's bounds
    and ``v`` as default. ``beam`` >= 1 runs tinygrad's BEAM search of that width on every kernel
    (a build-time cost, timed in ``compile_seconds``; the plan keeps the kernels it chose). Raises
    :class:`ExportError` for anything a plan cannot express.
    """
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 0:
        raise ExportError("beam must be an integer >= 0 (0: no search), got %r" % (beam,))
    require_tinygrad()
    from tinygrad import Tensor
    from tinygrad.engine.realize import compile_linear, run_linear

    named_inputs = {name: _as_tensor(Tensor, name, value) for name, value in (inputs or {}).items()}
    outputs = _outputs(fn(**named_inputs), Tensor)
    tensors = [t.contiguous() for t in outputs.values()]
    linear, var_vals = tensors[0].linear_with_vars(*tensors[1:])
    out_bufs = {name: _base_buffer(t, name) for name, t in zip(outputs, tensors)}
    input_bufs = {id(_base_buffer(t, name)): name for name, t in named_inputs.items()}
    named_weights = {name: _as_tensor(Tensor, name, t) for name, t in (weights or {}).items()}
    weight_bufs = {id(_base_buffer(t, name)): name for name, t in named_weights.items()}
    shapes = {
        id(_base_buffer(t, name)): _static_shape(t, _base_buffer(t, name))
        for name, t in list(named_inputs.items()) + list(named_weights.items()) + list(zip(outputs, tensors))
    }
    buffers = _Buffers(
        input_bufs,
        {id(b): name for name, b in out_bufs.items()},
        weight_bufs,
        {k: v for k, v in shapes.items() if v is not None},
    )
    started = time.perf_counter()
    compiled = compile_linear(linear, beam=beam)
    compile_seconds = time.perf_counter() - started
    capture = _Capture(sys.modules["tinygrad"], buffers, var_vals)
    capture.walk(compiled)
    for name, buf in out_bufs.items():
        buffers.name_of(buf, "output %s" % name)  # an output no op writes is still declared
    if not capture.ops:
        raise ExportError("the outputs need no computation (already realized): nothing to export")
    run_linear(compiled, var_vals)
    expected = {name: _valid_prefix(buf, t, var_vals) for (name, buf), t in zip(out_bufs.items(), tensors)}
    if description is None and beam:
        description = "exported from tinygrad %s with BEAM=%d: %d kernels, %d ops" % (
            _tinygrad_version(sys.modules["tinygrad"]),
            beam,
            len(capture.kernels),
            len(capture.ops),
        )
    plan_path = _write_bundle(out_dir, capture, buffers, expected, description, rtol, atol, list(flags))
    values = {
        name: list(_unpack(buf.dtype, data, name)) for name, (buf, data) in _expect_data(out_bufs, expected).items()
    }
    return ExportResult(
        plan_path, len(capture.kernels), len(capture.ops), values, dict(capture.plan_vars), beam, compile_seconds
    )


def _as_tensor(tensor_cls: Any, name: str, value: Any) -> Any:
    if not _IDENT.match(name):
        raise ExportError("input name %r is not an identifier" % name)
    t = value if isinstance(value, tensor_cls) else tensor_cls(value, device="CPU")
    return t.realize()


def _outputs(result: Any, tensor_cls: Any) -> Dict[str, Any]:
    if isinstance(result, tensor_cls):
        items: List[Tuple[str, Any]] = [("out", result)]
    elif isinstance(result, dict):
        items = list(result.items())
    elif isinstance(result, (list, tuple)):
        items = [("out%d" % i, t) for i, t in enumerate(result)]
    else:
        raise ExportError(
            "the function returned %s; return a Tensor, a list of Tensors or a dict name -> Tensor"
            % type(result).__name__
        )
    if not items:
        raise ExportError("the function returned no outputs")
    for name, t in items:
        if not isinstance(name, str) or not _IDENT.match(name):
            raise ExportError("output name %r is not an identifier" % (name,))
        if not isinstance(t, tensor_cls):
            raise ExportError("output %s is %s, not a tinygrad Tensor" % (name, type(t).__name__))
    return dict(items)


def _base_buffer(t: Any, name: str) -> Any:
    base = t.uop.base
    try:
        buf = base.buffer
    except Exception:
        raise ExportError("tensor %s is not backed by one buffer after scheduling (%s)" % (name, base.op)) from None
    if type(buf).__name__ == "MultiBuffer":
        raise ExportError("tensor %s lives on several devices; export single-device CPU tensors" % name)
    return buf


def _static_shape(t: Any, buf: Any) -> Optional[Tuple[int, ...]]:
    dims = tuple(t.shape)
    if not all(isinstance(d, int) for d in dims):
        return None
    count = 1
    for d in dims:
        count *= d
    return dims if count == buf.size and dims else None


def _valid_prefix(buf: Any, t: Any, var_vals: Mapping[str, int]) -> bytes:
    """The bytes of ``t`` at the default variables: a prefix of its (maximum-size) buffer."""
    from tinygrad.uop.ops import sym_infer

    count = 1
    for dim in t.shape:
        count *= int(sym_infer(dim, dict(var_vals)))
    return _read(buf)[: count * buf.dtype.itemsize]


def _expect_data(out_bufs: Mapping[str, Any], expected: Mapping[str, bytes]) -> Dict[str, Tuple[Any, bytes]]:
    return {name: (out_bufs[name], expected[name]) for name in out_bufs}


def _unpack(tg_dtype: Any, data: bytes, where: str) -> List[Any]:
    return unpack_values(_dtype_of(tg_dtype, where), data)


def _write_bundle(
    out_dir: str,
    capture: _Capture,
    buffers: _Buffers,
    expected: Mapping[str, bytes],
    description: Optional[str],
    rtol: float,
    atol: float,
    flags: List[str],
) -> str:
    for sub in ("kernels", "data", "expect"):
        os.makedirs(os.path.join(out_dir, sub), exist_ok=True)
    doc: Dict[str, Any] = {"svod_plan": 1}
    doc["description"] = description or "exported from tinygrad %s: %d kernels, %d ops" % (
        _tinygrad_version(sys.modules["tinygrad"]),
        len(capture.kernels),
        len(capture.ops),
    )
    doc["device"] = "CPU"
    if capture.plan_vars:
        doc["vars"] = {n: {"min": lo, "max": hi, "default": d} for n, (lo, hi, d) in sorted(capture.plan_vars.items())}
    doc["buffers"] = {}
    for b in buffers.order:
        doc["buffers"][b.name] = b.to_json("data")
        if b.init is not None and b.view_of is None:
            _save(os.path.join(out_dir, "data", b.name + ".npy"), b.dtype, b.init, b.shape)
    doc["kernels"] = {k.name: _kernel_json(out_dir, k, flags) for k in capture.kernels.values()}
    deps = _dependencies(capture.ops)
    doc["ops"] = [
        dict(op.doc, id=i, deps=d) if d else dict(op.doc, id=i) for i, (op, d) in enumerate(zip(capture.ops, deps))
    ]
    doc["expect"] = {}
    by_name = {b.name: b for b in buffers.order}
    for name, data in expected.items():
        b = by_name[name]
        _save(os.path.join(out_dir, "expect", name + ".npy"), b.dtype, data)
        exact = not b.dtype.is_float  # integer and bool outputs must match tinygrad's exactly
        entry: Dict[str, Any] = {
            "npy": "expect/%s.npy" % name,
            "rtol": 0 if exact else rtol,
            "atol": 0 if exact else atol,
        }
        if len(data) // b.dtype.itemsize != b.count:
            entry["count"] = len(data) // b.dtype.itemsize
        doc["expect"][name] = entry
    plan_path = os.path.join(out_dir, "plan.json")
    with open(plan_path, "w") as fh:
        json.dump(doc, fh, indent=1)
        fh.write("\n")
    return plan_path


# tinygrad's Clang renderer uses two clang-only C extensions; svod_min falls back to gcc when
# clang is missing, so the exported source carries a gcc spelling of each (same semantics).
_VECTOR_TYPEDEF = re.compile(
    r"^typedef (?P<elem>[\w ]+?) (?P<name>\w+) "
    r"__attribute__\(\(aligned\((?P<align>\d+)\),ext_vector_type\((?P<n>\d+)\)\)\);$",
    re.M,
)
_GCC_PRELUDE = (
    "#if !defined(__clang__)\n"
    "#define __builtin_bit_cast(T, v) "
    "({ __typeof__(v) svod_v_ = (v); T svod_t_; __builtin_memcpy(&svod_t_, &svod_v_, sizeof(svod_t_)); svod_t_; })\n"
    "#endif\n"
)


def portable_source(source: str) -> str:
    """tinygrad C that compiles with clang (unchanged meaning) and with gcc."""

    def typedef(m: "re.Match[str]") -> str:
        clang, size = m.group(0), "%s*sizeof(%s)" % (m.group("n"), m.group("elem"))
        gcc = "typedef %s %s __attribute__((aligned(%s),vector_size(%s)));" % (
            m.group("elem"),
            m.group("name"),
            m.group("align"),
            size,
        )
        return "#if defined(__clang__)\n%s\n#else\n%s\n#endif" % (clang, gcc)

    prelude = _GCC_PRELUDE if "__builtin_bit_cast" in source else ""
    return prelude + _VECTOR_TYPEDEF.sub(typedef, source)


def _kernel_json(out_dir: str, k: _Kernel, flags: List[str]) -> Dict[str, Any]:
    rel = "kernels/%s.c" % k.name
    with open(os.path.join(out_dir, rel), "w") as fh:
        fh.write("/* exported from tinygrad: entry %s */\n%s\n" % (k.entry, portable_source(k.source)))
    out: Dict[str, Any] = {"file": rel, "entry": k.entry, "buffers": k.buffers, "outputs": k.outputs}
    if k.var_names:
        out["vars"] = k.var_names
    if k.global_size != [1, 1, 1]:
        out["global_size"] = k.global_size
    if flags:
        out["flags"] = flags
    return out


def _save(path: str, dt: DType, payload: bytes, shape: Optional[Tuple[int, ...]] = None) -> None:
    if dt.name == "bfloat16":
        raise ExportError("%s: bfloat16 data cannot be stored as .npy" % path)
    write_npy(path, dt, shape or (len(payload) // dt.itemsize,), payload)


# --- command line ------------------------------------------------------------------------------------


def load_target(target: str) -> Callable[..., Any]:
    """``path/to/script.py:function`` or ``package.module:function`` -> the function."""
    module_part, sep, attr = target.rpartition(":")
    if not sep or not module_part or not _IDENT.match(attr):
        raise ExportError("expected SCRIPT.py:FUNCTION or MODULE:FUNCTION, got %r" % target)
    if module_part.endswith(".py") or os.sep in module_part:
        if not os.path.isfile(module_part):
            raise ExportError("no such script: %s" % module_part)
        spec = importlib.util.spec_from_file_location("svod_export_target", module_part)
        if spec is None or spec.loader is None:  # not a .py file: importlib has no loader for it
            raise ExportError("cannot import %s as a Python script (name it *.py)" % module_part)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(module_part)))
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.pop(0)
    else:
        try:
            module = importlib.import_module(module_part)
        except ImportError as exc:
            raise ExportError("cannot import %s: %s" % (module_part, exc)) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ExportError("%s has no function %s" % (module_part, attr))
    return fn
