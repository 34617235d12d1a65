"""``python3 -m conformance [DATA_DIR] [--only GLOB ...] [--json OUT] [--table OUT]``: run ONNX's node tests."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from .outcome import FAILURES
from .report import SVOD, op_table, summary
from .runner import ENGINES, run_round
from .suite import DEFAULT_DATA, find_tests


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m conformance", description=__doc__)
    parser.add_argument("data", nargs="?", default=DEFAULT_DATA, help="the node tests' folder (default: %(default)s)")
    parser.add_argument("--only", action="append", default=[], help="test-name glob (repeatable)")
    parser.add_argument("--engine", action="append", choices=sorted(ENGINES), help="default: both")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test and engine")
    parser.add_argument("--json", help="write every record here")
    parser.add_argument("--table", help="write the per-op Markdown table here")
    parser.add_argument("-q", "--quiet", action="store_true", help="no line per test")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="tests at a time (default: the CPUs)")
    args = parser.parse_args(argv)
    tests = find_tests(args.data, args.only)
    if not tests:
        print("conformance: no tests under %s%s" % (args.data, " matching %s" % args.only if args.only else ""))
        return 2
    engines = args.engine or [SVOD, "onnxruntime"]
    records = run_round(tests, engines, args.timeout, (lambda line: None) if args.quiet else print, args.jobs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    if args.table:
        with open(args.table, "w") as f:
            f.write("\n".join(op_table(records)) + "\n")
    print("\n".join(summary(records)))
    return 1 if any(r.get(SVOD, {}).get("kind") in FAILURES for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
