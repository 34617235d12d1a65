"""NVRTC (the optional CUDA C -> PTX compiler) exercised for real, without a GPU.

NVRTC needs no driver: given ``libnvrtc`` (``.ci/run`` fetches the
``nvidia-cuda-nvrtc`` wheel and sets ``SVOD_NVRTC_LIBRARY``; any toolkit or pip
install is found too), these tests run svod_min's NVRTC binding end to end: every
library ``.cu`` source compiles to PTX that passes svod's PTX rules, has the
shipped module's entries and assembles with ``ptxas``; compile errors carry
NVRTC's log; options reach the compiler; and a kernel compiled at run time loads
on an older (stand-in) driver after its ``.version`` is lowered, then runs its own
code through the host emulator (tests/support/cuda_emu.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest
from support.cuda import Fake, fake, fake_so  # noqa: F401  (fixtures)
from support.cuda_emu import build_emulator, cuda_sources, entries, find_cxx
from support.paths import REPO as REPO_PATH

from svod_min.devices import cuda
from svod_min.devices.cuda import load_nvrtc
from svod_min.error import CompilationError

np = pytest.importorskip("numpy")

pytestmark = pytest.mark.skipif(
    cuda.find_nvrtc() is None, reason="libnvrtc not found (pip install nvidia-cuda-nvrtc, or set SVOD_NVRTC_LIBRARY)"
)
EXAMPLES = REPO_PATH / "examples"


def test_nvrtc_loads_and_reports_its_version() -> None:
    nvrtc = load_nvrtc()
    assert nvrtc.version >= (11, 2), nvrtc.version
    line = "nvrtc: %s, CUDA %d.%d" % ((cuda.find_nvrtc(),) + nvrtc.version)
    assert cuda.info_lines("/nonexistent/libcuda.so.1")[-1] == line  # no driver: nothing to compare with


def test_info_says_when_nvrtc_is_newer_than_the_driver(fake: Callable[..., Fake]) -> None:
    nvrtc = load_nvrtc()
    old = fake(version=12000)  # CUDA 12.0: PTX ISA up to 8.0
    assert nvrtc.version > (12, 0)
    assert cuda.info_lines(old.path)[-1].endswith(
        "(newer than the driver, CUDA 12.0: its PTX is lowered to ISA 8.0 on load)"
    )
    new = fake(version=(nvrtc.version[0] + 1) * 1000)
    assert cuda.info_lines(new.path)[-1] == "nvrtc: %s, CUDA %d.%d" % ((cuda.find_nvrtc(),) + nvrtc.version)


@pytest.mark.parametrize("source", cuda_sources(), ids=os.path.basename)
@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_library_sources_compile_through_nvrtc(source: str, arch: str) -> None:
    """The CUDA C the PTX library ships compiles at run time to PTX with the same entries, within svod's rules."""
    from svod_min.kernels import ptx_path

    ptx = cuda.compile_cuda(Path(source).read_text(), arch, name=os.path.basename(source))
    info = cuda.validate_ptx(ptx, arch)
    module = os.path.basename(source)[: -len(".cu")]
    shipped = cuda.validate_ptx(Path(ptx_path(module)).read_text(), arch)
    assert set(info.entries) == set(shipped.entries) == set(entries(source))
    if cuda.find_ptxas() is not None:
        assert cuda.ptxas_check(ptx, arch).startswith(b"\x7fELF")


def test_compile_error_carries_nvrtcs_log() -> None:
    with pytest.raises(CompilationError, match="NVRTC could not compile broken.cu") as info:
        cuda.compile_cuda(
            'extern "C" __global__ void k(float *x) { x[0] = undefined_thing; }', "sm_80", name="broken.cu"
        )
    assert "undefined_thing" in info.value.diagnostics and "broken.cu(1)" in info.value.diagnostics


def test_options_reach_nvrtc() -> None:
    source = (
        "#ifndef SCALE\n#error SCALE is not defined\n#endif\n"
        'extern "C" __global__ void k(float *x) { x[0] *= SCALE; }\n'
    )
    with pytest.raises(CompilationError) as info:
        cuda.compile_cuda(source, "sm_80")
    assert "SCALE is not defined" in info.value.diagnostics
    assert ".entry k(" in cuda.compile_cuda(source, "sm_80", options=["-DSCALE=3.0f"])


def test_run_time_cuda_c_loads_on_an_older_driver_and_runs_its_own_code(
    fake: Callable[..., Fake], tmp_path: Path
) -> None:
    """NVRTC 13 writes PTX ISA 9.x; a CUDA 12.4 driver takes at most 8.4: the device lowers it, then launches."""
    cxx = find_cxx()
    if cxx is None:
        pytest.skip("no C++ compiler to build the CUDA host emulator")
    source = EXAMPLES / "saxpy.cu"
    driver = fake(version=12040)
    driver.load_emulator(build_emulator(str(tmp_path), cxx, sources=[str(source)]))
    dev = driver.device()
    assert cuda.validate_ptx(cuda.compile_cuda(source.read_text(), dev.arch)).version > (8, 4)
    prog = dev.compile_cuda(
        source.read_text(), "saxpy", 2, ["n"], local_size=(128, 1, 1), grid=("ceildiv(n,128)", 1, 1)
    )
    n = 1000
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    bx, by = dev.allocate([n], "float32"), dev.allocate([n], "float32")
    bx.copyin(x)
    by.copyin(y)
    prog.execute([by, bx], [n])
    np.testing.assert_allclose(np.frombuffer(by.copyout(), np.float32), 2 * x + y, rtol=1e-6)
    assert driver.guard_breaches() == 0


def test_plan_with_a_cuda_c_form_compiles_at_load_time(fake: Callable[..., Fake]) -> None:
    """A plan kernel's ``cuda.source`` goes through NVRTC when the plan loads on a CUDA device, then runs."""
    from test_cuda_plans import _axpb_doc

    from svod_min.planfile.load import load_plan

    source = (
        'extern "C" __global__ void fake_axpb(int *out, const int *in, int n, int k, int c) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] * k + c; }\n"
    )
    loaded = load_plan(
        _axpb_doc({"source": source, "grid": ["ceildiv(n,32)", 1, 1], "block": [32, 1, 1]}), device=fake().device()
    )
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify()), loaded.verify()
    broken = _axpb_doc({"source": source.replace("in[i]", "in[j]"), "grid": [1, 1, 1], "block": [32, 1, 1]})
    with pytest.raises(CompilationError, match="fake_axpb") as info:
        load_plan(broken, device=fake().device())
    assert 'identifier "j" is undefined' in info.value.diagnostics
