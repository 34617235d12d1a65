"""What the scale-out tests share: the example bundle, its rows, a direct run of it, broken copies of it."""

from __future__ import annotations

import json
import os
import platform
from typing import Any, Callable, Dict

import numpy as np
import pytest
from support.paths import EXAMPLES

from svod_min import load_model
from svod_min.planfile.bundle import MANIFEST, PLAN, open_bundle, sha256, write_bundle

MLP = str(EXAMPLES / "scale" / "mlp.svod")
MLP_AARCH64 = str(EXAMPLES / "scale" / "mlp_aarch64.svod")
ROWS = 3000
x86_64_only = pytest.mark.skipif(
    platform.machine() != "x86_64", reason="the example bundle carries x86_64 objects only"
)


def rows(n: int = ROWS, seed: int = 11) -> Any:
    """``n`` rows of the example MLP's 16 features."""
    return np.random.default_rng(seed).standard_normal((n, 16)).astype(np.float32)


def direct_run(x: Any, bundle: str = MLP) -> Any:
    """The bundle run directly, 32 rows at a time (its fixed batch),
    the last piece padded: the single-machine answer."""
    model = load_model(bundle)
    pieces = []
    for start in range(0, len(x), 32):
        piece = x[start : start + 32]
        padded = np.concatenate([piece, np.zeros((32 - len(piece), 16), np.float32)])
        pieces.append(model(x=padded)["probs"][: len(piece)])
    return np.concatenate(pieces)


def mlp_bytes() -> bytes:
    with open(MLP, "rb") as fh:
        return fh.read()


def truncated_bundle() -> bytes:
    """The example bundle cut in half: not a readable zip."""
    data = mlp_bytes()
    return data[: len(data) // 2]


def broken_object_bundle(path: str) -> str:
    """The example bundle with every object cut to its 64-byte ELF header, the manifest and plan recording the
    cut objects' hashes: the bundle opens (hashes and machines agree), the loader refuses the objects."""
    return _objects_only(MLP, path, lambda obj: obj[:64])


def wrong_arch_bundle(path: str) -> str:
    """The example model with objects for aarch64 only (``mlp_aarch64.svod``): no source to compile instead,
    so an x86_64 host has nothing to run its kernels with."""
    return _objects_only(MLP_AARCH64, path, lambda obj: obj)


def _objects_only(source: str, path: str, change: Callable[[bytes], bytes]) -> str:
    """``source`` rewritten at ``path`` with each object ``change``d and the kernels' C source dropped."""
    bundle = open_bundle(source)
    files: Dict[str, bytes] = {n: d for n, d in bundle.entries.items() if n not in (MANIFEST, PLAN)}
    plan = json.loads(json.dumps(bundle.plan))
    for kernel in plan["kernels"].values():
        for obj in kernel.get("objects") or []:
            files[obj["file"]] = change(files[obj["file"]])
            obj["sha256"] = sha256(files[obj["file"]])
        for form in ("source", "file"):
            kernel.pop(form, None)  # no source to fall back on: the objects are all there is
    files[PLAN] = json.dumps(plan).encode()
    manifest = {k: v for k, v in bundle.manifest.items() if k not in ("entries", "svod_bundle")}
    write_bundle(path, files, manifest)
    return path


def marker_file(directory: str) -> str:
    """A file whose removal (by whichever worker removes it first) marks the one kill of a test."""
    path = os.path.join(directory, "kill-once")
    open(path, "w").close()
    return path


def remove_first(marker: str) -> bool:
    """True for the one caller that removes ``marker``."""
    try:
        os.remove(marker)
    except FileNotFoundError:
        return False
    return True
