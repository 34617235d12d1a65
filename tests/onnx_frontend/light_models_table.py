"""The nine light CNNs of the onnx wheel (random weights) built and run by svod_min: one table row each.

  python3 tests/onnx_frontend/light_models_table.py [MODEL ...]

Columns: the build's wall time (``build_onnx`` for this host's target, the object cache off, no
expectations recorded, so onnxruntime is not in it), the bundle's size, its distinct kernels (prebuilt
library / generated C), the objects compiled at build time (the generated kernels for this target),
the processes started while loading and running the bundle other than ctypes' ``ldconfig -p`` (a
compile would be one: 0 means the bundle needed no compiler), and the largest relative error of any
output against onnxruntime (1 thread) on the same seeded inputs.
Not a test: figures for docs and reports. Needs numpy, onnx and onnxruntime.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE)]
os.environ.setdefault("SVOD_OBJECT_CACHE", "0")  # every build compiles: no object from an earlier run

import onnx  # noqa: E402
from support.onnx_models import LIGHT_MODELS, host_target, max_rel_error, random_inputs, randomized, run_ort  # noqa: E402

from svod_min import load_model  # noqa: E402
from svod_min.onnx import build_onnx  # noqa: E402

COLUMNS = (
    "model",
    "build s",
    "bundle MiB",
    "kernels lib/gen",
    "compiled at build",
    "compiler runs at load+run",
    "max rel err vs ORT",
)


class _CountingPopen(subprocess.Popen):  # type: ignore[type-arg]
    """Counts the processes started but ctypes' ``ldconfig -p`` (find_library, resolving libc/libm symbols)."""

    started = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        argv = args[0] if args else kwargs.get("args", "")
        program = argv if isinstance(argv, str) else argv[0]
        if os.path.basename(str(program)) != "ldconfig":
            type(self).started += 1
        super().__init__(*args, **kwargs)


def measure(name: str, directory: str) -> Dict[str, Any]:
    model = randomized(name)
    feeds = random_inputs(model)
    want = run_ort(model, feeds)
    source, bundle = os.path.join(directory, name + ".onnx"), os.path.join(directory, name + ".svod")
    onnx.save(model, source)
    t0 = time.perf_counter()
    built = build_onnx(source, bundle, targets=[host_target()], expect=False)
    build_s = time.perf_counter() - t0
    real_popen, _CountingPopen.started = subprocess.Popen, 0
    subprocess.Popen = _CountingPopen  # type: ignore[misc]
    try:
        m = load_model(bundle)
        got = m.run(feeds)
    finally:
        subprocess.Popen = real_popen  # type: ignore[misc]
    errors = [max_rel_error(got[out], value) for out, value in zip(m.output_names, want)]
    return {
        "model": name,
        "build s": "%.2f" % build_s,
        "bundle MiB": "%.1f" % (os.path.getsize(bundle) / 2**20),
        "kernels lib/gen": "%d/%d" % (built.kernels.get("library", 0), built.kernels.get("generated C", 0)),
        "compiled at build": str(built.report.objects),
        "compiler runs at load+run": str(_CountingPopen.started),
        "max rel err vs ORT": "%.1e" % max(errors),
    }


def markdown(rows: Sequence[Dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: List[str]) -> int:
    names = argv or list(LIGHT_MODELS)
    rows = []
    for name in names:
        with tempfile.TemporaryDirectory() as directory:
            rows.append(measure(name, directory))
        print("measured %s" % name, file=sys.stderr, flush=True)
    print(
        "host target %s, %d CPUs, load average %.1f %.1f %.1f"
        % ((host_target(), os.cpu_count() or 0) + os.getloadavg())
    )
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
