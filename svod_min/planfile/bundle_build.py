"""``python -m svod_min build PLAN.json -o MODEL.svod``: compile a plan's kernels for every target, one file out.

Every C or LLVM IR kernel is compiled once per target (clang: any target through
``--target``/``-march``; gcc: the targets of its own architecture, and it says which
it cannot build), each object is checked to relocate (the loader's ``relocate`` at a
fake base, every undefined symbol resolvable from libc/libm) and to be for its
target's machine, and the plan, the files it names and the objects are written as
one bundle (:mod:`svod_min.planfile.bundle`). The source stays in the bundle: a host no
target fits can still compile it when it has a compiler.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .. import __version__
from ..compiler.clang import CompilerInfo, compile_c, compile_ir, compile_many_c, compiler_flags, find_compiler
from ..compiler.targets import TARGETS, Target, check_target_name, object_target_mismatch
from ..error import BundleError, CompilationError, LoaderError, PlanError, SymbolNotFoundError
from ..jit_loader.arch import arch_name
from ..jit_loader.layout import relocate
from ..jit_loader.rt_helpers import HELPER_NAMES
from ..jit_loader.symbols import lookup
from .bundle import PLAN, file_references, plan_file_entry, sha256, write_bundle
from .data import DirectoryFiles
from .library_objects import LibraryNeed, add_library_object, compile_library_objects, library_needs
from .memory_budget import build_warning
from .schema import as_list, as_object, as_text, parse_plan_bytes, read_plan_document

#: Where the relocation check pretends an object is loaded (any canonical user-space address works).
FAKE_BASE = 0x7F0000000000
_FAKE_EXTERNAL = 0x7E0000000000
SOURCE_FORMS = ("source", "file", "llvm_ir", "ir_file")


@dataclass
class BuildReport:
    """What :func:`build_bundle` wrote: targets built, targets skipped (with why), kernels and objects."""

    path: str
    built: List[str]
    skipped: Dict[str, str]
    kernels: int
    objects: int  # the generated kernels' objects, kernels x targets
    manifest: Dict[str, Any] = field(repr=False, default_factory=dict)
    library_objects: int = 0  # library instances carried for variants that lack them (tuned tiles, float64...)


#: ``build --tune``'s step: (plan document, progress) -> the manifest's ``tuned`` record (None: nothing tuned).
#: It lives with the autotuner (svod_min.perf.plan_tune), a layer above; the CLI hands it in.
PlanTuner = Callable[[Dict[str, Any], Callable[[str], None]], Optional[Dict[str, Any]]]


def build_bundle(
    plan: Optional[str],
    out: str,
    *,
    targets: Optional[Sequence[str]] = None,
    compiler: Optional[str] = None,
    progress: Callable[[str], None] = lambda line: None,
    tune: Optional[PlanTuner] = None,
    sign: Optional[Callable[[bytes], bytes]] = None,
) -> BuildReport:
    """Build ``out`` from the plan file ``plan`` (None: the default MLP plan) for ``targets`` (default: all);
    ``tune`` first records tuned tiles in the plan (``build --tune``); ``sign`` signs the manifest
    (``build --sign KEY``: :func:`svod_min.planfile.signing.signer`)."""
    doc, base_dir = _plan_document(plan)  # a fresh document: objects are added to it below
    warning = build_warning(doc)  # a host like this one would refuse to run it: said, not refused
    if warning:
        progress(warning)
    files = DirectoryFiles(base_dir)
    entries = {plan_file_entry(rel, where): files.read_bytes(rel, where) for where, rel in file_references(doc)}
    return build_bundle_from_document(
        doc, entries, out, targets=targets, compiler=compiler, progress=progress, tune=tune, sign=sign
    )


def build_bundle_from_document(
    doc: Dict[str, Any],
    files: Mapping[str, bytes],
    out: str,
    *,
    targets: Optional[Sequence[str]] = None,
    compiler: Optional[str] = None,
    progress: Callable[[str], None] = lambda line: None,
    created_by: str = "python -m svod_min build",
    tune: Optional[PlanTuner] = None,
    sign: Optional[Callable[[bytes], bytes]] = None,
) -> BuildReport:
    """Build ``out`` from a plan document held in memory and the files it names (bundle entry -> bytes).

    ``tune`` first records tuned tiles in the document (``build --tune``; the manifest keeps its summary as
    ``tuned``). The document gains each compiled kernel's ``objects`` (and the ``library_objects`` its library
    kernels need); every file it names must be in ``files``.
    """
    wanted = [check_target_name(t) for t in (targets or list(TARGETS))]
    entries = dict(files)
    for where, rel in file_references(doc):
        if plan_file_entry(rel, where) not in entries:
            raise PlanError("%s names %r, which is not among the files given" % (where, rel))
    tuned = tune(doc, progress) if tune is not None else None
    sources = _source_kernels(doc, entries)
    needs = library_needs(doc, sorted({t.arch for t in wanted}))
    info = find_compiler(compiler=compiler) if sources or needs else None
    buildable, skipped = _buildable(wanted, info)
    for name, why in skipped.items():
        progress("note: %s" % why)
    if sources and not buildable:
        raise CompilationError(
            "%s cannot build any of the targets asked for: %s"
            % (info.path if info else "no compiler", "; ".join(skipped.values()))
        )
    objects: Dict[str, Dict[str, str]] = {}
    for target, flags in buildable if sources else []:  # a tuned library-only plan compiles only library objects
        progress("building %d kernel(s) for %s" % (len(sources), target.name))
        for kname, entry_name, data in _compile_for(sources, target, flags, info):  # type: ignore[arg-type]
            _check_object(data, target, kname)
            entries[entry_name] = data
            objects[entry_name] = {"kernel": kname, "target": target.name}
            _add_object(doc["kernels"][kname], target.name, entry_name, sha256(data))
    if needs:
        _library_objects(doc, needs, info, entries, objects, progress)  # type: ignore[arg-type]
    entries[PLAN] = _plan_bytes(doc)
    manifest = _manifest(info, buildable, skipped, objects)
    manifest["created_by"] = created_by
    if tuned:
        manifest["tuned"] = tuned
    written = write_bundle(out, entries, manifest, sign=sign)
    library = sum(1 for o in objects.values() if "variant" in o)
    return BuildReport(
        out, [t.name for t, _ in buildable], skipped, len(sources), len(objects) - library, written, library
    )


def _library_objects(
    doc: Dict[str, Any],
    needs: List[LibraryNeed],
    info: CompilerInfo,
    entries: Dict[str, bytes],
    objects: Dict[str, Dict[str, str]],
    progress: Callable[[str], None],
) -> None:
    """Compile the library instances the tuned choices need (per variant) into the bundle."""
    for need, entry_name, data in compile_library_objects(needs, info, compiler_arch(info), progress, _check_object):
        entries[entry_name] = data
        objects[entry_name] = {"kernel": need.kernel, "variant": need.variant}
        add_library_object(doc["kernels"][need.kernel], need, entry_name, sha256(data))


def _plan_document(plan: Optional[str]) -> Tuple[Dict[str, Any], str]:
    if plan is None:
        from .default_plan import default_plan_document

        return default_plan_document(), os.getcwd()
    if plan.endswith(".svod"):
        raise PlanError("%s is already a bundle; build from its plan file" % plan)
    return read_plan_document(plan), os.path.dirname(os.path.abspath(plan))


@dataclass
class _Source:
    """One kernel to compile: its source text, kind (``c`` or ``ir``), own flags and object entry stem."""

    text: str
    kind: str
    flags: Tuple[str, ...]
    stem: str


def _source_kernels(doc: Dict[str, Any], entries: Dict[str, bytes]) -> Dict[str, _Source]:
    """Kernels with a C or IR form, by name (library and CUDA-only kernels need no object)."""
    out: Dict[str, _Source] = {}
    for i, (name, k) in enumerate(as_object(doc.get("kernels", {}), "kernels").items()):
        k = as_object(k, "kernels.%s" % name)
        forms = [f for f in SOURCE_FORMS if f in k]
        if not forms:
            continue
        where = "kernels.%s.%s" % (name, forms[0])
        text = as_text(k[forms[0]], where)
        if forms[0] in ("file", "ir_file"):
            text = _utf8(entries[plan_file_entry(text, where)], where)
        flags = tuple(
            as_text(f, "kernels.%s.flags" % name) for f in as_list(k.get("flags", []), "kernels.%s.flags" % name)
        )
        stem = "objects/%03d-%s" % (i, re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64])
        out[name] = _Source(text, "ir" if forms[0] in ("llvm_ir", "ir_file") else "c", flags, stem)
    return out


def _utf8(data: bytes, where: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PlanError("%s: the file is not UTF-8 text" % where) from None


def compiler_arch(info: CompilerInfo) -> str:
    """The architecture a compiler builds for by default (the first part of its target triple)."""
    return arch_name(info.target.split("-", 1)[0])


def _buildable(
    wanted: List[Target], info: Optional[CompilerInfo]
) -> Tuple[List[Tuple[Target, List[str]]], Dict[str, str]]:
    """(target, flags) for each target the compiler can build; the others with the reason."""
    if info is None:  # nothing to compile: the bundle carries the plan and its data
        return [(t, []) for t in wanted], {}
    built, skipped = [], {}
    for target in wanted:
        flags = target.compile_flags(info.family, compiler_arch(info))
        why = None
        if flags is None:
            why = "%s %s builds for %s only" % (info.family, info.version, compiler_arch(info))
        else:
            why = _cannot_target(info, flags)
        if why is None:
            built.append((target, flags))  # type: ignore[arg-type]
        else:
            skipped[target.name] = "%s: target %s (%s) is not built" % (why, target.name, target.arch)
    return built, skipped


def _cannot_target(info: CompilerInfo, flags: List[str]) -> Optional[str]:
    """Why the compiler cannot build for ``flags`` (e.g. clang 14 knows no loongarch64), or None: it can."""
    try:
        compile_c("int svod_probe(void) { return 0; }\n", extra_flags=flags, compiler=info.path)
    except CompilationError as exc:
        first = next((ln.strip() for ln in exc.diagnostics.splitlines() if "error" in ln), str(exc))
        return "%s %s cannot target it (%s)" % (info.family, info.version, first[:120])
    return None


def _compile_for(
    sources: Dict[str, _Source], target: Target, flags: List[str], info: CompilerInfo
) -> List[Tuple[str, str, bytes]]:
    """(kernel, entry name, object) for every source kernel, built for ``target`` (C in batches per flag set)."""
    out: List[Tuple[str, str, bytes]] = []
    batches: Dict[Tuple[str, ...], List[str]] = {}
    for name, src in sources.items():
        if src.kind == "ir":
            if info.family != "clang":
                raise CompilationError("kernels.%s is LLVM IR: building it needs clang, not %s" % (name, info.family))
            out.append(
                (name, "%s/%s.o" % (src.stem, target.name), compile_ir(src.text, extra_flags=[*flags, *src.flags]))
            )
        else:
            batches.setdefault(src.flags, []).append(name)
    for own_flags, names in batches.items():
        objs = compile_many_c(
            [sources[n].text for n in names],
            extra_flags=[*flags, *own_flags],
            compiler=info.path,
            names=["kernels.%s (%s)" % (n, target.name) for n in names],
        )
        out.extend((n, "%s/%s.o" % (sources[n].stem, target.name), o) for n, o in zip(names, objs))
    return out


def _check_object(data: bytes, target: Target, kernel: str) -> None:
    """The object is for ``target``'s machine and relocates with every external symbol resolvable."""
    problem = object_target_mismatch(data, target.name)
    if problem is not None:
        raise BundleError("kernels.%s (%s): the compiler's object is wrong: %s" % (kernel, target.name, problem))
    try:
        relocate(data, FAKE_BASE, _check_resolver)
    except LoaderError as exc:
        raise BundleError("kernels.%s (%s): the object does not relocate: %s" % (kernel, target.name, exc)) from None


def _check_resolver(name: str) -> int:
    """A stand-in address for any symbol the C library or libm defines (same names on every glibc arch)."""
    if not lookup(name) and name not in HELPER_NAMES:
        raise SymbolNotFoundError("undefined symbol %r is not in libc or libm, nor a helper svod_min ships" % name)
    return _FAKE_EXTERNAL


def _add_object(kernel: Dict[str, Any], target: str, entry: str, digest: str) -> None:
    objects = [o for o in kernel.get("objects", []) if o.get("target") != target]
    objects.append({"target": target, "file": entry, "sha256": digest})
    kernel["objects"] = objects


def _plan_bytes(doc: Dict[str, Any]) -> bytes:
    text = json.dumps(doc, indent=1)
    parse_plan_bytes(text.encode("utf-8"), PLAN)  # what we write must read back
    return text.encode("utf-8") + b"\n"


def _manifest(
    info: Optional[CompilerInfo],
    built: List[Tuple[Target, List[str]]],
    skipped: Dict[str, str],
    objects: Dict[str, Dict[str, str]],
) -> Dict[str, Any]:
    manifest: Dict[str, Any] = {
        "svod_min": __version__,
        "created_by": "python -m svod_min build",
        "targets": [t.name for t, _ in built],
        "skipped_targets": skipped,
        "objects": objects,
    }
    if info is not None:
        manifest["compiler"] = {"family": info.family, "version": info.version, "target": info.target}
        manifest["flags"] = {t.name: compiler_flags(info, flags) for t, flags in built}
    return manifest


__all__ = ["FAKE_BASE", "BuildReport", "PlanTuner", "build_bundle", "build_bundle_from_document", "compiler_arch"]
