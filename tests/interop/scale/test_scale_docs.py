"""docs/scale-out.md's two examples run as written from the repository root and print a result equal to a direct run."""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any, List

import pytest
from scale_support import x86_64_only
from support.paths import REPO

DOC = REPO / "docs" / "scale-out.md"


def python_blocks() -> List[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_page_has_one_ray_and_one_dask_example() -> None:
    blocks = python_blocks()
    assert len(blocks) == 2 and "import ray" in blocks[0] and "import dask" in blocks[1]


@x86_64_only
@pytest.mark.parametrize("engine, index", [("ray", 0), ("dask", 1)])
def test_an_example_runs_as_written(engine: str, index: int, tmp_path: Any) -> None:
    pytest.importorskip("ray.data" if engine == "ray" else "distributed")
    script = tmp_path / ("%s_example.py" % engine)
    script.write_text(python_blocks()[index])
    done = subprocess.run([sys.executable, str(script)], cwd=str(REPO), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "%s: 9600 rows, equal to the direct run: True" % engine in done.stdout.splitlines()
