"""svod_min: a minimal-dependency runtime for compiled compute kernels.

C (or LLVM IR) -> relocatable ELF object -> pure-Python relocator -> W^X
pages -> ctypes call. Names follow svod-runtime. Public names are imported
lazily (PEP 562), so ``import svod_min`` is cheap and never runs a compiler.
"""

from __future__ import annotations

from typing import Dict

from .error import *  # noqa: F401,F403 - the error hierarchy is small and always needed
from .error import __all__ as _error_all
from .lazy import lazy_exports

__version__ = "0.1.0"

_LAZY: Dict[str, str] = {
    # compiler driver and loader
    "compile_c": "clang",
    "compile_ir": "clang",
    "compile_source": "clang",
    "CpuBackend": "clang",
    "find_compiler": "clang",
    "relocate": "jit_loader",
    "load_object": "jit_loader",
    "LoadedObject": "jit_loader",
    "wx_mode": "jit_loader",
    # devices
    "DEVICE_FACTORIES": "device_registry",
    "DeviceSpec": "device_registry",
    "DeviceRegistry": "device_registry",
    "create_cpu_device": "devices.cpu",
    "create_cpu_device_with_backend": "devices.cpu",
    "ensure_thread_pool": "devices.cpu",
    "CpuDevice": "devices.cpu",
    "CpuBuffer": "devices.cpu",
    "CpuProgram": "devices.cpu",
    "CpuQueue": "devices.cpu_queue",
    # plans and executors (svod-runtime's root re-exports)
    "ExecutionPlan": "execution_plan",
    "ExecutionPlanBuilder": "execution_plan",
    "PreparedKernel": "execution_plan",
    "PreparedCopy": "execution_plan",
    "PreparedBufferView": "execution_plan",
    "PreparedCustomFunction": "execution_plan",
    "PreparedOp": "execution_plan",
    "run_custom_function": "execution_plan",
    "UnifiedExecutor": "executor",
    "global_executor": "executor",
    "DeviceContext": "executor",
    "ExecutionGraph": "executor",
    "ExecutionNode": "executor",
    "KernelBufferAccess": "executor",
    "SyncStrategy": "executor",
    "KernelProfile": "profiler",
    "BenchmarkConfig": "benchmark",
    "BenchmarkResult": "benchmark",
    "benchmark_kernel": "benchmark",
    "warmup_thread_pool": "benchmark",
    "load_plan": "plan_file",
    # caches
    "CompiledSpec": "kernel_cache",
    "CachedKernel": "kernel_cache",
    "KernelCache": "kernel_cache",
    "ObjectCache": "kernel_cache",
    "compile_cached": "kernel_cache",
    "get_or_compile_kernel": "kernel_cache",
}


_SUBMODULES = ("kernels",)  # subpackages reachable as attributes without an explicit import
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)

__all__ = sorted(set(_LAZY) | set(_SUBMODULES) | set(_error_all))
