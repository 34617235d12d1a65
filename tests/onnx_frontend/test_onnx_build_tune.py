"""build MODEL.onnx --tune: tiles timed at build, recorded per variant, loaded from the prebuilt object or the
bundle's own object (no compiler needed), ignored on other variants; a build without it is unchanged."""

from __future__ import annotations

import functools
import json
import logging
import os
import zipfile

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.hardening import no_compiler_env, run_python  # noqa: E402
from support.onnx_models import graph_model, host_target, run_ort  # noqa: E402

from svod_min.__main__ import main  # noqa: E402
from svod_min.kernels import find_sig, host_variant  # noqa: E402
from svod_min.onnx import build_onnx  # noqa: E402
from svod_min.perf.benchmark import BenchmarkConfig  # noqa: E402
from svod_min.perf.plan_tune import tune_plan  # noqa: E402
from svod_min.planfile.load import load_plan  # noqa: E402

VARIANT = host_variant()
needs_variant = pytest.mark.skipif(VARIANT is None, reason="no prebuilt kernel variant fits this host")
QUICK = BenchmarkConfig(warmup_runs=0, timing_runs=1)


def _two_convs():
    """Conv 3x3 + bias + Relu, then a 1x1 Conv without bias, on a 7x7 image (seeded weights); fewer than 16 output
    channels keep both on the library's conv2d_gemm (not the blocked layout), whose tile the tuner picks."""
    rng = np.random.default_rng(0)
    consts = {
        "w1": rng.standard_normal((12, 8, 3, 3)).astype(np.float32) * 0.2,
        "b1": rng.standard_normal(12).astype(np.float32),
        "w2": rng.standard_normal((10, 12, 1, 1)).astype(np.float32) * 0.2,
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["h"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"]),
    ]
    return graph_model(nodes, [("x", (1, 8, 7, 7))], ["y"], 17, consts)


def _bundle_json(path: str, name: str):
    with zipfile.ZipFile(path) as zf:
        return json.loads(zf.read(name))


def _entries(path: str):
    return {k.entry_point for k in load_plan(path).plan.kernels()}


def _forced_build(tmp_path, tile):
    """The model built with --tune's step forced to one candidate tile (no timing decides)."""
    model = _two_convs()
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    build_onnx(path, out, targets=[host_target()], tune=functools.partial(_tuner, candidates=[tile]))
    return model, out


def _tuner(doc, progress, candidates):
    result = tune_plan(doc, progress, candidates=candidates, config=QUICK)
    return result.summary() if result is not None else None


def _conv_entry(tile, **params):
    return find_sig(
        "conv2d_gemm", VARIANT, dtype="float32", bias=True, residual=False, packed=True, **tile, **params
    ).entry


@needs_variant
def test_cli_tune_records_the_choice_and_runs_it(tmp_path, capsys):
    model = _two_convs()
    path, out = str(tmp_path / "m.onnx"), str(tmp_path / "m.svod")
    onnx.save(model, path)
    assert main(["build", path, "-o", out, "--target", host_target(), "--tune"]) == 0
    err = capsys.readouterr().err
    assert "tuning 2 library op shape(s) for %s at 1 thread(s)" % VARIANT in err and "[2/2] conv2d_gemm" in err
    plan = _bundle_json(out, "plan.json")
    tuned = {key: k["tuned"][VARIANT] for key, k in plan["kernels"].items() if "tuned" in k}
    assert len(tuned) >= 1 and all(set(t) == {"mr", "nr"} for t in tuned.values())
    assert _bundle_json(out, "manifest.json")["tuned"]["variant"] == VARIANT
    # every op binds the entry point of the tile its kernel records
    want = {
        find_sig("conv2d_gemm", VARIANT, **plan["kernels"][op["kernel"]]["params"], **tuned[op["kernel"]]).entry
        for op in plan["ops"]
    }
    assert _entries(out) == want
    assert main(["run", out]) == 0  # the expectations recorded from onnxruntime
    assert "verify y: ok" in capsys.readouterr().out
    assert main(["info", out]) == 0
    assert "tuned: for %s" % VARIANT in capsys.readouterr().out


@needs_variant
def test_forced_tile_runs_from_the_bundle_object_without_a_compiler(tmp_path):
    tile = {"mr": 4, "nr": 8} if VARIANT != "x86_64-baseline" else {"mr": 6, "nr": 16}
    model, out = _forced_build(tmp_path, tile)
    plan = _bundle_json(out, "plan.json")
    carried = [o for k in plan["kernels"].values() for o in k.get("library_objects", [])]
    assert {o["entry"] for o in carried} == {_conv_entry(tile, act="relu"), _conv_entry(tile, act="none")}
    assert all(o["variant"] == VARIANT for o in carried)
    x = np.random.default_rng(5).standard_normal((1, 8, 7, 7)).astype(np.float32)
    np.save(str(tmp_path / "x.npy"), x)
    code = """
        import sys, numpy as np
        from svod_min import load_model
        from svod_min.planfile.load import load_plan
        print(sorted(k.entry_point for k in load_plan(sys.argv[1]).plan.kernels()))
        np.save(sys.argv[3], load_model(sys.argv[1]).run({"x": np.load(sys.argv[2])})["y"])
    """
    result = run_python(code, out, str(tmp_path / "x.npy"), str(tmp_path / "y.npy"), env=no_compiler_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(sorted([_conv_entry(tile, act="relu"), _conv_entry(tile, act="none")]))
    want = run_ort(model, {"x": x})[0]
    np.testing.assert_allclose(np.load(str(tmp_path / "y.npy")), want, rtol=1e-4, atol=1e-5)


def _library_plan(tmp_path, kernel_extra):
    """A plan file of one library conv2d_gemm (float32, no bias) with ``kernel_extra`` in its kernel."""
    rng = np.random.default_rng(1)
    np.save(str(tmp_path / "x.npy"), rng.standard_normal((1, 4, 5, 5)).astype(np.float32))
    np.save(str(tmp_path / "w.npy"), rng.standard_normal((6, 4, 3, 3)).astype(np.float32))
    kernel = dict({"library": "conv2d_gemm", "params": {"dtype": "float32"}}, **kernel_extra)
    variables = {
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
    plan = {
        "svod_plan": 1,
        "buffers": {
            "x": {"dtype": "float32", "shape": [1, 4, 5, 5], "init": {"npy": "x.npy"}},
            "w": {"dtype": "float32", "shape": [6, 4, 3, 3], "init": {"npy": "w.npy"}},
            "y": {"dtype": "float32", "shape": [1, 6, 5, 5], "output": True},
        },
        "kernels": {"conv": kernel},
        "ops": [{"kernel": "conv", "buffers": ["y", "x", "w"], "vars": variables}],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return str(path)


@needs_variant
def test_a_choice_recorded_for_another_variant_or_without_its_object_is_ignored(tmp_path, caplog):
    default = find_sig("conv2d_gemm", VARIANT, dtype="float32").entry
    other = "aarch64-baseline" if VARIANT != "aarch64-baseline" else "x86_64-v4"
    odd = (
        {"mr": 4, "nr": 8}
        if find_sig("conv2d_gemm", VARIANT, dtype="float32", mr=4, nr=8).entry != default
        else {"mr": 6, "nr": 16}
    )
    for tuned in ({other: odd}, {VARIANT: odd}):  # another variant's choice; this one's with no object for it
        path = _library_plan(tmp_path, {"tuned": tuned})
        loaded = load_plan(path)
        assert [k.entry_point for k in loaded.plan.kernels()] == [default], tuned
    caplog.set_level(logging.DEBUG, logger="svod_min.planfile")
    load_plan(_library_plan(tmp_path, {"tuned": {VARIANT: odd}}))
    assert "neither prebuilt for %s nor carried by the plan; using the defaults" % VARIANT in caplog.text
    # a tile this svod_min does not know falls back too, never a crash
    assert _entries(_library_plan(tmp_path, {"tuned": {VARIANT: {"mr": 5, "nr": 7}}})) == {default}


def test_bad_library_records_are_refused_by_name(tmp_path):
    from svod_min.error import PlanFileError

    with pytest.raises(PlanFileError, match=r"kernels\.conv\.library_objects\[0\]\.sha256"):
        load_plan(
            _library_plan(
                tmp_path,
                {"library_objects": [{"variant": "x86_64-v4", "entry": "e", "file": "x.npy", "sha256": "XYZ"}]},
            )
        )
    with pytest.raises(PlanFileError, match=r"kernels\.conv: a library kernel takes only"):
        load_plan(_library_plan(tmp_path, {"entry": "svod_other"}))


def test_a_build_without_tune_records_nothing(tmp_path):
    model = _two_convs()
    path = str(tmp_path / "m.onnx")
    onnx.save(model, path)
    outs = [str(tmp_path / ("m%d.svod" % i)) for i in range(2)]
    for out in outs:
        build_onnx(path, out, targets=[host_target()])
    plan = _bundle_json(outs[0], "plan.json")
    assert not any({"tuned", "library_objects"} & set(k) for k in plan["kernels"].values())
    assert "tuned" not in _bundle_json(outs[0], "manifest.json")
    with open(outs[0], "rb") as a, open(outs[1], "rb") as b:
        assert a.read() == b.read()
    assert os.path.getsize(outs[0]) > 0
