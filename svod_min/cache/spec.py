"""What a compiled kernel is: :class:`CompiledSpec` (what a backend produced) and
:class:`CachedKernel` (a loaded kernel that plans share), as in svod.
"""

from __future__ import annotations

from builtins import bytes as _bytes  # the dataclass field ``bytes`` shadows it in the class body
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple, Union

from ..error import PlanError

Size3 = Tuple[int, int, int]
SymSize = Tuple[Union[int, str], ...]


def _size3(value: Optional[Iterable[int]], what: str) -> Optional[Size3]:
    """Normalise a launch size to a 3-tuple of positive ints (or None)."""
    if value is None:
        return None
    dims = tuple(value)
    if len(dims) != 3 or not all(isinstance(d, int) and d > 0 for d in dims):
        raise PlanError("%s must be three positive ints, got %r" % (what, value))
    return dims  # type: ignore[return-value]


@dataclass
class CompiledSpec:
    """Compilation result carrying source (JIT backends) or bytes (AOT backends).

    Mirrors svod's ``CompiledSpec`` minus the AST (the cache key is built from
    content instead, see :func:`content_key`).
    """

    name: str  # entry point
    src: Optional[str] = None
    bytes: _bytes = b""
    var_names: List[str] = field(default_factory=list)
    global_size: Optional[Size3] = None
    local_size: Optional[Size3] = None
    buf_count: int = 0

    def __post_init__(self) -> None:
        self.var_names = list(self.var_names)
        self.global_size = _size3(self.global_size, "global_size")
        self.local_size = _size3(self.local_size, "local_size")
        if self.buf_count < 0:
            raise PlanError("buf_count must be >= 0, got %d" % self.buf_count)

    @classmethod
    def from_source(
        cls,
        name: str,
        src: str,
        buf_count: int,
        *,
        var_names: Sequence[str] = (),
        global_size: Optional[Size3] = None,
        local_size: Optional[Size3] = None,
    ) -> "CompiledSpec":
        """Spec for a JIT backend: the runtime compiles ``src`` itself."""
        return cls(name, src, b"", list(var_names), global_size, local_size, buf_count)

    @classmethod
    def from_bytes(
        cls,
        name: str,
        data: _bytes,
        *,
        var_names: Sequence[str] = (),
        global_size: Optional[Size3] = None,
        local_size: Optional[Size3] = None,
        buf_count: int = 0,
    ) -> "CompiledSpec":
        """Spec for an AOT backend: ``data`` is already compiled."""
        return cls(name, None, _bytes(data), list(var_names), global_size, local_size, buf_count)

    @classmethod
    def from_source_with_sizes(
        cls,
        name: str,
        src: str,
        global_size: Optional[Size3],
        local_size: Optional[Size3],
        buf_count: int,
        *,
        var_names: Sequence[str] = (),
    ) -> "CompiledSpec":
        """JIT spec with explicit work sizes (CPU threading: ``(threads, 1, 1)``)."""
        return cls(name, src, b"", list(var_names), global_size, local_size, buf_count)

    @property
    def is_source(self) -> bool:
        """True for a JIT spec (source present), False for precompiled bytes."""
        return self.src is not None


@dataclass(eq=False)  # identity semantics: ``program`` owns native resources
class CachedKernel:
    """A compiled, loaded kernel that plans share (svod's ``CachedKernel``).

    ``global_size`` / ``local_size`` entries are ints or size expressions
    (strings) that the plan evaluates with runtime variables before dispatch.
    ``code`` is the kernel's source text; a kernel whose text is costly to produce and rarely read (a
    library kernel's C unit is cut from a family file of megabytes) leaves it empty and names it through
    ``code_of`` instead: :meth:`source_text` reads either.
    """

    program: Any
    device: str
    code: str
    entry_point: str
    var_names: List[str] = field(default_factory=list)
    globals: List[int] = field(default_factory=list)
    outs: List[int] = field(default_factory=list)
    ins: List[int] = field(default_factory=list)
    host_parallel_safe: bool = False
    global_size: SymSize = (1, 1, 1)
    local_size: Optional[SymSize] = None
    code_of: Optional[Callable[[], str]] = field(default=None, repr=False)

    def source_text(self) -> str:
        """The kernel's source text: ``code``, or what ``code_of`` makes of it when set."""
        return self.code_of() if self.code_of is not None else self.code

    def __post_init__(self) -> None:
        self.global_size = tuple(self.global_size)
        if len(self.global_size) != 3:
            raise PlanError("global_size must have 3 entries, got %r" % (self.global_size,))
        if self.local_size is not None:
            self.local_size = tuple(self.local_size)
            if len(self.local_size) != 3:
                raise PlanError("local_size must have 3 entries, got %r" % (self.local_size,))


__all__ = ["CachedKernel", "CompiledSpec", "Size3", "SymSize"]
