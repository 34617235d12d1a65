"""The svod_min kernel library: prebuilt and on-demand compute kernels by name.

    from svod_min import kernels
    mm = kernels.get("matmul", dtype="float32")     # LibraryKernel, ready to run
    mm.run([c, a, b], M=512, N=256, K=384)          # numpy arrays or CpuBuffers
    f = kernels.fused("relu(a*b+c)")                # compiled now (needs a C compiler)
    f(out, a, b, c) ...

Kernels come from the templates under ``templates/`` rendered by
``python -m codegen`` (see docs/kernels.md). ``get`` uses this machine's
prebuilt object (x86-64 baseline / AVX2, aarch64), which needs no compiler,
and compiles the rendered source only when no prebuilt object has the
kernel. Shapes are run-time int32 variables; dtypes and tuning parameters
pick the instance. ``run`` validates every buffer against the kernel's
declared element counts before anything executes.

Nothing here imports jinja2, and importing this package maps nothing: each
prebuilt object is loaded on first use, once per process.
"""

from __future__ import annotations

import difflib
import functools
import operator
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import variants as _variants
from ..error import KernelArgumentError, KernelNotFoundError, KernelParamError, UnsupportedDeviceError
from .elementwise import EXPR_FUNCTIONS, OPS, c_dtype, fused_entry, render_elementwise
from .sig import (
    CORE_COUNT,
    CORE_ID,
    BufferArg,
    CudaKernelSig,
    KernelSig,
    VarArg,
    compile_expr,
    cuda_sig_from_row,
    eval_dim,
    sig_from_row,
    var_value,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
GEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_generated")
PREBUILT_ENV = "SVOD_KERNELS_PREBUILT"  # "0": never use prebuilt objects


def _gen() -> Any:
    from ._generated import signatures  # lazily: generated, and large

    return signatures


# --- the kernel object ---------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LibraryKernel:
    """A ready-to-run kernel: its signature, its CpuProgram and where the code came from.

    ``program.execute(addresses, vals, global_size=(T, 1, 1))`` is the raw,
    unchecked dispatch (svod calling convention: buffers in ``buffers``
    order, then ``var_names``); :meth:`run` / :meth:`bind` check first.
    """

    sig: KernelSig
    program: Any  # svod_min.devices.cpu.CpuProgram
    prebuilt: bool  # True: code from a prebuilt object (no compiler involved)
    variant: Optional[str]  # prebuilt variant, or the ISA flags' variant it was compiled for
    fused_source: Optional[str] = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.sig.name

    @property
    def entry_point(self) -> str:
        return self.sig.entry

    @property
    def params(self) -> Dict[str, Any]:
        return self.sig.param_dict

    @property
    def buffers(self) -> List[BufferArg]:
        return list(self.sig.buffers)

    @property
    def var_names(self) -> List[str]:
        return list(self.sig.var_names)

    @property
    def global_size(self) -> Tuple[Union[int, str], ...]:
        """Launch size as ints or expressions over the variables: ``("core_id_count", 1, 1)``."""
        return self.sig.global_size

    @property
    def core_id_count(self) -> Optional[str]:
        """The variable holding the number of core ids (None: not threaded)."""
        return CORE_COUNT if self.sig.threaded else None

    @property
    def core_id_index(self) -> Optional[int]:
        """Index of ``core_id`` in ``var_names`` (for ``CpuProgram.execute(core_id_index=)``)."""
        return self.sig.var_names.index(CORE_ID) if self.sig.threaded else None

    @property
    def flops(self) -> str:
        return self.sig.flops

    @property
    def bytes(self) -> str:
        return self.sig.bytes

    @property
    def source(self) -> str:
        """The C translation unit of this kernel (what a compile would use)."""
        if self.fused_source is not None:
            return self.fused_source
        from .sources import kernel_source

        return kernel_source(self.sig.family, self.sig.entry)

    def __repr__(self) -> str:
        origin = "prebuilt %s" % self.variant if self.prebuilt else "compiled"
        return "<LibraryKernel %s %s %s (%s)>" % (self.name, self.params, self.entry_point, origin)

    # --- arguments ---

    def launch(self, *, threads: Optional[int] = None, **values: Any) -> Tuple[List[int], Tuple[int, int, int]]:
        """Checked ``(vals, global_size)`` for ``program.execute`` / plan nodes (buffers not checked)."""
        env = _check_vars(self.sig, values)
        n = self.threads_for(env, threads)
        if self.sig.threaded:
            env[CORE_COUNT], env[CORE_ID] = n, 0
        vals = [env[v] for v in self.sig.var_names]
        return vals, tuple(eval_dim(d, env) for d in self.sig.global_size)  # type: ignore[return-value]

    def threads_for(self, env: Mapping[str, int], threads: Optional[int] = None) -> int:
        """Core ids to use: ``threads`` or automatic (device threads, work / grain, parallelism)."""
        if not self.sig.threaded:
            return 1
        limit = max(1, compile_expr(self.sig.parallelism)(env))
        if threads is not None:
            count = None if isinstance(threads, bool) else getattr(threads, "__index__", lambda: None)()
            if count is None or count < 1:  # numpy integers are ints here too, as for variables
                raise KernelArgumentError("threads must be a positive int, got %r" % (threads,))
            return min(count, limit)
        device = getattr(self.program, "device", None)
        avail = device.threads if device is not None else 1
        by_work = -(-compile_expr(self.sig.work)(env) // self.sig.grain)
        return max(1, min(avail, by_work, limit))

    def counts(self, **values: Any) -> Dict[str, int]:
        """Element count each buffer needs for these variables."""
        env = _check_vars(self.sig, values)
        return {b.name: compile_expr(b.count)(env) for b in self.sig.buffers}

    # --- dispatch ---

    def bind(self, buffers: Union[Sequence[Any], Mapping[str, Any]], *, threads: Optional[int] = None,
             **values: Any) -> Callable[[], None]:
        """Validate once; a zero-argument callable that dispatches (keeps the buffers alive)."""
        vals, gsize = self.launch(threads=threads, **values)
        env = dict(zip(self.sig.var_names, vals))
        addrs = _check_buffers(self.sig, buffers, env)
        call = self.program.bind(addrs, vals, global_size=gsize if gsize[0] > 1 else None,
                                 core_id_index=self.core_id_index)  # fmt: skip
        keep = buffers
        return functools.partial(_call_keeping, call, keep)

    def run(self, buffers: Union[Sequence[Any], Mapping[str, Any]], *, threads: Optional[int] = None,
            **values: Any) -> None:
        """Check buffers (dtype, size, writability, overlap) and variables, then run."""
        self.bind(buffers, threads=threads, **values)()

    __call__ = run


def _call_keeping(call: Callable[[], None], _buffers: Any) -> None:
    call()


# --- argument checks -------------------------------------------------------------------------


def _check_vars(sig: KernelSig, values: Mapping[str, Any]) -> Dict[str, int]:
    auto = {CORE_ID, CORE_COUNT} if sig.threaded else set()
    given = dict(values)
    if CORE_COUNT in given and sig.threaded:
        raise KernelArgumentError("%s: pass threads=..., not %s" % (sig.name, CORE_COUNT))
    unknown = sorted(set(given) - set(sig.var_names))
    if unknown or (auto & set(given)):
        raise KernelArgumentError("%s takes variables %s, got unexpected %s"
                                  % (sig.name, [v for v in sig.var_names if v not in auto],
                                     unknown or sorted(auto & set(given))))  # fmt: skip
    missing = [v.name for v in sig.vars if v.name not in given and v.name not in auto]
    if missing:
        raise KernelArgumentError("%s needs variables %s (missing %s)"
                                  % (sig.name, [v for v in sig.var_names if v not in auto], missing))  # fmt: skip
    env: Dict[str, int] = {}
    for var in sig.vars:
        if var.name in auto:
            continue
        try:
            value = var_value(var, given[var.name])
        except KernelParamError as exc:
            raise KernelArgumentError(str(exc)) from None
        low = max(var.min, INT32_MIN)
        if not low <= value <= INT32_MAX:
            raise KernelArgumentError("%s: variable %s=%r is outside [%d, %d]" % (sig.name, var.name, value, low,
                                                                                   INT32_MAX))  # fmt: skip
        env[var.name] = value
    for check in sig.checks:
        if not compile_expr(check)(env):
            raise KernelArgumentError("%s: variables %s violate %s" % (sig.name, env, check))
    return env


#: dtype -> names a buffer may have (numpy has no bfloat16: its bits travel as uint16)
_ACCEPT = {"bfloat16": ("bfloat16", "uint16"), "bool": ("bool", "uint8")}


def _np_dtype_ok(want: str, have: str) -> bool:
    return have == want or have in _ACCEPT.get(want, ())


def _describe(buf: Any) -> Tuple[int, int, str, bool]:
    """(address, capacity in bytes, dtype name, writable) of a numpy array or CpuBuffer."""
    iface = getattr(buf, "__array_interface__", None)
    if iface is not None and hasattr(buf, "flags"):
        flags = buf.flags
        if not flags.c_contiguous:
            raise KernelArgumentError("numpy arrays passed to kernels must be C-contiguous (use np.ascontiguousarray)")
        dt = buf.dtype
        if not dt.isnative:
            raise KernelArgumentError("array of dtype %s is not in native byte order" % dt.str)
        return iface["data"][0], buf.nbytes, _CHAR_NAMES.get(dt.char) or dt.name, bool(flags.writeable)
    if hasattr(buf, "address") and hasattr(buf, "nbytes") and hasattr(buf, "dtype"):
        return int(buf.address), int(buf.nbytes), getattr(buf.dtype, "name", str(buf.dtype)), True
    if isinstance(buf, int):
        raise KernelArgumentError("raw addresses cannot be size-checked; pass numpy arrays or CpuBuffers "
                                  "(or use kernel.program.execute for unchecked dispatch)")  # fmt: skip
    raise KernelArgumentError("cannot pass %s to a kernel (numpy array or CpuBuffer expected)" % type(buf).__name__)


_CHAR_NAMES = {"f": "float32", "d": "float64", "e": "float16", "i": "int32", "?": "bool", "B": "uint8", "H": "uint16"}


def _ordered(sig: KernelSig, buffers: Union[Sequence[Any], Mapping[str, Any]]) -> List[Any]:
    names = [b.name for b in sig.buffers]
    if isinstance(buffers, Mapping):
        extra, missing = sorted(set(buffers) - set(names)), [n for n in names if n not in buffers]
        if extra or missing:
            raise KernelArgumentError("%s takes buffers %s (missing %s, unexpected %s)" % (sig.name, names, missing,
                                                                                            extra))  # fmt: skip
        return [buffers[n] for n in names]
    seq = list(buffers)
    if len(seq) != len(names):
        raise KernelArgumentError("%s takes %d buffers %s, got %d" % (sig.name, len(names), names, len(seq)))
    return seq


def _check_buffers(sig: KernelSig, buffers: Union[Sequence[Any], Mapping[str, Any]],
                   env: Mapping[str, int]) -> List[int]:
    spans = []
    for arg, buf in zip(sig.buffers, _ordered(sig, buffers)):
        addr, nbytes, dname, writable = _describe(buf)
        want = c_dtype(arg.dtype)
        if not _np_dtype_ok(arg.dtype, dname):
            raise KernelArgumentError("%s: buffer %s must be %s, got %s" % (sig.name, arg.name, arg.dtype, dname))
        need = compile_expr(arg.count)(env)
        have = nbytes // want.itemsize
        if need > have:
            raise KernelArgumentError("%s: buffer %s holds %d %s elements but %s = %d is needed for %s"
                                      % (sig.name, arg.name, have, arg.dtype, arg.count, need, dict(env)))  # fmt: skip
        if arg.writes and not writable:
            raise KernelArgumentError("%s: buffer %s is written but the array is read-only" % (sig.name, arg.name))
        spans.append((arg, addr, max(need, 0) * want.itemsize))
    _check_overlap(sig.name, sig.inplace, spans)
    return [addr for _, addr, _ in spans]


def check_bound_args(sig: Any, env: Mapping[str, int], buffers: Sequence[Any]) -> None:
    """The library's argument checks for values and buffers a plan already bound (sizes: its extents).

    Variable minimums and conditions, buffer dtypes, and overlap between a
    written buffer and another argument: what :meth:`LibraryKernel.run`
    refuses, re-checked whenever a plan's variables change. ``sig`` is a
    :class:`KernelSig` or :class:`CudaKernelSig`; a CUDA signature uses the
    conditions and in-place pairs of its CPU twin when there is one.
    """
    twin = sig if isinstance(sig, KernelSig) else _sig((sig.name, sig.params))
    checks, inplace = (twin.checks, twin.inplace) if twin is not None else ((), ())
    for var in sig.vars:
        value = env.get(var.name)
        if var.name != CORE_ID and value is not None and value < var.min:
            raise KernelArgumentError("%s: variable %s=%d is below its minimum %d" % (sig.name, var.name, value, var.min))
    for check in checks:
        if not compile_expr(check)(env):
            raise KernelArgumentError("%s: variables %s violate %s" % (sig.name, dict(env), check))
    spans = []
    for arg, buf in zip(sig.buffers, buffers):
        addr, _nbytes, dname, _writable = _describe(buf)
        if not _np_dtype_ok(arg.dtype, dname):
            raise KernelArgumentError("%s: buffer %s must be %s, got %s" % (sig.name, arg.name, arg.dtype, dname))
        count = compile_expr(arg.count)(env) if arg.count is not None else 0
        spans.append((arg, addr, max(count, 0) * c_dtype(arg.dtype).itemsize))
    _check_overlap(sig.name, inplace, spans)


def _check_overlap(name: str, inplace: Sequence[Tuple[str, str]], spans: List[Tuple[BufferArg, int, int]]) -> None:
    # A written buffer sharing memory with another argument is refused, except an
    # elementwise output that is exactly one of its inputs (same start, same dtype).
    allowed = set(inplace)
    for i, (a, a0, an) in enumerate(spans):
        for b, b0, bn in spans[i + 1:]:
            if not (a.writes or b.writes) or an == 0 or bn == 0 or a0 + an <= b0 or b0 + bn <= a0:
                continue
            if a0 == b0 and an == bn and ((a.name, b.name) in allowed or (b.name, a.name) in allowed):
                continue
            raise KernelArgumentError("%s: buffers %s and %s overlap in memory (%s is written)"
                                      % (name, a.name, b.name, a.name if a.writes else b.name))  # fmt: skip


# --- lookup -------------------------------------------------------------------------------------

_cache_lock = threading.RLock()
_kernels: Dict[Tuple[Any, ...], LibraryKernel] = {}
_key_locks: Dict[Tuple[Any, ...], threading.Lock] = {}
_sig_index: Dict[Tuple[str, Tuple[Tuple[str, Any], ...]], Any] = {}  # -> row, then KernelSig


def _index() -> Dict[Tuple[str, Tuple[Tuple[str, Any], ...]], Any]:
    with _cache_lock:
        if not _sig_index:
            _sig_index.update(((r["name"], r["params"]), r) for r in _gen().KERNELS)
        return _sig_index


def _sig(key: Tuple[str, Tuple[Tuple[str, Any], ...]]) -> Optional[KernelSig]:
    index = _index()
    found = index.get(key)
    if found is None or isinstance(found, KernelSig):
        return found
    with _cache_lock:
        sig = index[key] = sig_from_row(found)
        return sig


def catalogue() -> Dict[str, Dict[str, Any]]:
    """Kernel name -> family, params (default, allowed), doc, tolerance and every instance's params."""
    out: Dict[str, Dict[str, Any]] = {}
    for name, info in _gen().CATALOGUE.items():
        entry = dict(info, params={k: dict(v) for k, v in info["params"].items()})
        entry["instances"] = [dict(p) for (n, p) in _index() if n == name]
        out[name] = entry
    return out


def names() -> List[str]:
    return sorted(_gen().CATALOGUE)


def _device(device: Any) -> Any:
    from ..device_spec import DeviceSpec

    if not isinstance(device, (str, DeviceSpec)):
        if hasattr(device, "compile") and hasattr(device, "threads"):
            return device  # a CpuDevice instance
        raise KernelParamError("device must be a device string, DeviceSpec or CpuDevice, got %r" % (device,))
    spec = device if isinstance(device, DeviceSpec) else DeviceSpec.parse(device)
    if spec.kind == "CUDA":
        raise UnsupportedDeviceError(
            "kernels.get() returns CPU kernels; for %s use svod_min.devices.cuda: "
            "DEVICE_FACTORIES.device(%r).library_kernel(name, dtype=...) (shipped PTX, cuda_kernels() lists them), "
            "or a plan file's library kernels with --device CUDA" % (spec, str(spec)))
    if spec.kind != "CPU":
        raise UnsupportedDeviceError("the kernel library supports CPU (and later CUDA), not %s" % spec)
    from ..devices.cpu import create_cpu_device

    return create_cpu_device()


def _normalise(name: str, params: Mapping[str, Any], variant: Optional[str]) -> Tuple[Tuple[str, Any], ...]:
    info = _gen().CATALOGUE[name]
    unknown = sorted(set(params) - set(info["params"]))
    if unknown:
        raise KernelParamError("%s has no parameter %s (parameters: %s)" % (name, unknown, sorted(info["params"])))
    chosen = {k: p["default"] for k, p in info["params"].items()}
    for k in ("dtype", "out_dtype"):
        if k in params:
            chosen[k] = c_dtype(params[k]).name
    pref = _gen().PREFERRED.get(variant or "", {}).get(name, {}).get(chosen.get("dtype"), {})
    chosen.update((k, v) for k, v in pref.items() if k not in params)
    chosen.update((k, v) for k, v in params.items() if k not in ("dtype", "out_dtype"))
    for k, v in list(chosen.items()):
        allowed = info["params"][k]["allowed"]
        v = chosen[k] = _same_kind(v, allowed[0])
        if v not in allowed or type(v) is not type(allowed[0]):
            raise KernelParamError("%s: %s=%r is not supported (allowed: %s)" % (name, k, v, list(allowed)))
    return tuple(sorted(chosen.items()))


def _same_kind(value: Any, like: Any) -> Any:
    """numpy ints / bools as Python ones (so mr=np.int64(6) works); anything else unchanged."""
    if isinstance(like, bool):
        return bool(value) if type(value).__name__ in ("bool", "bool_") else value
    if isinstance(like, int) and not isinstance(value, (bool, float)) and hasattr(value, "__index__"):
        return int(value.__index__())
    return value


def find_sig(name: str, variant: Optional[str] = None, **params: Any) -> KernelSig:
    """The signature ``get`` would use (no code is loaded)."""
    if not isinstance(name, str) or name not in _gen().CATALOGUE:
        close = difflib.get_close_matches(str(name), names(), n=3)
        hint = " (did you mean %s?)" % ", ".join(close) if close else ""
        raise KernelNotFoundError("no kernel %r in the library%s; kernels: %s" % (name, hint, ", ".join(names())))
    key = (name, _normalise(name, params, variant))
    sig = _sig(key)
    if sig is None:
        allowed = [dict(p) for (n, p) in _index() if n == name]
        raise KernelParamError("%s has no instance for %s; instances: %s" % (name, dict(key[1]), allowed))
    return sig


def _use_prebuilt(prebuilt: Optional[bool]) -> bool:
    if prebuilt is not None:
        return prebuilt
    return os.environ.get(PREBUILT_ENV, "1").strip().lower() not in ("0", "no", "false", "off")


def get(name: str, *, device: Any = "CPU", prebuilt: Optional[bool] = None,
        shape: Optional[Mapping[str, Any]] = None, **params: Any) -> LibraryKernel:
    """The library kernel ``name`` for ``params`` (dtype, tuning), ready to run on ``device``.

    ``prebuilt``: None (default) uses this host's prebuilt object when it has
    the kernel and compiles the rendered source otherwise; True requires the
    prebuilt object; False always compiles (needs a C compiler). ``shape``
    (the variables, e.g. ``{"M": 256, "N": 256, "K": 256}``): use the tuning
    params ``python -m svod_min tune`` stored for it, unless ``params`` name any.
    """
    if "variant" in params:
        raise KernelParamError("%s: the prebuilt variant is chosen for this host (host_variant()); it is not a parameter"
                               % (name,))  # fmt: skip
    dev = _device(device)
    variant = _variants.choose_variant()
    if shape is not None:  # autotuned params for this shape, when stored (svod_min.autotune)
        from ..autotune import tuned_params

        params = tuned_params(name, params, shape, prebuilt, variant)
    sig = find_sig(name, variant, **params)
    use = _use_prebuilt(prebuilt) and variant is not None and _variants.has_entry(variant, sig.entry)
    if prebuilt and not use:
        why = "no prebuilt object fits this host" if variant is None else "%s does not contain it" % variant
        raise KernelParamError("%s %s: prebuilt=True but %s" % (name, dict(sig.params), why))
    key = (sig.entry, sig.params, id(dev), variant if use else None, use)
    return _memo(key, lambda: _make(sig, dev, variant, use))


def _alive(kernel: LibraryKernel) -> bool:
    # A caller may close() a program (a plan tearing down): hand out a fresh one then.
    # CpuProgram.close() drops its function (the shared library mapping stays).
    return getattr(kernel.program, "_fn", None) is not None


def _memo(key: Tuple[Any, ...], make: Callable[[], LibraryKernel]) -> LibraryKernel:
    """One LibraryKernel per key; concurrent first calls build it once, other keys are not blocked."""
    with _cache_lock:
        found = _kernels.get(key)
        if found is not None and _alive(found):
            return found
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:  # a compile holds only its own key's lock
        with _cache_lock:
            found = _kernels.get(key)
        if found is None or not _alive(found):
            found = make()
            with _cache_lock:
                _kernels[key] = found
        return found


def _make(sig: KernelSig, dev: Any, variant: Optional[str], use_prebuilt: bool) -> LibraryKernel:
    from ..devices.cpu import CpuProgram

    if use_prebuilt:
        assert variant is not None
        shared = _variants.load_variant(variant)
        prog = CpuProgram(shared, sig.entry, buf_count=len(sig.buffers), var_names=sig.var_names, device=dev,
                          name=sig.name)  # fmt: skip
        return LibraryKernel(sig, prog, True, variant)
    from .sources import kernel_source

    return LibraryKernel(sig, _compile(dev, kernel_source(sig.family, sig.entry), sig, variant), False, variant)


def _compile(dev: Any, source: str, sig: KernelSig, variant: Optional[str]) -> Any:
    """C source -> CpuProgram via the object cache (always C: SVOD_CPU_BACKEND=llvm is for IR plans)."""
    from ..kernel_cache import compile_cached

    obj = compile_cached(source, kind="c", extra_flags=tuple(_variants.compile_flags(variant)))
    return dev.load(obj, sig.entry, buf_count=len(sig.buffers), var_names=sig.var_names)


# --- fused elementwise kernels (rendered and compiled at run time) -------------------------------


def fused(expr: str, *, dtype: Any = "float32", out_dtype: Any = None, input_dtypes: Optional[Mapping[str, Any]] = None,
          inputs: Optional[Sequence[str]] = None, device: Any = "CPU") -> LibraryKernel:
    """One kernel for an elementwise expression, e.g. ``fused("relu(a*b+c)")``: one pass over memory.

    Buffers: ``out`` then the inputs (``inputs`` order, default first
    appearance); variable ``n``. Rendered here in pure Python from the same
    skeleton and op table as the library, then compiled with the system C
    compiler (CompilerNotFoundError when there is none) and cached.
    """
    dev = _device(device)
    if input_dtypes is not None and not isinstance(input_dtypes, Mapping):
        raise KernelParamError("input_dtypes must map input names to dtypes, got %s" % type(input_dtypes).__name__)
    if inputs is not None and (isinstance(inputs, str) or not isinstance(inputs, Sequence)
                               or not all(isinstance(n, str) for n in inputs)):  # fmt: skip
        raise KernelParamError("inputs must be a sequence of input names, got %r" % (inputs,))
    idt = {k: c_dtype(v).name for k, v in (input_dtypes or {}).items()}
    order = tuple(inputs) if inputs is not None else None
    entry = fused_entry(expr, dtype, out_dtype, idt, order)
    variant = _variants.choose_variant()

    def make() -> LibraryKernel:
        from .sig import elementwise_sig
        from .sources import prelude

        kern = render_elementwise(entry, expr, dtype=dtype, out_dtype=out_dtype, input_dtypes=idt, inputs=order)
        sig = elementwise_sig("fused", {"expr": kern.expr, "dtype": kern.compute.name}, entry, expr, dtype=dtype,
                              out_dtype=out_dtype, input_dtypes=idt, inputs=order,
                              doc="fused: %s" % kern.expr)  # fmt: skip
        source = prelude() + "\n" + kern.function
        return LibraryKernel(sig, _compile(dev, source, sig, variant), False, variant, fused_source=source)

    return _memo(("fused", entry, id(dev), variant), make)


# --- view helpers ----------------------------------------------------------------------------------


def _collapse(shape: Sequence[int], strides: Sequence[int], what: str) -> Tuple[int, int]:
    """One (size, stride) for consecutive dims, or KernelParamError when they do not form one stride."""
    size, stride = 1, 0
    for n, s in zip(reversed(list(shape)), reversed(list(strides))):
        if n == 1:
            continue
        if size == 1:
            size, stride = n, s
        elif s == stride * size:
            size *= n
        else:
            raise KernelParamError("the %s dimensions %s (strides %s) do not collapse into one strided axis"
                                   % (what, list(shape), list(strides)))  # fmt: skip
    return size, stride


def reduce_vars(shape: Sequence[int], strides: Sequence[int], axis: int) -> Dict[str, int]:
    """Variables of ``reduce_*`` for reducing ``axis`` of a view (``strides`` in elements, not bytes)."""
    shape, strides = _ints(shape, "shape"), _ints(strides, "strides")
    nd = len(shape)
    axis = _ints([axis], "axis")[0]
    if len(strides) != nd or not -nd <= axis < nd:
        raise KernelParamError("bad view: shape %s, strides %s, axis %r" % (shape, strides, axis))
    axis %= nd
    outer, so = _collapse(shape[:axis], strides[:axis], "leading")
    inner, si = _collapse(shape[axis + 1:], strides[axis + 1:], "trailing")
    return {"outer": outer, "red": int(shape[axis]), "inner": inner, "so": so, "sr": int(strides[axis]), "si": si}


def permute_vars(shape: Sequence[int], strides: Sequence[int]) -> Dict[str, int]:
    """Variables of ``permute`` that copy a view (rank <= 4, element strides >= 0) into contiguous memory."""
    shape, strides = _ints(shape, "shape"), _ints(strides, "strides")
    if len(shape) > 4 or len(strides) != len(shape):
        raise KernelParamError("permute copies views of rank <= 4 (got shape %s, strides %s)"
                               % (list(shape), list(strides)))  # fmt: skip
    pad = 4 - len(shape)
    dims = [1] * pad + [int(d) for d in shape]
    steps = [0] * pad + [int(s) for s in strides]
    out = {"e%d" % i: d for i, d in enumerate(dims)}
    out.update({"t%d" % i: s for i, s in enumerate(steps)})
    return out


def _ints(values: Any, what: str) -> List[int]:
    """A view's shape or strides as plain ints (numpy integers welcome)."""
    try:
        out = [operator.index(v) for v in values]
    except TypeError:
        raise KernelParamError("%s must be a sequence of integers, got %r" % (what, values)) from None
    return out


# --- CUDA (PTX only, for now) ---------------------------------------------------------------------


def cuda_kernels() -> List[CudaKernelSig]:
    """Signatures of the CUDA kernels (launch dims are expressions of their variables)."""
    return [cuda_sig_from_row(r) for r in _gen().CUDA_KERNELS]


def ptx_path(module: str) -> str:
    """Path of a generated PTX module (``elementwise``, ``reduce``, ``softmax``, ``transpose``, ``matmul``)."""
    if not isinstance(module, str) or not module.isidentifier():
        raise KernelNotFoundError("no PTX module %r (module names are identifiers)" % (module,))
    path = os.path.join(GEN_DIR, "cuda", module + ".ptx")
    if not os.path.exists(path):
        raise KernelNotFoundError("no PTX module %r (%s)" % (module, path))
    return path


def host_variant() -> Optional[str]:
    """The prebuilt variant ``get`` uses on this host (None: kernels are compiled)."""
    return _variants.choose_variant()


__all__ = [
    "BufferArg",
    "CudaKernelSig",
    "EXPR_FUNCTIONS",
    "KernelArgumentError",
    "KernelNotFoundError",
    "KernelParamError",
    "KernelSig",
    "LibraryKernel",
    "OPS",
    "VarArg",
    "catalogue",
    "check_bound_args",
    "cuda_kernels",
    "find_sig",
    "fused",
    "get",
    "host_variant",
    "names",
    "permute_vars",
    "ptx_path",
    "reduce_vars",
]
