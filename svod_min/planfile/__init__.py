"""Plan files and model bundles: JSON plans read, validated and loaded onto a device.

* :mod:`.load` — ``load_plan``: a plan document, file or bundle to a runnable ``LoadedPlan``.
* :mod:`.binding` — ranged dims: variables bound from the fed inputs' shapes, outputs at their bound shape.
* :mod:`.feeds` — ``run --input`` files read and bound, ``--save``'s bytes at the bound shape (no numpy).
* :mod:`.schema` — the document's value checks (one error per wrong field, naming its path).
* :mod:`.data` — buffer contents (inline, ``.npy``, raw files) and the files a plan names.
* :mod:`.verify` — a run's outputs against the plan's expected values (numpy where it is installed).
* :mod:`.status` — run-time checks: the status buffer checking kernels report into, read after each run.
* :mod:`.kernels` — the ``kernels`` section: C, LLVM IR, library, CUDA C and PTX forms.
* :mod:`.bundle` — ``.svod`` bundles read; :mod:`.bundle_build` writes them.
* :mod:`.signing` — signed bundles: keys, ``build --sign``, the trust policy checked before anything loads.
* :mod:`.memory_budget` — a plan's peak memory, computed before allocating, against the budget.
* :mod:`.default_plan` — the embedded seeded MLP plan ``run`` uses without a file.
* :mod:`.pyz` — the one-file runtime (``python -m svod_min zipapp``).
"""
