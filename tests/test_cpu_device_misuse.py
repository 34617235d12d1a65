"""CpuDevice misuse found by an adversarial review (2026-11-24): silent reinterpretation of bytes,
unchecked launch sizes and hand-built buffers past their storage."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import needs_cc

from svod_min.devices.cpu import CpuBuffer, CpuDevice, CpuStorage
from svod_min.dtypes import float32
from svod_min.error import BufferAllocationError, ExecutionError

np = pytest.importorskip("numpy")


@pytest.fixture(scope="module")
def dev() -> CpuDevice:
    return CpuDevice(threads=2)


@pytest.mark.parametrize("dtype, array, message", [
    ("int32", np.array([1, 2], dtype=">i4"), r"array dtype >i4 \(not native byte order\) does not match buffer dtype int32"),
    ("int32", np.array([1.0, 2.0], dtype=np.float32), "array dtype float32 does not match buffer dtype int32"),
    ("bfloat16", np.array([1.0], dtype=np.float16), "array dtype float16 does not match buffer dtype bfloat16"),
    ("int64", np.array([1, 2], dtype=object), "does not match buffer dtype int64"),
])  # fmt: skip
def test_copyin_refuses_arrays_whose_elements_are_other_numbers(dev: CpuDevice, dtype: str, array: Any, message: str) -> None:
    buf = dev.allocate([len(array)], dtype).copyin([7] * len(array))
    with pytest.raises(BufferAllocationError, match=message):
        buf.copyin(array)  # same item size: the bytes used to be copied as they were
    assert buf.tolist() == [7] * len(array)


def test_copyin_still_takes_the_documented_raw_routes(dev: CpuDevice) -> None:
    bf = dev.allocate([2], "bfloat16").copyin(np.array([0x3F80, 0xC000], dtype=np.uint16))  # bfloat16 bits
    assert bf.tolist() == [1.0, -2.0]
    flags = dev.allocate([3], "bool").copyin(np.array([1, 0, 2], dtype=np.uint8))
    assert flags.tolist() == [True, False, True]
    same = dev.allocate([2], "float32").copyin(np.array([1.5, 2.5], dtype=np.float32))
    assert same.tolist() == [1.5, 2.5]
    assert dev.allocate([0, 4], "int32").copyin(memoryview(np.zeros((0, 4), np.int32))).tolist() == []


@pytest.mark.parametrize("values", [["a"], [10**400]])
def test_bfloat16_lists_that_are_not_numbers(dev: CpuDevice, values: Any) -> None:
    with pytest.raises(BufferAllocationError, match="cannot pack values as bfloat16"):
        dev.allocate([1], "bfloat16").copyin(values)


@needs_cc
@pytest.mark.parametrize("global_size", [[0], [-3], [2.9], [True], ["4"], [1, 1, 1, 1]])
def test_execute_refuses_launch_sizes_that_are_not_positive_ints(dev: CpuDevice, global_size: Any) -> None:
    prog = dev.compile("void k(int* o, int core_id) { o[core_id] += 1; }", "k", buf_count=1, var_names=["core_id"])
    out = dev.allocate([4], "int32")
    with pytest.raises(ExecutionError, match="global_size must be 1 to 3 positive ints"):
        prog.execute([out], [0], global_size=global_size, core_id_index=0)
    assert out.tolist() == [0, 0, 0, 0]  # nothing ran
    prog.execute([out], [0], global_size=[np.int64(4), 1, 1], core_id_index=0)
    assert out.tolist() == [1, 1, 1, 1]


def test_a_hand_built_buffer_must_fit_its_storage() -> None:
    storage = CpuStorage(16)
    with pytest.raises(BufferAllocationError, match=r"buffer \[8, \+64\) is outside its storage \(16 bytes\)"):
        CpuBuffer(storage, 8, 64, float32, (16,))
    with pytest.raises(BufferAllocationError, match=r"shape \[3\] of float32 does not span 8 bytes"):
        CpuBuffer(storage, 8, 8, float32, (3,))
    assert CpuBuffer(storage, 8, 8, float32, (2,)).tolist() == [0.0, 0.0]
