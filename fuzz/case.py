"""One fuzz case: the mutant through onnxruntime, ``svod_min build`` and ``svod_min run``, and its outcome.

Outcomes (:data:`OUTCOMES`): ``pass`` (built, ran, and matched onnxruntime within the tolerance the bundle
records), ``refused`` (svod_min's own error, exit 2, no traceback), ``ort-refuses`` (svod_min ran the model but
onnxruntime refuses it or the ONNX checker calls it invalid: nothing to compare), ``unchecked`` (ran, no
expectations recorded for another reason), ``nonfinite`` (differs from onnxruntime only where onnxruntime's
value is NaN or infinite: a mutant with infinite weights, whose inf - inf the two runtimes meet in different
places; counted, not failed); and the failures (:data:`FAILURES`): ``traceback`` (any exit but 0 and
2, or exit 2 with a Python traceback), ``signal``, ``hang``, ``memory`` (an allocation past the budget) and
``wrong`` (a result onnxruntime disagrees with).
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import zipfile
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import onnx

from .child import StepResult, run_child

OUTCOMES = (
    "pass",
    "refused",
    "ort-refuses",
    "unchecked",
    "nonfinite",
    "traceback",
    "signal",
    "hang",
    "memory",
    "wrong",
)
FAILURES = ("traceback", "signal", "hang", "memory", "wrong")
#: Output that says an allocation failed (Python's MemoryError, a failed mmap, C++'s bad_alloc).
#: Elements of the largest input the fuzzer makes for onnxruntime.
FEED_LIMIT = 1 << 26
#: Output of a sanitizer's report (ASan aborts the child: a signal; the mark classifies it when it exits instead).
SANITIZER_MARKS = ("AddressSanitizer", "UndefinedBehaviorSanitizer")
MEMORY_MARKS = ("MemoryError", "Cannot allocate memory", "bad_alloc", "out of memory")


@dataclass
class Limits:
    """Per-step deadlines (seconds), the address-space budget of a child (bytes) and the build's target."""

    build_s: float = 30.0
    run_s: float = 15.0
    ort_s: float = 15.0
    memory_bytes: int = 4 << 30
    target: str = "x86_64"


@dataclass
class CaseResult:
    outcome: str
    steps: List[StepResult] = field(default_factory=list)
    note: str = ""


def ort_body(path: str) -> int:
    """onnxruntime on the mutant with seeded inputs of its declared shapes: 0 when it runs, 2 when it refuses."""
    import onnxruntime as ort

    try:
        onnx.checker.check_model(onnx.load(path))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feeds = _feeds(session)
        session.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - any refusal by onnxruntime or the checker is an answer, not a finding
        print("onnxruntime refuses: %s" % str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
        return 2
    return 0


def _feeds(session: object) -> Dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    feeds = {}
    for meta in session.get_inputs():  # type: ignore[attr-defined]
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in meta.shape]
        if int(np.prod(shape, dtype=np.float64)) > FEED_LIMIT:
            raise ValueError("input %s %s: larger than the fuzzer feeds onnxruntime" % (meta.name, shape))
        kind = meta.type[len("tensor(") : -1] if meta.type.startswith("tensor(") else "float"
        dtype = {"float": np.float32, "double": np.float64, "float16": np.float16, "bool": np.bool_}.get(kind)
        if dtype is None:
            dtype = np.dtype(kind) if kind in ("int64", "int32", "int8", "uint8") else np.float32
        feeds[meta.name] = rng.uniform(-2, 2, shape).astype(dtype)
    return feeds


def _cli_body(argv: Sequence[str]) -> int:
    from svod_min.__main__ import main

    if "address" in os.environ.get("SVOD_SANITIZE", ""):
        from .asan import install

        install()

    return main(list(argv))


def build_argv(model: str, bundle: str, limits: Limits, expect: bool) -> List[str]:
    return ["build", model, "-o", bundle, "--target", limits.target] + ([] if expect else ["--no-expect"])


def run_argv(bundle: str, save: Optional[str] = None) -> List[str]:
    return ["run", bundle, "--once"] + (["--save", save] if save else [])


def run_case(model_path: str, workdir: str, limits: Limits, limit_bytes: Optional[int]) -> CaseResult:
    """The three steps on ``model_path`` (already written), the case's files under ``workdir``."""
    result = CaseResult("pass")
    ort = run_child(
        "onnxruntime", ["onnxruntime", model_path], lambda: ort_body(model_path), workdir, limits.ort_s, limit_bytes
    )
    result.steps.append(ort)
    ort_ok = ort.rc == 0
    bundle = os.path.join(workdir, "model.svod")
    argv = build_argv(model_path, bundle, limits, ort_ok)
    build = run_child("build", ["svod_min"] + argv, lambda: _cli_body(argv), workdir, limits.build_s, limit_bytes)
    result.steps.append(build)
    failed = _failure(build)
    if failed:
        result.outcome = failed
        _debug_rerun(result, build, argv, workdir, limits.build_s, limit_bytes)
        return result
    if build.rc == 2:
        result.outcome = "refused"
        result.note = _error_line(build)
        return result
    argv_run = run_argv(bundle, os.path.join(workdir, "outputs"))
    run = run_child("run", ["svod_min"] + argv_run, lambda: _cli_body(argv_run), workdir, limits.run_s, limit_bytes)
    result.steps.append(run)
    failed = _failure(run)
    if failed:
        result.outcome = failed
        _debug_rerun(result, run, argv_run, workdir, limits.run_s, limit_bytes)
    elif run.rc == 2:
        result.outcome = "refused"
        result.note = "run: " + _error_line(run)
    elif run.rc == 1:
        result.outcome = "wrong"
        if _nonfinite_only(bundle, os.path.join(workdir, "outputs"), _holds_nonfinite(model_path)):
            result.outcome = "nonfinite"
            result.note = "differs from onnxruntime only where a result is NaN or infinite"
    elif not ort_ok:
        result.outcome = "ort-refuses"
    elif "nothing to check" in run.stdout:
        result.outcome = "unchecked"
        result.note = next((ln for ln in build.stderr.splitlines() if "no expectations" in ln), "")
    return result


def signature(result: CaseResult) -> str:
    """A failure in a few words, numbers and names left out, so that one bug's many cases count as one: the
    outcome, the step, and the last line of its error or traceback."""
    step = result.steps[-1] if result.steps else None
    if step is None:
        return result.outcome
    where = ""
    if step.name.endswith("-debug"):
        frames = re.findall(r'File "([^"]+)", line \d+, in (\S+)', step.stderr)
        where = " at %s %s" % (os.path.basename(frames[-1][0]), frames[-1][1]) if frames else ""
        step = result.steps[-2]
    lines = [ln.strip() for ln in step.stderr.splitlines() if ln.strip() and not ln.startswith(" ")]
    last = next((ln for ln in reversed(lines) if ln.startswith("error: ") or "Error" in ln), lines[-1] if lines else "")
    last = re.sub(r"'[^']*'|\"[^\"]*\"", "'_'", last)
    last = re.sub(r"\d+(\.\d+)?", "N", last)
    last = re.sub(r"N\.? ?[KMGT]i?B", "SIZE", re.sub(r"\((N, )*N,?\)", "(SHAPE)", last))
    return "%s in %s%s: %s" % (result.outcome, step.name, where, last[:160])


def _error_line(step: StepResult) -> str:
    return next((ln[len("error: ") :] for ln in step.stderr.splitlines() if ln.startswith("error: ")), "")[:300]


def _debug_rerun(
    result: CaseResult, step: StepResult, argv: List[str], workdir: str, timeout_s: float, limit_bytes: Optional[int]
) -> None:
    """svod_min prints an internal error as one line: the step again with ``--debug`` puts its traceback in the
    reproducer's output."""
    if "internal error" not in step.stderr:
        return
    debug = ["--debug"] + argv
    result.steps.append(
        run_child(step.name + "-debug", ["svod_min"] + debug, lambda: _cli_body(debug), workdir, timeout_s, limit_bytes)
    )


def _holds_nonfinite(model_path: str) -> bool:
    """Whether the model's constants (initializers, Constant nodes) hold a NaN or an infinity."""
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(model_path)
    except Exception:  # an unreadable mutant holds nothing we can tell
        return False
    tensors = list(model.graph.initializer)
    tensors += [a.t for n in model.graph.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    for tensor in tensors:
        try:
            data = numpy_helper.to_array(tensor)
        except Exception:  # a tensor numpy cannot hold (a string, a float8) holds no float NaN either
            continue
        if data.dtype.kind == "f" and not np.all(np.isfinite(data)):
            return True
    return False


def _nonfinite_only(bundle: str, saved: str, model_nonfinite: bool = False) -> bool:
    """True when every element outside the recorded tolerance is one where onnxruntime's value is NaN or
    infinite (inf - inf, 0 x inf and the like: the two runtimes order such sums differently), or, for a model
    whose constants hold NaN or infinities, one where svod_min's value is NaN or infinite: IEEE arithmetic
    (numpy's float64 too) makes NaN of inf - inf, where onnxruntime's clamping activations (its LSTM's sigmoid
    and tanh) turn the NaN into a finite bound."""
    try:
        with zipfile.ZipFile(bundle) as z:
            expect = json.loads(z.read("plan.json"))["expect"]
            for name, entry in expect.items():
                want = np.load(io.BytesIO(z.read(entry["npy"])))
                got = np.load(os.path.join(saved, name.replace("/", "_").replace("\\", "_") + ".npy"))
                if got.shape != want.shape:
                    return False
                with np.errstate(all="ignore"):
                    close = np.abs(got.astype(np.float64) - want) <= entry["atol"] + entry["rtol"] * np.abs(want)
                close |= np.isnan(got) & np.isnan(want)
                close |= got == want  # equal infinities
                if model_nonfinite:
                    close |= ~np.isfinite(got)
                if not np.all(close | ~np.isfinite(want)):
                    return False
    except (OSError, KeyError, ValueError):
        return False
    return True


def _failure(step: StepResult) -> Optional[str]:
    """The failure outcome of a step, or None when it passed (exit 0) or refused by name (exit 2, no traceback)."""
    if step.hung:
        return "hang"
    if step.signal:
        return "signal"
    output = step.stdout + step.stderr
    if any(mark in output for mark in SANITIZER_MARKS):
        return "signal"
    if step.rc == 0 or (step.rc == 2 and "Traceback (most recent call last)" not in output):
        return None
    if step.rc == 1 and step.name == "run":
        return None  # verification failed: classified as a wrong answer by the caller
    if any(mark in output for mark in MEMORY_MARKS):
        return "memory"
    return "traceback"


def save_reproducer(
    out_dir: str,
    case_id: str,
    model_path: str,
    result: CaseResult,
    lines: Sequence[str],
    seed_name: str,
    limits: Limits,
    env: Dict[str, str],
    folder: str = "failures",
) -> str:
    """``<out_dir>/<folder>/<case>-<outcome>/``: the mutant, the commands (repro.sh) and every step's output."""
    where = os.path.join(out_dir, folder, "%s-%s" % (case_id, result.outcome))
    os.makedirs(where, exist_ok=True)
    shutil.copyfile(model_path, os.path.join(where, "model.onnx"))
    expect = result.steps[0].rc == 0
    script = ["#!/bin/sh", "# %s: %s, from seed %s by:" % (case_id, result.outcome, seed_name)]
    script += ["#   %s" % line for line in lines]
    script.append('cd "$(dirname "$0")"')
    script += ["export %s=%s" % (k, v) for k, v in sorted(env.items())]
    script.append(
        "ulimit -v %d  # the fuzzer's address-space budget (KiB) over the interpreter's"
        % ((limits.memory_bytes >> 10) + (1 << 20))
    )
    script.append(
        "python3 -m svod_min %s || exit $?" % " ".join(build_argv("model.onnx", "model.svod", limits, expect))
    )
    if any(s.name == "run" for s in result.steps):
        script.append("python3 -m svod_min %s" % " ".join(run_argv("model.svod")))
    with open(os.path.join(where, "repro.sh"), "w") as f:
        f.write("\n".join(script) + "\n")
    os.chmod(os.path.join(where, "repro.sh"), 0o755)
    with open(os.path.join(where, "output.txt"), "w") as f:
        f.write("seed %s, mutations:\n%s\n\n" % (seed_name, "\n".join("  " + ln for ln in lines)))
        for step in result.steps:
            f.write(step.text())
    return where
