"""Runs :mod:`svod_min.perf.benchmarks.bench_plan` (the benchmark ships with the package).

python bench/bench_plan.py [options]   # same as: python -m svod_min.perf.benchmarks.bench_plan [options]
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # this checkout's svod_min
    from svod_min.perf.benchmarks.bench_plan import main

    sys.exit(main())
