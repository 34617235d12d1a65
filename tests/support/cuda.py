"""The CUDA tests' shared pieces: the stand-in driver (``tests/support/fake_libcuda.c`` built with gcc, one private copy
per test), the real-GPU switches (``gpu_test``, ``REAL_DRIVER``) and the kernel-library checks against numpy.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

from support.cuda_emu import build_fake_libcuda, find_cc
from svod_min.devices import cuda
from svod_min.kernels import cuda_library_kernel

np = pytest.importorskip("numpy")

REAL_DRIVER = cuda.load_driver()


HAVE_GPU = REAL_DRIVER is not None and REAL_DRIVER.device_count > 0


GPU_REASON = cuda.NO_DRIVER_REASON if REAL_DRIVER is None else "the NVIDIA driver reports no GPU"


def gpu_test(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test as needing a real GPU (skips with the reason otherwise)."""
    return pytest.mark.gpu(pytest.mark.skipif(not HAVE_GPU, reason=GPU_REASON)(fn))


without_driver = pytest.mark.skipif(REAL_DRIVER is not None, reason="an NVIDIA driver is present here")


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


@pytest.fixture
def no_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    """This test sees no libnvrtc, even where one is installed."""
    from svod_min.devices.cuda import nvrtc

    monkeypatch.setenv("SVOD_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13")
    monkeypatch.setattr(nvrtc, "_nvrtc_cache", {})


@pytest.fixture(scope="session")
def fake_so(tmp_path_factory: pytest.TempPathFactory) -> str:
    cc = find_cc()
    if cc is None:
        pytest.skip("no C compiler to build the fake libcuda")
    return build_fake_libcuda(str(tmp_path_factory.mktemp("fakecuda") / "libfakecuda.so"), cc)


class Fake:
    """One private copy of the fake library (its own global state) plus its test controls."""

    def __init__(self, path: str, count: int, version: int, init_rc: int, cc: Tuple[int, int] = (9, 0)) -> None:
        self.path = path
        self.cfg = ctypes.CDLL(path)
        self.cfg.fake_counter.restype = ctypes.c_long
        self.cfg.fake_counter.argtypes = [ctypes.c_char_p]
        self.cfg.fake_set_mem_limit.argtypes = [ctypes.c_size_t]
        self.cfg.fake_set_max_pitch.argtypes = [ctypes.c_size_t]
        self.cfg.fake_last_launch.restype = ctypes.c_size_t
        self.cfg.fake_configure(init_rc, version, count)
        self.cfg.fake_set_compute_capability(*cc)

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
        """Run the real kernel library's code (tests/support/cuda_emu.py) for the entries it exports."""
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

#: The stand-in's defaults (an H100 under a CUDA 13.0 driver) and the older GPU and driver kept as a case.
FAKE_DRIVER, FAKE_CC = 13000, (9, 0)
FAKE_GENERATIONS = [
    pytest.param((13000, (9, 0)), id="cc9.0-driver13000"),
    pytest.param((12040, (8, 0)), id="cc8.0-driver12040"),
]


@pytest.fixture
def fake(fake_so: str, tmp_path: Path) -> Callable[..., Fake]:
    def make(count: int = 1, version: int = FAKE_DRIVER, init_rc: int = 0, cc: Tuple[int, int] = FAKE_CC) -> Fake:
        _fake_ids[0] += 1
        path = str(tmp_path / ("libfakecuda%d.so" % _fake_ids[0]))
        shutil.copyfile(fake_so, path)  # a new inode: dlopen gives it its own globals
        return Fake(path, count, version, init_rc, cc)

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


def int_values(buf: cuda.CudaBuffer) -> List[int]:
    return list(np.frombuffer(buf.copyout(), dtype=np.int32))


def device_counter(dev: cuda.CudaDevice, name: str) -> int:
    fn = dev.lib._dll.fake_counter
    fn.restype, fn.argtypes = ctypes.c_long, [ctypes.c_char_p]
    return fn(name.encode())


def cuda_plan(dev: cuda.CudaDevice, steps: Sequence[Tuple[Any, List[int], List[int]]], buffers: List[Any]) -> Any:
    """An ExecutionPlan over CUDA library programs: steps are (program, buffer indices, vals)."""
    from svod_min.cache.kernel_cache import CachedKernel
    from svod_min.plan.execution_plan import ExecutionPlanBuilder, PreparedKernel

    builder = ExecutionPlanBuilder(dev)
    for i, buf in enumerate(buffers):
        builder.add_buffer(i, buf)
    for op_id, (prog, indices, vals) in enumerate(steps):
        kernel = CachedKernel(
            program=prog,
            device=str(dev.spec),
            code="",
            entry_point=prog.entry_point,
            var_names=list(prog.var_names),
            globals=list(range(len(indices))),
            outs=[0],
            ins=list(range(1, len(indices))),
            global_size=cuda.plan_dims(prog.grid),
            local_size=prog.local_size,
        )
        builder.add_kernel(
            PreparedKernel(id=op_id, kernel=kernel, buffer_indices=indices, output_indices=[0], vals=vals)
        )
    builder.set_output_buffer(steps[-1][1][0])
    return builder.build()


@pytest.fixture(scope="module")
def gpu() -> cuda.CudaDevice:
    assert REAL_DRIVER is not None
    return REAL_DRIVER.device(0)


VAR_VALUES = {
    "elementwise": {"n": 5003},
    "reduce": {"outer": 3, "red": 300, "inner": 5},
    "softmax": {"rows": 7, "cols": 300},
    "transpose": {"rows": 45, "cols": 70},
    "matmul": {"M": 33, "N": 47, "K": 29},
}


STORAGE = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": np.uint16,
    "int32": np.int32,
    "bool": np.uint8,
}


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
    unary = {
        "neg": np.negative,
        "abs": np.abs,
        "exp": np.exp,
        "log": np.log,
        "sqrt": np.sqrt,
        "rsqrt": lambda v: 1 / np.sqrt(v),
        "relu": lambda v: np.where(v < 0, 0, v),
        "tanh": np.tanh,
        "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
        "gelu": lambda v: v / (1 + np.exp(-2 * 0.7978845608028654 * (v + 0.044715 * v**3))),
    }
    binary = {
        "add": np.add,
        "sub": np.subtract,
        "mul": np.multiply,
        "div": np.divide,
        "max": np.maximum,
        "min": np.minimum,
    }
    if name in unary:
        return unary[name](x["a"])
    if name in binary:
        return binary[name](x["a"], x["b"])
    if name == "where":
        return np.where(x["c"] != 0, x["a"], x["b"])
    fused = {
        "add_relu": lambda: unary["relu"](x["a"] + x["b"]),
        "mul_add": lambda: x["a"] * x["b"] + x["c"],
        "relu_mul_add": lambda: unary["relu"](x["a"] * x["b"] + x["c"]),
        "silu": lambda: x["a"] * unary["sigmoid"](x["a"]),
    }
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


def cuda_sigs() -> List[Any]:
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


def check_library_kernel(
    dev: cuda.CudaDevice, sig: Any, env: Dict[str, int], grid: Optional[Tuple[int, int, int]] = None
) -> None:
    """Run library kernel ``sig`` on ``dev`` (a GPU, or the fake driver with the host emulator) vs numpy.

    ``grid`` replaces the signature's grid (fewer blocks than items: the grid-stride loops must cover the rest).
    """
    from svod_min.kernels import ptx_path
    from svod_min.kernels.sig import compile_expr

    ins = _inputs(sig, env, np.random.default_rng(len(sig.entry) + sum(env.values())))
    if grid is None:
        prog = dev.load_signature(sig, Path(ptx_path(sig.module)).read_text())
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
        want = _from_storage(
            _to_bf16(want) if sig.buffers[0].dtype == "bfloat16" else want.astype(np.float16), sig.buffers[0].dtype
        )
    rtol, atol = _tolerance(sig)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg="%s %s" % (sig.entry, env))


def sig_id(sig: Any) -> str:
    return "%s-%s" % (sig.name, "-".join(str(v) for _, v in sig.params))


def check_plan_equals_cpu(gpu: cuda.CudaDevice, M: int, N: int, K: int) -> None:
    """matmul -> add -> relu as an ExecutionPlan on CUDA device ``gpu`` equals the same kernels on the CPU."""
    from svod_min import kernels
    from svod_min.devices.cpu.device import create_cpu_device

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
    plan = cuda_plan(
        gpu,
        [
            (cuda_library_kernel(gpu, "matmul", dtype="float32", tile=16), [3, 0, 1], [M, N, K]),
            (cuda_library_kernel(gpu, "add", dtype="float32"), [4, 3, 2], [M * N]),
            (cuda_library_kernel(gpu, "relu", dtype="float32"), [5, 4], [M * N]),
        ],
        bufs,
    )
    plan.execute()
    np.testing.assert_allclose(plan.output_buffer().numpy(), act.numpy(), rtol=1e-4, atol=1e-5)


def in_forked_child(work: Callable[[], str]) -> str:
    """Run ``work`` in a forked child and return what it returned (never runs pytest's teardown there)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.write(write, work().encode())
        finally:
            os._exit(0)
    os.close(write)
    message = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    return message


def add_inputs(dev: Any, n: int) -> Tuple[Any, List[Any], Any]:
    """The library's float32 ``add`` on ``dev``, four ``n``-element buffers, and x (in buffer 1; 2x in buffer 2)."""
    add = cuda_library_kernel(dev, "add", dtype="float32")
    bufs = [dev.allocate([n], "float32") for _ in range(4)]
    x = np.arange(n, dtype=np.float32)
    bufs[1].copyin(x)
    bufs[2].copyin(x * 2)
    return add, bufs, x
