"""``python3 -m fuzz --seconds 3600 --seed 1 --out DIR``: a fuzz round of svod_min's ONNX front end
(docs/fuzzing.md)."""

from __future__ import annotations

import os

# One BLAS thread: the parent forks a child per step, and a thread pool does not survive a fork.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import sys  # noqa: E402
from typing import List, Optional  # noqa: E402

from .campaign import Options, run_round  # noqa: E402
from .case import Limits  # noqa: E402
from .mutate import MUTATORS  # noqa: E402
from .seeds import CONFORMANCE_ENV  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m fuzz", description=__doc__)
    p.add_argument("--seed", type=int, default=1, help="the round's seed: the same seed makes the same cases")
    p.add_argument("--cases", type=int, default=None, help="stop after N cases")
    p.add_argument("--seconds", type=float, default=None, help="stop after S seconds (default 600 without --cases)")
    p.add_argument("--case", type=int, default=None, metavar="I", help="run case I alone (a reproducer's number)")
    p.add_argument("--out", default="fuzz-out", help="summary.json and failures/<case>-<outcome>/ (default fuzz-out)")
    p.add_argument(
        "--seeds",
        default="ops,light,node",
        help="seed kinds: ops (small graphs per op family), light (squeezenet and shufflenet of the onnx wheel's "
        "light CNNs), zoo (the other seven, slow), node (the ONNX conformance models, with --conformance); "
        "default ops,light,node",
    )
    p.add_argument(
        "--conformance",
        default=os.environ.get(CONFORMANCE_ENV),
        metavar="DIR",
        help="onnx/backend/test/data/node (default: $%s)" % CONFORMANCE_ENV,
    )
    p.add_argument("--only", default="", help="mutators to use, comma-separated (%s)" % ",".join(MUTATORS))
    p.add_argument("--build-timeout", type=float, default=30.0, help="seconds a build may take (default 30)")
    p.add_argument("--run-timeout", type=float, default=15.0, help="seconds a run may take (default 15)")
    p.add_argument(
        "--memory", type=int, default=4096, metavar="MiB", help="address-space budget of a step (default 4096)"
    )
    p.add_argument(
        "--sanitize",
        default="",
        help="build generated kernels with sanitizers, comma-separated: 'undefined' (UBSan, trapping), 'address' "
        "(ASan: needs clang 15+ as SVOD_CC, default clang-16 where installed; the fuzzer restarts itself with "
        "the ASan runtime preloaded); sets SVOD_SANITIZE",
    )
    p.add_argument(
        "--keep",
        default="",
        help="also save the cases of these outcomes (comma-separated, e.g. ort-refuses,nonfinite) under DIR/kept/",
    )
    p.add_argument("--quiet", action="store_true", help="print failures and the summary only")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if "address" in args.sanitize.split(","):
        from .asan import asan_loaded, relaunch

        if not asan_loaded():
            if os.environ.get("SVOD_FUZZ_ASAN_RELAUNCHED"):
                print(
                    "error: the ASan runtime did not load (LD_PRELOAD=%s)" % os.environ.get("LD_PRELOAD"),
                    file=sys.stderr,
                )
                return 2
            print("error: %s" % relaunch(list(argv)), file=sys.stderr)
            return 2
        os.environ.pop("LD_PRELOAD", None)  # loaded here; the compilers the steps start run without it
    from svod_min.compiler.targets import host_target

    limits = Limits(
        build_s=args.build_timeout, run_s=args.run_timeout, memory_bytes=args.memory << 20, target=host_target()
    )
    env = {"SVOD_MAX_MEMORY": str(args.memory << 20)}
    if args.sanitize:
        env["SVOD_SANITIZE"] = args.sanitize
    seconds = args.seconds if args.seconds is not None or args.cases is not None else 600.0
    options = Options(
        seed=args.seed,
        cases=1 if args.case is not None else args.cases,
        seconds=seconds,
        out=args.out,
        kinds=tuple(k for k in args.seeds.split(",") if k),
        conformance=args.conformance,
        limits=limits,
        only=tuple(m for m in args.only.split(",") if m),
        first=args.case or 0,
        env=env,
        keep=tuple(k for k in args.keep.split(",") if k),
    )

    def progress(line: str) -> None:
        if not args.quiet or line.split(" ", 2)[1].isupper():
            print(line, flush=True)

    summary = run_round(options, progress)
    print(summary.line())
    for sig, count in summary.signatures.most_common():
        print("  %4d x %s" % (count, sig))
    for where in summary.failures:
        print("  reproducer: %s" % where)
    return 1 if summary.failed() else 0


if __name__ == "__main__":
    sys.exit(main())
