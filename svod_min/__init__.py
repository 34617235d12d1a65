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
    "compile_c": "compiler.clang",
    "compile_ir": "compiler.clang",
    "compile_source": "compiler.clang",
    "CpuBackend": "compiler.backend",
    "find_compiler": "compiler.clang",
    "relocate": "jit_loader",
    "load_object": "jit_loader",
    "LoadedObject": "jit_loader",
    "wx_mode": "jit_loader",
    # devices
    "DEVICE_FACTORIES": "devices.registry",
    "DeviceSpec": "devices.registry",
    "DeviceRegistry": "devices.registry",
    "ProgramSource": "devices.base",
    "create_cpu_device": "devices.cpu.device",
    "create_cpu_device_with_backend": "devices.cpu.device",
    "ensure_thread_pool": "devices.cpu.device",
    "CpuDevice": "devices.cpu.device",
    "CpuBuffer": "devices.cpu.device",
    "CpuProgram": "devices.cpu.device",
    "CpuQueue": "devices.cpu.queue",
    # plans and executors (svod-runtime's root re-exports)
    "ExecutionPlan": "plan.execution_plan",
    "ExecutionPlanBuilder": "plan.execution_plan",
    "PreparedKernel": "plan.execution_plan",
    "PreparedCopy": "plan.execution_plan",
    "PreparedBufferView": "plan.execution_plan",
    "PreparedCustomFunction": "plan.execution_plan",
    "PreparedOp": "plan.execution_plan",
    "run_custom_function": "plan.execution_plan",
    "UnifiedExecutor": "executor.unified",
    "global_executor": "executor.unified",
    "DeviceContext": "executor.unified",
    "ExecutionGraph": "executor.unified",
    "ExecutionNode": "executor.unified",
    "KernelBufferAccess": "executor.unified",
    "SyncStrategy": "executor.unified",
    "KernelProfile": "profiler",
    "BenchmarkConfig": "perf.benchmark",
    "BenchmarkResult": "perf.benchmark",
    "benchmark_kernel": "perf.benchmark",
    "warmup_thread_pool": "perf.benchmark",
    "load_plan": "planfile.load",
    "load_model": "planfile.load",
    # caches
    "CompiledSpec": "cache.kernel_cache",
    "CachedKernel": "cache.kernel_cache",
    "KernelCache": "cache.kernel_cache",
    "ObjectCache": "cache.kernel_cache",
    "compile_cached": "cache.kernel_cache",
    "get_or_compile_kernel": "cache.kernel_cache",
}


_SUBMODULES = ("kernels",)  # subpackages reachable as attributes without an explicit import
__getattr__, __dir__ = lazy_exports(__name__, _LAZY, _SUBMODULES)

__all__ = sorted(set(_LAZY) | set(_SUBMODULES) | set(_error_all))
