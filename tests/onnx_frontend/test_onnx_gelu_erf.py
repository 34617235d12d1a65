"""The vectorised float32 erf (``svod_erff``) against float64 ``math.erf`` on a dense sample of every float32 range,
the exporters' Gelu chains rewritten into one Gelu (no Erf or Tanh kernel left in the plan) and equal to onnxruntime,
and chains that must stay: an intermediate with another reader, other constants."""

from __future__ import annotations

import collections
import math
import os
from typing import Any, Dict, List, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from support.onnx_models import build_and_load, graph_model, max_rel_error, run_ort  # noqa: E402

from svod_min.onnx import build  # noqa: E402,F401 - fills the op table
from svod_min.onnx.activations import activation  # noqa: E402
from svod_min.onnx.frontend.parse import read_graph  # noqa: E402
from svod_min.onnx.frontend.passes import run_passes  # noqa: E402
from svod_min.onnx.frontend.table import check_graph  # noqa: E402
from svod_min.onnx.kernels.elementwise import elementwise  # noqa: E402
from svod_min.onnx.ops.elementwise import UNARY  # noqa: E402

SQRT2 = np.float32(math.sqrt(2.0))
SHAPE = (2, 24, 40)


def _erf_sample() -> Any:
    """Every 1499th positive float32 (denormals to the largest finite), every 53rd in [0.125, 4.5] where the two
    halves of the approximation meet, both signs, and the special values."""
    strided = np.arange(0, 0x7F800000, 1499, dtype=np.uint32)
    dense = np.arange(0x3E000000, 0x40900000, 53, dtype=np.uint32)
    x = np.concatenate([strided, dense]).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17549435e-38, 3.4028235e38], np.float32)
    return np.concatenate([x, -x, specials])


def test_erf_within_two_ulp(tmp_path: Any) -> None:
    x = _erf_sample()
    model = graph_model([helper.make_node("Erf", ["x"], ["y"])], [("x", x.shape)], ["y"], 17, {})
    got = build_and_load(model, str(tmp_path)).run({"x": x})["y"]
    want = np.frompyfunc(math.erf, 1, 1)(x[np.isfinite(x)].astype(np.float64)).astype(np.float64)
    fin = got[np.isfinite(x)].astype(np.float64)
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    err = np.abs(fin - want) / ulp
    assert err.max() <= 2.0, (err.max(), x[np.isfinite(x)][np.argmax(err)])
    assert np.array_equal(np.signbit(fin), np.signbit(want))  # odd: -0 gives -0, negatives negative
    special = dict(zip(x[-9:-4].tolist(), got[-9:-4].tolist()))
    assert special[np.inf] == 1.0 and special[-np.inf] == -1.0 and math.isnan(got[-5])


@pytest.mark.parametrize("c", [UNARY["Erf"].c.format(x="x0"), activation("Gelu", {"tanh": 0.0}, "x0")])
def test_erf_kernels_call_no_libm(c: str) -> None:
    # libm's erff is a call per element that no compiler vectorises: the Erf op and the Gelu activation use the
    # branch-free svod_erff, defined in the kernel's own text.
    source = elementwise((4, 100), [(4, 100)], c).source
    assert "svod_erff(" in c and "static inline float svod_erff(" in source
    body = source.split("float erff(float);")[-1]  # after the prototypes
    assert "erff(" not in body.replace("svod_erff(", ""), body


def _ops(model: Any, directory: str) -> Dict[str, int]:
    path = os.path.join(directory, "passes.onnx")
    onnx.save(model, path)
    graph = read_graph(path, {}, {})
    check_graph(graph)
    return dict(collections.Counter(n.op for n in run_passes(graph).nodes))


def _c(value: float) -> Any:
    return np.array(value, np.float32)


def _erf_head(scale: str) -> Tuple[List[Any], Dict[str, Any]]:
    if scale == "div":
        return [helper.make_node("Div", ["x", "k"], ["s"]), helper.make_node("Erf", ["s"], ["e"])], {"k": _c(SQRT2)}
    inv = np.float32(1.0 / math.sqrt(2.0))
    return [helper.make_node("Mul", ["k", "x"], ["s"]), helper.make_node("Erf", ["s"], ["e"])], {"k": _c(inv)}


def _tanh_head(cube: str) -> Tuple[List[Any], Dict[str, Any]]:
    if cube == "pow":
        nodes = [helper.make_node("Pow", ["x", "three"], ["x3"])]
    else:
        nodes = [helper.make_node("Mul", ["x", "x"], ["x2"]), helper.make_node("Mul", ["x2", "x"], ["x3"])]
    nodes += [
        helper.make_node("Mul", ["c", "x3"], ["cx3"]),
        helper.make_node("Add", ["x", "cx3"], ["v"]),
        helper.make_node("Mul", ["v", "r"], ["u"]),
        helper.make_node("Tanh", ["u"], ["e"]),
    ]
    return nodes, {"three": _c(3.0), "c": _c(0.044715), "r": _c(math.sqrt(2.0 / math.pi))}


def _tail(order: str) -> Tuple[List[Any], Dict[str, Any]]:
    plus = helper.make_node("Add", ["one", "e"], ["a"])
    consts = {"one": _c(1.0), "half": _c(0.5), "two": _c(2.0)}
    if order == "x-then-half":  # (x * (1 + e)) * 0.5
        return [plus, helper.make_node("Mul", ["x", "a"], ["m"]), helper.make_node("Mul", ["m", "half"], ["y"])], consts
    if order == "x-then-div2":
        return [plus, helper.make_node("Mul", ["a", "x"], ["m"]), helper.make_node("Div", ["m", "two"], ["y"])], consts
    if order == "half-first":  # x * ((1 + e) * 0.5)
        return [plus, helper.make_node("Mul", ["half", "a"], ["m"]), helper.make_node("Mul", ["x", "m"], ["y"])], consts
    # (x * 0.5) * (1 + e)
    return [plus, helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Mul", ["h", "a"], ["y"])], consts


def _model(head: Tuple[List[Any], Dict[str, Any]], tail: Tuple[List[Any], Dict[str, Any]], extra: List[Any]) -> Any:
    """A MatMul + bias (the Gelu's host), the chain on its output, ``extra`` nodes after."""
    rng = np.random.default_rng(42)
    w = (rng.standard_normal((SHAPE[-1], SHAPE[-1])) * 0.4).astype(np.float32)
    b = (rng.standard_normal(SHAPE[-1]) * 0.5).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["in", "w"], ["p"]), helper.make_node("Add", ["p", "b"], ["x"])]
    outputs = ["y"] + [n.output[0] for n in extra]
    consts = dict(head[1], **tail[1], w=w, b=b)
    return graph_model(nodes + head[0] + tail[0] + extra, [("in", SHAPE)], outputs, 17, consts)


def _run(model: Any, tmp_path: Any) -> Tuple[List[Any], Dict[str, Any]]:
    feeds = {"in": (np.random.default_rng(7).standard_normal(SHAPE) * 1.5).astype(np.float32)}
    return run_ort(model, feeds), build_and_load(model, str(tmp_path)).run(feeds)


CHAINS = [
    ("div", "x-then-half"),
    ("mul", "x-then-div2"),
    ("div", "half-first"),
    ("mul", "half-x-first"),
    ("pow", "half-x-first"),
    ("muls", "x-then-half"),
]


@pytest.mark.parametrize("head,order", CHAINS)
def test_gelu_chain_becomes_one_fused_gelu(head: str, order: str, tmp_path: Any) -> None:
    model = _model(_erf_head(head) if head in ("div", "mul") else _tanh_head(head), _tail(order), [])
    ops = _ops(model, str(tmp_path))
    # The Gelu fused into the Add after the MatMul: no Erf, Tanh, Gelu or scalar arithmetic of the chain is left.
    assert ops == {"MatMul": 1, "Add": 1}, ops
    want, got = _run(model, tmp_path)
    # The tanh form runs as the library's svod_geluf: within 4 ulp of max(|x|, |gelu|), docs/kernels.md.
    assert max_rel_error(got["y"], want[0]) < (1e-5 if head in ("div", "mul") else 1e-4)
    assert float(np.std(want[0])) > 0.1


def test_chain_with_another_reader_stays(tmp_path: Any) -> None:
    # The Erf's result is also a graph output's input: rewriting would drop a value someone reads.
    model = _model(_erf_head("div"), _tail("x-then-half"), [helper.make_node("Neg", ["e"], ["n"])])
    ops = _ops(model, str(tmp_path))
    assert ops.get("Erf") == 1 and "Gelu" not in ops, ops
    want, got = _run(model, tmp_path)
    # Unfused, both engines round 1 + erf(s) on its own: an ulp of erf near -1 is 1e-5 of a small result.
    assert max_rel_error(got["y"], want[0]) < 1e-4 and max_rel_error(got["n"], want[1]) < 1e-5


@pytest.mark.parametrize("name,value", [("k", 1.5), ("half", 0.25), ("one", 2.0)])
def test_chain_with_other_constants_stays(name: str, value: float, tmp_path: Any) -> None:
    head, tail = _erf_head("div"), _tail("x-then-half")
    consts = head[1] if name in head[1] else tail[1]
    consts[name] = _c(value)
    model = _model(head, tail, [])
    ops = _ops(model, str(tmp_path))
    assert ops.get("Erf") == 1 and "Gelu" not in ops, ops
