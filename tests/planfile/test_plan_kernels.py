"""Plan-file kernels (svod_min.planfile.kernels): kernel forms, files, size and work expressions, compile errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from conftest import needs_cc
from support.plan_file import Spy, base, rejected, set_key

from svod_min.error import CompilationError
from svod_min.expr import compile_expr
from svod_min.planfile.load import PlanFileError, load_plan


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    return Spy(monkeypatch)


@needs_cc
def test_compile_error_in_inline_c(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"]["source"] = "void bump(int* c, float* y, const float* x, int n) { this is not C; }"
    exc = rejected(spy, doc, CompilationError, "")
    assert exc.diagnostics and "error" in exc.diagnostics


@needs_cc
def test_regression_kernel_file_not_utf8(spy: Spy, tmp_path: Path) -> None:
    (tmp_path / "bump.c").write_bytes(b"\xff\xfe not C")
    doc = base()
    del doc["kernels"]["bump"]["source"]
    doc["kernels"]["bump"]["file"] = "bump.c"
    rejected(spy, doc, PlanFileError, "kernels.bump.file: ", base_dir=str(tmp_path))


@pytest.mark.parametrize(
    "mutate, message",
    [
        pytest.param(
            set_key("kernels", "bump", "flops", value="n ** 2"),
            "kernels.bump.flops: expression 'n ** 2'",
            marks=needs_cc,
            id="flops_expression_checked_at_load",
        ),
        pytest.param(
            set_key("kernels", "bump", "global_size", value=[4, 1, 1]),
            "kernels.bump.global_size",
            marks=needs_cc,
            id="global_size_without_core_id",
        ),
        # str.isdigit() is True for "\u00b2", int() raises
        pytest.param(
            set_key("kernels", "bump", "extents", value={"\u00b2": "n"}),
            "kernels.bump.extents.\u00b2: extent keys are argument positions 0..2",
            id="extent_key_that_is_a_unicode_digit",
        ),
        # the names are right; the value is not
        pytest.param(
            set_key("kernels", "bump", "flops", value="n//0"),
            "ops[0]: expression 'n//0' divides by zero",
            marks=needs_cc,
            id="flops_that_divides_by_zero_is_refused_at_load",
        ),
    ],
)
def test_regression_kernel_declarations_are_checked_at_load(spy: Spy, mutate: Any, message: str) -> None:
    doc = base()
    mutate(doc)
    rejected(spy, doc, PlanFileError, message)


def test_regression_grid_expression_nesting_does_not_blow_up() -> None:
    # ceildiv(a,b) used to be rewritten with b copied twice: 25 levels took 600 MB, 30 would take GBs
    grid = "n"
    for _ in range(40):
        grid = "ceildiv(1,%s)" % grid
    doc = {
        "svod_plan": 1,
        "buffers": {"y": {"shape": [4], "output": True}},
        "kernels": {
            "k": {
                "source": "void k(float* y, int n) {}",
                "buffers": 1,
                "vars": ["n"],
                "cuda": {"ptx": ".version 7.0", "grid": [grid, 1, 1], "block": [1, 1, 1]},
            }
        },
        "ops": [{"kernel": "k", "buffers": ["y"], "vars": {"n": 4}}],
    }
    loaded = load_plan(copy.deepcopy(doc))  # 2**40 copies of "n" before; now ceildiv is in the language
    loaded.plan.execute()
    assert compile_expr(grid)({"n": 4}) == 1
    doc["kernels"]["k"]["cuda"]["grid"][0] = "ceildiv(n,2))"
    with pytest.raises(PlanFileError) as info:
        load_plan(doc)
    assert str(info.value).startswith("kernels.k.cuda.grid[0]: expression 'ceildiv(n,2))' is not valid")
