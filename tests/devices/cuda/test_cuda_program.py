"""svod_min.devices.cuda.program: loading modules, programs, bound launches, JIT errors, library kernels."""

from __future__ import annotations

import ctypes
import gc
import struct
from typing import Any, Callable

import pytest
from support.cuda import (  # noqa: F401  (fixtures)
    FAKE_PTX,
    GOOD_PTX,
    HAVE_GPU,
    REAL_DRIVER,
    Fake,
    check_library_kernel,
    cuda_sigs,
    fake,
    fake_so,
    gpu,
    gpu_test,
    int_values,
    library_env,
    no_nvrtc,
    sig_id,
)

from svod_min.devices import cuda
from svod_min.devices.cuda import ArgumentRangeError, CudaError, LaunchConfigError, LaunchLimits, PtxError
from svod_min.error import ExecutionError, NotSupportedError
from svod_min.kernels import cuda_library_kernel

np = pytest.importorskip("numpy")


def test_fake_load_ptx_and_launch(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    iota = dev.load_ptx(FAKE_PTX, "fake_iota", 1, ["n"], local_size=(128,))
    out = dev.allocate([10], "int32")
    iota.execute([out], [7], global_size=(3,))
    assert int_values(out) == [0, 1, 2, 3, 4, 5, 6, 0, 0, 0]
    dims, args, used_extra = f.last_launch()
    assert dims == (3, 1, 1, 128, 1, 1, 0) and used_extra
    assert args == struct.pack("<Qi", out.address, 7)  # 12 bytes: exact, no tail padding
    axpb = dev.load_ptx(FAKE_PTX, "fake_axpb", 2, ["n", "k", "c"])
    res = dev.allocate([10], "int32")
    axpb.execute([res, out], [7, 3, -1], global_size=(1,), local_size=(64, 2))
    assert int_values(res)[:7] == [3 * i - 1 for i in range(7)]
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
    add = cuda_library_kernel(dev, "add", dtype="float64")
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
    assert int_values(out)[:6] == list(range(6))
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
    assert int_values(dst) == [2, 4, 6, 8]
    blob_address = ctypes.addressof(bound.blob.buffer)
    bound.set_val(1, 10)
    bound.set_vals([2, 10, 5])
    bound.set_buffer(0, other)
    bound()
    assert int_values(other) == [15, 25, 0, 0] and int_values(dst) == [2, 4, 6, 8]
    assert ctypes.addressof(bound.blob.buffer) == blob_address
    with pytest.raises(ArgumentRangeError):
        bound.set_val(0, -(2**31) - 1)
    events = f.counter("live_events")
    assert axpb.execute_timed([dst, src], [4, 1, 1], local_size=(4,)) == pytest.approx(0.00025)
    assert bound.timed() == pytest.approx(0.00025)
    assert f.counter("live_events") == events + 2  # one pair, reused


def test_fake_jit_error_carries_the_log(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    bad = FAKE_PTX.replace("{\n    ret;", "{\n    FAKE_JIT_ERROR;\n    ret;", 1)
    with pytest.raises(CudaError) as info:
        dev.load_ptx(bad, "fake_iota", 1, ["n"])
    err = info.value
    assert err.code == 218 and err.name == "CUDA_ERROR_INVALID_PTX"
    assert "Unknown symbol 'FAKE_JIT_ERROR'" in err.log
    message = str(err)
    assert message.startswith(
        "loading PTX module 'fake_iota' on CUDA:0 (sm_90, driver 13.0): cuModuleLoadDataEx failed"
    )
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
    f = fake(version=12000, cc=(8, 0))  # accepts PTX up to 8.0
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
    add = cuda_library_kernel(dev, "add", dtype="float32")
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
        cuda_library_kernel(dev, "add", dtype="int8")


@pytest.mark.parametrize("name, block", [("add", (512,)), ("add", (128,)), ("reduce_sum", (512,)), ("matmul", (8, 8))])
def test_fake_library_kernels_refuse_other_blocks(fake: Callable[..., Fake], name: str, block: Any) -> None:
    """Library kernels size shared arrays and reductions for their signature's block: any other block
    is refused at bind and at set_dims (a wider one would overflow ``part[256]`` on the GPU)."""
    f = fake()
    dev = f.device()
    prog = cuda_library_kernel(dev, name, dtype="float32")
    bufs = [dev.allocate([64 * 64], "float32") for _ in range(len(prog.signature.buffers))]
    vals = [1] * len(prog.var_names)
    launches = f.counter("launches")
    with pytest.raises(LaunchConfigError, match="written for block"):
        prog.bind(bufs, vals, local_size=block)
    bound = prog.bind(bufs, vals)  # its own block
    with pytest.raises(LaunchConfigError, match="written for block"):
        bound.set_dims((1, 1, 1), block)
    assert bound.block == tuple(prog.local_size) and f.counter("launches") == launches


@gpu_test
@pytest.mark.parametrize("sig", cuda_sigs(), ids=sig_id)
def test_gpu_library_kernel_matches_numpy(gpu: cuda.CudaDevice, sig: Any) -> None:
    check_library_kernel(gpu, sig, library_env(sig))


@gpu_test
def test_gpu_bad_ptx_gives_the_jit_log(gpu: cuda.CudaDevice) -> None:
    bad = GOOD_PTX.replace("sm_80", "sm_75").replace("    ret;", "    bogus.instruction.f32 %f1;\n    ret;")
    with pytest.raises(CudaError) as info:
        gpu.load_ptx(bad, "k", 1, ["n"])
    assert info.value.code in (200, 218) and info.value.log
    assert "JIT log:" in str(info.value)


@gpu_test
def test_gpu_out_of_range_launch(gpu: cuda.CudaDevice) -> None:
    add = cuda_library_kernel(gpu, "add", dtype="float32")
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
    add = cuda_library_kernel(gpu, "add", dtype="float32")
    n = 1 << 20
    bufs = [gpu.allocate([n], "float32") for _ in range(3)]
    seconds = add.execute_timed(bufs, [n])
    assert 0 < seconds < 1


# --- NVRTC (here, not in test_cuda_nvrtc.py, whose tests all skip without libnvrtc) ----------------------


def test_compile_cuda_without_nvrtc_is_a_clear_error(no_nvrtc: None) -> None:
    with pytest.raises(NotSupportedError) as info:
        cuda.compile_cuda('extern "C" __global__ void k() {}', "sm_80")
    assert str(info.value) == "NVRTC (libnvrtc) not found; ship PTX or install nvidia-cuda-nvrtc==13.0.*"
    assert cuda.info_lines("/nonexistent/libcuda.so.1")[-1].startswith("nvrtc: not found")


@gpu_test
@pytest.mark.skipif(HAVE_GPU and cuda.find_nvrtc() is None, reason="libnvrtc not found")
def test_gpu_nvrtc_compile_and_run(gpu: cuda.CudaDevice) -> None:
    source = (
        'extern "C" __global__ void twice(float* out, const float* x, int n) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = 2.0f * x[i]; }\n"
    )
    prog = gpu.compile_cuda(source, "twice", 2, ["n"], local_size=(128,), grid=("ceildiv(n,128)", 1, 1))
    n = 1000
    out, x = gpu.allocate([n], "float32"), gpu.allocate([n], "float32")
    x.copyin(np.arange(n, dtype=np.float32))
    prog.execute([out, x], [n])
    assert np.array_equal(out.numpy(), 2 * np.arange(n, dtype=np.float32))


def test_fake_driver_refuses_a_library_entry_under_another_block(fake: Callable[..., Fake]) -> None:
    """The library PTX's `.reqntid` reaches the driver: the same code loaded without its signature cannot
    run with a block it was not written for, whether svod_min launches it (refused first, from the PTX's
    own directive, which is also the default block) or the driver is called directly."""
    from pathlib import Path

    from svod_min.kernels import cuda_kernels, ptx_path

    f = fake()
    dev = f.device()
    sig = next(s for s in cuda_kernels() if s.name == "reduce_sum" and dict(s.params)["dtype"] == "float32")
    text = Path(ptx_path(sig.module)).read_text()
    raw = dev.load_ptx(text, sig.entry, len(sig.buffers), sig.var_names)
    assert raw.max_threads == 256 and raw.required_block == raw.local_size == (256, 1, 1)  # from the PTX
    out, x = dev.allocate([4], "float32"), dev.allocate([4 * 300], "float32")
    vals = [4, 300, 1, 300, 1, 1]
    with pytest.raises(
        LaunchConfigError, match=r"requires block \[256, 1, 1\] \(.reqntid in its PTX\); got block \[128, 1, 1\]"
    ):
        raw.execute([out, x], vals, global_size=(4,), local_size=(128,))  # would sum only half of each row
    with pytest.raises(LaunchConfigError, match=r"local_size \[128, 1, 1\], but the PTX requires block \[256, 1, 1\]"):
        dev.load_ptx(text, sig.entry, len(sig.buffers), sig.var_names, local_size=(128,))
    blob = cuda.pack_kernel_args([out.address, x.address], vals)
    u = ctypes.c_uint
    with pytest.raises(CudaError, match="CUDA_ERROR_INVALID_VALUE"):
        dev.lib.call(
            "cuLaunchKernel", raw.function, u(4), u(1), u(1), u(128), u(1), u(1), u(0), dev.stream, None, blob.extra
        )
    raw.execute([out, x], vals, global_size=(4,))
    assert f.counter("launches") == 1


def test_fake_load_ptx_refuses_a_float_scalar(fake: Callable[..., Fake]) -> None:
    """A `.f32` scalar has 4 bytes like svod's int32: only its type tells that it would get an int's bits."""
    dev = fake().device()
    text = FAKE_PTX.replace(".param .u32 fake_iota_param_1", ".param .f32 fake_iota_param_1")
    with pytest.raises(PtxError, match=r"kernel fake_iota parameter 1 is \.f32; svod passes an int32 there"):
        dev.load_ptx(text, "fake_iota", 1, ["n"])
    signed = FAKE_PTX.replace(".param .u32 fake_iota_param_1", ".param .s32 fake_iota_param_1")
    out = dev.allocate([4], "int32")
    dev.load_ptx(signed, "fake_iota", 1, ["n"]).execute([out], [4])
    assert int_values(out) == [0, 1, 2, 3]


_PARAMS_PTX = FAKE_PTX.replace(".param .u32 fake_axpb_param_4", ".param .align 8 .b8 fake_axpb_param_4[12]")


@pytest.mark.skipif(cuda.find_ptxas() is None, reason="ptxas not found (CUDA toolkit not installed)")
def test_cubin_parameter_sizes_are_read_and_checked(fake: Callable[..., Fake]) -> None:
    """ptxas records each parameter's size in the CUBIN: read back, they equal the PTX's own declaration
    (the reference), and load_cubin refuses a mismatch before the driver sees the image."""
    for arch in ("sm_75", "sm_90"):
        for entry, text in (("fake_axpb", FAKE_PTX), ("fake_iota", FAKE_PTX), ("fake_axpb", _PARAMS_PTX)):
            cubin = cuda.ptxas_check(text, arch)
            assert cuda.cubin_entry_params(cubin, entry) == cuda.ptx_entry_params(text, entry), (arch, entry)
    cubin = cuda.ptxas_check(FAKE_PTX, "sm_90")
    assert cuda.cubin_entry_params(cubin, "missing") is None
    assert cuda.cubin_entry_params(cubin[:200], "fake_iota") is None  # truncated: not judged here
    assert cuda.cubin_entry_params(b"\x50\xed\x55\xba fatbin", "fake_iota") is None
    f = fake()
    dev = f.device()
    with pytest.raises(
        PtxError, match=r"CUBIN kernel fake_axpb declares parameters of \[8, 8, 4, 4, 4\] bytes; svod passes 1"
    ):
        dev.load_cubin(cubin, "fake_axpb", 1, ["n", "k", "c"])
    assert f.counter("live_modules") == 0
    with pytest.raises(CudaError, match="CUDA_ERROR_NOT_FOUND"):  # past the check; the stand-in cannot run SASS
        dev.load_cubin(cubin, "fake_axpb", 2, ["n", "k", "c"])
