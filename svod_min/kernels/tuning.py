"""The tuning store: the winners ``python -m svod_min tune`` measured, and their use by ``get``.

One JSON file, ``tuning.json`` under the cache root, beside ``objects/``
(``SVOD_TUNING_FILE`` overrides), keyed by kernel, dtype, shape and machine
(arch, CPU model, prebuilt variant, svod_min version). Writes are atomic
(temp file + ``os.replace``); a missing, unreadable, corrupt or read-only
store is ignored (debug log), never an error. The autotuner
(:mod:`svod_min.perf.autotune`) writes it; :func:`svod_min.kernels.get` reads it
through :func:`tuned_params` and never imports the tuner.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import threading
from typing import Any, Dict, Mapping, Optional, Tuple

from .. import __version__
from ..compiler.clang import find_compiler
from ..config import cache_root, env_str
from ..error import CompilationError, KernelParamError, SvodError
from ..jit_loader.arch import host_arch
from . import variants
from .elementwise import c_dtype
from .lookup import find_sig, param_default, use_prebuilt

log = logging.getLogger("svod_min.perf.autotune")  # the tuner's logger: one switch for both halves

STORE_FORMAT = 1
STORE_NAME = "tuning.json"
TUNING_FILE_ENV = "SVOD_TUNING_FILE"

#: "This host's prebuilt variant" (``None`` is a variant value: kernels are compiled).
HOST: Any = object()


# --- machine fingerprint -------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The CPU's model name (x86 ``model name``; arm implementer/part), or "unknown"."""
    found: Dict[str, str] = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                key, sep, value = line.partition(":")
                key = key.strip().lower()
                if sep and key not in found:
                    found[key] = " ".join(value.split())
    except OSError:
        pass
    if found.get("model name"):
        return found["model name"]
    parts = ["%s %s" % (k, found[k]) for k in ("hardware", "cpu implementer", "cpu part") if found.get(k)]
    return ", ".join(parts) or "unknown"


def resolve_variant(variant: Any) -> Optional[str]:
    """``variant``, or this host's prebuilt variant for :data:`HOST`."""
    return variants.choose_variant() if variant is HOST else variant


def machine_fingerprint(variant: Any = HOST) -> Dict[str, str]:
    """What a tuning result is valid for: arch, CPU model, prebuilt variant, svod_min version."""
    return {
        "arch": host_arch(),
        "cpu": cpu_model(),
        "variant": resolve_variant(variant) or "compiled",
        "svod_min": __version__,
    }


# --- the file ---------------------------------------------------------------------------------

_store_lock = threading.Lock()
_store_memo: Dict[str, Tuple[Tuple[int, int, int], Dict[str, Any]]] = {}


def store_path() -> Optional[str]:
    """``SVOD_TUNING_FILE``, else ``tuning.json`` under the cache root, beside ``objects/`` (None: no home)."""
    explicit = env_str(TUNING_FILE_ENV)
    if explicit:
        return os.path.abspath(explicit)
    root = cache_root()
    return None if root is None else os.path.join(root, STORE_NAME)


def read_store(path: str) -> Dict[str, Any]:
    """The store's entries (empty when missing, unreadable or corrupt); parsed once per file version."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    memo = _store_memo.get(path)
    if memo is not None and memo[0] == stamp:
        return memo[1]
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, RecursionError) as exc:
        log.debug("tuning store %s ignored: %s", path, exc)
        return {}
    entries = doc.get("entries") if isinstance(doc, dict) and doc.get("format") == STORE_FORMAT else None
    if not isinstance(entries, dict):
        log.debug("tuning store %s ignored: not a format-%d tuning store", path, STORE_FORMAT)
        entries = {}
    _store_memo[path] = (stamp, entries)
    return entries


def write_store(path: str, key: str, entry: Dict[str, Any]) -> bool:
    """Add one entry (re-reading the file first); False when the store cannot be written."""
    with _store_lock:
        entries = dict(read_store(path))
        entries[key] = entry
        text = json.dumps({"format": STORE_FORMAT, "entries": entries}, indent=1, sort_keys=True) + "\n"
        directory = os.path.dirname(path)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".part", dir=directory)
        except OSError as exc:
            log.debug("tuning store %s not written: %s", path, exc)
            return False
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
            return True
        except OSError as exc:
            log.debug("tuning store %s not written: %s", path, exc)
            _unlink_quiet(tmp)
            return False


def _unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# --- keys ---------------------------------------------------------------------------------------


def shape_dict(shape: Any) -> Dict[str, Any]:
    """``shape`` as ``{name: int or float}``; KernelParamError when it is not such a mapping."""
    if not isinstance(shape, Mapping):
        raise KernelParamError("shape must be a mapping of variable names to numbers, got %r" % (shape,))
    out: Dict[str, Any] = {}
    for k, v in shape.items():
        if (
            not isinstance(k, str)
            or isinstance(v, bool)
            or not isinstance(v, (int, float))
            and not hasattr(v, "__index__")
        ):
            raise KernelParamError("shape entry %r=%r: expected a variable name and a number" % (k, v))
        out[k] = v if isinstance(v, (int, float)) else int(v.__index__())  # numpy ints as ints
    return out


def store_key(name: str, dtype: str, shape: Mapping[str, Any], machine: Mapping[str, str]) -> str:
    """The entry's key: kernel, dtype, sorted shape and the machine fingerprint's fields."""
    dims = ",".join("%s=%s" % kv for kv in sorted(shape.items()))
    where = "|".join(machine[k] for k in ("arch", "cpu", "variant", "svod_min"))
    return "%s|%s|%s|%s" % (name, dtype, dims, where)


def dtype_name(dtype: Any) -> str:
    """The canonical name of a dtype (``"f32"``, numpy dtypes... -> ``"float32"``)."""
    return c_dtype(dtype).name


def best_params(name: str, dtype: Any, shape: Mapping[str, Any], variant: Any = HOST) -> Optional[Dict[str, Any]]:
    """The stored winner's tuning params for this kernel, dtype, shape and machine (None: not tuned)."""
    path = store_path()
    if path is None:
        return None
    key = store_key(name, dtype_name(dtype), shape_dict(shape), machine_fingerprint(variant))
    entry = read_store(path).get(key)
    params = entry.get("params") if isinstance(entry, dict) else None
    if not isinstance(params, dict) or not all(isinstance(v, (int, str, bool)) for v in params.values()):
        return None
    return dict(params)


# --- automatic use (svod_min.kernels.get) --------------------------------------------------


def tuned_params(
    name: str,
    params: Mapping[str, Any],
    shape: Optional[Mapping[str, Any]],
    prebuilt: Optional[bool] = None,
    variant: Any = HOST,
) -> Dict[str, Any]:
    """``params`` plus the stored tuning params for ``shape``, or ``params`` unchanged.

    Unchanged when ``shape`` is None, nothing is stored, the caller gave any
    tuning parameter, or the stored instance cannot be served here (no
    such instance any more, not prebuilt and no compiler, ``prebuilt=True``).
    ``variant``: the prebuilt variant ``get`` uses (default: this host's).
    """
    out = dict(params)
    variant = resolve_variant(variant)
    if shape is None:
        return out
    shape = shape_dict(shape)
    try:
        best = best_params(name, params.get("dtype", param_default(name, "dtype", "float32")), shape, variant)
    except (KeyError, TypeError, SvodError) as exc:  # bad name / dtype: get() reports it
        log.debug("no tuned params for %s: %s", name, exc)
        return out
    if not best or set(best) & set(params):
        return out
    merged = dict(out, **best)
    return merged if _servable(name, merged, prebuilt, variant) else out


def _servable(name: str, params: Mapping[str, Any], prebuilt: Optional[bool], variant: Optional[str]) -> bool:
    try:
        sig = find_sig(name, variant, **params)
    except SvodError as exc:
        log.debug("stored tuning of %s ignored: %s", name, exc)
        return False
    if prebuilt_here(sig, prebuilt, variant):
        return True
    return prebuilt is not True and have_compiler()


def prebuilt_here(sig: Any, prebuilt: Optional[bool] = None, variant: Any = HOST) -> bool:
    """True when ``get`` would serve ``sig`` from this host's prebuilt object."""
    variant = resolve_variant(variant)
    return use_prebuilt(prebuilt) and variant is not None and variants.has_entry(variant, sig.entry)


def have_compiler() -> bool:
    """Whether a C compiler is available (kernels that are not prebuilt need one)."""
    try:
        find_compiler()
        return True
    except CompilationError:
        return False


__all__ = [
    "HOST",
    "STORE_FORMAT",
    "STORE_NAME",
    "TUNING_FILE_ENV",
    "best_params",
    "cpu_model",
    "dtype_name",
    "have_compiler",
    "machine_fingerprint",
    "prebuilt_here",
    "read_store",
    "resolve_variant",
    "shape_dict",
    "store_key",
    "store_path",
    "tuned_params",
    "write_store",
]
