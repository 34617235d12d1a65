"""A bundle's large stored arrays: read straight into their buffers at a load, checked there.

``load_plan`` opens a bundle with its large stored ``.npy`` entries deferred: each is read into the
buffer it fills, from the file, and its sha256 checked there; arrays no buffer reads are checked after
the build. What the eager reader refuses, this path refuses too, by the same messages.
"""

from __future__ import annotations

import json
import struct
import zipfile
from typing import Any, Dict, List

import pytest

from svod_min.error import BundleError, PlanFileError
from svod_min.planfile.bundle import PLAN, STORE_ABOVE, open_bundle, write_bundle
from svod_min.planfile.load import load_plan

COUNT = STORE_ABOVE // 4 + 100  # float32 elements: an array over the threshold, stored


def npy(values: List[float], descr: str = "<f4") -> bytes:
    header = ("{'descr': '%s', 'fortran_order': False, 'shape': (%d,), }" % (descr, len(values))).ljust(117) + "\n"
    fmt = "<%d%s" % (len(values), "f" if descr == "<f4" else "i")
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1") + struct.pack(fmt, *values)


def values() -> List[float]:
    return [((i * 7919) % 1000) / 8.0 - 60.0 for i in range(COUNT)]  # exact in float32, does not deflate


def bundle(path: str, extra: Dict[str, bytes] = None, dtype: str = "float32") -> str:
    plan: Dict[str, Any] = {
        "svod_plan": 1,
        "buffers": {
            "w": {"dtype": dtype, "shape": [COUNT], "init": {"npy": "data/w.npy"}},
            "y": {"dtype": dtype, "shape": [COUNT], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "w"}}],
    }
    files = {PLAN: json.dumps(plan).encode(), "data/w.npy": npy(values())}
    files.update(extra or {})
    write_bundle(path, files, {"svod_min": "test"})
    return path


def flip_in_entry(path: str, name: str, at: int) -> None:
    """Flip one byte ``at`` bytes into a stored entry's data (the zip's CRC is left as it was)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(name)
        assert info.compress_type == zipfile.ZIP_STORED
        local = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    raw = bytearray(open(path, "rb").read())
    raw[local + at] ^= 0x01
    open(path, "wb").write(bytes(raw))


def test_a_large_array_is_deferred_and_read_into_its_buffer(tmp_path: Any) -> None:
    path = bundle(str(tmp_path / "a.svod"))
    opened = open_bundle(path, defer_arrays=True)
    try:
        assert list(opened.deferred) == ["data/w.npy"] and "data/w.npy" not in opened.entries
    finally:
        opened.close()
    assert list(open_bundle(path).entries) == ["data/w.npy", PLAN]  # the eager reader holds it
    loaded = load_plan(path)
    loaded.plan.execute()
    assert loaded.buffers["y"].tolist() == values()


def test_a_changed_byte_in_a_deferred_array_is_refused(tmp_path: Any) -> None:
    path = bundle(str(tmp_path / "c.svod"))
    flip_in_entry(path, "data/w.npy", 128 + 4 * 5000)  # inside the payload, past the first bytes read
    with pytest.raises(BundleError, match="entry 'data/w.npy' does not match its sha256 in the manifest"):
        load_plan(path)
    with pytest.raises(BundleError, match="entry 'data/w.npy' does not match its sha256 in the manifest"):
        open_bundle(path)


def test_a_changed_byte_in_an_array_no_buffer_reads_is_refused(tmp_path: Any) -> None:
    path = bundle(str(tmp_path / "u.svod"), extra={"data/unused.npy": npy(values())})
    flip_in_entry(path, "data/unused.npy", 200)
    with pytest.raises(BundleError, match="entry 'data/unused.npy' does not match its sha256 in the manifest"):
        load_plan(path)


def test_an_array_of_another_dtype_is_refused_by_path(tmp_path: Any) -> None:
    path = bundle(str(tmp_path / "d.svod"), dtype="int32")
    with pytest.raises(PlanFileError, match="buffers.w.init.npy: data/w.npy holds float32, the buffer is int32"):
        load_plan(path)
