"""svod_min.devices.cuda.launch: argument blobs, launch dimensions and plan launch sizes (pure, no driver)."""

from __future__ import annotations

import ctypes
import struct
from typing import Any, Tuple

import pytest

from svod_min.devices import cuda
from svod_min.devices.cuda import (
    ArgumentRangeError,
    LaunchConfigError,
    LaunchLimits,
    PtxError,
    launch_dims,
    pack_kernel_args,
)
from svod_min.error import DeviceError, VariableBoundsError

np = pytest.importorskip("numpy")


def test_arg_blob_layout_pointers_then_int32() -> None:
    buffer, size, layout = pack_kernel_args([0x1000, 0x2000, 0x3000], [7, -1, 2**31 - 1])
    assert size == 3 * 8 + 3 * 4 == 36  # no tail padding: the driver wants the exact size
    assert [(s.kind, s.index, s.offset, s.size) for s in layout] == [
        ("ptr", 0, 0, 8),
        ("ptr", 1, 8, 8),
        ("ptr", 2, 16, 8),
        ("i32", 0, 24, 4),
        ("i32", 1, 28, 4),
        ("i32", 2, 32, 4),
    ]
    assert ctypes.addressof(buffer) % 8 == 0 and ctypes.sizeof(buffer) >= size
    raw = ctypes.string_at(ctypes.addressof(buffer), size)
    assert struct.unpack("<QQQiii", raw) == (0x1000, 0x2000, 0x3000, 7, -1, 2**31 - 1)


def test_arg_blob_extra_and_kernel_params_point_into_the_blob() -> None:
    blob = pack_kernel_args([0xAA], [5, 6])
    base = ctypes.addressof(blob.buffer)
    extra = list(blob.extra)
    assert extra[0] == 1 and extra[1] == base and extra[2] == 2 and extra[4] is None
    assert ctypes.c_size_t.from_address(extra[3]).value == 16
    assert list(blob.kernel_params) == [base, base + 8, base + 12]


def test_arg_blob_patch_in_place() -> None:
    blob = pack_kernel_args([1, 2], [3])
    address, version = ctypes.addressof(blob.buffer), blob.version
    blob.set_ptr(1, 2**64 - 1)
    blob.set_int(0, -(2**31))
    assert ctypes.addressof(blob.buffer) == address  # patched, not repacked
    assert blob.pointers() == [1, 2**64 - 1] and blob.ints() == [-(2**31)]
    assert blob.version == version + 2
    assert struct.unpack("<QQi", blob.tobytes()) == (1, 2**64 - 1, -(2**31))


@pytest.mark.parametrize("value", [2**31, -(2**31) - 1, 10**12])
def test_arg_blob_int32_overflow_is_an_error(value: int) -> None:
    blob = pack_kernel_args([], [0])
    with pytest.raises(ArgumentRangeError, match="int32") as info:
        blob.set_int(0, value, "n")
    assert isinstance(info.value, VariableBoundsError) and info.value.exit_code == 2
    assert "n=%d" % value in str(info.value)
    assert blob.ints() == [0]
    with pytest.raises(ArgumentRangeError):
        pack_kernel_args([], [value])


def test_arg_blob_rejects_bad_values() -> None:
    with pytest.raises(ArgumentRangeError, match="64-bit"):
        pack_kernel_args([2**64], [])
    with pytest.raises(ArgumentRangeError, match="64-bit"):
        pack_kernel_args([-1], [])
    with pytest.raises(ArgumentRangeError, match="not an integer"):
        pack_kernel_args([], [1.5])
    with pytest.raises(IndexError):
        pack_kernel_args([1], [2]).set_int(1, 0)
    blob = pack_kernel_args([np.uint64(8)], [np.int32(-3), True])
    assert blob.pointers() == [8] and blob.ints() == [-3, 1]


def test_arg_blob_empty() -> None:
    _, size, layout = pack_kernel_args([], [])
    assert size == 0 and layout == ()


@pytest.mark.parametrize(
    "global_size, local_size, grid, block",
    [
        ((4,), (256,), (4, 1, 1), (256, 1, 1)),
        (4, 32, (4, 1, 1), (32, 1, 1)),
        ([2, 3], [16, 16], (2, 3, 1), (16, 16, 1)),
        ((2**31 - 1, 65535, 65535), (1, 1, 64), (2**31 - 1, 65535, 65535), (1, 1, 64)),
        ((1, 1, 1), (1024, 1, 1), (1, 1, 1), (1024, 1, 1)),
        ((1,), (32, 32, 1), (1, 1, 1), (32, 32, 1)),
        ((5,), None, (5, 1, 1), (1, 1, 1)),
        (None, None, (1, 1, 1), (1, 1, 1)),
    ],
)
def test_launch_dims_ok(global_size: Any, local_size: Any, grid: Tuple[int, ...], block: Tuple[int, ...]) -> None:
    assert launch_dims(global_size, local_size) == (grid, block)


@pytest.mark.parametrize(
    "global_size, local_size, message",
    [
        ((0,), (32,), r"global_size\[0\]=0: every launch dimension must be a positive"),
        ((1, -2), (32,), r"global_size\[1\]=-2"),
        ((1,), (0,), r"local_size\[0\]=0"),
        ((2**31,), (32,), "grid dimension 0 is 2147483648 blocks; the device allows 2147483647 .*counts blocks"),
        ((1, 65536), (32,), "grid dimension 1 is 65536 blocks"),
        ((1, 1, 65536), (32,), "grid dimension 2"),
        ((1,), (1025,), "block dimension 0 is 1025 threads"),
        ((1,), (1, 1, 65), "block dimension 2 is 65 threads; the device allows 64"),
        ((1,), (32, 32, 2), r"block \(32, 32, 2\) has 2048 threads; at most 1024"),
        ((1, 2, 3, 4), (1,), "1 to 3 dimensions"),
        ((1.5,), (1,), "not an integer"),
        ((), (1,), "1 to 3 dimensions"),
    ],
)
def test_launch_dims_rejects(global_size: Any, local_size: Any, message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message) as info:
        launch_dims(global_size, local_size)
    assert isinstance(info.value, DeviceError)


def test_launch_dims_uses_the_given_limits() -> None:
    small = LaunchLimits(max_threads_per_block=128)
    assert launch_dims((1,), (128,), small) == ((1, 1, 1), (128, 1, 1))
    with pytest.raises(LaunchConfigError, match="at most 128"):
        launch_dims((1,), (256,), small)
    assert cuda.DEFAULT_LIMITS.with_threads(0) is cuda.DEFAULT_LIMITS
    assert cuda.DEFAULT_LIMITS.with_threads(256).max_threads_per_block == 256
    with pytest.raises(LaunchConfigError, match="shared_bytes"):
        cuda.check_shared_bytes(49153)


def test_plan_dims_translate_library_launch_sizes() -> None:
    from svod_min.expr import compile_expr as plan_expr
    from svod_min.kernels.sig import compile_expr as lib_expr

    exprs = ["max(1,min(ceildiv(n,256),65535))", "ceildiv(cols,32)", "ceildiv(N,16)", "outer*inner-(2%3)", "-n+7"]
    translated = cuda.plan_dims(exprs + [1])
    assert translated[-1] == 1 and translated[1] == "ceildiv(cols,32)"  # svod_min.expr knows ceildiv: no rewrite
    for text, plan_text in zip(exprs, translated):
        for n in (1, 255, 256, 257, 10**7):
            env = {"n": n, "cols": n, "N": n, "outer": n, "inner": 3}
            assert plan_expr(plan_text)(env) == lib_expr(text)(env)
    with pytest.raises(PtxError, match="cannot be written"):
        cuda.plan_dims(["n if n else 1"])
