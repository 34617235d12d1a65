"""Kernels: loaded modules, programs with svod's calling convention, and bound launches that replay.

A :class:`CudaModule` is one ``CUmodule`` (PTX JIT-compiled by the driver, or
a CUBIN). A :class:`CudaProgram` is one entry point with svod's convention
(pointers, then int32 scalars; default grid and block); :meth:`CudaProgram.bind`
checks and packs once and returns a :class:`BoundLaunch`, which launches when
called and is patched in place (``set_vals``, ``set_buffer``, ``set_dims``)
between replays. The device is a ``device.CudaDevice``, typed ``Any`` here
because that module imports this one.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ... import expr as size_expr
from ...dtypes import dtype as to_dtype
from ...error import (
    BufferAllocationError,
    CudaError,
    CudaSymbolError,
    ExecutionError,
    KernelVariableError,
    LaunchConfigError,
    ReleasedError,
    SvodError,
)
from ..base import RELEASE_EPOCH
from .driver import CUDA_KERNEL_NODE_PARAMS, HANDLE, device_finalize
from .enums import (
    CU_JIT_ERROR_LOG_BUFFER,
    CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    CU_JIT_INFO_LOG_BUFFER,
    CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    CU_JIT_LOG_VERBOSE,
    FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES,
    FUNC_ATTR_MAX_THREADS_PER_BLOCK,
    FUNC_ATTR_SHARED_SIZE_BYTES,
)
from .launch import (
    ArgBlob,
    Dims3,
    as_int,
    as_sequence,
    check_block,
    check_grid,
    check_shared_bytes,
    grid_dim,
    int32_arg,
    launch_dims,
)
from .memory import CudaBuffer
from .ptx import ptx_entries

_LOG_BYTES = 16 << 10


class CudaModule:
    """A loaded ``CUmodule`` (PTX JIT-compiled by the driver, or a CUBIN)."""

    def __init__(self, device: Any, image: bytes, *, name: str = "module") -> None:
        self.device, self.name = device, name
        self.kind = (
            "cubin" if image.startswith(b"\x7fELF") else "fatbin" if image.startswith(b"\x50\xed\x55\xba") else "ptx"
        )
        self.info_log = ""
        self.text = image.decode("utf-8", "replace") if self.kind == "ptx" else ""
        self.handle = self._load(image + (b"\0" if self.kind == "ptx" else b""))
        self._functions: Dict[str, HANDLE] = {}
        self.unloaded = False
        self.cache_key: Optional[str] = None  # set by CudaDevice.module
        # Dynamic shared bytes each entry is opted in to: the attribute belongs to the CUfunction, which every
        # CudaProgram over this (cached) module shares, so it is tracked here and only ever raised.
        self._shared_optin: Dict[str, int] = {}
        self._lock = threading.Lock()
        self._finalizer = device_finalize(self, device, "cuModuleUnload", self.handle.value)

    def _load(self, image: bytes) -> HANDLE:
        errors, infos = ctypes.create_string_buffer(_LOG_BYTES), ctypes.create_string_buffer(_LOG_BYTES)
        options = (ctypes.c_int * 5)(
            CU_JIT_ERROR_LOG_BUFFER,
            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
            CU_JIT_INFO_LOG_BUFFER,
            CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
            CU_JIT_LOG_VERBOSE,
        )
        values = (ctypes.c_void_p * 5)(ctypes.addressof(errors), _LOG_BYTES, ctypes.addressof(infos), _LOG_BYTES, 1)
        handle, data = HANDLE(), ctypes.create_string_buffer(image, len(image))
        self.device.activate()
        try:
            self.device.lib.call("cuModuleLoadDataEx", ctypes.byref(handle), data, 5, options, values)
        except CudaError as exc:
            log = "\n".join(t for t in (_log_text(errors), _log_text(infos)) if t)
            what = "loading %s module %r on %s (%s, driver %s)" % (
                self.kind.upper(),
                self.name,
                self.device.spec,
                self.device.arch,
                self.device.driver.version_string,
            )
            raise exc.with_log(log, what) from None
        self.info_log = _log_text(infos)
        return handle

    def function(self, entry: str) -> HANDLE:
        """The ``CUfunction`` for ``entry`` (looked up once)."""
        self.check_loaded()
        fn = self._functions.get(entry)
        if fn is None:
            fn = HANDLE()
            self.device.activate()
            try:
                self.device.lib.call("cuModuleGetFunction", ctypes.byref(fn), self.handle, entry.encode())
            except CudaError as exc:
                entries = ", ".join(ptx_entries(self.text)) or "?"
                raise exc.with_log(
                    "", "kernel %r not in module %r (entries: %s)" % (entry, self.name, entries)
                ) from None
            self._functions[entry] = fn
        return fn

    def check_loaded(self) -> None:
        """Raise :class:`ReleasedError` after :meth:`unload` (or the device's close())."""
        if self.unloaded:
            raise ReleasedError(
                "module %r on %s was unloaded (CudaModule.unload()); load it again" % (self.name, self.device.spec)
            )
        self.device.check_open()

    def allow_dynamic_shared(self, entry: str, function: HANDLE, number: int, default: int) -> None:
        """Opt ``entry`` in to ``number`` dynamic shared bytes unless it already allows that many (``default``
        without opting in); never lowers what another program over the same function opted in to."""
        with self._lock:
            if number <= self._shared_optin.get(entry, default):
                return
            self.device.activate()
            self.device.lib.call("cuFuncSetAttribute", function, FUNC_ATTR_MAX_DYNAMIC_SHARED_SIZE_BYTES, number)
            self._shared_optin[entry] = number

    def unload(self) -> None:
        """Unload now; its programs (and launches bound from them) raise :class:`ReleasedError` afterwards."""
        if self.unloaded:
            return
        self.unloaded = True
        RELEASE_EPOCH.bump()
        self.device.forget_module(self)
        self._finalizer()


def _log_text(buf: Any) -> str:
    return buf.value.decode("utf-8", "replace").strip()


def _check_aligned(kernel: str, which: Any, buf: "CudaBuffer", align: int) -> None:
    """Refuse a buffer whose start is not a multiple of its element size: a GPU load from it faults with
    CUDA_ERROR_MISALIGNED_ADDRESS, a sticky error that leaves the context unusable for the rest of the process."""
    if buf.address % align:
        raise ExecutionError(
            "%s: buffer %r starts %d bytes into its allocation, not a multiple of its %d-byte elements; "
            "a GPU would fault on it (misaligned address), so it is not launched" % (kernel, which, buf.offset, align)
        )


class CudaProgram:
    """A kernel entry point with svod's calling convention on one GPU (a ``Program`` of devices/base.py).

    No ``address`` attribute on purpose (``native_address`` is None): the native runner is the CPU's.
    ``core_id_index`` and ``threads`` are accepted and ignored (CPU-only concepts).
    """

    #: svod's GPU convention: a launch's global_size is the grid, counted in blocks (ExecutionPlan keys on it).
    grid_in_blocks = True
    #: A library kernel's CudaKernelSig: buffers are checked against it before any launch.
    signature: Any = None
    #: The block the PTX requires (``.reqntid``), set by ``CudaDevice.load_ptx``: no other block launches.
    required_block: Optional[Dims3] = None
    #: No C entry for the native (CPU) runner: GPU launches go through the driver.
    native_address: Optional[int] = None

    def __init__(
        self,
        module: CudaModule,
        entry_point: str,
        *,
        buf_count: int,
        var_names: Sequence[str] = (),
        local_size: Optional[Sequence[int]] = None,
        grid: Optional[Sequence[Any]] = None,
        shared_bytes: int = 0,
        name: Optional[str] = None,
    ) -> None:
        if not isinstance(buf_count, int) or buf_count < 0:
            raise ExecutionError("buf_count must be a non-negative int, got %r" % (buf_count,))
        self.module, self.device = module, module.device
        self._closed = False
        self.entry_point, self.name = entry_point, name or entry_point
        self.buf_count, self.var_names = buf_count, tuple(var_names)
        self.grid = check_grid(grid, self.var_names, self.name)
        self.function = module.function(entry_point)
        self.max_threads = self._func_attribute(FUNC_ATTR_MAX_THREADS_PER_BLOCK)
        self.limits = self.device.limits.with_threads(self.max_threads)
        self.local_size = check_block(local_size, self.limits, self.name)
        self.static_shared = self._func_attribute(FUNC_ATTR_SHARED_SIZE_BYTES)
        self._dynamic_shared_max = self.limits.max_shared_bytes - self.static_shared  # without opting in
        self.shared_bytes = self._shared(shared_bytes)

    def __repr__(self) -> str:
        return "<CudaProgram %s on %s bufs=%d vars=%s>" % (
            self.name,
            self.device.spec,
            self.buf_count,
            list(self.var_names),
        )

    def _shared(self, shared_bytes: Any) -> int:
        """Validated dynamic shared bytes; above the default 48 KiB block the kernel's function opts in."""
        number = check_shared_bytes(shared_bytes, self.limits, self.static_shared)
        if number > self._dynamic_shared_max:
            self.module.allow_dynamic_shared(self.entry_point, self.function, number, self._dynamic_shared_max)
        return number

    def _func_attribute(self, attribute: int) -> int:
        value = ctypes.c_int()
        try:
            self.device.lib.call("cuFuncGetAttribute", ctypes.byref(value), attribute, self.function)
        except (CudaError, CudaSymbolError):
            return 0
        return value.value

    # --- argument preparation ---

    def _pointers(self, buffers: Sequence[Any]) -> List[int]:
        buffers = as_sequence(buffers, "buffers", self.name)
        if len(buffers) != self.buf_count:
            raise ExecutionError("%s takes %d buffers, got %d" % (self.name, self.buf_count, len(buffers)))
        return [self._pointer(i, b) for i, b in enumerate(buffers)]

    def _pointer(self, index: int, buf: Any) -> int:
        if type(buf) is int:
            return buf
        if isinstance(buf, CudaBuffer):
            buf.storage.check_live("%s: buffer %d" % (self.name, index))
            if buf.device is not self.device:
                raise ExecutionError(
                    "%s: buffer %d lives on %s, the kernel on %s"
                    % (self.name, index, buf.device.spec, self.device.spec)
                )
            _check_aligned(self.name, index, buf, buf.dtype.itemsize)
            return buf.address
        where = getattr(getattr(buf, "device", None), "spec", None) or type(buf).__name__
        raise ExecutionError(
            "%s: buffer %d is not a CUDA buffer (%s); copy it to %s first" % (self.name, index, where, self.device.spec)
        )

    def _check_against_signature(self, buffers: Sequence[Any], vals: Sequence[Any]) -> None:
        """A library kernel never runs on a buffer of the wrong dtype or too few elements (raw pointers: unchecked)."""
        sig = self.signature
        env = {name: as_int(v, "variable") for name, v in zip(self.var_names, vals)}
        for var in sig.vars:
            if env[var.name] < var.min:
                raise KernelVariableError(
                    "%s: %s=%d is below its minimum %d" % (self.name, var.name, env[var.name], var.min)
                )
        for arg, buf in zip(sig.buffers, buffers):
            if not isinstance(buf, CudaBuffer):
                continue
            if buf.dtype.name != arg.dtype and buf.dtype.name != "uint8":  # uint8: raw bytes, size checked below
                raise ExecutionError(
                    "%s: buffer %r is %s, the kernel takes %s" % (self.name, arg.name, buf.dtype.name, arg.dtype)
                )
            if to_dtype(arg.dtype).itemsize > buf.dtype.itemsize:  # raw bytes: _pointer checked only 1-byte alignment
                _check_aligned(self.name, arg.name, buf, to_dtype(arg.dtype).itemsize)
            count = size_expr.evaluate(arg.count, env) if arg.count is not None else 0
            need = count * to_dtype(arg.dtype).itemsize
            if buf.nbytes < need:
                raise BufferAllocationError(
                    "%s: buffer %r holds %d bytes, it needs %s = %d elements (%d bytes): refusing to launch"
                    % (self.name, arg.name, buf.nbytes, arg.count, count, need)
                )

    def _check_vals(self, vals: Sequence[Any]) -> List[Any]:
        vals = as_sequence(vals, "vals (the variables %s)" % list(self.var_names), self.name)
        if len(vals) != len(self.var_names):
            raise ExecutionError(
                "%s takes %d variables %s, got %d values"
                % (self.name, len(self.var_names), list(self.var_names), len(vals))
            )
        return vals

    def _int_vals(self, vals: Sequence[Any]) -> List[int]:
        """``vals`` as int32 numbers (ArgumentRangeError names the variable), checked before the signature."""
        return [int32_arg(v, name) for name, v in zip(self.var_names, vals)]

    def check_usable(self) -> None:
        """Raise :class:`ReleasedError` once the program was closed, its module unloaded or the device closed."""
        if self._closed:
            raise ReleasedError(
                "program %s on %s was closed (CudaProgram.close()); load it again" % (self.name, self.device.spec)
            )
        self.module.check_loaded()

    @property
    def closed(self) -> bool:
        """True once :meth:`close`, the module's unload or the device's close made the program unusable."""
        return self._closed or self.module.unloaded or self.device.closed

    def close(self) -> None:
        """Refuse this program (and launches bound from it) from now on. Its module stays loaded for the
        other programs over it (the device caches modules): :meth:`CudaModule.unload` frees the code."""
        if not self._closed:
            self._closed = True
            RELEASE_EPOCH.bump()

    def default_grid(self, vals: Sequence[Any]) -> Dims3:
        """The grid from the program's grid expressions (or 1 block); a dimension <= 0 is a LaunchConfigError."""
        if self.grid is None:
            return (1, 1, 1)
        env = dict(zip(self.var_names, (as_int(v, "variable") for v in vals)))
        return tuple(self._grid_dim(axis, d, env) for axis, d in enumerate(self.grid))  # type: ignore[return-value]

    def _grid_dim(self, axis: int, dim: Any, env: Dict[str, int]) -> int:
        try:
            value = grid_dim(dim, env)
        except (ArithmeticError, TypeError, ValueError, SvodError) as exc:
            raise LaunchConfigError("%s: grid[%d]=%r with %s: %s" % (self.name, axis, dim, env, exc)) from None
        if value <= 0:  # no library kernel does this at valid sizes (their grids say max(1, ...) themselves)
            raise LaunchConfigError(
                "%s: grid[%d]=%r is %d blocks with %s; a launch needs at least 1" % (self.name, axis, dim, value, env)
            )
        return value

    def dims(self, vals: Sequence[Any], global_size: Any = None, local_size: Any = None) -> Tuple[Dims3, Dims3]:
        """(grid, block) for a launch: explicit sizes win over the program's defaults."""
        gs = global_size if global_size is not None else self.default_grid(vals)
        ls = local_size if local_size is not None else self.local_size
        return launch_dims(gs, self.checked_block(ls), self.limits)

    def checked_block(self, local_size: Any) -> Dims3:
        """``local_size`` as a block within the device's limits and, for a library kernel, its signature's
        block (checked before the kernel's own thread limit: the signature says what is wrong)."""
        block = launch_dims(1, local_size, self.device.limits)[1]
        self.check_block(block)
        return block

    def check_block(self, block: Dims3) -> None:
        """A library kernel runs only with its signature's block: its code sizes shared arrays and
        reduction trees for it (another block overflows them on the GPU or sums wrongly). A kernel whose
        PTX says ``.reqntid`` runs only with that block (the driver would refuse any other)."""
        if self.signature is not None:
            want = tuple(self.signature.block) + (1,) * (3 - len(self.signature.block))
            if tuple(block) != want:
                raise LaunchConfigError(
                    "library kernel %s is written for block %s; got block %s"
                    % (self.signature.name, list(want), list(block))
                )
        elif self.required_block is not None and tuple(block) != self.required_block:
            raise LaunchConfigError(
                "kernel %s requires block %s (.reqntid in its PTX); got block %s"
                % (self.name, list(self.required_block), list(block))
            )

    # --- dispatch ---

    def bind(
        self,
        buffers: Sequence[Any],
        vals: Sequence[Any] = (),
        global_size: Any = None,
        local_size: Any = None,
        core_id_index: Optional[int] = None,
        threads: Optional[int] = None,
        *,
        shared_bytes: Optional[int] = None,
    ) -> "BoundLaunch":
        """Validate and pack once; the returned callable launches (patch it for replay).

        ``core_id_index`` and ``threads`` are the CPU's (devices/base.py ``Program.bind``): ignored here.
        """
        self.check_usable()
        ints = self._int_vals(self._check_vals(vals))  # int32 first: 2**31 is an ArgumentRangeError, not a size problem
        pointers = self._pointers(buffers)
        buffers = list(buffers)
        if self.signature is not None:
            self._check_against_signature(buffers, ints)
        blob = ArgBlob(pointers, ints)
        grid, block = self.dims(ints, global_size, local_size)
        shared = self.shared_bytes if shared_bytes is None else self._shared(shared_bytes)
        return BoundLaunch(
            self, blob, grid, block, shared, buffers, auto_grid=global_size is None and self.grid is not None
        )

    def execute(self, buffers: Sequence[Any], vals: Sequence[Any] = (), **kwargs: Any) -> None:
        """Launch once on the device's stream (asynchronous: copyout / synchronize wait)."""
        self.bind(buffers, vals, **kwargs)()

    def execute_timed(self, buffers: Sequence[Any], vals: Sequence[Any] = (), **kwargs: Any) -> float:
        """Launch once; returns device seconds measured with reusable CUDA events."""
        return self.bind(buffers, vals, **kwargs).timed()


class BoundLaunch:
    """A packed launch: call it to launch; ``set_*`` patch the blob in place between calls.

    Every ``set_*`` runs the checks :meth:`CudaProgram.bind` runs (int32 range, the library kernel's
    signature, the buffer's device, alignment and liveness) before patching anything; a refused patch
    leaves the launch as it was. When the grid came from the program's own expressions (no explicit
    ``global_size`` at bind and no :meth:`set_dims` since), new variables recompute it.
    """

    #: Every bound launch can be a CUDA graph node (:class:`~.graph.CudaGraph`).
    graphable = True

    def __init__(
        self,
        program: CudaProgram,
        blob: ArgBlob,
        grid: Dims3,
        block: Dims3,
        shared: int,
        keep: List[Any],
        *,
        auto_grid: bool = False,
    ) -> None:
        self.program, self.blob, self.shared = program, blob, shared
        self.device = program.device
        self._keep = keep  # buffers stay alive while the launch may run
        self._auto_grid = auto_grid
        self._checked = RELEASE_EPOCH.value  # release epoch at the last liveness check
        self._dims_version = 0
        self.graphs: List[Any] = []  # weak references to the CudaGraphs holding this launch
        self.grid, self.block = grid, block  # validated by CudaProgram.bind
        self._pack_call()
        blob.on_change = _weak_touch(self)

    def _touch(self) -> None:
        """Tell the graphs holding this launch that it changed (they re-upload it on their next launch)."""
        alive = []
        for ref in self.graphs:
            graph = ref()
            if graph is not None:
                graph.dirty.add(self)
                alive.append(ref)
        self.graphs = alive

    def __repr__(self) -> str:
        return "<BoundLaunch %s grid=%s block=%s>" % (self.program.name, self.grid, self.block)

    @property
    def version(self) -> int:
        """Changes whenever arguments or dims are patched (graphs re-upload changed nodes only)."""
        return self.blob.version + self._dims_version

    def set_dims(self, grid: Any, block: Any = None) -> None:
        """New grid (and block), validated against the kernel's limits; the grid stays explicit from now on."""
        new_block = self.program.checked_block(self.block if block is None else block)
        new_grid, new_block = launch_dims(grid, new_block, self.program.limits)
        self.grid, self.block = new_grid, new_block
        self._auto_grid = False
        self._pack_call()

    def _pack_call(self) -> None:
        """The 11 cuLaunchKernel arguments as ctypes objects, so the untyped entry point can take them as is."""
        u = ctypes.c_uint
        self._launch = self.device.lib.untyped("cuLaunchKernel")
        self._cargs = (
            self.program.function,
            u(self.grid[0]),
            u(self.grid[1]),
            u(self.grid[2]),
            u(self.block[0]),
            u(self.block[1]),
            u(self.block[2]),
            u(self.shared),
            self.device.stream,
            None,
            self.blob.extra,
        )
        self._dims_version += 1
        self._touch()

    # --- patching ---

    def _check_patch(self, buffers: Sequence[Any], ints: List[int]) -> Optional[Dims3]:
        """bind()'s checks for the patched arguments; the recomputed grid when it follows the variables."""
        program = self.program
        program.check_usable()
        if program.signature is not None:
            program._check_against_signature(buffers, ints)
        if not self._auto_grid:
            return None
        return launch_dims(program.default_grid(ints), self.block, program.limits)[0]

    def _regrid(self, grid: Optional[Dims3]) -> None:
        if grid is not None and grid != self.grid:
            self.grid = grid
            self._pack_call()

    def _index(self, index: Any, count: int, what: str) -> int:
        number = as_int(index, "%s index" % what) if type(index) is not int else index
        if not 0 <= number < count:
            raise ExecutionError(
                "%s: %s index %d is out of range: the kernel takes %d %ss"
                % (self.program.name, what, number, count, what)
            )
        return number

    def set_vals(self, vals: Sequence[Any]) -> None:
        """Patch every variable (checked like bind(), all or nothing)."""
        program = self.program
        ints = program._int_vals(program._check_vals(vals))
        grid = self._check_patch(self._keep, ints)
        for j, value in enumerate(ints):
            self.blob.set_int(j, value, program.var_names[j])
        self._regrid(grid)

    def set_val(self, index: int, value: Any) -> None:
        """Patch variable ``index`` (checked like bind())."""
        index = self._index(index, self.blob.nint, "variable")
        ints = self.blob.ints()
        ints[index] = int32_arg(value, self.program.var_names[index])
        grid = self._check_patch(self._keep, ints)
        self.blob.set_int(index, ints[index], self.program.var_names[index])
        self._regrid(grid)

    def set_buffer(self, index: int, buf: Any) -> None:
        """Point buffer ``index`` at ``buf`` (checked like bind())."""
        index = self._index(index, self.blob.nptr, "buffer")
        pointer = self.program._pointer(index, buf)
        buffers = list(self._keep)
        buffers[index] = buf
        self._check_patch(buffers, self.blob.ints())
        self.blob.set_ptr(index, pointer)
        self._keep[index] = buf

    # --- launching ---

    def check_live(self) -> None:
        """Refuse a launch whose module was unloaded, device closed or buffers freed since it was checked."""
        self.program.check_usable()
        for index, buf in enumerate(self._keep):
            if isinstance(buf, CudaBuffer):
                buf.storage.check_live("%s: buffer %d" % (self.program.name, index))
        self._checked = RELEASE_EPOCH.value

    def __call__(self) -> None:
        if self._checked != RELEASE_EPOCH.value:  # something was freed or closed since: one comparison otherwise
            self.check_live()
        self.device.activate()
        code = self._launch(*self._cargs)  # every argument is a ctypes object (see _pack_call)
        if code:
            raise self.device.lib.error("cuLaunchKernel", code)

    def timed(self) -> float:
        """Launch once between two reusable events; device seconds."""
        if self._checked != RELEASE_EPOCH.value:
            self.check_live()
        pair = self.device.timer()
        try:
            self.device.activate()
            pair[0].record()
            code = self._launch(*self._cargs)
            if code:
                raise self.device.lib.error("cuLaunchKernel", code)
            pair[1].record()
            pair[1].synchronize()
            return pair[1].elapsed_since(pair[0])
        finally:
            self.device.release_timer(pair)

    def node_params(self) -> CUDA_KERNEL_NODE_PARAMS:
        """This launch as a graph kernel node (``kernelParams`` pointing into the blob)."""
        p = CUDA_KERNEL_NODE_PARAMS()
        p.func = self.program.function.value
        p.gridDimX, p.gridDimY, p.gridDimZ = self.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = self.block
        p.sharedMemBytes = self.shared
        p.kernelParams = ctypes.cast(self.blob.kernel_params, ctypes.POINTER(ctypes.c_void_p))
        return p


# --- graphs ---------------------------------------------------------------------------------------


def _weak_touch(bound: BoundLaunch) -> Callable[[], None]:
    """``bound._touch`` without a strong reference: the blob must not keep its launch (and buffers) alive."""
    ref = weakref.ref(bound)

    def touch() -> None:
        target = ref()
        if target is not None:
            target._touch()

    return touch
