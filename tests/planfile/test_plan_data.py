"""Plan-file data (svod_min.planfile.data): buffer init forms, ``.npy`` inputs, expectations, their errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

import pytest
from conftest import needs_cc
from support.plan_file import Spy, base, needs_numpy, np, rejected, set_key

import svod_min.planfile.data as plan_data
from svod_min.dtypes import float32, int32, pack_values
from svod_min.error import PlanError
from svod_min.npy import read_npy, write_npy
from svod_min.planfile.load import PlanFileError, load_plan


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    return Spy(monkeypatch)


@needs_cc
@pytest.mark.parametrize(
    "mutate, message",
    [
        (set_key("buffers", "x", "init", value={"random": {"low": "abc"}}), "buffers.x.init.random.low: "),
        (set_key("expect", "y", "rtol", value="abc"), "expect.y.rtol: "),
        (set_key("buffers", "x", "output", value="no"), "buffers.x.output: "),
    ],
    ids=["random_low_not_a_number", "expect_rtol_not_a_number", "output_flag_must_be_boolean"],
)
def test_regression_data_of_the_wrong_type_names_its_path(spy: Spy, mutate: Any, message: str) -> None:
    doc = base()
    mutate(doc)
    rejected(spy, doc, PlanFileError, message)


@needs_cc
def test_regression_npy_errors_name_the_json_path(spy: Spy, tmp_path: Path) -> None:
    (tmp_path / "x.npy").write_bytes(b"not an npy file at all")
    doc = base()
    doc["buffers"]["x"]["init"] = {"npy": "x.npy"}
    rejected(spy, doc, PlanError, "buffers.x.init.npy: ", base_dir=str(tmp_path))


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


@needs_cc
def test_npy_dtype_and_count_must_match(spy: Spy, tmp_path: Path) -> None:
    write_npy(str(tmp_path / "i.npy"), int32, (4,), pack_values(int32, [1, 2, 3, 4]))
    write_npy(str(tmp_path / "f3.npy"), float32, (3,), pack_values(float32, [1, 2, 3]))
    doc = base()
    doc["buffers"]["x"]["init"] = {"npy": "i.npy"}
    rejected(
        spy, doc, PlanFileError, "buffers.x.init.npy: i.npy holds int32, the buffer is float32", base_dir=str(tmp_path)
    )
    doc["buffers"]["x"]["init"] = {"npy": "f3.npy"}
    rejected(
        spy, doc, PlanFileError, "buffers.x.init.npy: f3.npy has shape [3], the buffer [4]", base_dir=str(tmp_path)
    )
    doc = base()
    doc["expect"]["y"] = {"npy": "f3.npy"}
    rejected(spy, doc, PlanFileError, "expect.y: 3 expected values for a buffer of 4 elements", base_dir=str(tmp_path))


def test_regression_int64_expectations_compare_exactly() -> None:
    big = 2**53
    doc = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "int64", "shape": [2], "init": {"values": [big, big + 4]}},
            "y": {"dtype": "int64", "shape": [2], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
        "expect": {"y": {"values": [big + 1, big + 3], "rtol": 0, "atol": 0}},  # both off by one
    }
    loaded = load_plan(doc)
    loaded.plan.execute()
    assert loaded.verify() == [("y", False, 1.0)]  # float() made big and big + 1 equal
    doc["expect"]["y"]["values"] = [big, big + 4]
    loaded = load_plan(doc)
    loaded.plan.execute()
    assert loaded.verify() == [("y", True, 0.0)]


@pytest.mark.parametrize(
    "init, dtype, expect",
    [
        ("arange", "int32", lambda n: list(range(n))),
        ("ones", "float32", lambda n: [1.0] * n),
    ],
)
def test_regression_large_inits_are_packed_in_chunks_with_the_same_values(init: str, dtype: str, expect: Any) -> None:
    count = plan_data.INIT_CHUNK * 2 + 5  # crosses two chunk borders
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"dtype": dtype, "shape": [count], "init": init, "output": True}},
        "ops": [{"custom": "allreduce", "buffers": ["x"]}],
    }
    loaded = load_plan(doc)
    assert loaded.buffers["x"].tolist() == expect(count)


def test_regression_random_init_is_the_same_stream_across_chunks() -> None:
    import random

    count = plan_data.INIT_CHUNK + 3
    doc = {
        "svod_plan": 1,
        "ops": [{"custom": "allreduce", "buffers": ["x"]}],
        "buffers": {"x": {"dtype": "float64", "shape": [count], "init": {"random": {"seed": 7}}, "output": True}},
    }
    rng = random.Random(7)
    assert load_plan(doc).buffers["x"].tolist() == [rng.uniform(-1.0, 1.0) for _ in range(count)]


def test_regression_out_of_memory_while_initialising_is_an_allocation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from svod_min.error import BufferAllocationError

    def no_memory(*_args: Any) -> bytes:
        raise MemoryError()

    monkeypatch.setattr(plan_data, "pack_values", no_memory)
    doc = {
        "svod_plan": 1,
        "buffers": {"x": {"shape": [8], "init": "arange", "output": True}},
        "ops": [{"custom": "allreduce", "buffers": ["x"]}],
    }
    with pytest.raises(BufferAllocationError, match=r"^buffers\.x: not enough host memory for 32 bytes$"):
        load_plan(doc)
