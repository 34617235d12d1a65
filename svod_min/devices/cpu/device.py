"""The CPU device: JIT-loaded kernels, their launches, a thread pool (buffers: :mod:`.buffer`).

Calling convention (svod's): ``void k(T* restrict buf0, .., const int var0, ..)``:
buffers first in slot order as ``c_void_p``, then integer variables as
``c_int32``. A kernel whose ``global_size[0]`` is ``n > 1`` is invoked ``n``
times with ``vals[core_id] = 0..n-1``, spread over the device's thread pool
(ctypes releases the GIL around foreign calls, so the calls really run in
parallel; how they share the ids: :mod:`.dispatch`).
"""

from __future__ import annotations

import ctypes
import mmap
import os
import threading
import time
import warnings
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Dict, List, Optional, Sequence, Tuple, Union

from ...compiler.backend import CpuBackend
from ...dtypes import DTypeLike
from ...dtypes import dtype as to_dtype
from ...error import BufferAllocationError, ExecutionError, VariableBoundsError
from ..base import C_SOURCE, LLVM_IR, MAPPED_OBJECT, OBJECT, RELEASE_EPOCH, ProgramSource, form_not_loaded
from ..common import check_index, product, shape_for
from ..spec import DeviceSpec
from .buffer import CpuBuffer, CpuStorage
from .dispatch import dispatch, mark_worker, on_worker, run_range

if (
    TYPE_CHECKING
):  # imported where a pool is made: a one-thread device never makes one (~9 ms of a start, logging included)
    import concurrent.futures


INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1
PAGE_SIZE = mmap.PAGESIZE
_THREADS_ENV = "SVOD_THREADS"

BufferLike = Any  # a CpuBuffer, or anything with an int ``address`` (or a raw int)


# --- programs ---------------------------------------------------------------


def _check_vals(names: Sequence[str], vals: Sequence[Any]) -> List[int]:
    # ctypes' c_int32 silently truncates, so the range check must happen here.
    out = []
    for name, value in zip(names, vals):
        if type(value) is not int:  # numpy ints, bools...; floats are refused
            try:
                value = value.__index__()
            except AttributeError:
                raise VariableBoundsError("variable %s=%r is not an integer" % (name, value)) from None
        if not INT32_MIN <= value <= INT32_MAX:
            raise VariableBoundsError(
                "variable %s=%d does not fit the kernel's int32 parameter [%d, %d]"
                % (name, value, INT32_MIN, INT32_MAX)
            )
        out.append(value)
    return out


class CpuProgram:
    """A JIT-loaded kernel entry point with svod's calling convention."""

    #: Host convention: ``global_size[0]`` counts core-id invocations, not GPU blocks.
    grid_in_blocks: ClassVar[bool] = False

    def __init__(
        self,
        loaded: Any,
        entry_point: str,
        *,
        buf_count: int,
        var_names: Sequence[str] = (),
        device: Optional["CpuDevice"] = None,
        name: Optional[str] = None,
    ) -> None:
        if not isinstance(buf_count, int) or buf_count < 0:
            raise ExecutionError("buf_count must be a non-negative int, got %r" % (buf_count,))
        self.entry_point = entry_point
        self.name = name or entry_point
        self.buf_count = buf_count
        self.var_names: Tuple[str, ...] = tuple(var_names)
        self.device = device
        self._loaded = loaded
        argtypes = [ctypes.c_void_p] * buf_count + [ctypes.c_int32] * len(self.var_names)
        self._fn: Optional[Callable[..., None]] = loaded.function(entry_point, None, *argtypes)
        self._bound = False  # a bind() callable holds the code: close() must leave it mapped

    @classmethod
    def from_object(
        cls,
        obj_bytes: bytes,
        entry_point: str,
        *,
        buf_count: int,
        var_names: Sequence[str] = (),
        device: Optional["CpuDevice"] = None,
        name: Optional[str] = None,
    ) -> "CpuProgram":
        """Relocate and map an ELF object, then wrap ``entry_point``."""
        from ...jit_loader import load_object  # on first load: a device that only allocates skips ~20 ms of imports

        return cls(
            load_object(obj_bytes), entry_point, buf_count=buf_count, var_names=var_names, device=device, name=name
        )

    @property
    def address(self) -> int:
        """Entry point address (for diagnostics)."""
        if self._loaded is None:
            raise ExecutionError("program %s is closed" % self.name)
        return self._loaded.address(self.entry_point)

    @property
    def native_address(self) -> Optional[int]:
        """The C entry the native runner may call directly; None once closed."""
        return None if self._loaded is None else self._loaded.address(self.entry_point)

    @property
    def closed(self) -> bool:
        """False until :meth:`close` runs; plans check it before a replay."""
        return self._fn is None

    def close(self) -> None:
        """Release the code; the program cannot be called or bound afterwards.

        The pages are unmapped now, unless a callable from :meth:`bind` (a
        plan, ``LibraryKernel.bind``) still holds the code: then they are
        unmapped when the last such callable is gone. Unmapping under it
        would make its next call jump into nothing (a segfault). Such a
        callable refuses to run after close() (ExecutionError).
        """
        if self._fn is not None:
            RELEASE_EPOCH.bump()
        self._fn = None
        loaded, self._loaded = self._loaded, None
        if loaded is not None and not self._bound:
            loaded.close()

    def __repr__(self) -> str:
        return "<CpuProgram %s bufs=%d vars=%s>" % (self.name, self.buf_count, list(self.var_names))

    # --- dispatch ---

    def execute(
        self,
        buffers: Sequence[BufferLike],
        vals: Sequence[int] = (),
        *,
        global_size: Optional[Sequence[int]] = None,
        core_id_index: Optional[int] = None,
    ) -> None:
        """Run the kernel once, or ``global_size[0]`` times (one per core id) on the pool.

        Everything is validated before the first call: on error nothing ran.
        """
        fn, args, pos, n = self._prepare(buffers, vals, global_size, core_id_index)
        if n <= 1:
            fn(*args)
        else:
            self._dispatch(fn, args, pos, n, None)

    def execute_timed(
        self,
        buffers: Sequence[BufferLike],
        vals: Sequence[int] = (),
        *,
        global_size: Optional[Sequence[int]] = None,
        core_id_index: Optional[int] = None,
    ) -> float:
        """Like :meth:`execute`; returns wall seconds of the dispatch (argument checks excluded)."""
        call = self.bind(buffers, vals, global_size=global_size, core_id_index=core_id_index)
        start = time.perf_counter()
        call()
        return time.perf_counter() - start

    def bind(
        self,
        buffers: Sequence[BufferLike],
        vals: Sequence[int] = (),
        *,
        global_size: Optional[Sequence[int]] = None,
        local_size: Optional[Sequence[int]] = None,
        core_id_index: Optional[int] = None,
        threads: Optional[int] = None,
    ) -> "CpuLaunch":
        """Validate once; return a :class:`CpuLaunch` that dispatches when called (for replay loops).

        ``threads=1`` runs core_id invocations inline (work too small for the pool);
        ``local_size`` is accepted and ignored (the CPU has no blocks). The launch holds
        raw addresses: keep the buffers alive while it is used.
        """
        launch = CpuLaunch(self, buffers, core_id_index, threads)
        launch.set_vals(vals, global_size)
        self._bound = True  # the launch (and through it the mapping) now lives as long as it does
        return launch

    def _call_parts(
        self,
        buffers: Sequence[BufferLike],
        vals: Sequence[Any],
        global_size: Optional[Sequence[int]],
        core_id_index: Optional[int],
        threads: Optional[int],
    ) -> Tuple[Callable[..., None], Sequence[Any]]:
        """``(fn, args)`` a launch calls: prebuilt ctypes arguments for one call (skips ctypes' per-call
        int conversion), a partial over the core-id range for several."""
        fn, args, pos, n = self._prepare(buffers, vals, global_size, core_id_index)
        if n > 1:
            run = (
                partial(run_range, fn, args, pos, 0, n)
                if threads == 1
                else partial(self._dispatch, fn, args, pos, n, threads)
            )
            return run, ()
        nbuf = self.buf_count
        return fn, [ctypes.c_void_p(a) for a in args[:nbuf]] + [ctypes.c_int32(v) for v in args[nbuf:]]

    def _prepare(
        self,
        buffers: Sequence[BufferLike],
        vals: Sequence[Any],
        global_size: Optional[Sequence[int]],
        core_id_index: Optional[int],
    ) -> Tuple[Callable[..., None], List[Any], int, int]:
        fn = self._fn
        if fn is None:
            raise ExecutionError("program %s is closed" % self.name)
        args = self._args(buffers, vals)
        n = self._invocations(global_size)
        if n <= 1:
            return fn, args, -1, n
        return fn, args, self.buf_count + self._core_id_pos(core_id_index, n), n

    def _invocations(self, global_size: Optional[Sequence[int]]) -> int:
        """Core-id invocations: ``global_size[0]``, every dimension a positive int (bools, floats, strings refused)."""
        if not global_size:
            return 1
        try:
            dims = [d.__index__() for d in global_size if not isinstance(d, bool)]
        except (AttributeError, TypeError):
            dims = []
        if len(dims) != len(global_size) or not 1 <= len(dims) <= 3 or min(dims) < 1:
            raise ExecutionError("%s: global_size must be 1 to 3 positive ints, got %r" % (self.name, global_size))
        return dims[0]

    def _args(self, buffers: Sequence[BufferLike], vals: Sequence[Any]) -> List[Any]:
        try:
            nbuf, nval = len(buffers), len(vals)
        except TypeError:  # None, a bare buffer or number: say which argument, not "has no len()"
            raise ExecutionError(
                "%s takes a sequence of buffers and one of values, got %s and %s"
                % (self.name, type(buffers).__name__, type(vals).__name__)
            ) from None
        if nbuf != self.buf_count:
            raise ExecutionError("%s takes %d buffers, got %d" % (self.name, self.buf_count, nbuf))
        if nval != len(self.var_names):
            raise ExecutionError(
                "%s takes %d variables %s, got %d values" % (self.name, len(self.var_names), list(self.var_names), nval)
            )
        try:  # per-dispatch hot path: CpuBuffer / anything with .address / a raw int
            args = [b if type(b) is int else b.address for b in buffers]
        except (AttributeError, TypeError) as exc:  # TypeError: a sized non-sequence (one bare buffer)
            raise ExecutionError("%s: buffer argument has no address (%s)" % (self.name, exc)) from None
        if vals:
            args.extend(_check_vals(self.var_names, vals))
        return args

    def _core_id_pos(self, core_id_index: Optional[int], n: int) -> int:
        if core_id_index is None and "core_id" in self.var_names:
            core_id_index = self.var_names.index("core_id")
        if core_id_index is None or not 0 <= core_id_index < len(self.var_names):
            raise ExecutionError(
                "%s: global_size[0]=%d needs a core id variable, got core_id_index=%r for vars %s"
                % (self.name, n, core_id_index, list(self.var_names))
            )
        if n - 1 > INT32_MAX:
            raise VariableBoundsError("global_size[0]=%d: core ids would overflow int32" % n)
        return core_id_index

    def _dispatch(self, fn: Callable[..., None], args: List[Any], pos: int, n: int, threads: Optional[int]) -> None:
        """Run core ids ``0..n-1`` on up to ``threads`` threads (default: the device's), the caller one of them."""
        device = self.device or create_cpu_device()
        workers = min(n, device.threads if threads is None else min(threads, device.threads))
        if workers <= 1:
            run_range(fn, args, pos, 0, n)
        else:
            dispatch(device.pool, fn, args, pos, n, workers, self.name)


class CpuLaunch:
    """A CPU kernel bound to its buffers and values (the device interface's ``Launch``).

    Calling it dispatches; after the program's close() the call is refused (a few ns check).
    """

    __slots__ = ("program", "_buffers", "_core_id_index", "_threads", "_vals", "_global_size", "_fn", "_cargs")

    #: The CPU has no graph runtime: plans replay its launches one by one or natively.
    graphable: ClassVar[bool] = False
    #: No device timer: callers time the wall clock around a call.
    timed: ClassVar[Optional[Callable[[], float]]] = None

    def __init__(
        self, program: CpuProgram, buffers: Sequence[BufferLike], core_id_index: Optional[int], threads: Optional[int]
    ) -> None:
        self.program = program
        self._buffers, self._core_id_index, self._threads = buffers, core_id_index, threads
        self._vals: Sequence[Any] = ()
        self._global_size: Optional[Sequence[int]] = None

    def __call__(self) -> None:
        if self.program._fn is None:
            raise ExecutionError(
                "program %s is closed: a callable bound before close() cannot run it" % self.program.name
            )
        self._fn(*self._cargs)

    def set_vals(self, vals: Sequence[int], global_size: Optional[Sequence[int]] = None) -> None:
        """New variable values (and invocation count), validated before anything changes."""
        size = self._global_size if global_size is None else global_size
        self._fn, self._cargs = self.program._call_parts(self._buffers, vals, size, self._core_id_index, self._threads)
        self._vals, self._global_size = vals, size

    def set_dims(self, grid: Sequence[int], block: Optional[Sequence[int]] = None) -> None:
        """A new invocation count (``grid[0]``); ``block`` means nothing on the CPU."""
        self.set_vals(self._vals, grid)


# --- device ------------------------------------------------------------------


def _default_threads() -> int:
    return os.cpu_count() or 1


def threads_from_env() -> int:
    """``SVOD_THREADS`` (a positive int), else the CPU count; bad values warn."""
    raw = os.environ.get(_THREADS_ENV, "").strip()
    if not raw:
        return _default_threads()
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        warnings.warn(
            "%s=%r is not a positive integer; using %d threads" % (_THREADS_ENV, raw, _default_threads()),
            RuntimeWarning,
            stacklevel=2,
        )
        return _default_threads()
    return value


class CpuEvent:
    """A point on the host's clock: CPU work is done when its call returns, so recording is reading the time."""

    __slots__ = ("ns",)

    def __init__(self) -> None:
        self.ns: Optional[int] = None

    def record(self) -> None:
        self.ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        """Nothing to wait for: everything before :meth:`record` already ran."""

    def query(self) -> bool:
        """Always finished: CPU work is done when its call returns."""
        return True

    def elapsed_since(self, start: "CpuEvent") -> float:
        """Seconds between ``start`` and this event (both recorded)."""
        if self.ns is None or start.ns is None:
            raise ExecutionError("elapsed_since needs two recorded events")
        return (self.ns - start.ns) / 1e9


class CpuDevice:
    """The host CPU as a device: allocation, compilation and a kernel thread pool."""

    #: No graph runtime: plans replay CPU kernels one by one or through the native runner.
    graph: ClassVar[None] = None
    #: Work is done when a call returns: nothing is queued.
    queues_work: ClassVar[bool] = False
    #: Host objects first: a plan's C and LLVM IR sources are compiled to objects in one batch
    #: (fewest compiler runs) before loading; source forms compile one kernel at a time.
    program_forms: ClassVar[Tuple[str, ...]] = (OBJECT, MAPPED_OBJECT, C_SOURCE, LLVM_IR)

    def __init__(self, backend: Optional[CpuBackend] = None, *, threads: Optional[int] = None) -> None:
        self.spec = DeviceSpec("CPU")
        self.backend = CpuBackend.from_env() if backend is None else backend
        self.threads = threads_from_env() if threads is None else _positive(threads, "threads")
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    @property
    def name(self) -> str:
        return str(self.spec)

    def __repr__(self) -> str:
        return "<CpuDevice backend=%s threads=%d>" % (self.backend.value, self.threads)

    # --- threads ---

    @property
    def pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """The kernel thread pool, created on first use with :attr:`threads` workers."""
        pool = self._pool
        if pool is None:
            with self._pool_lock:
                if self._pool is None:
                    import concurrent.futures

                    self._pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self.threads, thread_name_prefix="svod-cpu", initializer=mark_worker
                    )
                pool = self._pool
        return pool

    def set_threads(self, n: int) -> None:
        """Resize the pool; work already submitted to the old pool still completes."""
        n = _positive(n, "threads")
        with self._pool_lock:
            old, self._pool = self._pool, None
            self.threads = n
        if old is not None:
            old.shutdown(wait=False)

    def host_pool(self) -> Optional[concurrent.futures.ThreadPoolExecutor]:
        """The pool for independent host ops; None with one thread or on one of its own workers
        (waiting on the pool from its own thread can deadlock it)."""
        if self.threads <= 1 or on_worker():
            return None
        return self.pool

    def new_event(self, timing: bool = True) -> CpuEvent:
        """A host-clock event (``timing`` is accepted for the interface: reading the clock is cheap)."""
        return CpuEvent()

    def synchronize(self) -> None:
        """No-op: CPU dispatch is synchronous (exists for symmetry with GPU devices)."""

    def close(self) -> None:
        """Shut the thread pool down (a later use starts a new one); buffers and programs stay valid."""
        with self._pool_lock:
            old, self._pool = self._pool, None
        if old is not None:
            old.shutdown(wait=True)

    # --- memory ---

    def allocate(self, nbytes_or_shape: Union[int, Sequence[int]], dtype: DTypeLike = "uint8") -> CpuBuffer:
        """A zero-filled, page-aligned buffer: ``int`` = size in bytes, a sequence = shape."""
        dt = to_dtype(dtype)
        if isinstance(nbytes_or_shape, (list, tuple)):
            shape = tuple(check_index(d, "shape dimension") for d in nbytes_or_shape)
            nbytes = product(shape) * dt.itemsize
        else:
            nbytes = check_index(nbytes_or_shape, "buffer size")
            shape = shape_for(nbytes, dt, None)
        return CpuBuffer(_new_storage(nbytes), 0, nbytes, dt, shape, self)

    # --- code ---

    def load_program(self, source: ProgramSource) -> CpuProgram:
        """An object (mapped now), a mapped image (shared, never unmapped by the program) or C / LLVM IR
        (compiled through the object cache, then mapped) -> a :class:`CpuProgram`."""
        form = source.form
        if form == OBJECT:
            return self.load(
                source.code, source.entry, buf_count=source.buf_count, var_names=source.var_names, name=source.name
            )
        if form == MAPPED_OBJECT:
            return CpuProgram(
                source.code,
                source.entry,
                buf_count=source.buf_count,
                var_names=source.var_names,
                device=self,
                name=source.name,
            )
        if form == C_SOURCE or form == LLVM_IR:
            from ...cache.kernel_cache import compile_cached  # on first compile (see from_object)

            obj = compile_cached(source.code, kind="c" if form == C_SOURCE else "ir", extra_flags=source.options)
            return self.load_program(source.with_code(OBJECT, obj))
        raise form_not_loaded(self, form)

    def compile_object(self, source: str, *, extra_flags: Sequence[str] = ()) -> bytes:
        """C (or LLVM IR for the LLVM backend) -> ELF object bytes, via the disk cache when present."""
        from ...cache.kernel_cache import compile_cached  # on first compile (see from_object)

        kind = "ir" if self.backend is CpuBackend.LLVM else "c"
        return compile_cached(source, kind=kind, extra_flags=tuple(extra_flags))

    def load(
        self,
        obj_bytes: bytes,
        entry_point: str,
        *,
        buf_count: int,
        var_names: Sequence[str] = (),
        name: Optional[str] = None,
    ) -> CpuProgram:
        """Map an already compiled object and wrap ``entry_point`` (:meth:`load_program`'s OBJECT form)."""
        return CpuProgram.from_object(
            obj_bytes, entry_point, buf_count=buf_count, var_names=var_names, device=self, name=name
        )

    def compile(
        self,
        source: str,
        entry_point: str,
        *,
        buf_count: int,
        var_names: Sequence[str] = (),
        extra_flags: Sequence[str] = (),
    ) -> CpuProgram:
        """Compile ``source`` and load ``entry_point`` as a :class:`CpuProgram`."""
        obj = self.compile_object(source, extra_flags=extra_flags)
        return self.load(obj, entry_point, buf_count=buf_count, var_names=var_names)


def _positive(value: Any, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError("%s must be a positive int, got %r" % (what, value))
    return value


def _new_storage(nbytes: int) -> CpuStorage:
    try:
        return CpuStorage(nbytes)
    except (MemoryError, OSError, OverflowError, ValueError) as exc:
        raise BufferAllocationError("cannot allocate %d bytes of host memory: %s" % (nbytes, exc)) from exc


# --- factories -----------------------------------------------------------------

_devices: Dict[CpuBackend, CpuDevice] = {}
_devices_lock = threading.Lock()


def create_cpu_device_with_backend(backend: Union[CpuBackend, str]) -> CpuDevice:
    """The process-wide CPU device for ``backend`` (memoised: one per backend)."""
    key = backend if isinstance(backend, CpuBackend) else CpuBackend(str(backend).strip().lower())
    with _devices_lock:
        dev = _devices.get(key)
        if dev is None:
            dev = _devices[key] = CpuDevice(key)
        return dev


def create_cpu_device(backend: Optional[Union[CpuBackend, str]] = None) -> CpuDevice:
    """The CPU device for ``backend`` (default ``CpuBackend.from_env()``)."""
    return create_cpu_device_with_backend(CpuBackend.from_env() if backend is None else backend)


def ensure_thread_pool(n: Optional[int] = None) -> concurrent.futures.ThreadPoolExecutor:
    """Size (``n``, default ``SVOD_THREADS``) and warm the default CPU device's pool.

    Warming starts every worker thread now, so the first timed kernel does
    not pay for thread creation. Returns the pool.
    """
    dev = create_cpu_device()
    if n is not None and n != dev.threads:
        dev.set_threads(n)
    pool = dev.pool
    if not on_worker():
        _warm(pool, dev.threads)
    return pool


def _warm(pool: concurrent.futures.ThreadPoolExecutor, n: int) -> None:
    # n tasks that wait for each other force n distinct threads into existence.
    barrier = threading.Barrier(n)
    futures = [pool.submit(_barrier_wait, barrier) for _ in range(n)]
    import concurrent.futures

    concurrent.futures.wait(futures, timeout=5.0)


def _barrier_wait(barrier: threading.Barrier) -> None:
    try:
        barrier.wait(timeout=2.0)
    except threading.BrokenBarrierError:
        pass  # pool busy with other work: warming is best effort


__all__ = [
    "CpuBackend",
    "CpuBuffer",
    "CpuDevice",
    "CpuEvent",
    "CpuLaunch",
    "CpuProgram",
    "CpuStorage",
    "INT32_MAX",
    "INT32_MIN",
    "PAGE_SIZE",
    "create_cpu_device",
    "create_cpu_device_with_backend",
    "ensure_thread_pool",
    "threads_from_env",
]
