"""The built-in kernel check behind ``python -m svod_min selfcheck``.

The check follows the device's program forms. A device that loads C (the CPU) runs a handful of
kernels that exercise the whole pipeline (compile -> relocate -> W^X map -> call): plain loops,
libm calls, static tables, ``.bss`` state and a ``core_id``-threaded kernel. A device that loads
PTX (a GPU) runs one shipped PTX kernel of each library module (elementwise, matmul, softmax,
reduce, transpose), timed with its own events. Each result is compared with a pure-Python
reference, so the check needs no numpy.

A CPU host with no C compiler on PATH cannot compile, and that is no failure there: what it can run, the
prebuilt library kernels of its variant (add, matmul, softmax, reduce_sum, transpose), are run through
the loader instead, against the same references as the GPU check, and :func:`compile_skipped` says why.
"""

from __future__ import annotations

import math
import random
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from ..compiler.probe import missing_compiler
from ..devices.base import C_SOURCE, MAPPED_OBJECT, PTX, ProgramSource
from ..devices.cpu.device import CpuDevice, create_cpu_device
from ..error import CompilerNotFoundError, NotSupportedError

SOURCE = r"""
#include <math.h>
static const float weights[4] = {0.5f, 1.0f, 1.5f, 2.0f};
static long calls;  /* .bss state across calls */

void add(float* restrict out, const float* restrict a, const float* restrict b, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] + b[i];
}
void softplus(float* restrict out, const float* restrict a, int n) {
    calls++;
    for (int i = 0; i < n; i++) out[i] = logf(1.0f + expf(a[i]));
}
void weighted(float* restrict out, const float* restrict a, int n) {
    for (int i = 0; i < n; i++) out[i] = a[i] * weights[i & 3];
}
void matmul(float* restrict c, const float* restrict a, const float* restrict b, int n, int core_id) {
    /* rows split over core_id: 4 chunks */
    int lo = core_id * n / 4, hi = (core_id + 1) * n / 4;
    for (int i = lo; i < hi; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int k = 0; k < n; k++) acc += a[i * n + k] * b[k * n + j];
            c[i * n + j] = acc;
        }
}
"""


@dataclass
class CheckResult:
    name: str
    ok: bool
    max_error: float
    elapsed: float  # seconds, best of the timed runs
    origin: str = "compiled"  # where the code came from: "compiled" (C), "ptx", "prebuilt <variant>"


def _floats(values: Sequence[float]) -> List[float]:
    return list(struct.unpack("%df" % len(values), struct.pack("%df" % len(values), *values)))


def _compare(got: Sequence[float], want: Sequence[float], rtol: float = 1e-5, atol: float = 1e-5) -> tuple:
    worst = 0.0
    ok = len(got) == len(want)
    for g, w in zip(got, want):
        err = abs(g - w)
        worst = max(worst, err)
        if not err <= atol + rtol * abs(w):
            ok = False
    return ok, worst


def _time(call: Callable[[], None], repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - t0)
    return best


def _check_form(dev: Any) -> Optional[str]:
    return next((f for f in dev.program_forms if f in (C_SOURCE, PTX)), None)


def compile_skipped(device: Any) -> Optional[str]:
    """Why selfcheck runs the prebuilt library on ``device`` instead of compiling (None: it compiles).

    Only a device that would compile C with this host's compiler and maps the prebuilt library (the CPU)
    skips, and only for want of a compiler on PATH: one that is there but fails is still a failure.
    """
    forms = device.program_forms
    if _check_form(device) != C_SOURCE or MAPPED_OBJECT not in forms:
        return None
    return missing_compiler()


def run_selfcheck(device: "CpuDevice | None" = None, n: int = 4096, size: int = 64) -> List[CheckResult]:
    """Compile the built-in kernels (C), or load the shipped PTX ones, run them, and compare with pure Python.

    A CPU host without a compiler runs its prebuilt library kernels instead (:func:`run_prebuilt_selfcheck`).
    """
    dev = device or create_cpu_device()
    form = _check_form(dev)
    if form == PTX:
        return run_gpu_selfcheck(dev)
    if form is None:
        raise NotSupportedError(
            "selfcheck runs C or PTX kernels; %s loads %s" % (dev.spec, ", ".join(dev.program_forms))
        )
    skipped = compile_skipped(dev)
    if skipped is not None:
        return run_prebuilt_selfcheck(dev, skipped)
    rng = random.Random(0)
    a = _floats([rng.uniform(-2, 2) for _ in range(n)])
    b = _floats([rng.uniform(-2, 2) for _ in range(n)])
    buf_a = dev.allocate([n], "float32").copyin(a)
    buf_b = dev.allocate([n], "float32").copyin(b)
    out = dev.allocate([n], "float32")
    results = []

    def check(name: str, program_args: tuple, want: List[float], rtol: float = 1e-5, **kw: object) -> None:
        prog = dev.load_program(ProgramSource(C_SOURCE, SOURCE, name, **program_args))  # type: ignore[arg-type]
        buffers, vals = kw["buffers"], kw.get("vals", ())
        call = prog.bind(buffers, vals, global_size=kw.get("global_size"))  # type: ignore[arg-type]
        elapsed = _time(call)
        target = kw.get("out", out)
        ok, err = _compare(target.tolist(), want, rtol=rtol)  # type: ignore[attr-defined]
        results.append(CheckResult(name, ok, err, elapsed))

    check(
        "add",
        {"buf_count": 3, "var_names": ["n"]},
        [x + y for x, y in zip(a, b)],
        buffers=[out, buf_a, buf_b],
        vals=[n],
    )
    check(
        "softplus",
        {"buf_count": 2, "var_names": ["n"]},
        [math.log1p(math.exp(x)) for x in a],
        rtol=1e-4,
        buffers=[out, buf_a],
        vals=[n],
    )
    scale = (0.5, 1.0, 1.5, 2.0)
    check(
        "weighted",
        {"buf_count": 2, "var_names": ["n"]},
        [x * scale[i & 3] for i, x in enumerate(a)],
        buffers=[out, buf_a],
        vals=[n],
    )
    m_a = _floats([rng.uniform(-1, 1) for _ in range(size * size)])
    m_b = _floats([rng.uniform(-1, 1) for _ in range(size * size)])
    ma = dev.allocate([size * size], "float32").copyin(m_a)
    mb = dev.allocate([size * size], "float32").copyin(m_b)
    mc = dev.allocate([size * size], "float32")
    want = [sum(m_a[i * size + k] * m_b[k * size + j] for k in range(size)) for i in range(size) for j in range(size)]
    check(
        "matmul",
        {"buf_count": 3, "var_names": ["n", "core_id"]},
        want,
        rtol=1e-4,
        buffers=[mc, ma, mb],
        vals=[size, 0],
        global_size=(4, 1, 1),
        out=mc,
    )
    return results


def _library_inputs(rows: int, cols: int, k: int) -> Dict[str, List[float]]:
    """The library checks' inputs: a, b (rows x cols), x (rows x k), w (k x cols); seeded."""
    rng = random.Random(1)
    n = rows * cols
    a = _floats([rng.uniform(-2, 2) for _ in range(n)])
    b = _floats([rng.uniform(-2, 2) for _ in range(n)])
    w = _floats([rng.uniform(-1, 1) for _ in range(k * cols)])
    x = _floats([rng.uniform(-1, 1) for _ in range(rows * k)])
    return {"a": a, "b": b, "w": w, "x": x}


def _library_wants(data: Dict[str, List[float]], rows: int, cols: int, k: int) -> Dict[str, List[float]]:
    """Pure-Python results of the library checks (the same for shipped PTX and prebuilt objects)."""
    a, b, w, x = data["a"], data["b"], data["w"], data["x"]
    return {
        "add": [p + q for p, q in zip(a, b)],
        "matmul": [sum(x[i * k + j] * w[j * cols + c] for j in range(k)) for i in range(rows) for c in range(cols)],
        "softmax": _softmax_rows(a, rows, cols),
        "reduce_sum": [sum(a[r * cols : (r + 1) * cols]) for r in range(rows)],
        "transpose": [a[r * cols + c] for c in range(cols) for r in range(rows)],
    }


def run_gpu_selfcheck(dev: Any, rows: int = 37, cols: int = 45) -> List[CheckResult]:
    """Library kernels from the shipped PTX on a GPU device, against pure Python (device-time best of 5)."""
    # On use: the kernel library costs ~28 ms of imports the CPU selfcheck does not need.
    from .cuda_library import cuda_library_kernel

    n, k = rows * cols, 29
    data = _library_inputs(rows, cols, k)
    want = _library_wants(data, rows, cols, k)
    bufs = {name: dev.allocate([len(v)], "float32").copyin(v) for name, v in data.items()}
    results = []

    def check(name: str, params: dict, args: Sequence[str], vals: Sequence[int], rtol: float = 1e-5) -> None:
        out = dev.allocate([len(want[name])], "float32")
        bound = cuda_library_kernel(dev, name, **params).bind([out] + [bufs[arg] for arg in args], list(vals))
        elapsed = min(bound.timed() for _ in range(5))
        ok, err = _compare(out.tolist(), want[name], rtol=rtol)
        results.append(CheckResult(name, ok, err, elapsed, "ptx"))

    check("add", {}, ("a", "b"), (n,))
    check("matmul", {"tile": 16}, ("x", "w"), (rows, cols, k), rtol=1e-4)
    check("softmax", {}, ("a",), (rows, cols), rtol=1e-4)
    check("reduce_sum", {}, ("a",), (rows, cols, 1, cols, 1, 0), rtol=1e-4)
    check("transpose", {"dtype": "float32"}, ("a",), (rows, cols))
    return results


def _require_prebuilt(why: str) -> None:
    """Refuse (exit 3) when this host can neither compile (``why``) nor map a prebuilt library object."""
    from . import lookup, variants

    if not lookup.use_prebuilt(None):
        missing = "%s=0 turns the prebuilt library objects off" % lookup.PREBUILT_ENV
    elif variants.choose_variant() is None:
        missing = "no prebuilt library object is used on this host (none fits it, or %s=none)" % variants.VARIANT_ENV
    else:
        return
    raise CompilerNotFoundError("%s, and %s: selfcheck has nothing it can run here" % (why, missing))


def run_prebuilt_selfcheck(dev: Any, why: str, rows: int = 37, cols: int = 45) -> List[CheckResult]:
    """This host's prebuilt library kernels, mapped by the loader and run on ``dev`` (threaded as a plan runs
    them), against pure Python: what a host that cannot compile (``why``) runs. Nothing is compiled."""
    from . import library  # on use: the compile check never loads the library

    _require_prebuilt(why)
    n, k = rows * cols, 29
    data = _library_inputs(rows, cols, k)
    want = _library_wants(data, rows, cols, k)
    bufs = {name: dev.allocate([len(v)], "float32").copyin(v) for name, v in data.items()}
    results = []

    def check(name: str, args: Sequence[str], vals: Dict[str, int], rtol: float = 1e-5) -> None:
        kernel = library.get(name, device=dev, prebuilt=True, dtype="float32")
        out = dev.allocate([len(want[name])], "float32")
        elapsed = _time(kernel.bind([out] + [bufs[arg] for arg in args], **vals))
        ok, err = _compare(out.tolist(), want[name], rtol=rtol)
        results.append(CheckResult(name, ok, err, elapsed, "prebuilt %s" % kernel.variant))

    check("add", ("a", "b"), {"n": n})
    check("matmul", ("x", "w"), {"M": rows, "N": cols, "K": k}, rtol=1e-4)
    check("softmax", ("a",), {"rows": rows, "cols": cols}, rtol=1e-4)
    check("reduce_sum", ("a",), {"outer": rows, "red": cols, "inner": 1, "so": cols, "sr": 1, "si": 0}, rtol=1e-4)
    check("transpose", ("a",), {"rows": rows, "cols": cols})
    return results


def _softmax_rows(values: Sequence[float], rows: int, cols: int) -> List[float]:
    out: List[float] = []
    for r in range(rows):
        row = values[r * cols : (r + 1) * cols]
        top = max(row)
        exps = [math.exp(v - top) for v in row]
        total = sum(exps)
        out.extend(e / total for e in exps)
    return out


def skip_note(why: str, results: List[CheckResult]) -> str:
    """The line saying that compiling was skipped (``why``: :func:`compile_skipped`) and what was checked instead."""
    origins = sorted({r.origin for r in results})
    return (
        "compiling skipped: %s; not a failure on a host without a compiler: checked the %s library kernels "
        "through the loader instead" % (why, ", ".join(origins) or "prebuilt")
    )


def format_results(results: List[CheckResult], note: Optional[str] = None) -> str:
    """The table ``selfcheck`` prints, after ``note`` (:func:`skip_note`) when there is one."""
    lines = [note] if note else []
    lines.append("%-10s %-6s %12s %12s" % ("kernel", "check", "max |err|", "best µs"))
    for r in results:
        lines.append("%-10s %-6s %12.3g %12.1f" % (r.name, "ok" if r.ok else "FAIL", r.max_error, r.elapsed * 1e6))
    return "\n".join(lines)
