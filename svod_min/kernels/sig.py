"""Kernel signatures (what the generated stub module is made of) and size expressions.

A signature says everything a caller needs without reading C: the entry
point, each buffer's dtype, role (``r``/``w``/``rw``) and element count as an
expression of the integer variables, the variables in call order, launch
dimensions and cost expressions. Expressions are a small integer language
(:mod:`svod_min.expr` with comparisons, ``and``/``or`` and conditionals),
compiled once per text into closures.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from .. import expr as size_expr
from ..error import KernelParamError
from ..expr import SizeExpr
from .elementwise import elementwise_parts

Dim = Union[int, str]
ROLES = ("r", "w", "rw")
CORE_ID = "core_id"
CORE_COUNT = "core_id_count"
#: The default ``ids_per_thread``: for kernels whose core ids cost only their share of the work (4 and 8 balanced
#: gelu 2^22 on 2 vCPUs alike; more ids only add ~1 us of Python each).
IDS_PER_THREAD = 8


@dataclass(frozen=True)
class BufferArg:
    """One buffer argument: name, dtype name, role and element-count expression."""

    name: str
    dtype: str
    role: str
    count: str

    @property
    def writes(self) -> bool:
        return "w" in self.role


@dataclass(frozen=True)
class VarArg:
    """One int32 variable and its inclusive lower bound.

    ``kind="f32"``: the int32 carries the bits of a float32 (a real-valued
    parameter such as layernorm's eps); callers pass a float and
    :func:`var_value` converts it.
    """

    name: str
    min: int = 0
    kind: str = "int"


@dataclass(frozen=True)
class KernelSig:
    """A CPU library kernel: one entry point in the rendered C / prebuilt objects."""

    name: str
    params: Tuple[Tuple[str, Any], ...]
    entry: str
    family: str  # source file _generated/c/<family>.c
    buffers: Tuple[BufferArg, ...]
    vars: Tuple[VarArg, ...]
    global_size: Tuple[Dim, Dim, Dim]
    flops: str = "0"
    bytes: str = "0"
    work: str = "1"  # size driving the automatic thread count
    grain: int = 1 << 16  # work per thread below which fewer threads are used
    parallelism: str = "1"  # independent chunks: more core ids than this would idle
    #: Core ids per thread when threaded (each at least a grain of work): threads claim them one at a
    #: time, so a slower CPU takes fewer. 1 where every id repeats a fixed cost (matmul packs all of B).
    ids_per_thread: int = IDS_PER_THREAD
    checks: Tuple[str, ...] = ()  # extra conditions on the variables
    inplace: Tuple[Tuple[str, str], ...] = ()  # (out, in) pairs that may be the same memory
    doc: str = ""

    @property
    def var_names(self) -> Tuple[str, ...]:
        names = self.__dict__.get("_var_names")
        if names is None:  # memoised: run() asks on every dispatch (frozen: write __dict__ directly)
            names = self.__dict__["_var_names"] = tuple(v.name for v in self.vars)
        return names

    @property
    def threaded(self) -> bool:
        return CORE_ID in self.var_names

    @property
    def argtypes(self) -> Tuple[Any, ...]:
        """The ctypes prototype's argument types (svod calling convention)."""
        return (ctypes.c_void_p,) * len(self.buffers) + (ctypes.c_int32,) * len(self.vars)

    @property
    def prototype(self) -> Any:
        """``ctypes.CFUNCTYPE(None, *argtypes)``."""
        return ctypes.CFUNCTYPE(None, *self.argtypes)

    @property
    def param_dict(self) -> Dict[str, Any]:
        return dict(self.params)


@dataclass(frozen=True)
class CudaKernelSig:
    """A CUDA library kernel in a generated PTX module (launched by the CUDA device, later)."""

    name: str
    params: Tuple[Tuple[str, Any], ...]
    entry: str
    module: str  # _generated/cuda/<module>.ptx
    buffers: Tuple[BufferArg, ...]
    vars: Tuple[VarArg, ...]
    grid: Tuple[Dim, Dim, Dim]
    block: Tuple[int, int, int]
    shared_bytes: int = 0
    flops: str = "0"
    bytes: str = "0"
    doc: str = ""
    ctypes_args: Tuple[str, ...] = field(default=())

    @property
    def var_names(self) -> Tuple[str, ...]:
        return tuple(v.name for v in self.vars)


def elementwise_sig(
    name: str,
    params: Mapping[str, Any],
    entry: str,
    expr: str,
    *,
    dtype: object,
    out_dtype: object = None,
    input_dtypes: Optional[Mapping[str, object]] = None,
    inputs: Optional[Tuple[str, ...]] = None,
    doc: str = "",
) -> KernelSig:
    """The signature of an elementwise kernel (library or fused): out, then the inputs, n."""
    parsed, _c, out, ins, _v = elementwise_parts(
        expr, dtype=dtype, out_dtype=out_dtype, input_dtypes=input_dtypes, inputs=inputs
    )
    bufs = (BufferArg("out", out.name, "w", "n"),) + tuple(BufferArg(n, dt.name, "r", "n") for n, dt in ins)
    nbytes = out.itemsize + sum(dt.itemsize for _, dt in ins)
    return KernelSig(
        name,
        tuple(sorted(params.items())),
        entry,
        "elementwise",
        bufs,
        (VarArg("n", 0), VarArg(CORE_COUNT, 1), VarArg(CORE_ID, 0)),
        (CORE_COUNT, 1, 1),
        flops="%d*n" % parsed.flops,
        bytes="%d*n" % nbytes,
        work="n",
        grain=1 << 16,
        parallelism="ceildiv(n,64)",
        inplace=tuple(("out", n) for n, dt in ins if dt.name == out.name),
        doc=doc,
    )


# --- the generated module's plain rows ---------------------------------------------
# The signature module holds literals only (dicts of str/int/tuples): unmarshalling
# those from the .pyc costs far less than building thousands of dataclasses at
# import; a KernelSig is made when a kernel is first asked for.


def to_row(sig: Any) -> Dict[str, Any]:
    """A KernelSig / CudaKernelSig as a dict of literals (buffers and vars as tuples)."""
    row: Dict[str, Any] = {}
    for f in dataclasses.fields(sig):
        value = getattr(sig, f.name)
        if f.name == "buffers":
            value = tuple((b.name, b.dtype, b.role, b.count) for b in value)
        elif f.name == "vars":
            value = tuple((v.name, v.min, v.kind) for v in value)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        row[f.name] = value
    return row


def _from_row(cls: Any, row: Mapping[str, Any]) -> Any:
    data = dict(row)
    data["buffers"] = tuple(BufferArg(*b) for b in data["buffers"])
    data["vars"] = tuple(VarArg(*v) for v in data["vars"])
    return cls(**data)


def sig_from_row(row: Mapping[str, Any]) -> KernelSig:
    return _from_row(KernelSig, row)


def cuda_sig_from_row(row: Mapping[str, Any]) -> CudaKernelSig:
    return _from_row(CudaKernelSig, row)


# --- size expressions -------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def compile_expr(text: Union[str, int]) -> SizeExpr:
    """``text`` -> a function of a ``{var: int}`` mapping; raises KernelParamError when malformed.

    The library's dialect of :mod:`svod_min.expr`: sizes plus comparisons,
    ``and``/``or`` and conditionals (its argument checks use them).
    """
    return size_expr.compile_expr(text, conditions=True, error=KernelParamError)


def var_value(var: VarArg, value: Any) -> int:
    """The int32 a caller's value becomes: ints as they are, floats as float32 bits for ``f32`` vars."""
    if var.kind == "f32":
        try:
            bits = struct.unpack("<i", struct.pack("<f", float(value)))[0]
        except (TypeError, ValueError, OverflowError) as exc:
            raise KernelParamError("variable %s=%r is not a float32 value (%s)" % (var.name, value, exc)) from None
        return bits
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, bool):  # True is an int to Python, not a size
            raise KernelParamError("variable %s=%r is a boolean, not an integer" % (var.name, value))
        try:
            return int(value.__index__())
        except AttributeError:
            raise KernelParamError("variable %s=%r is not an integer" % (var.name, value)) from None
    return value


def eval_dim(dim: Dim, env: Mapping[str, int]) -> int:
    """A launch dimension: an int, or an expression over the variables."""
    return dim if isinstance(dim, int) else int(compile_expr(dim)(env))


__all__ = [
    "BufferArg",
    "CORE_COUNT",
    "CORE_ID",
    "CudaKernelSig",
    "KernelSig",
    "ROLES",
    "VarArg",
    "compile_expr",
    "cuda_sig_from_row",
    "sig_from_row",
    "to_row",
    "elementwise_sig",
    "eval_dim",
    "var_value",
]
