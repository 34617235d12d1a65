"""Plans on the CUDA device: plan files, library kernels, CUDA forms, graph replay, profiling.

Runs against the stand-in driver (tests/support/fake_libcuda.c: host memory plays device
memory; the library's matmul/add_relu/softmax/mul/relu float32 kernels are
emulated by entry name, matmul only over the tiles its grid covers) and, with
``@pytest.mark.gpu``, on a real GPU.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import pytest
from support.cuda import (  # noqa: F401  (fixtures)
    FAKE_PTX,
    HAVE_GPU,
    REAL_DRIVER,
    Fake,
    add_inputs,
    check_plan_equals_cpu,
    cuda_plan,
    fake,
    fake_so,
    gpu,
    gpu_test,
    no_nvrtc,
)
from support.paths import REPO as REPO_PATH

from svod_min.devices import cuda
from svod_min.error import NotSupportedError, PlanError, VariableBoundsError
from svod_min.kernels import cuda_library_kernel
from svod_min.plan.execution_plan import register_custom_function
from svod_min.planfile.default_plan import BATCH, D_OUT, default_plan_document, reference_output
from svod_min.planfile.load import PlanFileError, load_plan

np = pytest.importorskip("numpy")


def _cpu_output(doc: Dict[str, Any], rows: int = BATCH) -> Any:
    loaded = load_plan(doc, device="CPU")
    loaded.plan.execute_with_vars({"rows": rows}) if rows != BATCH else loaded.plan.execute()
    return np.asarray(loaded.plan.output_buffer().tolist(), dtype=np.float32).reshape(-1)


def _gpu_output(plan: Any) -> Any:
    return plan.output_buffer().numpy().reshape(-1)


# --- the default MLP plan on CUDA ----------------------------------------------------------------


def test_fake_default_plan_runs_on_cuda_and_verifies(fake: Callable[..., Fake]) -> None:
    f = fake()
    dev = f.device()
    doc = default_plan_document()
    loaded = load_plan(doc, device=dev)
    plan = loaded.plan
    assert str(plan.device.spec) == "CUDA:0"
    assert [k.entry_point for k in plan.kernels()] == [
        "svod_cuda_matmul_f32_t16",
        "svod_cuda_add_relu_f32",
        "svod_cuda_matmul_f32_t16",
        "svod_cuda_add_relu_f32",
        "svod_cuda_softmax_f32",
    ]
    assert plan.graph_replay and not plan.native_replay
    plan.execute()
    assert all(ok for _, ok, _ in loaded.verify()), loaded.verify()
    np.testing.assert_allclose(_gpu_output(plan), _cpu_output(doc), rtol=1e-5, atol=1e-7)
    assert f.counter("graph_launches") == 1 and f.counter("launches") == 0  # one graph, no eager launch


def test_fake_variables_patch_graph_nodes_in_place(fake: Callable[..., Fake]) -> None:
    f = fake()
    loaded = load_plan(default_plan_document(), device=f.device())
    plan = loaded.plan
    plan.execute()
    assert f.counter("set_params") == 0
    plan.execute_with_vars({"rows": 3})
    # matmul M, add_relu n (twice) and the softmax rows change: 5 nodes re-uploaded, the graph kept
    assert f.counter("set_params") == 5 and f.counter("graph_launches") == 2
    want = np.asarray(reference_output(default_plan_document(), 3), dtype=np.float32)
    got = _gpu_output(plan)
    np.testing.assert_allclose(got[: 3 * D_OUT], want[: 3 * D_OUT], rtol=1e-4, atol=1e-6)
    plan.execute_with_vars({"rows": 3})  # unchanged values: nothing to re-upload
    assert f.counter("set_params") == 5
    with pytest.raises(PlanError, match="outside bounds"):
        plan.execute_with_vars({"rows": BATCH + 1})
    assert not plan.poisoned and f.counter("graph_launches") == 3


def test_fake_graph_replay_equals_eager(fake: Callable[..., Fake]) -> None:
    f = fake()
    doc = default_plan_document()
    plan = load_plan(doc, device=f.device()).plan
    plan.execute()
    graphed = _gpu_output(plan).copy()
    assert plan.set_graph_replay(False) is False
    plan.execute()
    assert f.counter("launches") == 5 and f.counter("graph_launches") == 1
    assert np.array_equal(_gpu_output(plan), graphed)
    assert plan.set_graph_replay(True) is True


def test_fake_graphs_off_by_environment(fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_CUDA_GRAPHS", "0")
    plan = load_plan(default_plan_document(), device=fake().device()).plan
    assert not plan.graph_replay and not plan.native_replay


def _graphs_built(monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    """Record (node kinds, dependencies) of every CudaGraph built from now on."""
    built: List[Any] = []
    real = cuda.CudaGraph.__init__

    def spy(self: Any, launches: Any, dependencies: Any = None) -> None:
        built.append(
            ("".join("c" if isinstance(n, cuda.GraphCopy) else "k" for n in launches), [list(d) for d in dependencies])
        )
        real(self, launches, dependencies)

    monkeypatch.setattr(cuda.CudaGraph, "__init__", spy)
    return built


def _copy_plan_doc(custom: bool = False) -> Dict[str, Any]:
    f32 = {"dtype": "float32", "shape": [64]}
    doc = {
        "svod_plan": 1,
        "buffers": {
            "x": dict(f32, init="arange"),
            "b": dict(f32, init="ones"),
            "t1": f32,
            "t2": f32,
            "y": f32,
            "z": f32,
            "w": f32,
            "v": dict(f32, output=True),
        },
        "kernels": {"add": {"library": "add", "params": {"dtype": "float32"}}},
        "ops": [
            {"kernel": "add", "buffers": ["t1", "x", "b"], "vars": {"n": 64}},
            {"kernel": "add", "buffers": ["t2", "x", "b"], "vars": {"n": 64}},
            {"kernel": "add", "buffers": ["y", "t1", "t2"], "vars": {"n": 64}, "deps": [0, 1]},
            {"copy": {"dst": "z", "src": "y"}, "deps": [2]},
            {"kernel": "add", "buffers": ["w", "z", "b"], "vars": {"n": 64}, "deps": [3]},
            {"kernel": "add", "buffers": ["v", "w", "b"], "vars": {"n": 64}, "deps": [4]},
        ],
    }
    if custom:
        register_custom_function("test_cuda_identity", lambda views, _vars, _attrs: None)
        doc["ops"].insert(4, {"custom": "test_cuda_identity", "buffers": ["z"], "deps": [3]})
        doc["ops"][5]["deps"] = [4]
    return doc


def test_fake_plan_copies_are_graph_nodes_in_the_plan_order(
    fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = fake()
    built = _graphs_built(monkeypatch)
    plan = load_plan(_copy_plan_doc(), device=f.device()).plan
    # one graph: t1 and t2 side by side, y after both, the copy z <- y, then w and v in turn
    assert built == [("kkkckk", [[], [], [0, 1], [2], [3], [4]])]
    plan.execute()
    assert plan.output_buffer().tolist() == [2 * (i + 1) + 2 for i in range(64)]
    assert f.counter("graph_launches") == 1 and f.counter("memcpy_nodes") == 1 and f.counter("launches") == 0
    eager = load_plan(_copy_plan_doc(), device=f.device()).plan
    eager.set_graph_replay(False)
    eager.execute()
    assert eager.output_buffer().tolist() == plan.output_buffer().tolist()


def test_fake_custom_functions_end_graph_runs_and_old_drivers_keep_copies_out(
    fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch
) -> None:
    f = fake()
    built = _graphs_built(monkeypatch)
    plan = load_plan(_copy_plan_doc(custom=True), device=f.device()).plan
    assert built == [("kkkc", [[], [], [0, 1], [2]]), ("kk", [[], [0]])]  # the host function splits the run
    plan.execute()
    assert plan.output_buffer().tolist() == [2 * (i + 1) + 2 for i in range(64)]
    del built[:]
    f.cfg.fake_fail_memcpy_nodes(1)  # a driver that refuses memcpy nodes: copies go back to the Python path
    plan = load_plan(_copy_plan_doc(), device=f.device()).plan
    assert built[-2:] == [("kkk", [[], [], [0, 1]]), ("kk", [[], [0]])] and plan.graph_replay
    plan.execute()
    assert plan.output_buffer().tolist() == [2 * (i + 1) + 2 for i in range(64)]


def test_fake_a_wrong_grid_is_visible(fake: Callable[..., Fake]) -> None:
    """The stand-in's matmul covers only its grid's tiles,
    so a plan passing the wrong grid would fail the checks above."""
    dev = fake().device()
    prog = cuda_library_kernel(dev, "matmul", dtype="float32", tile=16)
    M, N, K = 40, 20, 8
    a, b, c = dev.allocate([M * K], "float32"), dev.allocate([K * N], "float32"), dev.allocate([M * N], "float32")
    a.copyin(np.ones(M * K, np.float32))
    b.copyin(np.ones(K * N, np.float32))
    prog.execute([c, a, b], [M, N, K], global_size=(1, 1, 1))
    out = c.numpy().reshape(M, N)
    assert (out[:16, :16] == K).all() and (out[16:] == 0).all() and (out[:, 16:] == 0).all()


def test_fake_profile_uses_device_time(fake: Callable[..., Fake]) -> None:
    plan = load_plan(default_plan_document(), device=fake().device()).plan
    profiles = plan.execute_profiled()
    assert [p.kind for p in profiles] == ["kernel"] * 5
    # the stand-in's event clock advances 0.25 ms per record: a kernel between two records is 0.25 ms
    assert all(p.elapsed == pytest.approx(0.25e-3) for p in profiles)
    assert all(p.wall != p.elapsed for p in profiles)


def test_fake_replicate_and_output_region(fake: Callable[..., Fake]) -> None:
    dev = fake().device()
    loaded = load_plan(default_plan_document(), device=dev)
    plan = loaded.plan
    plan.execute()
    first = _gpu_output(plan).copy()
    twin = plan.replicate()
    assert twin.output_buffer() is not plan.output_buffer()
    assert twin.buffer_at(0) is not plan.buffer_at(0)  # the input x is snapshotted, not shared
    twin.execute()
    assert np.array_equal(_gpu_output(twin), first)
    from svod_min.devices.registry import DEVICE_FACTORIES

    host = DEVICE_FACTORIES.device("CPU").allocate([D_OUT], "float32")
    plan.copy_output_region_to_buffer(0, host, 0, 4 * D_OUT, 4 * D_OUT)  # row 1 of y, device -> host
    assert np.array_equal(np.asarray(host.tolist(), np.float32), first[D_OUT : 2 * D_OUT])


def test_fake_library_kernels_check_buffers_before_launch(fake: Callable[..., Fake]) -> None:
    from svod_min.error import BufferAllocationError, ExecutionError

    f = fake()
    dev = f.device()
    add = cuda_library_kernel(dev, "add", dtype="float32")
    a, b = dev.allocate([10], "float32"), dev.allocate([10], "float32")
    with pytest.raises(BufferAllocationError, match=r"'out' holds 36 bytes, it needs n = 10 elements \(40 bytes\)"):
        add.execute([dev.allocate([9], "float32"), a, b], [10])
    with pytest.raises(ExecutionError, match="'out' is float64, the kernel takes float32"):
        add.execute([dev.allocate([10], "float64"), a, b], [10])
    with pytest.raises(VariableBoundsError, match="n=-1 is below its minimum 0"):
        add.execute([a, a, b], [-1])
    assert f.counter("launches") == 0  # nothing reached the driver
    raw = dev.allocate(40)  # uint8 bytes: only the size is checked
    add.execute([raw, a, b], [10])
    assert f.counter("launches") == 1


def test_fake_library_kernels_in_a_plan_get_the_library_checks_on_cuda(fake: Callable[..., Fake]) -> None:
    f = fake()
    doc = {
        "svod_plan": 1,
        "buffers": {
            "out": {"dtype": "float32", "shape": [8], "output": True},
            "a": {"dtype": "float32", "shape": [8], "init": "arange"},
            "b": {"dtype": "float32", "shape": [8], "init": "ones"},
        },
        "kernels": {"add": {"library": "add", "params": {"dtype": "float32"}}},
        "ops": [{"kernel": "add", "buffers": ["out", "a", "b"], "vars": {"n": 8}}],
    }
    bad = copy.deepcopy(doc)
    bad["buffers"]["out"]["dtype"] = "uint8"  # 8 bytes "hold" 8 elements by the extent alone
    with pytest.raises(PlanFileError, match=r"^ops\[0\]: add: buffer out must be float32, got uint8$"):
        load_plan(bad, device=f.device())
    bad = copy.deepcopy(doc)
    bad["buffers"]["x"] = {"dtype": "float32", "shape": [64], "init": "arange"}
    bad["kernels"]["t"] = {"library": "transpose", "params": {"dtype": "float32"}}
    bad["ops"] = [{"kernel": "t", "buffers": ["x", "x"], "vars": {"rows": 8, "cols": 8}}]
    with pytest.raises(PlanFileError, match=r"^ops\[0\]: transpose: buffers out and x overlap in memory"):
        load_plan(bad, device=f.device())
    assert f.counter("launches") == 0
    loaded = load_plan(doc, device=f.device())  # the control: the same plan with the right dtype runs
    loaded.plan.execute()
    assert loaded.buffers["out"].tolist() == [float(i + 1) for i in range(8)]


def test_fake_selfcheck_on_cuda(fake: Callable[..., Fake]) -> None:
    from svod_min.kernels.selfcheck import run_selfcheck

    results = run_selfcheck(fake().device())
    assert [r.name for r in results] == ["add", "matmul", "softmax", "reduce_sum", "transpose"]
    assert all(r.ok and r.elapsed > 0 for r in results), results


# --- plan files with CUDA forms --------------------------------------------------------------------

AXPB_C = (
    "void fake_axpb(int *out, const int *in, int n, int k, int c) "
    "{ for (int i = 0; i < n; ++i) out[i] = in[i] * k + c; }"
)


def _axpb_doc(cuda_form: Any = None, with_c: bool = True) -> Dict[str, Any]:
    kernel: Dict[str, Any] = {"buffers": 2, "vars": ["n", "k", "c"], "extents": {"0": "n", "1": "n"}}
    if with_c:
        kernel["source"] = AXPB_C
    if cuda_form is not None:
        kernel["cuda"] = cuda_form
    return {
        "svod_plan": 1,
        "vars": {"n": {"min": 1, "max": 64, "default": 64}},
        "buffers": {
            "x": {"dtype": "int32", "shape": [64], "init": "arange"},
            "t": {"dtype": "int32", "shape": [64]},
            "y": {"dtype": "int32", "shape": [64], "output": True},
        },
        "kernels": {"fake_axpb": kernel},
        "ops": [
            {"kernel": "fake_axpb", "buffers": ["t", "x"], "vars": {"k": 3, "c": 1}},
            {"kernel": "fake_axpb", "buffers": ["y", "t"], "vars": {"k": 2, "c": -5}},
        ],
        "expect": {"y": {"values": [(3 * i + 1) * 2 - 5 for i in range(64)], "rtol": 0, "atol": 0}},
    }


PTX_FORM = {"ptx": FAKE_PTX, "grid": ["ceildiv(n,128)", 1, 1], "block": [128, 1, 1]}


def test_fake_plan_file_cuda_form_runs_and_equals_the_c_form(fake: Callable[..., Fake]) -> None:
    f = fake()
    doc = _axpb_doc(PTX_FORM)
    gpu = load_plan(doc, device=f.device())
    gpu.plan.execute()
    assert all(ok for _, ok, _ in gpu.verify())
    cpu = load_plan(doc, device="CPU")
    cpu.plan.execute()
    assert gpu.plan.output_buffer().tolist() == cpu.plan.output_buffer().tolist()
    gpu.plan.execute_with_vars({"n": 40})
    assert gpu.plan.graph_replay and f.counter("set_params") == 2  # n changed in both nodes
    got = gpu.plan.output_buffer().tolist()
    assert got[:40] == [(3 * i + 1) * 2 - 5 for i in range(40)]


def test_fake_cuda_form_grid_and_block_reach_the_launch(
    fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SVOD_CUDA_GRAPHS", "0")
    f = fake()
    loaded = load_plan(_axpb_doc(PTX_FORM), device=f.device())
    loaded.plan.execute_with_vars({"n": 50})
    dims, args, extra = f.last_launch()
    assert dims == (1, 1, 1, 128, 1, 1, 0) and extra  # ceildiv(50,128) = 1 block of 128 threads
    assert args[16:28] == np.array([50, 2, -5], np.int32).tobytes()  # pointers first, then n, k, c


def test_fake_portable_plan_binds_cpu_only_variables(fake: Callable[..., Fake]) -> None:
    """core_id / core_id_count bindings and a CPU global_size are the CPU form's business."""
    doc = _axpb_doc(dict(PTX_FORM, vars=["n", "k", "c"]))
    doc["kernels"]["fake_axpb"]["vars"] = ["n", "k", "c", "core_id_count", "core_id"]
    doc["kernels"]["fake_axpb"]["source"] = (
        "void fake_axpb(int *out, const int *in, int n, int k, int c, int core_id_count, int core_id) {"
        " for (int i = core_id; i < n; i += core_id_count) out[i] = in[i] * k + c; }"
    )
    for op in doc["ops"]:
        op["vars"]["core_id_count"] = 2
        op["global_size"] = [2, 1, 1]
    for device in ("CPU", fake().device()):
        loaded = load_plan(copy.deepcopy(doc), device=device)
        loaded.plan.execute()
        assert all(ok for _, ok, _ in loaded.verify()), device


@pytest.mark.parametrize(
    "mutate, where, message",
    [
        (lambda d: d["kernels"]["fake_axpb"].pop("cuda"), "kernels.fake_axpb", "has no CUDA form"),
        (lambda d: d["kernels"]["fake_axpb"]["cuda"].pop("grid"), "kernels.fake_axpb.cuda", 'needs "grid"'),
        (
            lambda d: d["kernels"]["fake_axpb"]["cuda"].update(grid=["m", 1, 1]),
            "kernels.fake_axpb.cuda.grid[0]",
            "not kernel variables",
        ),
        (
            lambda d: d["kernels"]["fake_axpb"]["cuda"].update(block=[2048, 1, 1]),
            "kernels.fake_axpb.cuda.block[0]",
            "<= 1024",
        ),
        (
            lambda d: d["kernels"]["fake_axpb"]["cuda"].update(vars=["n", "core_id"]),
            "kernels.fake_axpb.cuda.vars",
            "CPU dispatch",
        ),
        (lambda d: d["kernels"]["fake_axpb"]["cuda"].update(cu="x"), "kernels.fake_axpb.cuda", "unknown key"),
        (lambda d: d["kernels"]["fake_axpb"]["cuda"].update(source="x"), "kernels.fake_axpb.cuda", "exactly one of"),
        (
            lambda d: d["kernels"]["fake_axpb"]["cuda"].update(ptx_file="missing.ptx"),
            "kernels.fake_axpb.cuda",
            "exactly one of",
        ),
        (lambda d: d["kernels"].update(k2={"library": "conv2d"}), "kernels.k2", "has no CUDA form"),
        (lambda d: d["kernels"].update(k2={"library": "add", "params": {"dtype": "int32"}}), "kernels.k2", "available"),
        (lambda d: d["kernels"].update(k2={"library": "add", "cuda": PTX_FORM}), "kernels.k2.cuda", "brings its own"),
    ],
)
def test_fake_cuda_form_errors_name_their_path(
    fake: Callable[..., Fake], mutate: Callable[[Dict[str, Any]], Any], where: str, message: str
) -> None:
    doc = copy.deepcopy(_axpb_doc(PTX_FORM))
    mutate(doc)
    with pytest.raises(PlanFileError) as info:
        load_plan(doc, device=fake().device())
    assert str(info.value).startswith(where + ":") and message in str(info.value), str(info.value)


def test_fake_bad_ptx_in_a_plan_names_the_kernel(fake: Callable[..., Fake]) -> None:
    wrong_entry = dict(PTX_FORM, entry="nope")
    with pytest.raises(cuda.PtxError, match=r"^kernels.fake_axpb.cuda.ptx: .*nope"):
        load_plan(_axpb_doc(wrong_entry), device=fake().device())
    few_params = dict(PTX_FORM, vars=["n"])  # the PTX entry takes 5 parameters
    with pytest.raises(cuda.PtxError, match=r"^kernels.fake_axpb.cuda.ptx: "):
        load_plan(_axpb_doc(few_params), device=fake().device())


def test_cuda_only_kernel_on_cpu_and_bad_cuda_form_are_refused_on_cpu() -> None:
    with pytest.raises(PlanFileError, match=r"kernels.fake_axpb: has only a CUDA form"):
        load_plan(_axpb_doc(PTX_FORM, with_c=False), device="CPU")
    bad = copy.deepcopy(_axpb_doc(dict(PTX_FORM, block=[0, 1, 1])))
    with pytest.raises(PlanFileError, match=r"kernels.fake_axpb.cuda.block\[0\]"):
        load_plan(bad, device="CPU")  # checked on every device, not only where it would load


def test_fake_cuda_c_without_nvrtc_names_the_kernel(fake: Callable[..., Fake], no_nvrtc: None) -> None:
    doc = _axpb_doc({"source": 'extern "C" __global__ void fake_axpb() {}', "grid": [1, 1, 1], "block": [32, 1, 1]})
    with pytest.raises(NotSupportedError, match=r"kernels.fake_axpb.cuda: NVRTC"):
        load_plan(doc, device=fake().device())


EXAMPLES = REPO_PATH / "examples"


def test_fake_example_plan_with_a_ptx_file_runs_on_cuda(fake: Callable[..., Fake]) -> None:
    """examples/saxpy_vars.json carries saxpy.ptx (nvcc output of saxpy.cu): one plan file, both devices."""
    path = EXAMPLES / "saxpy_vars.json"
    if not path.exists():
        pytest.skip("examples/ are not part of this checkout")
    text = (EXAMPLES / "saxpy.ptx").read_text()
    assert cuda.validate_ptx(text, "sm_75", entry="saxpy").version == (7, 0)
    gpu = load_plan(str(path), device=fake().device())
    gpu.plan.execute()
    assert all(ok for _, ok, _ in gpu.verify())
    cpu = load_plan(str(path), device="CPU")
    cpu.plan.execute()
    assert gpu.plan.output_buffer().tolist() == cpu.plan.output_buffer().tolist()
    gpu.plan.execute_with_vars({"n": 300})  # one more pass over the first 300 elements only
    y = gpu.plan.output_buffer().tolist()
    assert y[:300] == [4.0 * i + 1 for i in range(300)] and y[300:] == [2.0 * i + 1 for i in range(300, 1000)]


def test_fake_cli_runs_the_default_plan_on_cuda(fake_so: str, tmp_path: Path) -> None:
    import svod_min

    here = str(Path(svod_min.__file__).resolve().parents[1])
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([here] + [p for p in sys.path if p]),
        SVOD_CUDA_LIBRARY=fake_so,
        FAKE_CUDA_DEVICES="1",
        SVOD_CUDA="1",
    )
    for extra in ([], ["--var", "rows=3", "--json"]):
        proc = subprocess.run(
            [sys.executable, "-m", "svod_min", "run", "--device", "CUDA"] + extra,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=str(tmp_path),
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "CUDA:0" in proc.stdout and ("verify y: ok" in proc.stdout or '"ok": true' in proc.stdout)
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", "--device", "CUDA:1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 3 and "CUDA:1 does not exist" in proc.stderr, proc.stderr  # a device failure


# --- on a real GPU ---------------------------------------------------------------------------------


def check_default_plan_on(dev: Any) -> None:
    """The built-in default plan on CUDA device ``dev`` equals the CPU, eager and replayed from a graph."""
    doc = default_plan_document()
    loaded = load_plan(doc, device=dev)
    plan = loaded.plan
    assert plan.graph_replay
    plan.execute()
    assert all(ok for _, ok, _ in loaded.verify()), loaded.verify()
    want = _cpu_output(doc)
    np.testing.assert_allclose(_gpu_output(plan), want, rtol=1e-4, atol=1e-6)
    plan.set_graph_replay(False)
    plan.execute_with_vars({"rows": 5})
    eager = _gpu_output(plan).copy()
    plan.set_graph_replay(True)
    plan.execute_with_vars({"rows": 2})
    plan.execute_with_vars({"rows": 5})
    np.testing.assert_allclose(_gpu_output(plan), eager, rtol=0, atol=0)
    np.testing.assert_allclose(eager[: 5 * D_OUT], _cpu_output(doc, rows=5)[: 5 * D_OUT], rtol=1e-4, atol=1e-6)
    profiles = plan.execute_profiled()
    assert all(0 < p.elapsed < 1 for p in profiles)


@gpu_test
def test_gpu_default_plan_equals_cpu_eager_and_graphed() -> None:
    assert REAL_DRIVER is not None
    check_default_plan_on(REAL_DRIVER.device(0))


@gpu_test
def test_gpu_cli_run_on_cuda() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", "--device", "CUDA", "--repeat", "20"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "verify y: ok" in proc.stdout, proc.stdout + proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", str(EXAMPLES / "saxpy_vars.json"), "--device", "CUDA"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "verify y: ok" in proc.stdout, proc.stdout + proc.stderr


@gpu_test
def test_gpu_selfcheck() -> None:
    from svod_min.kernels.selfcheck import run_selfcheck

    assert REAL_DRIVER is not None
    results = run_selfcheck(REAL_DRIVER.device(0))
    assert len(results) == 5 and all(r.ok for r in results), results


# nvcc -ptx -arch=compute_75 of: extern "C" __global__ void smem_echo(int *out, int n) { extern __shared__ int buf[];
#   int t = threadIdx.x; buf[n - 1 - t] = t * 3; __syncthreads(); out[t] = buf[n - 1 - t]; }   (.version lowered to 7.0)
SMEM_PTX = """\
.version 7.0
.target sm_75
.address_size 64

.extern .shared .align 16 .b8 buf[];

.visible .entry smem_echo(
	.param .u64 smem_echo_param_0,
	.param .u32 smem_echo_param_1
)
{
	.reg .b32 	%r<10>;
	.reg .b64 	%rd<5>;


	ld.param.u64 	%rd1, [smem_echo_param_0];
	ld.param.u32 	%r1, [smem_echo_param_1];
	cvta.to.global.u64 	%rd2, %rd1;
	mov.u32 	%r2, %tid.x;
	mul.lo.s32 	%r3, %r2, 3;
	not.b32 	%r4, %r2;
	add.s32 	%r5, %r4, %r1;
	shl.b32 	%r6, %r5, 2;
	mov.u32 	%r7, buf;
	add.s32 	%r8, %r7, %r6;
	st.shared.u32 	[%r8], %r3;
	bar.sync 	0;
	ld.shared.u32 	%r9, [%r8];
	mul.wide.s32 	%rd3, %r2, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.u32 	[%rd4], %r9;
	ret;

}
"""


@gpu_test
def test_gpu_dynamic_shared_memory_above_48k() -> None:
    """100 KiB of dynamic shared memory: the kernel opts in, and the top of the region is really usable."""
    assert REAL_DRIVER is not None
    dev = REAL_DRIVER.device(0)
    if dev.limits.shared_ceiling < 100 << 10:
        pytest.skip("this GPU allows %d shared bytes per block" % dev.limits.shared_ceiling)
    prog = dev.load_ptx(SMEM_PTX, "smem_echo", 1, ["n"], local_size=(256, 1, 1))
    out = dev.allocate([256], "int32")
    prog.execute([out], [(100 << 10) // 4], global_size=(1, 1, 1), shared_bytes=100 << 10)
    assert out.numpy().tolist() == [3 * t for t in range(256)]


def test_smem_ptx_is_valid_for_the_gpu_test() -> None:
    assert cuda.validate_ptx(SMEM_PTX, "sm_90", entry="smem_echo").entries == ("smem_echo",)
    if cuda.find_ptxas() is None:
        pytest.skip("ptxas not found")
    assert cuda.ptxas_check(SMEM_PTX, "sm_90").startswith(b"\x7fELF")


@gpu_test
def test_gpu_plan_with_a_cuda_c_form_compiled_by_nvrtc() -> None:
    """A kernel's CUDA C form goes through NVRTC at load time and runs like its C form on the CPU."""
    if cuda.find_nvrtc() is None:
        pytest.skip("NVRTC (libnvrtc) not found")
    assert REAL_DRIVER is not None
    source = (
        'extern "C" __global__ void fake_axpb(int *out, const int *in, int n, int k, int c) {\n'
        "    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = in[i] * k + c; }\n"
    )
    doc = _axpb_doc({"source": source, "grid": ["ceildiv(n,32)", 1, 1], "block": [32, 1, 1]})
    loaded = load_plan(doc, device=REAL_DRIVER.device(0))
    loaded.plan.execute()
    assert all(ok for _, ok, _ in loaded.verify()), loaded.verify()
    loaded.plan.execute_with_vars({"n": 40})
    assert loaded.plan.output_buffer().tolist()[:40] == [(3 * i + 1) * 2 - 5 for i in range(40)]


@gpu_test
def test_gpu_plan_copies_as_memcpy_nodes() -> None:
    assert REAL_DRIVER is not None
    want = [2 * (i + 1) + 2 for i in range(64)]
    for graphs in (True, False):
        plan = load_plan(_copy_plan_doc(), device=REAL_DRIVER.device(0)).plan
        assert plan.set_graph_replay(graphs) is graphs
        plan.execute()
        plan.execute()  # a replay recomputes the same values
        assert plan.output_buffer().tolist() == want, graphs


# --- ExecutionPlan over CUDA programs, built by hand ----------------------------------------------


def test_fake_execution_plan_runs_cuda_programs(fake: Callable[..., Fake]) -> None:
    dev, n = fake().device(), 300
    add, bufs, x = add_inputs(dev, n)
    plan = cuda_plan(dev, [(add, [0, 1, 2], [n]), (add, [3, 0, 2], [n])], bufs)
    assert plan.native_replay is False
    plan.execute()
    assert np.array_equal(plan.output_buffer().numpy(), x * 5)


def test_fake_plan_copies_and_custom_functions_use_the_device_path(
    fake: Callable[..., Fake], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plan's copy of CUDA buffers is a device copy, and a host function's writes reach the GPU buffer.

    Eager path (graphs off): with graphs the copy becomes a memcpy node (tests/devices/cuda/test_cuda_plans.py).
    """
    from svod_min.plan.execution_plan import PreparedCopy, PreparedCustomFunction, register_custom_function

    monkeypatch.setenv("SVOD_CUDA_GRAPHS", "0")

    dev, n = fake().device(), 64
    add, bufs, x = add_inputs(dev, n)
    device_copies: List[Tuple[Any, Any]] = []
    real_copy = dev.copy
    monkeypatch.setattr(dev, "copy", lambda dst, src: (device_copies.append((dst, src)), real_copy(dst, src))[1])
    seen: List[Any] = []

    def negate(views: List[Any], _vars: Dict[str, int], _attrs: Dict[str, Any]) -> None:
        seen.append(type(views[0]).__name__)
        views[0][...] = -views[0]

    register_custom_function("test_negate_cuda", negate)
    plan = cuda_plan(dev, [(add, [0, 1, 2], [n])], bufs)
    builder_ops = [
        PreparedCopy(id=1, buffer_indices=[3, 0], dependencies=[0]),
        PreparedCustomFunction(id=2, kind="test_negate_cuda", buffer_indices=[3], dependencies=[1]),
    ]
    from svod_min.plan.execution_plan import ExecutionPlanBuilder

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


@gpu_test
def test_gpu_plan_on_cuda_equals_cpu(gpu: cuda.CudaDevice) -> None:
    check_plan_equals_cpu(gpu, 40, 70, 33)
