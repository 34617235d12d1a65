"""Plan-file kernels: each form (C or LLVM IR source, a file, a library kernel, CUDA C or PTX) validated and loaded.

:class:`KernelReader` reads a plan's ``kernels`` section. Each kernel is loaded in the first of the
device's program forms (``device.program_forms``) that it brings: on a device that loads objects, C
and LLVM IR sources are compiled in as few compiler runs as possible (:func:`compile_many_cached`)
and precompiled objects of the best target are loaded as they are; a ``cuda`` object brings PTX or
CUDA C. Library kernels come from :mod:`svod_min.kernels` in the library form the device loads,
with their signature's roles, extents and work. Nothing here names a device kind.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..cache.kernel_cache import CachedKernel, compile_many_cached
from ..compiler.targets import TARGET_ENV, TARGET_NAME, choose_target, host_target, object_target_mismatch
from ..config import env_str
from ..devices.base import C_SOURCE, CUDA_C, LLVM_IR, OBJECT, PTX, ProgramSource
from ..error import (
    CompilationError,
    DeviceError,
    NotSupportedError,
    NoUsableTargetError,
    PlanError,
    PlanFileError,
    PtxError,
    SvodError,
)
from ..expr import compile_expr
from ..jit_loader.arch import host_arch
from .data import PlanData
from .library_objects import LIBRARY_EXTRA_KEYS, load_library_kernel
from .schema import as_bool, as_int, as_list, as_object, as_sha256, as_text, known_keys, need, three

#: Variables only the CPU dispatcher uses (one chunk of work per thread); GPU forms do not take them.
CPU_ONLY_VARS = ("core_id", "core_id_count")
#: The program form of each host source key of a plan kernel.
SOURCE_FORMS = {"source": C_SOURCE, "file": C_SOURCE, "llvm_ir": LLVM_IR, "ir_file": LLVM_IR}


class KernelReader:
    """The kernels of one plan, for ``device``; kernel files are read through ``data``."""

    def __init__(self, device: Any, data: PlanData) -> None:
        self.device = device
        self.data = data
        self.kernels: Dict[str, Tuple[CachedKernel, Dict[str, Any]]] = {}

    def read(self, spec: Dict[str, Any]) -> Dict[str, Tuple[CachedKernel, Dict[str, Any]]]:
        """Every kernel of the ``kernels`` section, validated, compiled (in batches) and loaded."""
        pending: Dict[str, PendingKernel] = {}
        gpu: Dict[str, PendingCuda] = {}
        for name, k in spec.items():
            path = "kernels.%s" % name
            k = as_object(k, path)
            allowed = {
                "source",
                "file",
                "llvm_ir",
                "ir_file",
                "library",
                "params",
                "entry",
                "buffers",
                "outputs",
                "vars",
                "global_size",
                "extents",
                "parallel_safe",
                "flags",
                "flops",
                "bytes",
                "cuda",
                "objects",
                *LIBRARY_EXTRA_KEYS,
            }
            known_keys(k, allowed, path)
            forms = [f for f in ("source", "file", "llvm_ir", "ir_file", "library") if f in k]
            need(
                len(forms) == 1 or (not forms and ("cuda" in k or "objects" in k)),
                path,
                "give exactly one of source, file, llvm_ir, ir_file, library (got %s), or only objects or a cuda form"
                % (forms or "none"),
            )
            cuda = self._cuda_form(k, path) if "cuda" in k else None  # checked on every device
            objects = read_object_list(k["objects"], path + ".objects") if "objects" in k else None
            need(objects is None or forms != ["library"], path + ".objects", "a library kernel brings its own objects")
            if forms == ["library"]:
                self.kernels[name] = self._library(name, k, path)
                continue
            form = self._program_form(forms[0] if forms else None, objects, cuda, path)
            if form in (PTX, CUDA_C):
                gpu[name] = cuda  # type: ignore[assignment]
                continue
            kernel = self._compiled(name, k, forms[0] if forms else None, path)
            if form != OBJECT:  # the device compiles this source form itself
                self.kernels[name] = kernel.load_source(self.device, form)
                continue
            obj = self._precompiled(objects, kernel, path) if objects is not None else None
            if obj is not None:
                self.kernels[name] = kernel.load(self.device, obj)
            else:
                pending[name] = kernel
        self._compile_and_load(pending)
        for name, cuda in gpu.items():
            self.kernels[name] = cuda.load(self.device)
        return self.kernels

    def _program_form(
        self,
        source_key: Optional[str],
        objects: Optional[List[Dict[str, str]]],
        cuda: Optional["PendingCuda"],
        path: str,
    ) -> str:
        """The first of the device's program forms this kernel brings: an object (compiled from its C or
        LLVM IR, or precompiled), the source itself, or its ``cuda`` object's PTX or CUDA C."""
        offered = []
        if source_key is not None or objects is not None:
            offered.append(OBJECT)
        if source_key is not None:
            offered.append(SOURCE_FORMS[source_key])
        if cuda is not None:
            offered.append(cuda.program_form)
        device_forms = self.device.program_forms
        for form in device_forms:
            if form in offered:
                return form
        spec = self.device.spec
        need(
            cuda is not None or not (PTX in device_forms or CUDA_C in device_forms),
            path,
            'has no CUDA form, and this plan runs on %s: add a "cuda" object (CUDA C or PTX, docs/plan-format.md) '
            "or use a library kernel" % spec,
        )
        host_device = any(f == OBJECT or f in SOURCE_FORMS.values() for f in device_forms)
        need(
            not (host_device and source_key is None and objects is None),
            path,
            "has only a CUDA form; run the plan on a GPU (--device CUDA)",
        )
        raise PlanFileError(
            path,
            "device %s loads %s programs; this kernel brings %s" % (spec, ", ".join(device_forms), ", ".join(offered)),
        )

    def _precompiled(self, objects: List[Dict[str, str]], kernel: "PendingKernel", path: str) -> Optional[bytes]:
        """The object of the best target for this host; None: compile the source (PendingKernel has it)."""
        targets = [o["target"] for o in objects]
        chosen = choose_target(targets)
        if chosen is None:
            if kernel.text and have_compiler(kernel.kind):
                return None
            forced = env_str(TARGET_ENV)
            raise NoUsableTargetError(
                "%s: no precompiled object runs on this host (target %s%s; the kernel has objects for %s) and %s"
                % (
                    path,
                    forced or host_target() or "unknown, %s" % host_arch(),
                    " forced by %s" % TARGET_ENV if forced else "",
                    ", ".join(targets) or "no target",
                    "no compiler here can build its source" if kernel.text else "it carries no source to compile",
                )
            )
        i = targets.index(chosen)
        where = "%s[%d]" % (path, i)
        data = self.data.read_bytes(objects[i]["file"], where + ".file")
        need(
            hashlib.sha256(data).hexdigest() == objects[i]["sha256"],
            where + ".sha256",
            "object %r does not match its sha256" % objects[i]["file"],
        )
        problem = object_target_mismatch(data, chosen)
        need(problem is None, where, "object %r: %s" % (objects[i]["file"], problem))
        return data

    def _compile_and_load(self, pending: Dict[str, "PendingKernel"]) -> None:
        """Compile every source kernel in as few compiler runs as possible, then load them."""
        batches: Dict[Tuple[str, Tuple[str, ...]], List[str]] = {}
        for name, p in pending.items():
            batches.setdefault((p.kind, p.flags), []).append(name)
        for (kind, flags), names in batches.items():
            objects = compile_many_cached(
                [pending[n].text for n in names], kind=kind, extra_flags=flags, names=["kernels.%s" % n for n in names]
            )
            for name, obj in zip(names, objects):
                self.kernels[name] = pending[name].load(self.device, obj)

    def _compiled(self, name: str, k: Dict[str, Any], form: Optional[str], path: str) -> "PendingKernel":
        """Validate a C or LLVM IR form (text or file; None: objects only); compiled later in a batch."""
        text = ""
        if form is not None:
            text = k[form]
            if form in ("file", "ir_file"):
                text = self.data.read_text(as_text(text, "%s.%s" % (path, form)), "%s.%s" % (path, form))
            text = as_text(text, "%s.%s" % (path, form))
        nbuf = as_int(k.get("buffers"), path + ".buffers", 1, 64)
        var_names = [
            as_text(v, "%s.vars[%d]" % (path, i)) for i, v in enumerate(as_list(k.get("vars", []), path + ".vars"))
        ]
        outputs = [
            as_int(o, "%s.outputs[%d]" % (path, i), 0, nbuf - 1)
            for i, o in enumerate(as_list(k.get("outputs", [0]), path + ".outputs"))
        ]
        entry = as_text(k.get("entry", name), path + ".entry")
        flags = [
            as_text(f, "%s.flags[%d]" % (path, i)) for i, f in enumerate(as_list(k.get("flags", []), path + ".flags"))
        ]
        gsize = global_size_exprs(k.get("global_size", [1, 1, 1]), path + ".global_size")
        check_threading(gsize, var_names, path + ".global_size")
        meta = self._meta(k, nbuf, var_names, path)
        kind = "ir" if form in ("llvm_ir", "ir_file") else "c"
        return PendingKernel(
            text,
            kind,
            tuple(flags),
            entry,
            nbuf,
            var_names,
            outputs,
            gsize,
            as_bool(k.get("parallel_safe", True), path + ".parallel_safe"),
            meta,
        )

    def _cuda_form(self, k: Dict[str, Any], path: str) -> "PendingCuda":
        """Validate a kernel's ``cuda`` object (CUDA C for NVRTC, or PTX); loaded only on a GPU."""
        cpath = path + ".cuda"
        c = as_object(k["cuda"], cpath)
        need("library" not in k, cpath, 'a library kernel brings its own CUDA form; drop "cuda"')
        known_keys(
            c, {"source", "file", "ptx", "ptx_file", "entry", "vars", "grid", "block", "shared_bytes", "options"}, cpath
        )
        form, text = self._cuda_text(c, cpath)
        nbuf = as_int(k.get("buffers"), path + ".buffers", 1, 64)
        var_names = self._cuda_vars(k, c, path)
        outputs = [
            as_int(o, "%s.outputs[%d]" % (path, i), 0, nbuf - 1)
            for i, o in enumerate(as_list(k.get("outputs", [0]), path + ".outputs"))
        ]
        need(
            "grid" in c and "block" in c,
            cpath,
            'a CUDA form needs "grid" (blocks, svod\'s global size) and "block" (threads per block)',
        )
        grid = self._grid(c["grid"], var_names, cpath + ".grid")
        block = tuple(
            as_int(b, "%s.block[%d]" % (cpath, i), 1, 1024) for i, b in enumerate(three(c["block"], cpath + ".block"))
        )
        meta = self._meta(k, nbuf, var_names, path)
        options = tuple(
            as_text(o, "%s.options[%d]" % (cpath, i))
            for i, o in enumerate(as_list(c.get("options", []), cpath + ".options"))
        )
        entry = as_text(c.get("entry", k.get("entry", path.split(".", 1)[1])), cpath + ".entry")
        shared = as_int(c.get("shared_bytes", 0), cpath + ".shared_bytes", 0, 1 << 20)
        return PendingCuda(cpath, form, text, entry, nbuf, var_names, outputs, grid, block, shared, options, meta)

    def _cuda_text(self, c: Dict[str, Any], cpath: str) -> Tuple[str, str]:
        """``(form, text)``: exactly one of source, file (CUDA C), ptx, ptx_file (PTX); files are read now."""
        forms = [f for f in ("source", "file", "ptx", "ptx_file") if f in c]
        need(len(forms) == 1, cpath, "give exactly one of source, file, ptx, ptx_file (got %s)" % (forms or "none"))
        where = "%s.%s" % (cpath, forms[0])
        text = as_text(c[forms[0]], where)
        return forms[0], self.data.read_text(text, where) if forms[0] in ("file", "ptx_file") else text

    def _cuda_vars(self, k: Dict[str, Any], c: Dict[str, Any], path: str) -> List[str]:
        """The GPU form's int32 variables: its own ``vars``, else the kernel's without the CPU thread-split ones."""
        top = [as_text(v, "%s.vars[%d]" % (path, i)) for i, v in enumerate(as_list(k.get("vars", []), path + ".vars"))]
        default = [v for v in top if v not in CPU_ONLY_VARS]
        where = path + ".cuda.vars"
        names = [as_text(v, "%s[%d]" % (where, i)) for i, v in enumerate(as_list(c.get("vars", default), where))]
        need(not set(names) & set(CPU_ONLY_VARS), where, "%s are CPU dispatch variables" % list(CPU_ONLY_VARS))
        return names

    def _grid(self, value: Any, var_names: List[str], path: str) -> Tuple[Any, ...]:
        """Three ints or size expressions over the kernel's variables (``ceildiv(a,b)`` allowed)."""
        out = []
        for i, d in enumerate(three(value, path)):
            where = "%s[%d]" % (path, i)
            if type(d) is int:
                need(d >= 1, where, "grid dimensions are positive")
                out.append(d)
                continue
            out.append(kernel_var_expr(d, var_names, where))
        return tuple(out)

    def _meta(self, k: Dict[str, Any], nbuf: int, var_names: List[str], path: str) -> Dict[str, Any]:
        """What a plan kernel declares besides its code: argument extents and work (flops, bytes)."""
        return {
            "extents": self._extents(k.get("extents", {}), nbuf, path + ".extents"),
            "flops": self._work(k.get("flops"), var_names, path + ".flops"),
            "bytes": self._work(k.get("bytes"), var_names, path + ".bytes"),
        }

    def _work(self, value: Any, var_names: List[str], path: str) -> Any:
        """A declared flops/bytes expression, checked now so profiling can never fail later."""
        if value is None or type(value) is int:
            return value
        return kernel_var_expr(value, var_names, path)

    def _library(self, name: str, k: Dict[str, Any], path: str) -> Tuple[CachedKernel, Dict[str, Any]]:
        """A ``library`` kernel in the first library form the device loads: a host object or the shipped PTX."""
        params = as_object(k.get("params", {}), path + ".params")
        need(
            not (set(k) - {"library", "params", *LIBRARY_EXTRA_KEYS}),
            path,
            "a library kernel takes only library, params, %s" % ", ".join(LIBRARY_EXTRA_KEYS),
        )
        try:  # the library itself is imported on first use: it costs ~50 ms, most plans need none
            lib = load_library_kernel(self.device, self.data.read_bytes, k, params, path)
        except (DeviceError, PlanFileError):
            raise  # the driver's or the device's own checks, or the plan's own words: not to be reworded
        except (SvodError, TypeError) as exc:  # no such kernel or form, a bad parameter or dtype
            raise PlanFileError(path, str(exc).splitlines()[0]) from None
        return self._library_kernel(lib.program, lib.source_of, lib.sig.entry, lib.sig, lib.global_size, lib.local_size)

    def _library_kernel(
        self,
        program: Any,
        code_of: Callable[[], str],
        entry: str,
        sig: Any,
        global_size: Tuple[Any, ...],
        local_size: Optional[Tuple[int, ...]],
    ) -> Tuple[CachedKernel, Dict[str, Any]]:
        """A library kernel (``KernelSig`` or ``CudaKernelSig``) as a plan kernel: roles, extents, work; its
        source text is made only when asked (``CachedKernel.source_text``)."""
        from .. import kernels as library

        roles = [arg.role for arg in sig.buffers]
        kernel = CachedKernel(
            program,
            str(self.device.spec),
            "",
            entry,
            list(sig.var_names),
            list(range(len(roles))),
            [i for i, r in enumerate(roles) if "w" in r],
            [i for i, r in enumerate(roles) if "r" in r],
            True,
            global_size,
            local_size,
            code_of=code_of,
        )
        extents = {i: arg.count for i, arg in enumerate(sig.buffers) if arg.count is not None}
        f32 = {v.name for v in sig.vars if v.kind == "f32"}
        return kernel, {
            "extents": extents,
            "flops": sig.flops,
            "bytes": sig.bytes,
            "f32": f32,
            "arg_check": functools.partial(library.check_bound_args, sig),
        }

    def _extents(self, value: Any, nbuf: int, path: str) -> Dict[int, Any]:
        """``{"argument position": size expression}``: how many elements each buffer must hold."""
        out = {}
        for key, expr in as_object(value, path).items():
            need(
                key.isdecimal() and key.isascii() and int(key) < nbuf,
                "%s.%s" % (path, key),
                "extent keys are argument positions 0..%d" % (nbuf - 1),
            )
            try:
                out[int(key)] = expr if type(expr) is int else compile_expr(as_text(expr, "%s.%s" % (path, key))).text
            except PlanError as exc:
                raise PlanFileError("%s.%s" % (path, key), str(exc)) from None
        return out


def read_object_list(value: Any, path: str) -> List[Dict[str, str]]:
    """A kernel's ``objects``: ``[{"target", "file", "sha256"}, ...]``, one per target (read, not loaded)."""
    out: List[Dict[str, str]] = []
    for i, o in enumerate(as_list(value, path)):
        where = "%s[%d]" % (path, i)
        o = as_object(o, where)
        known_keys(o, {"target", "file", "sha256"}, where)
        target, rel = (as_text(o.get(key), "%s.%s" % (where, key)) for key in ("target", "file"))
        if TARGET_NAME.match(target) is None:  # each message is made only on failure: a plan has hundreds
            raise PlanFileError(where + ".target", "%r is not a target name" % target)
        if any(t["target"] == target for t in out):
            raise PlanFileError(where + ".target", "a second object for target %s" % target)
        digest = as_sha256(o.get("sha256"), where + ".sha256")
        out.append({"target": target, "file": rel, "sha256": digest})
    need(bool(out), path, "lists no object")
    return out


def have_compiler(kind: str) -> bool:
    """Whether a compiler for ``kind`` (``c``, or ``ir``: clang) is on this host."""
    from ..compiler.clang import find_compiler  # here: a load of precompiled objects imports no compiler driver

    try:
        find_compiler(need_clang=kind == "ir")
    except CompilationError:
        return False
    return True


def global_size_exprs(value: Any, path: str) -> Tuple[Any, ...]:
    """Three ints or size expressions (kept as their text; the plan evaluates them per run)."""
    dims = as_list(value, path)
    need(len(dims) == 3, path, "expected 3 entries, got %d" % len(dims))
    out = []
    for i, d in enumerate(dims):
        try:
            out.append(d if type(d) is int else compile_expr(as_text(d, "%s[%d]" % (path, i))).text)
        except PlanError as exc:
            raise PlanFileError("%s[%d]" % (path, i), str(exc)) from None
    return tuple(out)


def kernel_var_expr(value: Any, var_names: List[str], path: str) -> str:
    """A size expression over the kernel's own variables, as its text (checked now, evaluated per run)."""
    try:
        expr = compile_expr(as_text(value, path))
    except PlanError as exc:
        raise PlanFileError(path, str(exc)) from None
    unknown = sorted(expr.names - set(var_names))
    need(not unknown, path, "expression %r uses %s, not kernel variables %s" % (value, unknown, var_names))
    return expr.text


def check_threading(gsize: Tuple[Any, ...], var_names: List[str], path: str) -> None:
    """global_size[0] other than 1 runs the kernel once per core id: it needs a core_id variable."""
    if gsize[0] != 1 and "core_id" not in var_names:
        raise PlanFileError(
            path, "global_size[0] is %r but the kernel has no core_id variable to split work by" % (gsize[0],)
        )


@dataclass
class PendingKernel:
    """A validated source kernel waiting for its object (compiled in a batch with the others)."""

    text: str
    kind: str
    flags: Tuple[str, ...]
    entry: str
    nbuf: int
    var_names: List[str]
    outputs: List[int]
    gsize: Tuple[Any, ...]
    parallel_safe: bool
    meta: Dict[str, Any]

    def load(self, device: Any, obj: bytes) -> Tuple[CachedKernel, Dict[str, Any]]:
        """Load the compiled object on ``device`` as a plan kernel."""
        return self._kernel(
            device, device.load_program(ProgramSource(OBJECT, obj, self.entry, self.nbuf, self.var_names))
        )

    def load_source(self, device: Any, form: str) -> Tuple[CachedKernel, Dict[str, Any]]:
        """Hand the source (``form``: C or LLVM IR) to a device that compiles it itself."""
        source = ProgramSource(form, self.text, self.entry, self.nbuf, self.var_names, options=self.flags)
        return self._kernel(device, device.load_program(source))

    def _kernel(self, device: Any, program: Any) -> Tuple[CachedKernel, Dict[str, Any]]:
        ins = [i for i in range(self.nbuf) if i not in self.outputs]
        kernel = CachedKernel(
            program,
            str(device.spec),
            self.text,
            self.entry,
            self.var_names,
            list(range(self.nbuf)),
            self.outputs,
            ins,
            self.parallel_safe,
            self.gsize,
        )
        return kernel, self.meta


@dataclass
class PendingCuda:
    """A validated CUDA form (CUDA C or PTX) waiting for a GPU to load it on."""

    path: str
    form: str
    text: str
    entry: str
    nbuf: int
    var_names: List[str]
    outputs: List[int]
    grid: Tuple[Any, ...]
    block: Tuple[int, ...]
    shared_bytes: int
    options: Tuple[str, ...]
    meta: Dict[str, Any]

    @property
    def program_form(self) -> str:
        """PTX, or CUDA C (compiled by the device with NVRTC)."""
        return PTX if self.form in ("ptx", "ptx_file") else CUDA_C

    def load(self, device: Any) -> Tuple[CachedKernel, Dict[str, Any]]:
        """Load the PTX (or the CUDA C, compiled by the device) on ``device`` as a plan kernel."""
        form = self.program_form
        source = ProgramSource(
            form,
            self.text,
            self.entry,
            self.nbuf,
            self.var_names,
            name=self.entry,
            options=self.options,
            block=self.block,
            shared_bytes=self.shared_bytes,
        )
        try:
            program = device.load_program(source)
        except PtxError as exc:  # svod's PTX rules, checked before the driver sees it: name the kernel
            if form != PTX:
                raise
            raise PtxError("%s.%s: %s" % (self.path, self.form, exc)) from None
        except NotSupportedError as exc:  # no NVRTC: say which kernel needed it
            if form != CUDA_C:
                raise
            raise NotSupportedError("%s: %s" % (self.path, exc)) from None
        ins = [i for i in range(self.nbuf) if i not in self.outputs]
        kernel = CachedKernel(
            program,
            str(device.spec),
            self.text,
            self.entry,
            self.var_names,
            list(range(self.nbuf)),
            self.outputs,
            ins,
            True,
            self.grid,
            self.block,
        )
        return kernel, self.meta


def with_global_size(kernel: CachedKernel, gsize: Tuple[Any, ...]) -> CachedKernel:
    """A shallow copy of ``kernel`` launched with ``gsize`` (an op's own global size)."""
    clone = copy.copy(kernel)
    clone.global_size = gsize
    return clone


__all__ = [
    "CPU_ONLY_VARS",
    "KernelReader",
    "SOURCE_FORMS",
    "have_compiler",
    "read_object_list",
    "check_threading",
    "global_size_exprs",
    "with_global_size",
]
