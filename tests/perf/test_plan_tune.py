"""build --tune's plan step with the timings stubbed: which tile wins, the margin over the default, the regrouping
of ops into kernels that record their choice, and the thread count and fixed params handed to the tuner."""

from __future__ import annotations

from typing import Any, Dict, List

import pytest

from svod_min.kernels import find_sig, host_variant
from svod_min.perf import plan_tune
from svod_min.perf.autotune import TuneResult, TuneRow, tuning_params

VARIANT = host_variant()
pytestmark = pytest.mark.skipif(VARIANT is None, reason="no prebuilt kernel variant fits this host")
PARAMS = {"dtype": "float32", "act": "relu", "bias": True, "packed": True, "residual": False}
KEY = "lib.conv2d_gemm.act=relu.bias=True.packed=True.residual=False"


def _default() -> Dict[str, Any]:
    return {k: v for k, v in find_sig("conv2d_gemm", VARIANT, **PARAMS).params if k in ("mr", "nr")}


def _other() -> Dict[str, Any]:
    return {"mr": 4, "nr": 8} if _default() != {"mr": 4, "nr": 8} else {"mr": 6, "nr": 16}


def _vars(h: int) -> Dict[str, Any]:
    return {
        "N": 1,
        "C": 8,
        "H": h,
        "W": h,
        "OC": 16,
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


def _doc(heights: List[int]) -> Dict[str, Any]:
    ops = [{"kernel": KEY, "buffers": ["y%d" % i, "x", "w", "b"], "vars": _vars(h)} for i, h in enumerate(heights)]
    ops.append({"kernel": "other", "buffers": ["z", "x"]})
    return {
        "kernels": {KEY: {"library": "conv2d_gemm", "params": dict(PARAMS)}, "other": {"source": "", "buffers": 2}},
        "ops": ops,
    }


def _stub(monkeypatch, other_share: Dict[int, float], calls: List[Dict[str, Any]]) -> None:
    """The tuner stubbed: per image height, the other tile's time as a share of the default's."""

    def tune(name, *, dtype, shape, params, threads, candidates, config, store):
        calls.append({"shape": dict(shape), "params": dict(params), "threads": threads, "store": store})
        rows = [TuneRow(params=_default(), min_s=1e-3), TuneRow(params=_other(), min_s=1e-3 * other_share[shape["H"]])]
        best = min(rows, key=lambda r: r.min_s)
        return TuneResult(name, dtype, dict(shape), {}, dict(best.params), rows)

    monkeypatch.setattr(plan_tune, "tune", tune)


def test_regroups_ops_by_their_choice_and_keeps_the_default_within_the_margin(monkeypatch):
    calls: List[Dict[str, Any]] = []
    _stub(monkeypatch, {7: 0.90, 14: 0.97, 28: 1.20}, calls)
    doc = _doc([7, 14, 28, 7])
    result = plan_tune.tune_plan(doc, threads=2)
    assert result is not None and result.variant == VARIANT and len(result.ops) == 3  # the repeated shape once
    assert [c["threads"] for c in calls] == [2, 2, 2] and not any(c["store"] for c in calls)
    assert all(c["params"] == {"act": "relu", "bias": True, "packed": True, "residual": False} for c in calls)
    other_key = "%s~mr=%d.nr=%d" % (KEY, _other()["mr"], _other()["nr"])
    assert [op["kernel"] for op in doc["ops"]] == [other_key, KEY, KEY, other_key, "other"]
    assert doc["kernels"][KEY]["tuned"] == {VARIANT: _default()}  # 3% faster is noise: the default stays
    assert doc["kernels"][other_key]["tuned"] == {VARIANT: _other()}
    assert doc["kernels"][other_key]["params"] == PARAMS
    assert "tuned" not in doc["kernels"]["other"]
    assert result.summary()["non_default"] == 1 and result.summary()["threads"] == 2


def test_a_kernel_every_op_left_is_dropped(monkeypatch):
    _stub(monkeypatch, {7: 0.5}, [])
    doc = _doc([7])
    plan_tune.tune_plan(doc)
    assert KEY not in doc["kernels"] and len(doc["kernels"]) == 2


def test_no_variant_means_nothing_is_tuned(monkeypatch):
    monkeypatch.setattr(plan_tune, "host_variant", lambda: None)
    lines: List[str] = []
    doc = _doc([7])
    assert plan_tune.tune_plan(doc, lines.append) is None
    assert doc == _doc([7]) and "keeps the defaults" in lines[0]


def test_tuning_params_of_the_tunable_kernels_are_the_tile():
    assert tuning_params("conv2d_gemm") == ["mr", "nr"]
    assert {"mr", "nr"} <= set(tuning_params("matmul"))


def test_a_shape_the_tuner_refuses_keeps_the_default_and_says_why(monkeypatch):
    from svod_min.error import KernelParamError

    def refuse(name, **kwargs):
        raise KernelParamError("too large to tune")

    monkeypatch.setattr(plan_tune, "tune", refuse)
    lines: List[str] = []
    doc = _doc([7])
    result = plan_tune.tune_plan(doc, lines.append)
    assert result is not None and result.ops[0].choice == _default()
    assert doc["kernels"][KEY]["tuned"] == {VARIANT: _default()}
    assert any("not tuned: too large to tune" in line for line in lines) and result.summary()["not_tuned"] == 1


def test_a_plan_variable_is_tuned_at_its_default(monkeypatch):
    calls: List[Dict[str, Any]] = []
    _stub(monkeypatch, {7: 0.5}, calls)
    doc = _doc([7])
    doc["vars"] = {"side": {"min": 1, "max": 9, "default": 7}}
    doc["ops"][0]["vars"].update(H="side", W="side")
    plan_tune.tune_plan(doc)
    assert calls[0]["shape"]["H"] == calls[0]["shape"]["W"] == 7
    assert doc["ops"][0]["vars"]["H"] == "side" and doc["ops"][0]["kernel"].startswith(KEY + "~")
