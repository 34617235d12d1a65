"""The device interface: what plans, the executor and plan files may ask of a device.

A device is a few fixed slots (tinygrad's ``Compiled(device, allocator, renderers, runtime,
graph)`` is the model), so the code above never probes a device with ``hasattr``:

* :class:`Device` — ``spec``, ``threads``, ``queues_work``, ``allocate``, ``graph``
  (a :class:`GraphRuntime` or ``None``), ``host_pool`` (a thread pool for independent host ops or
  ``None``), ``new_event``, ``synchronize``, ``close``, and program loading: ``program_forms`` (the
  forms of code it loads, preferred first) and ``load_program`` (a :class:`ProgramSource` of one of
  those forms -> a :class:`Program`). Plan files, the kernel library and selfcheck pick a form the
  device lists; none of them names a device kind (docs/devices.md: adding a kind).
* :class:`Program` — a loaded kernel: its slot counts, ``grid_in_blocks`` (GPU: ``global_size``
  counts blocks), ``native_address`` (a C entry the native runner may call, else ``None``),
  ``closed``, ``bind`` → a :class:`Launch`.
* :class:`Launch` — a bound call that replays: ``__call__``, ``set_vals``/``set_dims`` (patched in
  place so a graph holding it re-uploads one node), ``graphable``, ``timed``.
* :class:`Buffer` — ``storage``, ``offset``, ``nbytes``, ``dtype``, ``shape``, ``on_host``, copies,
  views.

Both :mod:`svod_min.devices.cpu` and :mod:`svod_min.devices.cuda` implement these; the Protocols are
structural (``typing.Protocol`` is 3.8+), so tests may pass their own doubles. :class:`ReleaseEpoch`
is the one close/release counter: a plan remembers the value it saw and rescans its programs or
buffers only when the counter moved (one int comparison per replay).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, List, Mapping, Optional, Sequence, Tuple

from ..error import NotSupportedError

try:
    from typing import Protocol
except ImportError:  # pragma: no cover - Python 3.7 is not supported; kept for type checkers only
    Protocol = object  # type: ignore[assignment,misc]

if TYPE_CHECKING:  # annotations only: plans import this module, and it must stay cheap (~10 ms otherwise)
    from concurrent.futures import Executor

    from ..dtypes import DType
    from .spec import DeviceSpec

Dims = Tuple[int, int, int]

# --- program forms: what ProgramSource.form may name ---------------------------------------------

#: A relocatable ELF object for this host (bytes), as :mod:`svod_min.compiler` makes them.
OBJECT = "object"
#: An object already relocated and mapped in this process (anything with jit_loader's
#: ``LoadedObject.function``/``address``): one image shared by many kernels, such as a prebuilt library.
MAPPED_OBJECT = "mapped_object"
#: C source (text); ``options`` are extra compiler flags.
C_SOURCE = "c"
#: LLVM IR (text); ``options`` are extra compiler flags.
LLVM_IR = "llvm_ir"
#: PTX assembly (text or bytes).
PTX = "ptx"
#: A CUBIN image (bytes).
CUBIN = "cubin"
#: CUDA C source (text); ``options`` are NVRTC options.
CUDA_C = "cuda_c"


class ProgramSource:
    """One kernel's code in one form, and what the device needs to wrap its entry point.

    A plain class, not a NamedTuple or dataclass: plans import this module, and building either
    costs a millisecond at import.
    """

    __slots__ = (
        "form",
        "code",
        "entry",
        "buf_count",
        "var_names",
        "name",
        "options",
        "block",
        "grid",
        "shared_bytes",
        "signature",
    )

    def __init__(
        self,
        form: str,
        code: Any,
        entry: str,
        buf_count: int,
        var_names: Sequence[str] = (),
        *,
        name: Optional[str] = None,
        options: Sequence[str] = (),
        block: Optional[Sequence[int]] = None,
        grid: Optional[Sequence[Any]] = None,
        shared_bytes: int = 0,
        signature: Any = None,
    ) -> None:
        self.form = form
        #: Text (source, PTX), bytes (object, CUBIN) or a mapped image (:data:`MAPPED_OBJECT`).
        self.code = code
        self.entry = entry
        self.buf_count = buf_count
        self.var_names = tuple(var_names)
        #: The program's name in messages (None: ``entry``).
        self.name = name
        #: Compiler flags for source forms (C, LLVM IR), NVRTC options for CUDA C.
        self.options = tuple(options)
        #: GPU forms: the default block (threads per block) when a launch gives none.
        self.block = block
        #: GPU forms: the default grid (ints or size expressions over ``var_names``).
        self.grid = grid
        #: GPU forms: dynamic shared memory per block, in bytes.
        self.shared_bytes = shared_bytes
        #: A kernel-library signature whose buffer checks the program's ``bind`` applies (GPU library kernels).
        self.signature = signature

    def with_code(self, form: str, code: Any) -> "ProgramSource":
        """The same kernel in another form (a compiled object of this source, say)."""
        return ProgramSource(
            form,
            code,
            self.entry,
            self.buf_count,
            self.var_names,
            name=self.name,
            options=self.options,
            block=self.block,
            grid=self.grid,
            shared_bytes=self.shared_bytes,
            signature=self.signature,
        )

    def __repr__(self) -> str:
        return "<ProgramSource %s %s bufs=%d vars=%s>" % (
            self.form,
            self.name or self.entry,
            self.buf_count,
            list(self.var_names),
        )


def form_not_loaded(device: Any, form: str) -> NotSupportedError:
    """The error of a ``load_program`` given a form the device does not list."""
    return NotSupportedError(
        "%s does not load %r programs (it loads: %s)" % (device.spec, form, ", ".join(device.program_forms))
    )


#: :meth:`GraphRuntime.build`'s marker for an op that needs no graph node (a view).
NO_NODE: Any = object()


class Buffer(Protocol):
    """Bytes on a device: a window ``[offset, offset + nbytes)`` of a ``storage`` allocation."""

    storage: Any
    offset: int
    nbytes: int
    dtype: DType
    shape: Tuple[int, ...]
    #: The window's first byte: a host pointer when ``on_host``, else a device address.
    address: int
    #: True when ``address`` is a host pointer (a plain memmove may read or write it).
    on_host: bool

    def view(
        self, byte_offset: int, nbytes: int, dtype: Any = None, shape: Optional[Sequence[int]] = None
    ) -> "Buffer": ...

    def copyin(self, data: Any) -> "Buffer": ...

    def copyout(self) -> bytes: ...

    def copyout_into(self, dst: Any) -> Any: ...

    def numpy(self) -> Any: ...

    def tolist(self) -> Any: ...


class Launch(Protocol):
    """A kernel bound to its buffers and values: one call replays it."""

    #: True when the launch can become a node of the device's graph (:class:`GraphRuntime`).
    graphable: bool

    def __call__(self) -> None: ...

    def set_vals(self, vals: Sequence[int]) -> None: ...

    def set_dims(self, grid: Dims, block: Optional[Dims]) -> None: ...

    #: Run once and return the device time in seconds, or ``None`` when the device has no timer.
    timed: Optional[Callable[[], float]]


class Program(Protocol):
    """A loaded kernel entry point."""

    name: str
    buf_count: int
    var_names: Sequence[str]
    #: GPU convention: ``global_size`` counts blocks and ``local_size`` is the block.
    grid_in_blocks: bool
    #: The C entry a native runner may call directly (``void k(void **bufs..., int vals...)``), or None.
    native_address: Optional[int]
    closed: bool

    def bind(
        self,
        bufs: Sequence[Any],
        vals: Sequence[int],
        global_size: Optional[Sequence[int]] = None,
        local_size: Optional[Sequence[int]] = None,
        core_id_index: Optional[int] = None,
        threads: Optional[int] = None,
    ) -> Launch: ...

    def close(self) -> None: ...


class Event(Protocol):
    """A point in a device's timeline: record it, wait for it, time between two."""

    def record(self) -> None: ...

    def synchronize(self) -> None: ...

    def query(self) -> bool:
        """Whether everything before :meth:`record` has finished (never waits)."""
        ...

    def elapsed_since(self, start: "Event") -> float: ...


class GraphRuntime(Protocol):
    """A device's graph slot: runs of launches and copies submitted as one replayable unit."""

    def copy_node(self, dst: Buffer, src: Buffer) -> Optional[Any]:
        """A device-to-device copy as a graph node, or None when this copy cannot be one."""
        ...

    def build(self, groups: Sequence[Sequence[int]], nodes: Mapping[int, Any]) -> List[Any]:
        """Segments for ``groups`` (hazard-ordered op indices, level by level).

        ``nodes[i]`` is op ``i``'s node: a graphable :class:`Launch`, a copy node, :data:`NO_NODE`
        (nothing to run) or None (not graphable: it ends a run). A segment is either a list of op
        indices (run one by one by the plan) or a callable that replays a whole graph.
        """
        ...


class Device(Protocol):
    """A device: the fixed slots plans and executors use."""

    spec: DeviceSpec
    #: Host threads the device may use for one kernel's invocations (1 on a GPU).
    threads: int
    #: CUDA-style graphs, or None when the device replays op by op.
    graph: Optional[GraphRuntime]
    #: True when launches and copies are queued and return before the work is done (completion is
    #: seen through events); False when work is done when the call returns (the CPU).
    queues_work: bool
    #: The :class:`ProgramSource` forms :meth:`load_program` takes, preferred first.
    program_forms: Tuple[str, ...]

    def load_program(self, source: ProgramSource) -> Program:
        """Load ``source`` (a form of :attr:`program_forms`; another: :class:`NotSupportedError`)."""
        ...

    def allocate(self, nbytes_or_shape: Any, dtype: Any = "uint8") -> Buffer: ...

    def host_pool(self) -> Optional[Executor]:
        """A pool for running independent host ops at once; None when there is none to use
        (one thread, or the caller is one of the pool's own workers: waiting there can deadlock)."""
        ...

    def new_event(self, timing: bool = True) -> Event:
        """An event on this device's timeline (``timing=False``: for synchronisation only, cheaper)."""
        ...

    def synchronize(self) -> None: ...

    def close(self) -> None: ...


class ReleaseEpoch:
    """How many times something was closed or released, process-wide.

    Holders remember :attr:`value` and rescan only when it moved: one int comparison per replay
    instead of a scan of every program or buffer.
    """

    __slots__ = ("value", "_lock")

    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def bump(self) -> None:
        with self._lock:
            self.value += 1


#: Bumped whenever a program is closed or a buffer's storage is released.
RELEASE_EPOCH = ReleaseEpoch()

__all__ = [
    "Buffer",
    "CUBIN",
    "CUDA_C",
    "C_SOURCE",
    "Device",
    "Dims",
    "Event",
    "GraphRuntime",
    "LLVM_IR",
    "Launch",
    "MAPPED_OBJECT",
    "NO_NODE",
    "OBJECT",
    "PTX",
    "Program",
    "ProgramSource",
    "RELEASE_EPOCH",
    "ReleaseEpoch",
    "form_not_loaded",
]
