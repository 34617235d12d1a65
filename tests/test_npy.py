"""The ``.npy`` reader and writer (svod_min.npy): formats accepted, headers refused."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from support.plan_file import needs_numpy, np

from svod_min.dtypes import float32, int32, pack_values
from svod_min.error import PlanError
from svod_min.npy import parse_npy, read_npy, write_npy


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


@pytest.mark.parametrize(
    "header, payload, message",
    [
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,", b"\0" * 8, "malformed .npy header"),
        (
            "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }",
            b"\0" * 8,
            "only C-order .npy arrays are supported",
        ),
        ("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16, "unsupported .npy dtype '<c8'"),
        ("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 8, "unsupported .npy dtype '>f4'"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 7, "expected 8 bytes of data, found 7"),
        ("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 9, "expected 8 bytes of data, found 9"),
    ],
    ids=["corrupt-header", "fortran-order", "complex-dtype", "big-endian", "truncated", "trailing-bytes"],
)
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


@pytest.mark.parametrize(
    "header",
    [
        "{'descr': ['<f4'], 'fortran_order': False, 'shape': (2,), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': ('a',), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': 2, }",
    ],
    ids=["list-descr", "string-dim", "int-shape"],
)
def test_regression_read_npy_odd_header_types(tmp_path: Path, header: str) -> None:
    with pytest.raises(PlanError):
        read_npy(_raw_npy(tmp_path / "a.npy", header, b"\0" * 8))


@pytest.mark.parametrize(
    "header, message",
    [
        ("{[1]: 2}", "malformed .npy header (TypeError: unhashable type: 'list')"),
        ("['descr']", "malformed .npy header (not a dict)"),
        ("-" * 200 + "1", "malformed .npy header"),
    ],
)
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


def test_parse_npy_views_the_payload_in_place(tmp_path: Path) -> None:
    """A bundle entry's weights are not copied by the parse: held once while they fill their buffer."""
    path = tmp_path / "w.npy"
    write_npy(str(path), float32, (2, 3), pack_values(float32, [0.5 * i for i in range(6)]))
    data = path.read_bytes()
    dt, shape, payload = parse_npy(data, "w.npy")
    assert (dt, shape) == (float32, (2, 3))
    assert isinstance(payload, memoryview) and payload.obj is data
    assert list(struct.unpack("=6f", payload)) == [0.5 * i for i in range(6)]
    with pytest.raises(PlanError, match="expected 24 bytes of data, found 20"):
        parse_npy(data[:-4], "w.npy")
