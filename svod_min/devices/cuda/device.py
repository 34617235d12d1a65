"""The CUDA device: one GPU's primary context, its stream, memory, copies, modules and timers.

:class:`CudaDevice` mirrors the CPU device's surface (``allocate``, ``copy``,
``load_*`` returning programs, ``synchronize``, ``close``). Launch semantics
are svod's: ``global_size`` counts **blocks**, ``local_size`` is the block.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import threading
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple, Union

from ...dtypes import DTypeLike
from ...dtypes import dtype as to_dtype
from ...error import CudaError, ExecutionError, LaunchConfigError, PtxError, ReleasedError
from ...ordering import buffers_overlap
from .. import common
from ..base import CUBIN, CUDA_C, PTX, RELEASE_EPOCH, ProgramSource, form_not_loaded
from ..spec import DeviceSpec
from .cubin import check_cubin_params
from .driver import FORK_EPOCH, HANDLE, finalize, thread_state
from .enums import CU_STREAM_NON_BLOCKING, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
from .graph import CudaGraphSlot, GraphCopy
from .launch import check_block, check_grid
from .memory import CudaBuffer, CudaEvent, CudaStorage, PinnedBlock, StagingPool, check_same_size, chunks
from .nvrtc import compile_cuda
from .program import CudaModule, CudaProgram
from .ptx import (
    check_entry_params,
    check_ptx_version,
    format_version,
    ptx_required_block,
    rewrite_ptx_version,
    validate_ptx,
)

if TYPE_CHECKING:  # annotation only: concurrent.futures costs milliseconds at every registry probe
    from concurrent.futures import Executor


class CudaDevice:
    """One GPU: its primary context, one stream, memory, modules, and launch limits.

    A ``Device`` of devices/base.py: ``spec``, ``threads`` (1: a kernel's threads are the GPU's),
    ``graph`` (CUDA graphs), ``queues_work`` (True), ``program_forms``/``load_program`` (PTX, CUBIN,
    CUDA C), ``allocate``, ``host_pool`` (None), ``new_event``, ``synchronize``, ``close``.
    """

    #: Host threads one kernel may use: none beyond the caller's (the GPU runs the kernel).
    threads = 1
    #: Launches and copies are queued on the stream; completion is seen through events.
    queues_work = True
    #: PTX first: the driver JITs it for this GPU; CUDA C needs NVRTC, which a host may lack.
    program_forms: Tuple[str, ...] = (PTX, CUBIN, CUDA_C)

    def __init__(self, driver: Any, ordinal: int) -> None:
        self.driver, self.lib, self.ordinal = driver, driver.lib, ordinal
        self.closed = False
        self.alive = [True]  # shared with the finalizers of all made on this device (driver.release_quietly)
        self.spec = DeviceSpec("CUDA", ordinal)
        self.info = driver.device_info(ordinal)
        self.limits = self.info.limits
        self.handle = driver.device_handle(ordinal)
        context = HANDLE()
        self.lib.call("cuDevicePrimaryCtxRetain", ctypes.byref(context), self.handle)
        self.context = context
        self.context_value: int = context.value or 0
        self._ctx_finalizer = finalize(self, driver, None, "cuDevicePrimaryCtxRelease", self.handle)
        self.activate()
        stream = HANDLE()
        self.lib.call("cuStreamCreate", ctypes.byref(stream), CU_STREAM_NON_BLOCKING)
        self.stream = stream
        self._stream_finalizer = finalize(self, driver, self.context_value, "cuStreamDestroy", stream.value)
        self.staging = StagingPool(self)
        self._modules: Dict[str, CudaModule] = {}
        self._modules_lock = threading.Lock()
        self._timers: List[Tuple[CudaEvent, CudaEvent]] = []
        self._timers_lock = threading.Lock()
        self._peers: Dict[int, bool] = {}
        self.graph = CudaGraphSlot(self)

    def __repr__(self) -> str:
        return "<CudaDevice %s %s %s>" % (self.spec, self.info.name, self.arch)

    @property
    def name(self) -> str:
        return str(self.spec)

    @property
    def arch(self) -> str:
        return self.info.arch

    # --- context ---

    def activate(self, force: bool = False) -> None:
        """Make the primary context current in this thread (a no-op after the first time per thread).

        svod_min remembers per thread which device it made current; code
        that switches contexts behind its back (another CUDA library in the
        same thread) should call ``activate(force=True)`` afterwards.
        """
        if self.closed:
            self.check_open()
        if (
            force
            or getattr(thread_state, "device", None) is not self
            or getattr(thread_state, "epoch", -1) != FORK_EPOCH[0]
        ):
            self._make_current()

    def check_open(self) -> None:
        """Raise :class:`ReleasedError` after :meth:`close`, :class:`ForkedChildError` in a forked child."""
        if self.closed:
            raise ReleasedError(
                "%s was closed (CudaDevice.close()); get a new one with driver.device(%d)" % (self.spec, self.ordinal)
            )
        self.driver.check_process()

    def _make_current(self) -> None:
        self.driver.check_process()
        self.lib.call("cuCtxSetCurrent", self.context)
        thread_state.device, thread_state.epoch = self, FORK_EPOCH[0]

    def synchronize(self) -> None:
        """Wait for everything queued on the device's stream."""
        self.activate()
        self.lib.call("cuStreamSynchronize", self.stream)

    def host_pool(self) -> Optional[Executor]:
        """None: a GPU's plan ops queue on its one stream, so there are no host ops to run at once."""
        return None

    def new_event(self, timing: bool = True) -> CudaEvent:
        """An event in this device's context (``record`` / ``query`` / ``synchronize``; ``elapsed_since`` when
        ``timing``, the default: ``timing=False`` is the cheaper sync-only event)."""
        return CudaEvent(self, timing=timing)

    def memory_info(self) -> Tuple[int, int]:
        """``(free, total)`` bytes of device memory."""
        self.activate()
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.lib.call("cuMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    # --- memory ---

    def allocate(self, nbytes_or_shape: Union[int, Sequence[int]], dtype: DTypeLike = "uint8") -> CudaBuffer:
        """A zero-filled device buffer: ``int`` = size in bytes, a sequence = shape."""
        dt = to_dtype(dtype)
        if isinstance(nbytes_or_shape, (list, tuple)):
            shape = tuple(common.check_index(d, "shape dimension") for d in nbytes_or_shape)
            nbytes = common.product(shape) * dt.itemsize
        else:
            nbytes = common.check_index(nbytes_or_shape, "buffer size")
            shape = common.shape_for(nbytes, dt, None)
        storage = CudaStorage(self, nbytes)
        self.lib.call("cuMemsetD8Async", storage.address, 0, storage.capacity, self.stream)
        return CudaBuffer(storage, 0, nbytes, dt, shape)

    def memcpy_htod(self, dst: int, src: int, nbytes: int) -> None:
        """Host -> device on the stream; the host source may be reused as soon as this returns.

        Always staged: the source is memmoved into a pinned block (so its
        lifetime ends here by construction) and the DMA from that block is
        asynchronous; the block is reused once its event says the DMA is done.
        """
        if nbytes <= 0:
            return
        self.activate()
        pool = self.staging
        with pool.lock:
            blocks = pool.blocks()
            for i, (off, size) in enumerate(chunks(nbytes, pool.chunk)):
                block = blocks[i & 1]
                block.wait()  # its previous DMA must be done before we overwrite it
                pool.memmove(block.address, src + off, size)
                self.lib.call("cuMemcpyHtoDAsync", dst + off, block.address, size, self.stream)
                block.event.record(self.stream)

    def memcpy_dtoh(self, dst: int, src: int, nbytes: int) -> None:
        """Device -> host, after everything earlier on the stream; returns when the bytes are in ``dst``."""
        if nbytes <= 0:
            return
        self.activate()
        pool = self.staging
        if nbytes <= pool.direct_max:  # pageable destination: returns once the copy completed
            self.lib.call("cuMemcpyDtoHAsync", dst, src, nbytes, self.stream)
            self.lib.call("cuStreamSynchronize", self.stream)
            return
        with pool.lock:
            blocks, pieces = pool.blocks(), chunks(nbytes, pool.chunk)
            self._dtoh_issue(blocks[0], src, pieces[0])
            for i, (off, size) in enumerate(pieces):
                if i + 1 < len(pieces):
                    self._dtoh_issue(blocks[(i + 1) & 1], src, pieces[i + 1])
                blocks[i & 1].wait()
                pool.memmove(dst + off, blocks[i & 1].address, size)

    def _dtoh_issue(self, block: PinnedBlock, src: int, piece: Tuple[int, int]) -> None:
        off, size = piece
        self.lib.call("cuMemcpyDtoHAsync", block.address, src + off, size, self.stream)
        block.event.record(self.stream)

    def graph_copy(self, dst: Any, src: Any) -> Optional[GraphCopy]:
        """``dst <- src`` as a CUDA graph node, or None (``self.graph.copy_node``, kept for older callers)."""
        return self.graph.copy_node(dst, src)

    def copy(self, dst: CudaBuffer, src: CudaBuffer) -> None:
        """Device -> device on this GPU (queued on the stream), with memmove semantics for overlapping views."""
        self._check_own(dst, "destination")
        self._check_own(src, "source")
        check_same_size(src.nbytes, dst.nbytes, "copy")
        if not src.nbytes:
            return
        self.activate()
        if buffers_overlap(dst, src):
            self._staged_copy(dst, src)
            return
        self.lib.call("cuMemcpyDtoDAsync", dst.address, src.address, src.nbytes, self.stream)

    def _check_own(self, buf: Any, what: str) -> None:
        if not isinstance(buf, CudaBuffer):
            raise ExecutionError("copy %s is %s, not a CUDA buffer" % (what, type(buf).__name__))
        buf.storage.check_live("copy %s" % what)
        if buf.device is not self:
            raise ExecutionError(
                "copy %s lives on %s, not on %s (use copy_from_peer)" % (what, buf.device.spec, self.spec)
            )

    def _staged_copy(self, dst: CudaBuffer, src: CudaBuffer) -> None:
        """Overlapping views of one allocation: cuMemcpy is undefined there, so go through a temporary."""
        tmp = CudaStorage(self, src.nbytes)
        self.lib.call("cuMemcpyDtoDAsync", tmp.address, src.address, src.nbytes, self.stream)
        self.lib.call("cuMemcpyDtoDAsync", dst.address, tmp.address, src.nbytes, self.stream)
        self.lib.call("cuStreamSynchronize", self.stream)  # the temporary must outlive both copies
        tmp.drop()  # not free(): nothing else can hold it, so no release epoch bump

    def enable_peer_access(self, other: "CudaDevice") -> bool:
        """Let this context read ``other``'s memory directly; False where the pair cannot (staged copies then)."""
        self.check_open()
        other.check_open()
        key = other.ordinal
        if key not in self._peers:
            self._peers[key] = self._try_enable_peer(other)
        return self._peers[key]

    def _try_enable_peer(self, other: "CudaDevice") -> bool:
        can = ctypes.c_int()
        self.lib.call("cuDeviceCanAccessPeer", ctypes.byref(can), self.handle, other.handle)
        if not can.value:
            return False
        self.activate()
        try:
            self.lib.call("cuCtxEnablePeerAccess", other.context, 0)
        except CudaError as exc:
            return exc.code == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
        return True

    def copy_from_peer(self, dst: CudaBuffer, src: Any) -> None:
        """Copy ``src`` (a buffer on another GPU, or host data) into ``dst`` on this GPU."""
        if not isinstance(src, CudaBuffer):
            dst.copyin(src)
            return
        check_same_size(src.nbytes, dst.nbytes, "copy")
        if src.device is self:
            self.copy(dst, src)
            return
        src.device.synchronize()  # its writes must have landed
        self.enable_peer_access(src.device)
        self.activate()
        self.lib.call(
            "cuMemcpyPeerAsync", dst.address, self.context, src.address, src.device.context, src.nbytes, self.stream
        )  # the driver stages through the host when the pair has no peer access
        self.lib.call("cuStreamSynchronize", self.stream)  # src's stream may reuse src as soon as we return

    # --- code ---

    def module(self, image: Union[str, bytes], *, name: str = "module") -> CudaModule:
        """Load (once per distinct image) a PTX text or CUBIN image."""
        raw = image.encode("utf-8") if isinstance(image, str) else bytes(image)
        key = hashlib.sha256(raw).hexdigest()
        self.check_open()
        with self._modules_lock:
            mod = self._modules.get(key)
            if mod is None:
                mod = self._modules[key] = CudaModule(self, raw, name=name)
                mod.cache_key = key
            return mod

    def forget_module(self, module: CudaModule) -> None:
        """Drop an unloaded module from the cache, so the same image loads afresh."""
        with self._modules_lock:
            if self._modules.get(module.cache_key or "") is module:
                del self._modules[module.cache_key or ""]

    def prepare_ptx(self, ptx: Union[str, bytes], entry: Optional[str] = None, *, lower_version: bool = False) -> str:
        """Validate ``ptx`` for this GPU and driver; with ``lower_version`` rewrite a too-new ``.version``."""
        if isinstance(ptx, (bytes, bytearray)):
            text = bytes(ptx).decode("utf-8", "replace")  # a stray byte (in a comment) is for the checks to judge
        elif isinstance(ptx, str):
            text = ptx
        else:
            raise PtxError("PTX must be str or bytes, got %s" % type(ptx).__name__)
        info = validate_ptx(text, self.arch, entry=entry)
        try:
            check_ptx_version(info.version, self.driver.version)
        except PtxError:
            if not lower_version:
                raise
            text = rewrite_ptx_version(text, self.driver.max_ptx_version)
        return text

    def _explain_lowering(self, exc: CudaError, original: Union[str, bytes], loaded: str) -> CudaError:
        """A module that failed after its ``.version`` was lowered: say so (the likely cause) and what to do."""
        before = validate_ptx(original).version
        after = validate_ptx(loaded).version
        if before == after:
            return exc
        hint = (
            "PTX ISA %s was lowered to %s, the most this driver (CUDA %s) accepts, and the driver's JIT "
            "refused it: compile with an NVRTC no newer than CUDA %s, or update the driver"
        ) % (format_version(before), format_version(after), self.driver.version_string, self.driver.version_string)
        err = exc.with_log(exc.log)
        err.args = ("%s\n%s" % (hint, exc.args[0]),)
        return err

    def load_ptx(
        self,
        ptx: Union[str, bytes],
        entry: str,
        buf_count: int,
        var_names: Sequence[str] = (),
        *,
        local_size: Optional[Sequence[int]] = None,
        grid: Optional[Sequence[Any]] = None,
        shared_bytes: int = 0,
        name: Optional[str] = None,
        lower_version: bool = False,
    ) -> CudaProgram:
        """Validate, load (``cuModuleLoadDataEx``, JIT log in errors) and wrap kernel ``entry``.

        ``local_size`` is the default block and ``grid`` the default grid
        (ints or size expressions over ``var_names``), used when a launch
        gives none.
        """
        text = self.prepare_ptx(ptx, entry, lower_version=lower_version)
        check_entry_params(text, entry, buf_count, len(var_names))
        check_grid(grid, tuple(var_names), name or entry)  # before loading: bad launch defaults load nothing
        required = ptx_required_block(text, entry)
        block = check_block(local_size, self.limits, name or entry)
        if required is not None and block is not None and block != required:
            raise LaunchConfigError(
                "%s: local_size %s, but the PTX requires block %s (.reqntid)"
                % (name or entry, list(block), list(required))
            )
        try:
            mod = self.module(text, name=name or entry)
        except CudaError as exc:
            raise self._explain_lowering(exc, ptx, text) from None
        program = CudaProgram(
            mod,
            entry,
            buf_count=buf_count,
            var_names=var_names,
            local_size=local_size or required,
            grid=grid,
            shared_bytes=shared_bytes,
            name=name,
        )
        program.required_block = required  # its default block too, when the caller gave none
        return program

    def load_cubin(
        self, cubin: bytes, entry: str, buf_count: int, var_names: Sequence[str] = (), **kwargs: Any
    ) -> CudaProgram:
        """Wrap ``entry`` of a CUBIN image: its parameter sizes are checked where the CUBIN records them
        (``.nv.info``; types are not recorded, see :mod:`.cubin`); the driver validates the rest."""
        check_cubin_params(bytes(cubin), entry, buf_count, len(var_names))
        mod = self.module(bytes(cubin), name=kwargs.pop("name", None) or entry)
        return CudaProgram(mod, entry, buf_count=buf_count, var_names=var_names, **kwargs)

    def compile_cuda(
        self,
        source: str,
        entry: str,
        buf_count: int,
        var_names: Sequence[str] = (),
        *,
        options: Sequence[str] = (),
        **kwargs: Any,
    ) -> CudaProgram:
        """CUDA C -> PTX via NVRTC (for this GPU's arch) -> :meth:`load_ptx` (``.version`` lowered if needed)."""
        ptx = compile_cuda(source, self.arch, options=options, name=entry + ".cu")
        return self.load_ptx(ptx, entry, buf_count, var_names, lower_version=True, **kwargs)

    def load_program(self, source: ProgramSource) -> CudaProgram:
        """PTX (:meth:`load_ptx`), a CUBIN (:meth:`load_cubin`) or CUDA C (:meth:`compile_cuda`) -> a
        :class:`CudaProgram`; a ``signature`` (library kernels) makes ``bind`` check buffers against it."""
        kwargs = dict(local_size=source.block, grid=source.grid, shared_bytes=source.shared_bytes, name=source.name)
        args = (source.code, source.entry, source.buf_count, source.var_names)
        if source.form == PTX:
            program = self.load_ptx(*args, **kwargs)
        elif source.form == CUBIN:
            program = self.load_cubin(*args, **kwargs)
        elif source.form == CUDA_C:
            program = self.compile_cuda(*args, options=source.options, **kwargs)
        else:
            raise form_not_loaded(self, source.form)
        if source.signature is not None:
            program.signature = source.signature
        return program

    def load_signature(self, sig: Any, ptx: str) -> CudaProgram:
        """Load ``ptx`` for a library signature (a :class:`svod_min.kernels.CudaKernelSig`: entry, buffers,
        variables, grid and block) and wrap its entry; ``bind`` then checks buffer dtypes and sizes against it."""
        return self.load_program(
            ProgramSource(
                PTX,
                ptx,
                sig.entry,
                len(sig.buffers),
                sig.var_names,
                name="%s%s" % (sig.name, dict(sig.params)),
                block=sig.block,
                grid=sig.grid,
                signature=sig,
            )
        )

    # --- timing ---

    def timer(self) -> Tuple[CudaEvent, CudaEvent]:
        """A (start, end) timing-event pair from the device's pool; give it back with :meth:`release_timer`."""
        with self._timers_lock:
            if self._timers:
                return self._timers.pop()
        return CudaEvent(self), CudaEvent(self)

    def release_timer(self, pair: Tuple[CudaEvent, CudaEvent]) -> None:
        with self._timers_lock:
            self._timers.append(pair)

    def close(self) -> None:
        """Release the stream and the primary context now; afterwards this device and everything made on it
        (buffers, programs, events, graphs) raise :class:`ReleasedError`, and ``driver.device(n)`` gives a new one.

        Objects still alive are not freed one by one: the context they lived in is released (a later
        primary context may reuse their handles, so their finalizers do nothing).
        """
        if self.closed:
            return
        if os.getpid() != self.driver.pid:  # a forked child: the driver is the parent's; only forget it here
            self.closed = True
            self.alive[0] = False  # the finalizers skip forked children anyway
            return
        # Let queued work finish before its stream goes. Pushed and popped: the thread's current context
        # (maybe another GPU's) stays current.
        if self.lib.call_raw("cuCtxPushCurrent", self.context) == 0:
            try:
                self.lib.call_raw("cuStreamSynchronize", self.stream)
            finally:
                self.lib.call_raw("cuCtxPopCurrent", ctypes.byref(HANDLE()))
        self.staging.release()
        with self._timers_lock:
            self._timers = []  # their events are destroyed now, while the context lives
        with self._modules_lock:
            self._modules.clear()
        self.driver.forget(self)
        self.closed = True
        self.alive[0] = False
        RELEASE_EPOCH.bump()
        self._stream_finalizer()
        self._ctx_finalizer()
        if getattr(thread_state, "device", None) is self:
            thread_state.device = None
