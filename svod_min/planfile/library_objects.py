"""Library kernels a plan carries objects for: tuned tiles (``build --tune``) and instances not prebuilt.

A plan's library kernel may say, besides ``library`` and ``params``::

    "tuned": {"x86_64-v4": {"mr": 4, "nr": 8}}          tuning params measured on a host of that variant
    "library_objects": [{"variant": "x86_64-v4", "entry": "svod_conv2d_gemm_f32_4x8_relu_bias_packed",
                         "file": "objects/lib/<entry>/x86_64-v4.o", "sha256": "..."}]

At build (:func:`library_needs`, :func:`compile_library_objects`) every instance a ``tuned`` choice needs
that the variant's prebuilt object lacks, and every library kernel's own instance that a variant of a
built target's architecture lacks (float64 convolutions, activations outside the prebuilt subset), is
rendered from the library's own source and compiled with that variant's flags, so a host of the
variant runs it without a compiler. At load
(:func:`load_library_kernel`) a host whose prebuilt variant has a ``tuned`` entry uses that tile, from
its prebuilt object or the plan's object for (variant, entry point); when neither holds it the kernel's
own params are used (a debug log says so). Other hosts, and devices that load no host objects, use the
kernel's params as before. The same objects serve any instance a variant lacks: an untuned kernel whose
instance is not prebuilt here loads the plan's object for it before trying to compile.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from ..compiler.targets import TARGETS, object_target_mismatch
from ..devices.base import OBJECT
from ..error import CompilationError, SvodError
from .schema import as_list, as_object, as_sha256, as_text, known_keys, need

#: The keys a library kernel may carry besides ``library`` and ``params``.
LIBRARY_EXTRA_KEYS = ("tuned", "library_objects")
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


# --- reading -------------------------------------------------------------------------------------


def read_tuned(value: Any, path: str) -> Dict[str, Dict[str, Any]]:
    """``{variant: {param: int, str or bool}}``, checked."""
    out: Dict[str, Dict[str, Any]] = {}
    for variant, choice in as_object(value, path).items():
        where = "%s.%s" % (path, variant)
        need(_NAME.match(variant) is not None, where, "%r is not a variant name" % variant)
        choice = as_object(choice, where)
        need(
            all(isinstance(v, (int, str, bool)) and not isinstance(v, float) for v in choice.values()),
            where,
            "tuning params are ints, strings or booleans",
        )
        out[variant] = dict(choice)
    return out


def read_library_objects(value: Any, path: str) -> List[Dict[str, str]]:
    """``[{"variant", "entry", "file", "sha256"}, ...]``, one per (variant, entry point), checked."""
    out: List[Dict[str, str]] = []
    for i, o in enumerate(as_list(value, path)):
        where = "%s[%d]" % (path, i)
        o = as_object(o, where)
        known_keys(o, {"variant", "entry", "file", "sha256"}, where)
        rec = {key: as_text(o.get(key), "%s.%s" % (where, key)) for key in ("variant", "entry", "file")}
        rec["sha256"] = as_sha256(o.get("sha256"), where + ".sha256")
        need(_NAME.match(rec["variant"]) is not None, where + ".variant", "%r is not a variant name" % rec["variant"])
        need(
            all((t["variant"], t["entry"]) != (rec["variant"], rec["entry"]) for t in out),
            where,
            "a second object for %s %s" % (rec["variant"], rec["entry"]),
        )
        out.append(rec)
    return out


# --- loading ------------------------------------------------------------------------------------


def load_library_kernel(
    device: Any, read_bytes: Callable[[str, str], bytes], k: Mapping[str, Any], params: Dict[str, Any], path: str
) -> Any:
    """The ``DeviceKernel`` of library kernel ``k``: its tuned tile for this host's variant where it runs
    without compiling, else its own params (see the module doc)."""
    from ..kernels import library  # on first use: the library costs ~50 ms to import
    from ..kernels.variants import choose_variant

    name = as_text(k["library"], path + ".library")
    tuned = read_tuned(k["tuned"], path + ".tuned") if "tuned" in k else {}
    objects = read_library_objects(k["library_objects"], path + ".library_objects") if "library_objects" in k else []
    if library.library_form(device) != OBJECT or not (tuned or objects):
        return library.device_kernel(device, name, **params)
    variant = choose_variant()
    choice = tuned.get(variant) if variant is not None else None
    if choice:
        try:
            found = _instance(device, read_bytes, name, dict(params, **choice), variant, objects, path, strict=False)
        except SvodError as exc:  # a tile this svod_min does not know, a bad object: the defaults run
            _debug("%s: tuned %s not used: %s", path, choice, exc)
            found = None
        if found is not None:
            return found
        _debug(
            "%s: tuned %s is neither prebuilt for %s nor carried by the plan; using the defaults", path, choice, variant
        )
    return _instance(device, read_bytes, name, params, variant, objects, path, strict=True)


def _debug(message: str, *args: Any) -> None:
    """A debug line on ``svod_min.planfile`` (logging is imported here only: a plain load never needs it)."""
    import logging

    logging.getLogger("svod_min.planfile").debug(message, *args)


def _instance(
    device: Any,
    read_bytes: Callable[[str, str], bytes],
    name: str,
    params: Dict[str, Any],
    variant: Optional[str],
    objects: List[Dict[str, str]],
    path: str,
    strict: bool,
) -> Any:
    """The instance from the prebuilt object, else the plan's object; else compiled (``strict``) or None."""
    from ..kernels import library
    from ..kernels.lookup import find_sig, use_prebuilt
    from ..kernels.variants import has_entry

    sig = find_sig(name, variant, **params)
    if variant is not None and use_prebuilt(None) and has_entry(variant, sig.entry):
        return library.device_kernel(device, name, **params)
    i = next((i for i, o in enumerate(objects) if (o["variant"], o["entry"]) == (variant, sig.entry)), None)
    if i is not None:
        where = "%s.library_objects[%d]" % (path, i)
        data = read_bytes(objects[i]["file"], where + ".file")
        digest = hashlib.sha256(data).hexdigest()
        need(
            digest == objects[i]["sha256"],
            where + ".sha256",
            "object %r does not match its sha256" % objects[i]["file"],
        )
        problem = object_target_mismatch(data, variant_target(variant or ""))
        need(problem is None, where, "object %r: %s" % (objects[i]["file"], problem))
        return library.object_kernel(device, sig, data, variant, digest)
    return library.device_kernel(device, name, **params) if strict else None


def variant_target(variant: str) -> str:
    """The plain compile target of a prebuilt variant's architecture (``x86_64-v4`` -> ``x86_64``)."""
    arch = _variant_row(variant).get("arch")
    return next((t.name for t in sorted(TARGETS.values(), key=lambda t: t.priority) if t.arch == arch), "")


# --- building -----------------------------------------------------------------------------------


@dataclass
class LibraryNeed:
    """One library instance a plan kernel needs an object for: which kernel, variant, entry point, source."""

    kernel: str
    variant: str
    entry: str
    source: str


def library_needs(doc: Mapping[str, Any], archs: Sequence[str] = ()) -> List[LibraryNeed]:
    """The library instances the plan needs objects for: each ``tuned`` choice its variant's prebuilt object
    lacks, and each kernel's own instance that a variant of one of ``archs`` lacks (float64 convolutions...)."""
    kernels = doc.get("kernels") or {}
    if not any(isinstance(k, dict) and "library" in k for k in kernels.values()):
        return []
    from ..kernels.lookup import generated

    arch_variants = [v for v, row in sorted(generated().VARIANTS.items()) if row["arch"] in archs]
    out: List[LibraryNeed] = []
    for kname, k in kernels.items():
        if not isinstance(k, dict) or "library" not in k:
            continue
        tuned = read_tuned(k["tuned"], "kernels.%s.tuned" % kname) if "tuned" in k else {}
        wanted = [(v, dict(k.get("params", {}), **choice)) for v, choice in tuned.items()]
        wanted += [(v, dict(k.get("params", {}))) for v in arch_variants if v not in tuned]
        for variant, params in wanted:
            found = _missing_instance(kname, k["library"], variant, params)
            if found is not None and all((n.kernel, n.variant) != (kname, variant) for n in out):
                out.append(found)
    return out


def _missing_instance(kname: str, name: str, variant: str, params: Dict[str, Any]) -> Optional[LibraryNeed]:
    """The need for ``name(params)`` on ``variant`` when its prebuilt object lacks it (None: prebuilt, or no
    such instance for that variant, which the load reports where it matters)."""
    from ..kernels.lookup import find_sig
    from ..kernels.sources import kernel_source
    from ..kernels.variants import has_entry

    try:
        sig = find_sig(name, variant, **params)
    except SvodError:
        return None
    if has_entry(variant, sig.entry):
        return None
    return LibraryNeed(kname, variant, sig.entry, kernel_source(sig.family, sig.entry))


def _variant_row(variant: str) -> Dict[str, Any]:
    """The generated table's row of a prebuilt variant (empty for a name this svod_min does not know)."""
    from ..kernels.lookup import generated

    return dict(generated().VARIANTS.get(variant, {}))


def compile_library_objects(
    needs: List[LibraryNeed],
    info: Any,
    arch: str,
    progress: Callable[[str], None],
    check: Callable[[bytes, Any, str], None],
) -> List[Tuple[LibraryNeed, str, bytes]]:
    """(need, bundle entry name, object) for each need ``info``'s compiler (building for ``arch`` by default)
    can build; the others are noted and their hosts use the defaults."""
    from ..compiler.clang import compile_many_c

    out: List[Tuple[LibraryNeed, str, bytes]] = []
    by_variant: Dict[str, List[LibraryNeed]] = {}
    for n in needs:
        by_variant.setdefault(n.variant, []).append(n)
    for variant, group in by_variant.items():
        row = _variant_row(variant)
        flags = list(row.get("flags", ()))
        if info.family != "clang":  # gcc builds for its own architecture only, and takes no --target
            if arch != row.get("arch"):
                progress(
                    "note: %s %s cannot build library kernels for %s; hosts of that variant use the defaults "
                    "(or compile)" % (info.family, info.version, variant)
                )
                continue
            flags = [f for f in flags if not f.startswith("--target=")]
        progress(
            "building %d library kernel(s) for %s (tuned tiles, or instances it has not prebuilt)"
            % (len(group), variant)
        )
        try:
            objs = compile_many_c(
                [n.source for n in group],
                extra_flags=flags,
                compiler=info.path,
                names=["kernels.%s (%s)" % (n.kernel, variant) for n in group],
            )
        except CompilationError as exc:
            progress(
                "note: library kernels for %s do not build (%s); hosts of that variant use the defaults "
                "(or compile)" % (variant, str(exc).splitlines()[0][:160])
            )
            continue
        for n, data in zip(group, objs):
            check(data, TARGETS[variant_target(variant)], n.kernel)
            out.append((n, "objects/lib/%s/%s.o" % (re.sub(r"[^A-Za-z0-9_.-]", "_", n.entry)[:96], variant), data))
    return out


def add_library_object(kernel: Dict[str, Any], need_: LibraryNeed, entry: str, digest: str) -> None:
    """Record the object ``entry`` in the plan kernel (one per variant and entry point)."""
    records = [
        o
        for o in kernel.get("library_objects", [])
        if (o.get("variant"), o.get("entry")) != (need_.variant, need_.entry)
    ]
    records.append({"variant": need_.variant, "entry": need_.entry, "file": entry, "sha256": digest})
    kernel["library_objects"] = records


__all__ = [
    "LIBRARY_EXTRA_KEYS",
    "LibraryNeed",
    "add_library_object",
    "compile_library_objects",
    "library_needs",
    "load_library_kernel",
    "read_library_objects",
    "read_tuned",
    "variant_target",
]
