"""JIT ELF loader: relocatable object bytes -> callable code in W^X memory.

    obj = compile_c(src)                 # svod_min.compiler.clang
    with load_object(obj) as lo:
        add = lo.function("add", None, c_void_p, c_void_p, c_int)
        add(out_ptr, in_ptr, n)

No dlopen, no linker, no files. See docs/ARCHITECTURE.md for the pipeline.

The parts: ``elf`` (parsing), ``arch`` with ``x86_64``, ``aarch64``,
``riscv64``, ``ppc64le`` and ``loongarch64`` (relocation encoders,
:func:`host_arch`), ``layout`` (placing and relocating), ``memory`` (W^X
mappings), ``symbols`` (external symbols) and ``loaded`` (:func:`load_object`).
The names below are imported on first use (PEP 562), so
``svod_min.jit_loader.arch`` costs no more than itself: the compiler driver
reads :func:`host_arch` from it without loading the relocator.
"""

from __future__ import annotations

from typing import Dict

from ..lazy import lazy_exports

_LAZY: Dict[str, str] = {
    "HOST_ARCH": "loaded",
    "LoadedObject": "loaded",
    "Resolver": "loaded",
    "load_object": "loaded",
    "host_arch": "arch",
    "PAGE": "layout",
    "Layout": "layout",
    "RelocatedImage": "layout",
    "Segment": "layout",
    "apply_layout": "layout",
    "plan_layout": "layout",
    "relocate": "layout",
    "map_image": "memory",
    "unmap": "memory",
    "wx_mode": "memory",
    "chain_resolvers": "symbols",
    "default_resolver": "symbols",
    "lookup": "symbols",
}


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

__all__ = [
    "LoadedObject",
    "RelocatedImage",
    "Segment",
    "PAGE",
    "chain_resolvers",
    "default_resolver",
    "host_arch",
    "load_object",
    "lookup",
    "plan_layout",
    "relocate",
    "wx_mode",
]
