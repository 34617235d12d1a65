"""tinygrad interop: committed exported plans run without tinygrad; with tinygrad, fresh exports match it.

The tinygrad half runs in the ``tinygrad`` tox env (Python 3.11+, tinygrad 0.14); elsewhere it skips.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest
from conftest import COMPILERS, needs_cc
from support.paths import REPO_DIR

from svod_min.error import ExportError, PlanError
from svod_min.npy import read_npy
from svod_min.planfile.load import load_plan

np = pytest.importorskip("numpy")

ROOT = REPO_DIR
EXAMPLES = os.path.join(ROOT, "examples", "tinygrad")
MODELS = ("mlp", "convnet", "attention")


def _tinygrad_ok() -> bool:
    if sys.version_info < (3, 11) or importlib.util.find_spec("tinygrad") is None:
        return False
    import tinygrad

    return str(getattr(tinygrad, "__version__", "0.14.")).startswith("0.14.")


needs_tinygrad = pytest.mark.skipif(not _tinygrad_ok(), reason="tinygrad 0.14 is not installed (tox -e tinygrad)")


def _data(model: str, name: str) -> Any:
    dt, shape, payload = read_npy(os.path.join(EXAMPLES, model, "data", name + ".npy"))
    return np.frombuffer(payload, dtype=dt.numpy_name).reshape(shape)


def _run(plan_path: str, **var_values: int) -> Any:
    loaded = load_plan(plan_path, var_values=var_values)
    loaded.plan.execute()
    return loaded


def _run_doc(doc: Dict[str, Any]) -> Any:
    loaded = load_plan(doc)
    loaded.plan.execute()
    return loaded


# --- without tinygrad: the committed bundles --------------------------------------------------


@needs_cc
@pytest.mark.parametrize("model", MODELS)
def test_committed_example_runs_and_matches_tinygrads_outputs(model: str) -> None:
    loaded = _run(os.path.join(EXAMPLES, model, "plan.json"))
    checks = loaded.verify()
    assert checks, "the exported plan must carry tinygrad's outputs as expectations"
    for buffer, ok, err in checks:
        assert ok, "%s: %s differs from tinygrad by %g" % (model, buffer, err)


def _gelu(x: Any) -> Any:  # tinygrad's gelu: the tanh approximation
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _mlp_reference(batch: int) -> Any:
    x = _data("mlp", "xs")[:batch].astype(np.float64)
    h = np.maximum(x @ _data("mlp", "w1") + _data("mlp", "b1"), 0)
    logits = _gelu(h @ _data("mlp", "w2")) @ _data("mlp", "w3")
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@needs_cc
@pytest.mark.parametrize("batch", [1, 3, 4, 16])
def test_committed_mlp_symbolic_batch_against_numpy(batch: int) -> None:
    loaded = _run(os.path.join(EXAMPLES, "mlp", "plan.json"), batch=batch)
    got = loaded.buffers["probs"].numpy()[: batch * 10].reshape(batch, 10)
    np.testing.assert_allclose(got, _mlp_reference(batch), rtol=1e-4, atol=1e-6)


@needs_cc
def test_committed_mlp_batch_out_of_bounds_is_refused() -> None:
    with pytest.raises(PlanError, match="batch"):
        load_plan(os.path.join(EXAMPLES, "mlp", "plan.json"), var_values={"batch": 17})


def test_committed_plans_use_core_id_and_views_as_the_format_says() -> None:
    for model in MODELS:
        with open(os.path.join(EXAMPLES, model, "plan.json")) as fh:
            doc = json.load(fh)
        for name, k in doc["kernels"].items():
            assert os.path.isfile(os.path.join(EXAMPLES, model, k["file"])), name
            if k.get("global_size", [1])[0] != 1:
                assert "core_id" in k["vars"], "%s/%s launches chunks without a core_id" % (model, name)
        for name, b in doc["buffers"].items():
            if "view_of" in b:
                assert b["view_of"] in doc["buffers"], name


@needs_cc
def test_cli_runs_a_committed_example() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", os.path.join(EXAMPLES, "mlp", "plan.json"), "--var", "batch=7"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "verify probs: ok" in proc.stdout


def test_exported_sources_compile_with_each_compiler(cc: str) -> None:
    """gcc is svod_min's fallback: the exporter rewrites tinygrad's two clang-only extensions."""
    from svod_min.compiler.clang import compile_c

    sources = [
        os.path.join(EXAMPLES, m, "kernels", f)
        for m in MODELS
        for f in os.listdir(os.path.join(EXAMPLES, m, "kernels"))
    ]
    assert len(sources) >= 10
    for path in sources:
        with open(path) as fh:
            assert compile_c(fh.read(), compiler=cc).startswith(b"\x7fELF"), path


@pytest.mark.skipif("gcc" not in COMPILERS, reason="gcc is not installed")
def test_gcc_build_of_an_example_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVOD_CC", "gcc")
    monkeypatch.setenv("SVOD_OBJECT_CACHE", "0")
    loaded = _run(os.path.join(EXAMPLES, "attention", "plan.json"))
    assert all(ok for _, ok, _ in loaded.verify())


def test_portable_source_rewrites_only_the_clang_extensions() -> None:
    from svod_min.interop.tinygrad import portable_source

    src = (
        "typedef float float4 __attribute__((aligned(16),ext_vector_type(4)));\n"
        "void k(float* restrict a) { a[0] = __builtin_bit_cast(float, (int)1); }"
    )
    out = portable_source(src)
    assert "#if defined(__clang__)\ntypedef float float4 __attribute__((aligned(16),ext_vector_type(4)));" in out
    assert "vector_size(4*sizeof(float))" in out
    assert "#define __builtin_bit_cast" in out and out.endswith(src.splitlines()[1])
    assert portable_source("void k(float* a) { a[0] = 1; }") == "void k(float* a) { a[0] = 1; }"


def test_expect_count_checks_a_prefix_and_is_validated(tmp_path: Any) -> None:
    doc: Dict[str, Any] = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "float32", "shape": [4], "init": {"values": [1, 2, 7, 7]}},
            "y": {"dtype": "float32", "shape": [4], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
        "expect": {"y": {"values": [1, 2], "count": 2}},
    }
    assert [ok for _, ok, _ in _run_doc(doc).verify()] == [True]  # elements past count are not compared
    doc["expect"]["y"]["values"] = [1, 3]
    assert [ok for _, ok, _ in _run_doc(doc).verify()] == [False]
    doc["expect"]["y"]["count"] = 5
    with pytest.raises(PlanError, match=r"expect\.y\.count"):
        load_plan(doc)
    doc["expect"]["y"]["count"] = 3
    with pytest.raises(PlanError, match="2 expected values for a count of 3"):
        load_plan(doc)


def test_export_without_tinygrad_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from svod_min.interop import tinygrad as bridge

    monkeypatch.setitem(sys.modules, "tinygrad", None)  # import tinygrad -> ImportError
    with pytest.raises(ExportError, match="tinygrad is not installed"):
        bridge.export_tinygrad(lambda: None, "unused")


def test_load_target_errors(tmp_path: Any) -> None:
    from svod_min.interop.tinygrad import load_target

    with pytest.raises(ExportError, match="SCRIPT.py:FUNCTION"):
        load_target("no_colon")
    with pytest.raises(ExportError, match="no such script"):
        load_target(str(tmp_path / "missing.py") + ":f")
    script = tmp_path / "m.py"
    script.write_text("def f():\n    return 1\n")
    assert load_target(str(script) + ":f")() == 1
    with pytest.raises(ExportError, match="has no function g"):
        load_target(str(script) + ":g")
    text = tmp_path / "notpy.txt"  # a path, but importlib has no loader for it (was an AttributeError)
    text.write_text("def f():\n    return 1\n")
    with pytest.raises(ExportError, match=r"cannot import .*notpy\.txt as a Python script \(name it \*\.py\)"):
        load_target(str(text) + ":f")


# --- with tinygrad: export, run, compare ----------------------------------------------------------


def _models_module() -> Any:
    spec = importlib.util.spec_from_file_location("svod_tinygrad_models", os.path.join(EXAMPLES, "models.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _tinygrad_outputs(model: Any, inputs: Dict[str, Any]) -> Dict[str, Any]:
    from tinygrad import Tensor

    tensors = {k: v if isinstance(v, Tensor) else Tensor(v) for k, v in inputs.items()}
    return {k: v.numpy() for k, v in model(**tensors).items()}


@needs_tinygrad
@needs_cc
@pytest.mark.parametrize("name", MODELS)
def test_export_matches_tinygrad(name: str, tmp_path: Any) -> None:
    from svod_min.interop.tinygrad import export_tinygrad

    model, inputs, weights = _models_module().MODELS[name]()
    result = export_tinygrad(model, str(tmp_path), inputs=inputs, weights=weights)
    assert result.kernels >= 3
    loaded = _run(result.plan_path)
    if name == "mlp":  # tinygrad has no data for a symbolic shape: the fixed-batch model is the reference
        model, inputs, _ = _models_module().mlp(symbolic=False)
    want = _tinygrad_outputs(model, inputs)  # an independent eager tinygrad run
    for out, values in want.items():
        got = loaded.buffers[out].numpy()[: values.size].reshape(values.shape)
        np.testing.assert_allclose(got, values, rtol=1e-4, atol=1e-5)
    assert all(ok for _, ok, _ in loaded.verify())


@needs_tinygrad
@needs_cc
def test_symbolic_batch_runs_at_two_sizes(tmp_path: Any) -> None:
    from svod_min.interop.tinygrad import export_tinygrad

    models = _models_module()
    model, inputs, weights = models.mlp(batch=4)
    result = export_tinygrad(model, str(tmp_path), inputs=inputs, weights=weights)
    assert result.variables == {"batch": (1, models.MAX_BATCH, 4)}
    for batch in (2, 9):
        model_b, inputs_b, _ = models.mlp(batch=batch, symbolic=False)
        want = _tinygrad_outputs(model_b, inputs_b)["probs"]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "svod_min",
                "run",
                result.plan_path,
                "--var",
                "batch=%d" % batch,
                "--save",
                str(tmp_path / ("out%d" % batch)),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        # expect holds tinygrad's rows for the default batch (4): a smaller batch leaves some unwritten
        assert proc.returncode == (0 if batch >= 4 else 1), proc.stderr
        dt, _shape, payload = read_npy(str(tmp_path / ("out%d" % batch) / "probs.npy"))
        got = np.frombuffer(payload, dtype=dt.numpy_name)[: want.size].reshape(want.shape)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@needs_tinygrad
@needs_cc
def test_threaded_kernel_maps_core_id(tmp_path: Any) -> None:
    from tinygrad import Tensor

    from svod_min.interop.tinygrad import export_tinygrad

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((128, 128)).astype(np.float32) for _ in range(2))
    result = export_tinygrad(lambda a, b: (a @ b).exp2() * 0.5, str(tmp_path), inputs={"a": a, "b": b})
    with open(result.plan_path) as fh:
        kernels: List[Dict[str, Any]] = list(json.load(fh)["kernels"].values())
    threaded = [k for k in kernels if "core_id" in k.get("vars", [])]
    loaded = _run(result.plan_path)
    np.testing.assert_allclose(
        loaded.buffers["out"].numpy().reshape(128, 128), np.exp2(a.astype(np.float64) @ b) * 0.5, rtol=1e-3
    )
    if (os.cpu_count() or 1) >= 2:  # tinygrad splits a big kernel over its CPU threads: one core_id per chunk
        assert threaded, "expected tinygrad to thread a 128x128 matmul on %d CPUs" % os.cpu_count()
    for k in threaded:
        assert k["global_size"][0] >= 2
    assert isinstance(Tensor, type)


@needs_tinygrad
def test_export_errors_are_export_errors(tmp_path: Any) -> None:
    from tinygrad import Tensor

    from svod_min.interop.tinygrad import export_tinygrad

    with pytest.raises(ExportError, match="returned int"):
        export_tinygrad(lambda: 3, str(tmp_path))
    with pytest.raises(ExportError, match="output 1x is not an identifier|not an identifier"):
        export_tinygrad(lambda: {"1x": Tensor.ones(4).contiguous()}, str(tmp_path))
    with pytest.raises(ExportError, match="input name"):
        export_tinygrad(lambda **kw: Tensor.ones(2), str(tmp_path), inputs={"bad name": np.ones(2, np.float32)})
    for beam in (-1, 1.5, True):
        with pytest.raises(ExportError, match="beam must be an integer >= 0"):
            export_tinygrad(lambda: Tensor.ones(4).contiguous(), str(tmp_path), beam=beam)


@needs_tinygrad
@needs_cc
def test_cli_export_with_beam_search_reports_it_and_verifies(tmp_path: Any) -> None:
    script = tmp_path / "m.py"
    script.write_text("def model(x):\n    return {'y': (x * 3 + 1).relu().sum(axis=1)}\n")
    from svod_min.dtypes import dtype
    from svod_min.npy import write_npy

    x = np.linspace(-1, 1, 64, dtype=np.float32)
    write_npy(str(tmp_path / "x.npy"), dtype("float32"), (8, 8), x.tobytes())
    env = dict(os.environ, PARALLEL="0")  # the search in this process: a worker pool costs more than it
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "svod_min",
            "export-tinygrad",
            "%s:model" % script,
            str(tmp_path / "out"),
            "--input",
            "x=%s" % (tmp_path / "x.npy"),
            "--beam",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tinygrad BEAM=1 search and compile:" in proc.stdout
    assert "svod_min vs tinygrad, y: ok" in proc.stdout
    with open(str(tmp_path / "out" / "plan.json")) as fh:
        assert "with BEAM=1" in json.load(fh)["description"]
    got = _run(str(tmp_path / "out" / "plan.json")).buffers["y"].numpy()
    np.testing.assert_allclose(got, np.maximum(x.reshape(8, 8) * 3 + 1, 0).sum(axis=1), rtol=1e-6)


@needs_tinygrad
@needs_cc
def test_cli_export_then_verify(tmp_path: Any) -> None:
    script = tmp_path / "m.py"
    script.write_text("from tinygrad import Tensor\ndef model(x):\n    return {'y': (x * 3 + 1).relu().sum(axis=1)}\n")
    from svod_min.dtypes import dtype
    from svod_min.npy import write_npy

    x = np.linspace(-1, 1, 12, dtype=np.float32)
    write_npy(str(tmp_path / "x.npy"), dtype("float32"), (3, 4), x.tobytes())
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "svod_min",
            "export-tinygrad",
            "%s:model" % script,
            str(tmp_path / "out"),
            "--input",
            "x=%s" % (tmp_path / "x.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "svod_min vs tinygrad, y: ok" in proc.stdout
    got = _run(str(tmp_path / "out" / "plan.json")).buffers["y"].numpy()
    np.testing.assert_allclose(got, np.maximum(x.reshape(3, 4) * 3 + 1, 0).sum(axis=1), rtol=1e-6)


@needs_tinygrad
@needs_cc
def test_every_output_dtype_exports_verifies_and_bundles(tmp_path: Any) -> None:
    """bool, large int32, float16 and uint8 outputs: exact where integral; the bundle verifies the same."""
    script = tmp_path / "dt.py"
    script.write_text(
        "from tinygrad import Tensor, dtypes\n"
        "def model(x):\n"
        "    return {'mask': x > 0.25, 'idx': (x * 100).cast(dtypes.int32) + 70000,\n"
        "            'h': (x * 2).cast(dtypes.float16), 'u8': (x * 50 + 60).cast(dtypes.uint8)}\n"
    )
    from svod_min.dtypes import dtype
    from svod_min.npy import write_npy

    x = np.linspace(-1, 1, 12, dtype=np.float32)
    write_npy(str(tmp_path / "x.npy"), dtype("float32"), (3, 4), x.tobytes())
    bundle = str(tmp_path / "dt.svod")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "svod_min",
            "export-tinygrad",
            "%s:model" % script,
            str(tmp_path / "out"),
            "--input",
            "x=%s" % (tmp_path / "x.npy"),
            "--bundle",
            bundle,
            "--target",
            "x86_64",
            "--target",
            "x86_64-v3",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    for out in ("mask", "idx", "h", "u8"):
        assert "svod_min vs tinygrad, %s: ok" % out in proc.stdout, proc.stdout
    doc = json.load(open(str(tmp_path / "out" / "plan.json")))
    assert all(doc["expect"][o]["rtol"] == 0 and doc["expect"][o]["atol"] == 0 for o in ("mask", "idx", "u8"))
    env = dict(os.environ, SVOD_TARGET="x86_64") if os.uname().machine == "x86_64" else dict(os.environ)
    run = subprocess.run(
        [sys.executable, "-m", "svod_min", "run", bundle, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert {v["buffer"]: v["ok"] for v in json.loads(run.stdout)["verify"]} == {
        "mask": True,
        "idx": True,
        "h": True,
        "u8": True,
    }
    loaded = load_plan(bundle)
    loaded.plan.execute()
    assert loaded.buffers["mask"].numpy().ravel().tolist() == (x > 0.25).tolist()  # numpy as the reference
    np.testing.assert_array_equal(loaded.buffers["idx"].numpy().ravel(), (x * np.float32(100)).astype(np.int32) + 70000)
    np.testing.assert_array_equal(loaded.buffers["h"].numpy().ravel(), (x * 2).astype(np.float16))
