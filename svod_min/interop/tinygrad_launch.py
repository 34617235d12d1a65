"""``python -m svod_min tinygrad SCRIPT [ARGS...]`` / ``-m MODULE [ARGS...]``: run an unchanged program
with svod_min loading tinygrad's CPU programs (see :mod:`svod_min.interop.tinygrad_loader`).

Like ``python SCRIPT``: ``sys.argv`` is the script and its arguments, ``sys.path[0]`` its folder,
it runs as ``__main__``, its exit status is ours and an uncaught exception prints its traceback.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import traceback
from typing import List, Tuple

from ..config import env_flag
from ..error import EXIT_BAD_INPUT, SvodError
from .tinygrad_loader import loader_stats, use_svod_loader

USAGE = "usage: python -m svod_min tinygrad (SCRIPT | -m MODULE) [ARGS...]"
REPORT_ENV = "SVOD_TINYGRAD_REPORT"


def parse_target(argv: List[str]) -> Tuple[str, str, List[str]]:
    """(kind "script" or "module", name, its arguments); SystemExit-free: ValueError on bad use."""
    if not argv:
        raise ValueError("no script or module given")
    if argv[0] == "-m":
        if len(argv) < 2 or not argv[1]:
            raise ValueError("-m needs a module name")
        return "module", argv[1], argv[2:]
    if argv[0].startswith("-"):
        raise ValueError("unknown option %r" % argv[0])
    return "script", argv[0], argv[1:]


def launch(argv: List[str]) -> int:
    """Install the hook, run the target as ``__main__``; its exit status (1 on an uncaught exception)."""
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        print(__doc__.split("\n\n")[1].replace("\n", " "))
        return 0
    try:
        kind, name, args = parse_target(argv)
    except ValueError as exc:
        print("error: %s\n%s" % (exc, USAGE), file=sys.stderr)
        return EXIT_BAD_INPUT
    if kind == "script" and not os.path.isfile(name):
        print("error: no such script: %s" % name, file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        use_svod_loader()
    except SvodError as exc:
        print("error: %s" % exc, file=sys.stderr)
        return exc.exit_code
    return _run(kind, name, args)


def _run(kind: str, name: str, args: List[str]) -> int:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    try:
        if kind == "script":
            sys.argv = [name] + args
            sys.path.insert(0, os.path.dirname(os.path.abspath(name)))
            runpy.run_path(name, run_name="__main__")
        else:
            sys.argv = [name] + args  # run_module puts the module's file here, as python -m does
            sys.path.insert(0, os.getcwd())
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exc:
        status = _exit_status(exc)
    except BaseException:  # the script's own failure: print it as python would
        traceback.print_exc()
        status = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    if env_flag(REPORT_ENV, False):
        print("svod_min tinygrad loader: %s" % json.dumps(loader_stats()._asdict()), file=sys.stderr)
    return status


def _exit_status(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


__all__ = ["USAGE", "launch", "parse_target"]
