"""Ranged dims (docs/plan-format.md, "Ranged dims"): the schema's refusals with their JSON paths, and a call that
binds the plan variables from the fed arrays' shapes: outputs at the bound shape equal numpy's, every refusal
names what was wrong and leaves the buffers and the plan as they were."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest
from conftest import needs_cc
from support.plan_file import needs_numpy, np
from support.ranged_plan import COLS, ROWS, ranged_plan, reference, rows_of

from svod_min.error import EXIT_BAD_INPUT, PlanError, PlanFileError, VariableBoundsError
from svod_min.planfile.load import LoadedPlan, load_model, load_plan

pytestmark = needs_numpy


def _refused(mutate: Any) -> PlanFileError:
    doc = ranged_plan()
    mutate(doc["buffers"])
    with pytest.raises(PlanFileError) as info:
        load_plan(doc)  # refused while the buffers are read: before any kernel is compiled
    return info.value


@pytest.mark.parametrize(
    "mutate, path, words",
    [
        (lambda b: b.update(t={"dtype": "float32", "shape": [8], "dims": ["batch"]}), "buffers.t.dims", "inputs and"),
        (lambda b: b["x"].update(dims="batch"), "buffers.x.dims", "expected a list"),
        (lambda b: b["x"].update(dims=["batch"]), "buffers.x.dims", "has 1 entries, the buffer's shape [8, 4] has 2"),
        (lambda b: b["x"].update(dims=["batch", 5]), "buffers.x.dims[1]", "5 is not the shape's 4"),
        (lambda b: b["x"].update(dims=[True, 4]), "buffers.x.dims[0]", "got a boolean"),
        (lambda b: b["x"].update(dims=["batch*1", 4]), "buffers.x.dims[0]", "a plan variable's name"),
        (lambda b: b["y"].update(dims=["rows", 4]), "buffers.y.dims[0]", "uses ['rows'], not plan variables"),
        (lambda b: b["y"].update(dims=["batch +", 4]), "buffers.y.dims[0]", "batch +"),
        (lambda b: b["y"].update(dims=["batch - 1", 4]), "buffers.y.dims[0]", "is 7 at the variables' maxima"),
        (lambda b: b["y"].update(dims=["batch // 0", 4]), "buffers.y.dims[0]", "divides by zero"),
    ],
)
def test_the_schema_refuses_bad_dims_naming_the_entry(mutate: Any, path: str, words: str) -> None:
    err = _refused(mutate)
    assert err.json_path == path
    assert str(err).startswith(path + ": ") and words in str(err)
    assert err.exit_code == EXIT_BAD_INPUT


def test_an_output_expression_largest_at_the_maxima_is_accepted() -> None:
    doc = ranged_plan()
    doc["buffers"]["y"].update(shape=[ROWS * COLS], dims=["batch * 4"])
    doc["kernels"] = {}
    doc["ops"] = [{"copy": {"dst": "y", "src": "x"}}]
    loaded = load_plan(doc)
    assert loaded.binding is not None and loaded.binding.spelled("y") == ["batch * 4"]


@pytest.fixture(scope="module")
def model() -> Any:
    return load_model(ranged_plan())  # the tests that take it need a compiler: their marks skip them first


@needs_cc
@pytest.mark.parametrize("n", [1, 5, ROWS])  # the variable's minimum, an odd size, its maximum
def test_the_inputs_bind_the_variable_and_the_outputs_come_at_the_bound_shape(model: Any, n: int) -> None:
    x, z = rows_of(n, seed=n)
    out = model(x=x, z=z)
    assert out["y"].shape == (n, COLS) and out["y"].dtype == np.float32
    np.testing.assert_allclose(out["y"], reference(x, z), rtol=1e-6)
    assert out["seen"].tolist() == [n]  # the kernel ran with batch = n
    assert model.loaded.plan.current_var_values()["batch"] == n


@needs_cc
def test_variables_no_input_binds_keep_their_values(model: Any) -> None:
    x, z = rows_of(3, seed=7)
    model(x=x, z=z)
    again = model()  # nothing fed: batch stays 3, the buffers keep x and z
    np.testing.assert_allclose(again["y"], reference(x, z), rtol=1e-6)
    assert again["seen"].tolist() == [3]
    explicit = model.run({}, {"batch": 2})  # an explicit value with no input to disagree
    np.testing.assert_allclose(explicit["y"], reference(x[:2], z[:2]), rtol=1e-6)


@needs_cc
def test_explicit_values_must_agree_with_the_arrays(model: Any) -> None:
    x, z = rows_of(4, seed=4)
    np.testing.assert_allclose(model.run({"x": x, "z": z}, {"batch": 4})["y"], reference(x, z), rtol=1e-6)
    with pytest.raises(PlanError, match=r"variable batch=5 was given, but input 'x' axis 0 binds batch=4"):
        model.run({"x": x, "z": z}, {"batch": 5})


def _state(model: Any) -> List[Any]:
    return [model.array(n) for n in ("x", "z", "y", "seen")] + [model.loaded.plan.current_var_values()]


@needs_cc
@pytest.mark.parametrize(
    "feed, error, words",
    [
        ({"x": (3, 4), "z": (4,)}, PlanError, "input 'z' axis 0 binds batch=4, but input 'x' axis 0 binds batch=3"),
        ({"x": (9, 4)}, VariableBoundsError, "input 'x' axis 0 binds batch=9, outside its range [1, 8]"),
        ({"x": (0, 4)}, VariableBoundsError, "input 'x' axis 0 binds batch=0, outside its range [1, 8]"),
        (
            {"x": (3, 4, 1)},
            PlanError,
            "input 'x': got rank 3 [3, 4, 1], the plan's input has rank 2 (dims ['batch', 4])",
        ),
        ({"z": (3, 4)}, PlanError, "input 'z': got rank 2 [3, 4], the plan's input has rank 1"),
        ({"x": (3, 5)}, PlanError, "input 'x': axis 1 has 5 elements, the plan's input has 4 there"),
    ],
)
def test_a_refused_feed_copies_and_runs_nothing(model: Any, feed: Dict[str, Any], error: Any, words: str) -> None:
    x, z = rows_of(2, seed=2)
    model(x=x, z=z)
    before = _state(model)
    arrays = {name: np.full(shape, 9.0, np.float32) for name, shape in feed.items()}
    with pytest.raises(error) as info:
        model(**arrays)
    assert str(info.value) == words or words in str(info.value)
    assert info.value.exit_code == EXIT_BAD_INPUT
    after = _state(model)
    for old, new in zip(before[:4], after[:4]):
        np.testing.assert_array_equal(old, new)
    assert after[4] == before[4] and after[3].tolist() == [2]


@needs_cc
def test_one_variable_bound_twice_by_two_axes_of_one_input_is_refused() -> None:
    doc = ranged_plan()
    doc["buffers"]["sq"] = {"dtype": "float32", "shape": [ROWS, ROWS], "dims": ["batch", "batch"], "input": True}
    square = load_model(doc)
    with pytest.raises(PlanError, match=r"input 'sq' axis 1 binds batch=3, but input 'sq' axis 0 binds batch=2"):
        square(sq=np.zeros((2, 3), np.float32))
    assert square(sq=np.zeros((3, 3), np.float32))["seen"].tolist() == [3]


@needs_cc
@pytest.mark.parametrize("n", [1, 6])
def test_the_general_path_binds_as_the_fast_one(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    monkeypatch.setattr("svod_min.planfile.host_io.HostIO.copy_in_prefix", lambda self, name, value: False)
    x, z = rows_of(n, seed=10 + n)
    out = load_model(ranged_plan())(x=x, z=z)  # through LoadedPlan.set_input and a view of the buffer's start
    np.testing.assert_allclose(out["y"], reference(x, z), rtol=1e-6)


@needs_cc
def test_the_fast_paths_take_bound_and_full_feeds_without_set_input(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model(ranged_plan())

    def refuse(*args: Any) -> None:
        raise AssertionError("set_input called for an ndarray of the input's dtype")

    monkeypatch.setattr(LoadedPlan, "set_input", refuse)
    for n in (3, ROWS):
        x, z = rows_of(n, seed=n)
        np.testing.assert_allclose(model(x=x, z=z)["y"], reference(x, z), rtol=1e-6)


@needs_cc
def test_set_input_takes_a_bound_shape_at_the_buffers_start() -> None:
    loaded = load_plan(ranged_plan())
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + 100
    loaded.set_input("x", "float32", (3, 4), x.tobytes())
    whole = np.frombuffer(loaded.buffers["x"].copyout(), np.float32).reshape(ROWS, COLS)
    np.testing.assert_array_equal(whole[:3], x)
    np.testing.assert_array_equal(whole[3:], np.arange(12, 32, dtype=np.float32).reshape(5, 4))  # init kept
    with pytest.raises(VariableBoundsError, match=r"input 'x' axis 0 binds batch=9"):
        loaded.set_input("x", "float32", (9, 4), bytes(9 * 16))
    with pytest.raises(PlanError, match=r"input 'x': got int32 \[3, 4\], the plan's input is float32 \[3, 4\]"):
        loaded.set_input("x", "int32", (3, 4), bytes(48))


def test_a_variable_only_dims_name_is_kept_by_the_binding() -> None:
    """``n`` is no kernel's variable (a copy op): the plan's ops know nothing of it, the binding keeps it."""
    doc = {
        "svod_plan": 1,
        "vars": {"n": [1, 6, 6]},
        "buffers": {
            "x": {"dtype": "int32", "shape": [6], "dims": ["n"], "input": True},
            "y": {"dtype": "int32", "shape": [6], "dims": ["n"], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
    }
    model = load_model(doc)
    assert model(x=np.array([4, 5], np.int32))["y"].tolist() == [4, 5]
    assert model()["y"].tolist() == [4, 5]  # n stays 2
    assert model(x=np.arange(6, dtype=np.int32))["y"].tolist() == list(range(6))
