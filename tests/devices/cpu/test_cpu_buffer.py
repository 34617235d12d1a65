"""CPU memory (devices/cpu_buffer.py): dtypes, buffers, views, copies in and out, and misuse of them:
silent reinterpretation of bytes and hand-built buffers past their storage."""

from __future__ import annotations

import array
import ctypes
import mmap
import os
import struct
from typing import Any, List

import pytest

from svod_min import dtypes
from svod_min.devices.cpu import buffer as cpu_buffer
from svod_min.devices.cpu.buffer import HUGE_PAGE_MIN
from svod_min.devices.cpu.device import CpuBuffer, CpuDevice, CpuStorage
from svod_min.dtypes import float32
from svod_min.error import EXIT_BAD_INPUT, BufferAllocationError, NotSupportedError, SvodError

try:
    import numpy as np
except ImportError:  # numpy is optional: its tests skip
    np = None

needs_numpy = pytest.mark.skipif(np is None, reason="numpy not installed")


@pytest.fixture
def dev() -> CpuDevice:
    return CpuDevice(threads=4)


# --- dtypes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, itemsize, fmt",
    [
        ("float16", 2, "e"),
        ("bfloat16", 2, "H"),
        ("float32", 4, "f"),
        ("float64", 8, "d"),
        ("int8", 1, "b"),
        ("int16", 2, "h"),
        ("int32", 4, "i"),
        ("int64", 8, "q"),
        ("uint8", 1, "B"),
        ("uint16", 2, "H"),
        ("uint32", 4, "I"),
        ("uint64", 8, "Q"),
        ("bool", 1, "?"),
    ],
)
def test_dtype_table(name: str, itemsize: int, fmt: str) -> None:
    dt = dtypes.dtype(name)
    assert (dt.name, dt.itemsize, dt.fmt) == (name, itemsize, fmt)
    assert ctypes.sizeof(dt.ctype) == itemsize == struct.calcsize("=" + fmt)
    if np is not None and dt.numpy_name is not None:
        assert np.dtype(dt.numpy_name).itemsize == itemsize


@pytest.mark.parametrize(
    "alias, name",
    [
        ("f32", "float32"),
        ("float", "float32"),
        ("F64", "float64"),
        ("double", "float64"),
        ("i32", "int32"),
        ("int", "int32"),
        ("bf16", "bfloat16"),
        ("half", "float16"),
        ("u8", "uint8"),
    ],
)
def test_dtype_aliases(alias: str, name: str) -> None:
    assert dtypes.dtype(alias).name == name
    assert dtypes.dtype(dtypes.dtype(alias)) is dtypes.dtype(name)


def test_dtype_unknown_and_bfloat16_has_no_numpy() -> None:
    with pytest.raises(BufferAllocationError) as info:
        dtypes.dtype("complex64")
    assert "complex64" in str(info.value) and info.value.exit_code == EXIT_BAD_INPUT  # the caller's mistake
    with pytest.raises(BufferAllocationError):
        dtypes.dtype(float)  # Python's float is ambiguous (f32 here, f64 to numpy)
    assert dtypes.bfloat16.numpy_name is None


@needs_numpy
def test_dtype_from_numpy() -> None:
    assert dtypes.dtype(np.float32) is dtypes.float32
    assert dtypes.dtype(np.dtype("int64")) is dtypes.int64
    assert dtypes.dtype(np.bool_) is dtypes.bool_


def test_bfloat16_round_trip_bits() -> None:
    assert dtypes.float_to_bf16_bits(1.0) == 0x3F80
    assert dtypes.bf16_bits_to_float(0xC020) == -2.5
    assert dtypes.bf16_bits_to_float(dtypes.float_to_bf16_bits(3.14159)) == pytest.approx(3.140625)


# --- buffers ---------------------------------------------------------------------


def test_allocate_page_aligned_zeroed(dev: CpuDevice) -> None:
    for size in (1, 4096, 4097, 1 << 20):
        buf = dev.allocate(size)
        assert buf.address % 4096 == 0
        assert buf.nbytes == size and buf.dtype is dtypes.uint8 and len(buf) == size
        assert buf.copyout() == bytes(size)


def test_allocate_by_shape(dev: CpuDevice) -> None:
    buf = dev.allocate((2, 3), dtype="f32")
    assert (buf.shape, buf.nbytes, len(buf), buf.dtype) == ((2, 3), 24, 6, dtypes.float32)
    assert buf.tolist() == [[0.0] * 3] * 2
    assert buf.device is dev and buf.offset == 0


def test_allocate_zero_bytes(dev: CpuDevice) -> None:
    buf = dev.allocate(0)
    assert buf.nbytes == 0 and len(buf) == 0 and buf.copyout() == b"" and buf.tolist() == []
    buf.copyin(b"")
    assert dev.allocate((0, 5), "f32").nbytes == 0


@pytest.mark.parametrize("size", [-1, 1 << 62, 1 << 70, 2.5, "8"])
def test_allocate_bad_sizes(dev: CpuDevice, size: object) -> None:
    with pytest.raises(BufferAllocationError):
        dev.allocate(size)  # type: ignore[arg-type]


def test_allocate_size_not_multiple_of_itemsize(dev: CpuDevice) -> None:
    with pytest.raises(BufferAllocationError):
        dev.allocate(10, dtype="float32")
    with pytest.raises(BufferAllocationError):
        dev.allocate((2, -1), dtype="float32")


def test_copyin_copyout_round_trip(dev: CpuDevice) -> None:
    buf = dev.allocate((4,), "float32")
    payload = struct.pack("=4f", 1.5, -2.0, 3.25, 0.0)
    for source in (payload, bytearray(payload), memoryview(payload)):
        buf.copyin(source)
        assert buf.copyout() == payload
    assert buf.tolist() == [1.5, -2.0, 3.25, 0.0]
    buf.copyin([4, 3, 2, 1])
    assert buf.tolist() == [4.0, 3.0, 2.0, 1.0]


def test_copyin_non_contiguous_memoryview(dev: CpuDevice) -> None:
    buf = dev.allocate(4)
    buf.copyin(memoryview(b"a1b2c3d4")[::2])
    assert buf.copyout() == b"abcd"


def test_copyin_size_mismatch_names_both_sizes(dev: CpuDevice) -> None:
    buf = dev.allocate((4,), "float32")
    with pytest.raises(BufferAllocationError) as info:
        buf.copyin(b"\0" * 12)
    assert "12" in str(info.value) and "16" in str(info.value)
    with pytest.raises(BufferAllocationError):
        buf.copyin([1.0, 2.0])
    with pytest.raises(BufferAllocationError):
        buf.copyin(object())


def test_views_share_memory(dev: CpuDevice) -> None:
    base = dev.allocate((8,), "int32")
    base.copyin(list(range(8)))
    view = base.view(8, 16)
    assert view.storage is base.storage and view.offset == 8 and view.address == base.address + 8
    assert view.tolist() == [2, 3, 4, 5] and view.byte_range() == (8, 24)
    view.copyin([20, 30, 40, 50])
    assert base.tolist() == [0, 1, 20, 30, 40, 50, 6, 7]
    nested = view.view(4, 4, dtype="uint8", shape=(2, 2))
    assert nested.offset == 12 and nested.storage is base.storage and nested.shape == (2, 2)
    assert base.view(32, 0).nbytes == 0  # empty view at the end is fine


@pytest.mark.parametrize("offset, nbytes", [(0, 36), (30, 4), (33, 0), (-4, 4), (4, -4)])
def test_view_out_of_range(dev: CpuDevice, offset: int, nbytes: int) -> None:
    base = dev.allocate((8,), "int32")
    with pytest.raises(BufferAllocationError):
        base.view(offset, nbytes)


def test_view_shape_mismatch(dev: CpuDevice) -> None:
    base = dev.allocate((8,), "int32")
    with pytest.raises(BufferAllocationError):
        base.view(0, 16, shape=(3,))
    with pytest.raises(BufferAllocationError):
        base.view(0, 6)  # not a whole number of int32


def test_tolist_dtypes_without_numpy(dev: CpuDevice) -> None:
    buf = dev.allocate((3,), "bfloat16")
    buf.copyin([1.0, -2.5, 0.5])
    assert buf.tolist() == [1.0, -2.5, 0.5]
    assert buf.view(0, 6, dtype="uint16").tolist() == [0x3F80, 0xC020, 0x3F00]
    flags = dev.allocate((2,), "bool").copyin([True, False])
    assert flags.tolist() == [True, False]
    half = dev.allocate((2,), "float16").copyin([0.5, 65504.0])
    assert half.tolist() == [0.5, 65504.0]
    scalar = dev.allocate(4, "int32").view(0, 4, shape=())
    assert scalar.tolist() == 0 and len(scalar) == 1


@needs_numpy
def test_numpy_zero_copy_view(dev: CpuDevice) -> None:
    buf = dev.allocate((2, 3), "float32")
    arr = buf.numpy()
    assert arr.shape == (2, 3) and arr.dtype == np.float32
    assert arr.ctypes.data == buf.address
    arr[1, 2] = 7.5
    assert buf.tolist()[1][2] == 7.5
    assert struct.unpack("=6f", buf.copyout())[5] == 7.5
    sub = buf.view(12, 12).numpy()
    sub[:] = [1, 2, 3]
    assert arr[1].tolist() == [1, 2, 3] and sub.ctypes.data == buf.address + 12


@needs_numpy
def test_numpy_copyin(dev: CpuDevice) -> None:
    buf = dev.allocate((2, 2), "float32")
    src = np.arange(8, dtype=np.float32).reshape(2, 4)[:, ::2]  # non-contiguous
    buf.copyin(src)
    assert buf.tolist() == [[0.0, 2.0], [4.0, 6.0]]
    with pytest.raises(BufferAllocationError) as info:
        buf.copyin(np.zeros(2, dtype=np.float64))  # same nbytes, wrong itemsize
    assert "float64" in str(info.value)
    with pytest.raises(BufferAllocationError):
        buf.copyin(np.zeros(3, dtype=np.float32))
    bf = dev.allocate((2,), "bfloat16")
    bf.copyin(np.array([0x3F80, 0x4000], dtype=np.uint16))  # raw bits are accepted
    assert bf.tolist() == [1.0, 2.0]


@needs_numpy
def test_numpy_bfloat16_and_empty(dev: CpuDevice) -> None:
    with pytest.raises(NotSupportedError):
        dev.allocate((2,), "bfloat16").numpy()
    assert dev.allocate(0, "float32").numpy().shape == (0,)


def test_no_numpy_path(dev: CpuDevice, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_buffer, "numpy_module", lambda: None)
    buf = dev.allocate((3,), "int16")
    buf.copyin(struct.pack("=3h", -1, 2, 3))
    assert buf.tolist() == [-1, 2, 3]
    buf.copyin([7, 8, 9])
    assert buf.copyout() == struct.pack("=3h", 7, 8, 9)
    with pytest.raises(NotSupportedError) as info:
        buf.numpy()
    assert "numpy" in str(info.value) and isinstance(info.value, SvodError)


def test_buffer_memory_outlives_its_first_owner(dev: CpuDevice) -> None:
    view = dev.allocate((4,), "int32").copyin([1, 2, 3, 4]).view(4, 8)
    import gc

    gc.collect()  # the base buffer is gone; the view keeps the storage mapped
    assert view.tolist() == [2, 3]


# --- copyin from typed memory (array.array, ctypes, memoryviews of arrays) ------------------------


@pytest.mark.parametrize(
    "dtype, source, message",
    [
        ("int32", lambda: array.array("f", [1.0, 2.0]), "memory of format 'f' does not hold int32 elements"),
        ("uint32", lambda: (ctypes.c_int32 * 2)(1, 2), "memory of format '<i' does not hold uint32 elements"),
        ("float16", lambda: array.array("H", [1, 2]), "memory of format 'H' does not hold float16 elements"),
        ("int64", lambda: array.array("d", [1.0, 2.0]), "memory of format 'd' does not hold int64 elements"),
    ],
)
def test_copyin_refuses_typed_memory_of_other_numbers(dev: CpuDevice, dtype: str, source: Any, message: str) -> None:
    buf = dev.allocate([2], dtype).copyin([7, 7])
    with pytest.raises(BufferAllocationError, match=message):
        buf.copyin(source())  # same byte count: the bits used to land as they were
    assert buf.tolist() == [7, 7]


def test_copyin_takes_typed_memory_of_the_same_numbers_and_raw_bytes(dev: CpuDevice) -> None:
    assert dev.allocate([2], "float32").copyin(array.array("f", [1.5, 2.5])).tolist() == [1.5, 2.5]
    assert dev.allocate([2], "int64").copyin(
        array.array("l" if ctypes.sizeof(ctypes.c_long) == 8 else "q", [3, -4])
    ).tolist() == [3, -4]
    assert dev.allocate([2], "int32").copyin((ctypes.c_int32 * 2)(5, 6)).tolist() == [5, 6]
    assert dev.allocate([1], "bfloat16").copyin(array.array("H", [0x3F80])).tolist() == [1.0]  # raw bits
    assert dev.allocate([2], "bool").copyin(array.array("B", [1, 0])).tolist() == [True, False]
    assert dev.allocate([1], "int32").copyin(bytearray(b"\x01\x00\x00\x00")).tolist() == [1]
    assert dev.allocate([1], "float32").copyin(memoryview(b"\x00\x00\x80\x3f")).tolist() == [1.0]


# --- lists of values: bfloat16 and bool take numbers only ------------------------------------------


@pytest.mark.parametrize(
    "dtype, values", [("bfloat16", ["1.5"]), ("bfloat16", [b"2"]), ("bool", ["no"]), ("bool", [None])]
)
def test_copyin_lists_of_text_are_refused_for_types_struct_does_not_check(
    dev: CpuDevice, dtype: str, values: Any
) -> None:
    buf = dev.allocate([1], dtype)
    with pytest.raises(BufferAllocationError, match="cannot pack values as %s: .* is not a number" % dtype):
        buf.copyin(values)  # float("1.5") and struct "?" ("no" is True) took them silently
    assert dev.allocate([2], "bool").copyin([2, 0.0]).tolist() == [True, False]
    assert dev.allocate([2], "bfloat16").copyin([1, 2.5]).tolist() == [1.0, 2.5]


# --- hand-built buffers and storages ---------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda st: CpuBuffer(None, 0, 4, float32, (1,)),
            "CpuBuffer takes a CpuStorage and a DType, got NoneType and DType",
        ),
        (
            lambda st: CpuBuffer(st, 0, 4, "float32", (1,)),
            "CpuBuffer takes a CpuStorage and a DType, got CpuStorage and str",
        ),
        (lambda st: CpuBuffer(st, 0, 4, float32, 1), "buffer shape must be a sequence of ints, got 1"),
        (lambda st: CpuBuffer(st, 0, 4, float32, (-1, -1)), "buffer dimension must be >= 0, got -1"),
        (lambda st: CpuBuffer(st, 0, 4, float32, (1.0,)), "buffer dimension must be an integer, got 1.0"),
        (lambda st: CpuStorage(-1), "storage size must be >= 0, got -1"),
        (lambda st: CpuStorage("8"), "storage size must be an integer, got '8'"),
    ],
)
def test_hand_built_buffers_and_storages_are_checked(make: Any, message: str) -> None:
    with pytest.raises(BufferAllocationError, match=message):
        make(CpuStorage(16))  # [-1, -1] spanned 4 bytes (product 1); the rest were raw exceptions


def test_hand_built_buffer_shapes_become_int_tuples() -> None:
    buf = CpuBuffer(CpuStorage(16), 0, 8, float32, [2])
    assert buf.shape == (2,) and buf.tolist() == [0.0, 0.0]


# --- numpy arrays: element types must match -----------------------------------------------------


@needs_numpy
@pytest.mark.parametrize(
    "dtype, array, message",
    [
        (
            "int32",
            lambda: np.array([1, 2], dtype=">i4"),
            r"array dtype >i4 \(not native byte order\) does not match buffer dtype int32",
        ),
        (
            "int32",
            lambda: np.array([1.0, 2.0], dtype=np.float32),
            "array dtype float32 does not match buffer dtype int32",
        ),
        (
            "bfloat16",
            lambda: np.array([1.0], dtype=np.float16),
            "array dtype float16 does not match buffer dtype bfloat16",
        ),
        ("int64", lambda: np.array([1, 2], dtype=object), "does not match buffer dtype int64"),
    ],
)
def test_copyin_refuses_arrays_whose_elements_are_other_numbers(
    dev: CpuDevice, dtype: str, array: Any, message: str
) -> None:
    array = array()
    buf = dev.allocate([len(array)], dtype).copyin([7] * len(array))
    with pytest.raises(BufferAllocationError, match=message):
        buf.copyin(array)  # same item size: the bytes used to be copied as they were
    assert buf.tolist() == [7] * len(array)


@needs_numpy
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


def test_a_hand_built_buffer_must_fit_its_storage() -> None:
    storage = CpuStorage(16)
    with pytest.raises(BufferAllocationError, match=r"buffer \[8, \+64\) is outside its storage \(16 bytes\)"):
        CpuBuffer(storage, 8, 64, float32, (16,))
    with pytest.raises(BufferAllocationError, match=r"shape \[3\] of float32 does not span 8 bytes"):
        CpuBuffer(storage, 8, 8, float32, (3,))
    assert CpuBuffer(storage, 8, 8, float32, (2,)).tolist() == [0.0, 0.0]


def _vm_flags(address: int) -> List[str]:
    """The VmFlags of the mapping holding ``address`` (Linux /proc/self/smaps)."""
    flags: List[str] = []
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(part, 16) for part in head.split("-"))
                inside = lo <= address < hi
            elif inside and head == "VmFlags:":
                flags = line.split()[1:]
    return flags


@pytest.mark.skipif(
    not os.path.exists("/sys/kernel/mm/transparent_hugepage") or not hasattr(mmap, "MADV_HUGEPAGE"),
    reason="no transparent huge pages on this host",
)
def test_large_storage_asks_for_huge_pages_and_small_does_not() -> None:
    large = CpuStorage(HUGE_PAGE_MIN)
    small = CpuStorage(HUGE_PAGE_MIN // 2)
    assert "hg" in _vm_flags(large.address)  # MADV_HUGEPAGE taken
    assert "hg" not in _vm_flags(small.address)


@needs_numpy
def test_copyout_into_fills_a_numpy_array_and_refuses_what_it_cannot_fill(dev: CpuDevice) -> None:
    buf = dev.allocate((3, 4), float32)
    buf.copyin(np.arange(12, dtype=np.float32).reshape(3, 4))
    out = np.full((3, 4), np.nan, np.float32)
    assert buf.copyout_into(out) is out
    np.testing.assert_array_equal(out, np.arange(12, dtype=np.float32).reshape(3, 4))
    into = bytearray(48)
    buf.copyout_into(into)
    assert bytes(into) == buf.copyout()
    with pytest.raises(BufferAllocationError, match="48 bytes; got contiguous, 44 bytes"):
        buf.copyout_into(np.empty(11, np.float32))
    with pytest.raises(BufferAllocationError, match="read-only"):
        buf.copyout_into(bytes(48))
    with pytest.raises(BufferAllocationError, match="strided"):
        buf.copyout_into(np.empty((3, 8), np.float32)[:, ::2])
    with pytest.raises(BufferAllocationError, match="writable memory, got int"):
        buf.copyout_into(7)
