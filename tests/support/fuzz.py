"""The loader fuzz tests' mutation engine: ``bench/fuzz_loader_long.py``, imported by path once.

It lives under bench/ (it also runs alone, for long campaigns), so tests load it from the
checkout; ``fuzz_engine()`` is None where the checkout has no bench/ folder.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import ModuleType
from typing import Optional

from support.paths import REPO_DIR

ENGINE = os.path.join(REPO_DIR, "bench", "fuzz_loader_long.py")
_NAME = "svod_fuzz_engine"


def fuzz_engine() -> Optional[ModuleType]:
    """The engine module (one per process), or None when the file is missing."""
    module = sys.modules.get(_NAME)
    if module is not None or not os.path.isfile(ENGINE):
        return module
    spec = importlib.util.spec_from_file_location(_NAME, ENGINE)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[_NAME] = module  # before running it: its dataclasses look their module up
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        del sys.modules[_NAME]
        raise
    return module
