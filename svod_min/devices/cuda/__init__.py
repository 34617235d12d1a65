"""The CUDA device: the NVIDIA driver API through ctypes, nothing else (see docs/cuda.md).

Modules, bottom up (each imports only those above it):

* :mod:`.enums` - ``cuda.h`` constants.
* :mod:`.driver` - the binding: C types and structs, the one prototype table,
  :class:`CudaLibrary` (lazy binding, the one checked call path raising
  :class:`CudaError`), the fork guard, the release epoch, shutdown-safe finalizers.
* :mod:`.launch` - argument blobs (:func:`pack_kernel_args`), launch dimensions
  (:func:`launch_dims`), default grids in :mod:`svod_min.expr`'s language, :func:`plan_dims`.
* :mod:`.ptx` - PTX ISA versions per driver, :func:`validate_ptx`,
  :func:`rewrite_ptx_version`, kernel parameters, :func:`ptxas_check`.
* :mod:`.cubin` - a CUBIN's kernel parameter sizes (:func:`cubin_entry_params`).
* :mod:`.nvrtc` - CUDA C to PTX (:func:`compile_cuda`), optional.
* :mod:`.memory` - :class:`CudaStorage`, :class:`CudaBuffer`, :class:`CudaEvent`, :class:`StagingPool`.
* :mod:`.program` - :class:`CudaModule`, :class:`CudaProgram`, :class:`BoundLaunch`.
* :mod:`.graph` - :class:`CudaGraph`, :class:`GraphCopy`.
* :mod:`.device` - :class:`CudaDevice`.
* :mod:`.loader` - :func:`load_driver`, :class:`CudaDriver`, :func:`register_cuda`, :func:`info_lines`.

Every public name is re-exported here: ``from svod_min.devices.cuda import X`` is the stable spelling.
"""

from __future__ import annotations

from ...error import (
    ArgumentRangeError,
    CudaError,
    CudaSymbolError,
    ForkedChildError,
    FreedBufferError,
    KernelVariableError,
    LaunchConfigError,
    PtxError,
    ReleasedError,
)
from .cubin import check_cubin_params, cubin_entry_params
from .device import CudaDevice
from .driver import (
    CUDA_KERNEL_NODE_PARAMS,
    CUDA_MEMCPY3D,
    DRIVER_API,
    HANDLE,
    PROTOTYPES,
    CudaLibrary,
    CUdevice,
    CUdeviceptr,
    CUresult,
    Prototype,
    copy_rows,
    handle_array,
    memcpy_1d,
)
from .graph import CudaGraph, GraphCopy
from .launch import (
    DEFAULT_LIMITS,
    ArgBlob,
    ArgSlot,
    Dims3,
    LaunchLimits,
    check_shared_bytes,
    dims_items,
    int32_arg,
    launch_dims,
    pack_kernel_args,
    plan_dims,
)
from .loader import (
    DEFAULT_LIBRARY,
    NO_DRIVER_REASON,
    CudaDeviceInfo,
    CudaDriver,
    driver_unavailable_reason,
    info_lines,
    load_driver,
    register_cuda,
    reset_driver_cache,
)
from .memory import CudaBuffer, CudaEvent, CudaStorage, StagingPool
from .nvrtc import (
    NVRTC_MISSING,
    NVRTC_PROTOTYPES,
    NVRTC_RESTYPES,
    NVRTC_SUCCESS,
    Nvrtc,
    compile_cuda,
    find_nvrtc,
    load_nvrtc,
    nvrtcResult,
)
from .program import BoundLaunch, CudaModule, CudaProgram
from .ptx import (
    PTX_FOR_CUDA,
    PTX_MIN_FOR_TARGET,
    PtxInfo,
    arch_name,
    check_entry_params,
    check_ptx_version,
    driver_version_tuple,
    find_ptxas,
    format_version,
    parse_arch,
    ptx_entry_param_types,
    ptx_entry_params,
    ptx_required_block,
    ptx_version_of,
    ptxas_check,
    rewrite_ptx_version,
    select_ptx_version,
    validate_ptx,
)

__all__ = [
    "ArgBlob",
    "ArgSlot",
    "ArgumentRangeError",
    "BoundLaunch",
    "CUDA_KERNEL_NODE_PARAMS",
    "CUDA_MEMCPY3D",
    "CUdevice",
    "CUdeviceptr",
    "CUresult",
    "CudaBuffer",
    "CudaDevice",
    "CudaDeviceInfo",
    "CudaDriver",
    "CudaError",
    "CudaEvent",
    "CudaGraph",
    "CudaLibrary",
    "CudaModule",
    "CudaProgram",
    "CudaStorage",
    "CudaSymbolError",
    "DEFAULT_LIBRARY",
    "DEFAULT_LIMITS",
    "DRIVER_API",
    "Dims3",
    "ForkedChildError",
    "FreedBufferError",
    "GraphCopy",
    "HANDLE",
    "KernelVariableError",
    "LaunchConfigError",
    "LaunchLimits",
    "NO_DRIVER_REASON",
    "NVRTC_MISSING",
    "NVRTC_PROTOTYPES",
    "NVRTC_RESTYPES",
    "NVRTC_SUCCESS",
    "Nvrtc",
    "PROTOTYPES",
    "PTX_FOR_CUDA",
    "PTX_MIN_FOR_TARGET",
    "Prototype",
    "PtxError",
    "PtxInfo",
    "ReleasedError",
    "StagingPool",
    "arch_name",
    "check_cubin_params",
    "check_entry_params",
    "check_ptx_version",
    "check_shared_bytes",
    "compile_cuda",
    "copy_rows",
    "cubin_entry_params",
    "dims_items",
    "driver_unavailable_reason",
    "driver_version_tuple",
    "find_nvrtc",
    "find_ptxas",
    "format_version",
    "handle_array",
    "info_lines",
    "int32_arg",
    "launch_dims",
    "load_driver",
    "load_nvrtc",
    "memcpy_1d",
    "nvrtcResult",
    "pack_kernel_args",
    "parse_arch",
    "plan_dims",
    "ptx_entry_param_types",
    "ptx_entry_params",
    "ptx_required_block",
    "ptx_version_of",
    "ptxas_check",
    "register_cuda",
    "reset_driver_cache",
    "rewrite_ptx_version",
    "select_ptx_version",
    "validate_ptx",
]
