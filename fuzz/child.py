"""One step of a case in a child process: forked, its own process group, an address-space limit, a deadline.

The parent has imported svod_min, onnx and onnxruntime once; each step forks it (a few milliseconds instead of a
second of imports per process) and the child runs svod_min's CLI entry point in-process, exactly as
``python3 -m svod_min build|run`` would, with its stdout and stderr sent to files. A signal, a hang (the whole
process group is killed at the deadline, the compilers it started with it), an allocation past the limit or a
Python traceback stay in the child.
"""

from __future__ import annotations

import faulthandler
import io
import os
import resource
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

#: Exit status of a child whose step raised past svod_min's own handler (argparse's SystemExit keeps its code).
EXIT_UNCAUGHT = 70


@dataclass
class StepResult:
    """How a child ended: its exit status or the signal that ended it, whether the deadline killed it, its output."""

    name: str
    argv: Sequence[str]
    rc: Optional[int]
    signal: Optional[int]
    hung: bool
    seconds: float
    stdout: str
    stderr: str

    def text(self) -> str:
        how = (
            "killed at the deadline (hang)"
            if self.hung
            else "signal %s" % signal.Signals(self.signal).name
            if self.signal
            else "exit %s" % self.rc
        )
        return "== %s: %s (%.2f s)\n$ %s\n-- stdout\n%s\n-- stderr\n%s\n" % (
            self.name,
            how,
            self.seconds,
            " ".join(self.argv),
            self.stdout,
            self.stderr,
        )


def address_space_limit(budget_bytes: int) -> int:
    """The parent's mapped address space plus ``budget_bytes``: what a child may map before allocation fails."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[0])
    return pages * resource.getpagesize() + budget_bytes


def run_child(
    name: str,
    argv: Sequence[str],
    body: Callable[[], int],
    workdir: str,
    timeout_s: float,
    limit_bytes: Optional[int],
) -> StepResult:
    """Run ``body`` in a forked child (its return value is the exit status) under the limits; collect its output."""
    out_path = os.path.join(workdir, "%s.stdout" % name)
    err_path = os.path.join(workdir, "%s.stderr" % name)
    sys.stdout.flush()
    sys.stderr.flush()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; its exit status is the result
        _child(body, out_path, err_path, limit_bytes)
    hung = False
    deadline = start + timeout_s
    status = 0
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            hung = True
            _kill_group(pid)
            _, status = os.waitpid(pid, 0)
            break
        time.sleep(0.005)
    seconds = time.monotonic() - start
    _kill_group(pid)  # whatever the step left running (a compiler) goes with it
    rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) and not hung else None
    return StepResult(name, list(argv), rc, sig, hung, seconds, _read(out_path), _read(err_path))


def _child(
    body: Callable[[], int], out_path: str, err_path: str, limit_bytes: Optional[int]
) -> None:  # pragma: no cover
    code = EXIT_UNCAUGHT
    try:
        os.setpgid(0, 0)
        out = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        # the files at fds 1 and 2 whatever sys.stdout was (pytest's capture, a pipe's wrapper)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
        faulthandler.enable(file=sys.stderr, all_threads=True)  # a signal leaves the Python stack in the output
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
        code = int(body())
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else EXIT_UNCAUGHT
    except BaseException:  # noqa: BLE001 - whatever escaped is the finding; its traceback goes to the output
        traceback.print_exc()
        code = EXIT_UNCAUGHT
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path: str, limit: int = 200_000) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except OSError:
        return ""
    return data.decode("utf-8", "replace")
