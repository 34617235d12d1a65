"""The batch bridge on a plan whose inputs carry ranged dims (docs/plan-format.md): each run is fed its rows
alone (no zero padding), binds the batch variable from them and returns its bound rows; equal to numpy."""

from __future__ import annotations

from typing import Any, Dict, List

import numpy as np
import pytest
from conftest import needs_cc
from support.ranged_plan import COLS, ROWS, ranged_plan, reference, rows_of

from svod_min.interop.batches import BatchLayout, BatchRunner, Port, batch_layout
from svod_min.planfile.load import load_model


def _bridge_plan() -> Dict[str, Any]:
    """The ranged plan with ``seen`` (one int, not a row per input row) a plain buffer the tests read."""
    doc = ranged_plan()
    del doc["buffers"]["seen"]["output"]
    return doc


def test_the_layout_says_the_inputs_are_ranged() -> None:
    layout = batch_layout(_bridge_plan())
    ports = (Port("x", "float32", (COLS,)), Port("z", "float32", ()))
    assert layout == BatchLayout(ROWS, "batch", ports, (Port("y", "float32", (COLS,)),), True)
    doc = _bridge_plan()
    del doc["buffers"]["z"]["dims"]  # one input without dims: runs are padded as before
    assert not batch_layout(doc).ranged


@needs_cc
@pytest.mark.parametrize("n", [1, 5, 8, 13])
def test_rows_go_in_unpadded_and_come_back_equal_to_numpy(n: int) -> None:
    doc = _bridge_plan()
    model = load_model(doc)
    runner = BatchRunner(model, batch_layout(doc))
    fed: List[Dict[str, Any]] = []
    ran: List[int] = []
    real_run = model.run

    def spy(inputs: Any, var_values: Any = None) -> Any:
        fed.append({name: a.shape for name, a in inputs.items()})
        out = real_run(inputs, var_values)
        ran.append(int(model.array("seen")[0]))  # the batch the kernel ran with
        return out

    model.run = spy  # type: ignore[method-assign]
    x, z = rows_of(n, seed=n)
    got = runner.run({"x": x, "z": z})["y"]
    assert got.shape == (n, COLS)
    np.testing.assert_allclose(got, reference(x, z), rtol=1e-6)
    counts = [min(ROWS, n - start) for start in range(0, n, ROWS)]
    assert fed == [{"x": (c, COLS), "z": (c,)} for c in counts]  # no padding rows
    assert ran == counts
