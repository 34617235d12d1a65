"""Kernel arguments and launch dimensions: pure Python, no driver needed.

svod's convention: a kernel takes 8-byte device pointers, then 4-byte int32
scalars, packed once into one :class:`ArgBlob` per bound launch and patched in
place on replay; ``global_size`` counts **blocks** (it is the grid),
``local_size`` is the block. Size expressions (a program's default grid, the
kernel library's launch sizes) are :mod:`svod_min.expr`'s language.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ... import expr as size_expr
from ...error import ArgumentRangeError, ExecutionError, LaunchConfigError, PlanError, PtxError
from .enums import CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE, CU_LAUNCH_PARAM_END

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
U64_MAX = 2**64 - 1


def as_int(value: Any, what: str) -> int:
    """``value`` as a Python int (ints and ``__index__`` types, never floats); ArgumentRangeError names ``what``."""
    if type(value) is int:
        return value
    if isinstance(value, float):
        raise ArgumentRangeError("%s=%r is not an integer" % (what, value))
    try:
        return int(value.__index__())
    except (AttributeError, TypeError):  # TypeError: e.g. a numpy array with more than one element
        raise ArgumentRangeError("%s=%r is not an integer" % (what, value)) from None


def int32_arg(value: Any, label: str) -> int:
    """``value`` as a kernel's int32 scalar; :class:`ArgumentRangeError` names ``label`` otherwise."""
    number = as_int(value, label)
    if not INT32_MIN <= number <= INT32_MAX:
        raise ArgumentRangeError(
            "variable %s=%d does not fit the kernel's int32 parameter [%d, %d]" % (label, number, INT32_MIN, INT32_MAX)
        )
    return number


def as_sequence(value: Any, what: str, owner: str) -> List[Any]:
    """``value`` (a list, tuple or other sized iterable, not a string) as a list; ExecutionError otherwise."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise ExecutionError("%s: %s must be a sequence, got %s %r" % (owner, what, type(value).__name__, value))
    try:
        return list(value)
    except TypeError:  # e.g. a 0-d numpy array
        raise ExecutionError(
            "%s: %s must be a sequence, got %s %r" % (owner, what, type(value).__name__, value)
        ) from None


# --- kernel arguments -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgSlot:
    """One argument's place in the blob: ``kind`` is ``"ptr"`` (8 bytes) or ``"i32"`` (4 bytes)."""

    kind: str
    index: int
    offset: int
    size: int


class ArgBlob:
    """One kernel's arguments: 8-byte pointers, then 4-byte int32 scalars, patchable in place.

    ``extra`` is the ``cuLaunchKernel`` ``extra`` array
    (``BUFFER_POINTER, blob, BUFFER_SIZE, &size, END``); ``kernel_params`` the
    ``void*[]`` alternative (pointers into the blob), used for graph nodes.
    ``size`` has no tail padding: the driver wants the exact parameter size.
    Iterating gives ``(buffer, size, layout)``.
    """

    def __init__(self, pointers: Sequence[int], ints: Sequence[int]) -> None:
        self.nptr, self.nint = len(pointers), len(ints)
        self.size = 8 * self.nptr + 4 * self.nint
        self.buffer = (ctypes.c_uint64 * max(1, (self.size + 7) // 8))()  # 8-byte aligned
        self._ptrs = (ctypes.c_uint64 * self.nptr).from_buffer(self.buffer) if self.nptr else None
        self._ints = (ctypes.c_int32 * self.nint).from_buffer(self.buffer, 8 * self.nptr) if self.nint else None
        self.layout = _layout(self.nptr, self.nint)
        self.version = 0  # bumped by every patch (graph nodes re-upload only changed blobs)
        self.on_change: Optional[Callable[[], None]] = None  # told of every patch (a BoundLaunch's graphs)
        base = ctypes.addressof(self.buffer)
        self._size_t = ctypes.c_size_t(self.size)
        self.extra = (ctypes.c_void_p * 5)(
            CU_LAUNCH_PARAM_BUFFER_POINTER,
            base,
            CU_LAUNCH_PARAM_BUFFER_SIZE,
            ctypes.addressof(self._size_t),
            CU_LAUNCH_PARAM_END,
        )
        self.kernel_params = (ctypes.c_void_p * max(1, len(self.layout)))(*[base + s.offset for s in self.layout])
        for i, value in enumerate(pointers):
            self.set_ptr(i, value)
        for j, value in enumerate(ints):
            self.set_int(j, value)
        self.version = 0

    def __iter__(self) -> Any:
        return iter((self.buffer, self.size, self.layout))

    def __repr__(self) -> str:
        return "<ArgBlob %d ptrs, %d ints, %d bytes>" % (self.nptr, self.nint, self.size)

    def set_ptr(self, index: int, pointer: int) -> None:
        """Patch pointer ``index`` (a device address, 0 <= p < 2**64)."""
        if not 0 <= index < self.nptr:
            raise IndexError("pointer index %d out of range (%d pointers)" % (index, self.nptr))
        value = as_int(pointer, "pointer argument %d" % index)
        if not 0 <= value <= U64_MAX:
            raise ArgumentRangeError("pointer argument %d=%#x is not a 64-bit address" % (index, value))
        self._ptrs[index] = value  # type: ignore[index]
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def set_int(self, index: int, value: Any, name: Optional[str] = None) -> None:
        """Patch int32 scalar ``index``; values outside int32 raise :class:`ArgumentRangeError`."""
        if not 0 <= index < self.nint:
            raise IndexError("int index %d out of range (%d ints)" % (index, self.nint))
        number = int32_arg(value, name or "int argument %d" % index)
        self._ints[index] = number  # type: ignore[index]
        self.version += 1
        if self.on_change is not None:
            self.on_change()

    def pointers(self) -> List[int]:
        return list(self._ptrs) if self._ptrs is not None else []

    def ints(self) -> List[int]:
        return list(self._ints) if self._ints is not None else []

    def tobytes(self) -> bytes:
        """The ``size`` bytes the driver reads."""
        return ctypes.string_at(ctypes.addressof(self.buffer), self.size)


@functools.lru_cache(maxsize=256)
def _layout(nptr: int, nint: int) -> Tuple[ArgSlot, ...]:
    ptrs = tuple(ArgSlot("ptr", i, 8 * i, 8) for i in range(nptr))
    return ptrs + tuple(ArgSlot("i32", j, 8 * nptr + 4 * j, 4) for j in range(nint))


def pack_kernel_args(pointers: Sequence[int], ints: Sequence[Any] = ()) -> ArgBlob:
    """Pack svod kernel arguments: ``(buffer, size, layout) = pack_kernel_args([p0, p1], [n])``."""
    return ArgBlob(list(pointers), list(ints))


# --- launch dimensions ----------------------------------------------------------------------------

Dims3 = Tuple[int, int, int]


@dataclass(frozen=True)
class LaunchLimits:
    """Per-device launch limits (defaults: every NVIDIA GPU since compute capability 3.0)."""

    max_threads_per_block: int = 1024
    max_block: Dims3 = (1024, 1024, 64)
    max_grid: Dims3 = (2**31 - 1, 65535, 65535)
    max_shared_bytes: int = 48 * 1024
    #: Shared bytes per block a kernel may opt in to (cuFuncSetAttribute); 0 means max_shared_bytes.
    max_shared_optin: int = 0

    @property
    def shared_ceiling(self) -> int:
        """The most shared memory (static + dynamic) one block can have, opted in or not."""
        return max(self.max_shared_bytes, self.max_shared_optin)

    def with_threads(self, threads: int) -> "LaunchLimits":
        """The same limits with ``max_threads_per_block`` lowered to ``threads`` (a kernel's own limit)."""
        if threads <= 0 or threads >= self.max_threads_per_block:
            return self
        return LaunchLimits(threads, self.max_block, self.max_grid, self.max_shared_bytes, self.max_shared_optin)


DEFAULT_LIMITS = LaunchLimits()


def _dims3(value: Any, what: str) -> Dims3:
    if value is None:
        return (1, 1, 1)
    if type(value) is tuple and len(value) == 3 and all(type(v) is int and v >= 1 for v in value):
        return value  # the common, already normalised case
    items = dims_items(value, what)
    if not 1 <= len(items) <= 3:
        raise LaunchConfigError("%s must have 1 to 3 dimensions, got %r" % (what, value))
    dims = []
    for axis, item in enumerate(items):
        try:
            number = as_int(item, "%s[%d]" % (what, axis))
        except ArgumentRangeError as exc:
            raise LaunchConfigError(str(exc)) from None
        if number < 1:
            raise LaunchConfigError(
                "%s[%d]=%d: every launch dimension must be a positive integer" % (what, axis, number)
            )
        dims.append(number)
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def dims_items(value: Any, what: str) -> List[Any]:
    """A launch size as a list: an int is one dimension; any sequence (list, tuple, numpy array) its items."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        return [value]  # a scalar: as_int says what is wrong with it
    try:
        return list(value)
    except TypeError:  # a 0-d numpy array has __len__ but is a scalar
        return [value]


def launch_dims(global_size: Any, local_size: Any = None, limits: Optional[LaunchLimits] = None) -> Tuple[Dims3, Dims3]:
    """svod launch sizes -> ``(grid, block)``: ``global_size`` counts BLOCKS, ``local_size`` threads per block.

    Missing trailing dimensions are 1; ``local_size=None`` is one thread per
    block. Everything is checked against ``limits`` (the device's) and
    :class:`LaunchConfigError` raised before any launch.
    """
    lim = limits or DEFAULT_LIMITS
    grid, block = _dims3(global_size, "global_size"), _dims3(local_size, "local_size")
    for axis in range(3):
        if grid[axis] > lim.max_grid[axis]:
            raise LaunchConfigError(
                "grid dimension %d is %d blocks; the device allows %d (svod's global_size counts blocks, not threads)"
                % (axis, grid[axis], lim.max_grid[axis])
            )
        if block[axis] > lim.max_block[axis]:
            raise LaunchConfigError(
                "block dimension %d is %d threads; the device allows %d" % (axis, block[axis], lim.max_block[axis])
            )
    threads = block[0] * block[1] * block[2]
    if threads > lim.max_threads_per_block:
        raise LaunchConfigError(
            "block %s has %d threads; at most %d per block are allowed" % (block, threads, lim.max_threads_per_block)
        )
    return grid, block


def check_shared_bytes(shared_bytes: Any, limits: Optional[LaunchLimits] = None, static_bytes: int = 0) -> int:
    """Validate a dynamic shared-memory size: with the kernel's static shared memory it must fit one block.

    Above ``max_shared_bytes`` (48 KiB) the kernel has to opt in
    (:meth:`CudaProgram` does, with ``cuFuncSetAttribute``) up to the
    device's ``max_shared_optin``.
    """
    lim = limits or DEFAULT_LIMITS
    number = as_int(shared_bytes, "shared_bytes")
    room = lim.shared_ceiling - static_bytes
    if not 0 <= number <= room:
        raise LaunchConfigError(
            "shared_bytes=%d is outside [0, %d] (%d bytes per block, %d of them static in the kernel)"
            % (number, room, lim.shared_ceiling, static_bytes)
        )
    return number


# --- a program's default grid and block ------------------------------------------------------------


def check_grid(grid: Any, var_names: Sequence[str], owner: str) -> Optional[Tuple[Any, ...]]:
    """A program's default grid, checked at load: 1 to 3 entries, each a positive int or a size expression
    over ``var_names`` (known variables and calls with the right arity, no division by a constant 0)."""
    if grid is None:
        return None
    items = dims_items(grid, "grid")
    if not 1 <= len(items) <= 3:
        raise LaunchConfigError("%s: grid must have 1 to 3 dimensions, got %r" % (owner, grid))
    out: List[Any] = []
    for axis, item in enumerate(items):
        if isinstance(item, str):
            check_grid_expr(item, axis, var_names, owner)
            out.append(item)
            continue
        try:
            number = as_int(item, "grid[%d]" % axis)
        except ArgumentRangeError as exc:
            raise LaunchConfigError("%s: %s (an int or a size expression)" % (owner, exc)) from None
        if number < 1:
            raise LaunchConfigError(
                "%s: grid[%d]=%d: every launch dimension must be a positive integer" % (owner, axis, number)
            )
        out.append(number)
    return tuple(out)


class _ConstantZeroDivisor(Exception):
    """Raised by :class:`_AnyValue` for ``x // 0`` or ``x % 0`` where the 0 is a constant."""


class _AnyValue:
    """Stands for every variable while a grid expression is checked at load: arithmetic with it gives it back,
    so only the constant parts are computed, and a constant zero divisor is caught before any launch."""

    def _same(self, *_other: Any) -> "_AnyValue":
        return self

    def _divide(self, other: Any) -> "_AnyValue":
        if type(other) is int and other == 0:
            raise _ConstantZeroDivisor()
        return self

    def _unordered(self, _other: Any) -> bool:  # min()/max() need an answer; any one will do
        return False

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __neg__ = __pos__ = _same
    __rfloordiv__ = __rmod__ = _same
    __floordiv__ = __mod__ = _divide
    __lt__ = __le__ = __gt__ = __ge__ = _unordered


def check_grid_expr(text: str, axis: int, var_names: Sequence[str], owner: str) -> None:
    """One grid entry: valid in :mod:`svod_min.expr`, over ``var_names`` only, never dividing by a constant 0."""
    where = "%s: grid[%d]=%r" % (owner, axis, text)
    try:
        compiled = size_expr.compile_expr(text)
        unknown = sorted(compiled.names - set(var_names))
        if unknown:
            raise LaunchConfigError("%s: unknown variable %r (variables: %s)" % (where, unknown[0], list(var_names)))
        compiled(dict.fromkeys(compiled.names, _AnyValue()))
    except PlanError as exc:
        raise LaunchConfigError("%s: %s" % (where, exc)) from None
    except _ConstantZeroDivisor:
        raise LaunchConfigError("%s: division by zero" % where) from None


def grid_dim(dim: Any, env: Dict[str, int]) -> int:
    """A grid entry's value: an int as is, an expression evaluated over ``env`` (PlanError when it cannot be)."""
    return dim if isinstance(dim, int) else size_expr.evaluate(dim, env)


def check_block(local_size: Any, limits: LaunchLimits, owner: str) -> Optional[Dims3]:
    """A program's default block, checked at load against the kernel's limits."""
    if local_size is None:
        return None
    try:
        return launch_dims(1, local_size, limits)[1]
    except LaunchConfigError as exc:
        raise LaunchConfigError("%s: %s" % (owner, exc)) from None


# --- launch sizes for plans -------------------------------------------------------------------------


def plan_dims(dims: Sequence[Any]) -> Tuple[Any, ...]:
    """Kernel-library launch sizes as plan launch sizes: the same :mod:`svod_min.expr` texts, checked.

    :class:`PtxError` for a size outside the plan's language (a kernel library written in another dialect).
    """
    return tuple(d if isinstance(d, int) else _plan_size(d) for d in dims)


def _plan_size(text: Any) -> str:
    try:
        size_expr.compile_expr(str(text))
    except PlanError:
        raise PtxError("launch size %r cannot be written as a plan expression" % (text,)) from None
    return str(text)
