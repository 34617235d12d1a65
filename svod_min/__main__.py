"""Command line: ``python -m svod_min run`` and ``python -m svod_min info``.

Exit codes: 0 ok, 1 verification failed, 2 bad input, 3 device or compile
failure. Errors are printed to stderr as one line; ``--debug`` shows the
traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from typing import List, Optional

from .error import (
    CompilationError,
    DeviceError,
    ExecutionError,
    LoaderError,
    PlanError,
    SvodError,
)

EXIT_OK, EXIT_VERIFY, EXIT_BAD_INPUT, EXIT_DEVICE = 0, 1, 2, 3


def exit_code_for(exc: BaseException) -> int:
    """Map an error to the documented exit code."""
    if isinstance(exc, (PlanError, ValueError)) and not isinstance(exc, LoaderError):
        return EXIT_BAD_INPUT
    if isinstance(exc, (CompilationError, DeviceError, LoaderError, ExecutionError)):
        return EXIT_DEVICE
    return EXIT_DEVICE if isinstance(exc, SvodError) else EXIT_BAD_INPUT


def _cmd_run(args: argparse.Namespace) -> int:
    from .device_registry import DEVICE_FACTORIES
    from .selfcheck import format_results, run_selfcheck

    if args.plan is not None:
        raise PlanError("plan files are not supported yet: run without PLAN for the built-in kernel check")
    device = DEVICE_FACTORIES.device(args.device)
    results = run_selfcheck(device)
    if args.json:
        print(json.dumps([r.__dict__ for r in results], indent=1))
    else:
        print("svod_min built-in kernel check on %s" % args.device)
        print(format_results(results))
    failed = [r.name for r in results if not r.ok]
    if failed:
        print("verification failed: %s" % ", ".join(failed), file=sys.stderr)
        return EXIT_VERIFY
    return EXIT_OK


def info_lines() -> List[str]:
    """What ``info`` prints: devices, compilers, W^X mode, cache."""
    from . import clang
    from .device_registry import DEVICE_FACTORIES
    from .jit_loader import wx_mode
    from .kernel_cache import object_cache

    lines = ["devices: %s" % ", ".join(DEVICE_FACTORIES.available_kinds())]
    compilers = clang.available_compilers()
    for info in compilers:
        lines.append("compiler: %s %s (%s) at %s" % (info.family, info.version, info.target, info.path))
    if not compilers:
        lines.append("compiler: none found (inline C cannot be compiled)")
    lines.append("cpu backend: %s" % clang.CpuBackend.from_env().value)
    lines.append("host arch: %s" % clang.host_arch())
    lines.append("W^X mode: %s (executable memory is never writable)" % wx_mode())
    cache = object_cache()
    if cache.enabled:
        lines.append("object cache: %s (%d entries, %d bytes)" % (cache.directory, len(cache.entries()), cache.size_bytes()))
    else:
        lines.append("object cache: disabled")
    lines.append("threads: %s" % os.environ.get("SVOD_THREADS", "default (%d)" % (os.cpu_count() or 1)))
    return lines


def _cmd_info(args: argparse.Namespace) -> int:
    print("\n".join(info_lines()))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m svod_min", description="svod_min kernel runtime")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("run", help="run a plan (default: the built-in kernel check)")
    run.add_argument("plan", nargs="?", help="plan file (JSON)")
    run.add_argument("--device", default="CPU", help="device spec (CPU, CUDA:0, ...)")
    run.add_argument("--json", action="store_true", help="machine-readable output")
    run.set_defaults(func=_cmd_run)
    info = sub.add_parser("info", help="devices, compilers, W^X mode, cache")
    info.set_defaults(func=_cmd_info)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    try:
        return int(args.func(args))
    except SvodError as exc:
        if args.debug:
            traceback.print_exc()
        print("error: %s" % one_line(exc), file=sys.stderr)
        return exit_code_for(exc)


def one_line(exc: BaseException) -> str:
    """The error as one line; compile errors add the compiler's first complaint."""
    text = str(exc).strip()
    head = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, CompilationError):
        complaint = next((ln.strip() for ln in exc.diagnostics.splitlines() if "error" in ln), "")
        if complaint:
            head = "%s: %s" % (head, complaint)
    return head


if __name__ == "__main__":
    sys.exit(main())
