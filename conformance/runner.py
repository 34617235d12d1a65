"""One test in a forked child per engine (svod_min, onnxruntime), with a timeout; a round over many tests."""

from __future__ import annotations

import faulthandler
import functools
import json
import os
import re
import select
import signal
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Tuple

from .outcome import (
    CRASH,
    DISPUTED,
    DISPUTED_TESTS,
    HANG,
    NOT_TENSOR,
    PASS,
    REFUSED,
    SIGNAL,
    STALE_DATA,
    WRONG,
    Outcome,
    compare,
)
from .suite import DataSet, NodeTest, read_data_set


def run_svod(test: NodeTest, data: DataSet) -> Outcome:
    """Build the model in-process as ``svod_min build`` does, load the bundle, run it, compare. A build refused with
    a ``--pin`` suggestion is rebuilt with the named inputs pinned to the test's own values, as a user following the
    message would; the outcome's detail then says "pinned NAME"."""
    from svod_min.compiler.targets import host_target
    from svod_min.error import EXIT_BAD_INPUT, SvodError
    from svod_min.onnx import build_onnx
    from svod_min.planfile.load import load_model

    pins: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="svod-conformance-") as tmp:
        bundle = os.path.join(tmp, "model.svod")
        shapes = {name: list(value.shape) for name, value in data.inputs.items()}
        try:
            for attempt in range(4):  # each refusal may name further inputs to pin
                try:
                    build_onnx(test.model, bundle, targets=[host_target()], shapes=shapes, expect=False, pins=pins)
                    break
                except SvodError as exc:
                    named = [n for n in PIN_SUGGESTION.findall(str(exc)) if n in data.inputs and n not in pins]
                    if exc.exit_code != EXIT_BAD_INPUT or not named or attempt == 3:
                        raise
                    pins.update((n, data.inputs[n]) for n in named)
            if data.not_tensors:
                return Outcome(NOT_TENSOR, "built, but %s is not a tensor" % ", ".join(data.not_tensors))
            got = load_model(bundle).run(data.inputs)
        except SvodError as exc:
            if exc.exit_code == EXIT_BAD_INPUT:
                return _pinned(Outcome(REFUSED, "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:300])), pins)
            return _pinned(Outcome(CRASH, "exit %d %s: %s" % (exc.exit_code, type(exc).__name__, str(exc)[:300])), pins)
    outcome = compare(got, data.outputs)
    if outcome.kind == WRONG:
        outcome = against_current_spec(test, data, got, outcome)
    if outcome.kind == WRONG and test.name in DISPUTED_TESTS:
        outcome = against_onnxruntime(test, data, got, outcome)
    return _pinned(outcome, pins)


def against_onnxruntime(test: NodeTest, data: DataSet, got: Dict[str, Any], outcome: Outcome) -> Outcome:
    """A mismatch on a test listed in DISPUTED_TESTS is DISPUTED where svod_min equals onnxruntime, else WRONG."""
    try:
        import onnxruntime as ort

        session = ort.InferenceSession(test.model, providers=["CPUExecutionProvider"])
        theirs = session.run(None, data.inputs)
    except Exception:  # no peer to hold it against: the mismatch stands
        return outcome
    if compare(got, list(zip([o.name for o in session.get_outputs()], theirs))).kind != PASS:
        return outcome
    return Outcome(DISPUTED, "equal to onnxruntime; %s (%s)" % (DISPUTED_TESTS[test.name], outcome.detail[:150]))


#: The inputs a refusal suggests pinning: ``--pin NAME=...`` (svod_min/onnx/frontend/pins.py).
PIN_SUGGESTION = re.compile(r"--pin (\S+)=\.\.\.")


def _pinned(outcome: Outcome, pins: Dict[str, Any]) -> Outcome:
    if not pins:
        return outcome
    note = "pinned %s" % ", ".join(pins)
    return Outcome(outcome.kind, "%s; %s" % (note, outcome.detail) if outcome.detail else note)


def against_current_spec(test: NodeTest, data: DataSet, got: Dict[str, Any], outcome: Outcome) -> Outcome:
    """A mismatch with the suite's data is held against the installed onnx's reference evaluator too: where svod_min
    equals the reference and the data does not, the data is older than the spec (STALE_DATA), else it stays WRONG."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    try:
        reference = ReferenceEvaluator(test.model).run(None, data.inputs)
    except Exception:  # the reference cannot run it: the mismatch stands
        return outcome
    current = list(zip([name for name, _ in data.outputs], reference))
    if compare(got, current).kind != PASS or compare(dict(current), data.outputs).kind == PASS:
        return outcome
    return Outcome(
        STALE_DATA,
        "equal to onnx %s's reference evaluator, which the data contradicts: %s"
        % (onnx.__version__, outcome.detail[:200]),
    )


def run_onnxruntime(test: NodeTest, data: DataSet) -> Outcome:
    import onnxruntime as ort

    if data.not_tensors:
        return Outcome(NOT_TENSOR, ", ".join(data.not_tensors))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(test.model, options, providers=["CPUExecutionProvider"])
        results = session.run(None, data.inputs)
    except Exception as exc:  # onnxruntime's refusals come as several exception types
        return Outcome(REFUSED, "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:300]))
    names = [o.name for o in session.get_outputs()]
    return compare(dict(zip(names, results)), data.outputs)


ENGINES: Dict[str, Callable[[NodeTest, DataSet], Outcome]] = {"svod_min": run_svod, "onnxruntime": run_onnxruntime}


def in_child(engine: str, test: NodeTest, timeout: float) -> Outcome:
    """Run one engine on one test in a forked child: a signal, a hang or a traceback becomes an outcome."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(engine, test, write_fd)
    os.close(write_fd)
    payload, timed_out = _read_until(read_fd, time.monotonic() + timeout)
    os.close(read_fd)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return Outcome(HANG, "no result in %.0f s" % timeout)
    if os.WIFSIGNALED(status):
        return Outcome(SIGNAL, "killed by signal %d" % os.WTERMSIG(status))
    try:
        result = json.loads(payload.decode("utf-8"))
    except ValueError:
        return Outcome(CRASH, "the child exited %d without a result" % os.WEXITSTATUS(status))
    return Outcome(result["kind"], result["detail"])


def _child(engine: str, test: NodeTest, write_fd: int) -> None:
    faulthandler.disable()  # the parent records a fatal signal; a traceback dump of the child's threads is noise
    code = 0
    try:
        try:
            outcome = ENGINES[engine](test, read_data_set(test))
        except Exception:
            outcome = Outcome(CRASH, traceback.format_exc()[-1500:])
        os.write(write_fd, json.dumps(outcome.as_dict()).encode("utf-8"))
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def _read_until(fd: int, deadline: float) -> Tuple[bytes, bool]:
    chunks: List[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)


def preload(engines: List[str]) -> None:
    """Import what each engine runs before any child is forked: a child then starts with svod_min's front end, the
    onnx package and onnxruntime loaded instead of importing them again (about a second per test otherwise)."""
    import onnx  # noqa: F401 - loaded for the children

    if "svod_min" in engines:
        import svod_min.compiler.targets  # noqa: F401
        import svod_min.onnx  # noqa: F401
        import svod_min.onnx.build  # noqa: F401
        import svod_min.planfile.load  # noqa: F401
    if "onnxruntime" in engines:
        import onnxruntime  # noqa: F401


def run_one(test: NodeTest, engines: List[str], timeout: float) -> Dict[str, Any]:
    """One test through every engine: its record."""
    record: Dict[str, Any] = {"test": test.name}
    try:
        record["ops"] = read_data_set(test).op_types
    except Exception as exc:  # an unreadable test folder is the suite's problem, named in the record
        record["ops"] = []
        record["unreadable"] = str(exc)[:200]
    for engine in engines:
        record[engine] = in_child(engine, test, timeout).as_dict()
    return record


def run_round(
    tests: List[NodeTest], engines: List[str], timeout: float, progress: Callable[[str], None], jobs: int = 1
) -> List[Dict[str, Any]]:
    """Every test through every engine, ``jobs`` tests at a time (each in worker processes forked before any thread
    exists; each engine run in a child of its own); one record per test, in the tests' order."""
    preload(engines)
    done = 0

    def report(record: Dict[str, Any]) -> Dict[str, Any]:
        nonlocal done
        done += 1
        progress("[%d/%d] %s: %s" % (done, len(tests), record["test"], _line(record, engines)))
        return record

    if jobs <= 1 or len(tests) <= 1:
        return [report(run_one(test, engines, timeout)) for test in tests]
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        work = pool.imap(functools.partial(run_one, engines=engines, timeout=timeout), tests, chunksize=1)
        return [report(record) for record in work]


def _line(record: Dict[str, Any], engines: List[str]) -> str:
    return "  ".join("%s %s" % (e, record[e]["kind"]) for e in engines)
