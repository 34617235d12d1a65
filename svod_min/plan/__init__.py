"""Execution plans: prepared kernels, copies, views and custom functions replayed in dependency order.

* :mod:`.execution_plan` — ``ExecutionPlan``: prepare, schedule, run, release.
* :mod:`.builder` — ``ExecutionPlanBuilder``: ops and buffers in, an ``ExecutionPlan`` out.
* :mod:`.ops` — the prepared op kinds (``PreparedKernel``, ``PreparedCopy``, ``PreparedBufferView``,
  ``PreparedCustomFunction``).
* :mod:`.schedule` — levels of independent ops and their hazards.
* :mod:`.grain` — how much work one core id of a kernel gets.
* :mod:`.native_replay` — a whole plan replayed by one C call.
"""
