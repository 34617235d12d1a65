"""Everything codegen writes, as ``{path relative to the repo: bytes}``, plus writing and checking.

Generated trees (``svod_min/kernels/_generated``, ``svod_min/kernels/prebuilt``)
are owned entirely by codegen: files there that codegen no longer produces
are stale and removed (or, with --check, reported). ``docs/kernels.md`` is
hand-written except for the catalogue section between its markers.

Binary outputs depend on the toolchain (clang for objects, nvcc for PTX).
The manifest records which one built them; when this machine's differs (or
is missing), --check still verifies everything else (sources, signatures,
the manifest's source hashes and flags) and says which files it skipped.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from svod_min.jit_loader.native_layout import ENTRY

from . import build, cuda, docs, render
from .catalogue import PREFERRED, build_catalogue, excluded_entries

GEN = "svod_min/kernels/_generated"
PREBUILT = "svod_min/kernels/prebuilt"
MANIFEST = PREBUILT + "/manifest.json"
DOCS = "docs/kernels.md"
OWNED = (GEN, PREBUILT)


@dataclass
class Generated:
    files: Dict[str, bytes] = field(default_factory=dict)
    #: path -> why it could not be regenerated here (kept as committed; not compared)
    skipped: Dict[str, str] = field(default_factory=dict)
    #: manifest keys that describe toolchain output (masked when the toolchain differs)
    toolchain_keys: Tuple[str, ...] = ()


def generate(root: str, *, objects: bool = True, ptx: bool = True, jobs: int = 2) -> Generated:
    env = render.environment()
    families, ew = build_catalogue()
    prelude, skeleton, bodies = render.family_texts(env, families, ew)
    out = Generated()
    files = out.files
    files[GEN + "/__init__.py"] = _init_module().encode()
    files[GEN + "/c/prelude.h"] = prelude.encode()
    for fam in families:
        files["%s/c/%s.c" % (GEN, fam.name)] = render.family_file(fam, bodies[fam.name]).encode()
    files[GEN + "/skeletons.py"] = render.render_skeleton_module(env, skeleton).encode()
    cuda_fams, cuda_sigs = cuda.build_cuda_catalogue()
    cu_sources = {f.name: cuda.render_cuda(env, f) for f in cuda_fams}
    for name, text in sorted(cu_sources.items()):
        files["%s/cuda/%s.cu" % (GEN, name)] = text.encode()
    excluded = {v: excluded_entries(v, families) for v in sorted(build.VARIANTS)}
    variants = build.variants_table(excluded)
    files[GEN + "/signatures.py"] = render.render_signatures(env, families, cuda_sigs, variants, PREFERRED).encode()
    ordered = [bodies[f.name] for f in families]
    libraries = {v: render.library_source(v, prelude, ordered, excluded[v]) for v in sorted(build.VARIANTS)}
    entries = sorted({s.entry for f in families for s in f.sigs})
    manifest = _objects(root, out, libraries, entries, excluded, objects, jobs)
    blocks = cuda.entry_blocks(cuda_sigs)
    manifest["ptx"] = _ptx(root, out, cu_sources, ptx, jobs, lambda text: cuda.require_blocks(text, blocks))
    files[MANIFEST] = _json(manifest)
    files[DOCS] = docs.render_docs(root, families, cuda_sigs, variants).encode()
    return out


def _init_module() -> str:
    return '# %s\n"""Generated kernel sources, signatures and skeletons (see codegen/)."""\n' % (
        render.BANNER % "codegen/outputs.py"
    )


def _json(data: Dict[str, Any]) -> bytes:
    """JSON whose first line carries the GENERATED banner (JSON has no comments)."""
    banner = render.BANNER % "codegen/outputs.py (provenance of the prebuilt objects and PTX)"
    body = json.dumps(data, indent=1, sort_keys=False)
    return ('{"_generated": %s,\n%s\n' % (json.dumps(banner), body[2:])).encode()


def _committed_manifest(root: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(root, MANIFEST)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def _objects(
    root: str,
    out: Generated,
    libraries: Dict[str, str],
    entries: List[str],
    excluded: Dict[str, List[str]],
    enabled: bool,
    jobs: int,
) -> Dict[str, Any]:
    manifest: Dict[str, Any] = {"objects": {}}
    committed = _committed_manifest(root)
    built = built_with(committed, enabled)
    why = {name: reason for name, (_version, reason) in built.items()}
    objs = build.compile_objects(libraries, [n for n in sorted(built) if why[n] is None], jobs)
    default = build.clang_version() if enabled else None
    ok_default = default is not None and committed.get("compiler") in (None, "unknown", default)
    manifest["compiler"] = default if ok_default else committed.get("compiler", "unknown")
    manifest["runtime"] = _support(
        out, committed, built, jobs, "runtime", build.RUNTIME_NAME, build.RUNTIME_VARIANTS, build.runtime_source(), None
    )
    planner = render.render_layout_planner(render.environment())
    manifest["planner"] = _support(
        out, committed, built, jobs, "planner", build.PLANNER_NAME, build.PLANNER_VARIANTS, planner, [ENTRY]
    )
    for name, (_arch, flags, req, _prio) in sorted(build.VARIANTS.items()):
        path = "%s/%s/%s" % (PREBUILT, name, build.OBJECT_NAME)
        mine = [e for e in entries if e not in set(excluded[name])]
        desc = {
            "file": path[len(PREBUILT) + 1 :],
            "compiler": built[name][0],
            "flags": list(flags),
            "requires": list(req),
            "entries": len(mine),
            "source_sha256": build.sha256(libraries[name].encode()),
        }
        if name in objs:
            build.check_object(name, objs[name], mine)
        manifest["objects"][name] = _record(
            out, path, objs.get(name), why[name], committed.get("objects", {}).get(name, {}), desc
        )
    return manifest


def built_with(committed: Dict[str, Any], enabled: bool) -> Dict[str, Tuple[str, Optional[str]]]:
    """Variant -> (the compiler its objects are recorded as built with, why they cannot be rebuilt here or None).

    Each variant names its compiler (``build.COMPILERS``): when that program is missing or its version
    differs from the one that built the committed objects, those objects are kept as committed and not
    compared (the same policy for clang 14 and for clang-16, which only loongarch64 needs).
    """
    versions: Dict[str, Optional[str]] = {}
    out: Dict[str, Tuple[str, Optional[str]]] = {}
    for name in sorted(build.VARIANTS):
        program = build.variant_compiler(name)
        if program not in versions:
            versions[program] = build.clang_version(program) if enabled else None
        have = versions[program]
        old = committed.get("objects", {}).get(name, {}).get("compiler")
        if old is None and program == build.DEFAULT_COMPILER:
            old = committed.get("compiler")  # manifests before per-object compilers
        if not enabled:
            why: Optional[str] = "disabled (--no-objects)"
        elif have is None:
            why = "%s not found" % program
        elif old not in (None, "unknown", have):
            why = "built with %s, this machine's %s is %s" % (old, program, have)
        else:
            why = None
        out[name] = (have if why is None and have else (old or "unknown"), why)
    return out


def _record(
    out: Generated, path: str, data: Optional[bytes], why: Optional[str], old: Dict[str, Any], desc: Dict[str, Any]
) -> Dict[str, Any]:
    """``desc`` with the object's size and hash: the new object's, or the committed one's when not built here."""
    if data is not None:
        out.files[path] = data
        desc.update(size=len(data), sha256=build.sha256(data))
    else:
        out.skipped[path] = why or "not built"
        desc.update(size=old.get("size", 0), sha256=old.get("sha256", ""))
    return desc


def _support(
    out: Generated,
    committed: Dict[str, Any],
    built: Dict[str, Tuple[str, Optional[str]]],
    jobs: int,
    key: str,
    filename: str,
    variants: Sequence[str],
    source: str,
    self_contained: Optional[Sequence[str]],
) -> Dict[str, Any]:
    """Objects the package needs besides the kernels, prebuilt per architecture so that a cold start
    needs no compiler: the native replay runner (``runtime``) and the layout planner (``planner``).
    ``self_contained``: entry points each object must define, leaving nothing undefined (None: not
    checked; the runtime calls pthreads)."""
    objs = build.compile_support([n for n in variants if built[n][1] is None], source, jobs)
    source_sha256 = build.sha256(source.encode())
    info: Dict[str, Any] = {}
    for name in variants:
        path = "%s/%s/%s" % (PREBUILT, name, filename)
        desc: Dict[str, Any] = {"file": path[len(PREBUILT) + 1 :], "source_sha256": source_sha256}
        if self_contained is not None and name in objs:
            build.check_object(name, objs[name], self_contained)
        info[name] = _record(out, path, objs.get(name), built[name][1], committed.get(key, {}).get(name, {}), desc)
    return info


def _ptx(
    root: str, out: Generated, sources: Dict[str, str], enabled: bool, jobs: int, finish: Callable[[str], str]
) -> Dict[str, Any]:
    tools = build.find_cuda() if enabled else None
    committed = _committed_manifest(root).get("ptx", {})
    missing = "nvcc/ptxas not found (CUDA_HOME, /usr/local/cuda, PATH)"
    why = None if tools else ("disabled (--no-ptx)" if not enabled else missing)
    if tools and committed.get("nvcc") not in (None, "unknown", tools.version):
        why = "built with nvcc %s, this machine has %s" % (committed.get("nvcc"), tools.version)
    nvcc = tools.version if why is None and tools else committed.get("nvcc", "unknown")
    info: Dict[str, Any] = {
        "nvcc": nvcc,
        "arch": build.PTX_ARCH,
        "checked_with_ptxas": list(build.PTX_TARGETS),
        "modules": {},
    }
    texts = build.build_ptx(tools, sources, render.BANNER, jobs, finish) if why is None and tools else {}
    for name in sorted(sources):
        path = "%s/cuda/%s.ptx" % (GEN, name)
        if name in texts:
            data = texts[name].encode()
            out.files[path] = data
            info["modules"][name] = {"size": len(data), "sha256": build.sha256(data)}
        else:
            out.skipped[path] = why or "not built"
            info["modules"][name] = committed.get("modules", {}).get(name, {})
    return info


# --- writing and checking ------------------------------------------------------------


def owned_files(root: str) -> List[str]:
    found = []
    for top in OWNED:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for name in sorted(filenames):
                if name.endswith((".pyc", ".pyo")):
                    continue
                found.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return found


def write(root: str, gen: Generated) -> List[str]:
    """Write every generated file whose bytes changed; remove stale owned files. Returns changed paths."""
    changed = []
    for rel, data in sorted(gen.files.items()):
        path = os.path.join(root, rel)
        if _read(path) == data:
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
        changed.append(rel)
    for rel in owned_files(root):
        if rel not in gen.files and rel not in gen.skipped:
            os.remove(os.path.join(root, rel))
            changed.append(rel + " (removed)")
    return changed


def _read(path: str) -> Optional[bytes]:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def compare(root: str, gen: Generated) -> List[str]:
    """Paths whose committed bytes differ from ``gen`` (missing and stale files included)."""
    problems = []
    for rel, data in sorted(gen.files.items()):
        have = _read(os.path.join(root, rel))
        if have is None:
            problems.append("%s: missing" % rel)
        elif have != data:
            problems.append("%s: differs" % rel)
    for rel in owned_files(root):
        if rel not in gen.files and rel not in gen.skipped:
            problems.append("%s: stale (codegen no longer produces it)" % rel)
    for rel in sorted(gen.skipped):
        if _read(os.path.join(root, rel)) is None:
            problems.append("%s: missing (and cannot be built here: %s)" % (rel, gen.skipped[rel]))
    return problems


def report_skipped(gen: Generated) -> None:
    for rel, why in sorted(gen.skipped.items()):
        print("codegen: not checked: %s (%s)" % (rel, why), file=sys.stderr)
