"""Plan files: round trips, malformed plans (exact message + JSON path, nothing dispatched), ops and variables.

"Nothing dispatched" is checked with a spy device (tests/support/plan_file.py): every program it
loads counts its dispatches, copies and custom ops are counted too, and the base plan's kernel
increments a counter buffer in C, which must still read zero after a rejected load. The positive
control (:func:`test_spy_sees_a_dispatch`) shows the spy would notice a kernel that ran.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Callable, Dict

import pytest
from conftest import needs_cc
from support.plan_file import REPO, Spy, base, rejected, set_key

import svod_min.planfile.data as plan_data
import svod_min.planfile.schema as plan_schema
from svod_min.error import PlanError, SvodError
from svod_min.planfile.default_plan import default_plan_document, plan_document
from svod_min.planfile.load import PlanFileError, load_plan, read_plan_document


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    return Spy(monkeypatch)


EXAMPLES = sorted((REPO / "examples").glob("*.json"))


def _outputs(loaded: Any) -> Dict[str, bytes]:
    outs = {id(b) for b in loaded.plan.output_buffers()}
    return {n: b.copyout() for n, b in loaded.buffers.items() if id(b) in outs}


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
    ("wrong-version", set_key("svod_plan", value=2), "svod_plan", "unsupported version 2 (this svod_min reads 1)"),
    (
        "version-as-string",
        set_key("svod_plan", value="1"),
        "svod_plan",
        "unsupported version '1' (this svod_min reads 1)",
    ),
    (
        "unknown-top-level-key",
        set_key("bogus", value=1),
        "$",
        "unknown key(s) ['bogus'] (allowed: ['buffers', 'checks', 'description'",
    ),
    ("vars-min-gt-max", set_key("vars", "n", value={"min": 5, "max": 1, "default": 1}), "vars.n", "min 5 > max 1"),
    (
        "vars-default-outside",
        set_key("vars", "n", value={"min": 1, "max": 4, "default": 9}),
        "vars.n",
        "default 9 is outside [1, 4]",
    ),
    ("vars-list-wrong-length", set_key("vars", "n", value=[1, 4]), "vars.n", "expected [min, max, default]"),
    (
        "vars-not-int32",
        set_key("vars", "n", value={"min": 1, "max": 1 << 31}),
        "vars.n.max",
        "must be <= 2147483647, got 2147483648",
    ),
    (
        "vars-core_id-reserved",
        set_key("vars", "core_id", value=[0, 1, 0]),
        "vars.core_id",
        "variable names are identifiers (core_id is reserved)",
    ),
    ("buffers-missing", _delete("buffers"), "buffers", "missing (a plan file needs buffers)"),
    ("buffers-empty", set_key("buffers", value={}), "buffers", "a plan needs at least one buffer"),
    ("negative-dim", set_key("buffers", "x", "shape", value=[-1]), "buffers.x.shape[0]", "must be >= 0, got -1"),
    ("shape-not-list", set_key("buffers", "x", "shape", value=4), "buffers.x.shape", "expected a list, got int"),
    ("unknown-dtype", set_key("buffers", "x", "dtype", value="float33"), "buffers.x.dtype", "unknown dtype 'float33'"),
    (
        "huge-buffer",
        set_key("buffers", "x", "shape", value=[1 << 32, 8]),
        "buffers.x.shape",
        "buffer of 137438953472 bytes exceeds the 17179869184-byte limit",
    ),
    ("buffer-unknown-key", set_key("buffers", "x", "dtyp", value="float32"), "buffers.x", "unknown key(s) ['dtyp']"),
    (
        "init-values-count",
        set_key("buffers", "x", "init", value={"values": [1, 2, 3]}),
        "buffers.x.init.values",
        "3 values for a buffer of 4 elements",
    ),
    (
        "init-values-not-number",
        set_key("buffers", "x", "init", value={"values": [1, "a", 3, 4]}),
        "buffers.x.init.values[1]",
        "expected a number, got string 'a'",
    ),
    (
        "init-values-bool",
        set_key("buffers", "x", "init", value={"values": [[1, 2], [True, 4]]}),
        "buffers.x.init.values[1][0]",
        "expected a number, got a boolean",
    ),
    (
        "unknown-init-kind",
        set_key("buffers", "x", "init", value={"bogus": 1}),
        "buffers.x.init",
        "unknown init 'bogus' (zeros, ones, arange, random, values, npy)",
    ),
    (
        "init-two-kinds",
        set_key("buffers", "x", "init", value={"values": [1, 2, 3, 4], "npy": "x.npy"}),
        "buffers.x.init",
        "expected one of zeros, ones, arange, {random}, {values}, {npy}",
    ),
    (
        "random-unknown-key",
        set_key("buffers", "x", "init", value={"random": {"sead": 1}}),
        "buffers.x.init.random",
        "unknown key(s) ['sead']",
    ),
    (
        "npy-file-missing",
        set_key("buffers", "x", "init", value={"npy": "nope.npy"}),
        "buffers.x.init.npy",
        "file 'nope.npy' not found",
    ),
    (
        "view-outside-base",
        _add_buffer("v", {"shape": [4], "view_of": "x", "offset": 8}),
        "buffers.v",
        "view [8, +16) is outside 'x' (16 bytes)",
    ),
    (
        "view-of-unknown",
        _add_buffer("v", {"shape": [1], "view_of": "zz"}),
        "buffers.v.view_of",
        "unknown buffer 'zz' (views must come after their base)",
    ),
    (
        "view-with-init",
        _add_buffer("v", {"shape": [1], "view_of": "x", "init": "ones"}),
        "buffers.v.init",
        "views share their base's data and take no init",
    ),
    (
        "view-negative-offset",
        _add_buffer("v", {"shape": [1], "view_of": "x", "offset": -4}),
        "buffers.v.offset",
        "must be >= 0, got -4",
    ),
    (
        "kernel-two-forms",
        set_key("kernels", "bump", "file", value="bump.c"),
        "kernels.bump",
        "give exactly one of source, file, llvm_ir, ir_file, library (got ['source', 'file'])",
    ),
    (
        "kernel-no-form",
        _delete("kernels", "bump", "source"),
        "kernels.bump",
        "give exactly one of source, file, llvm_ir, ir_file, library (got none)",
    ),
    ("kernel-unknown-key", set_key("kernels", "bump", "sauce", value="x"), "kernels.bump", "unknown key(s) ['sauce']"),
    (
        "kernel-buffers-missing",
        _delete("kernels", "bump", "buffers"),
        "kernels.bump.buffers",
        "expected an integer, got null",
    ),
    (
        "kernel-output-out-of-range",
        set_key("kernels", "bump", "outputs", value=[3]),
        "kernels.bump.outputs[0]",
        "must be <= 2, got 3",
    ),
    (
        "kernel-file-missing",
        _both(_delete("kernels", "bump", "source"), set_key("kernels", "bump", "file", value="nope.c")),
        "kernels.bump.file",
        "file 'nope.c' not found",
    ),
    (
        "global-size-pow",
        set_key("kernels", "bump", "global_size", value=["n ** 2", 1, 1]),
        "kernels.bump.global_size[0]",
        "expression 'n ** 2': operator Pow is not allowed",
    ),
    (
        "global-size-import",
        set_key("kernels", "bump", "global_size", value=["__import__('os')", 1, 1]),
        "kernels.bump.global_size[0]",
        "expression \"__import__('os')\": call to __import__() is not allowed",
    ),
    (
        "global-size-syntax",
        set_key("kernels", "bump", "global_size", value=[1, "n +", 1]),
        "kernels.bump.global_size[1]",
        "expression 'n +' is not valid",
    ),
    (
        "global-size-length",
        set_key("kernels", "bump", "global_size", value=[1, 1]),
        "kernels.bump.global_size",
        "expected 3 entries, got 2",
    ),
    (
        "extents-bad-key",
        set_key("kernels", "bump", "extents", value={"7": "n"}),
        "kernels.bump.extents.7",
        "extent keys are argument positions 0..2",
    ),
    (
        "extents-bad-expr",
        set_key("kernels", "bump", "extents", value={"1": "n.real"}),
        "kernels.bump.extents.1",
        "expression 'n.real': Attribute is not allowed",
    ),
    ("ops-missing", _delete("ops"), "ops", "missing (a plan file needs ops)"),
    ("ops-empty", set_key("ops", value=[]), "ops", "a plan needs at least one op"),
    ("op-not-object", set_key("ops", value=["bump"]), "ops[0]", "expected an object, got string 'bump'"),
    (
        "unknown-kernel",
        set_key("ops", 0, "kernel", value="nope"),
        "ops[0].kernel",
        "unknown kernel 'nope' (declared: ['bump'])",
    ),
    (
        "wrong-buffer-count",
        set_key("ops", 0, "buffers", value=["count", "y"]),
        "ops[0].buffers",
        "kernel bump takes 3 buffers, got 2",
    ),
    (
        "unknown-buffer",
        set_key("ops", 0, "buffers", value=["count", "h2", "x"]),
        "ops[0].buffers[1]",
        "unknown buffer 'h2'",
    ),
    (
        "op-two-kinds",
        set_key("ops", 0, "copy", value={"dst": "y", "src": "x"}),
        "ops[0]",
        "an op has exactly one of kernel, copy, view, custom (got ['kernel', 'copy'])",
    ),
    (
        "op-no-kind",
        set_key("ops", value=[{"buffers": ["y"]}]),
        "ops[0]",
        "an op has exactly one of kernel, copy, view, custom (got none)",
    ),
    ("kernel-op-unknown-key", set_key("ops", 0, "bufers", value=[]), "ops[0]", "unknown key(s) ['bufers']"),
    (
        "var-bound-to-non-plan-var",
        set_key("ops", 0, "vars", value={"n": "m"}),
        "ops[0].vars.n",
        "expression 'm' uses ['m'], not plan variables ['n']",
    ),
    (
        "kernel-var-without-plan-var",
        _delete("vars"),
        "ops[0].vars.n",
        "bind kernel variable 'n' to an integer, a plan variable "
        "or an expression over plan variables (plan variables: [])",
    ),
    (
        "var-expression-syntax",
        set_key("ops", 0, "vars", value={"n": "n ** 2"}),
        "ops[0].vars.n",
        "expression 'n ** 2': operator Pow is not allowed",
    ),
    (
        "unknown-kernel-var",
        set_key("ops", 0, "vars", value={"zz": 1}),
        "ops[0].vars",
        "kernel bump has no variable(s) ['zz'] (it takes ['n'])",
    ),
    (
        "op-global-size-pow",
        set_key("ops", 0, "global_size", value=["n ** 2", 1, 1]),
        "ops[0].global_size[0]",
        "expression 'n ** 2': operator Pow is not allowed",
    ),
    ("deps-not-int", set_key("ops", 0, "deps", value=["a"]), "ops[0].deps[0]", "expected an integer, got string 'a'"),
    ("copy-unknown-buffer", _add_op({"copy": {"dst": "y", "src": "zz"}}), "ops[1].copy.src", "unknown buffer 'zz'"),
    ("copy-unknown-key", _add_op({"copy": {"dst": "y", "src": "x", "n": 1}}), "ops[1].copy", "unknown key(s) ['n']"),
    ("view-op-not-a-view", _add_op({"view": "y"}), "ops[1].view", "buffer 'y' is not declared with view_of"),
    (
        "custom-unknown-buffer",
        _add_op({"custom": "allreduce", "buffers": ["y", "zz"]}),
        "ops[1].buffers[1]",
        "unknown buffer 'zz'",
    ),
    (
        "no-output-buffer",
        _both(_delete("buffers", "count", "output"), _delete("buffers", "y", "output")),
        "buffers",
        'no buffer is marked "output": true',
    ),
    ("expect-unknown-buffer", set_key("expect", "zz", value={"values": [1]}), "expect.zz", "unknown buffer 'zz'"),
    (
        "expect-count-mismatch",
        set_key("expect", "y", "values", value=[2, 2, 2]),
        "expect.y",
        "3 expected values for a buffer of 4 elements",
    ),
    ("expect-unknown-key", set_key("expect", "y", "tol", value=1), "expect.y", "unknown key(s) ['tol']"),
    (
        "expect-npy-missing",
        set_key("expect", "y", value={"npy": "nope.npy"}),
        "expect.y.npy",
        "file 'nope.npy' not found",
    ),
]


@needs_cc
@pytest.mark.parametrize(
    "mutate, json_path, message", [c[1:] for c in MALFORMED_WITH_PATH], ids=[c[0] for c in MALFORMED_WITH_PATH]
)
def test_malformed_plan_names_its_json_path(
    spy: Spy, tmp_path: Path, mutate: Any, json_path: str, message: str
) -> None:
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
@pytest.mark.parametrize(
    "values, message",
    [
        ({"zz": 2}, "--var zz: unknown variable (plan variables: ['n'])"),
        ({"n": 9}, "--var n: variable n=9 is outside bounds [1, 4]"),
        ({"n": 0}, "--var n: variable n=0 is outside bounds [1, 4]"),
    ],
)
def test_var_values_are_checked_before_anything_runs(spy: Spy, values: Dict[str, int], message: str) -> None:
    rejected(spy, base(), PlanFileError, message, var_values=values)


@needs_cc
def test_custom_op_of_unregistered_kind(spy: Spy) -> None:
    doc = base()
    doc["ops"].append({"custom": "nope", "buffers": ["y"]})
    rejected(
        spy, doc, PlanFileError, "ops[1].custom: custom function 'nope' is not registered (registered: ["
    )  # others may add kinds


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
    rejected(
        spy, doc, SvodError, "kernel bump argument 1 needs 8 elements (2*n) but buffer 1 holds 4: refusing to dispatch"
    )


@needs_cc
def test_regression_custom_op_unknown_key(spy: Spy) -> None:
    doc = base()
    doc["ops"].append({"custom": "allreduce", "bufers": ["y"]})
    rejected(spy, doc, PlanFileError, "ops[1]: unknown key(s) ['bufers']")


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


def test_plan_file_module_keeps_every_name_it_had() -> None:
    """The split moved the schema checks, data and kernel readers out; ``svod_min.planfile.load.X`` still works."""
    import svod_min.planfile.load as plan_file

    assert plan_file.read_plan_document is plan_schema.read_plan_document
    assert (
        plan_file.MAX_PLAN_BYTES == plan_schema.MAX_PLAN_BYTES
        and plan_file.FORMAT_VERSION == plan_schema.FORMAT_VERSION
    )
    assert plan_file.Expectation is plan_data.Expectation and plan_file.MAX_BUFFER_BYTES == plan_data.MAX_BUFFER_BYTES
    assert plan_file.PlanFileError is PlanFileError
    assert {"load_plan", "LoadedPlan", "read_plan_document", "PlanFileError"} <= set(plan_file.__all__)
