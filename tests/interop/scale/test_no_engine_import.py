"""Importing svod_min, loading and running a bundle, and importing the bridges themselves never import Ray or Dask."""

from __future__ import annotations

import subprocess
import sys

from scale_support import MLP, x86_64_only

ENGINES = ("ray", "dask", "distributed")
PROBE = """
import sys
import svod_min
{work}
import svod_min.interop.ray, svod_min.interop.dask, svod_min.interop.batches
print(sorted(m for m in sys.modules if m.split(".")[0] in {engines!r}))
"""


def _imported_engines(work: str) -> str:
    code = PROBE.format(work=work, engines=ENGINES)
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def test_import_svod_min_and_the_bridges_import_no_engine() -> None:
    assert _imported_engines("") == "[]"


@x86_64_only
def test_running_a_bundle_imports_no_engine() -> None:
    work = "import numpy as np; svod_min.load_model(%r)(x=np.zeros((32, 16), np.float32))" % MLP
    assert _imported_engines(work) == "[]"


def test_the_probe_sees_an_engine_when_one_is_imported() -> None:
    """The check can fail: a module standing in for an engine is seen."""
    work = "import types; sys.modules['dask'] = types.ModuleType('dask')"
    assert _imported_engines(work) == "['dask']"
