"""The CUDA device (svod_min.devices.cuda) with and without a GPU.

Three groups:

* pure helpers (argument blobs, launch dimensions, PTX versions and rules,
  ptxas on the shipped PTX) - always run;
* the real binding code against ``tests/fake_libcuda.c``, a stand-in
  ``libcuda`` built with gcc into a temp dir (host memory plays device
  memory, a few kernels are emulated by name) - runs wherever gcc exists;
* ``@pytest.mark.gpu`` tests - need an NVIDIA driver with a GPU and skip
  with "no NVIDIA driver (libcuda.so.1) on this machine" otherwise.
"""

from __future__ import annotations

import ctypes
import gc
import glob
import os
import re
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from cuda_emu_support import build_fake_libcuda, find_cc

from svod_min.device_registry import DEVICE_FACTORIES, DeviceRegistry
from svod_min.kernels import GEN_DIR
from svod_min.devices import cuda
from svod_min.devices.cuda import memory
from svod_min.devices.cuda import (
    ArgumentRangeError,
    CudaError,
    CudaGraph,
    ForkedChildError,
    LaunchConfigError,
    LaunchLimits,
    PtxError,
    StagingPool,
    launch_dims,
    pack_kernel_args,
    select_ptx_version,
    validate_ptx,
)
from svod_min.devices.cuda import PROTOTYPES, CudaLibrary, CudaSymbolError
from svod_min.error import (
    BufferAllocationError,
    CompilationError,
    DeviceError,
    ExecutionError,
    InvalidDeviceError,
    NotSupportedError,
    UnsupportedDeviceError,
    VariableBoundsError,
)

np = pytest.importorskip("numpy")

REAL_DRIVER = cuda.load_driver()
HAVE_GPU = REAL_DRIVER is not None and REAL_DRIVER.device_count > 0
_GPU_REASON = cuda.NO_DRIVER_REASON if REAL_DRIVER is None else "the NVIDIA driver reports no GPU"


def gpu_test(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test as needing a real GPU (skips with the reason otherwise)."""
    return pytest.mark.gpu(pytest.mark.skipif(not HAVE_GPU, reason=_GPU_REASON)(fn))


without_driver = pytest.mark.skipif(REAL_DRIVER is not None, reason="an NVIDIA driver is present here")
PTX_FILES = sorted(glob.glob(os.path.join(GEN_DIR, "cuda", "*.ptx")))


# --- no driver: absent, with reasons, never a crash ---------------------------------------------


@without_driver
def test_no_driver_load_driver_is_none_with_reason() -> None:
    assert cuda.load_driver() is None
    reason = cuda.driver_unavailable_reason()
    assert reason is not None and "libcuda.so.1" in reason


@without_driver
def test_no_driver_registry_has_no_cuda_and_asking_is_a_clear_error() -> None:
    assert "CUDA" not in DEVICE_FACTORIES.available_kinds()
    for spec in ("CUDA", "CUDA:1", "GPU:0"):
        with pytest.raises(UnsupportedDeviceError, match="libcuda.so.1"):
            DEVICE_FACTORIES.device(spec)
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry) is False
    assert registry.available_kinds() == []


@without_driver
def test_no_driver_info_lines() -> None:
    lines = cuda.info_lines()
    assert lines[0].startswith("cuda: not available") and "libcuda.so.1" in lines[0]
    assert lines[-1].startswith("nvrtc: ")


def test_svod_cuda_0_disables_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_CUDA", "0")
    assert cuda.load_driver("/nonexistent/libcuda.so.1") is None
    assert "SVOD_CUDA=0" in (cuda.driver_unavailable_reason("/nonexistent/libcuda.so.1") or "")
    assert cuda.register_cuda(DeviceRegistry(), path="/nonexistent/libcuda.so.1") is False


def test_missing_library_path_gives_reason() -> None:
    assert cuda.load_driver("/nonexistent/libcuda-test.so.1") is None
    assert "/nonexistent/libcuda-test.so.1" in (cuda.driver_unavailable_reason("/nonexistent/libcuda-test.so.1") or "")


# --- the prototype table --------------------------------------------------------------------------

REQUIRED_ENTRY_POINTS = """
cuInit cuDriverGetVersion cuDeviceGetCount cuDeviceGet cuDeviceGetName cuDeviceComputeCapability
cuDeviceGetAttribute cuDeviceTotalMem_v2 cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease_v2 cuCtxSetCurrent
cuCtxGetCurrent cuMemAlloc_v2 cuMemFree_v2 cuMemHostAlloc cuMemFreeHost cuMemcpyHtoD_v2 cuMemcpyDtoH_v2
cuMemcpyDtoD_v2 cuMemcpyHtoDAsync_v2 cuMemcpyDtoHAsync_v2 cuMemcpyDtoDAsync_v2 cuStreamCreate
cuStreamSynchronize cuStreamDestroy_v2 cuModuleLoadDataEx cuModuleGetFunction cuModuleUnload cuLaunchKernel
cuEventCreate cuEventRecord cuEventSynchronize cuEventElapsedTime cuEventDestroy_v2 cuGetErrorName
cuGetErrorString cuDeviceCanAccessPeer cuCtxEnablePeerAccess cuStreamBeginCapture_v2 cuStreamEndCapture
cuGraphInstantiateWithFlags cuGraphLaunch cuGraphExecKernelNodeSetParams cuGraphDestroy cuGraphExecDestroy
""".split()


def test_prototype_table_is_complete_and_unique() -> None:
    names = [name for name, _ in PROTOTYPES]
    assert len(names) == len(set(names))
    assert set(REQUIRED_ENTRY_POINTS) <= set(names)
    for _name, argtypes in PROTOTYPES:
        assert all(hasattr(t, "from_param") for t in argtypes)  # ctypes types only


# --- argument blobs -------------------------------------------------------------------------------


def test_arg_blob_layout_pointers_then_int32() -> None:
    buffer, size, layout = pack_kernel_args([0x1000, 0x2000, 0x3000], [7, -1, 2**31 - 1])
    assert size == 3 * 8 + 3 * 4 == 36  # no tail padding: the driver wants the exact size
    assert [(s.kind, s.index, s.offset, s.size) for s in layout] == [
        ("ptr", 0, 0, 8), ("ptr", 1, 8, 8), ("ptr", 2, 16, 8),
        ("i32", 0, 24, 4), ("i32", 1, 28, 4), ("i32", 2, 32, 4),
    ]  # fmt: skip
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
    assert isinstance(info.value, DeviceError) and isinstance(info.value, VariableBoundsError)
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


# --- launch dimensions ----------------------------------------------------------------------------


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


# --- PTX ISA versions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "driver, ptx",
    [
        (11000, "7.0"), (11080, "7.8"), (12000, "8.0"), (12010, "8.1"), (12040, "8.4"), (12050, "8.5"),
        (12060, "8.5"), (12080, "8.7"), (12090, "8.8"), (13000, "9.0"), (13010, "9.1"),
        (13040, "9.4"), (13050, "9.5"),  # 13.N -> 9.N, extrapolated past the table
        (14000, "9.1"),  # unknown major: the newest version known to load
    ],
)  # fmt: skip
def test_select_ptx_version(driver: int, ptx: str) -> None:
    assert select_ptx_version(driver) == ptx


def test_ptx_newer_than_the_driver_is_a_clear_error() -> None:
    with pytest.raises(PtxError, match=r"driver 12\.4 accepts PTX up to 8\.4; this module is 9\.0") as info:
        cuda.check_ptx_version("9.0", 12040)
    assert isinstance(info.value, DeviceError)
    with pytest.raises(PtxError, match=r"driver 13\.0 accepts PTX up to 9\.0; this module is 9\.5"):
        cuda.check_ptx_version((9, 5), 13000)
    cuda.check_ptx_version("8.4", 12040)
    cuda.check_ptx_version("7.0", 13000)
    cuda.check_ptx_version("9.5", 14000)  # unknown future driver: let it decide
    with pytest.raises(PtxError, match="older than 9.0"):
        select_ptx_version(8000)
    assert cuda.driver_version_tuple(12040) == (12, 4)


def test_ptx_version_table_is_monotonic() -> None:
    releases = [r for r, _ in cuda.PTX_FOR_CUDA]
    versions = [v for _, v in cuda.PTX_FOR_CUDA]
    assert releases == sorted(releases) and versions == sorted(versions)


# --- validate_ptx ---------------------------------------------------------------------------------

GOOD_PTX = """\
// a comment that mentions .extern .func nothing and .version 99.9
.version 7.8
.target sm_80
.address_size 64

.visible .entry k(
    .param .u64 k_param_0,
    .param .u32 k_param_1
)
{
    /* block comment: .extern .func f */
    ret;
}
"""


PTX_CASES = [
    ("good", GOOD_PTX, "sm_80", None, None),
    ("older target runs forward", GOOD_PTX, "sm_90", None, None),
    ("missing .version", GOOD_PTX.replace(".version 7.8\n", ""), "sm_80", None, "no .version directive"),
    ("version only in a comment", GOOD_PTX.replace(".version 7.8\n", "// .version 7.8\n"), "sm_80", None, "no .version"),
    ("wrong target", GOOD_PTX.replace("sm_80", "sm_90"), "sm_80", None, ".target sm_90 must run on the device architecture sm_80"),
    ("missing target", GOOD_PTX.replace(".target sm_80\n", ""), "sm_80", None, "no .target"),
    ("target not an sm", GOOD_PTX.replace("sm_80", "gfx90a"), "sm_80", None, "not an sm_XX"),
    ("no entry", GOOD_PTX.replace(".entry k(", ".func k("), "sm_80", None, "no kernel: expected at least one '.entry name('"),
    ("entry not found", GOOD_PTX, "sm_80", "other", "entry 'other' not found (entries: k)"),
    ("extern func", GOOD_PTX.replace(".address_size 64\n", ".address_size 64\n.extern .func (.param .b32 r) helper (.param .b32 a);\n"),
     "sm_80", None, ".extern .func helper"),
    ("32-bit addresses", GOOD_PTX.replace(".address_size 64", ".address_size 32"), "sm_80", None, ".address_size is 32"),
    ("two versions", GOOD_PTX.replace(".target", ".version 8.0\n.target"), "sm_80", None, "2 .version directives"),
    ("arch-specific target on another chip", GOOD_PTX.replace("sm_80", "sm_90a"), "sm_100", None, "must run on"),
    ("arch-specific target on its chip", GOOD_PTX.replace("sm_80", "sm_90a"), "sm_90", None, None),
    ("family target, newer minor", GOOD_PTX.replace("sm_80", "sm_100f"), "sm_103", None, None),
    ("family target, other major", GOOD_PTX.replace("sm_80", "sm_100f"), "sm_120", None, "must run on"),
    ("target with options", GOOD_PTX.replace("sm_80", "sm_80, debug"), "sm_80", None, None),
    ("empty", "   \n", "sm_80", None, "empty"),
    ("binary", "\x7fELF\0\0", "sm_80", None, "NUL byte"),
]  # fmt: skip


@pytest.mark.parametrize("name, text, arch, entry, error", PTX_CASES, ids=[c[0] for c in PTX_CASES])
def test_validate_ptx(name: str, text: str, arch: str, entry: Optional[str], error: Optional[str]) -> None:
    if error is None:
        info = validate_ptx(text, arch, entry=entry)
        assert info.entries == ("k",) and info.address_size == 64
        return
    with pytest.raises(PtxError) as info:
        validate_ptx(text, arch, entry=entry)
    assert error in str(info.value)
    assert isinstance(info.value, DeviceError)


def test_validate_ptx_exact_target_is_svods_strict_rule() -> None:
    assert validate_ptx(GOOD_PTX, "sm_80", exact_target=True).target == "sm_80"
    with pytest.raises(PtxError, match="must equal"):
        validate_ptx(GOOD_PTX, "sm_90", exact_target=True)


def test_validate_ptx_reports_every_problem_and_reads_the_header() -> None:
    bad = ".target sm_80\n.extern .func f;\n"
    with pytest.raises(PtxError) as info:
        validate_ptx(bad, "sm_80")
    message = str(info.value)
    assert "no .version" in message and "no kernel" in message and ".extern .func f" in message
    read = validate_ptx(GOOD_PTX.encode(), None)
    assert (read.version, read.version_string, read.target) == ((7, 8), "7.8", "sm_80")


def test_parse_arch() -> None:
    assert cuda.parse_arch("sm_90a") == (90, "a")
    assert cuda.parse_arch("compute_80") == (80, "")
    assert cuda.parse_arch(86) == (86, "") and cuda.parse_arch((8, 9)) == (89, "")
    assert cuda.arch_name("SM_75") == "sm_75"
    with pytest.raises(PtxError, match="unknown GPU architecture"):
        cuda.parse_arch("gfx90a")


def test_rewrite_ptx_version() -> None:
    lowered = cuda.rewrite_ptx_version(GOOD_PTX, "7.0")
    assert cuda.ptx_version_of(lowered) == (7, 0)
    assert lowered.replace(".version 7.0", ".version 7.8") == GOOD_PTX  # only the directive changed
    assert "// a comment that mentions .extern .func nothing and .version 99.9" in lowered
    assert cuda.ptx_version_of(cuda.rewrite_ptx_version(GOOD_PTX, (8, 4))) == (8, 4)
    with pytest.raises(PtxError, match=r"sm_80 needs PTX >= 7\.0; cannot lower to 6\.5"):
        cuda.rewrite_ptx_version(GOOD_PTX, "6.5")
    with pytest.raises(PtxError, match="no .version"):
        cuda.rewrite_ptx_version(".target sm_80\n", "7.0")
    with pytest.raises(PtxError, match="looks like"):
        cuda.rewrite_ptx_version(GOOD_PTX, "eight")


def test_entry_params() -> None:
    assert cuda.ptx_entry_params(GOOD_PTX, "k") == [8, 4]
    cuda.check_entry_params(GOOD_PTX, "k", 1, 1)
    with pytest.raises(PtxError, match=r"declares parameters of \[8, 4\] bytes; svod passes 2 pointers then 0 int32"):
        cuda.check_entry_params(GOOD_PTX, "k", 2, 0)
    arrays = ".entry s(.param .align 8 .b8 s_p0[16], .param .f64 s_p1)"
    assert cuda.ptx_entry_params(arrays, "s") == [16, 8]
    with pytest.raises(PtxError, match="not found"):
        cuda.ptx_entry_params(GOOD_PTX, "nope")


# --- shipped PTX: rules, signatures, ptxas --------------------------------------------------------

needs_ptx_files = pytest.mark.skipif(not PTX_FILES, reason="no generated PTX under svod_min/kernels/_generated/cuda")


@needs_ptx_files
def test_shipped_ptx_follows_the_rules_and_matches_the_signatures() -> None:
    from svod_min.kernels import cuda_kernels, ptx_path

    for path in PTX_FILES:
        with open(path, encoding="utf-8") as fh:
            info = validate_ptx(fh.read(), "sm_75")
        cuda.check_ptx_version(info.version, 11080)  # loads on any CUDA 11.8+ driver
    sigs = cuda_kernels()
    assert sigs
    for sig in sigs:
        with open(ptx_path(sig.module), encoding="utf-8") as fh:
            cuda.check_entry_params(fh.read(), sig.entry, len(sig.buffers), len(sig.vars))
        launch_dims(tuple(1 if isinstance(d, str) else d for d in sig.grid), sig.block)


PTXAS = cuda.find_ptxas()


@needs_ptx_files
@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (CUDA toolkit not installed)")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_ptxas_assembles_the_shipped_ptx(arch: str) -> None:
    for path in PTX_FILES:
        with open(path, encoding="utf-8") as fh:
            cubin = cuda.ptxas_check(fh.read(), arch)
        assert cubin[:4] == b"\x7fELF", path


def _ptxas_resources(path: str, arch: str) -> Dict[str, Tuple[int, int]]:
    """{entry: (registers per thread, static shared bytes)} from ``ptxas -v``."""
    assert PTXAS is not None
    proc = subprocess.run([PTXAS, "-v", "-arch=" + arch, "-o", os.devnull, path], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    found, entry = {}, None
    for line in proc.stderr.splitlines():
        named = re.search(r"Compiling entry function '(\w+)'", line)
        used = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem|$)", line)
        if named:
            entry = named.group(1)
        elif used and entry:
            found[entry] = (int(used.group(1)), int(used.group(2) or 0))
    return found


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (CUDA toolkit not installed)")
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_library_kernels_fit_their_blocks(arch: str) -> None:
    """Registers x threads of each library kernel's block fit one SM's 64K registers, static shared memory
    fits 48 KiB: otherwise every launch of it fails with CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES on a real GPU."""
    from svod_min.kernels import ptx_path

    sigs = _cuda_sigs()
    resources: Dict[str, Tuple[int, int]] = {}
    for module in sorted({s.module for s in sigs}):
        resources.update(_ptxas_resources(ptx_path(module), arch))
    for sig in sigs:
        regs, smem = resources[sig.entry]
        threads = sig.block[0] * sig.block[1] * sig.block[2]
        assert regs * threads <= 65536, "%s: %d registers x %d threads" % (sig.entry, regs, threads)
        assert smem + sig.shared_bytes <= 48 << 10, "%s: %d bytes of shared memory" % (sig.entry, smem)


@pytest.mark.skipif(PTXAS is None, reason="ptxas not found (CUDA toolkit not installed)")
def test_ptxas_rejects_bad_ptx_with_its_log() -> None:
    bad = GOOD_PTX.replace("    ret;", "    bogus.instruction.f32 %f1;\n    ret;")
    validate_ptx(bad, "sm_80")  # svod's rules cannot see it ...
    with pytest.raises(CompilationError, match="ptxas -arch=sm_80 rejected") as info:
        cuda.ptxas_check(bad, "sm_80")  # ... ptxas can
    assert info.value.diagnostics and "<ptx>" in info.value.diagnostics


def test_ptxas_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_CUDA_PTXAS", "0")
    assert cuda.find_ptxas() is None
    with pytest.raises(NotSupportedError, match="ptxas not found"):
        cuda.ptxas_check(GOOD_PTX, "sm_80")


# --- NVRTC ----------------------------------------------------------------------------------------


@pytest.fixture
def no_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test sees no libnvrtc, even where one is installed."""
    from svod_min.devices.cuda import nvrtc

    monkeypatch.setenv("SVOD_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13")
    monkeypatch.setattr(nvrtc, "_nvrtc_cache", {})


def test_compile_cuda_without_nvrtc_is_a_clear_error(no_nvrtc: None) -> None:
    with pytest.raises(NotSupportedError) as info:
        cuda.compile_cuda('extern "C" __global__ void k() {}', "sm_80")
    assert str(info.value) == "NVRTC (libnvrtc) not found; ship PTX or install nvidia-cuda-nvrtc==13.0.*"
    assert cuda.info_lines("/nonexistent/libcuda.so.1")[-1].startswith("nvrtc: not found")


# --- the fake driver ------------------------------------------------------------------------------



@pytest.fixture(scope="session")
def fake_so(tmp_path_factory: pytest.TempPathFactory) -> str:
    cc = find_cc()
    if cc is None:
        pytest.skip("no C compiler to build the fake libcuda")
    return build_fake_libcuda(str(tmp_path_factory.mktemp("fakecuda") / "libfakecuda.so"), cc)


class Fake:
    """One private copy of the fake library (its own global state) plus its test controls."""

    def __init__(self, path: str, count: int, version: int, init_rc: int) -> None:
        self.path = path
        self.cfg = ctypes.CDLL(path)
        self.cfg.fake_counter.restype = ctypes.c_long
        self.cfg.fake_counter.argtypes = [ctypes.c_char_p]
        self.cfg.fake_set_mem_limit.argtypes = [ctypes.c_size_t]
        self.cfg.fake_last_launch.restype = ctypes.c_size_t
        self.cfg.fake_configure(init_rc, version, count)

    def driver(self) -> cuda.CudaDriver:
        driver = cuda.load_driver(self.path)
        assert driver is not None, cuda.driver_unavailable_reason(self.path)
        return driver

    def device(self, ordinal: int = 0) -> cuda.CudaDevice:
        return self.driver().device(ordinal)

    def counter(self, name: str) -> int:
        value = self.cfg.fake_counter(name.encode())
        assert value >= 0, name
        return value

    def load_emulator(self, path: str) -> None:
        """Run the real kernel library's code (tests/cuda_emu_support.py) for the entries it exports."""
        assert self.cfg.fake_load_emulator(path.encode()) == 0, path

    def guard_breaches(self) -> int:
        """Allocations whose guard zones were overwritten (out-of-bounds writes), freed ones included."""
        self.cfg.fake_check_guards.restype = ctypes.c_long
        return int(self.cfg.fake_check_guards())

    def last_launch(self) -> Tuple[Tuple[int, ...], bytes, bool]:
        dims, args, extra = (ctypes.c_uint * 7)(), (ctypes.c_ubyte * 512)(), ctypes.c_int()
        size = self.cfg.fake_last_launch(dims, args, 512, ctypes.byref(extra))
        return tuple(dims), bytes(args)[:size], bool(extra.value)


_fake_ids = [0]


@pytest.fixture
def fake(fake_so: str, tmp_path: Path) -> Callable[..., Fake]:
    def make(count: int = 1, version: int = 12040, init_rc: int = 0) -> Fake:
        _fake_ids[0] += 1
        path = str(tmp_path / ("libfakecuda%d.so" % _fake_ids[0]))
        shutil.copyfile(fake_so, path)  # a new inode: dlopen gives it its own globals
        return Fake(path, count, version, init_rc)

    return make


FAKE_PTX = """\
.version 7.0
.target sm_75
.address_size 64

.visible .entry fake_iota(
    .param .u64 fake_iota_param_0,
    .param .u32 fake_iota_param_1
)
{
    ret;
}

.visible .entry fake_axpb(
    .param .u64 fake_axpb_param_0,
    .param .u64 fake_axpb_param_1,
    .param .u32 fake_axpb_param_2,
    .param .u32 fake_axpb_param_3,
    .param .u32 fake_axpb_param_4
)
{
    ret;
}
"""


def _ints(buf: cuda.CudaBuffer) -> List[int]:
    return list(np.frombuffer(buf.copyout(), dtype=np.int32))


def test_fake_every_prototype_binds(fake: Callable[..., Fake]) -> None:
    lib = CudaLibrary(fake().path)
    for name, _ in PROTOTYPES:
        lib.function(name)  # resolved and typed
    assert lib.has("cuGraphAddKernelNode_v2")
    with pytest.raises(CudaSymbolError, match="not in svod_min's CUDA prototype table"):
        lib.call("cuNotAFunction")


def test_fake_first_exported_prefers_the_newest_entry(fake: Callable[..., Fake]) -> None:
    lib = CudaLibrary(fake().path)
    assert lib.first_exported("cuEventElapsedTime_v2", "cuEventElapsedTime") == "cuEventElapsedTime_v2"
    assert lib.first_exported("cuNotInTheTable_v2", "cuEventElapsedTime") == "cuEventElapsedTime"
    with pytest.raises(CudaSymbolError, match="cuNotInTheTable_v2, cuAlsoMissing"):
        lib.first_exported("cuNotInTheTable_v2", "cuAlsoMissing")


def test_fake_checked_call_turns_cuResult_into_CudaError(fake: Callable[..., Fake]) -> None:
    lib = CudaLibrary(fake().path)
    handle = ctypes.c_int()
    with pytest.raises(CudaError) as info:
        lib.call("cuDeviceGet", ctypes.byref(handle), 0)  # before cuInit
    err = info.value
    assert (err.function, err.code, err.name, err.description) == (
        "cuDeviceGet", 3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error")
    assert str(err) == "cuDeviceGet failed: CUDA_ERROR_NOT_INITIALIZED (3): initialization error"
    assert isinstance(err, DeviceError)
    lib.call("cuInit", 0)
    with pytest.raises(CudaError, match=r"CUDA_ERROR_INVALID_DEVICE \(101\): invalid device ordinal"):
        lib.call("cuDeviceGet", ctypes.byref(handle), 5)
    assert lib.call_raw("cuDeviceGet", ctypes.byref(handle), 5) == 101
    unknown = lib.error("cuFoo", 12345)  # the driver has no name for it
    assert (unknown.name, unknown.description) == ("CUDA_ERROR_12345", "unrecognized error code")
    assert not err.sticky and not unknown.sticky
    fault = lib.error("cuStreamSynchronize", 700)  # CUDA_ERROR_ILLEGAL_ADDRESS: a kernel fault
    assert fault.sticky and str(fault).endswith("every later CUDA call in this process will fail: restart the process)")


def test_fake_cuinit_failure_means_no_driver_with_the_drivers_words(fake: Callable[..., Fake]) -> None:
    f = fake(init_rc=100)
    assert cuda.load_driver(f.path) is None
    reason = cuda.driver_unavailable_reason(f.path) or ""
    assert "cuInit failed: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected" in reason
    assert cuda.register_cuda(DeviceRegistry(), path=f.path) is False


def test_fake_zero_devices_is_not_registered(fake: Callable[..., Fake]) -> None:
    f = fake(count=0)
    driver = f.driver()
    assert driver.device_count == 0 and driver.version == 12040 and driver.version_string == "12.4"
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry, path=f.path) is False
    assert "CUDA" not in registry.available_kinds()
    assert "reports no CUDA device" in (cuda.driver_unavailable_reason(f.path) or "")
    with pytest.raises(UnsupportedDeviceError):
        registry.device("CUDA")


def test_fake_devices_are_registered(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry, path=f.path) is True
    assert registry.available_kinds() == ["CUDA"]
    dev1 = registry.device("GPU:1")
    assert dev1 is registry.device("CUDA:1") is f.driver().device(1)
    assert isinstance(dev1, cuda.CudaDevice) and str(dev1.spec) == "CUDA:1" and dev1.name == "CUDA:1"
    assert registry.device("cuda") is f.driver().device(0)
    with pytest.raises(UnsupportedDeviceError, match=r"reports 2 GPU\(s\)"):
        registry.device("CUDA:2")
    with pytest.raises(InvalidDeviceError):
        f.driver().device(7)


def test_fake_discovery_and_info_lines(fake: Callable[..., Fake]) -> None:
    f = fake(count=2, version=12080)
    info = f.driver().device_info(1)
    assert (info.name, info.compute_capability, info.arch, info.total_memory) == ("Fake GPU 1", (8, 0), "sm_80", 16 << 30)
    assert info.limits == LaunchLimits(1024, (1024, 1024, 64), (2**31 - 1, 65535, 65535), 49152, 232448)
    lines = cuda.info_lines(f.path)
    assert lines[0] == "cuda: driver 12.8 via %s, PTX ISA up to 8.7, 2 device(s)" % f.path
    assert lines[1] == "cuda: CUDA:0 Fake GPU 0, sm_80, 16.0 GiB, 4 SMs"
    assert lines[-1].startswith("nvrtc: ")


def test_fake_context_made_current_once_per_thread(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    keep = [dev.allocate(16)]
    start = _counter(dev, "set_current")
    keep += [dev.allocate(16) for _ in range(5)]
    assert _counter(dev, "set_current") == start  # same thread: never again

    def worker() -> None:
        keep.extend(dev.allocate(16) for _ in range(5))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(keep) == 11
    assert _counter(dev, "set_current") == start + 1  # once for the new thread


def _counter(dev: cuda.CudaDevice, name: str) -> int:
    fn = dev.lib._dll.fake_counter
    fn.restype, fn.argtypes = ctypes.c_long, [ctypes.c_char_p]
    return fn(name.encode())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")  # forking is the point
def test_fake_forked_child_is_refused(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    buf = dev.allocate(16)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report the error message through the pipe, never run pytest's teardown
        try:
            try:
                buf.copyout()
                message = "no error"
            except ForkedChildError as exc:
                message = str(exc)
            os.write(write, message.encode())
        finally:
            os._exit(0)
    os.close(write)
    message = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert message == "CUDA was initialised in process %d; it cannot be used in a forked child (use spawn)" % os.getpid()
    assert buf.copyout() == bytes(16)  # the parent is unaffected


def test_fake_buffers_roundtrip_and_zero_fill(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    buf = dev.allocate((2, 3), "float32")
    assert buf.tolist() == [[0.0] * 3, [0.0] * 3]  # the fake's allocations start as 0xAB garbage
    assert (buf.shape, buf.nbytes, len(buf), buf.size, buf.byte_range()) == ((2, 3), 24, 6, 6, (0, 24))
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    buf.copyin(data)
    assert np.array_equal(buf.numpy(), data) and buf.numpy().shape == (2, 3)
    buf.copyin([9, 8, 7, 6, 5, 4])
    assert buf.tolist() == [[9, 8, 7], [6, 5, 4]]
    buf.copyin(struct.pack("6f", *range(6)))
    assert buf.copyout() == struct.pack("6f", *range(6))
    buf.copyin(bytearray(struct.pack("6f", *range(10, 16))))
    assert buf.tolist()[1] == [13.0, 14.0, 15.0]
    buf.copyin(memoryview(struct.pack("6f", *range(20, 26))))  # read-only memoryview
    assert buf.tolist()[0][0] == 20.0
    strided = np.arange(12, dtype=np.float32)[::2]
    buf.copyin(strided)
    assert np.array_equal(buf.numpy().ravel(), strided)
    out = np.zeros(6, np.float32)
    assert buf.copyout_into(out) is out and np.array_equal(out, strided)
    empty = dev.allocate(0)
    assert empty.copyout() == b"" and empty.copyin(b"") is empty


def test_fake_views_and_cpu_buffers(fake: Callable[..., Fake]) -> None:
    from svod_min.devices.cpu import create_cpu_device

    dev = fake().device()
    buf = dev.allocate([8], "int32")
    buf.copyin(list(range(8)))
    view = buf.view(8, 16, shape=(2, 2))
    assert view.storage is buf.storage and view.address == buf.address + 8 and view.byte_range() == (8, 24)
    assert view.tolist() == [[2, 3], [4, 5]]
    view.copyin([-1, -2, -3, -4])
    assert _ints(buf) == [0, 1, -1, -2, -3, -4, 6, 7]
    host = create_cpu_device().allocate([8], "int32")
    buf.copyout_into(host)
    assert host.tolist() == [0, 1, -1, -2, -3, -4, 6, 7]
    host.copyin(list(range(100, 108)))
    buf.copyin(host)
    assert _ints(buf)[0] == 100
    with pytest.raises(BufferAllocationError, match="out of range"):
        buf.view(24, 16)
    with pytest.raises(BufferAllocationError, match="copyin size mismatch"):
        buf.copyin(b"\0" * 4)
    with pytest.raises(BufferAllocationError, match="copyout size mismatch"):
        buf.copyout_into(bytearray(4))
    with pytest.raises(BufferAllocationError, match="does not match buffer dtype"):
        buf.copyin(np.zeros(4, np.float64))
    with pytest.raises(BufferAllocationError, match="writable"):
        buf.copyout_into(b"\0" * 32)
    with pytest.raises(NotSupportedError, match="no numpy dtype"):
        dev.allocate([2], "bfloat16").numpy()


def test_fake_large_copies_go_through_the_pinned_pool(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    dev.staging = StagingPool(dev, chunk=4096, direct_max=1024)
    data = np.random.default_rng(0).integers(0, 255, 3 * 4096 + 123, dtype=np.uint8)
    buf = dev.allocate(data.nbytes)
    buf.copyin(data)
    assert f.counter("live_host") == 2  # two pinned blocks, used in turn
    assert buf.copyout() == data.tobytes()
    small = dev.allocate(100)
    small.copyin(data[:100])
    assert small.copyout() == data[:100].tobytes()
    assert f.counter("live_host") == 2
    dev.staging.release()
    gc.collect()
    assert f.counter("live_host") == 0


def test_fake_staged_copies_split_across_host_threads(fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch) -> None:
    f = fake()
    dev = f.device()
    dev.staging = StagingPool(dev, chunk=5 << 20, direct_max=1024, threads=3)
    pieces: List[int] = []
    real = ctypes.memmove
    monkeypatch.setattr(memory.ctypes, "memmove", lambda d, s, n: (pieces.append(n), real(d, s, n))[1])
    data = np.random.default_rng(1).integers(0, 255, (12 << 20) + 7, dtype=np.uint8)
    buf = dev.allocate(data.nbytes)
    buf.copyin(data)
    # chunks of 5, 5 and 2 MiB + 7 bytes: split 3, 3 and 2 ways (a piece is never below 1 MiB)
    assert len(pieces) == 8 and sum(pieces) == data.nbytes and min(pieces) >= 1 << 20 and max(pieces) < 2 << 20
    del pieces[:]
    out = np.empty_like(data)
    buf.copyout_into(out)  # device -> host through the same split memcpy
    assert np.array_equal(out, data) and len(pieces) == 8
    dev.staging.release()
    monkeypatch.setenv("SVOD_CUDA_COPY_THREADS", "x")
    with pytest.raises(InvalidDeviceError, match="SVOD_CUDA_COPY_THREADS='x'"):
        StagingPool(dev)
    monkeypatch.setenv("SVOD_CUDA_COPY_THREADS", "4")
    assert StagingPool(dev).threads == 4


def test_fake_device_to_device_and_peer_copies(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    a, b = dev0.allocate([4], "int32"), dev0.allocate([4], "int32")
    a.copyin([1, 2, 3, 4])
    b.copyin(a)  # same device: DtoD
    assert _ints(b) == [1, 2, 3, 4]
    c = dev1.allocate([4], "int32")
    dev1.copy_from_peer(c, a)  # other device
    assert _ints(c) == [1, 2, 3, 4]
    assert f.counter("peer_enables") == 1
    dev1.copy_from_peer(c, b)
    assert f.counter("peer_enables") == 1  # remembered
    assert dev0.enable_peer_access(dev1) is True
    a.copyin([9, 8, 7, 6])  # still queued on CUDA:0's stream (the stand-in runs it only when waited for)
    dev1.copy_from_peer(c, a)  # so the peer copy must wait for CUDA:0
    assert _ints(c) == [9, 8, 7, 6]
    dev1.copy_from_peer(c, [5, 6, 7, 8])  # host data: staged
    assert _ints(c) == [5, 6, 7, 8]


def test_fake_allocation_failure_and_leaks(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    before = f.counter("live_dev")
    bufs = [dev.allocate(64) for _ in range(3)]
    view = bufs[0].view(8, 8)
    assert f.counter("live_dev") == before + 3
    del bufs
    gc.collect()
    assert f.counter("live_dev") == before + 1  # the view keeps its storage alive
    del view
    gc.collect()
    assert f.counter("live_dev") == before
    f.cfg.fake_set_mem_limit(1024)
    with pytest.raises(BufferAllocationError, match="CUDA_ERROR_OUT_OF_MEMORY") as info:
        dev.allocate(4096)
    assert isinstance(info.value.__cause__, CudaError)


def test_fake_finalizers_keep_the_threads_current_context(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev0, dev1 = f.device(0), f.device(1)
    buf = dev0.allocate(64)
    dev1.activate(force=True)
    live, pushes = f.counter("live_dev"), f.counter("pushes")
    del buf
    gc.collect()
    assert f.counter("live_dev") == live - 1 and f.counter("pushes") == pushes + 1
    current = ctypes.c_void_p()
    dev1.lib.call("cuCtxGetCurrent", ctypes.byref(current))
    assert current.value == dev1.context_value  # freed under dev0's context, dev1's restored


def test_fake_load_ptx_and_launch(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], local_size=(128,))
    out = dev.allocate([10], "int32")
    iota.execute([out], [7], global_size=(3,))
    assert _ints(out) == [0, 1, 2, 3, 4, 5, 6, 0, 0, 0]
    dims, args, used_extra = f.last_launch()
    assert dims == (3, 1, 1, 128, 1, 1, 0) and used_extra
    assert args == struct.pack("<Qi", out.address, 7)  # 12 bytes: exact, no tail padding
    axpb = dev.load_ptx(FAKE_PTX, "fake_axpb", 2, ["n", "k", "c"])
    res = dev.allocate([10], "int32")
    axpb.execute([res, out], [7, 3, -1], global_size=(1,), local_size=(64, 2))
    assert _ints(res)[:7] == [3 * i - 1 for i in range(7)]
    dims, args, _ = f.last_launch()
    assert dims == (1, 1, 1, 64, 2, 1, 0)
    assert args == struct.pack("<QQiii", res.address, out.address, 7, 3, -1)
    assert dev.module(FAKE_PTX) is iota.module  # one module per distinct text
    assert f.counter("live_modules") == 1


def test_fake_launch_errors_happen_before_launch(fake: Callable[..., Fake]) -> None:
    f = fake(count=2)
    dev = f.device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    out = dev.allocate([4], "int32")
    launches = f.counter("launches")
    with pytest.raises(LaunchConfigError, match="grid dimension 1 is 70000 blocks"):
        iota.execute([out], [4], global_size=(1, 70000))
    with pytest.raises(LaunchConfigError, match="at most 1024"):
        iota.execute([out], [4], global_size=(1,), local_size=(64, 32))
    with pytest.raises(ArgumentRangeError, match="variable n=2147483648"):
        iota.execute([out], [2**31])
    with pytest.raises(ExecutionError, match="takes 1 buffers, got 2"):
        iota.execute([out, out], [4])
    with pytest.raises(ExecutionError, match=r"takes 1 variables \['n'\], got 0"):
        iota.execute([out], [])
    with pytest.raises(ExecutionError, match="not a CUDA buffer"):
        iota.execute([np.zeros(4, np.int32)], [4])
    with pytest.raises(ExecutionError, match="lives on CUDA:1"):
        iota.execute([f.device(1).allocate([4], "int32")], [4])
    with pytest.raises(ExecutionError, match="starts 2 bytes into its allocation, not a multiple of its 4-byte"):
        iota.execute([dev.allocate([8], "int32").view(2, 8)], [2])
    bound = iota.bind([out], [4])
    with pytest.raises(ExecutionError, match="misaligned"):
        bound.set_buffer(0, dev.allocate([8], "int32").view(6, 8))
    add = dev.library_kernel("add", dtype="float64")
    raw = dev.allocate([40], "uint8")  # raw bytes: the kernel's float64 decides the alignment
    with pytest.raises(ExecutionError, match="'a' starts 4 bytes .* 8-byte elements"):
        add.execute([dev.allocate([2], "float64"), raw.view(4, 16), raw.view(24, 16)], [2])
    assert f.counter("launches") == launches
    iota.execute([dev.allocate([8], "int32").view(4, 8)], [2])  # aligned views launch
    assert f.counter("launches") == launches + 1


def test_fake_kernel_thread_limit_is_checked(fake: Callable[..., Fake]) -> None:
    f = fake()
    f.cfg.fake_set_func_max_threads(128)
    prog = f.device().load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    assert prog.max_threads == 128 and prog.limits.max_threads_per_block == 128
    with pytest.raises(LaunchConfigError, match="at most 128 per block"):
        prog.execute([f.device().allocate(16)], [4], local_size=(256,))


def test_fake_dynamic_shared_memory_above_48k_opts_in(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    assert dev.limits.max_shared_optin == 232448 and dev.limits.shared_ceiling == 232448
    prog = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    out = dev.allocate([16], "int32")
    prog.execute([out], [4], shared_bytes=48 << 10)  # within the default: no opt-in
    assert f.counter("func_set_attrs") == 0
    prog.execute([out], [5], shared_bytes=100 << 10)  # the driver refuses this launch without the opt-in
    prog.execute([out], [6], shared_bytes=64 << 10)  # already opted in to more
    assert f.counter("func_set_attrs") == 1 and f.counter("launches") == 3
    assert _ints(out)[:6] == list(range(6))
    with pytest.raises(LaunchConfigError, match=r"shared_bytes=232449 is outside \[0, 232448\]"):
        prog.execute([out], [4], shared_bytes=232449)
    assert f.counter("launches") == 3
    skipped = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], name="no-opt-in")
    skipped._dynamic_shared_max = 1 << 20  # pretend it opted in: the driver refuses the launch ...
    with pytest.raises(CudaError, match="cuLaunchKernel") as info:  # ... and the unchecked fast path reports it
        skipped.execute([out], [4], shared_bytes=150 << 10)  # the function opted in to 100 KiB only
    assert info.value.code == 1 and f.counter("launches") == 3
    big = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], shared_bytes=200 << 10)  # opted in when loaded
    assert big.shared_bytes == 200 << 10 and f.counter("func_set_attrs") == 2
    # without the opt-in attribute (an old driver) the ceiling is the plain per-block limit
    assert cuda.check_shared_bytes(48 << 10, LaunchLimits(max_shared_optin=0)) == 48 << 10
    with pytest.raises(LaunchConfigError, match="1024 of them static"):
        cuda.check_shared_bytes(48 << 10, LaunchLimits(), static_bytes=1024)


def test_fake_bind_patch_and_timed(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    axpb = dev.load_ptx(FAKE_PTX, "fake_axpb", 2, ["n", "k", "c"])
    src, dst, other = dev.allocate([4], "int32"), dev.allocate([4], "int32"), dev.allocate([4], "int32")
    src.copyin([1, 2, 3, 4])
    bound = axpb.bind([dst, src], [4, 2, 0], global_size=(1,), local_size=(4,))
    bound()
    assert _ints(dst) == [2, 4, 6, 8]
    blob_address = ctypes.addressof(bound.blob.buffer)
    bound.set_val(1, 10)
    bound.set_vals([2, 10, 5])
    bound.set_buffer(0, other)
    bound()
    assert _ints(other) == [15, 25, 0, 0] and _ints(dst) == [2, 4, 6, 8]
    assert ctypes.addressof(bound.blob.buffer) == blob_address
    with pytest.raises(ArgumentRangeError):
        bound.set_val(0, -(2**31) - 1)
    events = f.counter("live_events")
    assert axpb.execute_timed([dst, src], [4, 1, 1], local_size=(4,)) == pytest.approx(0.00025)
    assert bound.timed() == pytest.approx(0.00025)
    assert f.counter("live_events") == events + 2  # one pair, reused


def test_fake_graph_runs_nodes_in_any_order_their_edges_allow(fake: Callable[..., Fake]) -> None:
    """The stand-in runs the newest ready node first, as a GPU may: a missing edge shows as a wrong result."""
    f = fake()
    dev = f.device()
    n = 64
    add, relu = dev.library_kernel("add", dtype="float32"), dev.library_kernel("relu", dtype="float32")
    x, t, out = (dev.allocate([n], "float32") for _ in range(3))
    x.copyin(np.arange(n, dtype=np.float32) - n // 2)
    want = np.maximum(2 * (np.arange(n) - n // 2), 0).astype(np.float32)

    def replay(dependencies: Any) -> Any:
        t.copyin(bytes(4 * n))
        out.copyin(bytes(4 * n))
        CudaGraph([add.bind([t, x, x], [n]), relu.bind([out, t], [n])], dependencies).launch()
        return np.frombuffer(out.copyout(), np.float32)

    assert np.array_equal(replay(None), want)  # a chain: relu waits for add
    assert np.array_equal(replay([[], [0]]), want)
    assert not replay([[], []]).any()  # no edge: relu ran first, on zeros
    f.cfg.fake_set_graph_order(1)  # oldest ready first: the missing edge goes unnoticed
    assert np.array_equal(replay([[], []]), want)


def test_fake_graph_replay_patches_only_changed_nodes(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"])
    axpb = dev.load_ptx(FAKE_PTX, "fake_axpb", 2, ["n", "k", "c"])
    x, y = dev.allocate([6], "int32"), dev.allocate([6], "int32")
    first = iota.bind([x], [6])
    second = axpb.bind([y, x], [6, 2, 1])
    graph = CudaGraph([first, second])
    graph.launch()
    assert _ints(y) == [1, 3, 5, 7, 9, 11]
    assert f.counter("set_params") == 0 and f.counter("launches") == 0  # no eager launches at all
    second.set_val(1, 3)
    graph()
    assert _ints(y) == [1, 4, 7, 10, 13, 16]
    assert f.counter("set_params") == 1 and graph.patched == 1
    graph()
    assert f.counter("set_params") == 1 and f.counter("graph_launches") == 3
    eager = dev.allocate([6], "int32")
    second.set_buffer(0, eager)
    graph()
    assert _ints(eager) == _ints(y)
    with pytest.raises(ExecutionError, match="only depend on earlier nodes"):
        CudaGraph([first, second], dependencies=[[], [1]])
    with pytest.raises(ExecutionError, match="at least one"):
        CudaGraph([])
    parallel = CudaGraph([first, second], dependencies=[[], [0]])
    parallel.launch()
    # one patch reaches every graph holding the launch, and blob-level and dims patches count too
    second.blob.set_int(2, 0)  # c = 0
    graph()
    parallel()
    assert _ints(eager) == [0, 3, 6, 9, 12, 15] and graph.patched == 3 and parallel.patched == 1
    second.set_dims((1, 1, 1), (64, 1, 1))
    graph()
    assert graph.patched == 4 and f.counter("set_params") == 5  # 4 for graph, 1 for parallel
    import weakref

    gone = iota.bind([x], [6])
    ref = weakref.ref(gone)
    del gone  # the blob's change hook holds no strong reference: refcounting alone frees the launch
    assert ref() is None
    twice = CudaGraph([second, second])  # the same launch as two nodes: both re-uploaded
    second.set_val(2, 5)
    twice()
    assert twice.patched == 2 and _ints(eager) == [5, 8, 11, 14, 17, 20]
    graph.close()


def test_fake_jit_error_carries_the_log(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    bad = FAKE_PTX.replace("{\n    ret;", "{\n    FAKE_JIT_ERROR;\n    ret;", 1)
    with pytest.raises(CudaError) as info:
        dev.load_ptx(bad, "fake_iota", 1, ["n"])
    err = info.value
    assert err.code == 218 and err.name == "CUDA_ERROR_INVALID_PTX"
    assert "Unknown symbol 'FAKE_JIT_ERROR'" in err.log
    message = str(err)
    assert message.startswith("loading PTX module 'fake_iota' on CUDA:0 (sm_80, driver 12.4): cuModuleLoadDataEx failed")
    assert "JIT log:\nptxas application ptx input, line 7" in message


def test_fake_jit_error_after_lowering_the_version_says_so(fake: Callable[..., Fake]) -> None:
    """NVRTC newer than the driver: the .version is lowered; if the JIT still refuses, the error names the cause."""
    dev = fake(version=12040).device()
    bad = FAKE_PTX.replace(".version 7.0", ".version 9.0").replace("{\n    ret;", "{\n    FAKE_JIT_ERROR;\n    ret;", 1)
    with pytest.raises(CudaError) as info:
        dev.load_ptx(bad, "fake_iota", 1, ["n"], lower_version=True)
    message = str(info.value)
    assert message.startswith("PTX ISA 9.0 was lowered to 8.4, the most this driver (CUDA 12.4) accepts")
    assert "NVRTC no newer than CUDA 12.4" in message and "loading PTX module 'fake_iota'" in message
    assert "Unknown symbol 'FAKE_JIT_ERROR'" in info.value.log and info.value.code == 218
    with pytest.raises(CudaError) as plain:  # nothing lowered: the error stays as the driver gave it
        dev.load_ptx(bad.replace(".version 9.0", ".version 8.0"), "fake_iota", 1, ["n"], lower_version=True)
    assert str(plain.value).startswith("loading PTX module")


def test_fake_ptx_rules_are_checked_before_the_driver(fake: Callable[..., Fake]) -> None:
    f = fake(version=12000)  # accepts PTX up to 8.0
    dev = f.device()
    with pytest.raises(PtxError, match="entry 'missing' not found"):
        dev.load_ptx(FAKE_PTX, "missing", 1, ["n"])
    with pytest.raises(PtxError, match="declares parameters of"):
        dev.load_ptx(FAKE_PTX, "fake_iota", 2, ["n"])
    with pytest.raises(PtxError, match="must run on the device architecture sm_80"):
        dev.load_ptx(FAKE_PTX.replace("sm_75", "sm_90"), "fake_iota", 1, ["n"])
    newer = FAKE_PTX.replace(".version 7.0", ".version 8.4")
    with pytest.raises(PtxError, match=r"driver 12\.0 accepts PTX up to 8\.0; this module is 8\.4"):
        dev.load_ptx(newer, "fake_iota", 1, ["n"])
    assert f.counter("live_modules") == 0
    prog = dev.load_ptx(newer, "fake_iota", 1, ["n"], lower_version=True)
    assert cuda.ptx_version_of(prog.module.text) == (8, 0)
    with pytest.raises(CudaError, match=r"kernel 'nope' not in module .*entries: fake_iota, fake_axpb"):
        prog.module.function("nope")


def test_fake_module_unload_on_collection(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    mod = cuda.CudaModule(dev, FAKE_PTX.encode(), name="m")
    assert f.counter("live_modules") == 1 and mod.kind == "ptx"
    del mod
    gc.collect()
    assert f.counter("live_modules") == 0


def test_fake_library_kernel_end_to_end(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    add = dev.library_kernel("add", dtype="float32")
    assert add.entry_point == "svod_cuda_add_f32" and add.local_size == (256, 1, 1)
    n = 1000
    a, b, out = (dev.allocate([n], "float32") for _ in range(3))
    x, y = np.linspace(-1, 1, n, dtype=np.float32), np.arange(n, dtype=np.float32)
    a.copyin(x)
    b.copyin(y)
    add.execute([out, a, b], [n])
    assert np.array_equal(out.numpy(), x + y)
    assert add.default_grid([n]) == (4, 1, 1) and add.default_grid([10**6]) == (3907, 1, 1)
    with pytest.raises(NotSupportedError, match="no CUDA library kernel"):
        dev.library_kernel("add", dtype="int8")


def _cuda_plan(dev: cuda.CudaDevice, steps: Sequence[Tuple[Any, List[int], List[int]]], buffers: List[Any]) -> Any:
    """An ExecutionPlan over CUDA library programs: steps are (program, buffer indices, vals)."""
    from svod_min.execution_plan import ExecutionPlanBuilder, PreparedKernel
    from svod_min.kernel_cache import CachedKernel

    builder = ExecutionPlanBuilder(dev)
    for i, buf in enumerate(buffers):
        builder.add_buffer(i, buf)
    for op_id, (prog, indices, vals) in enumerate(steps):
        kernel = CachedKernel(
            program=prog, device=str(dev.spec), code="", entry_point=prog.entry_point, var_names=list(prog.var_names),
            globals=list(range(len(indices))), outs=[0], ins=list(range(1, len(indices))),
            global_size=cuda.plan_dims(prog.grid), local_size=prog.local_size,
        )  # fmt: skip
        builder.add_kernel(PreparedKernel(id=op_id, kernel=kernel, buffer_indices=indices, output_indices=[0], vals=vals))
    builder.set_output_buffer(steps[-1][1][0])
    return builder.build()


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


def test_fake_execution_plan_runs_cuda_programs(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    add = dev.library_kernel("add", dtype="float32")
    n = 300
    bufs = [dev.allocate([n], "float32") for _ in range(4)]
    x = np.arange(n, dtype=np.float32)
    bufs[1].copyin(x)
    bufs[2].copyin(x * 2)
    plan = _cuda_plan(dev, [(add, [0, 1, 2], [n]), (add, [3, 0, 2], [n])], bufs)
    assert plan.native_replay is False
    plan.execute()
    assert np.array_equal(plan.output_buffer().numpy(), x * 5)


def test_fake_plan_copies_and_custom_functions_use_the_device_path(fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's copy of CUDA buffers is a device copy, and a host function's writes reach the GPU buffer.

    Eager path (graphs off): with graphs the copy becomes a memcpy node (tests/test_cuda_plans.py).
    """
    from svod_min.execution_plan import PreparedCopy, PreparedCustomFunction, register_custom_function

    monkeypatch.setenv("SVOD_CUDA_GRAPHS", "0")

    dev = fake().device()
    add = dev.library_kernel("add", dtype="float32")
    n = 64
    bufs = [dev.allocate([n], "float32") for _ in range(4)]
    x = np.arange(n, dtype=np.float32)
    bufs[1].copyin(x)
    bufs[2].copyin(x * 2)
    device_copies: List[Tuple[Any, Any]] = []
    real_copy = dev.copy
    monkeypatch.setattr(dev, "copy", lambda dst, src: (device_copies.append((dst, src)), real_copy(dst, src))[1])
    seen: List[Any] = []

    def negate(views: List[Any], _vars: Dict[str, int], _attrs: Dict[str, Any]) -> None:
        seen.append(type(views[0]).__name__)
        views[0][...] = -views[0]

    register_custom_function("test_negate_cuda", negate)
    plan = _cuda_plan(dev, [(add, [0, 1, 2], [n])], bufs)
    builder_ops = [PreparedCopy(id=1, buffer_indices=[3, 0], dependencies=[0]),
                   PreparedCustomFunction(id=2, kind="test_negate_cuda", buffer_indices=[3], dependencies=[1])]  # fmt: skip
    from svod_min.execution_plan import ExecutionPlanBuilder

    builder = ExecutionPlanBuilder(dev)
    for i, buf in enumerate(bufs):
        builder.add_buffer(i, buf)
    builder.add_kernel(plan.prepared_ops()[0])
    for op in builder_ops:
        builder.add_op(op)
    builder.set_output_buffer(3)
    plan = builder.build()
    plan.execute()
    assert [(d is bufs[3], s is bufs[0]) for d, s in device_copies] == [(True, True)]
    assert seen == ["ndarray"]  # the host function got a staged host copy ...
    assert np.array_equal(bufs[3].numpy(), -(x * 3))  # ... and its writes were copied back
    assert np.array_equal(bufs[0].numpy(), x * 3)


def test_copy_buffer_crosses_devices(fake: Callable[..., Fake]) -> None:
    from svod_min.device_registry import DEVICE_FACTORIES
    from svod_min.execution_plan import copy_buffer

    dev = fake().device()
    host = DEVICE_FACTORIES.device("CPU")
    a, b = host.allocate([8], "int32"), host.allocate([8], "int32")
    g = dev.allocate([8], "int32")
    a.copyin(np.arange(8, dtype=np.int32))
    copy_buffer(g, a)  # host -> device
    copy_buffer(b, g)  # device -> host
    assert np.array_equal(b.numpy(), np.arange(8, dtype=np.int32))


def test_fake_interpreter_exit_with_live_objects_is_quiet(fake_so: str, tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import ctypes, sys
        from svod_min.devices import cuda
        ctypes.CDLL(sys.argv[1]).fake_configure(0, 12040, 1)
        dev = cuda.load_driver(sys.argv[1]).device(0)
        bufs = [dev.allocate(1 << 20) for _ in range(3)]
        bufs[0].copyin(bytes(1 << 20))
        prog = dev.load_ptx(sys.argv[2], "fake_iota", 1, ["n"])
        bound = prog.bind([bufs[1]], [5])
        graph = cuda.CudaGraph([bound])
        graph.launch()
        cycle = [bufs, graph]; cycle.append(cycle)  # only the cyclic GC (or exit) can free these
        print("ok")
        """
    )
    import svod_min

    here = str(Path(svod_min.__file__).resolve().parents[1])  # the same svod_min as this process (tree or wheel)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([here] + [p for p in sys.path if p]))
    proc = subprocess.run(
        [sys.executable, "-c", script, fake_so, FAKE_PTX], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


# --- on a real GPU --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu() -> cuda.CudaDevice:
    assert REAL_DRIVER is not None
    return REAL_DRIVER.device(0)


@gpu_test
def test_gpu_registry_and_info() -> None:
    registry = DeviceRegistry()
    assert cuda.register_cuda(registry) is True
    dev = registry.device("GPU:0")
    assert dev is registry.device("CUDA") and dev.arch.startswith("sm_")
    lines = cuda.info_lines()
    assert lines[0].startswith("cuda: driver ") and "CUDA:0" in lines[1]
    free, total = dev.memory_info()
    assert 0 < free <= total


@gpu_test
@pytest.mark.parametrize("nbytes", [1, 1000, 300 << 10, (20 << 20) + 12])
def test_gpu_transfers_both_ways(gpu: cuda.CudaDevice, nbytes: int) -> None:
    data = np.random.default_rng(nbytes).integers(0, 255, nbytes, dtype=np.uint8)
    buf = gpu.allocate(nbytes)
    assert buf.copyout() == bytes(nbytes)  # zero-filled
    buf.copyin(data)
    assert buf.copyout() == data.tobytes()
    other = gpu.allocate(nbytes)
    other.copyin(buf)  # device to device
    out = np.empty(nbytes, np.uint8)
    other.copyout_into(out)
    assert np.array_equal(out, data)
    if nbytes >= 16:
        view = buf.view(8, 8)
        view.copyin(b"\x01" * 8)
        assert buf.copyout()[:16] == data[:8].tobytes() + b"\x01" * 8


@gpu_test
def test_gpu_cpu_transfers_through_the_executor(gpu: cuda.CudaDevice) -> None:
    from svod_min.devices.cpu import create_cpu_device
    from svod_min.executor import UnifiedExecutor

    registry = DeviceRegistry()
    assert cuda.register_cuda(registry)
    registry.register_factory("CPU", lambda spec: create_cpu_device())
    ex = UnifiedExecutor(registry)
    host = create_cpu_device().allocate([1000], "float32")
    host.copyin(list(range(1000)))
    dev_buf = gpu.allocate([1000], "float32")
    ex.execute_transfer(host, dev_buf, "CPU", "CUDA:0")
    back = create_cpu_device().allocate([1000], "float32")
    ex.execute_transfer(dev_buf, back, "CUDA:0", "CPU")
    assert back.tolist() == host.tolist()


# reference implementations for the library kernels ----------------------------------------------

VAR_VALUES = {
    "elementwise": {"n": 5003},
    "reduce": {"outer": 3, "red": 300, "inner": 5},
    "softmax": {"rows": 7, "cols": 300},
    "transpose": {"rows": 45, "cols": 70},
    "matmul": {"M": 33, "N": 47, "K": 29},
}
STORAGE = {"float32": np.float32, "float64": np.float64, "float16": np.float16, "bfloat16": np.uint16,
           "int32": np.int32, "bool": np.uint8}  # fmt: skip


def _to_bf16(x: Any) -> Any:
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _from_storage(raw: Any, dtype: str) -> Any:
    if dtype == "bfloat16":
        return (raw.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.astype(np.float64) if dtype != "int32" else raw


def _inputs(sig: Any, env: Dict[str, int], rng: Any) -> Dict[str, Any]:
    from svod_min.kernels.sig import compile_expr

    out = {}
    positive = sig.name in ("log", "sqrt", "rsqrt")
    for arg in sig.buffers:
        if arg.role == "w":
            continue
        count = compile_expr(arg.count)(env)
        if arg.dtype == "bool":
            raw = rng.integers(0, 2, count).astype(np.uint8)
        elif arg.dtype == "int32":
            raw = rng.integers(-1000, 1000, count).astype(np.int32)
        else:
            values = rng.uniform(0.1, 4.0, count) if positive else rng.uniform(-3.0, 3.0, count)
            raw = _to_bf16(values) if arg.dtype == "bfloat16" else values.astype(STORAGE[arg.dtype])
        out[arg.name] = raw
    return out


def _reference(sig: Any, ins: Dict[str, Any], env: Dict[str, int]) -> Any:
    x = {k: _from_storage(v, a.dtype) for a in sig.buffers for k, v in ins.items() if a.name == k}
    name = sig.name
    unary = {"neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
             "rsqrt": lambda v: 1 / np.sqrt(v), "relu": lambda v: np.where(v < 0, 0, v), "tanh": np.tanh,
             "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
             "gelu": lambda v: v / (1 + np.exp(-2 * 0.7978845608028654 * (v + 0.044715 * v ** 3)))}  # fmt: skip
    binary = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
              "min": np.minimum}  # fmt: skip
    if name in unary:
        return unary[name](x["a"])
    if name in binary:
        return binary[name](x["a"], x["b"])
    if name == "where":
        return np.where(x["c"] != 0, x["a"], x["b"])
    fused = {"add_relu": lambda: unary["relu"](x["a"] + x["b"]), "mul_add": lambda: x["a"] * x["b"] + x["c"],
             "relu_mul_add": lambda: unary["relu"](x["a"] * x["b"] + x["c"]),
             "silu": lambda: x["a"] * unary["sigmoid"](x["a"])}  # fmt: skip
    if name in fused:
        return fused[name]()
    if name.startswith("reduce_"):  # a strided (outer, red, inner) view, like the kernel reads it
        flat = np.ascontiguousarray(x["x"])
        strides = tuple(env[k] * flat.itemsize for k in ("so", "sr", "si"))
        cube = np.lib.stride_tricks.as_strided(flat, (env["outer"], env["red"], env["inner"]), strides)
        return {"reduce_sum": np.sum, "reduce_max": np.max, "reduce_mean": np.mean}[name](cube, axis=1).ravel()
    if name == "softmax":
        rows = x["x"].reshape(env["rows"], env["cols"])
        e = np.exp(rows - rows.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).ravel()
    if name == "transpose":
        return x["x"].reshape(env["rows"], env["cols"]).T.ravel()
    if name == "matmul":
        return (x["a"].reshape(env["M"], env["K"]) @ x["b"].reshape(env["K"], env["N"])).ravel()
    raise AssertionError("no reference for %s" % name)


def _tolerance(sig: Any) -> Tuple[float, float]:
    out = sig.buffers[0].dtype
    if out in ("int32", "bool") or sig.name in ("transpose", "neg", "abs", "relu", "max", "min", "where"):
        return 0.0, 0.0
    if sig.name in ("reduce_sum", "reduce_mean", "softmax", "matmul") and out in ("float32", "float64"):
        return {"float32": (1e-4, 2e-4), "float64": (1e-10, 1e-10)}[out]
    return {"float64": (1e-12, 1e-12), "float32": (3e-5, 1e-5), "float16": (2e-3, 2e-3), "bfloat16": (1e-2, 1e-2)}[out]


def _cuda_sigs() -> List[Any]:
    try:
        from svod_min.kernels import cuda_kernels

        return cuda_kernels()
    except Exception:  # noqa: B902 - the kernel library may be absent in a partial checkout
        return []


def library_env(sig: Any, **sizes: int) -> Dict[str, int]:
    """Variable values for one run of ``sig``: VAR_VALUES overridden by ``sizes``, reduce strides derived."""
    env = dict(VAR_VALUES[sig.module], **sizes)
    if sig.module == "reduce":
        env.setdefault("so", env["red"] * env["inner"])
        env.setdefault("sr", env["inner"])
        env.setdefault("si", 1)
    return env


def check_library_kernel(dev: cuda.CudaDevice, sig: Any, env: Dict[str, int], grid: Optional[Tuple[int, int, int]] = None) -> None:
    """Run library kernel ``sig`` on ``dev`` (a GPU, or the fake driver with the host emulator) vs numpy.

    ``grid`` replaces the signature's grid (fewer blocks than items: the grid-stride loops must cover the rest).
    """
    from svod_min.kernels import ptx_path
    from svod_min.kernels.sig import compile_expr

    ins = _inputs(sig, env, np.random.default_rng(len(sig.entry) + sum(env.values())))
    if grid is None:
        prog = dev.load_signature(sig)
    else:
        text = Path(ptx_path(sig.module)).read_text()
        prog = dev.load_ptx(text, sig.entry, len(sig.buffers), sig.var_names, local_size=sig.block, grid=grid)
    bufs = []
    for arg in sig.buffers:
        buf = dev.allocate([compile_expr(arg.count)(env)], arg.dtype)
        if arg.name in ins:
            buf.copyin(ins[arg.name])
        bufs.append(buf)
    prog.execute(bufs, [env[v] for v in sig.var_names])
    got = _from_storage(np.frombuffer(bufs[0].copyout(), STORAGE[sig.buffers[0].dtype]), sig.buffers[0].dtype)
    want = _reference(sig, ins, env)
    if sig.buffers[0].dtype in ("float16", "bfloat16"):  # computed in float32, rounded once
        want = _from_storage(_to_bf16(want) if sig.buffers[0].dtype == "bfloat16" else want.astype(np.float16), sig.buffers[0].dtype)
    rtol, atol = _tolerance(sig)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg="%s %s" % (sig.entry, env))


def sig_id(sig: Any) -> str:
    return "%s-%s" % (sig.name, "-".join(str(v) for _, v in sig.params))


@gpu_test
@pytest.mark.parametrize("sig", _cuda_sigs(), ids=sig_id)
def test_gpu_library_kernel_matches_numpy(gpu: cuda.CudaDevice, sig: Any) -> None:
    check_library_kernel(gpu, sig, library_env(sig))


def check_plan_equals_cpu(gpu: cuda.CudaDevice, M: int, N: int, K: int) -> None:
    """matmul -> add -> relu as an ExecutionPlan on CUDA device ``gpu`` equals the same kernels on the CPU."""
    from svod_min import kernels
    from svod_min.devices.cpu import create_cpu_device

    rng = np.random.default_rng(M)
    a, b, bias = (rng.standard_normal(s).astype(np.float32) for s in (M * K, K * N, M * N))
    cpu = create_cpu_device()
    host = {name: cpu.allocate([len(v)], "float32").copyin(v) for name, v in (("a", a), ("b", b), ("bias", bias))}
    mm, summed, act = (cpu.allocate([M * N], "float32") for _ in range(3))
    kernels.get("matmul", dtype="float32").run([mm, host["a"], host["b"]], M=M, N=N, K=K)
    kernels.get("add", dtype="float32").run([summed, mm, host["bias"]], n=M * N)
    kernels.get("relu", dtype="float32").run([act, summed], n=M * N)
    bufs = [gpu.allocate([n], "float32") for n in (M * K, K * N, M * N, M * N, M * N, M * N)]
    for buf, v in zip(bufs, (a, b, bias)):
        buf.copyin(v)
    plan = _cuda_plan(gpu, [
        (gpu.library_kernel("matmul", dtype="float32", tile=16), [3, 0, 1], [M, N, K]),
        (gpu.library_kernel("add", dtype="float32"), [4, 3, 2], [M * N]),
        (gpu.library_kernel("relu", dtype="float32"), [5, 4], [M * N]),
    ], bufs)  # fmt: skip
    plan.execute()
    np.testing.assert_allclose(plan.output_buffer().numpy(), act.numpy(), rtol=1e-4, atol=1e-5)


@gpu_test
def test_gpu_plan_on_cuda_equals_cpu(gpu: cuda.CudaDevice) -> None:
    check_plan_equals_cpu(gpu, 40, 70, 33)


@gpu_test
def test_gpu_graph_replay_equals_eager(gpu: cuda.CudaDevice) -> None:
    n = 4096
    add, mul, relu = (gpu.library_kernel(k, dtype="float32") for k in ("add", "mul", "relu"))
    x, y, t1, t2, out, eager = (gpu.allocate([n], "float32") for _ in range(6))
    rng = np.random.default_rng(2)
    x.copyin(rng.standard_normal(n).astype(np.float32))
    y.copyin(rng.standard_normal(n).astype(np.float32))
    launches = [add.bind([t1, x, y], [n]), mul.bind([t2, t1, y], [n]), relu.bind([out, t2], [n])]
    graph = CudaGraph(launches)
    graph.launch()
    for bound in launches[:2]:
        bound()
    relu.execute([eager, t2], [n])
    assert out.copyout() == eager.copyout()
    launches[2].set_buffer(0, eager)  # patch one node's buffer and another's variable
    launches[0].set_val(0, n // 2)
    t1.copyin(bytes(4 * n))
    graph()
    assert graph.patched == 2
    host_t1 = np.frombuffer(t1.copyout(), np.float32)
    assert not host_t1[n // 2:].any() and host_t1[: n // 2].any()


@gpu_test
def test_gpu_bad_ptx_gives_the_jit_log(gpu: cuda.CudaDevice) -> None:
    bad = GOOD_PTX.replace("sm_80", "sm_75").replace("    ret;", "    bogus.instruction.f32 %f1;\n    ret;")
    with pytest.raises(CudaError) as info:
        gpu.load_ptx(bad, "k", 1, ["n"])
    assert info.value.code in (200, 218) and info.value.log
    assert "JIT log:" in str(info.value)


@gpu_test
def test_gpu_out_of_range_launch(gpu: cuda.CudaDevice) -> None:
    add = gpu.library_kernel("add", dtype="float32")
    bufs = [gpu.allocate([16], "float32") for _ in range(3)]
    with pytest.raises(LaunchConfigError, match="grid dimension 1"):
        add.execute(bufs, [16], global_size=(1, gpu.limits.max_grid[1] + 1))
    with pytest.raises(LaunchConfigError, match="threads"):
        add.execute(bufs, [16], local_size=(gpu.limits.max_threads_per_block + 1,))
    with pytest.raises(ArgumentRangeError):
        add.execute(bufs, [2**31])
    add.execute(bufs, [16])  # the device is still fine
    gpu.synchronize()


@gpu_test
def test_gpu_ptx_newer_than_driver_is_refused(gpu: cuda.CudaDevice) -> None:
    assert REAL_DRIVER is not None
    major, minor = cuda.driver_version_tuple(REAL_DRIVER.version)
    too_new = cuda.rewrite_ptx_version(GOOD_PTX.replace("sm_80", "sm_75"), "%d.%d" % (major - 4 + 1, 9))
    with pytest.raises(PtxError, match="accepts PTX up to"):
        gpu.load_ptx(too_new, "k", 1, ["n"])


@gpu_test
def test_gpu_execute_timed_uses_device_time(gpu: cuda.CudaDevice) -> None:
    add = gpu.library_kernel("add", dtype="float32")
    n = 1 << 20
    bufs = [gpu.allocate([n], "float32") for _ in range(3)]
    seconds = add.execute_timed(bufs, [n])
    assert 0 < seconds < 1


@gpu_test
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_gpu_forked_child_is_refused(gpu: cuda.CudaDevice) -> None:
    buf = gpu.allocate(16)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            buf.copyout()
        except ForkedChildError:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert buf.copyout() == bytes(16)


@gpu_test
@pytest.mark.skipif(HAVE_GPU and cuda.find_nvrtc() is None, reason="libnvrtc not found")
def test_gpu_nvrtc_compile_and_run(gpu: cuda.CudaDevice) -> None:
    source = 'extern "C" __global__ void twice(float* out, const float* x, int n) {\n' \
             "    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = 2.0f * x[i]; }\n"
    prog = gpu.compile_cuda(source, "twice", 2, ["n"], local_size=(128,), grid=("ceildiv(n,128)", 1, 1))
    n = 1000
    out, x = gpu.allocate([n], "float32"), gpu.allocate([n], "float32")
    x.copyin(np.arange(n, dtype=np.float32))
    prog.execute([out, x], [n])
    assert np.array_equal(out.numpy(), 2 * np.arange(n, dtype=np.float32))


@gpu_test
@pytest.mark.skipif(HAVE_GPU and REAL_DRIVER.device_count < 2, reason="needs two GPUs")  # type: ignore[union-attr]
def test_gpu_peer_copy() -> None:
    assert REAL_DRIVER is not None
    dev0, dev1 = REAL_DRIVER.device(0), REAL_DRIVER.device(1)
    a, b = dev0.allocate([1000], "float32"), dev1.allocate([1000], "float32")
    a.copyin(np.arange(1000, dtype=np.float32))
    b.copyin(a)
    assert np.array_equal(b.numpy(), np.arange(1000, dtype=np.float32))
