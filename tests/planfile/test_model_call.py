"""``load_model(...)(x=array)``: an array of the input's dtype and shape goes in through the buffer's numpy view
(planfile/host_io.py), anything else the general way; both give the same results and refusals, and every call
returns new arrays."""

from __future__ import annotations

from typing import Any, Dict

import pytest
from support.plan_file import needs_numpy, np

from svod_min.error import PlanError
from svod_min.planfile.load import LoadedPlan, load_model

pytestmark = needs_numpy


def _plan() -> Dict[str, Any]:
    """y = x (a copy), z = x's first row (a view of y): outputs of their own and one that is a view."""
    return {
        "svod_plan": 1,
        "device": "CPU",
        "buffers": {
            "x": {"dtype": "float32", "shape": [3, 4], "input": True},
            "y": {"dtype": "float32", "shape": [3, 4], "output": True},
            "z": {"dtype": "float32", "shape": [4], "view_of": "y", "offset": 0, "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
    }


class _Sub(np.ndarray if np is not None else object):  # type: ignore[misc]
    """An ndarray subclass: the general path takes it (the fast path takes exact ndarrays only)."""


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every input goes the general way (set_input) from now on."""
    monkeypatch.setattr("svod_min.planfile.host_io.HostIO.copy_in", lambda self, name, value: False)


def test_the_fast_path_is_taken_for_an_exact_array_and_agrees_with_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    model = load_model(_plan())

    def refuse(*args: Any) -> None:
        raise AssertionError("set_input called for an array of the input's dtype and shape")

    monkeypatch.setattr(LoadedPlan, "set_input", refuse)
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
    out = model(x=x)
    assert out["y"].dtype == np.float32 and out["y"].shape == (3, 4)
    np.testing.assert_array_equal(out["y"], x)
    np.testing.assert_array_equal(out["z"], x[0])


@pytest.mark.parametrize("general", [False, True])
def test_a_strided_input_gives_what_its_contiguous_copy_gives(general: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if general:
        _general(monkeypatch)
    model = load_model(_plan())
    big = np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32)
    for strided in (big[:6:2, 1:5], big[:4, :3].T, np.asfortranarray(big[:3, :4])):
        assert not strided.flags.c_contiguous
        np.testing.assert_array_equal(model(x=strided)["y"], np.ascontiguousarray(strided))


def test_both_paths_give_the_same_outputs(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    fast = load_model(_plan())(x=x)
    sub = load_model(_plan())(x=x.view(_Sub))  # a subclass: the general path
    _general(monkeypatch)
    general = load_model(_plan())(x=x)
    for out in (sub, general):
        assert set(out) == set(fast)
        for name in fast:
            assert out[name].dtype == fast[name].dtype and out[name].shape == fast[name].shape
            np.testing.assert_array_equal(out[name], fast[name])


@pytest.mark.parametrize("general", [False, True])
def test_another_dtype_is_refused_naming_the_input_as_before(general: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if general:
        _general(monkeypatch)
    model = load_model(_plan())
    for value, got in (
        (np.ones((3, 4)), "float64"),
        (np.ones((3, 4), np.int32), "int32"),
        ([[1.0] * 4] * 3, "float64"),
    ):
        with pytest.raises(PlanError, match=r"input 'x': got %s \[3, 4\], the plan's input is float32 \[3, 4\]" % got):
            model(x=value)


@pytest.mark.parametrize("general", [False, True])
def test_a_wrong_shape_is_refused_naming_both_shapes(general: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if general:
        _general(monkeypatch)
    model = load_model(_plan())
    for shape in ((4, 3), (12,), (1, 3, 4)):
        with pytest.raises(
            PlanError,
            match=r"input 'x': got float32 %s, the plan's input is float32 \[3, 4\]"
            % (str(list(shape)).replace("[", r"\[").replace("]", r"\]")),
        ):
            model(x=np.zeros(shape, np.float32))
    with pytest.raises(PlanError, match=r"input 'w': the plan has no such input \(inputs: 'x'\)"):
        model(w=np.zeros((3, 4), np.float32))


def test_returned_arrays_are_new_every_call() -> None:
    model = load_model(_plan())
    a = np.full((3, 4), 1.0, np.float32)
    b = np.full((3, 4), 2.0, np.float32)
    first = model(x=a)
    second = model(x=b)
    np.testing.assert_array_equal(first["y"], a)  # not overwritten by the second call
    np.testing.assert_array_equal(second["y"], b)
    for name in ("y", "z"):
        assert not np.shares_memory(first[name], second[name])
        assert first[name].flags.owndata and first[name].flags.writeable
    first["y"][:] = 7.0  # a caller writing into a result changes neither the plan nor later results
    np.testing.assert_array_equal(model(x=a)["y"], a)
    a[:] = 3.0  # nor does writing into the input after the call
    np.testing.assert_array_equal(second["y"], b)


def test_an_input_not_given_keeps_the_last_one() -> None:
    model = load_model(_plan())
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    model(x=x)
    np.testing.assert_array_equal(model()["y"], x)
