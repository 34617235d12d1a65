"""Library kernels in plan files get the library's own argument checks.

``LibraryKernel.run`` refuses a buffer of the wrong dtype, a variable below its
minimum or breaking a condition, and a written buffer overlapping another
argument. A plan binds the same kernels, so it must refuse the same things, at
load (naming the op) and again whenever a variable changes: each of these ran
out of bounds or gave a wrong answer before.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Dict

import pytest

from svod_min import kernels
from svod_min.error import SvodError
from svod_min.kernels import KernelArgumentError
from svod_min.planfile.load import PlanFileError, load_plan

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is optional
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")

ADD: Dict[str, Any] = {
    "svod_plan": 1,
    "vars": {"n": {"min": 1, "max": 8, "default": 8}},
    "buffers": {
        "out": {"dtype": "float32", "shape": [8], "output": True},
        "a": {"dtype": "float32", "shape": [8], "init": "arange"},
        "b": {"dtype": "float32", "shape": [8], "init": "ones"},
    },
    "kernels": {"add": {"library": "add", "params": {"dtype": "float32"}}},
    "ops": [{"kernel": "add", "buffers": ["out", "a", "b"], "vars": {"n": "n"}}],
}


def add_plan() -> Dict[str, Any]:
    return copy.deepcopy(ADD)


def test_control_the_add_plan_runs_and_is_right() -> None:
    loaded = load_plan(add_plan())
    loaded.plan.execute()
    assert loaded.buffers["out"].tolist() == [float(i + 1) for i in range(8)]


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float64"])
def test_buffer_of_another_dtype_is_refused_naming_the_op(dtype: str) -> None:
    doc = add_plan()
    doc["buffers"]["out"]["dtype"] = dtype  # uint8: 8 bytes would "fit" 8 elements; the kernel writes 32
    with pytest.raises(PlanFileError) as info:
        load_plan(doc)
    assert str(info.value) == "ops[0]: add: buffer out must be float32, got %s" % dtype


def test_uint16_buffer_carries_bfloat16_bits() -> None:
    doc = add_plan()
    doc["kernels"]["add"]["params"]["dtype"] = "bfloat16"
    for name in ("out", "a", "b"):
        doc["buffers"][name]["dtype"] = "uint16"  # numpy's stand-in for bfloat16, as LibraryKernel.run accepts
    doc["buffers"]["a"]["init"] = {"values": [0x3F80] * 8}  # 1.0
    doc["buffers"]["b"]["init"] = {"values": [0x4000] * 8}  # 2.0
    loaded = load_plan(doc)
    loaded.plan.execute()
    assert loaded.buffers["out"].tolist() == [0x4040] * 8  # 3.0


def test_variable_below_its_minimum_is_refused() -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {
            "out": {"dtype": "float32", "shape": [1], "output": True},
            "x": {"dtype": "float32", "shape": [1], "init": "ones"},
        },
        "kernels": {"r": {"library": "reduce_sum", "params": {"dtype": "float32"}}},
        # sr < 0 made the input extent 1 + (red-1)*sr negative: a 1-element buffer "fitted"
        "ops": [
            {
                "kernel": "r",
                "buffers": ["out", "x"],
                "vars": {"outer": 1, "red": 2, "inner": 1, "so": 0, "sr": -(1 << 28), "si": 0},
            }
        ],
    }
    with pytest.raises(PlanFileError) as info:
        load_plan(doc)
    assert str(info.value) == "ops[0]: reduce_sum: variable sr=-268435456 is below its minimum 0"


def test_variable_change_below_a_minimum_is_refused_and_the_plan_keeps_working() -> None:
    doc = add_plan()
    doc["vars"]["n"]["min"] = -4  # the plan allows it; the kernel's n must be >= 0
    loaded = load_plan(doc)
    with pytest.raises(KernelArgumentError, match=r"add: variable n=-1 is below its minimum 0"):
        loaded.plan.execute_with_vars({"n": -1})
    loaded.plan.execute_with_vars({"n": 3})
    assert loaded.buffers["out"].tolist()[:3] == [1.0, 2.0, 3.0]


def test_the_load_checks_each_library_op_once_and_every_later_bind_checks_again(monkeypatch: Any) -> None:
    calls = []
    check = kernels.check_bound_args
    monkeypatch.setattr(
        kernels, "check_bound_args", lambda sig, env, bufs: (calls.append(dict(env)), check(sig, env, bufs))
    )
    loaded = load_plan(add_plan())
    assert [c["n"] for c in calls] == [8]  # at load, naming the op; the plan's first bind does not repeat it
    loaded.plan.execute_with_vars({"n": 3})
    loaded.plan.execute_with_vars({"n": 8})  # back to the loaded values: checked again
    assert [c["n"] for c in calls] == [8, 3, 8]
    assert loaded.buffers["out"].tolist() == [float(i + 1) for i in range(8)]


@needs_numpy
def test_written_buffer_aliasing_an_input_is_refused() -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"dtype": "float32", "shape": [48 * 80], "init": "arange", "output": True}},
        "kernels": {"t": {"library": "transpose", "params": {"dtype": "float32"}}},
        "ops": [{"kernel": "t", "buffers": ["x", "x"], "vars": {"rows": 48, "cols": 80}}],
    }
    with pytest.raises(PlanFileError) as info:
        load_plan(doc)
    assert str(info.value) == "ops[0]: transpose: buffers out and x overlap in memory (out is written)"


def test_overlapping_views_are_refused_but_exact_in_place_elementwise_is_allowed() -> None:
    doc = add_plan()
    doc["buffers"] = {
        "arena": {"dtype": "float32", "shape": [12], "init": "arange"},
        "out": {"dtype": "float32", "shape": [8], "view_of": "arena", "offset": 16, "output": True},
        "a": {"dtype": "float32", "shape": [8], "view_of": "arena", "offset": 0},
        "b": {"dtype": "float32", "shape": [8], "init": "ones"},
    }
    with pytest.raises(PlanFileError, match=r"^ops\[0\]: add: buffers out and a overlap in memory"):
        load_plan(doc)
    doc = add_plan()
    doc["ops"][0]["buffers"] = ["a", "a", "b"]  # out is exactly a: an elementwise kernel may run in place
    loaded = load_plan(doc)
    loaded.plan.execute()
    assert loaded.buffers["a"].tolist() == [float(i + 1) for i in range(8)]


def _layernorm(eps: Any) -> Dict[str, Any]:
    return {
        "svod_plan": 1,
        "buffers": {
            "out": {"dtype": "float32", "shape": [2], "output": True},
            "x": {"dtype": "float32", "shape": [2], "init": {"values": [1, -1]}},
            "w": {"dtype": "float32", "shape": [2], "init": "ones"},
            "b": {"dtype": "float32", "shape": [2]},
        },
        "kernels": {"ln": {"library": "layernorm", "params": {"dtype": "float32"}}},
        "ops": [{"kernel": "ln", "buffers": ["out", "x", "w", "b"], "vars": {"rows": 1, "cols": 2, "eps": eps}}],
    }


@pytest.mark.parametrize("eps", [1, 1e-5, 0.25])
def test_float_variable_takes_a_number_as_the_library_does(eps: float) -> None:
    loaded = load_plan(_layernorm(eps))
    loaded.plan.execute()
    expect = 1.0 / math.sqrt(1.0 + eps)  # x = [1, -1]: mean 0, variance 1
    got = loaded.buffers["out"].tolist()
    assert got == pytest.approx([expect, -expect], rel=1e-5)
    if np is not None:  # the same arguments through the library's own API
        out = np.zeros(2, np.float32)
        kernels.get("layernorm", dtype="float32").run(
            [out, np.array([1, -1], np.float32), np.ones(2, np.float32), np.zeros(2, np.float32)],
            rows=1,
            cols=2,
            eps=eps,
        )
        assert got == out.tolist()


@pytest.mark.parametrize(
    "eps, message",
    [
        ("n", "expected a number, got string 'n'"),
        (True, "expected a number, got a boolean"),
        (1e39, "1e+39 is not a finite float32 value"),
    ],
)
def test_float_variable_refuses_what_is_not_a_float32(eps: Any, message: str) -> None:
    with pytest.raises(PlanFileError) as info:
        load_plan(_layernorm(eps))
    assert str(info.value) == "ops[0].vars.eps: " + message


def test_errors_are_the_projects_own() -> None:
    doc = add_plan()
    doc["buffers"]["b"]["dtype"] = "int32"
    with pytest.raises(SvodError):
        load_plan(doc)
