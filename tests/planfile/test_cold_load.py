"""What a fresh process that loads a bundle and runs it once imports: nothing it does not use.

A cold start is measured against onnxruntime's (svod_min.perf.benchmarks.bench_onnx), and most of
it is imports. A bundle of library kernels and weights compiles nothing, so the compiler driver,
the on-disk object cache, the tuning store, a thread pool (one thread) and the modules only their
error paths use stay out; these tests hold that, in a child with no site-packages so that nothing
else brings them in.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from typing import Any, Dict, List, Optional

import pytest
from support.paths import REPO_DIR

from svod_min import kernels
from svod_min.planfile.bundle import PLAN, write_bundle

#: Without a prebuilt object for this host the library compiles its kernel, and then the driver is needed.
pytestmark = pytest.mark.skipif(
    not kernels.get("add", dtype="float32").prebuilt,
    reason="no prebuilt library object here: the add kernel would be compiled",
)

#: Modules a load of precompiled and library kernels never needs (each costs milliseconds of a start).
NOT_AT_LOAD = (
    "svod_min.compiler.clang",
    "svod_min.compiler.batch",
    "svod_min.compiler.batch_unit",
    "svod_min.compiler.probe",
    "svod_min.compiler.object_split",
    "svod_min.compiler.run",
    "svod_min.cache.disk",
    "svod_min.kernels.tuning",
    "concurrent.futures",
    "logging",
    "subprocess",
    "ctypes.util",
    "statistics",
    "difflib",
    "svod_min.profiler",
    "traceback",
    "tempfile",
    "random",
) + (("glob",) if sys.version_info < (3, 13) else ())  # 3.13's zipfile imports glob itself

CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from svod_min.npy import read_npy
from svod_min.planfile.load import load_plan
loaded = load_plan(sys.argv[2])
dtype, shape, payload = read_npy(sys.argv[3])
loaded.set_input("a", dtype.name, tuple(shape), payload)
loaded.plan.execute()
out = loaded.buffers["out"].tolist()
print(json.dumps({"out": out, "modules": sorted(sys.modules)}))
"""

VALUES = [-1.5, 2.0, 0.25, 7.0, -3.0, 0.0, 1e3, -2e-3]


def npy(values: List[float]) -> bytes:
    """An ``.npy`` file of float32 ``values`` as numpy spells its header."""
    header = ("{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)).ljust(117) + "\n"
    return (
        b"\x93NUMPY\x01\x00"
        + struct.pack("<H", len(header))
        + header.encode("latin1")
        + struct.pack("<%df" % len(values), *values)
    )


def add_bundle(path: str, expect: Optional[List[float]] = None) -> str:
    """out = a + b: a library kernel, ``a`` the input, ``b`` weights from the bundle; ``expect``: out's recorded
    values, as a ``.npy`` file in the bundle (as ``build`` records onnxruntime's)."""
    plan: Dict[str, Any] = {
        "svod_plan": 1,
        "buffers": {
            "out": {"dtype": "float32", "shape": [8], "output": True},
            "a": {"dtype": "float32", "shape": [8], "input": True},
            "b": {"dtype": "float32", "shape": [8], "init": {"npy": "data/b.npy"}},
        },
        "kernels": {"add": {"library": "add", "params": {"dtype": "float32"}}},
        "ops": [{"kernel": "add", "buffers": ["out", "a", "b"], "vars": {"n": 8}}],
    }
    files = {"data/b.npy": npy([10.0 * i for i in range(8)])}
    if expect is not None:
        plan["expect"] = {"out": {"npy": "data/expect_out.npy"}}
        files["data/expect_out.npy"] = npy(expect)
    write_bundle(path, {PLAN: json.dumps(plan).encode(), **files}, {"svod_min": "test"})
    return path


def run_child(tmp_path: Any) -> Dict[str, Any]:
    bundle = add_bundle(str(tmp_path / "add.svod"))
    (tmp_path / "a.npy").write_bytes(npy(VALUES))
    proc = subprocess.run(
        [sys.executable, "-S", "-c", CHILD, REPO_DIR, bundle, str(tmp_path / "a.npy")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"SVOD_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_fresh_load_and_run_imports_no_compiler_pool_or_error_path_module(tmp_path: Any) -> None:
    report = run_child(tmp_path)
    want = [struct.unpack("<f", struct.pack("<f", a + 10.0 * i))[0] for i, a in enumerate(VALUES)]  # float32 sums
    assert report["out"] == want  # the load did its work: the control for the list below
    assert [m for m in NOT_AT_LOAD if m in report["modules"]] == []


def test_the_guard_sees_a_module_that_a_load_brings(tmp_path: Any) -> None:
    # the same child with the driver imported first: the check above would name it
    bundle = add_bundle(str(tmp_path / "add.svod"))
    (tmp_path / "a.npy").write_bytes(npy(VALUES))
    child = CHILD.replace(
        "from svod_min.npy import read_npy", "import svod_min.compiler.clang\nfrom svod_min.npy import read_npy"
    )
    proc = subprocess.run(
        [sys.executable, "-S", "-c", child, REPO_DIR, bundle, str(tmp_path / "a.npy")],
        capture_output=True,
        text=True,
        timeout=120,
        env={"SVOD_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    found = [m for m in NOT_AT_LOAD if m in json.loads(proc.stdout)["modules"]]
    assert "svod_min.compiler.clang" in found and "subprocess" in found


def test_a_library_kernel_of_a_plan_still_gives_its_c_unit_when_asked(tmp_path: Any) -> None:
    # a load no longer cuts each library kernel's C unit from its family file; asking still gives it
    from svod_min.kernels.library import device_kernel
    from svod_min.planfile.load import load_plan

    loaded = load_plan(add_bundle(str(tmp_path / "add.svod")))
    (kernel,) = loaded.plan.kernels()
    want = kernels.get("add", dtype="float32").source
    assert kernel.code == "" and kernel.source_text() == want and "svod_add_f32" in want
    assert device_kernel(loaded.plan.device, "add", dtype="float32").source == want


VERIFYING_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from svod_min.npy import read_npy
from svod_min.planfile.load import load_plan
loaded = load_plan(sys.argv[2])
dtype, shape, payload = read_npy(sys.argv[3])
loaded.set_input("a", dtype.name, tuple(shape), payload)
loaded.plan.execute()
before = "numpy" in sys.modules
report = loaded.verify()
print(json.dumps({"numpy_before_verify": before, "numpy_after": "numpy" in sys.modules, "verify": report}))
"""


def test_recorded_expectations_are_decoded_only_when_a_run_verifies(tmp_path: Any) -> None:
    # a bundle's expectations (.npy) are read at load but decoded at the first verification: a run that does not
    # verify (replaced inputs, --once) never imports numpy for them; with site-packages here, numpy is importable
    pytest.importorskip("numpy")
    want = [struct.unpack("<f", struct.pack("<f", a + 10.0 * i))[0] for i, a in enumerate(VALUES)]
    wrong = want[:-1] + [want[-1] + 1.0]
    for expect, ok in ((want, True), (wrong, False)):
        bundle = add_bundle(str(tmp_path / ("add_%s.svod" % ok)), expect)
        (tmp_path / "a.npy").write_bytes(npy(VALUES))
        proc = subprocess.run(
            [sys.executable, "-c", VERIFYING_CHILD, REPO_DIR, bundle, str(tmp_path / "a.npy")],
            capture_output=True,
            text=True,
            timeout=120,
            env={"SVOD_THREADS": "1"},
        )
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["numpy_before_verify"] is False and report["numpy_after"] is True
        assert [(name, passed) for name, passed, _err in report["verify"]] == [("out", ok)]


def test_a_recorded_expectation_of_the_wrong_size_is_refused_at_load(tmp_path: Any) -> None:
    from svod_min.error import PlanFileError
    from svod_min.planfile.load import load_plan

    bundle = add_bundle(str(tmp_path / "add.svod"), [1.0] * 7)
    with pytest.raises(PlanFileError, match=r"expect\.out.*7 expected values for a buffer of 8 elements"):
        load_plan(bundle)
