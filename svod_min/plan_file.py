"""Plan files: a versioned JSON description of buffers, kernels and ops.

See docs/plan-format.md. :func:`load_plan` validates the whole document —
every error names its JSON path (``ops[3].buffers[1]: unknown buffer 'h2'``)
— compiles the kernels, builds the :class:`ExecutionPlan` and returns it
with what is needed to verify it. Nothing is dispatched on bad input.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import random
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Tuple

from . import kernels as library
from .device_registry import DEVICE_FACTORIES
from .dtypes import DType, dtype as to_dtype, pack_values, unpack_values
from .error import BufferAllocationError, NotSupportedError, PlanError, PlanFileError, PtxError, SvodError
from .execution_plan import (
    ExecutionPlan,
    ExecutionPlanBuilder,
    PreparedBufferView,
    PreparedCopy,
    PreparedCustomFunction,
    PreparedKernel,
    RuntimeVar,
)
from . import execution_plan as execution_plan_module
from .expr import compile_expr
from .kernel_cache import CachedKernel, compile_many_cached
from .npy import read_npy

FORMAT_VERSION = 1
MAX_PLAN_BYTES = 64 * 1024 * 1024
MAX_BUFFER_BYTES = 1 << 34
_FLOAT32_MAX = 3.4028234663852886e38
_TOP_KEYS = {"svod_plan", "device", "vars", "buffers", "kernels", "ops", "expect", "description"}
#: Variables only the CPU dispatcher uses (one chunk of work per thread); GPU forms do not take them.
_CPU_ONLY_VARS = ("core_id", "core_id_count")



@dataclass
class Expectation:
    buffer: str
    values: List[float]
    rtol: float = 1e-5
    atol: float = 1e-6


@dataclass
class LoadedPlan:
    """A built plan plus its names, variables and expectations."""

    plan: ExecutionPlan
    buffers: Dict[str, Any]
    variables: Dict[str, RuntimeVar]
    defaults: Dict[str, int]
    expectations: List[Expectation] = field(default_factory=list)
    description: str = ""

    def verify(self) -> List[Tuple[str, bool, float]]:
        """(buffer, ok, max abs error) for every expectation."""
        return [_check(self.buffers[e.buffer], e) for e in self.expectations]


# --- small validators ----------------------------------------------------------------


def _need(cond: bool, path: str, message: str) -> None:
    if not cond:
        raise PlanFileError(path, message)


def _obj(value: Any, path: str) -> Dict[str, Any]:
    _need(isinstance(value, dict), path, "expected an object, got %s" % _kind(value))
    return value


def _list(value: Any, path: str) -> List[Any]:
    _need(isinstance(value, list), path, "expected a list, got %s" % _kind(value))
    return value


def _int(value: Any, path: str, lo: Optional[int] = None, hi: Optional[int] = None) -> int:
    _need(type(value) is int, path, "expected an integer, got %s" % _kind(value))
    _need(lo is None or value >= lo, path, "must be >= %d, got %d" % (lo or 0, value))
    _need(hi is None or value <= hi, path, "must be <= %d, got %d" % (hi or 0, value))
    return value


def _num(value: Any, path: str) -> float:
    _need(isinstance(value, (int, float)) and not isinstance(value, bool), path, "expected a number, got %s" % _kind(value))
    return float(value)


def _float32_bits(value: Any, path: str) -> int:
    """A number as the int32 holding its float32 bits (what an ``f32`` kernel variable receives)."""
    number = _num(value, path)
    _need(math.isfinite(number) and abs(number) <= _FLOAT32_MAX, path, "%r is not a finite float32 value" % (value,))
    return struct.unpack("<i", struct.pack("<f", number))[0]


def _bool(value: Any, path: str) -> bool:
    _need(isinstance(value, bool), path, "expected true or false, got %s" % _kind(value))
    return value


def _str(value: Any, path: str) -> str:
    _need(isinstance(value, str) and value != "", path, "expected a non-empty string, got %s" % _kind(value))
    return value


def _kind(value: Any) -> str:
    if isinstance(value, str):
        return "string %r" % (value[:40],)
    return {dict: "an object", list: "a list", bool: "a boolean", type(None): "null"}.get(type(value), type(value).__name__)


def _known_keys(obj: Mapping[str, Any], allowed: set, path: str) -> None:
    extra = sorted(set(obj) - allowed)
    _need(not extra, path, "unknown key(s) %s (allowed: %s)" % (extra, sorted(allowed)))


# --- reading the document --------------------------------------------------------------


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def read_plan_document(path: str) -> Dict[str, Any]:
    """Read and parse a plan file with size and syntax checks."""
    try:
        size = os.path.getsize(path)
    except OSError as exc:
        raise PlanFileError("", "cannot read plan file %s: %s" % (path, exc.strerror or exc)) from None
    _need(not os.path.isdir(path), "", "cannot read plan file %s: it is a directory" % path)
    _need(size <= MAX_PLAN_BYTES, "", "plan file %s is %d bytes; the limit is %d" % (path, size, MAX_PLAN_BYTES))
    _need(size > 0, "", "plan file %s is empty" % path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except OSError as exc:
        raise PlanFileError("", "cannot read plan file %s: %s" % (path, exc.strerror or exc)) from None
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except UnicodeDecodeError:
        raise PlanFileError("", "plan file %s is not UTF-8 text" % path) from None
    except _DuplicateKey as exc:  # json keeps the last one silently: a second "expect" would hide the first
        raise PlanFileError("", "plan file %s repeats the key %r in one object" % (path, exc.key)) from None
    except ValueError as exc:
        raise PlanFileError("", "plan file %s is not valid JSON: %s" % (path, exc)) from None
    except RecursionError:
        raise PlanFileError("", "plan file %s nests too deeply" % path) from None
    return _obj(doc, "$")


def load_plan(
    source: Any, *, device: Any = None, base_dir: Optional[str] = None, var_values: Optional[Mapping[str, int]] = None
) -> LoadedPlan:
    """Build a plan from a path or an already parsed document."""
    if isinstance(source, str):
        base_dir = base_dir or os.path.dirname(os.path.abspath(source))
        doc = read_plan_document(source)
    else:
        doc = _obj(source, "$")
    return _PlanReader(doc, base_dir or os.getcwd(), device, var_values or {}).build()


class _PlanReader:
    def __init__(self, doc: Dict[str, Any], base_dir: str, device: Any, var_values: Mapping[str, int]) -> None:
        self.doc = doc
        self.base_dir = base_dir
        self.device_override = device
        self.var_values = dict(var_values)
        self.device: Any = None
        self.variables: Dict[str, RuntimeVar] = {}
        self.values: Dict[str, int] = {}
        self.buffers: Dict[str, Any] = {}
        self.buffer_index: Dict[str, int] = {}
        self.kernels: Dict[str, Tuple[CachedKernel, Dict[str, Any]]] = {}

    def build(self) -> LoadedPlan:
        doc = self.doc
        _known_keys(doc, _TOP_KEYS, "$")
        _need("svod_plan" in doc, "svod_plan", "missing: a plan file starts with \"svod_plan\": %d" % FORMAT_VERSION)
        _need(type(doc["svod_plan"]) is int and doc["svod_plan"] == FORMAT_VERSION, "svod_plan", "unsupported version %r (this svod_min reads %d)" % (doc["svod_plan"], FORMAT_VERSION))
        self._device()
        self._vars(_obj(doc.get("vars", {}), "vars"))
        builder = ExecutionPlanBuilder(self.device)
        builder.set_var_values(self.values)
        self._buffers(builder, _obj(doc.get("buffers"), "buffers") if "buffers" in doc else _missing("buffers"))
        self._kernels(_obj(doc.get("kernels", {}), "kernels"))
        ops = _list(doc.get("ops"), "ops") if "ops" in doc else _missing("ops")
        _need(len(ops) > 0, "ops", "a plan needs at least one op")
        for i, op in enumerate(ops):
            builder.add_op(self._op(i, _obj(op, "ops[%d]" % i)))
        outputs = [self.buffer_index[n] for n, spec in self.doc["buffers"].items() if spec.get("output")]
        _need(bool(outputs), "buffers", "no buffer is marked \"output\": true")
        builder.set_output_buffers(outputs)
        expectations = self._expect(_obj(doc.get("expect", {}), "expect"))
        plan = builder.build()
        description = _str(doc["description"], "description") if doc.get("description", "") != "" else ""
        return LoadedPlan(plan, self.buffers, self.variables, dict(self.values), expectations, description)

    # -- device and variables ------------------------------------------------------------

    def _device(self) -> None:
        if self.device_override is not None and not isinstance(self.device_override, str):
            self.device = self.device_override  # an already created device object
            return
        if self.device_override is not None:
            spec = self.device_override  # from --device: the registry names what is wrong with it
        else:
            spec = _str(self.doc.get("device", "CPU"), "device")
        self.device = DEVICE_FACTORIES.device(spec)

    def _vars(self, spec: Dict[str, Any]) -> None:
        for name, v in spec.items():
            path = "vars.%s" % name
            _need(name.isidentifier() and name != "core_id", path, "variable names are identifiers (core_id is reserved)")
            if isinstance(v, list):
                _need(len(v) == 3, path, "expected [min, max, default]")
                lo, hi, default = (_int(x, "%s[%d]" % (path, i), -(1 << 31), (1 << 31) - 1) for i, x in enumerate(v))
            else:
                v = _obj(v, path)
                _known_keys(v, {"min", "max", "default"}, path)
                lo = _int(v.get("min"), path + ".min", -(1 << 31), (1 << 31) - 1)
                hi = _int(v.get("max"), path + ".max", -(1 << 31), (1 << 31) - 1)
                default = _int(v.get("default", hi), path + ".default")
            _need(lo <= hi, path, "min %d > max %d" % (lo, hi))
            _need(lo <= default <= hi, path, "default %d is outside [%d, %d]" % (default, lo, hi))
            self.variables[name] = RuntimeVar(name, lo, hi)
            self.values[name] = default
        for name, value in self.var_values.items():
            var = self.variables.get(name)
            _need(var is not None, "--var %s" % name, "unknown variable (plan variables: %s)" % sorted(self.variables))
            _need(type(value) is int and var.min_val <= value <= var.max_val, "--var %s" % name,
                  "variable %s=%r is outside bounds [%d, %d]" % (name, value, var.min_val, var.max_val))
            self.values[name] = value

    # -- buffers ------------------------------------------------------------------------

    def _buffers(self, builder: ExecutionPlanBuilder, spec: Dict[str, Any]) -> None:
        _need(len(spec) > 0, "buffers", "a plan needs at least one buffer")
        for ast_id, (name, b) in enumerate(spec.items()):
            path = "buffers.%s" % name
            b = _obj(b, path)
            _known_keys(b, {"dtype", "shape", "init", "output", "input", "view_of", "offset"}, path)
            for flag in ("output", "input"):
                if flag in b:
                    _bool(b[flag], "%s.%s" % (path, flag))
            _need("offset" not in b or "view_of" in b, path + ".offset", "an offset needs view_of (it places a view in its base)")
            buf = self._view(name, b, path) if "view_of" in b else self._allocate(b, path)
            self.buffers[name] = buf
            self.buffer_index[name] = builder.add_buffer(ast_id, buf)
            if b.get("input"):
                builder.declare_input(self.buffer_index[name])

    def _shape(self, b: Dict[str, Any], path: str) -> Tuple[DType, Tuple[int, ...], int]:
        try:
            dt = to_dtype(_str(b.get("dtype", "float32"), path + ".dtype"))
        except SvodError as exc:
            raise PlanFileError(path + ".dtype", str(exc)) from None
        shape = tuple(_int(d, "%s.shape[%d]" % (path, i), 0, 1 << 40) for i, d in enumerate(_list(b.get("shape"), path + ".shape")))
        count = _prod(shape)
        _need(count * dt.itemsize <= MAX_BUFFER_BYTES, path + ".shape", "buffer of %d bytes exceeds the %d-byte limit" % (count * dt.itemsize, MAX_BUFFER_BYTES))
        return dt, shape, count

    def _allocate(self, b: Dict[str, Any], path: str) -> Any:
        dt, shape, count = self._shape(b, path)
        try:
            data = self._init(b.get("init", "zeros"), dt, shape, count, path + ".init")
            buf = self.device.allocate(list(shape), dt.name)
            if data is not None:
                buf.copyin(data)
        except MemoryError:
            raise BufferAllocationError("%s: not enough host memory for %d bytes" % (path, count * dt.itemsize)) from None
        return buf

    def _view(self, name: str, b: Dict[str, Any], path: str) -> Any:
        base_name = _str(b["view_of"], path + ".view_of")
        _need(base_name in self.buffers, path + ".view_of", "unknown buffer %r (views must come after their base)" % base_name)
        dt, shape, count = self._shape(b, path)
        offset = _int(b.get("offset", 0), path + ".offset", 0)
        base = self.buffers[base_name]
        _need(offset + count * dt.itemsize <= base.nbytes, path, "view [%d, +%d) is outside %r (%d bytes)" % (offset, count * dt.itemsize, base_name, base.nbytes))
        _need("init" not in b, path + ".init", "views share their base's data and take no init")
        return base.view(offset, count * dt.itemsize, dtype=dt.name, shape=shape)

    def _init(self, init: Any, dt: DType, shape: Tuple[int, ...], count: int, path: str) -> Optional[bytes]:
        if init == "zeros":
            return None
        if init == "ones":
            return pack_values(dt, [1]) * count
        if init == "arange":
            return _packed_chunks(dt, count, lambda lo, hi: range(lo, hi))
        init = _obj(init, path)
        _need(len(init) == 1, path, "expected one of zeros, ones, arange, {random}, {values}, {npy}")
        kind, arg = next(iter(init.items()))
        if kind == "values":
            values = _flatten(_list(arg, path + ".values"), path + ".values")
            _need(len(values) == count, path + ".values", "%d values for a buffer of %d elements" % (len(values), count))
            return pack_values(dt, values)
        if kind == "random":
            arg = _obj(arg, path + ".random")
            _known_keys(arg, {"seed", "low", "high"}, path + ".random")
            rng = random.Random(_int(arg.get("seed", 0), path + ".random.seed"))
            low, high = _num(arg.get("low", -1.0), path + ".random.low"), _num(arg.get("high", 1.0), path + ".random.high")
            def draw(lo: int, hi: int) -> List[Any]:
                values = [rng.uniform(low, high) for _ in range(lo, hi)]
                return values if dt.is_float else [int(v) for v in values]

            return _packed_chunks(dt, count, draw)
        if kind == "npy":
            return self._npy(_str(arg, path + ".npy"), dt, shape, path + ".npy")
        raise PlanFileError(path, "unknown init %r (zeros, ones, arange, random, values, npy)" % kind)

    def _npy(self, rel: str, dt: DType, shape: Tuple[int, ...], path: str) -> bytes:
        file_dt, file_shape, payload = self._read_npy(rel, path)
        _need(file_dt.name == dt.name, path, "%s holds %s, the buffer is %s" % (rel, file_dt.name, dt.name))
        _need(_prod(file_shape) == _prod(shape), path, "%s has shape %s, the buffer %s" % (rel, list(file_shape), list(shape)))
        return payload

    def _read_npy(self, rel: str, path: str) -> Tuple[DType, Tuple[int, ...], bytes]:
        try:
            return read_npy(self._path(rel, path))
        except PlanFileError:
            raise
        except PlanError as exc:
            raise PlanFileError(path, str(exc)) from None

    def _read_text(self, rel: str, path: str) -> str:
        try:
            with open(self._path(rel, path), encoding="utf-8") as fh:
                return fh.read()
        except UnicodeDecodeError:
            raise PlanFileError(path, "file %r is not UTF-8 text" % rel) from None
        except OSError as exc:
            raise PlanFileError(path, "cannot read %r: %s" % (rel, exc.strerror or exc)) from None

    def _path(self, rel: str, path: str) -> str:
        full = os.path.normpath(os.path.join(self.base_dir, rel))
        _need(os.path.isfile(full), path, "file %r not found (relative to %s)" % (rel, self.base_dir))
        return full

    # -- kernels -----------------------------------------------------------------------------

    def _kernels(self, spec: Dict[str, Any]) -> None:
        pending: Dict[str, _PendingKernel] = {}
        gpu: Dict[str, _PendingCuda] = {}
        on_gpu = _is_gpu(self.device)
        for name, k in spec.items():
            path = "kernels.%s" % name
            k = _obj(k, path)
            allowed = {"source", "file", "llvm_ir", "ir_file", "library", "params", "entry", "buffers", "outputs",
                       "vars", "global_size", "extents", "parallel_safe", "flags", "flops", "bytes", "cuda"}
            _known_keys(k, allowed, path)
            forms = [f for f in ("source", "file", "llvm_ir", "ir_file", "library") if f in k]
            _need(len(forms) == 1 or (not forms and "cuda" in k), path,
                  "give exactly one of source, file, llvm_ir, ir_file, library (got %s), or only a cuda form" % (forms or "none"))
            cuda = self._cuda_form(k, path) if "cuda" in k else None  # checked on every device
            if forms == ["library"]:
                self.kernels[name] = self._library(name, k, path)
            elif on_gpu:
                _need(cuda is not None, path, "has no CUDA form, and this plan runs on %s: add a \"cuda\" object "
                      "(CUDA C or PTX, docs/plan-format.md) or use a library kernel" % self.device.spec)
                gpu[name] = cuda  # type: ignore[assignment]
            else:
                _need(bool(forms), path, "has only a CUDA form; run the plan on a GPU (--device CUDA)")
                pending[name] = self._compiled(name, k, forms[0], path)
        self._compile_and_load(pending)
        for name, cuda in gpu.items():
            self.kernels[name] = cuda.load(self.device)

    def _compile_and_load(self, pending: Dict[str, "_PendingKernel"]) -> None:
        """Compile every source kernel in as few compiler runs as possible, then load them."""
        batches: Dict[Tuple[str, Tuple[str, ...]], List[str]] = {}
        for name, p in pending.items():
            batches.setdefault((p.kind, p.flags), []).append(name)
        for (kind, flags), names in batches.items():
            objects = compile_many_cached([pending[n].text for n in names], kind=kind, extra_flags=flags,
                                          names=["kernels.%s" % n for n in names])
            for name, obj in zip(names, objects):
                self.kernels[name] = pending[name].load(self.device, obj)

    def _compiled(self, name: str, k: Dict[str, Any], form: str, path: str) -> "_PendingKernel":
        text = k[form]
        if form in ("file", "ir_file"):
            text = self._read_text(_str(text, "%s.%s" % (path, form)), "%s.%s" % (path, form))
        text = _str(text, "%s.%s" % (path, form))
        nbuf = _int(k.get("buffers"), path + ".buffers", 1, 64)
        var_names = [_str(v, "%s.vars[%d]" % (path, i)) for i, v in enumerate(_list(k.get("vars", []), path + ".vars"))]
        outputs = [_int(o, "%s.outputs[%d]" % (path, i), 0, nbuf - 1) for i, o in enumerate(_list(k.get("outputs", [0]), path + ".outputs"))]
        entry = _str(k.get("entry", name), path + ".entry")
        flags = [_str(f, "%s.flags[%d]" % (path, i)) for i, f in enumerate(_list(k.get("flags", []), path + ".flags"))]
        gsize = self._global_size(k.get("global_size", [1, 1, 1]), path + ".global_size")
        _need(self.device.spec.kind == "CPU", path, "device %s cannot run C kernels" % self.device.spec)
        self._check_threading(gsize, var_names, path + ".global_size")
        meta = {
            "extents": self._extents(k.get("extents", {}), nbuf, path + ".extents"),
            "flops": self._work(k.get("flops"), var_names, path + ".flops"),
            "bytes": self._work(k.get("bytes"), var_names, path + ".bytes"),
        }
        kind = "ir" if form in ("llvm_ir", "ir_file") else "c"
        return _PendingKernel(text, kind, tuple(flags), entry, nbuf, var_names, outputs, gsize,
                              _bool(k.get("parallel_safe", True), path + ".parallel_safe"), meta)

    def _cuda_form(self, k: Dict[str, Any], path: str) -> "_PendingCuda":
        """Validate a kernel's ``cuda`` object (CUDA C for NVRTC, or PTX); loaded only on a GPU."""
        cpath = path + ".cuda"
        c = _obj(k["cuda"], cpath)
        _need("library" not in k, cpath, "a library kernel brings its own CUDA form; drop \"cuda\"")
        _known_keys(c, {"source", "file", "ptx", "ptx_file", "entry", "vars", "grid", "block", "shared_bytes", "options"}, cpath)
        form, text = self._cuda_text(c, cpath)
        nbuf = _int(k.get("buffers"), path + ".buffers", 1, 64)
        var_names = self._cuda_vars(k, c, path)
        outputs = [_int(o, "%s.outputs[%d]" % (path, i), 0, nbuf - 1) for i, o in enumerate(_list(k.get("outputs", [0]), path + ".outputs"))]
        _need("grid" in c and "block" in c, cpath, "a CUDA form needs \"grid\" (blocks, svod's global size) and \"block\" (threads per block)")
        grid = self._grid(c["grid"], var_names, cpath + ".grid")
        block = tuple(_int(b, "%s.block[%d]" % (cpath, i), 1, 1024) for i, b in enumerate(self._three(c["block"], cpath + ".block")))
        meta = {
            "extents": self._extents(k.get("extents", {}), nbuf, path + ".extents"),
            "flops": self._work(k.get("flops"), var_names, path + ".flops"),
            "bytes": self._work(k.get("bytes"), var_names, path + ".bytes"),
        }
        options = tuple(_str(o, "%s.options[%d]" % (cpath, i)) for i, o in enumerate(_list(c.get("options", []), cpath + ".options")))
        entry = _str(c.get("entry", k.get("entry", path.split(".", 1)[1])), cpath + ".entry")
        shared = _int(c.get("shared_bytes", 0), cpath + ".shared_bytes", 0, 1 << 20)
        return _PendingCuda(cpath, form, text, entry, nbuf, var_names, outputs, grid, block, shared, options, meta)

    def _cuda_text(self, c: Dict[str, Any], cpath: str) -> Tuple[str, str]:
        """``(form, text)``: exactly one of source, file (CUDA C), ptx, ptx_file (PTX); files are read now."""
        forms = [f for f in ("source", "file", "ptx", "ptx_file") if f in c]
        _need(len(forms) == 1, cpath, "give exactly one of source, file, ptx, ptx_file (got %s)" % (forms or "none"))
        where = "%s.%s" % (cpath, forms[0])
        text = _str(c[forms[0]], where)
        return forms[0], self._read_text(text, where) if forms[0] in ("file", "ptx_file") else text

    def _cuda_vars(self, k: Dict[str, Any], c: Dict[str, Any], path: str) -> List[str]:
        """The GPU form's int32 variables: its own ``vars``, else the kernel's without the CPU thread-split ones."""
        top = [_str(v, "%s.vars[%d]" % (path, i)) for i, v in enumerate(_list(k.get("vars", []), path + ".vars"))]
        default = [v for v in top if v not in _CPU_ONLY_VARS]
        where = path + ".cuda.vars"
        names = [_str(v, "%s[%d]" % (where, i)) for i, v in enumerate(_list(c.get("vars", default), where))]
        _need(not set(names) & set(_CPU_ONLY_VARS), where, "%s are CPU dispatch variables" % list(_CPU_ONLY_VARS))
        return names

    def _grid(self, value: Any, var_names: List[str], path: str) -> Tuple[Any, ...]:
        """Three ints or size expressions over the kernel's variables (``ceildiv(a,b)`` allowed)."""
        out = []
        for i, d in enumerate(self._three(value, path)):
            where = "%s[%d]" % (path, i)
            if type(d) is int:
                _need(d >= 1, where, "grid dimensions are positive")
                out.append(d)
                continue
            try:
                expr = compile_expr(_str(d, where))
            except SvodError as exc:
                raise PlanFileError(where, str(exc)) from None
            unknown = sorted(expr.names - set(var_names))
            _need(not unknown, where, "expression %r uses %s, not kernel variables %s" % (d, unknown, var_names))
            out.append(expr.text)
        return tuple(out)

    @staticmethod
    def _three(value: Any, path: str) -> List[Any]:
        dims = _list(value, path)
        _need(len(dims) == 3, path, "expected 3 entries, got %d" % len(dims))
        return dims

    def _work(self, value: Any, var_names: List[str], path: str) -> Any:
        """A declared flops/bytes expression, checked now so profiling can never fail later."""
        if value is None or type(value) is int:
            return value
        try:
            expr = compile_expr(_str(value, path))
        except PlanError as exc:
            raise PlanFileError(path, str(exc)) from None
        unknown = sorted(expr.names - set(var_names))
        _need(not unknown, path, "expression %r uses %s, not kernel variables %s" % (value, unknown, var_names))
        return expr.text

    def _check_threading(self, gsize: Tuple[Any, ...], var_names: List[str], path: str) -> None:
        """global_size[0] other than 1 runs the kernel once per core id: it needs a core_id variable."""
        if gsize[0] != 1 and "core_id" not in var_names:
            raise PlanFileError(path, "global_size[0] is %r but the kernel has no core_id variable to split work by" % (gsize[0],))

    def _library(self, name: str, k: Dict[str, Any], path: str) -> Tuple[CachedKernel, Dict[str, Any]]:
        params = _obj(k.get("params", {}), path + ".params")
        _need(not (set(k) - {"library", "params"}), path, "a library kernel takes only library and params")
        if _is_gpu(self.device):
            return self._cuda_library(_str(k["library"], path + ".library"), params, path)
        try:
            lib = library.get(_str(k["library"], path + ".library"), device=str(self.device.spec), **params)
        except (SvodError, TypeError) as exc:
            raise PlanFileError(path, str(exc).splitlines()[0]) from None
        return self._library_kernel(lib.program, lib.source, lib.entry_point, lib.sig, tuple(lib.global_size), None)

    def _cuda_library(self, lib_name: str, params: Dict[str, Any], path: str) -> Tuple[CachedKernel, Dict[str, Any]]:
        """The shipped PTX form of a library kernel, launched with its own grid and block."""
        try:
            program = self.device.library_kernel(lib_name, **params)
        except (NotSupportedError, BufferAllocationError, TypeError) as exc:  # no such form, or a bad dtype
            raise PlanFileError(path, str(exc).splitlines()[0]) from None
        sig = program.signature  # driver errors above are device errors, not bad input
        grid = tuple(d if type(d) is int else compile_expr(str(d)).text for d in sig.grid)
        return self._library_kernel(program, "", sig.entry, sig, grid, tuple(sig.block))

    def _library_kernel(self, program: Any, code: str, entry: str, sig: Any, global_size: Tuple[Any, ...],
                        local_size: Optional[Tuple[int, ...]]) -> Tuple[CachedKernel, Dict[str, Any]]:  # fmt: skip
        """A library kernel (CPU ``LibraryKernel`` or ``CudaKernelSig``) as a plan kernel: roles, extents, work."""
        roles = [arg.role for arg in sig.buffers]
        kernel = CachedKernel(program, str(self.device.spec), code, entry, list(sig.var_names), list(range(len(roles))),
                              [i for i, r in enumerate(roles) if "w" in r], [i for i, r in enumerate(roles) if "r" in r],
                              True, global_size, local_size)  # fmt: skip
        extents = {i: arg.count for i, arg in enumerate(sig.buffers) if arg.count is not None}
        f32 = {v.name for v in sig.vars if v.kind == "f32"}
        return kernel, {"extents": extents, "flops": sig.flops, "bytes": sig.bytes, "f32": f32,
                        "arg_check": functools.partial(library.check_bound_args, sig)}  # fmt: skip

    def _global_size(self, value: Any, path: str) -> Tuple[Any, ...]:
        dims = _list(value, path)
        _need(len(dims) == 3, path, "expected 3 entries, got %d" % len(dims))
        out = []
        for i, d in enumerate(dims):
            try:
                out.append(d if type(d) is int else compile_expr(_str(d, "%s[%d]" % (path, i))).text)
            except PlanError as exc:
                raise PlanFileError("%s[%d]" % (path, i), str(exc)) from None
        return tuple(out)

    def _extents(self, value: Any, nbuf: int, path: str) -> Dict[int, Any]:
        out = {}
        for key, expr in _obj(value, path).items():
            _need(key.isdecimal() and key.isascii() and int(key) < nbuf, "%s.%s" % (path, key),
                  "extent keys are argument positions 0..%d" % (nbuf - 1))  # fmt: skip
            try:
                out[int(key)] = expr if type(expr) is int else compile_expr(_str(expr, "%s.%s" % (path, key))).text
            except PlanError as exc:
                raise PlanFileError("%s.%s" % (path, key), str(exc)) from None
        return out

    # -- ops ------------------------------------------------------------------------------

    def _op(self, i: int, op: Dict[str, Any]) -> Any:
        path = "ops[%d]" % i
        kinds = [k for k in ("kernel", "copy", "view", "custom") if k in op]
        _need(len(kinds) == 1, path, "an op has exactly one of kernel, copy, view, custom (got %s)" % (kinds or "none"))
        op_id = _int(op.get("id", i), path + ".id", 0)
        deps = [_int(d, "%s.deps[%d]" % (path, j), 0) for j, d in enumerate(_list(op.get("deps", []), path + ".deps"))]
        kind = kinds[0]
        if kind == "kernel":
            return self._kernel_op(op, op_id, deps, path)
        extra = {"custom": {"buffers", "attrs"}}.get(kind, set())
        _known_keys(op, {kind, "id", "deps"} | extra, path)
        if kind == "copy":
            c = _obj(op["copy"], path + ".copy")
            _known_keys(c, {"dst", "src"}, path + ".copy")
            return PreparedCopy(op_id, [self._buf(c.get("dst"), path + ".copy.dst"), self._buf(c.get("src"), path + ".copy.src")], deps)
        if kind == "view":
            name = _str(op["view"], path + ".view")
            spec = self.doc["buffers"].get(name, {})
            _need("view_of" in spec, path + ".view", "buffer %r is not declared with view_of" % name)
            base = self.buffers[spec["view_of"]]
            view = self.buffers[name]
            return PreparedBufferView(op_id, [self._buf(name, path + ".view"), self._buf(spec["view_of"], path + ".view")],
                                      view.offset - base.offset, view.nbytes, deps)
        custom = _str(op["custom"], path + ".custom")
        registered = sorted(execution_plan_module._custom_functions)
        _need(custom in registered, path + ".custom", "custom function %r is not registered (registered: %s)" % (custom, registered))
        bufs = [self._buf(b, "%s.buffers[%d]" % (path, j)) for j, b in enumerate(_list(op.get("buffers", []), path + ".buffers"))]
        attrs = _obj(op.get("attrs", {}), path + ".attrs")
        return PreparedCustomFunction(op_id, custom, bufs, attrs, {}, deps)

    def _buf(self, name: Any, path: str) -> int:
        name = _str(name, path)
        _need(name in self.buffer_index, path, "unknown buffer %r" % name)
        return self.buffer_index[name]

    def _kernel_op(self, op: Dict[str, Any], op_id: int, deps: List[int], path: str) -> PreparedKernel:
        _known_keys(op, {"kernel", "buffers", "vars", "global_size", "id", "deps"}, path)
        name = _str(op["kernel"], path + ".kernel")
        _need(name in self.kernels, path + ".kernel", "unknown kernel %r (declared: %s)" % (name, sorted(self.kernels)))
        kernel, meta = self.kernels[name]
        names = _list(op.get("buffers"), path + ".buffers")
        _need(len(names) == len(kernel.globals), path + ".buffers", "kernel %s takes %d buffers, got %d" % (name, len(kernel.globals), len(names)))
        bufs = [self._buf(b, "%s.buffers[%d]" % (path, j)) for j, b in enumerate(names)]
        gpu = _grid_in_blocks(kernel.program)
        if "global_size" in op:
            gsize = self._global_size(op["global_size"], path + ".global_size")
            if not gpu:  # the CPU launch (core_id invocations); a GPU form launches its own grid
                self._check_threading(gsize, kernel.var_names, path + ".global_size")
                kernel = _with_global_size(kernel, gsize)
        bindings = dict(_obj(op.get("vars", {}), path + ".vars"))
        if gpu:  # portable plans may bind the CPU thread-split variables; the GPU form has none
            for cpu_only in _CPU_ONLY_VARS:
                if cpu_only not in kernel.var_names:
                    bindings.pop(cpu_only, None)
        if "core_id_count" in kernel.var_names and "core_id_count" not in bindings and "core_id_count" not in self.variables:
            bindings["core_id_count"] = max(1, int(self.device.threads))  # library kernels: one chunk per thread
        vals, fixed, runtime, exprs = self._bind_vars(kernel, bindings, path + ".vars", meta.get("f32", ()))
        try:
            env = dict(zip(kernel.var_names, vals))
            if meta.get("arg_check") is not None:  # now, to name the op; the plan re-checks at every bind
                meta["arg_check"](env, [self.buffers[n] for n in names])
            for work in ("flops", "bytes"):  # a profile must not be the first to find a division by zero
                if isinstance(meta.get(work), str):
                    compile_expr(meta[work])(env)
            return PreparedKernel(op_id, kernel, bufs, list(kernel.outs), vals, fixed, deps, runtime,
                                  extents=meta["extents"], flops=meta["flops"], bytes_moved=meta["bytes"], var_exprs=exprs,
                                  arg_check=meta.get("arg_check"))  # fmt: skip
        except SvodError as exc:
            raise PlanFileError(path, str(exc)) from None

    def _bind_vars(self, kernel: CachedKernel, bindings: Dict[str, Any], path: str,
                   f32: Iterable[str] = ()) -> Tuple[List[int], Dict[str, int], List[RuntimeVar], Dict[str, str]]:  # fmt: skip
        extra = sorted(set(bindings) - set(kernel.var_names))
        _need(not extra, path, "kernel %s has no variable(s) %s (it takes %s)" % (kernel.entry_point, extra, kernel.var_names))
        vals, fixed, runtime, exprs = [], {}, [], {}
        for name in kernel.var_names:
            if name == "core_id":
                vals.append(0)  # set per invocation by the dispatcher
                continue
            bound = bindings.get(name, name)
            if name in f32:  # a real-valued parameter (layernorm's eps): the kernel gets its float32 bits
                bits = _float32_bits(bound, "%s.%s" % (path, name))
                vals.append(bits)
                fixed[name] = bits
            elif type(bound) is int:
                _int(bound, "%s.%s" % (path, name), -(1 << 31), (1 << 31) - 1)
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
                raise PlanFileError("%s.%s" % (path, name), "bind kernel variable %r to an integer, a plan variable or an expression over plan variables (plan variables: %s)" % (name, sorted(self.variables)))
        return vals, fixed, runtime, exprs

    def _var_expr(self, text: str, path: str) -> Tuple[int, FrozenSet[str]]:
        """Evaluate an op's variable expression with the plan variables' current values."""
        try:
            expr = compile_expr(text)
        except PlanError as exc:
            raise PlanFileError(path, str(exc)) from None
        unknown = sorted(expr.names - set(self.variables))
        _need(not unknown, path, "expression %r uses %s, not plan variables %s" % (text, unknown, sorted(self.variables)))
        try:
            value = expr(self.values)
        except PlanError as exc:
            raise PlanFileError(path, str(exc)) from None
        _need(-(1 << 31) <= value < (1 << 31), path, "expression %r = %d does not fit int32" % (text, value))
        return value, expr.names

    # -- expectations -------------------------------------------------------------------------

    def _expect(self, spec: Dict[str, Any]) -> List[Expectation]:
        out = []
        for name, e in spec.items():
            path = "expect.%s" % name
            _need(name in self.buffers, path, "unknown buffer %r" % name)
            e = _obj(e, path)
            _known_keys(e, {"values", "npy", "rtol", "atol", "count"}, path)
            buf = self.buffers[name]
            if "npy" in e:
                dt, _shape, payload = self._read_npy(_str(e["npy"], path + ".npy"), path + ".npy")
                values = unpack_values(dt, payload)
            else:
                values = _flatten(_list(e.get("values"), path + ".values"), path + ".values")
            # count: only the leading elements are described (a buffer sized for a variable's maximum)
            count = _int(e["count"], path + ".count", 1, len(buf)) if "count" in e else len(buf)
            _need(len(values) == count, path, "%d expected values for %s of %d elements" % (
                len(values), "a count" if "count" in e else "a buffer", count))
            rtol = _num(e.get("rtol", 1e-5), path + ".rtol")
            atol = _num(e.get("atol", 1e-6), path + ".atol")
            out.append(Expectation(name, [v if type(v) is int else float(v) for v in values], rtol, atol))
        return out


@dataclass
class _PendingKernel:
    """A validated source kernel waiting for its object (compiled in a batch with the others)."""

    text: str
    kind: str
    flags: Tuple[str, ...]
    entry: str
    nbuf: int
    var_names: List[str]
    outputs: List[int]
    gsize: Tuple[Any, ...]
    parallel_safe: bool
    meta: Dict[str, Any]

    def load(self, device: Any, obj: bytes) -> Tuple[CachedKernel, Dict[str, Any]]:
        program = device.load(obj, self.entry, buf_count=self.nbuf, var_names=self.var_names)
        ins = [i for i in range(self.nbuf) if i not in self.outputs]
        kernel = CachedKernel(program, str(device.spec), self.text, self.entry, self.var_names, list(range(self.nbuf)),
                              self.outputs, ins, self.parallel_safe, self.gsize)
        return kernel, self.meta


@dataclass
class _PendingCuda:
    """A validated CUDA form (CUDA C or PTX) waiting for a GPU to load it on."""

    path: str
    form: str
    text: str
    entry: str
    nbuf: int
    var_names: List[str]
    outputs: List[int]
    grid: Tuple[Any, ...]
    block: Tuple[int, ...]
    shared_bytes: int
    options: Tuple[str, ...]
    meta: Dict[str, Any]

    def load(self, device: Any) -> Tuple[CachedKernel, Dict[str, Any]]:
        kwargs = dict(local_size=self.block, shared_bytes=self.shared_bytes, name=self.entry)
        if self.form in ("ptx", "ptx_file"):
            try:
                program = device.load_ptx(self.text, self.entry, self.nbuf, self.var_names, **kwargs)
            except PtxError as exc:  # svod's PTX rules, checked before the driver sees it: name the kernel
                raise PtxError("%s.%s: %s" % (self.path, self.form, exc)) from None
        else:
            try:
                program = device.compile_cuda(self.text, self.entry, self.nbuf, self.var_names, options=self.options, **kwargs)
            except NotSupportedError as exc:  # no NVRTC: say which kernel needed it
                raise NotSupportedError("%s: %s" % (self.path, exc)) from None
        ins = [i for i in range(self.nbuf) if i not in self.outputs]
        kernel = CachedKernel(program, str(device.spec), self.text, self.entry, self.var_names, list(range(self.nbuf)),
                              self.outputs, ins, True, self.grid, self.block)
        return kernel, self.meta


def _is_gpu(device: Any) -> bool:
    """Kernels on this device take GPU forms (library PTX or a kernel's ``cuda`` object)."""
    return bool(device.spec.kind == "CUDA")


def _grid_in_blocks(program: Any) -> bool:
    """``program.grid_in_blocks`` (base.Program). TODO(base.py): CpuProgram gets the slot on main; drop this probe then."""
    return bool(getattr(program, "grid_in_blocks", False))


def _missing(key: str) -> Any:
    raise PlanFileError(key, "missing (a plan file needs %s)" % key)


_INIT_CHUNK = 1 << 16  # elements packed at a time: a Python list of every element would need ~8x the buffer


def _packed_chunks(dt: DType, count: int, values: Callable[[int, int], Iterable[Any]]) -> bytes:
    """``values(lo, hi)`` for consecutive chunks of ``range(count)``, packed as ``dt``."""
    return b"".join(pack_values(dt, list(values(lo, min(lo + _INIT_CHUNK, count)))) for lo in range(0, count, _INIT_CHUNK))


def _prod(dims: Sequence[int]) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


def _flatten(values: List[Any], path: str) -> List[Any]:
    """Nested lists of numbers -> flat list, checking every element."""
    out: List[Any] = []
    for j, v in enumerate(values):
        if isinstance(v, list):
            out.extend(_flatten(v, "%s[%d]" % (path, j)))
        else:
            _need(isinstance(v, (int, float)) and not isinstance(v, bool), "%s[%d]" % (path, j), "expected a number, got %s" % _kind(v))
            out.append(v)
    return out


def _with_global_size(kernel: CachedKernel, gsize: Tuple[Any, ...]) -> CachedKernel:
    clone = copy.copy(kernel)
    clone.global_size = gsize
    return clone


def _check(buf: Any, e: Expectation) -> Tuple[str, bool, float]:
    got = buf.tolist()
    flat = _flatten(got, e.buffer) if isinstance(got, list) else [got]
    worst, ok = 0.0, True
    for g, w in zip(flat, e.values):
        # ints against ints exactly: float() would round int64 values above 2**53 together
        err = abs(g - w) if type(g) is int and type(w) is int else abs(float(g) - w)
        if not err <= e.atol + e.rtol * abs(w) or math.isnan(float(g)):
            ok = False
        worst = max(worst, float(err)) if not math.isnan(err) else float("inf")
    return e.buffer, ok, worst
