"""``python -m codegen [--check] [--no-objects] [--no-ptx] [--jobs N]``."""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from typing import List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m codegen", description=__doc__)
    p.add_argument(
        "--check", action="store_true", help="regenerate into a temporary directory; exit 1 listing files that differ"
    )
    p.add_argument("--no-objects", action="store_true", help="do not compile prebuilt objects (keep committed)")
    p.add_argument("--no-ptx", action="store_true", help="do not run nvcc (keep committed PTX)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel compiler processes")
    p.add_argument("--root", default=ROOT, help=argparse.SUPPRESS)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)  # the svod_min next to this codegen/, not an installed one
    if importlib.util.find_spec("jinja2") is None:
        print("codegen: jinja2 is needed (pip install 'svod-min[codegen]' or pip install jinja2)", file=sys.stderr)
        return 2
    from . import outputs

    start = time.perf_counter()
    gen = outputs.generate(args.root, objects=not args.no_objects, ptx=not args.no_ptx, jobs=args.jobs)
    if args.check:
        return _check(args.root, gen, start)
    changed = outputs.write(args.root, gen)
    outputs.report_skipped(gen)
    for rel in changed:
        print("codegen: wrote %s" % rel)
    print("codegen: %d files, %d changed (%.1f s)" % (len(gen.files), len(changed), time.perf_counter() - start))
    return 0


def _check(root: str, gen: "object", start: float) -> int:
    from . import outputs

    assert isinstance(gen, outputs.Generated)
    tmp = tempfile.mkdtemp(prefix="svod-codegen-check-")
    try:
        outputs.write(tmp, gen)  # the regenerated tree, file by file
        fresh = outputs.Generated({rel: _read(os.path.join(tmp, rel)) for rel in gen.files}, gen.skipped)
        problems = outputs.compare(root, fresh)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    outputs.report_skipped(gen)
    if problems:
        print("codegen --check: %d generated file(s) are out of date; run `python -m codegen`:" % len(problems))
        for line in problems:
            print("  " + line)
        return 1
    print("codegen --check: %d files up to date (%.1f s)" % (len(gen.files), time.perf_counter() - start))
    return 0


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


if __name__ == "__main__":
    sys.exit(main())
