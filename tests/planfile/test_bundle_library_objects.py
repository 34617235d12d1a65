"""A bundle carries objects for library instances the prebuilt objects lack (a float64 convolution here), one per
variant of the built targets' architectures, and a host with no compiler runs them."""

from __future__ import annotations

import json
import zipfile

import pytest

np = pytest.importorskip("numpy")

from support.hardening import no_compiler_env, run_python  # noqa: E402

from svod_min.compiler.targets import host_target  # noqa: E402
from svod_min.jit_loader.arch import host_arch  # noqa: E402
from svod_min.kernels import find_sig, host_variant  # noqa: E402
from svod_min.kernels.lookup import generated  # noqa: E402
from svod_min.planfile.bundle_build import build_bundle  # noqa: E402

VARS = {
    "N": 1,
    "C": 4,
    "H": 5,
    "W": 5,
    "OC": 6,
    "KH": 3,
    "KW": 3,
    "sh": 1,
    "sw": 1,
    "pt": 1,
    "pl": 1,
    "pb": 1,
    "pr": 1,
    "dh": 1,
    "dw": 1,
    "groups": 1,
}


def _conv_reference(x, w):
    """float64 direct convolution, stride 1, padding 1."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, w.shape[0], 5, 5))
    for kh in range(3):
        for kw in range(3):
            out += np.einsum("oc,nchw->nohw", w[:, :, kh, kw], xp[:, :, kh : kh + 5, kw : kw + 5])
    return out


@pytest.mark.skipif(
    host_variant() is None or host_target() is None, reason="no prebuilt variant or target fits this host"
)
def test_a_float64_convolution_runs_from_the_bundle_without_a_compiler(tmp_path):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 4, 5, 5)), rng.standard_normal((6, 4, 3, 3))
    np.save(str(tmp_path / "x.npy"), x)
    np.save(str(tmp_path / "w.npy"), w)
    plan = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "float64", "shape": [1, 4, 5, 5], "init": {"npy": "x.npy"}},
            "w": {"dtype": "float64", "shape": [6, 4, 3, 3], "init": {"npy": "w.npy"}},
            "y": {"dtype": "float64", "shape": [1, 6, 5, 5], "output": True},
        },
        "kernels": {"conv": {"library": "conv2d_gemm", "params": {"dtype": "float64"}}},
        "ops": [{"kernel": "conv", "buffers": ["y", "x", "w"], "vars": VARS}],
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    out = str(tmp_path / "p.svod")
    report = build_bundle(str(tmp_path / "plan.json"), out, targets=[host_target()])
    with zipfile.ZipFile(out) as zf:
        records = json.loads(zf.read("plan.json"))["kernels"]["conv"]["library_objects"]
    here = sorted(v for v, row in generated().VARIANTS.items() if row["arch"] == host_arch())
    assert sorted(r["variant"] for r in records) == here  # every variant of the arch, none of another
    assert (report.objects, report.library_objects) == (0, len(here))  # no generated kernel: all are library's
    entry = find_sig("conv2d_gemm", host_variant(), dtype="float64").entry
    assert any(r["entry"] == entry and r["variant"] == host_variant() for r in records)
    code = """
        import sys, numpy as np
        from svod_min.planfile.load import load_plan
        loaded = load_plan(sys.argv[1])
        print([k.entry_point for k in loaded.plan.kernels()])
        loaded.plan.execute()
        np.save(sys.argv[2], np.frombuffer(loaded.buffers["y"].copyout(), np.float64).reshape(1, 6, 5, 5))
    """
    result = run_python(code, out, str(tmp_path / "y.npy"), env=no_compiler_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str([entry])
    np.testing.assert_allclose(np.load(str(tmp_path / "y.npy")), _conv_reference(x, w), rtol=1e-12, atol=1e-12)
