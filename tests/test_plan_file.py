"""Plan files: round trips, malformed plans (exact message + JSON path, nothing dispatched),
file-level problems, ``.npy`` support, and ``python -m svod_min run`` end to end.

"Nothing dispatched" is checked with a spy device: every program it loads counts its
dispatches, copies and custom ops are counted too, and the base plan's kernel increments a
counter buffer in C, which must still read zero after a rejected load. The positive control
(:func:`test_spy_sees_a_dispatch`) shows the spy would notice a kernel that ran.
"""

from __future__ import annotations

import copy
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest
from conftest import needs_cc

import svod_min.execution_plan as execution_plan
import svod_min.plan_data as plan_data
import svod_min.plan_schema as plan_schema
from svod_min.default_plan import default_plan_document, plan_document
from svod_min.devices.cpu import CpuDevice
from svod_min.dtypes import float32, int32, pack_values
from svod_min.expr import compile_expr
from svod_min.error import CompilationError, PlanError, SvodError
from svod_min.npy import read_npy, write_npy
from svod_min.plan_file import PlanFileError, load_plan, read_plan_document

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.json"))

try:
    import numpy as np
except ImportError:  # pragma: no cover - numpy is optional
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy is not installed")

# --- the base plan and the spy -----------------------------------------------------------------

BUMP_C = r"""
void bump(int* restrict count, float* restrict y, const float* restrict x, int n) {
  count[0] += 1;
  for (int i = 0; i < n; i++) y[i] = x[i] + 1.0f;
}
"""

BASE: Dict[str, Any] = {
    "svod_plan": 1,
    "description": "bump: count += 1, y = x + 1",
    "device": "CPU",
    "vars": {"n": {"min": 1, "max": 4, "default": 4}},
    "buffers": {
        "count": {"dtype": "int32", "shape": [1], "output": True},
        "y": {"dtype": "float32", "shape": [4], "output": True},
        "x": {"dtype": "float32", "shape": [4], "init": "ones"},
    },
    "kernels": {
        "bump": {"source": BUMP_C, "buffers": 3, "outputs": [0, 1], "vars": ["n"], "extents": {"1": "n", "2": "n"}},
    },
    "ops": [{"kernel": "bump", "buffers": ["count", "y", "x"]}],
    "expect": {"count": {"values": [1]}, "y": {"values": [2, 2, 2, 2]}},
}


def base() -> Dict[str, Any]:
    return copy.deepcopy(BASE)


class _SpyProgram:
    """Wraps a loaded program; every dispatch (bound call or execute) is counted."""

    def __init__(self, inner: Any, device: "SpyDevice") -> None:
        self._inner = inner
        self._device = device

    def bind(self, *args: Any, **kwargs: Any) -> Callable[[], None]:
        call = self._inner.bind(*args, **kwargs)

        def counted() -> None:
            self._device.dispatches += 1
            call()

        return counted

    def execute(self, *args: Any, **kwargs: Any) -> None:
        self._device.dispatches += 1
        self._inner.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class SpyDevice(CpuDevice):
    """A CPU device that records its allocations and counts kernel dispatches."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.allocated: List[Any] = []
        self.dispatches = 0

    def allocate(self, *args: Any, **kwargs: Any) -> Any:
        buf = super().allocate(*args, **kwargs)
        self.allocated.append(buf)
        return buf

    def load(self, *args: Any, **kwargs: Any) -> Any:
        return _SpyProgram(super().load(*args, **kwargs), self)


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.device = SpyDevice()
        self.customs = 0
        self.copies = 0
        real_custom, real_memmove = execution_plan.run_custom_function, execution_plan._memmove

        def custom(*args: Any, **kwargs: Any) -> None:
            self.customs += 1
            real_custom(*args, **kwargs)

        def memmove(*args: Any, **kwargs: Any) -> None:
            self.copies += 1
            real_memmove(*args, **kwargs)

        monkeypatch.setattr(execution_plan, "run_custom_function", custom)
        monkeypatch.setattr(execution_plan, "_memmove", memmove)

    def counters(self) -> List[int]:
        """Values of every int32[1] buffer allocated (the bump kernel's counter)."""
        return [struct.unpack("<i", b.copyout())[0] for b in self.device.allocated
                if b.dtype.name == "int32" and tuple(b.shape) == (1,)]

    def assert_nothing_ran(self) -> None:
        assert self.device.dispatches == 0, "a kernel was dispatched"
        assert self.customs == 0, "a custom op ran"
        assert self.copies == 0, "a copy ran"
        assert all(c == 0 for c in self.counters()), "the counter kernel ran: %s" % self.counters()


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    return Spy(monkeypatch)


def rejected(spy: Spy, doc: Any, exc_type: type, message: str, base_dir: Optional[str] = None, **kw: Any) -> BaseException:
    with pytest.raises(exc_type) as info:
        load_plan(doc, device=spy.device, base_dir=base_dir, **kw)
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value).strip() or exc_type is CompilationError
    spy.assert_nothing_ran()
    return info.value


def _outputs(loaded: Any) -> Dict[str, bytes]:
    outs = {id(b) for b in loaded.plan.output_buffers()}
    return {n: b.copyout() for n, b in loaded.buffers.items() if id(b) in outs}


# --- round trips --------------------------------------------------------------------------------


@needs_cc
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_load_run_and_verify(path: Path) -> None:
    loaded = load_plan(str(path))
    loaded.plan.execute()
    checks = loaded.verify()
    assert checks and all(ok for _, ok, _ in checks), checks


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 2


@needs_cc
def test_default_plan_verifies() -> None:
    loaded = load_plan(default_plan_document())
    loaded.plan.execute()
    checks = loaded.verify()
    assert [b for b, _, _ in checks] == ["y"]
    assert all(ok for _, ok, _ in checks), checks


@needs_cc
def test_default_plan_json_round_trip_gives_identical_outputs(tmp_path: Path) -> None:
    doc = plan_document()
    path = tmp_path / "mlp.json"
    path.write_text(json.dumps(doc))
    assert read_plan_document(str(path)) == doc
    from_dict = load_plan(doc)
    from_file = load_plan(str(path))
    from_dict.plan.execute()
    from_file.plan.execute()
    a, b = _outputs(from_dict), _outputs(from_file)
    assert list(a) == ["y"] and a == b
    assert any(a["y"])  # softmax rows: not all zero


@needs_cc
def test_spy_sees_a_dispatch(spy: Spy) -> None:
    """Positive control: loading dispatches nothing, running is seen by every check."""
    loaded = load_plan(base(), device=spy.device)
    spy.assert_nothing_ran()
    assert spy.counters() == [0]
    loaded.plan.execute()
    assert spy.device.dispatches == 1 and spy.counters() == [1]
    assert all(ok for _, ok, _ in loaded.verify())
    with pytest.raises(AssertionError):
        spy.assert_nothing_ran()


@needs_cc
def test_counter_kernel_counts_under_the_default_replay() -> None:
    """The counter also sees dispatches made by the default (possibly native) replay path."""
    loaded = load_plan(base())
    assert struct.unpack("<i", loaded.buffers["count"].copyout())[0] == 0
    loaded.plan.execute()
    loaded.plan.execute()
    assert struct.unpack("<i", loaded.buffers["count"].copyout())[0] == 2


# --- malformed plans ----------------------------------------------------------------------------


def _set(*keys: Any, value: Any) -> Callable[[Dict[str, Any]], None]:
    def mutate(doc: Dict[str, Any]) -> None:
        target = doc
        for k in keys[:-1]:
            target = target[k]
        target[keys[-1]] = value

    return mutate


def _delete(*keys: Any) -> Callable[[Dict[str, Any]], None]:
    def mutate(doc: Dict[str, Any]) -> None:
        target = doc
        for k in keys[:-1]:
            target = target[k]
        del target[keys[-1]]

    return mutate


def _both(*mutations: Callable[[Dict[str, Any]], None]) -> Callable[[Dict[str, Any]], None]:
    def mutate(doc: Dict[str, Any]) -> None:
        for m in mutations:
            m(doc)

    return mutate


def _add_op(op: Dict[str, Any]) -> Callable[[Dict[str, Any]], None]:
    return lambda doc: doc["ops"].append(op)


def _add_buffer(name: str, spec: Dict[str, Any]) -> Callable[[Dict[str, Any]], None]:
    return lambda doc: doc["buffers"].__setitem__(name, spec)


BUMP_OP = {"kernel": "bump", "buffers": ["count", "y", "x"]}

# (id, mutation, json path, message after "path: ")
MALFORMED_WITH_PATH = [
    ("missing-svod_plan", _delete("svod_plan"), "svod_plan", 'missing: a plan file starts with "svod_plan": 1'),
    ("wrong-version", _set("svod_plan", value=2), "svod_plan", "unsupported version 2 (this svod_min reads 1)"),
    ("version-as-string", _set("svod_plan", value="1"), "svod_plan", "unsupported version '1' (this svod_min reads 1)"),
    ("unknown-top-level-key", _set("bogus", value=1), "$", "unknown key(s) ['bogus'] (allowed: ['buffers', 'description'"),
    ("vars-min-gt-max", _set("vars", "n", value={"min": 5, "max": 1, "default": 1}), "vars.n", "min 5 > max 1"),
    ("vars-default-outside", _set("vars", "n", value={"min": 1, "max": 4, "default": 9}), "vars.n", "default 9 is outside [1, 4]"),
    ("vars-list-wrong-length", _set("vars", "n", value=[1, 4]), "vars.n", "expected [min, max, default]"),
    ("vars-not-int32", _set("vars", "n", value={"min": 1, "max": 1 << 31}), "vars.n.max", "must be <= 2147483647, got 2147483648"),
    ("vars-core_id-reserved", _set("vars", "core_id", value=[0, 1, 0]), "vars.core_id", "variable names are identifiers (core_id is reserved)"),
    ("buffers-missing", _delete("buffers"), "buffers", "missing (a plan file needs buffers)"),
    ("buffers-empty", _set("buffers", value={}), "buffers", "a plan needs at least one buffer"),
    ("negative-dim", _set("buffers", "x", "shape", value=[-1]), "buffers.x.shape[0]", "must be >= 0, got -1"),
    ("shape-not-list", _set("buffers", "x", "shape", value=4), "buffers.x.shape", "expected a list, got int"),
    ("unknown-dtype", _set("buffers", "x", "dtype", value="float33"), "buffers.x.dtype", "unknown dtype 'float33'"),
    ("huge-buffer", _set("buffers", "x", "shape", value=[1 << 32, 8]), "buffers.x.shape",
     "buffer of 137438953472 bytes exceeds the 17179869184-byte limit"),
    ("buffer-unknown-key", _set("buffers", "x", "dtyp", value="float32"), "buffers.x", "unknown key(s) ['dtyp']"),
    ("init-values-count", _set("buffers", "x", "init", value={"values": [1, 2, 3]}), "buffers.x.init.values",
     "3 values for a buffer of 4 elements"),
    ("init-values-not-number", _set("buffers", "x", "init", value={"values": [1, "a", 3, 4]}), "buffers.x.init.values[1]",
     "expected a number, got string 'a'"),
    ("init-values-bool", _set("buffers", "x", "init", value={"values": [[1, 2], [True, 4]]}), "buffers.x.init.values[1][0]",
     "expected a number, got a boolean"),
    ("unknown-init-kind", _set("buffers", "x", "init", value={"bogus": 1}), "buffers.x.init",
     "unknown init 'bogus' (zeros, ones, arange, random, values, npy)"),
    ("init-two-kinds", _set("buffers", "x", "init", value={"values": [1, 2, 3, 4], "npy": "x.npy"}), "buffers.x.init",
     "expected one of zeros, ones, arange, {random}, {values}, {npy}"),
    ("random-unknown-key", _set("buffers", "x", "init", value={"random": {"sead": 1}}), "buffers.x.init.random", "unknown key(s) ['sead']"),
    ("npy-file-missing", _set("buffers", "x", "init", value={"npy": "nope.npy"}), "buffers.x.init.npy", "file 'nope.npy' not found"),
    ("view-outside-base", _add_buffer("v", {"shape": [4], "view_of": "x", "offset": 8}), "buffers.v",
     "view [8, +16) is outside 'x' (16 bytes)"),
    ("view-of-unknown", _add_buffer("v", {"shape": [1], "view_of": "zz"}), "buffers.v.view_of",
     "unknown buffer 'zz' (views must come after their base)"),
    ("view-with-init", _add_buffer("v", {"shape": [1], "view_of": "x", "init": "ones"}), "buffers.v.init",
     "views share their base's data and take no init"),
    ("view-negative-offset", _add_buffer("v", {"shape": [1], "view_of": "x", "offset": -4}), "buffers.v.offset", "must be >= 0, got -4"),
    ("kernel-two-forms", _set("kernels", "bump", "file", value="bump.c"), "kernels.bump",
     "give exactly one of source, file, llvm_ir, ir_file, library (got ['source', 'file'])"),
    ("kernel-no-form", _delete("kernels", "bump", "source"), "kernels.bump",
     "give exactly one of source, file, llvm_ir, ir_file, library (got none)"),
    ("kernel-unknown-key", _set("kernels", "bump", "sauce", value="x"), "kernels.bump", "unknown key(s) ['sauce']"),
    ("kernel-buffers-missing", _delete("kernels", "bump", "buffers"), "kernels.bump.buffers", "expected an integer, got null"),
    ("kernel-output-out-of-range", _set("kernels", "bump", "outputs", value=[3]), "kernels.bump.outputs[0]", "must be <= 2, got 3"),
    ("kernel-file-missing", _both(_delete("kernels", "bump", "source"), _set("kernels", "bump", "file", value="nope.c")),
     "kernels.bump.file", "file 'nope.c' not found"),
    ("global-size-pow", _set("kernels", "bump", "global_size", value=["n ** 2", 1, 1]), "kernels.bump.global_size[0]",
     "expression 'n ** 2': operator Pow is not allowed"),
    ("global-size-import", _set("kernels", "bump", "global_size", value=["__import__('os')", 1, 1]), "kernels.bump.global_size[0]",
     "expression \"__import__('os')\": call to __import__() is not allowed"),
    ("global-size-syntax", _set("kernels", "bump", "global_size", value=[1, "n +", 1]), "kernels.bump.global_size[1]",
     "expression 'n +' is not valid"),
    ("global-size-length", _set("kernels", "bump", "global_size", value=[1, 1]), "kernels.bump.global_size", "expected 3 entries, got 2"),
    ("extents-bad-key", _set("kernels", "bump", "extents", value={"7": "n"}), "kernels.bump.extents.7",
     "extent keys are argument positions 0..2"),
    ("extents-bad-expr", _set("kernels", "bump", "extents", value={"1": "n.real"}), "kernels.bump.extents.1",
     "expression 'n.real': Attribute is not allowed"),
    ("ops-missing", _delete("ops"), "ops", "missing (a plan file needs ops)"),
    ("ops-empty", _set("ops", value=[]), "ops", "a plan needs at least one op"),
    ("op-not-object", _set("ops", value=["bump"]), "ops[0]", "expected an object, got string 'bump'"),
    ("unknown-kernel", _set("ops", 0, "kernel", value="nope"), "ops[0].kernel", "unknown kernel 'nope' (declared: ['bump'])"),
    ("wrong-buffer-count", _set("ops", 0, "buffers", value=["count", "y"]), "ops[0].buffers", "kernel bump takes 3 buffers, got 2"),
    ("unknown-buffer", _set("ops", 0, "buffers", value=["count", "h2", "x"]), "ops[0].buffers[1]", "unknown buffer 'h2'"),
    ("op-two-kinds", _set("ops", 0, "copy", value={"dst": "y", "src": "x"}), "ops[0]",
     "an op has exactly one of kernel, copy, view, custom (got ['kernel', 'copy'])"),
    ("op-no-kind", _set("ops", value=[{"buffers": ["y"]}]), "ops[0]", "an op has exactly one of kernel, copy, view, custom (got none)"),
    ("kernel-op-unknown-key", _set("ops", 0, "bufers", value=[]), "ops[0]", "unknown key(s) ['bufers']"),
    ("var-bound-to-non-plan-var", _set("ops", 0, "vars", value={"n": "m"}), "ops[0].vars.n",
     "expression 'm' uses ['m'], not plan variables ['n']"),
    ("kernel-var-without-plan-var", _delete("vars"), "ops[0].vars.n",
     "bind kernel variable 'n' to an integer, a plan variable or an expression over plan variables (plan variables: [])"),
    ("var-expression-syntax", _set("ops", 0, "vars", value={"n": "n ** 2"}), "ops[0].vars.n",
     "expression 'n ** 2': operator Pow is not allowed"),
    ("unknown-kernel-var", _set("ops", 0, "vars", value={"zz": 1}), "ops[0].vars", "kernel bump has no variable(s) ['zz'] (it takes ['n'])"),
    ("op-global-size-pow", _set("ops", 0, "global_size", value=["n ** 2", 1, 1]), "ops[0].global_size[0]",
     "expression 'n ** 2': operator Pow is not allowed"),
    ("deps-not-int", _set("ops", 0, "deps", value=["a"]), "ops[0].deps[0]", "expected an integer, got string 'a'"),
    ("copy-unknown-buffer", _add_op({"copy": {"dst": "y", "src": "zz"}}), "ops[1].copy.src", "unknown buffer 'zz'"),
    ("copy-unknown-key", _add_op({"copy": {"dst": "y", "src": "x", "n": 1}}), "ops[1].copy", "unknown key(s) ['n']"),
    ("view-op-not-a-view", _add_op({"view": "y"}), "ops[1].view", "buffer 'y' is not declared with view_of"),
    ("custom-unknown-buffer", _add_op({"custom": "allreduce", "buffers": ["y", "zz"]}), "ops[1].buffers[1]", "unknown buffer 'zz'"),
    ("no-output-buffer", _both(_delete("buffers", "count", "output"), _delete("buffers", "y", "output")), "buffers",
     'no buffer is marked "output": true'),
    ("expect-unknown-buffer", _set("expect", "zz", value={"values": [1]}), "expect.zz", "unknown buffer 'zz'"),
    ("expect-count-mismatch", _set("expect", "y", "values", value=[2, 2, 2]), "expect.y", "3 expected values for a buffer of 4 elements"),
    ("expect-unknown-key", _set("expect", "y", "tol", value=1), "expect.y", "unknown key(s) ['tol']"),
    ("expect-npy-missing", _set("expect", "y", value={"npy": "nope.npy"}), "expect.y.npy", "file 'nope.npy' not found"),
]


@needs_cc
@pytest.mark.parametrize("mutate, json_path, message", [c[1:] for c in MALFORMED_WITH_PATH],
                         ids=[c[0] for c in MALFORMED_WITH_PATH])
def test_malformed_plan_names_its_json_path(spy: Spy, tmp_path: Path, mutate: Any, json_path: str, message: str) -> None:
    doc = base()
    mutate(doc)
    exc = rejected(spy, doc, PlanFileError, "%s: %s" % (json_path, message), base_dir=str(tmp_path))
    assert exc.json_path == json_path
    assert str(exc).startswith(json_path + ": ")


def test_enough_malformed_cases() -> None:
    assert len(MALFORMED_WITH_PATH) >= 15


@needs_cc
def test_top_level_not_an_object(spy: Spy) -> None:
    exc = rejected(spy, [base()], PlanFileError, "$: expected an object, got a list")
    assert exc.json_path == "$"


@needs_cc
@pytest.mark.parametrize("values, message", [
    ({"zz": 2}, "--var zz: unknown variable (plan variables: ['n'])"),
    ({"n": 9}, "--var n: variable n=9 is outside bounds [1, 4]"),
    ({"n": 0}, "--var n: variable n=0 is outside bounds [1, 4]"),
])
def test_var_values_are_checked_before_anything_runs(spy: Spy, values: Dict[str, int], message: str) -> None:
    rejected(spy, base(), PlanFileError, message, var_values=values)


@needs_cc
def test_custom_op_of_unregistered_kind(spy: Spy) -> None:
    doc = base()
    doc["ops"].append({"custom": "nope", "buffers": ["y"]})
    rejected(spy, doc, PlanFileError, "ops[1].custom: custom function 'nope' is not registered (registered: [")  # others may add kinds


@needs_cc
def test_deps_on_unknown_op_id(spy: Spy) -> None:
    doc = base()
    doc["ops"][0]["deps"] = [7]
    rejected(spy, doc, PlanError, "op 0 (id 0) depends on 7: unknown op id")


@needs_cc
def test_cycle_via_deps(spy: Spy) -> None:
    doc = base()
    doc["ops"] = [dict(BUMP_OP, id=0, deps=[1]), dict(BUMP_OP, id=1, deps=[0])]
    rejected(spy, doc, PlanError, "cycle detected in op dependencies: blocked_ids=[0, 1]")


@needs_cc
def test_copy_size_mismatch(spy: Spy) -> None:
    doc = base()
    doc["ops"].append({"copy": {"dst": "y", "src": "count"}})
    rejected(spy, doc, PlanError, "op 1 (id 1): copy size mismatch: dst 16 bytes, src 4 bytes")


@needs_cc
def test_extent_too_small_is_refused(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"]["extents"]["1"] = "2*n"
    rejected(spy, doc, SvodError, "kernel bump argument 1 needs 8 elements (2*n) but buffer 1 holds 4: refusing to dispatch")


@needs_cc
def test_compile_error_in_inline_c(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"]["source"] = "void bump(int* c, float* y, const float* x, int n) { this is not C; }"
    exc = rejected(spy, doc, CompilationError, "")
    assert exc.diagnostics and "error" in exc.diagnostics


# --- regressions: bugs found by these tests and fixed -------------------------------------------


@needs_cc
def test_regression_random_low_not_a_number(spy: Spy) -> None:
    doc = base()
    doc["buffers"]["x"]["init"] = {"random": {"low": "abc"}}
    rejected(spy, doc, PlanFileError, "buffers.x.init.random.low: ")


@needs_cc
def test_regression_expect_rtol_not_a_number(spy: Spy) -> None:
    doc = base()
    doc["expect"]["y"]["rtol"] = "abc"
    rejected(spy, doc, PlanFileError, "expect.y.rtol: ")


@needs_cc
def test_regression_kernel_file_not_utf8(spy: Spy, tmp_path: Path) -> None:
    (tmp_path / "bump.c").write_bytes(b"\xff\xfe not C")
    doc = base()
    del doc["kernels"]["bump"]["source"]
    doc["kernels"]["bump"]["file"] = "bump.c"
    rejected(spy, doc, PlanFileError, "kernels.bump.file: ", base_dir=str(tmp_path))


@needs_cc
def test_regression_flops_expression_checked_at_load(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"]["flops"] = "n ** 2"
    rejected(spy, doc, PlanFileError, "kernels.bump.flops: expression 'n ** 2'")


@needs_cc
def test_regression_custom_op_unknown_key(spy: Spy) -> None:
    doc = base()
    doc["ops"].append({"custom": "allreduce", "bufers": ["y"]})
    rejected(spy, doc, PlanFileError, "ops[1]: unknown key(s) ['bufers']")


@needs_cc
def test_regression_global_size_without_core_id(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"]["global_size"] = [4, 1, 1]
    rejected(spy, doc, PlanFileError, "kernels.bump.global_size")


@needs_cc
def test_regression_fixed_var_outside_int32_has_no_path(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"].pop("extents")
    doc["ops"][0]["vars"] = {"n": 1 << 40}
    rejected(spy, doc, PlanError, "ops[0].vars.n: ")


@needs_cc
def test_regression_device_not_a_string() -> None:
    doc = base()
    doc["device"] = 5
    with pytest.raises(PlanFileError, match=r"^device: expected a non-empty string, got int"):
        load_plan(doc)


@needs_cc
def test_regression_output_flag_must_be_boolean(spy: Spy) -> None:
    doc = base()
    doc["buffers"]["x"]["output"] = "no"
    rejected(spy, doc, PlanFileError, "buffers.x.output: ")


@needs_cc
def test_regression_npy_errors_name_the_json_path(spy: Spy, tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_bytes(b"not an npy file at all")
    doc = base()
    doc["buffers"]["x"]["init"] = {"npy": "x.npy"}
    rejected(spy, doc, PlanError, "buffers.x.init.npy: ", base_dir=str(tmp_path))


# --- file level ---------------------------------------------------------------------------------


def _file_error(path: Path, message: str) -> PlanFileError:
    with pytest.raises(PlanFileError) as info:
        load_plan(str(path))
    assert message in str(info.value), str(info.value)
    assert "\n" not in str(info.value)
    return info.value


def test_file_not_json(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"svod_plan": 1,,}')
    _file_error(path, "plan file %s is not valid JSON: Expecting property name" % path)


def test_file_empty(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b"")
    _file_error(path, "plan file %s is empty" % path)


def test_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_bytes(b'{"svod_plan": 1, "description": "\xff\xfe"}')
    _file_error(path, "plan file %s is not UTF-8 text" % path)


def test_file_missing(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    _file_error(path, "cannot read plan file %s: No such file or directory" % path)


def test_file_of_100_mb_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with open(path, "wb") as fh:  # sparse: 100 MB inside a JSON string, without writing them
        fh.write(b'{"svod_plan": 1, "description": "')
        fh.seek(100 * 1024 * 1024 - 2)
        fh.write(b'"}')
    assert path.stat().st_size == 100 * 1024 * 1024
    _file_error(path, "plan file %s is 104857600 bytes; the limit is %d" % (path, plan_schema.MAX_PLAN_BYTES))


def test_file_over_a_lowered_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(plan_schema, "MAX_PLAN_BYTES", 1000)
    path = tmp_path / "p.json"
    path.write_text('{"svod_plan": 1, "description": "%s"}' % (" " * 2000))
    _file_error(path, "bytes; the limit is 1000")


def test_file_top_level_list(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps([BASE]))
    assert _file_error(path, "$: expected an object, got a list").json_path == "$"


def test_file_deeply_nested(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text("[" * 100000)
    _file_error(path, "plan file %s nests too deeply" % path)


# --- .npy ---------------------------------------------------------------------------------------


def _npy_plan(init_name: str, expect_name: str) -> Dict[str, Any]:
    doc = base()
    doc["buffers"]["x"]["init"] = {"npy": init_name}
    doc["expect"]["y"] = {"npy": expect_name}
    return doc


@needs_cc
def test_npy_written_by_write_npy_loads_and_verifies(tmp_path: Path) -> None:
    write_npy(str(tmp_path / "x.npy"), float32, (2, 2), pack_values(float32, [1, 2, 3, 4]))
    write_npy(str(tmp_path / "want.npy"), float32, (4,), pack_values(float32, [2, 3, 4, 5]))
    assert read_npy(str(tmp_path / "x.npy"))[:2] == (float32, (2, 2))
    loaded = load_plan(_npy_plan("x.npy", "want.npy"), base_dir=str(tmp_path))
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify())
    assert loaded.buffers["y"].tolist() == [2, 3, 4, 5]


@needs_cc
@needs_numpy
def test_npy_written_by_numpy_loads_and_verifies(tmp_path: Path) -> None:
    np.save(str(tmp_path / "x.npy"), np.array([0.5, 1.5, -2.0, 8.0], dtype=np.float32))
    np.save(str(tmp_path / "want.npy"), np.array([1.5, 2.5, -1.0, 9.0], dtype=np.float32))
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_npy_plan("x.npy", "want.npy")))
    loaded = load_plan(str(path))  # npy paths are relative to the plan file
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify())
    wrong = tmp_path / "wrong.npy"
    np.save(str(wrong), np.array([1.5, 2.5, -1.0, 9.5], dtype=np.float32))
    loaded = load_plan(_npy_plan("x.npy", "wrong.npy"), base_dir=str(tmp_path))
    loaded.plan.execute()
    assert [ok for _, ok, _ in loaded.verify()] == [True, False]


@needs_numpy
def test_write_npy_is_readable_by_numpy(tmp_path: Path) -> None:
    for shape in [(), (5,), (2, 3), (1, 2, 2)]:
        count = 1
        for d in shape:
            count *= d
        write_npy(str(tmp_path / "a.npy"), int32, shape, pack_values(int32, list(range(count))))
        arr = np.load(str(tmp_path / "a.npy"))
        assert arr.shape == shape and arr.dtype == np.int32
        assert arr.ravel().tolist() == list(range(count))


@needs_cc
def test_npy_dtype_and_count_must_match(spy: Spy, tmp_path: Path) -> None:
    write_npy(str(tmp_path / "i.npy"), int32, (4,), pack_values(int32, [1, 2, 3, 4]))
    write_npy(str(tmp_path / "f3.npy"), float32, (3,), pack_values(float32, [1, 2, 3]))
    doc = base()
    doc["buffers"]["x"]["init"] = {"npy": "i.npy"}
    rejected(spy, doc, PlanFileError, "buffers.x.init.npy: i.npy holds int32, the buffer is float32", base_dir=str(tmp_path))
    doc["buffers"]["x"]["init"] = {"npy": "f3.npy"}
    rejected(spy, doc, PlanFileError, "buffers.x.init.npy: f3.npy has shape [3], the buffer [4]", base_dir=str(tmp_path))
    doc = base()
    doc["expect"]["y"] = {"npy": "f3.npy"}
    rejected(spy, doc, PlanFileError, "expect.y: 3 expected values for a buffer of 4 elements", base_dir=str(tmp_path))


def _raw_npy(path: Path, header: str, payload: bytes, version: int = 1) -> str:
    h = header.encode("latin1")
    size = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    path.write_bytes(b"\x93NUMPY" + bytes([version, 0]) + size + h + payload)
    return str(path)


GOOD_HEADER = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }"


def test_read_npy_accepts_a_good_file_v1_and_v2(tmp_path: Path) -> None:
    for version in (1, 2):
        p = _raw_npy(tmp_path / "a.npy", GOOD_HEADER, pack_values(float32, [1.5, -2]), version)
        assert read_npy(p) == (float32, (2,), pack_values(float32, [1.5, -2]))


@pytest.mark.parametrize("header, payload, message", [
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,", b"\0" * 8, "malformed .npy header"),
    ("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", b"\0" * 8, "only C-order .npy arrays are supported"),
    ("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16, "unsupported .npy dtype '<c8'"),
    ("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 8, "unsupported .npy dtype '>f4'"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 7, "expected 8 bytes of data, found 7"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 9, "expected 8 bytes of data, found 9"),
], ids=["corrupt-header", "fortran-order", "complex-dtype", "big-endian", "truncated", "trailing-bytes"])
def test_read_npy_rejects(tmp_path: Path, header: str, payload: bytes, message: str) -> None:
    p = _raw_npy(tmp_path / "a.npy", header, payload)
    with pytest.raises(PlanError) as info:
        read_npy(p)
    assert str(info.value).startswith("%s: %s" % (p, message)), str(info.value)


def test_read_npy_rejects_non_npy_and_bad_version(tmp_path: Path) -> None:
    p = tmp_path / "a.npy"
    p.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(PlanError, match="is not an .npy file"):
        read_npy(str(p))
    with pytest.raises(PlanError, match="unsupported .npy version 9"):
        read_npy(_raw_npy(p, GOOD_HEADER, b"\0" * 8, version=9))
    with pytest.raises(PlanError, match="cannot read"):
        read_npy(str(tmp_path / "missing.npy"))


@needs_numpy
def test_read_npy_rejects_numpy_fortran_order(tmp_path: Path) -> None:
    p = str(tmp_path / "f.npy")
    np.save(p, np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
    with pytest.raises(PlanError, match="only C-order"):
        read_npy(p)


@pytest.mark.parametrize("header", [
    "{'descr': ['<f4'], 'fortran_order': False, 'shape': (2,), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': ('a',), }",
    "{'descr': '<f4', 'fortran_order': False, 'shape': 2, }",
], ids=["list-descr", "string-dim", "int-shape"])
def test_regression_read_npy_odd_header_types(tmp_path: Path, header: str) -> None:
    with pytest.raises(PlanError):
        read_npy(_raw_npy(tmp_path / "a.npy", header, b"\0" * 8))


# --- the command line ---------------------------------------------------------------------------


def _cli(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run([sys.executable, "-m", "svod_min", *args], capture_output=True, text=True, timeout=300,
                          env=env, cwd=str(cwd) if cwd else None)


def _one_line_error(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    return lines[0]


SAXPY = str(REPO / "examples" / "saxpy_vars.json")


@needs_cc
def test_cli_default_run() -> None:
    result = _cli("run")
    assert result.returncode == 0, result.stderr
    assert "verify y: ok" in result.stdout


@needs_cc
def test_cli_var_changes_the_run_so_verification_fails() -> None:
    result = _cli("run", SAXPY, "--var", "n=300")
    assert result.returncode == 1, result.stderr
    assert "verification failed: y" in result.stderr
    assert "verify y: FAILED" in result.stdout


@needs_cc
@pytest.mark.parametrize("value, message", [
    ("n=3000", "error: --var n: variable n=3000 is outside bounds [1, 1000]"),
    ("n=abc", "error: --var 'n=abc': 'abc' is not an integer"),
    ("zz=1", "error: --var zz: unknown variable (plan variables: ['n'])"),
])
def test_cli_bad_var_exit_2(value: str, message: str) -> None:
    result = _cli("run", SAXPY, "--var", value)
    assert result.returncode == 2
    assert _one_line_error(result) == message
    assert result.stdout == ""


@needs_cc
def test_cli_malformed_plan_exit_2_with_json_path(tmp_path: Path) -> None:
    doc = base()
    doc["ops"][0]["buffers"][1] = "h2"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    result = _cli("run", str(path))
    assert result.returncode == 2
    assert _one_line_error(result) == "error: ops[0].buffers[1]: unknown buffer 'h2'"
    assert result.stdout == ""


def test_cli_missing_file_exit_2(tmp_path: Path) -> None:
    result = _cli("run", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert "cannot read plan file" in _one_line_error(result)


def test_cli_huge_file_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with open(path, "wb") as fh:
        fh.truncate(100 * 1024 * 1024)
    result = _cli("run", str(path))
    assert result.returncode == 2
    assert "the limit is %d" % plan_schema.MAX_PLAN_BYTES in _one_line_error(result)


def test_cli_unsupported_device_exit_3() -> None:
    result = _cli("run", "--device", "CUDA")
    assert result.returncode == 3
    assert "not supported" in _one_line_error(result)


def test_cli_invalid_device_spec_exit_2() -> None:
    result = _cli("run", "--device", "CUDA:x")
    assert result.returncode == 2
    assert "invalid device 'CUDA:x'" in _one_line_error(result)


@needs_cc
def test_cli_compile_error_exit_3(tmp_path: Path) -> None:
    doc = base()
    doc["kernels"]["bump"]["source"] = "void bump(int* c, float* y, const float* x, int n) { this is not C; }"
    path = tmp_path / "bad_c.json"
    path.write_text(json.dumps(doc))
    result = _cli("run", str(path))
    assert result.returncode == 3
    assert "error" in _one_line_error(result)


@needs_cc
def test_cli_json_output(tmp_path: Path) -> None:
    result = _cli("run", SAXPY, "--json", "--repeat", "3")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"plan", "verify", "time_s", "profile"} <= set(report)
    assert report["plan"] == SAXPY
    assert report["verify"] == [{"buffer": "y", "ok": True, "max_abs_error": 0.0}]
    assert report["time_s"]["runs"] == 3
    assert [p["name"] for p in report["profile"]] == ["saxpy"]


@needs_cc
def test_cli_trace_is_a_chrome_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    result = _cli("run", "--trace", str(trace))
    assert result.returncode == 0, result.stderr
    data = json.loads(trace.read_text())
    events = data["traceEvents"]
    spans = [e for e in events if e.get("ph") == "X"]
    assert [e["name"].rsplit("_", 1)[0] if "matmul" in e["name"] else e["name"] for e in spans] == ["svod_matmul_f32", "svod_add_relu_f32", "svod_matmul_f32", "svod_add_relu_f32", "svod_softmax_f32"]
    for e in spans:
        assert {"ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0


@needs_cc
def test_cli_save_writes_the_output_as_npy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _cli("run", SAXPY, "--save", str(out))
    assert result.returncode == 0, result.stderr
    assert "saved %s" % (out / "y.npy") in result.stdout
    dt, shape, payload = read_npy(str(out / "y.npy"))
    assert dt is float32 and shape == (1000,)
    assert list(struct.unpack("<1000f", payload)) == [2.0 * i + 1.0 for i in range(1000)]
    # the saved output is a valid expectation for the same plan
    doc = json.loads(Path(SAXPY).read_text())
    doc["expect"]["y"] = {"npy": str(out / "y.npy"), "rtol": 0, "atol": 0}
    loaded = load_plan(doc, base_dir=str(Path(SAXPY).parent))  # its CUDA form names saxpy.ptx
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify())


def test_cli_repeat_0_exit_2() -> None:
    result = _cli("run", "--repeat", "0")
    assert result.returncode == 2
    assert _one_line_error(result) == "error: --repeat must be >= 1, got 0"


def test_cli_debug_shows_a_traceback(tmp_path: Path) -> None:
    result = _cli("--debug", "run", str(tmp_path / "nope.json"))
    assert result.returncode == 2
    assert "Traceback (most recent call last)" in result.stderr
    assert "PlanFileError" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: cannot read plan file")


def test_regression_cli_non_svod_error_is_one_line_exit_2(tmp_path: Path) -> None:
    doc = {"svod_plan": 1, "buffers": {"x": {"shape": [1], "output": True, "init": {"random": {"low": "abc"}}}},
           "ops": [{"custom": "allreduce", "buffers": ["x"]}]}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    result = _cli("run", str(path))
    assert result.returncode == 2
    assert "buffers.x.init.random.low" in _one_line_error(result)


# --- regressions: plan-file inputs an adversarial review found (2026-11-24) ------------------------


def _plan_path(tmp_path: Path, doc: Dict[str, Any]) -> str:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_regression_duplicate_json_keys_are_refused(tmp_path: Path) -> None:
    # json keeps the last of two keys: a second, empty "expect" silently dropped the first
    text = json.dumps(base()).replace('"expect": {', '"expect": {}, "expect": {', 1)
    path = tmp_path / "p.json"
    path.write_text(text)
    assert json.loads(text)["expect"] == base()["expect"]  # the control: the first one is the real one
    with pytest.raises(PlanFileError) as info:
        read_plan_document(str(path))
    assert str(info.value) == "plan file %s repeats the key 'expect' in one object" % path


def test_regression_extent_key_that_is_a_unicode_digit(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"]["extents"] = {"\u00b2": "n"}  # str.isdigit() is True, int() raises
    rejected(spy, doc, PlanFileError, "kernels.bump.extents.\u00b2: extent keys are argument positions 0..2")


@needs_cc
def test_regression_flops_that_divides_by_zero_is_refused_at_load(spy: Spy) -> None:
    doc = base()
    doc["kernels"]["bump"]["flops"] = "n//0"  # the names are right; the value is not
    rejected(spy, doc, PlanFileError, "ops[0]: expression 'n//0' divides by zero")


def test_regression_grid_expression_nesting_does_not_blow_up() -> None:
    # ceildiv(a,b) used to be rewritten with b copied twice: 25 levels took 600 MB, 30 would take GBs
    grid = "n"
    for _ in range(40):
        grid = "ceildiv(1,%s)" % grid
    doc = {
        "svod_plan": 1,
        "buffers": {"y": {"shape": [4], "output": True}},
        "kernels": {"k": {"source": "void k(float* y, int n) {}", "buffers": 1, "vars": ["n"],
                          "cuda": {"ptx": ".version 7.0", "grid": [grid, 1, 1], "block": [1, 1, 1]}}},
        "ops": [{"kernel": "k", "buffers": ["y"], "vars": {"n": 4}}],
    }  # fmt: skip
    loaded = load_plan(copy.deepcopy(doc))  # 2**40 copies of "n" before; now ceildiv is in the language
    loaded.plan.execute()
    assert compile_expr(grid)({"n": 4}) == 1
    doc["kernels"]["k"]["cuda"]["grid"][0] = "ceildiv(n,2))"
    with pytest.raises(PlanFileError) as info:
        load_plan(doc)
    assert str(info.value).startswith("kernels.k.cuda.grid[0]: expression 'ceildiv(n,2))' is not valid")


def test_regression_int64_expectations_compare_exactly() -> None:
    big = 2**53
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"dtype": "int64", "shape": [2], "init": {"values": [big, big + 4]}},
                    "y": {"dtype": "int64", "shape": [2], "output": True}},
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
        "expect": {"y": {"values": [big + 1, big + 3], "rtol": 0, "atol": 0}},  # both off by one
    }  # fmt: skip
    loaded = load_plan(doc)
    loaded.plan.execute()
    assert loaded.verify() == [("y", False, 1.0)]  # float() made big and big + 1 equal
    doc["expect"]["y"]["values"] = [big, big + 4]
    loaded = load_plan(doc)
    loaded.plan.execute()
    assert loaded.verify() == [("y", True, 0.0)]


@needs_cc
def test_regression_cli_json_is_strict_json_when_an_output_is_nan(tmp_path: Path) -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {"y": {"shape": [2], "output": True}},
        "kernels": {"k": {"source": "void k(float* y) { y[0] = 0.0f / 0.0f; y[1] = 0; }", "buffers": 1}},
        "ops": [{"kernel": "k", "buffers": ["y"]}],
        "expect": {"y": {"values": [0, 0]}},
    }
    result = _cli("run", _plan_path(tmp_path, doc), "--json")
    assert result.returncode == 1, result.stderr

    def refuse(constant: str) -> None:
        raise ValueError("not JSON: %s" % constant)

    report = json.loads(result.stdout, parse_constant=refuse)
    assert report["verify"] == [{"buffer": "y", "ok": False, "max_abs_error": None}]


def test_regression_cli_save_refuses_an_output_name_that_leaves_the_folder(tmp_path: Path) -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"shape": [4], "init": "ones"}, "../escaped": {"shape": [4], "output": True}},
        "ops": [{"copy": {"dst": "../escaped", "src": "x"}}],
    }
    out = tmp_path / "out" / "inner"
    result = _cli("run", _plan_path(tmp_path, doc), "--save", str(out))
    assert result.returncode == 2
    assert _one_line_error(result) == "error: --save: output buffer '../escaped' is not a plain file name"
    assert not (tmp_path / "out" / "escaped.npy").exists()


def test_regression_cli_save_writes_bfloat16_as_uint16_bits(tmp_path: Path) -> None:
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"dtype": "bfloat16", "shape": [3], "init": {"values": [1.0, -2.0, 0.5]}},
                    "y": {"dtype": "bfloat16", "shape": [3], "output": True}},
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
    }  # fmt: skip
    out = tmp_path / "out"
    result = _cli("run", _plan_path(tmp_path, doc), "--save", str(out))
    assert result.returncode == 0, result.stderr
    dt, shape, payload = read_npy(str(out / "y.npy"))
    assert (dt.name, shape) == ("uint16", (3,))
    assert list(struct.unpack("<3H", payload)) == [0x3F80, 0xC000, 0x3F00]


@pytest.mark.parametrize("init, dtype, expect", [
    ("arange", "int32", lambda n: list(range(n))),
    ("ones", "float32", lambda n: [1.0] * n),
])  # fmt: skip
def test_regression_large_inits_are_packed_in_chunks_with_the_same_values(init: str, dtype: str, expect: Any) -> None:
    count = plan_data.INIT_CHUNK * 2 + 5  # crosses two chunk borders
    doc = {"svod_plan": 1, "buffers": {"x": {"dtype": dtype, "shape": [count], "init": init, "output": True}},
           "ops": [{"custom": "allreduce", "buffers": ["x"]}]}  # fmt: skip
    loaded = load_plan(doc)
    assert loaded.buffers["x"].tolist() == expect(count)


def test_regression_random_init_is_the_same_stream_across_chunks() -> None:
    import random

    count = plan_data.INIT_CHUNK + 3
    doc = {"svod_plan": 1, "ops": [{"custom": "allreduce", "buffers": ["x"]}],
           "buffers": {"x": {"dtype": "float64", "shape": [count], "init": {"random": {"seed": 7}}, "output": True}}}  # fmt: skip
    rng = random.Random(7)
    assert load_plan(doc).buffers["x"].tolist() == [rng.uniform(-1.0, 1.0) for _ in range(count)]


def test_regression_out_of_memory_while_initialising_is_an_allocation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from svod_min.error import BufferAllocationError

    def no_memory(*_args: Any) -> bytes:
        raise MemoryError()

    monkeypatch.setattr(plan_data, "pack_values", no_memory)
    doc = {"svod_plan": 1, "buffers": {"x": {"shape": [8], "init": "arange", "output": True}},
           "ops": [{"custom": "allreduce", "buffers": ["x"]}]}  # fmt: skip
    with pytest.raises(BufferAllocationError, match=r"^buffers\.x: not enough host memory for 32 bytes$"):
        load_plan(doc)


@pytest.mark.parametrize("header, message", [
    ("{[1]: 2}", "malformed .npy header (TypeError: unhashable type: 'list')"),
    ("['descr']", "malformed .npy header (not a dict)"),
    ("-" * 200 + "1", "malformed .npy header"),
])  # fmt: skip
def test_regression_read_npy_header_errors_are_plan_errors(tmp_path: Path, header: str, message: str) -> None:
    p = _raw_npy(tmp_path / "a.npy", header, b"\0" * 8)
    with pytest.raises(PlanError) as info:
        read_npy(p)
    assert str(info.value).startswith("%s: %s" % (p, message)), str(info.value)


def test_regression_read_npy_refuses_a_huge_header_before_reading_it(tmp_path: Path) -> None:
    p = tmp_path / "a.npy"
    p.write_bytes(b"\x93NUMPY\x02\x00" + struct.pack("<I", 1 << 30) + b"{")
    with pytest.raises(PlanError, match=r"\.npy header of 1073741824 bytes is over the 65536-byte limit"):
        read_npy(str(p))


@pytest.mark.parametrize("mutate, message", [
    (_set("svod_plan", value=True), "svod_plan: unsupported version True (this svod_min reads 1)"),
    (_set("svod_plan", value=1.0), "svod_plan: unsupported version 1.0 (this svod_min reads 1)"),
    (_set("buffers", "x", "offset", value=4), "buffers.x.offset: an offset needs view_of (it places a view in its base)"),
    (_set("description", value=["a"]), "description: expected a non-empty string, got a list"),
])  # fmt: skip
def test_regression_schema_types_are_exact(spy: Spy, mutate: Any, message: str) -> None:
    doc = base()
    mutate(doc)
    rejected(spy, doc, PlanFileError, message)


def test_plan_file_module_keeps_every_name_it_had() -> None:
    """The split moved the schema checks, data and kernel readers out; ``svod_min.plan_file.X`` still works."""
    import svod_min.plan_file as plan_file

    assert plan_file.read_plan_document is plan_schema.read_plan_document
    assert plan_file.MAX_PLAN_BYTES == plan_schema.MAX_PLAN_BYTES and plan_file.FORMAT_VERSION == plan_schema.FORMAT_VERSION
    assert plan_file.Expectation is plan_data.Expectation and plan_file.MAX_BUFFER_BYTES == plan_data.MAX_BUFFER_BYTES
    assert plan_file.PlanFileError is PlanFileError
    assert {"load_plan", "LoadedPlan", "read_plan_document", "PlanFileError"} <= set(plan_file.__all__)
