"""The library's argument checks: variables, buffers (dtype, size, writability) and overlap.

What :meth:`svod_min.kernels.LibraryKernel.run` refuses before anything
runs, and what a plan re-checks (:func:`check_bound_args`) whenever its
variables change. Errors are :class:`~svod_min.error.KernelArgumentError`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple, Union

from ..error import KernelArgumentError, KernelParamError
from .elementwise import c_dtype
from .lookup import sig_for
from .sig import CORE_COUNT, CORE_ID, BufferArg, KernelSig, compile_expr, var_value

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def check_vars(sig: KernelSig, values: Mapping[str, Any]) -> Dict[str, int]:
    """The caller's variables as int32 values (core ids excluded), checked against the signature."""
    auto = {CORE_ID, CORE_COUNT} if sig.threaded else set()
    given = dict(values)
    if CORE_COUNT in given and sig.threaded:
        raise KernelArgumentError("%s: pass threads=..., not %s" % (sig.name, CORE_COUNT))
    unknown = sorted(set(given) - set(sig.var_names))
    if unknown or (auto & set(given)):
        raise KernelArgumentError(
            "%s takes variables %s, got unexpected %s"
            % (sig.name, [v for v in sig.var_names if v not in auto], unknown or sorted(auto & set(given)))
        )
    missing = [v.name for v in sig.vars if v.name not in given and v.name not in auto]
    if missing:
        raise KernelArgumentError(
            "%s needs variables %s (missing %s)" % (sig.name, [v for v in sig.var_names if v not in auto], missing)
        )
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
            raise KernelArgumentError(
                "%s: variable %s=%r is outside [%d, %d]" % (sig.name, var.name, value, low, INT32_MAX)
            )
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
        raise KernelArgumentError(
            "raw addresses cannot be size-checked; pass numpy arrays or CpuBuffers "
            "(or use kernel.program.execute for unchecked dispatch)"
        )
    raise KernelArgumentError("cannot pass %s to a kernel (numpy array or CpuBuffer expected)" % type(buf).__name__)


_CHAR_NAMES = {"f": "float32", "d": "float64", "e": "float16", "i": "int32", "?": "bool", "B": "uint8", "H": "uint16"}


def _ordered(sig: KernelSig, buffers: Union[Sequence[Any], Mapping[str, Any]]) -> List[Any]:
    names = [b.name for b in sig.buffers]
    if isinstance(buffers, Mapping):
        extra, missing = sorted(set(buffers) - set(names)), [n for n in names if n not in buffers]
        if extra or missing:
            raise KernelArgumentError(
                "%s takes buffers %s (missing %s, unexpected %s)" % (sig.name, names, missing, extra)
            )
        return [buffers[n] for n in names]
    seq = list(buffers)
    if len(seq) != len(names):
        raise KernelArgumentError("%s takes %d buffers %s, got %d" % (sig.name, len(names), names, len(seq)))
    return seq


def check_buffers(
    sig: KernelSig, buffers: Union[Sequence[Any], Mapping[str, Any]], env: Mapping[str, int]
) -> List[int]:
    """The buffers' addresses in signature order, after the dtype, size, writability and overlap checks."""
    spans = []
    for arg, buf in zip(sig.buffers, _ordered(sig, buffers)):
        addr, nbytes, dname, writable = _describe(buf)
        want = c_dtype(arg.dtype)
        if not _np_dtype_ok(arg.dtype, dname):
            raise KernelArgumentError("%s: buffer %s must be %s, got %s" % (sig.name, arg.name, arg.dtype, dname))
        need = compile_expr(arg.count)(env)
        have = nbytes // want.itemsize
        if need > have:
            raise KernelArgumentError(
                "%s: buffer %s holds %d %s elements but %s = %d is needed for %s"
                % (sig.name, arg.name, have, arg.dtype, arg.count, need, dict(env))
            )
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
    twin = sig if isinstance(sig, KernelSig) else sig_for((sig.name, sig.params))
    checks, inplace = (twin.checks, twin.inplace) if twin is not None else ((), ())
    for var in sig.vars:
        value = env.get(var.name)
        if var.name != CORE_ID and value is not None and value < var.min:
            raise KernelArgumentError(
                "%s: variable %s=%d is below its minimum %d" % (sig.name, var.name, value, var.min)
            )
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
        for b, b0, bn in spans[i + 1 :]:
            if not (a.writes or b.writes) or an == 0 or bn == 0 or a0 + an <= b0 or b0 + bn <= a0:
                continue
            if a0 == b0 and an == bn and ((a.name, b.name) in allowed or (b.name, a.name) in allowed):
                continue
            raise KernelArgumentError(
                "%s: buffers %s and %s overlap in memory (%s is written)"
                % (name, a.name, b.name, a.name if a.writes else b.name)
            )


__all__ = ["INT32_MAX", "INT32_MIN", "check_bound_args", "check_buffers", "check_vars"]
