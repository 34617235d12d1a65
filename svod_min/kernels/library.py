"""The library's front: :func:`get` a ready-to-run :class:`LibraryKernel`, :func:`fused` kernels.

``get`` resolves the signature (:mod:`.lookup`; stored tuning params for a
``shape``: :mod:`.tuning`), loads this host's prebuilt object or compiles the
rendered source, and hands out one kernel object per instance and device.
:meth:`LibraryKernel.run` / :meth:`~LibraryKernel.bind` check arguments
(:mod:`.checks`) before dispatching.
"""

from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .. import expr as size_expr
from ..cache import kernel_cache
from ..devices.base import MAPPED_OBJECT, OBJECT, PTX, ProgramSource
from ..devices.registry import DEVICE_FACTORIES
from ..devices.spec import DeviceSpec, as_spec
from ..error import KernelArgumentError, KernelParamError, NotSupportedError, UnsupportedDeviceError
from . import variants
from .checks import check_buffers, check_vars
from .cuda_library import find_cuda_sig, library_source
from .elementwise import c_dtype, fused_entry, render_elementwise
from .lookup import find_sig, use_prebuilt
from .sig import CORE_COUNT, CORE_ID, BufferArg, KernelSig, compile_expr, elementwise_sig, eval_dim
from .sources import kernel_source, prelude

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
        return kernel_source(self.sig.family, self.sig.entry)

    def __repr__(self) -> str:
        origin = "prebuilt %s" % self.variant if self.prebuilt else "compiled"
        return "<LibraryKernel %s %s %s (%s)>" % (self.name, self.params, self.entry_point, origin)

    # --- arguments ---

    def launch(self, *, threads: Optional[int] = None, **values: Any) -> Tuple[List[int], Tuple[int, int, int]]:
        """Checked ``(vals, global_size)`` for ``program.execute`` / plan nodes (buffers not checked)."""
        vals, gsize, _threads = self._launch(threads, values)
        return vals, gsize

    def _launch(self, threads: Optional[int], values: Mapping[str, Any]) -> Tuple[List[int], Tuple[int, int, int], int]:
        """``(vals, global_size, threads)``: the core ids in ``vals`` may outnumber the threads."""
        env = check_vars(self.sig, values)
        n = self.threads_for(env, threads)
        if self.sig.threaded:
            env[CORE_COUNT], env[CORE_ID] = self.core_ids_for(env, n), 0
        vals = [env[v] for v in self.sig.var_names]
        return vals, tuple(eval_dim(d, env) for d in self.sig.global_size), n  # type: ignore[return-value]

    def threads_for(self, env: Mapping[str, int], threads: Optional[int] = None) -> int:
        """Threads to use: ``threads`` or automatic (device threads, work / grain, parallelism)."""
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
        return max(1, min(avail, self._grains(env), limit))

    def core_ids_for(self, env: Mapping[str, int], threads: int) -> int:
        """Core ids for ``threads`` threads: ``ids_per_thread`` each, a grain of work or more per id."""
        if threads <= 1:
            return 1
        limit = max(1, compile_expr(self.sig.parallelism)(env))
        return max(threads, min(threads * self.sig.ids_per_thread, self._grains(env), limit))

    def _grains(self, env: Mapping[str, int]) -> int:
        return -(-compile_expr(self.sig.work)(env) // self.sig.grain)

    def counts(self, **values: Any) -> Dict[str, int]:
        """Element count each buffer needs for these variables."""
        env = check_vars(self.sig, values)
        return {b.name: compile_expr(b.count)(env) for b in self.sig.buffers}

    # --- dispatch ---

    def bind(
        self, buffers: Union[Sequence[Any], Mapping[str, Any]], *, threads: Optional[int] = None, **values: Any
    ) -> Callable[[], None]:
        """Validate once; a zero-argument callable that dispatches (keeps the buffers alive)."""
        vals, gsize, nthreads = self._launch(threads, values)
        env = dict(zip(self.sig.var_names, vals))
        addrs = check_buffers(self.sig, buffers, env)
        call = self.program.bind(
            addrs, vals, global_size=gsize if gsize[0] > 1 else None, core_id_index=self.core_id_index, threads=nthreads
        )
        keep = buffers
        return functools.partial(_call_keeping, call, keep)

    def run(
        self, buffers: Union[Sequence[Any], Mapping[str, Any]], *, threads: Optional[int] = None, **values: Any
    ) -> None:
        """Check buffers (dtype, size, writability, overlap) and variables, then run."""
        self.bind(buffers, threads=threads, **values)()

    __call__ = run


def _call_keeping(call: Callable[[], None], _buffers: Any) -> None:
    call()


# --- loading ----------------------------------------------------------------------------------

_cache_lock = threading.RLock()
#: key -> (the device it was loaded on, weakly; the kernel). The device is checked on a hit because the key
#: holds id(device), and a device that dies leaves its id to the next one.
_kernels: Dict[Tuple[Any, ...], Tuple[Callable[[], Any], LibraryKernel]] = {}
_key_locks: Dict[Tuple[Any, ...], threading.Lock] = {}


#: The forms the library ships its kernels in: host objects (compiled from the rendered C; a device
#: that also loads MAPPED_OBJECT gets the prebuilt library, mapped once per process) and PTX.
LIBRARY_FORMS = (OBJECT, PTX)

_GPU_HINT = (
    "the library's GPU kernels are shipped PTX: kernels.cuda_library_kernel(device, name, dtype=...) loads them "
    "on a device that loads PTX (cuda_kernels() lists them), and a plan file's library kernels use them there "
    "(--device CUDA)"
)


def library_form(device: Any) -> Optional[str]:
    """The first of ``device``'s program forms the library ships kernels in: OBJECT (:func:`get`), PTX
    (:func:`~svod_min.kernels.cuda_library_kernel`), or None (no library kernel loads there)."""
    for form in device.program_forms:
        if form in LIBRARY_FORMS:
            return form
    return None


def resolve_device(device: Any) -> Any:
    """The device a host kernel runs on: a device string or DeviceSpec (through the device registry), or a
    device that loads host objects; a device that loads only PTX (a GPU) is refused with the way to its kernels."""
    if isinstance(device, (str, DeviceSpec)):
        spec = as_spec(device)
        try:
            device = DEVICE_FACTORIES.device(spec)
        except UnsupportedDeviceError as exc:
            raise UnsupportedDeviceError(
                "kernels.get() returns CPU kernels (host objects); %s; %s" % (exc, _GPU_HINT)
            ) from None
    try:
        forms = device.program_forms
    except AttributeError:  # not a device at all: a number, a buffer...
        raise KernelParamError(
            "device must be a device string, DeviceSpec or a device (CpuDevice...), got %r" % (device,)
        ) from None
    if OBJECT not in forms:
        raise UnsupportedDeviceError(
            "kernels.get() returns CPU kernels (host objects); %s loads %s programs; %s"
            % (device.spec, ", ".join(forms), _GPU_HINT)
        )
    return device


def get(
    name: str,
    *,
    device: Any = "CPU",
    prebuilt: Optional[bool] = None,
    shape: Optional[Mapping[str, Any]] = None,
    **params: Any,
) -> LibraryKernel:
    """The library kernel ``name`` for ``params`` (dtype, tuning), ready to run on ``device``.

    ``prebuilt``: None (default) uses this host's prebuilt object when it has
    the kernel and compiles the rendered source otherwise; True requires the
    prebuilt object; False always compiles (needs a C compiler). ``shape``
    (the variables, e.g. ``{"M": 256, "N": 256, "K": 256}``): use the tuning
    params ``python -m svod_min tune`` stored for it, unless ``params`` name any.
    """
    if "variant" in params:
        raise KernelParamError(
            "%s: the prebuilt variant is chosen for this host (host_variant()); it is not a parameter" % (name,)
        )
    dev = resolve_device(device)
    variant = variants.choose_variant()
    if shape is not None:  # autotuned params for this shape, when stored (svod_min.perf.autotune)
        from .tuning import tuned_params  # here: the tuning store brings the compiler driver, a plan needs neither

        params = tuned_params(name, params, shape, prebuilt, variant)
    sig = find_sig(name, variant, **params)
    use = (
        use_prebuilt(prebuilt)
        and variant is not None
        and variants.has_entry(variant, sig.entry)
        and MAPPED_OBJECT in dev.program_forms
    )
    if prebuilt and not use:
        why = _no_prebuilt(dev, variant)
        raise KernelParamError("%s %s: prebuilt=True but %s" % (name, dict(sig.params), why))
    key = (sig.entry, sig.params, id(dev), variant if use else None, use)
    return _memo(key, dev, lambda: _make(sig, dev, variant, use))


def _no_prebuilt(dev: Any, variant: Optional[str]) -> str:
    if MAPPED_OBJECT not in dev.program_forms:
        return "%s does not load mapped objects" % dev.spec
    return "no prebuilt object fits this host" if variant is None else "%s does not contain it" % variant


def _alive(kernel: LibraryKernel) -> bool:
    # A caller may close() a program (a plan tearing down): hand out a fresh one then.
    # Closing a prebuilt kernel's program keeps the shared library mapping.
    return not kernel.program.closed


def _memo(key: Tuple[Any, ...], dev: Any, make: Callable[[], LibraryKernel]) -> LibraryKernel:
    """One LibraryKernel per key and live device; concurrent first calls build it once, other keys are not blocked."""

    def lookup() -> Optional[LibraryKernel]:
        with _cache_lock:
            entry = _kernels.get(key)
        if entry is None or entry[0]() is not dev or not _alive(entry[1]):
            return None
        return entry[1]

    found = lookup()
    if found is not None:
        return found
    with _cache_lock:
        lock = _key_locks.setdefault(key, threading.Lock())
    with lock:  # a compile holds only its own key's lock
        found = lookup()
        if found is None:
            found = make()
            with _cache_lock:
                _kernels[key] = (weakref.ref(dev), found)
        return found


def _make(sig: KernelSig, dev: Any, variant: Optional[str], prebuilt: bool) -> LibraryKernel:
    if prebuilt:
        assert variant is not None
        source = ProgramSource(
            MAPPED_OBJECT, variants.load_variant(variant), sig.entry, len(sig.buffers), sig.var_names, name=sig.name
        )
        return LibraryKernel(sig, dev.load_program(source), True, variant)
    return LibraryKernel(sig, _compile(dev, kernel_source(sig.family, sig.entry), sig, variant), False, variant)


def _compile(dev: Any, source: str, sig: KernelSig, variant: Optional[str]) -> Any:
    """C source -> a program via the object cache (always C: SVOD_CPU_BACKEND=llvm is for IR plans)."""
    obj = kernel_cache.compile_cached(source, kind="c", extra_flags=tuple(variants.compile_flags(variant)))
    return dev.load_program(ProgramSource(OBJECT, obj, sig.entry, len(sig.buffers), sig.var_names))


# --- a library kernel in the form a device loads -------------------------------------------------


@dataclass(frozen=True)
class DeviceKernel:
    """A library kernel loaded on a device in the form the device takes: what a plan binds and checks."""

    program: Any
    #: ``KernelSig`` (host objects) or ``CudaKernelSig`` (PTX): buffers with roles and counts, variables, work.
    sig: Any
    #: Makes the C translation unit ("" for PTX) when asked: cutting it from its family file costs more
    #: than the rest of a load of the kernel, and a plan rarely reads it.
    source_of: Callable[[], str] = field(repr=False)
    #: Launch size: ints or expression texts over the variables (blocks when ``local_size`` is set).
    global_size: Tuple[Any, ...]
    #: The block (PTX); None for host objects.
    local_size: Optional[Tuple[int, ...]]

    @property
    def source(self) -> str:
        """The C translation unit ("" for PTX)."""
        return self.source_of()


def device_kernel(device: Any, name: str, **params: Any) -> DeviceKernel:
    """Library kernel ``name`` for ``params`` on ``device``, in the first library form the device lists:
    a host object (:func:`get`) or the shipped PTX (:func:`~svod_min.kernels.cuda_library_kernel`)."""
    form = library_form(device)
    if form == OBJECT:
        lib = get(name, device=device, **params)
        return DeviceKernel(lib.program, lib.sig, lambda: lib.source, tuple(lib.global_size), None)
    if form == PTX:
        sig = find_cuda_sig(name, **params)
        grid = tuple(d if type(d) is int else size_expr.compile_expr(str(d)).text for d in sig.grid)
        return DeviceKernel(device.load_program(library_source(sig)), sig, lambda: "", grid, tuple(sig.block))
    raise NotSupportedError(
        "library kernel %r: %s loads %s programs, and the library ships %s"
        % (name, device.spec, ", ".join(device.program_forms), ", ".join(LIBRARY_FORMS))
    )


def object_kernel(device: Any, sig: KernelSig, obj: bytes, variant: Optional[str], digest: str) -> DeviceKernel:
    """Library instance ``sig`` from an object compiled elsewhere (a bundle carries it for ``variant``):
    nothing is compiled here. ``digest`` (the object's sha256) keys the memo."""
    dev = resolve_device(device)

    def make() -> LibraryKernel:
        source = ProgramSource(OBJECT, obj, sig.entry, len(sig.buffers), sig.var_names, name=sig.name)
        return LibraryKernel(sig, dev.load_program(source), False, variant)

    lib = _memo((sig.entry, sig.params, id(dev), "object", digest), dev, make)
    return DeviceKernel(lib.program, lib.sig, lambda: lib.source, tuple(lib.global_size), None)


# --- fused elementwise kernels (rendered and compiled at run time) -------------------------------


def fused(
    expr: str,
    *,
    dtype: Any = "float32",
    out_dtype: Any = None,
    input_dtypes: Optional[Mapping[str, Any]] = None,
    inputs: Optional[Sequence[str]] = None,
    device: Any = "CPU",
) -> LibraryKernel:
    """One kernel for an elementwise expression, e.g. ``fused("relu(a*b+c)")``: one pass over memory.

    Buffers: ``out`` then the inputs (``inputs`` order, default first
    appearance); variable ``n``. Rendered here in pure Python from the same
    skeleton and op table as the library, then compiled with the system C
    compiler (CompilerNotFoundError when there is none) and cached.
    """
    dev = resolve_device(device)
    if input_dtypes is not None and not isinstance(input_dtypes, Mapping):
        raise KernelParamError("input_dtypes must map input names to dtypes, got %s" % type(input_dtypes).__name__)
    if inputs is not None and (
        isinstance(inputs, str) or not isinstance(inputs, Sequence) or not all(isinstance(n, str) for n in inputs)
    ):
        raise KernelParamError("inputs must be a sequence of input names, got %r" % (inputs,))
    idt = {k: c_dtype(v).name for k, v in (input_dtypes or {}).items()}
    order = tuple(inputs) if inputs is not None else None
    entry = fused_entry(expr, dtype, out_dtype, idt, order)
    variant = variants.choose_variant()

    def make() -> LibraryKernel:
        kern = render_elementwise(entry, expr, dtype=dtype, out_dtype=out_dtype, input_dtypes=idt, inputs=order)
        sig = elementwise_sig(
            "fused",
            {"expr": kern.expr, "dtype": kern.compute.name},
            entry,
            expr,
            dtype=dtype,
            out_dtype=out_dtype,
            input_dtypes=idt,
            inputs=order,
            doc="fused: %s" % kern.expr,
        )
        source = prelude() + "\n" + kern.function
        return LibraryKernel(sig, _compile(dev, source, sig, variant), False, variant, fused_source=source)

    return _memo(("fused", entry, id(dev), variant), dev, make)


__all__ = [
    "DeviceKernel",
    "LIBRARY_FORMS",
    "LibraryKernel",
    "device_kernel",
    "fused",
    "get",
    "library_form",
    "object_kernel",
    "resolve_device",
]
