"""Execution plans: prepared kernels, copies, views and custom functions replayed in dependency order.

* :mod:`.execution_plan` — ``ExecutionPlanBuilder`` (ops and buffers in, a plan out) and
  ``ExecutionPlan`` (bind, run, variables, release, replicate).
* :mod:`.ops` — the prepared op kinds (``PreparedKernel``, ``PreparedCopy``, ``PreparedBufferView``,
  ``PreparedCustomFunction``) and the custom-function registry.
* :mod:`.validation` — the checks a builder runs once on buffers, ops and dependencies.
* :mod:`.variables` — run-time variables: bounds, checked values, the kernel values they set.
* :mod:`.binding` — one kernel op bound to its device: launch size, extents, threads.
* :mod:`.schedule` — hazard groups inside each level; device-graph segments.
* :mod:`.grain` — which ops are too small to hand to the host pool (measured).
* :mod:`.native_replay` — runs of CPU kernels replayed by one C call.
"""
