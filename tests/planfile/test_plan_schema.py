"""Plan-file schema (svod_min.planfile.schema): reading the document (size, encoding, JSON, duplicate keys) and exact
value types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.plan_file import BASE, Spy, base, rejected, set_key

import svod_min.planfile.schema as plan_schema
from svod_min.planfile.load import PlanFileError, load_plan, read_plan_document


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Spy:
    return Spy(monkeypatch)


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


def test_regression_duplicate_json_keys_are_refused(tmp_path: Path) -> None:
    # json keeps the last of two keys: a second, empty "expect" silently dropped the first
    text = json.dumps(base()).replace('"expect": {', '"expect": {}, "expect": {', 1)
    path = tmp_path / "p.json"
    path.write_text(text)
    assert json.loads(text)["expect"] == base()["expect"]  # the control: the first one is the real one
    with pytest.raises(PlanFileError) as info:
        read_plan_document(str(path))
    assert str(info.value) == "plan file %s repeats the key 'expect' in one object" % path


@pytest.mark.parametrize(
    "mutate, message",
    [
        (set_key("svod_plan", value=True), "svod_plan: unsupported version True (this svod_min reads 1)"),
        (set_key("svod_plan", value=1.0), "svod_plan: unsupported version 1.0 (this svod_min reads 1)"),
        (
            set_key("buffers", "x", "offset", value=4),
            "buffers.x.offset: an offset needs view_of (it places a view in its base)",
        ),
        (set_key("description", value=["a"]), "description: expected a non-empty string, got a list"),
    ],
)
def test_regression_schema_types_are_exact(spy: Spy, mutate: Any, message: str) -> None:
    doc = base()
    mutate(doc)
    rejected(spy, doc, PlanFileError, message)
