"""Measuring and tuning: kernel benchmarks, the autotuner and the benchmark suite.

* :mod:`.benchmark` — ``benchmark_kernel``: timed repeats of one kernel.
* :mod:`.autotune` and :mod:`.autotune_trials` — ``python -m svod_min tune``: candidates timed,
  the best stored per shape.
* :mod:`.bench_suite` — ``python -m svod_min bench``: rows against a peer measured in the same run.
* :mod:`.benchmarks` — the benchmarks installed with the package.
* :mod:`.light_models` — the onnx wheel's light CNNs with seeded random weights (the ONNX benchmark, the tests).
* :mod:`.zoo` — real models that packages ship (fetched from the registry into the cache) and their float16 / int8
  conversions: the ONNX benchmark's ``--models zoo`` and the slow zoo test.
* :mod:`.agreement` — whether two engines' outputs agree by a bundle's own tolerance (the ONNX bench's gate).
* :mod:`.op_profile` — which op holds a model back: per-op profiles of a bundle and of onnxruntime, side by side.
"""
