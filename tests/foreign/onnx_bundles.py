"""ONNX light models as bundles for another architecture, checked against this host's run of the same bundle.

``build`` runs where onnx and numpy are (the host): each model (random weights, tests/support/onnx_models.py)
is built for this host's target and the targets asked for, run here by svod_min on seeded inputs, and the
inputs, this host's outputs, the bundles, the one-file runtime and a manifest are written to DIR. ``check``
needs nothing but a Python 3.8+ (the emulation roots' python3): it runs ``python3 svod_min.pyz run BUNDLE
--input ... --save ...`` with PATH an empty folder (no compiler: the bundle's objects for this architecture
and the prebuilt library are all it has) and compares every saved output with the host's.

  python3 tests/foreign/onnx_bundles.py build DIR --target aarch64 [--model squeezenet ...] [--cc clang-16]
  python3 tests/foreign/onnx_bundles.py check DIR

The two runs sum in different orders (vector widths, FMA), so they agree within a relative 1e-4, not exactly.
"""

from __future__ import annotations

import argparse
import array
import json
import math
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODELS = ("squeezenet", "shufflenet")  # the two cheapest light models: one mostly library kernels, one generated C
MANIFEST = "manifest.json"
PYZ = "svod_min.pyz"
RTOL = 1e-4
TIMEOUT_S = 600


def build(
    directory: str, targets: Sequence[str], models: Sequence[str] = MODELS, compiler: Optional[str] = None
) -> Dict[str, Any]:
    """Bundles, inputs, this host's outputs, the .pyz and the manifest in ``directory`` (onnx and numpy needed)."""
    sys.path[:0] = [p for p in (REPO, os.path.join(REPO, "tests")) if p not in sys.path]
    import numpy as np
    import onnx
    from support.onnx_models import host_target, random_inputs, randomized

    from svod_min import load_model
    from svod_min.onnx import build_onnx
    from svod_min.planfile.pyz import build_pyz

    os.makedirs(directory, exist_ok=True)
    entries = []
    for name in models:
        model = randomized(name)
        feeds = random_inputs(model)
        source = os.path.join(directory, name + ".onnx")
        onnx.save(model, source)
        bundle = name + ".svod"
        built = build_onnx(
            source, os.path.join(directory, bundle), targets=[host_target(), *targets], compiler=compiler, expect=False
        ).report
        if built.skipped:  # a bundle without the objects asked for would need a compiler there
            raise RuntimeError(
                "%s: targets not built: %s" % (name, "; ".join("%s (%s)" % kv for kv in built.skipped.items()))
            )
        os.remove(source)
        outputs = load_model(os.path.join(directory, bundle)).run(feeds)
        entry = {"name": name, "bundle": bundle, "inputs": {}, "outputs": {}}
        for kind, arrays in (("inputs", feeds), ("outputs", outputs)):
            for i, (key, value) in enumerate(sorted(arrays.items())):
                entry[kind][key] = "%s-%s-%d.npy" % (name, kind, i)
                np.save(os.path.join(directory, entry[kind][key]), np.ascontiguousarray(value))
        entries.append(entry)
    build_pyz(os.path.join(directory, PYZ))
    manifest = {"host_target": host_target(), "targets": list(targets), "models": entries}
    with open(os.path.join(directory, MANIFEST), "w") as fh:
        json.dump(manifest, fh, indent=1)
    return manifest


def load_manifest(directory: str) -> Dict[str, Any]:
    with open(os.path.join(directory, MANIFEST)) as fh:
        return json.load(fh)


def run_bundle(
    directory: str, entry: Dict[str, Any], out_dir: str, python: str = sys.executable
) -> subprocess.CompletedProcess:
    """``python svod_min.pyz run`` on one model with its inputs, outputs saved to ``out_dir``; PATH an empty folder."""
    empty = os.path.join(out_dir + "-empty-path")
    os.makedirs(empty, exist_ok=True)
    cmd = [
        python,
        "-I",
        os.path.join(directory, PYZ),
        "run",
        os.path.join(directory, entry["bundle"]),
        "--repeat",
        "1",
        "--save",
        out_dir,
    ]
    for name, path in entry["inputs"].items():
        cmd += ["--input", "%s=%s" % (name, os.path.join(directory, path))]
    env = {"PATH": empty, "SVOD_OBJECT_CACHE": "0", "HOME": out_dir, "LANG": "C.UTF-8"}
    return subprocess.run(
        cmd,
        env=env,
        cwd=directory,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        universal_newlines=True,
        timeout=TIMEOUT_S,
    )


def read_float32(path: str) -> Tuple[Tuple[int, ...], array.array]:
    """A float32 .npy file's shape and values, read by svod_min's own reader (no numpy)."""
    sys.path[:0] = [REPO] if REPO not in sys.path else []
    from svod_min.npy import read_npy

    dt, shape, payload = read_npy(path)
    if dt.name != "float32":
        raise ValueError("%s holds %s, not float32" % (path, dt.name))
    values = array.array("f")
    values.frombytes(bytes(payload))
    if sys.byteorder != "little":
        values.byteswap()
    return tuple(shape), values


def max_rel_error(got: Sequence[float], want: Sequence[float]) -> float:
    """max |got - want| / max(|want|, 1e-3 * max |want|), as tests/support/onnx_models.py measures it."""
    if not want:
        return 0.0
    floor = max(1e-3 * max(abs(w) for w in want), 1e-12)
    errors = [abs(g - w) / max(abs(w), floor) for g, w in zip(got, want)]
    return math.inf if any(math.isnan(e) for e in errors) else max(errors)  # max() would pass over a NaN


def saved_file(out_dir: str, name: str) -> str:
    """Where ``run --save out_dir`` writes output ``name`` (path separators in the name become '_')."""
    return os.path.join(out_dir, name.replace("/", "_").replace("\\", "_") + ".npy")


def compare(directory: str, entry: Dict[str, Any], out_dir: str) -> Tuple[Dict[str, float], List[str]]:
    """Each saved output's relative error against the host's, and what differs (empty: every output within RTOL)."""
    errors: Dict[str, float] = {}
    problems = []
    for name, path in entry["outputs"].items():
        saved = saved_file(out_dir, name)
        if not os.path.isfile(saved):
            problems.append("%s: output %s was not saved" % (entry["name"], name))
            continue
        (got_shape, got), (want_shape, want) = read_float32(saved), read_float32(os.path.join(directory, path))
        if got_shape != want_shape:
            problems.append("%s: output %s has shape %s, the host's %s" % (entry["name"], name, got_shape, want_shape))
            continue
        err = errors[name] = max_rel_error(got, want)
        if not err < RTOL:  # NaN fails too
            problems.append(
                "%s: output %s differs from the host's by %.3g relative (limit %g)" % (entry["name"], name, err, RTOL)
            )
    return errors, problems


def check(directory: str) -> List[str]:
    """Every model of the manifest run here and compared; one line per model on stdout; the problems found."""
    problems = []
    for entry in load_manifest(directory)["models"]:
        out_dir = os.path.join(directory, entry["name"] + "-saved")
        proc = run_bundle(directory, entry, out_dir)
        if proc.returncode != 0:
            problems.append(
                "%s: run exited %d: %s" % (entry["name"], proc.returncode, (proc.stdout + proc.stderr)[-2000:])
            )
            continue
        errors, found = compare(directory, entry, out_dir)
        measured = ", ".join("%s %.2g" % (name, err) for name, err in sorted(errors.items()))
        print("%s: %s (max relative error: %s)" % (entry["name"], "FAILED" if found else "ok", measured or "-"))
        problems += found
    return problems


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="bundles and the host's outputs (needs onnx and numpy)")
    b.add_argument("directory")
    b.add_argument("--target", action="append", default=[], help="a target besides this host's (repeatable)")
    b.add_argument(
        "--model", action="append", default=[], help="a light model (repeatable; default: %s)" % ", ".join(MODELS)
    )
    b.add_argument("--cc", help="the compiler for the generated kernels (default: svod_min's choice)")
    c = sub.add_parser("check", help="run every bundle here and compare with the host's outputs")
    c.add_argument("directory")
    args = parser.parse_args(argv)
    if args.command == "build":
        manifest = build(args.directory, args.target, args.model or MODELS, args.cc)
        print(
            "onnx bundles: %s for %s in %s"
            % (
                ", ".join(m["name"] for m in manifest["models"]),
                ", ".join([manifest["host_target"], *args.target]),
                args.directory,
            )
        )
        return 0
    problems = check(args.directory)
    for line in problems:
        print("FAILED: " + line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
