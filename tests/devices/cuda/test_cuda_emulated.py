"""The CUDA kernel library's real code, run on the host: every library kernel against numpy without a GPU.

The stand-in driver (tests/support/fake_libcuda.c) loads the host emulation built by
tests/support/cuda_emu.py from the shipped ``.cu`` sources (the sources of the
shipped PTX). A launch through svod_min's real CUDA path (PTX checks, argument
blob, grid and block from the signature, graphs) then runs the entry's own code:
every thread of every block, ``__syncthreads()`` as a barrier, shared memory
per block. Each allocation carries guard zones, so a kernel that writes out of
bounds fails the test even when its visible output is right.

This checks the kernels' index math, boundary handling, grid-stride loops and
reductions, and the launch geometry svod_min computes for them. It does not
check the PTX (``ptxas`` does, in test_cuda_ptx.py) or GPU rounding; a real GPU run
(``.ci/gpu-session``) does both: the tests taking the ``device`` fixture run on
the GPU as well where there is one.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Tuple

import pytest
from support.cuda import (  # noqa: F401  (fixtures)
    FAKE_GENERATIONS,
    GPU_REASON,
    HAVE_GPU,
    REAL_DRIVER,
    Fake,
    check_library_kernel,
    check_plan_equals_cpu,
    cuda_sigs,
    fake,
    fake_so,
    library_env,
    sig_id,
)
from support.cuda_emu import build_emulator, cuda_sources, entries, find_cxx
from support.paths import REPO as REPO_PATH

from svod_min.devices import cuda
from svod_min.devices.cuda import CudaError, CudaGraph
from svod_min.kernels import cuda_library_kernel

np = pytest.importorskip("numpy")

SIGS = cuda_sigs()
F32 = [s for s in SIGS if dict(s.params).get("dtype") == "float32"]


@pytest.fixture(scope="session")
def emulator_so(tmp_path_factory: pytest.TempPathFactory) -> str:
    cxx = find_cxx()
    if cxx is None:
        pytest.skip("no C++ compiler to build the CUDA host emulator")
    if not cuda_sources():
        pytest.skip("no generated .cu sources in this svod_min")
    return build_emulator(str(tmp_path_factory.mktemp("cudaemu")), cxx)


@pytest.fixture
def emu(fake: Callable[..., Fake], emulator_so: str) -> Iterator[Fake]:
    driver = fake()
    driver.load_emulator(emulator_so)
    yield driver
    assert driver.guard_breaches() == 0, "a kernel wrote outside its buffers"


@pytest.fixture(params=["emulated", "gpu"])
def device(request: Any) -> cuda.CudaDevice:
    """The emulated device, and a real GPU where there is one (the same checks, run by .ci/gpu-session)."""
    if request.param == "gpu":
        if not HAVE_GPU:
            pytest.skip(GPU_REASON)
        assert REAL_DRIVER is not None
        return REAL_DRIVER.device(0)
    return request.getfixturevalue("emu").device()


@pytest.mark.parametrize("generation", FAKE_GENERATIONS)
def test_library_families_on_each_gpu_generation(fake: Callable[..., Fake], emulator_so: str, generation: Any) -> None:
    """One kernel of each library family, its real code, on the default stand-in (cc 9.0, driver 13000) and
    on the older GPU and driver (cc 8.0, driver 12040): the shipped PTX loads and launches on both."""
    version, cc = generation
    f = fake(version=version, cc=cc)
    f.load_emulator(emulator_so)
    dev = f.device()
    for sig in SIGS:
        if dict(sig.params).get("dtype") == "float32" and sig.name in (
            "add",
            "reduce_sum",
            "softmax",
            "transpose",
            "matmul",
        ):
            check_library_kernel(dev, sig, library_env(sig))
    assert f.guard_breaches() == 0


def test_every_library_entry_is_emulated() -> None:
    emulated = {name for src in cuda_sources() for name in entries(src)}
    assert SIGS, "no CUDA kernel signatures"
    missing = sorted({s.entry for s in SIGS} - emulated)
    assert not missing, "library entries without CUDA C source: %s" % missing


@pytest.mark.parametrize("sig", SIGS, ids=sig_id)
def test_library_kernel_matches_numpy(emu: Fake, sig: Any) -> None:
    check_library_kernel(emu.device(), sig, library_env(sig))


SHARED_MODULES = ("reduce", "softmax", "matmul", "transpose")
SHARED_MEMORY = [s for s in SIGS if s.module in SHARED_MODULES]


@pytest.fixture
def emu_reversed(emu: Fake, emulator_so: str) -> Iterator[Fake]:
    """The emulator running each block's threads last to first between barriers."""
    runtime = ctypes.CDLL(emulator_so)  # the same handle the fake driver opened: one flag
    runtime.svod_emu_set_reverse(1)
    try:
        yield emu
    finally:
        runtime.svod_emu_set_reverse(0)


@pytest.mark.parametrize("sig", SHARED_MEMORY, ids=sig_id)
def test_shared_memory_kernels_in_reverse_thread_order(emu_reversed: Fake, sig: Any) -> None:
    """A thread reading shared memory that another thread of its block writes in the same phase (a missing
    barrier) reads too early or too late in at least one of the two orders; forward order runs in the others."""
    check_library_kernel(emu_reversed.device(), sig, library_env(sig))


# Sizes at the edges of each kernel's blocking: one element, a block +- 1, tiles that do not divide.
EDGE_SIZES: Dict[str, List[Dict[str, int]]] = {
    "elementwise": [{"n": 1}, {"n": 255}, {"n": 256}, {"n": 257}],
    "reduce": [
        {"outer": 1, "red": 1, "inner": 1},
        {"outer": 2, "red": 257, "inner": 1},
        {"outer": 1, "red": 1000, "inner": 1},
        {"outer": 5, "red": 3, "inner": 7},
        {"outer": 4, "red": 5, "inner": 3, "so": 3, "sr": 12, "si": 1},
    ],  # x laid out (red, outer, inner)
    "softmax": [{"rows": 1, "cols": 1}, {"rows": 3, "cols": 257}, {"rows": 2, "cols": 1000}],
    "transpose": [{"rows": 1, "cols": 1}, {"rows": 32, "cols": 32}, {"rows": 33, "cols": 65}, {"rows": 1, "cols": 100}],
    "matmul": [
        {"M": 1, "N": 1, "K": 1},
        {"M": 16, "N": 32, "K": 16},
        {"M": 17, "N": 15, "K": 33},
        {"M": 2, "N": 70, "K": 3},
    ],
}


def _edge_cases() -> List[Tuple[Any, Dict[str, int]]]:
    return [(sig, sizes) for sig in F32 for sizes in EDGE_SIZES[sig.module]]


def _case_id(value: Any) -> str:
    return sig_id(value) if hasattr(value, "entry") else "-".join("%s%d" % kv for kv in value.items())


@pytest.mark.parametrize("sig, sizes", _edge_cases(), ids=_case_id)
def test_library_kernel_edge_sizes(device: cuda.CudaDevice, sig: Any, sizes: Dict[str, int]) -> None:
    check_library_kernel(device, sig, library_env(sig, **sizes))


@pytest.mark.parametrize("sig, sizes", [c for c in _edge_cases() if c[0].module in SHARED_MODULES], ids=_case_id)
def test_shared_memory_kernels_at_edge_sizes_in_reverse_thread_order(
    emu_reversed: Fake, sig: Any, sizes: Dict[str, int]
) -> None:
    check_library_kernel(emu_reversed.device(), sig, library_env(sig, **sizes))


# Grid-stride kernels get fewer blocks than work items: the loops must cover the rest (on a GPU this
# happens past the 65535-block cap, at sizes too large for the emulator).
STRIDED: Dict[str, Dict[str, int]] = {
    "elementwise": {"n": 2000},
    "reduce": {"outer": 3, "red": 40, "inner": 5},
    "softmax": {"rows": 9, "cols": 70},
}


@pytest.mark.parametrize("sig", [s for s in F32 if s.module in STRIDED], ids=sig_id)
def test_grid_stride_loops_cover_more_work_than_blocks(device: cuda.CudaDevice, sig: Any) -> None:
    check_library_kernel(device, sig, library_env(sig, **STRIDED[sig.module]), grid=(2, 1, 1))


def test_plan_on_emulated_cuda_equals_cpu(emu: Fake) -> None:
    check_plan_equals_cpu(emu.device(), 20, 37, 19)


def test_graph_replay_equals_eager(device: cuda.CudaDevice) -> None:
    dev = device
    n = 1000
    softmax, reduce_sum = (
        cuda_library_kernel(dev, "softmax", dtype="float32"),
        cuda_library_kernel(dev, "reduce_sum", dtype="float32"),
    )
    x, probs, sums, eager = (dev.allocate([size], "float32") for size in (n, n, 10, 10))
    x.copyin(np.random.default_rng(4).standard_normal(n).astype(np.float32))
    launches = [softmax.bind([probs, x], [10, 100]), reduce_sum.bind([sums, probs], [10, 100, 1, 100, 1, 1])]
    CudaGraph(launches).launch()
    reduce_sum.execute([eager, probs], [10, 100, 1, 100, 1, 1])
    np.testing.assert_allclose(np.frombuffer(sums.copyout(), np.float32), 1.0, rtol=1e-5)
    assert sums.copyout() == eager.copyout()


def test_default_plan_on_emulated_cuda_equals_cpu_eager_and_graphed(emu: Fake) -> None:
    from test_cuda_plans import check_default_plan_on

    check_default_plan_on(emu.device())


def test_selfcheck_on_emulated_cuda(emu: Fake) -> None:
    from svod_min.kernels.selfcheck import run_selfcheck

    results = run_selfcheck(emu.device())
    assert len(results) == 5 and all(r.ok for r in results), results


def test_cli_runs_the_default_plan_on_emulated_cuda(fake_so: str, emulator_so: str, tmp_path: Path) -> None:
    import svod_min

    here = str(Path(svod_min.__file__).resolve().parents[1])
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([here] + [p for p in sys.path if p]),
        SVOD_CUDA_LIBRARY=fake_so,
        FAKE_CUDA_DEVICES="1",
        FAKE_CUDA_EMULATOR=emulator_so,
        SVOD_CUDA="1",
    )
    for extra in ([], ["--var", "rows=3"], ["--repeat", "3"]):
        proc = subprocess.run(
            [sys.executable, "-m", "svod_min", "run", "--device", "CUDA"] + extra,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=str(tmp_path),
        )
        assert proc.returncode == 0 and "verify y: ok" in proc.stdout, proc.stdout + proc.stderr


# --- the emulator itself: what it must catch -------------------------------------------------------

BAD_CU = r"""
extern "C" __global__ void bad_barrier(float *out, int n) {
    if (threadIdx.x == 0) return;  /* thread 0 skips the barrier: undefined on a GPU */
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
extern "C" __global__ void write_past_end(float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i <= n) out[i] = 2.0f;  /* off by one */
}
"""
BAD_PTX = """\
.version 7.0
.target sm_75
.address_size 64

.visible .entry bad_barrier(.param .u64 out, .param .u32 n) { ret; }
.visible .entry write_past_end(.param .u64 out, .param .u32 n) { ret; }
"""


@pytest.fixture(scope="session")
def bad_emulator_so(tmp_path_factory: pytest.TempPathFactory) -> str:
    cxx = find_cxx()
    if cxx is None:
        pytest.skip("no C++ compiler to build the CUDA host emulator")
    out = tmp_path_factory.mktemp("cudaemu_bad")
    src = out / "bad.cu"
    src.write_text(BAD_CU)
    return build_emulator(str(out), cxx, sources=[str(src)])


def test_emulator_fails_a_launch_whose_threads_skip_a_barrier(fake: Callable[..., Fake], bad_emulator_so: str) -> None:
    driver = fake()
    driver.load_emulator(bad_emulator_so)
    dev = driver.device()
    prog = dev.load_ptx(BAD_PTX, "bad_barrier", 1, ["n"], local_size=(32, 1, 1), grid=(1, 1, 1))
    prog.execute([dev.allocate([32], "float32")], [32])  # queued: like a GPU, the fault shows at the next wait
    with pytest.raises(
        CudaError, match="cuStreamSynchronize failed: CUDA_ERROR_LAUNCH_FAILED.*restart the process"
    ) as info:
        dev.synchronize()
    assert info.value.sticky
    with pytest.raises(CudaError, match="CUDA_ERROR_LAUNCH_FAILED"):  # and stays: the context is lost
        dev.synchronize()


def test_emulator_catches_a_write_past_the_end(fake: Callable[..., Fake], bad_emulator_so: str) -> None:
    driver = fake()
    driver.load_emulator(bad_emulator_so)
    dev = driver.device()
    prog = dev.load_ptx(BAD_PTX, "write_past_end", 1, ["n"], local_size=(64, 1, 1), grid=(1, 1, 1))
    buf = dev.allocate([40], "float32")
    prog.execute([buf], [40])
    assert np.frombuffer(buf.copyout(), np.float32).tolist() == [2.0] * 40  # the visible output looks right
    assert driver.guard_breaches() == 1
    del buf
    assert driver.guard_breaches() == 1  # still counted once freed


def test_reduce_rows_and_columns_of_one_matrix(device: cuda.CudaDevice) -> None:
    """The same buffer reduced along either axis, only the strides differ (a pure-Python loop as reference)."""
    dev = device
    prog = cuda_library_kernel(dev, "reduce_sum", dtype="float32")
    rows, cols = 2, 3
    values = [float(v) for v in range(rows * cols)]
    x = dev.allocate([rows * cols], "float32")
    x.copyin(np.array(values, np.float32))
    by_row, by_col = dev.allocate([rows], "float32"), dev.allocate([cols], "float32")
    prog.execute([by_row, x], [rows, cols, 1, cols, 1, 1])
    prog.execute([by_col, x], [cols, rows, 1, 1, cols, 1])
    assert np.frombuffer(by_row.copyout(), np.float32).tolist() == [
        sum(values[r * cols : (r + 1) * cols]) for r in range(rows)
    ]
    assert np.frombuffer(by_col.copyout(), np.float32).tolist() == [sum(values[c::cols]) for c in range(cols)]


@pytest.mark.python_independent  # a bash script driving its own python3 child
def test_gpu_session_smoke_step_dry_run(fake_so: str, emulator_so: str, tmp_path: Path) -> None:
    """`.ci/gpu-session smoke` against the stand-in driver running the library's real code: it passes, and
    it fails when the kernels do not run (the stand-in without the emulator leaves mul_add's output unset)."""
    root = REPO_PATH
    env = dict(os.environ, SVOD_CUDA_LIBRARY=fake_so, FAKE_CUDA_DEVICES="1", FAKE_CUDA_EMULATOR=emulator_so)
    out = tmp_path / "ok"
    proc = subprocess.run(
        ["bash", str(root / ".ci" / "gpu-session"), "smoke", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match numpy" in (out / "smoke.txt").read_text()
    assert (out / "summary.txt").read_text().splitlines()[-1] == "gpu-session smoke: PASSED; outputs in %s" % out
    del env["FAKE_CUDA_EMULATOR"]
    out = tmp_path / "broken"
    proc = subprocess.run(
        ["bash", str(root / ".ci" / "gpu-session"), "smoke", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "smoke: FAILED" in (out / "summary.txt").read_text()
    assert "AssertionError" in (out / "smoke.txt").read_text()  # numpy's comparison, not a crash
