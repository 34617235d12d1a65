"""The shipped CUDA kernels: find a signature, read its PTX, load it on a device that loads PTX.

The library hands the device a :class:`~svod_min.devices.base.ProgramSource` of form PTX that carries
the signature (entry, buffers, variables, grid, block); the device knows nothing of the library (the
layer rule in ``.importlinter``).
"""

from __future__ import annotations

from typing import Any

from .. import resources
from ..devices.base import PTX, ProgramSource
from ..dtypes import dtype as to_dtype
from ..error import NotSupportedError
from .lookup import cuda_kernels, ptx_path
from .sig import CudaKernelSig


def find_cuda_sig(name: str, **params: Any) -> CudaKernelSig:
    """The :class:`CudaKernelSig` named ``name`` whose params match ``params`` (dtype defaults to float32)."""
    want = dict(params)
    if "dtype" in want:  # aliases as on the CPU ("f32", "half", ...)
        want["dtype"] = to_dtype(want["dtype"]).name
    sigs = cuda_kernels()
    candidates = [s for s in sigs if s.name == name]
    if not candidates:
        names = sorted({s.name for s in sigs})
        raise NotSupportedError(
            "library kernel %r has no CUDA form (CUDA library kernels: %s)" % (name, ", ".join(names))
        )
    for sig in candidates:
        have = dict(sig.params)
        if all(have.get(k) == v for k, v in want.items()) and ("dtype" in want or have.get("dtype") == "float32"):
            return sig
    options = sorted(str(dict(s.params)) for s in candidates)
    raise NotSupportedError("no CUDA library kernel %s%s; available: %s" % (name, want, ", ".join(options)))


def library_ptx(sig: CudaKernelSig) -> str:
    """The PTX text of ``sig``'s generated module."""
    ptx_path(sig.module)  # a missing module is KernelNotFoundError, named
    return resources.read_text("kernels/_generated/cuda/%s.ptx" % sig.module)


def library_source(sig: CudaKernelSig) -> ProgramSource:
    """``sig``'s PTX as a program source: its grid and block the defaults, its buffer checks applied by ``bind``."""
    return ProgramSource(
        PTX,
        library_ptx(sig),
        sig.entry,
        len(sig.buffers),
        sig.var_names,
        name="%s%s" % (sig.name, dict(sig.params)),
        block=sig.block,
        grid=sig.grid,
        signature=sig,
    )


def cuda_library_kernel(device: Any, name: str, **params: Any) -> Any:
    """A kernel of the shipped PTX library loaded on ``device`` (one that loads PTX), grid and block included."""
    return device.load_program(library_source(find_cuda_sig(name, **params)))


__all__ = ["cuda_library_kernel", "find_cuda_sig", "library_ptx", "library_source"]
