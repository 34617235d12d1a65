"""The benchmarks of ``python -m svod_min bench``, installed with the package.

Each ``bench_*.py`` module has ``rows(...) -> list[dict]`` (keys measure,
svod_min, peer, peer_value, ratio, goal, met; peers measured in the same run)
and a ``main()``: ``python -m svod_min.perf.benchmarks.bench_kernels``. Benchmarks
that need the source checkout (its examples, or owned elsewhere) stay in the
checkout's ``bench/`` directory; :mod:`svod_min.perf.bench_suite` runs both.
"""
