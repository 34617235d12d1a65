"""Looking kernels up in the catalogue: names, signatures, CUDA kernels, PTX files, the host's variant.

Everything here reads the generated signature module (``_generated/signatures.py``,
imported on first use: it is large) and loads no code. :func:`find_sig`
resolves a name and parameters (dtype, tuning) to the :class:`KernelSig`
:func:`svod_min.kernels.get` would use; :func:`host_variant` and
:func:`use_prebuilt` say whether that comes from a prebuilt object.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import resources
from ..config import env_flag
from ..error import KernelNotFoundError, KernelParamError
from . import variants
from .elementwise import c_dtype
from .sig import CudaKernelSig, KernelSig, cuda_sig_from_row, sig_from_row

GEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_generated")
PREBUILT_ENV = "SVOD_KERNELS_PREBUILT"  # "0": never use prebuilt objects

SigKey = Tuple[str, Tuple[Tuple[str, Any], ...]]


def generated() -> Any:
    """The generated signature module (CATALOGUE, KERNELS, CUDA_KERNELS, PREFERRED, VARIANTS)."""
    from ._generated import signatures  # lazily: generated, and large

    return signatures


# --- lookup -------------------------------------------------------------------------------------

_index_lock = threading.RLock()
_sig_index: Dict[SigKey, Any] = {}  # -> row, then KernelSig


def _index() -> Dict[SigKey, Any]:
    with _index_lock:
        if not _sig_index:
            _sig_index.update(((r["name"], r["params"]), r) for r in generated().KERNELS)
        return _sig_index


def sig_for(key: SigKey) -> Optional[KernelSig]:
    """The signature of one ``(name, sorted params)`` instance, None when there is none."""
    index = _index()
    found = index.get(key)
    if found is None or isinstance(found, KernelSig):
        return found
    with _index_lock:
        sig = index[key] = sig_from_row(found)
        return sig


def catalogue() -> Dict[str, Dict[str, Any]]:
    """Kernel name -> family, params (default, allowed), doc, tolerance and every instance's params."""
    out: Dict[str, Dict[str, Any]] = {}
    for name, info in generated().CATALOGUE.items():
        entry = dict(info, params={k: dict(v) for k, v in info["params"].items()})
        entry["instances"] = [dict(p) for (n, p) in _index() if n == name]
        out[name] = entry
    return out


def names() -> List[str]:
    return sorted(generated().CATALOGUE)


def param_default(name: str, param: str, fallback: Any = None) -> Any:
    """A catalogue parameter's default (``fallback`` when the kernel has no such parameter)."""
    return generated().CATALOGUE[name]["params"].get(param, {}).get("default", fallback)


def _normalise(name: str, params: Mapping[str, Any], variant: Optional[str]) -> Tuple[Tuple[str, Any], ...]:
    info = generated().CATALOGUE[name]
    unknown = sorted(set(params) - set(info["params"]))
    if unknown:
        raise KernelParamError("%s has no parameter %s (parameters: %s)" % (name, unknown, sorted(info["params"])))
    chosen = {k: p["default"] for k, p in info["params"].items()}
    for k in ("dtype", "out_dtype"):
        if k in params:
            chosen[k] = c_dtype(params[k]).name
    pref = generated().PREFERRED.get(variant or "", {}).get(name, {}).get(chosen.get("dtype"), {})
    chosen.update((k, v) for k, v in pref.items() if k not in params)
    chosen.update((k, v) for k, v in params.items() if k not in ("dtype", "out_dtype"))
    for k, v in list(chosen.items()):
        allowed = info["params"][k]["allowed"]
        v = chosen[k] = _same_kind(v, allowed[0])
        if v not in allowed or type(v) is not type(allowed[0]):
            raise KernelParamError("%s: %s=%r is not supported (allowed: %s)" % (name, k, v, list(allowed)))
    return tuple(sorted(chosen.items()))


def _same_kind(value: Any, like: Any) -> Any:
    """numpy ints / bools as Python ones (so mr=np.int64(6) works); anything else unchanged."""
    if isinstance(like, bool):
        return bool(value) if type(value).__name__ in ("bool", "bool_") else value
    if isinstance(like, int) and not isinstance(value, (bool, float)) and hasattr(value, "__index__"):
        return int(value.__index__())
    return value


def find_sig(name: str, variant: Optional[str] = None, **params: Any) -> KernelSig:
    """The signature ``get`` would use (no code is loaded)."""
    if not isinstance(name, str) or name not in generated().CATALOGUE:
        import difflib  # here: only a name it does not know needs it

        close = difflib.get_close_matches(str(name), names(), n=3)
        hint = " (did you mean %s?)" % ", ".join(close) if close else ""
        raise KernelNotFoundError("no kernel %r in the library%s; kernels: %s" % (name, hint, ", ".join(names())))
    key = (name, _normalise(name, params, variant))
    sig = sig_for(key)
    if sig is None:
        allowed = [dict(p) for (n, p) in _index() if n == name]
        raise KernelParamError("%s has no instance for %s; instances: %s" % (name, dict(key[1]), allowed))
    return sig


def use_prebuilt(prebuilt: Optional[bool]) -> bool:
    """``prebuilt`` when given, else whether $SVOD_KERNELS_PREBUILT allows prebuilt objects."""
    if prebuilt is not None:
        return prebuilt
    return env_flag(PREBUILT_ENV, True)


# --- CUDA (PTX only, for now) ---------------------------------------------------------------------


def cuda_kernels() -> List[CudaKernelSig]:
    """Signatures of the CUDA kernels (launch dims are expressions of their variables)."""
    return [cuda_sig_from_row(r) for r in generated().CUDA_KERNELS]


def ptx_path(module: str) -> str:
    """Path of a generated PTX module (``elementwise``, ``reduce``, ``softmax``, ``transpose``, ``matmul``)."""
    if not isinstance(module, str) or not module.isidentifier():
        raise KernelNotFoundError("no PTX module %r (module names are identifiers)" % (module,))
    path = os.path.join(GEN_DIR, "cuda", module + ".ptx")
    if not resources.exists("kernels/_generated/cuda/%s.ptx" % module):
        raise KernelNotFoundError("no PTX module %r (%s)" % (module, path))
    return path


def host_variant() -> Optional[str]:
    """The prebuilt variant ``get`` uses on this host (None: kernels are compiled)."""
    return variants.choose_variant()


__all__ = [
    "GEN_DIR",
    "PREBUILT_ENV",
    "catalogue",
    "cuda_kernels",
    "find_sig",
    "generated",
    "host_variant",
    "names",
    "param_default",
    "ptx_path",
    "sig_for",
    "use_prebuilt",
]
