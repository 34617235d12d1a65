"""Rows in, rows out (svod_min.interop.batches): any row count through a fixed-batch bundle or a plan's batch
variable, equal to direct runs; the layout read from the plan alone; what is refused; one model per bundle."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import needs_cc
from scale_support import MLP, direct_run, mlp_bytes, rows, x86_64_only
from support.paths import EXAMPLES

from svod_min import load_model
from svod_min.error import PlanError
from svod_min.interop.batches import (
    BatchLayout,
    Port,
    batch_layout,
    cached_digests,
    cached_runner,
    load_runner,
    plan_document,
)
from svod_min.planfile.bundle import bundle_digest

TINYGRAD_MLP = str(EXAMPLES / "tinygrad" / "mlp" / "plan.json")


def test_the_layout_is_read_from_the_plan_alone() -> None:
    layout = batch_layout(plan_document(MLP))
    assert layout == BatchLayout(32, None, (Port("x", "float32", (16,)),), (Port("probs", "float32", (8,)),))
    symbolic = batch_layout(plan_document(TINYGRAD_MLP))  # xs [16, 16], probs [160] flat, batch 1..16
    assert symbolic == BatchLayout(16, "batch", (Port("xs", "float32", (16,)),), (Port("probs", "float32", (10,)),))


@x86_64_only
@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 100])
def test_any_row_count_equals_the_direct_run(n: int) -> None:
    x = rows(n, seed=n)
    got = load_runner(MLP).run({"x": x})["probs"]
    assert got.shape == (n, 8) and got.dtype == np.float32
    if n:
        np.testing.assert_array_equal(got, direct_run(x))


@x86_64_only
def test_float64_rows_are_cast_and_a_row_of_the_same_size_reshaped() -> None:
    x = rows(40)
    runner = load_runner(mlp_bytes(), threads=2)
    np.testing.assert_array_equal(runner.run({"x": x.astype(np.float64)})["probs"], direct_run(x))
    np.testing.assert_array_equal(runner.run({"x": x.reshape(40, 4, 4)})["probs"], direct_run(x))


@needs_cc
@pytest.mark.parametrize("n", [1, 9, 16, 37])
def test_the_batch_variable_is_bound_to_each_pieces_rows(n: int) -> None:
    """Each row equals that row run alone at batch=1; the plan's default batch is 4, so rows past the 4th come
    out right only when each run binds the variable to its row count."""
    x = rows(n, seed=n)
    runner = load_runner(TINYGRAD_MLP)
    got = runner.run({"xs": x})["probs"]
    model = load_model(TINYGRAD_MLP)
    alone = np.stack(
        [
            model.run({"xs": np.concatenate([x[i : i + 1], np.zeros((15, 16), np.float32)])}, {"batch": 1})["probs"][
                :10
            ]
            for i in range(n)
        ]
    )
    assert got.shape == (n, 10)
    np.testing.assert_allclose(got, alone, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)  # softmax rows


@x86_64_only
def test_bad_rows_are_refused_naming_the_input() -> None:
    runner = load_runner(MLP)
    with pytest.raises(PlanError, match=r"input 'x': got shape \[5, 15\], rows of \[16\]"):
        runner.run({"x": np.zeros((5, 15), np.float32)})
    with pytest.raises(PlanError, match="input 'x': got complex64, the model takes float32"):
        runner.run({"x": np.zeros((5, 16), np.complex64)})
    with pytest.raises(PlanError, match=r"input\(s\) \['x'\] not given"):
        runner.run({"y": np.zeros((5, 16), np.float32)})


def test_a_plan_without_a_row_dimension_is_refused() -> None:
    doc = {
        "buffers": {
            "a": {"dtype": "float32", "shape": [4, 3], "input": True},
            "b": {"dtype": "float32", "shape": [2, 4], "input": True},
            "y": {"dtype": "float32", "shape": [3, 5], "output": True},
        }
    }
    with pytest.raises(
        PlanError, match=r"input 'b': leading dimension 2; every input needs the same batch dimension \(4\)"
    ):
        batch_layout(doc)
    del doc["buffers"]["b"]
    with pytest.raises(PlanError, match=r"output 'y': shape \[3, 5\] has no row per input row \(batch 4\)"):
        batch_layout(doc)


@x86_64_only
def test_one_runner_per_content_whatever_the_path(tmp_path: Any) -> None:
    copy = str(tmp_path / "same.svod")
    with open(copy, "wb") as fh:
        fh.write(mlp_bytes())
    first = cached_runner(MLP)
    assert cached_runner(copy) is first and cached_runner(mlp_bytes()) is first
    assert cached_runner(MLP, threads=2) is not first
    assert bundle_digest(MLP) in cached_digests()
    os.unlink(copy)


def test_shipping_a_path_that_cannot_be_read_is_a_bundle_error(tmp_path: Any) -> None:
    from svod_min.error import BundleError
    from svod_min.interop.dask import ship

    missing = str(tmp_path / "missing.svod")
    with pytest.raises(BundleError, match="missing.svod: cannot read the bundle"):
        ship(None, missing)  # read before the client is used: no cluster needed
