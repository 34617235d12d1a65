"""The kernel library's run-time API: the catalogue, checks before anything runs, buffers and devices,
the thread split, and the errors a caller gets."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest
from support.kernel_check import HOST_VARIANT

np = pytest.importorskip("numpy")

from svod_min import kernels  # noqa: E402
from svod_min.error import ExecutionError, PlanError, SvodError, UnsupportedDeviceError  # noqa: E402
from svod_min.kernels import KernelArgumentError, KernelNotFoundError, KernelParamError  # noqa: E402
from svod_min.kernels import variants as kprebuilt  # noqa: E402


def test_catalogue_lists_every_kernel_with_params() -> None:
    cat = kernels.catalogue()
    required = {
        "add",
        "sub",
        "mul",
        "div",
        "max",
        "min",
        "neg",
        "abs",
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "relu",
        "gelu",
        "sigmoid",
        "tanh",
        "where",
        "cast",
        "reduce_sum",
        "reduce_max",
        "reduce_mean",
        "softmax",
        "layernorm",
        "matmul",
        "transpose",
        "permute",
        "conv2d",
        "fill",
        "arange",
    }
    assert required <= set(cat)
    for name, info in cat.items():
        assert info["instances"], name
        assert "dtype" in info["params"] and info["doc"], name
        kernels.find_sig(name)  # defaults resolve


def test_every_instance_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every catalogue instance the host's prebuilt object holds loads without compiling."""
    if HOST_VARIANT is None:
        pytest.skip("no prebuilt object for this host")
    import svod_min.cache.kernel_cache as kc

    def no_compile(*a: Any, **k: Any) -> bytes:
        raise AssertionError("compiled although the kernel is prebuilt")

    monkeypatch.setattr(kc, "compile_cached", no_compile)
    n = 0
    for name, info in kernels.catalogue().items():
        for params in info["instances"]:
            sig = kernels.find_sig(name, HOST_VARIANT, **params)
            if kprebuilt.has_entry(HOST_VARIANT, sig.entry):
                k = kernels.get(name, prebuilt=True, **params)
                assert k.prebuilt and k.variant == HOST_VARIANT and k.program.address
                n += 1
    assert n > 100


def test_kernel_object_describes_itself() -> None:
    k = kernels.get("matmul", dtype="f32")
    assert k.entry_point.startswith("svod_matmul_f32_") and k.global_size == ("core_id_count", 1, 1)
    assert [(b.name, b.role, b.count) for b in k.buffers] == [("c", "w", "M*N"), ("a", "r", "M*K"), ("b", "r", "K*N")]
    assert k.var_names == ["M", "N", "K", "core_id_count", "core_id"] and k.core_id_index == 4
    assert k.flops == "2*M*N*K" and k.counts(M=2, N=3, K=4) == {"c": 6, "a": 8, "b": 12}
    assert "svod_matmul_f32" in k.source and "#include" not in k.source
    assert len(k.sig.prototype._argtypes_) == 8
    vals, gsize = k.launch(M=600, N=600, K=600, threads=2)
    assert vals[:3] == [600, 600, 600] and gsize == (2, 1, 1) and vals[3] == 2
    assert kernels.get("matmul", dtype="float32") is k


def test_run_validates_before_dispatch() -> None:
    k = kernels.get("add")
    a, b, out = np.ones(8, np.float32), np.ones(8, np.float32), np.zeros(8, np.float32)
    cases = [
        (lambda: k.run([out, a, b], n=9), "holds 8 float32 elements"),
        (lambda: k.run([out, a, b.astype(np.float64)], n=8), "must be float32"),
        (lambda: k.run([out, a], n=8), "takes 3 buffers"),
        (lambda: k.run([out, a, b]), "needs variables"),
        (lambda: k.run([out, a, b], n=8, m=1), "unexpected"),
        (lambda: k.run([out, a, b], n=-1), "outside"),
        (lambda: k.run([out, a, b], n=2**31), "outside"),
        (lambda: k.run([out, a, b], n=8, core_id=1), "unexpected"),
        (lambda: k.run([out, a, b], n=8, core_id_count=2), "threads="),
        (lambda: k.run([out, a, b], n=8.5), "not an integer"),
        (lambda: k.run([out.ctypes.data, a, b], n=8), "raw addresses"),
        (lambda: k.run([np.zeros(16, np.float32)[::2], a, b], n=8), "C-contiguous"),
        (lambda: k.run([a[:0].reshape(0), a, b], n=1), "holds 0"),
        (lambda: k.run([out, a, b], n=8, threads=0), "positive"),
        (lambda: k.run({"out": out, "a": a}, n=8), "missing"),
        (lambda: k.run([out, a, "b"], n=8), "cannot pass str"),
        (lambda: k.run([out, a, b.astype(">f4")], n=8), "byte order"),
    ]
    ro = np.zeros(8, np.float32)
    ro.flags.writeable = False
    cases.append((lambda: k.run([ro, a, b], n=8), "read-only"))
    for call, msg in cases:
        with pytest.raises(KernelArgumentError, match=msg):
            call()
        assert not out.any()  # nothing ran
    assert issubclass(KernelArgumentError, ExecutionError) and KernelArgumentError.__bases__ == (ExecutionError,)


def test_run_refuses_overlap_but_allows_exact_inplace() -> None:
    k = kernels.get("add")
    buf = np.arange(16, dtype=np.float32)
    with pytest.raises(KernelArgumentError, match="overlap"):
        k.run([buf[1:9], buf[0:8], buf[8:16]], n=8)
    k.run([buf[0:8], buf[0:8], buf[8:16]], n=8)  # out is a: allowed elementwise
    assert np.array_equal(buf[:8], np.arange(8) + np.arange(8, 16))
    k.run([buf[0:4], buf[4:8], buf[8:12]], n=4)  # disjoint parts of one array
    mm = kernels.get("matmul")
    m = np.ones((4, 4), np.float32)
    with pytest.raises(KernelArgumentError, match="overlap"):
        mm.run([m, m, np.ones((4, 4), np.float32)], M=4, N=4, K=4)


def test_run_accepts_cpu_buffers_and_mappings() -> None:
    from svod_min.devices.cpu.device import create_cpu_device

    dev = create_cpu_device()
    a, b, out = dev.allocate((100,), "float32"), dev.allocate((100,), "float32"), dev.allocate((100,), "float32")
    import ctypes

    for buf, vals in ((a, range(100)), (b, [2.0] * 100)):
        arr = (ctypes.c_float * 100).from_address(buf.address)
        arr[:] = list(vals)
    kernels.get("mul").run({"out": out, "a": a, "b": b}, n=100)
    got = (ctypes.c_float * 100).from_address(out.address)
    assert list(got) == [2.0 * i for i in range(100)]
    with pytest.raises(KernelArgumentError, match="holds 100"):
        kernels.get("mul").run([out, a, b], n=101)
    call = kernels.get("add").bind([out, a, b], n=100)
    call()
    assert got[3] == 5.0


def test_bad_names_params_and_devices() -> None:
    with pytest.raises(KernelNotFoundError, match="did you mean matmul"):
        kernels.get("matmull")
    with pytest.raises(KernelParamError, match="no parameter"):
        kernels.get("add", tile=3)
    with pytest.raises(KernelParamError, match="not supported"):
        kernels.get("exp", dtype="int32")
    with pytest.raises(KernelParamError, match="not supported"):
        kernels.get("add", dtype="int8")
    with pytest.raises(KernelParamError, match="mr=5"):
        kernels.get("matmul", mr=5)
    with pytest.raises(KernelParamError, match="no instance"):
        kernels.get("matmul", mr=4, nr=16)
    with pytest.raises(KernelParamError, match="no instance"):
        kernels.get("cast", dtype="float32", out_dtype="float32")
    with pytest.raises(KernelParamError, match="bias=1"):
        kernels.get("conv2d", bias=1)
    with pytest.raises(UnsupportedDeviceError, match="PTX"):
        kernels.get("add", device="CUDA")
    with pytest.raises(UnsupportedDeviceError):
        kernels.get("add", device="METAL")
    with pytest.raises(SvodError):
        kernels.get("add", device="TPU")
    assert issubclass(KernelParamError, PlanError) and KernelNotFoundError.__bases__ == (KernelParamError,)


def test_dtype_aliases_resolve_to_one_instance() -> None:
    assert kernels.get("add", dtype="f32") is kernels.get("add", dtype=np.float32) is kernels.get("add")
    assert kernels.get("exp", dtype="half").params["dtype"] == "float16"


# --- prebuilt selection and loading --------------------------------------------------------------


def _split_cases() -> List[Any]:
    rng = np.random.default_rng(20261122)  # drawn once, at collection
    x = rng.standard_normal((37, 301)).astype(np.float32)
    w, b = rng.standard_normal(301).astype(np.float32), rng.standard_normal(301).astype(np.float32)
    cases = [
        ("reduce_sum", [x], dict(kernels.reduce_vars((37, 301), (301, 1), 1)), (37,)),
        ("reduce_max", [x], dict(kernels.reduce_vars((37, 301), (301, 1), 0)), (301,)),
        ("softmax", [x], dict(rows=37, cols=301), (37, 301)),
        ("layernorm", [x, w, b], dict(rows=37, cols=301, eps=1e-5), (37, 301)),
        ("transpose", [x], dict(rows=37, cols=301), (301, 37)),
        ("permute", [x], kernels.permute_vars((301, 37), (1, 301)), (301, 37)),
        ("matmul", [x[:, :37].copy(), x[:37, :].copy()], dict(M=37, N=301, K=37), (37, 301)),
        ("exp", [x.reshape(-1)], dict(n=x.size), (x.size,)),
        ("arange", [], dict(n=5000, start=3, step=7), (5000,)),
    ]
    xc = rng.standard_normal((2, 3, 19, 17)).astype(np.float32)
    wc = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    conv = dict(N=2, C=3, H=19, W=17, OC=5, KH=3, KW=3, sh=2, sw=1, ph=1, pw=1, dh=1, dw=1)
    cases.append(("conv2d", [xc, wc], conv, (2, 5, 10, 17)))
    return cases


@pytest.mark.parametrize("name, ins, var, shape", _split_cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_thread_split_is_invisible(name: str, ins: List[Any], var: Dict[str, int], shape: Any) -> None:
    """Splitting over core ids changes no bit of the result (each output is computed the same way)."""
    k = kernels.get(name)
    outs = []
    for threads in (1, 2, 3, 7):
        out = np.full(shape, np.nan, np.float32)
        k.run([out, *ins], threads=threads, **var)
        outs.append(out)
    assert not np.isnan(outs[0]).any()
    for other in outs[1:]:
        assert np.array_equal(outs[0], other)


def test_device_argument_accepts_a_cpu_device() -> None:
    from svod_min.devices.cpu.device import CpuDevice

    dev = CpuDevice(threads=3)
    k = kernels.get("add", device=dev)
    assert k.program.device is dev and k is not kernels.get("add")
    vals, gsize = k.launch(n=10**7)
    assert k.threads_for({"n": 10**7}) == 3 and gsize == (3 * k.sig.ids_per_thread, 1, 1)
    with pytest.raises(KernelParamError, match="device must be"):
        kernels.get("add", device=3.5)


def test_closing_a_program_does_not_break_the_library() -> None:
    k = kernels.get("neg")
    k.program.close()  # e.g. a plan releasing its programs
    with pytest.raises(ExecutionError, match="closed"):
        k.program.execute([0, 0], [0, 1, 0])
    again = kernels.get("neg")
    assert again is not k
    x = np.arange(5, dtype=np.float32)
    out = np.empty_like(x)
    again.run([out, x], n=5)
    kernels.get("abs").run([out, x], n=5)  # the shared mapping is still there
    assert np.array_equal(out, x)


@pytest.mark.parametrize(
    "call",
    [
        lambda: kernels.reduce_vars([4, 4], [4, 1], 0.5),
        lambda: kernels.reduce_vars([4, 4], [4, 1], None),
        lambda: kernels.reduce_vars(None, [4, 1], 0),
        lambda: kernels.permute_vars(None, None),
        lambda: kernels.get("add", variant="x"),
        lambda: kernels.ptx_path(None),
        lambda: kernels.ptx_path("../../etc/passwd"),
    ],
    ids=["axis-float", "axis-none", "shape-none", "permute-none", "variant-param", "ptx-none", "ptx-path"],
)
def test_helpers_refuse_bad_arguments_with_library_errors(call: Callable[[], Any]) -> None:
    with pytest.raises(KernelParamError):
        call()


def test_a_boolean_is_not_a_size() -> None:
    a = np.ones(4, np.float32)
    with pytest.raises(KernelArgumentError, match="variable n=True is a boolean, not an integer"):
        kernels.get("add").run([np.zeros(4, np.float32), a, a], n=True)


def test_threads_takes_numpy_integers_as_variables_do() -> None:
    a = np.ones(1 << 17, np.float32)
    out = np.zeros_like(a)
    kernels.get("add").run([out, a, a], n=a.size, threads=np.int64(2))
    assert float(out.min()) == float(out.max()) == 2.0
    for bad in (True, 0, 1.5, "2"):
        with pytest.raises(KernelArgumentError, match="threads must be a positive int"):
            kernels.get("add").run([out, a, a], n=a.size, threads=bad)
