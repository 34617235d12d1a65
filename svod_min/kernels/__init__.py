"""The svod_min kernel library: prebuilt and on-demand compute kernels by name.

    from svod_min import kernels
    mm = kernels.get("matmul", dtype="float32")     # LibraryKernel, ready to run
    mm.run([c, a, b], M=512, N=256, K=384)          # numpy arrays or CpuBuffers
    f = kernels.fused("relu(a*b+c)")                # compiled now (needs a C compiler)
    f(out, a, b, c) ...

Kernels come from the templates under ``templates/`` rendered by
``python -m codegen`` (see docs/kernels.md). ``get`` uses this machine's
prebuilt object (x86-64 baseline / AVX2, aarch64), which needs no compiler,
and compiles the rendered source only when no prebuilt object has the
kernel. Shapes are run-time int32 variables; dtypes and tuning parameters
pick the instance. ``run`` validates every buffer against the kernel's
declared element counts before anything executes.

Nothing here imports jinja2, and importing this package maps nothing: each
prebuilt object is loaded on first use, once per process.

Modules: :mod:`.library` (``get``, ``fused``, :class:`LibraryKernel`),
:mod:`.lookup` (the catalogue: ``find_sig``, ``names``, CUDA kernels, PTX
paths, the host's prebuilt variant), :mod:`.checks` (argument checks),
:mod:`.views` (variables of strided views), :mod:`.tuning` (the autotuner's
store, read by ``get(shape=...)``), :mod:`.sig` (signatures and their size
expressions), :mod:`.elementwise` (the op table and fused-expression
renderer), :mod:`.sources` and :mod:`.variants` (rendered C, prebuilt objects).
"""

from __future__ import annotations

from ..error import KernelArgumentError, KernelNotFoundError, KernelParamError
from .checks import check_bound_args
from .cuda_library import cuda_library_kernel, find_cuda_sig, library_ptx
from .elementwise import EXPR_FUNCTIONS, OPS
from .library import LibraryKernel, fused, get
from .lookup import GEN_DIR, PREBUILT_ENV, catalogue, cuda_kernels, find_sig, host_variant, names, ptx_path
from .sig import BufferArg, CudaKernelSig, KernelSig, VarArg
from .views import permute_vars, reduce_vars

__all__ = [
    "BufferArg",
    "CudaKernelSig",
    "EXPR_FUNCTIONS",
    "GEN_DIR",
    "KernelArgumentError",
    "KernelNotFoundError",
    "KernelParamError",
    "KernelSig",
    "LibraryKernel",
    "OPS",
    "PREBUILT_ENV",
    "VarArg",
    "catalogue",
    "check_bound_args",
    "cuda_kernels",
    "cuda_library_kernel",
    "find_cuda_sig",
    "find_sig",
    "fused",
    "get",
    "host_variant",
    "library_ptx",
    "names",
    "permute_vars",
    "ptx_path",
    "reduce_vars",
]
