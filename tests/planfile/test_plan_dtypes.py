"""Every ONNX run-time dtype through plans and bundles: ``.npy`` entries, ``expect``, ``run --input/--save``,
``load_model`` and the zipapp on a bare Python 3.8 without numpy.

One hand-written plan holds, per dtype, an input ``x_<dtype>`` (an ``.npy`` entry of edge values), a C kernel
``y = x + 1`` (integers wrap through their unsigned type, float32/float64 add), ``y = -x`` by the sign bit
(float16/bfloat16: exact, NaN and infinities kept) or ``y = !x`` (bool), an output ``y_<dtype>`` and an
``expect`` read from an ``.npy`` entry. numpy computes every reference on its own (bfloat16 as the top half
of float32's bits).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest
from conftest import needs_cc
from support.plan_file import REPO

from svod_min.__main__ import main
from svod_min.error import PlanError
from svod_min.npy import read_npy
from svod_min.planfile.bundle_build import build_bundle
from svod_min.planfile.load import load_model

np = pytest.importorskip("numpy")

DTYPES = [
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "bool",
]
#: the C element type of each dtype's storage, and the unsigned type its integer addition wraps through
_C = {
    "float32": ("float", ""),
    "float64": ("double", ""),
    "float16": ("unsigned short", ""),
    "bfloat16": ("unsigned short", ""),
    "int8": ("signed char", "unsigned char"),
    "uint8": ("unsigned char", "unsigned char"),
    "int16": ("short", "unsigned short"),
    "uint16": ("unsigned short", "unsigned short"),
    "int32": ("int", "unsigned int"),
    "uint32": ("unsigned int", "unsigned int"),
    "int64": ("long long", "unsigned long long"),
    "uint64": ("unsigned long long", "unsigned long long"),
    "bool": ("unsigned char", ""),
}
SHAPE = (2, 3)


def _bf16(values: List[float]) -> Any:
    """bfloat16 bits of float32 values that bfloat16 holds exactly (the top half of their float32 bits)."""
    return (np.array(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16).reshape(SHAPE)


def storage(dt: str) -> Any:
    """The numpy dtype a host array of ``dt`` has: bfloat16 travels as its uint16 bits."""
    return np.dtype("uint16" if dt == "bfloat16" else dt)


def example(dt: str) -> Any:
    """Edge values of ``dt``: its limits (integer wrap), NaN and infinities (floats)."""
    if dt == "bool":
        return np.array([True, False, True, True, False, False]).reshape(SHAPE)
    if dt == "bfloat16":
        return _bf16([0.0, -1.5, 3.0e38, float("inf"), float("-inf"), float("nan")])
    if dt.startswith("float"):
        big = float(np.finfo(dt).max)
        return np.array([0.0, -1.5, big, np.inf, -np.inf, np.nan], dtype=dt).reshape(SHAPE)
    info = np.iinfo(dt)
    return np.array([info.min, info.min + 1, 0, 1, info.max - 1, info.max], dtype=dt).reshape(SHAPE)


def other(dt: str) -> Any:
    """A second input for ``--input`` and calls: different from the example everywhere."""
    if dt == "bool":
        return np.array([False, False, True, False, True, True]).reshape(SHAPE)
    if dt == "bfloat16":
        return _bf16([-0.0, 2.5, -7.0, 1.0e-30, 0.5, -65536.0])
    if dt.startswith("float"):
        return np.array([-0.0, 2.5, -7.0, 6.0e-5, 0.5, -1024.0], dtype=dt).reshape(SHAPE)
    info = np.iinfo(dt)
    return np.array([info.max, info.min, 5, 42, info.max // 2, 2], dtype=dt).reshape(SHAPE)


def reference(dt: str, x: Any) -> Any:
    """What the plan's kernel computes, by numpy."""
    if dt == "bool":
        return ~x
    if dt in ("float16", "bfloat16"):
        return (x.view(np.uint16) ^ np.uint16(0x8000)).view(storage(dt))
    if dt.startswith("float"):
        return x + np.array(1, dtype=dt)
    with np.errstate(over="ignore"):
        return (x + np.array(1, dtype=dt)).astype(dt)  # integer arrays wrap, as the kernel's unsigned sum


def _kernel(dt: str) -> str:
    t, u = _C[dt]
    if dt in ("float32", "float64"):
        value = "x[i] + 1"
    elif dt in ("float16", "bfloat16"):
        value = "(unsigned short)(x[i] ^ 0x8000u)"
    elif dt == "bool":
        value = "(unsigned char)!x[i]"
    else:
        value = "(%s)((%s)x[i] + 1u)" % (t, u)
    return "void k_%s(%s* restrict y, const %s* restrict x, int n) {\n  for (int i = 0; i < n; i++) y[i] = %s;\n}\n" % (
        dt,
        t,
        t,
        value,
    )


def write_plan(folder: Path, dtypes: List[str]) -> str:
    """The plan of the module docstring for ``dtypes``, its ``.npy`` files beside it; the plan's path."""
    doc: Dict[str, Any] = {"svod_plan": 1, "buffers": {}, "kernels": {}, "ops": [], "expect": {}}
    for dt in dtypes:
        x = example(dt)
        np.save(str(folder / ("x_%s.npy" % dt)), x)
        np.save(str(folder / ("want_%s.npy" % dt)), reference(dt, x))
        doc["buffers"]["x_" + dt] = {"dtype": dt, "shape": list(SHAPE), "init": {"npy": "x_%s.npy" % dt}, "input": True}
        doc["buffers"]["y_" + dt] = {"dtype": dt, "shape": list(SHAPE), "output": True}
        doc["kernels"]["k_" + dt] = {
            "source": _kernel(dt),
            "buffers": 2,
            "vars": ["n"],
            "extents": {"0": "n", "1": "n"},
        }
        doc["ops"].append({"kernel": "k_" + dt, "buffers": ["y_" + dt, "x_" + dt], "vars": {"n": 6}})
        doc["expect"]["y_" + dt] = {"npy": "want_%s.npy" % dt}
    path = folder / "plan.json"
    path.write_text(json.dumps(doc, indent=1))
    return str(path)


def same(got: Any, want: Any) -> bool:
    """Equal dtype, shape and bits (NaN equals NaN: the bits say so)."""
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Every dtype's plan built into one bundle (one target: the host's baseline, as the bare 3.8 run loads)."""
    folder = tmp_path_factory.mktemp("dtypes")
    plan = write_plan(folder, DTYPES)
    out = str(folder / "dtypes.svod")
    build_bundle(plan, out, targets=["x86_64"] if os.uname().machine == "x86_64" else ["aarch64"])
    return out


def _cli(*args: str, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.run(
        [sys.executable, "-m", "svod_min", *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd
    )


@needs_cc
def test_every_dtype_verifies_and_round_trips_run_input_and_save(bundle: str, tmp_path: Path) -> None:
    first = _cli("run", bundle, "--once", "--json")
    assert first.returncode == 0, first.stderr
    verify = {v["buffer"]: v["ok"] for v in json.loads(first.stdout)["verify"]}
    assert verify == {"y_" + dt: True for dt in DTYPES}
    args: List[str] = []
    for dt in DTYPES:
        path = tmp_path / ("in_%s.npy" % dt)
        np.save(str(path), other(dt))
        args += ["--input", "x_%s=%s" % (dt, path)]
    out = tmp_path / "out"
    proc = _cli("run", bundle, "--once", "--save", str(out), *args)
    assert proc.returncode == 0, proc.stderr
    for dt in DTYPES:
        got = np.load(str(out / ("y_%s.npy" % dt)))
        assert same(got, reference(dt, other(dt))), dt


@needs_cc
def test_load_model_takes_and_returns_every_dtype(bundle: str) -> None:
    model = load_model(bundle)
    got = model(**{"x_" + dt: other(dt) for dt in DTYPES})
    for dt in DTYPES:
        assert same(got["y_" + dt], reference(dt, other(dt))), dt
    # the general path (not an ndarray of the buffer's dtype and shape): a strided view, a subclass
    strided = np.ascontiguousarray(other("int64")[:, ::-1])[:, ::-1]
    again = model(x_int64=strided, x_uint8=np.ma.masked_array(other("uint8")))
    assert same(again["y_int64"], reference("int64", other("int64")))
    assert same(again["y_uint8"], reference("uint8", other("uint8")))
    try:
        import ml_dtypes  # its bfloat16 arrays go in as their bits
    except ImportError:  # an optional numpy extension (onnx brings it)
        return
    values = other("bfloat16").view(ml_dtypes.bfloat16)
    assert same(model(x_bfloat16=values)["y_bfloat16"], reference("bfloat16", other("bfloat16")))


@needs_cc
def test_a_bool_feed_is_stored_as_0_and_1(bundle: str, tmp_path: Path) -> None:
    raw = np.frombuffer(bytes([2, 0, 255, 1, 0, 128]), dtype=np.bool_).reshape(SHAPE)  # numpy: all nonzero is true
    want = reference("bool", np.array([True, False, True, True, False, True]).reshape(SHAPE))
    model = load_model(bundle)
    for feed in (raw, raw[:, ::-1][:, ::-1], raw.T.copy().T):  # the view path, and the general path
        got = model(x_bool=feed)["y_bool"]
        assert same(got, want) and set(got.view(np.uint8).ravel().tolist()) <= {0, 1}
    path = tmp_path / "raw.npy"
    np.save(str(path), raw)
    loaded = model.loaded
    dt, shape, payload = read_npy(str(path))
    loaded.set_input("x_bool", dt.name, shape, payload)
    assert loaded.buffers["x_bool"].copyout() == bytes([1, 0, 1, 1, 0, 1])


def _void2(path: Path, bits: Any) -> None:
    """``bits`` saved as ml_dtypes' np.save saves a bfloat16 array: descr ``<V2``."""
    np.save(str(path), bits.view("V2"))


@needs_cc
def test_a_feed_of_another_dtype_or_shape_is_refused_naming_both(bundle: str, tmp_path: Path, capsys: Any) -> None:
    feeds = {
        "f32": np.zeros(SHAPE, np.float32),
        "i64t": np.zeros(SHAPE[::-1], np.int64),
        "u8": np.zeros(SHAPE, np.uint8),
        "b": np.zeros(SHAPE, np.bool_),
        "u16": other("bfloat16"),
    }
    for stem, arr in feeds.items():
        np.save(str(tmp_path / (stem + ".npy")), arr)
    _void2(tmp_path / "v2.npy", other("bfloat16"))
    refused = {
        "x_float16=f32": "input 'x_float16': got float32 [2, 3], the plan's input is float16 [2, 3]",
        "x_int64=i64t": "input 'x_int64': got int64 [3, 2], the plan's input is int64 [2, 3]",
        "x_bool=u8": "input 'x_bool': got uint8 [2, 3], the plan's input is bool [2, 3]",
        "x_uint8=b": "input 'x_uint8': got bool [2, 3], the plan's input is uint8 [2, 3]",
        "x_uint16=v2": "input 'x_uint16': got bfloat16 [2, 3], the plan's input is uint16 [2, 3]",
        "x_bfloat16=f32": "input 'x_bfloat16': got float32 [2, 3], the plan's input is bfloat16 [2, 3] (fed as its "
        "uint16 bits or an ml_dtypes bfloat16 array)",
    }
    for feed, message in refused.items():
        name, stem = feed.split("=")
        assert main(["run", bundle, "--once", "--input", "%s=%s" % (name, tmp_path / (stem + ".npy"))]) == 2, feed
        assert capsys.readouterr().err.strip() == "error: " + message
    # bfloat16 takes its bits as uint16 (what --save writes) and as <V2 (ml_dtypes' np.save)
    for stem in ("u16", "v2"):
        out = tmp_path / ("out_" + stem)
        args = ["run", bundle, "--once", "--input", "x_bfloat16=%s" % (tmp_path / (stem + ".npy")), "--save", str(out)]
        assert main(args) == 0, capsys.readouterr().err
        assert same(np.load(str(out / "y_bfloat16.npy")), reference("bfloat16", other("bfloat16")))
    model = load_model(bundle)
    for value, message in (
        ([[1.0, 2.0, 3.0]] * 2, "input 'x_float16': got float64 [2, 3], the plan's input is float16 [2, 3]"),
        (np.zeros((6,), np.float16), "input 'x_float16': got float16 [6], the plan's input is float16 [2, 3]"),
        (np.zeros(SHAPE, np.int16), "input 'x_float16': got int16 [2, 3], the plan's input is float16 [2, 3]"),
    ):
        with pytest.raises(PlanError) as err:
            model(x_float16=value)
        assert str(err.value) == message


def _copy_plan(dt: str, values: List[Any], expect: Dict[str, Any]) -> Dict[str, Any]:
    """x (``values``) copied to y, and ``expect`` of y: a plan without kernels."""
    shape = [len(values)]
    return {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": dt, "shape": shape, "init": {"values": values}},
            "y": {"dtype": dt, "shape": shape, "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "x"}}],
        "expect": {"y": expect},
    }


def _verified(doc: Dict[str, Any]) -> bool:
    from svod_min.planfile.load import load_plan

    loaded = load_plan(doc)
    loaded.plan.execute()
    ((_, ok, _),) = loaded.verify()
    return ok


@pytest.mark.parametrize("dt", ["int32", "int64", "uint64", "uint8"])
def test_expect_compares_integers_exactly(dt: str) -> None:
    big = {"int32": 2**31 - 1, "int64": 2**62 + 1, "uint64": 2**64 - 1, "uint8": 255}[dt]
    values = [3, big - 2, big]
    assert _verified(_copy_plan(dt, values, {"values": values}))
    # one off at a large value: within the float default's rtol (1e-5 of it), but not equal
    assert not _verified(_copy_plan(dt, values, {"values": [3, big - 2, big - 1]}))
    assert _verified(_copy_plan(dt, values, {"values": [3, big - 2, big - 1], "atol": 1}))  # a tolerance given


def test_expect_of_bool_and_low_precision_floats() -> None:
    assert _verified(_copy_plan("bool", [True, False, 1, 2], {"values": [1, 0, True, 2]}))  # 2: true
    assert not _verified(_copy_plan("bool", [True, False, 1, 2], {"values": [1, 1, 1, 1]}))
    decimal = [0.1, 1 / 3, 65504.0, -2.5e-5, 1.0e-7]
    # stored as float16 / bfloat16 (rounded), compared with the decimal values within their rounding
    assert _verified(_copy_plan("float16", decimal, {"values": decimal}))
    assert not _verified(_copy_plan("float16", decimal, {"values": [0.1003, 1 / 3, 65504.0, -2.5e-5, 1.0e-7]}))
    assert _verified(_copy_plan("bfloat16", [0.1, 3.14159, -1.0e30], {"values": [0.1, 3.14159, -1.0e30]}))
    assert not _verified(_copy_plan("bfloat16", [0.1, 3.14159, -1.0e30], {"values": [0.1, 3.2, -1.0e30]}))
    # NaN, infinities and -0.0 of float16 and bfloat16 come from .npy data (JSON has none): the bundle's example


def _python38() -> Optional[str]:
    """python3.8 from PATH as it runs itself (a pyenv shim needs the PATH a bare run strips), or None."""
    found = shutil.which("python3.8")
    if found is None:
        return None
    proc = subprocess.run(
        [found, "-I", "-S", "-c", "import sys; print(sys.executable)"], capture_output=True, text=True, timeout=60
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


BARE_DTYPES = ["float16", "bfloat16", "float64", "int8", "uint16", "int64", "uint64", "bool"]


@needs_cc
@pytest.mark.python_independent  # it runs python3.8 from PATH itself, whatever the env's Python is
def test_the_zipapp_on_a_bare_python38_runs_feeds_and_saves_several_dtypes(
    pyz: str, bundle: str, tmp_path: Path
) -> None:
    python = _python38()
    if python is None:
        pytest.skip("python3.8 is not on PATH (CI puts every pyenv version there)")
    env = {"PATH": str(tmp_path), "SVOD_OBJECT_CACHE": "0", "HOME": str(tmp_path), "LANG": "C.UTF-8"}

    def bare(*args: str) -> subprocess.CompletedProcess:
        cmd = [python, "-I", "-S", pyz, *args]
        return subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=300)

    first = bare("run", bundle, "--once", "--json")  # the .npy entries' NaN, infinities and limits, verified
    assert first.returncode == 0, first.stderr
    assert {v["buffer"]: v["ok"] for v in json.loads(first.stdout)["verify"]} == {"y_" + dt: True for dt in DTYPES}
    args: List[str] = []
    for dt in BARE_DTYPES:
        np.save(str(tmp_path / ("in_%s.npy" % dt)), other(dt))
        args += ["--input", "x_%s=in_%s.npy" % (dt, dt)]
    run = bare("run", bundle, "--once", "--save", "out", *args)
    assert run.returncode == 0, run.stderr
    for dt in DTYPES:  # the others keep their example inputs
        x = other(dt) if dt in BARE_DTYPES else example(dt)
        assert same(np.load(str(tmp_path / "out" / ("y_%s.npy" % dt))), reference(dt, x)), dt
    wrong = bare("run", bundle, "--once", "--input", "x_int8=in_uint16.npy")
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == "error: input 'x_int8': got uint16 [2, 3], the plan's input is int8 [2, 3]"
    info = bare("info", bundle)
    assert info.returncode == 0, info.stderr
    assert "input x_bfloat16: bfloat16 [2, 3] (.npy: its uint16 bits)" in info.stdout
    assert "output y_bool: bool [2, 3]" in info.stdout


@pytest.mark.parametrize("dt", ["bfloat16", "float16", "bool"])
def test_large_npy_entries_of_2_byte_floats_and_bool_are_read_into_their_buffers(dt: str, tmp_path: Path) -> None:
    from svod_min.planfile.bundle import STORE_ABOVE

    count = STORE_ABOVE  # over STORE_ABOVE bytes: the bundle stores it, the load reads it straight into its buffer
    rng = np.random.default_rng(5)
    if dt == "bool":  # any byte: numpy reads each nonzero one as true, the buffer stores it as 1
        data = rng.integers(0, 256, count, np.uint8).view(np.bool_)
    else:
        data = rng.integers(0, 1 << 16, count, np.uint16).view(storage(dt))
    doc = {
        "svod_plan": 1,
        "buffers": {
            "w": {"dtype": dt, "shape": [count], "init": {"npy": "w.npy"}},
            "y": {"dtype": dt, "shape": [count], "output": True},
        },
        "ops": [{"copy": {"dst": "y", "src": "w"}}],
    }
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    np.save(str(tmp_path / "w.npy"), data)
    build_bundle(str(tmp_path / "plan.json"), str(tmp_path / "w.svod"), targets=["x86_64"])
    got = load_model(str(tmp_path / "w.svod"))()["y"]
    assert same(got, data.view(np.uint8) != 0 if dt == "bool" else data)


def test_empty_tensors_of_every_dtype_go_in_and_come_out(tmp_path: Path) -> None:
    doc: Dict[str, Any] = {"svod_plan": 1, "buffers": {}, "ops": []}
    args = ["run", str(tmp_path / "plan.json"), "--once", "--save", str(tmp_path / "out")]
    for dt in DTYPES:
        doc["buffers"]["x_" + dt] = {"dtype": dt, "shape": [0, 3], "input": True}
        doc["buffers"]["y_" + dt] = {"dtype": dt, "shape": [0, 3], "output": True}
        doc["ops"].append({"copy": {"dst": "y_" + dt, "src": "x_" + dt}})
        np.save(str(tmp_path / ("in_%s.npy" % dt)), np.zeros((0, 3), storage(dt)))
        args += ["--input", "x_%s=%s" % (dt, tmp_path / ("in_%s.npy" % dt))]
    (tmp_path / "plan.json").write_text(json.dumps(doc))
    assert main(args) == 0
    got = load_model(str(tmp_path / "plan.json"))(**{"x_" + dt: np.zeros((0, 3), storage(dt)) for dt in DTYPES})
    for dt in DTYPES:
        want = np.zeros((0, 3), storage(dt))
        assert same(np.load(str(tmp_path / "out" / ("y_%s.npy" % dt))), want) and same(got["y_" + dt], want), dt
