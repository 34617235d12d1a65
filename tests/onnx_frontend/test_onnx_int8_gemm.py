"""The int8 GEMM (onnx/kernels/qgemm.py, templates/qgemm.c.j2) on every path it has: AVX512-VNNI (zmm), AVX-VNNI
(ymm), vpmaddwd without VNNI (zmm and ymm; portable C past its stack budget) and portable C, each forced
(svod_int8_isa through rt_helpers.set_int8_isa, the compile target through SVOD_TARGET), on shapes whose M, K and N
are no multiples of the tile (6 rows, 4-byte K groups, 64-column panels), int8 and uint8 on either side, zero points
per tensor, per row and per column, B constant (packed at build) and run-time (packed by a kernel, batched and
broadcast): MatMulInteger and ConvInteger (weights x patches packed from the input) against numpy's int64 sums,
QLinearMatMul and QLinearConv (w's scale per output channel, the int32 bias) bit for bit against onnxruntime. Then
the QDQ MatMul groups the front end rewrites into QLinearMatMul (frontend/quant_fold.py): a hand-built graph
(per-column int8 weights, and activation x activation as attention has it) within one quantum of onnxruntime, and
what is left alone."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest

np = pytest.importorskip("numpy")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from support import conv_ref  # noqa: E402
from support.onnx_models import build_and_load, run_ort, typed_model  # noqa: E402

from svod_min.compiler.targets import cpu_features  # noqa: E402
from svod_min.jit_loader.arch import host_arch  # noqa: E402
from svod_min.jit_loader.rt_helpers import int8_isa, set_int8_isa  # noqa: E402

ELEM = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "float32": TensorProto.FLOAT}
RNG = np.random.default_rng(4242)
X86 = host_arch() == "x86_64"
HAS_AVX512 = X86 and {"avx512f", "avx512bw"} <= cpu_features()
HAS_AVX2 = X86 and "avx2" in cpu_features()


def _ints(dtype: str, shape: List[int]) -> Any:
    info = np.iinfo(dtype)
    return RNG.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)


#: MatMulInteger cases: (A shape, A dtype, B shape, B dtype, B constant, a's zero point, b's zero point per column)
CASES = [
    ([1, 1], "uint8", [1, 1], "int8", True, False, False),
    ([7, 5], "uint8", [5, 17], "int8", True, True, True),
    ([13, 67], "int8", [67, 65], "uint8", True, True, False),
    ([2, 3, 6, 8], "uint8", [3, 8, 64], "int8", False, True, False),
    ([2, 1, 5, 9], "int8", [3, 9, 33], "int8", False, False, True),
    ([1, 12, 130], "uint8", [130, 70], "uint8", False, True, True),
    ([10], "uint8", [10, 3], "int8", True, True, False),
    # the last tile's rows in tiles of 4, 2 and 1: M = 10 (6 + 4), 9 (6 + 2 + 1), 8 (6 + 2)
    ([10, 19], "uint8", [19, 40], "int8", True, True, False),
    ([2, 9, 33], "int8", [33, 20], "uint8", True, False, True),
    ([8, 12], "uint8", [2, 12, 70], "int8", False, True, True),
]

#: ConvInteger cases: (x shape, x dtype, w shape, w dtype, attributes, w's zero point per output channel)
CONVS = [
    ([2, 3, 7, 9], "uint8", [5, 3, 3, 2], "int8", dict(pads=[1, 0, 2, 1], strides=[2, 1], dilations=[1, 2]), True),
    ([1, 4, 11, 13], "int8", [7, 4, 3, 3], "uint8", dict(pads=[1, 1, 1, 1]), False),
    ([1, 5, 9, 10], "uint8", [16, 5, 3, 3], "int8", dict(pads=[1, 1, 1, 1]), True),  # 16 channels: 6 + 6 + 4
]


def _graph() -> Tuple[Any, Dict[str, Any], Dict[str, Any], List[Any]]:
    """One model holding every case (one build): MatMulInteger outputs y0..., QLinearMatMul outputs q0...."""
    nodes, feeds, consts, refs = [], {}, {}, []
    for i, (ash, adt, bsh, bdt, const_b, za, zb_col) in enumerate(CASES):
        a, b = _ints(adt, ash), _ints(bdt, bsh)
        zav = _ints(adt, []) if za else np.zeros((), adt)
        zbv = _ints(bdt, [bsh[-1]] if zb_col else [])
        feeds["a%d" % i] = a
        (consts if const_b else feeds)["b%d" % i] = b
        consts.update({"za%d" % i: zav, "zb%d" % i: zbv})
        ins = ["a%d" % i, "b%d" % i, "za%d" % i if za else "", "zb%d" % i]
        nodes.append(helper.make_node("MatMulInteger", ins, ["y%d" % i]))
        refs.append(np.matmul(a.astype(np.int64) - zav, b.astype(np.int64) - zbv))
    # ConvInteger of one group: weights x patches packed from x (pads, strides, dilations; w's zero point per
    # output channel or per tensor), against numpy's exact sums
    for i, (xsh, xdt, wsh, wdt, attrs, per_channel) in enumerate(CONVS):
        x, w = _ints(xdt, xsh), _ints(wdt, wsh)
        xz, wz = _ints(xdt, []), _ints(wdt, [wsh[0]] if per_channel else [])
        feeds["cx%d" % i] = x
        consts.update({"cw%d" % i: w, "cxz%d" % i: xz, "cwz%d" % i: wz})
        ins = ["cx%d" % i, "cw%d" % i, "cxz%d" % i, "cwz%d" % i]
        nodes.append(helper.make_node("ConvInteger", ins, ["c%d" % i], **attrs))
        wd = w.astype(np.int64) - (wz[:, None, None, None] if per_channel else wz)
        stride, dil = tuple(attrs.get("strides", (1, 1))), tuple(attrs.get("dilations", (1, 1)))
        refs.append(conv_ref.conv2d(x.astype(np.int64) - xz, wd, stride, attrs.get("pads", [0] * 4), dil))
    # QLinearMatMul: per-column b scale and zero point, the dtype pairings onnxruntime takes, a y scale small
    # enough to saturate
    for i, (m, k, n, adt, bdt, ydt) in enumerate(
        [
            (7, 70, 65, "uint8", "int8", "uint8"),
            (13, 5, 17, "int8", "int8", "int8"),
            (4, 130, 3, "uint8", "uint8", "uint8"),
        ]
    ):
        p = "q%d_" % i
        feeds[p + "a"] = _ints(adt, [m, k])
        consts.update(
            {
                p + "as": np.array(0.02, np.float32),
                p + "az": _ints(adt, []),
                p + "b": _ints(bdt, [k, n]),
                p + "bs": RNG.uniform(0.005, 0.03, [n]).astype(np.float32),
                p + "bz": _ints(bdt, [n]),
                p + "ys": np.array(0.15 * np.sqrt(k), np.float32),
                p + "yz": _ints(ydt, []),
            }
        )
        ins = [p + s for s in ("a", "as", "az", "b", "bs", "bz", "ys", "yz")]
        nodes.append(helper.make_node("QLinearMatMul", ins, ["q%d" % i]))
    # QLinearConv: w's scale per output channel (a per-row scale in the GEMM), the int32 bias, pads and strides
    feeds["q3_x"] = _ints("uint8", [2, 3, 9, 10])
    consts.update(
        {
            "q3_xs": np.array(0.03, np.float32),
            "q3_xz": _ints("uint8", []),
            "q3_w": _ints("int8", [7, 3, 3, 3]),
            "q3_ws": RNG.uniform(0.002, 0.01, [7]).astype(np.float32),
            "q3_wz": np.zeros([7], np.int8),
            "q3_ys": np.array(0.2, np.float32),
            "q3_yz": _ints("uint8", []),
            "q3_b": RNG.integers(-3000, 3000, [7]).astype(np.int32),
        }
    )
    ins = ["q3_" + n for n in ("x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b")]
    nodes.append(helper.make_node("QLinearConv", ins, ["q3"], pads=[1, 1, 1, 1], strides=[2, 1]))
    outputs = ["y%d" % i for i in range(len(CASES))] + ["c%d" % i for i in range(len(CONVS))]
    outputs += ["q0", "q1", "q2", "q3"]
    inputs = [(name, list(v.shape), ELEM[v.dtype.name]) for name, v in feeds.items()]
    # onnxruntime refuses per-column b zero points of MatMulInteger: it checks the QLinearMatMul nodes alone
    qfeeds = {k: v for k, v in feeds.items() if k.startswith("q")}
    qinputs = [(name, list(v.shape), ELEM[v.dtype.name]) for name, v in qfeeds.items()]
    qconsts = {k: v for k, v in consts.items() if k.startswith("q")}
    first = len(CASES) + len(CONVS)
    want = run_ort(typed_model(nodes[first:], qinputs, outputs[first:], 13, qconsts), qfeeds)
    return typed_model(nodes, inputs, outputs, 13, consts), feeds, want, refs


def _paths() -> List[Tuple[str, int]]:
    """(compile target, svod_int8_isa bits) pairs this host runs: each of the kernel's three ways."""
    if not X86:
        return [("", 0)]
    have = int8_isa()
    paths = [("x86_64", 0)]
    if HAS_AVX2:
        paths += [("x86_64-v3", 0)] + ([("x86_64-v3", 2)] if have & 2 else [])
    if HAS_AVX512:
        paths += [("x86_64-v4", 0)] + [("x86_64-v4", b) for b in (1, 2) if have & b]
    return paths


def _check(got: Dict[str, Any], want: List[Any], refs: List[Any], label: str) -> None:
    """Every MatMulInteger and ConvInteger sum equal to numpy's, every QLinear result equal to onnxruntime's."""
    names = ["y%d" % i for i in range(len(CASES))] + ["c%d" % i for i in range(len(CONVS))]
    for name, ref in zip(names, refs):
        np.testing.assert_array_equal(got[name], ref.astype(np.int32), err_msg="%s %s" % (label, name))
    for i in range(4):
        np.testing.assert_array_equal(got["q%d" % i], want[i], err_msg="%s q%d" % (label, i))


def test_int8_gemm_every_path_and_remainder(tmp_path: Any, monkeypatch: Any) -> None:
    from svod_min import load_model
    from svod_min.onnx import build_onnx

    model, feeds, want, refs = _graph()
    path = str(tmp_path / "g.onnx")
    onnx.save(model, path)
    targets = sorted({t for t, _ in _paths() if t})
    bundle = str(tmp_path / "g.svod")
    if targets:
        build_onnx(path, bundle, targets=targets, expect=False)
    else:
        build_and_load(model, str(tmp_path), "g")
    seen = []
    for target, bits in _paths():
        if target:
            monkeypatch.setenv("SVOD_TARGET", target)
        old = set_int8_isa(bits)
        try:
            got = load_model(bundle if targets else str(tmp_path / "g.svod")).run(feeds)
        finally:
            set_int8_isa(old)
        _check(got, want, refs, "%s %d" % (target, bits))
        seen.append((target, bits))
    assert len(seen) == len(_paths())
    q = [got["q%d" % i] for i in range(3)]
    assert any(((v == np.iinfo(v.dtype).min) | (v == np.iinfo(v.dtype).max)).any() for v in q)


@pytest.mark.skipif(not HAS_AVX2, reason="the widened way is x86-64 with AVX2 or AVX-512")
def test_a_k_past_the_widened_ways_stack_budget_takes_the_portable_way(tmp_path: Any, monkeypatch: Any) -> None:
    """The widened way keeps a tile's rows of A on the stack (qgemm.QUADS_BYTES); a K past that budget renders no
    widened form, and a CPU without VNNI computes the same sums in portable C."""
    from svod_min import load_model
    from svod_min.onnx import build_onnx
    from svod_min.onnx.kernels import qgemm

    model, feeds, want, refs = _graph()
    path, bundle = str(tmp_path / "g.onnx"), str(tmp_path / "g.svod")
    onnx.save(model, path)
    monkeypatch.setattr(qgemm, "QUADS_BYTES", 0)
    target = "x86_64-v4" if HAS_AVX512 else "x86_64-v3"
    build_onnx(path, bundle, targets=[target], expect=False)
    monkeypatch.setenv("SVOD_TARGET", target)
    old = set_int8_isa(0)
    try:
        got = load_model(bundle).run(feeds)
    finally:
        set_int8_isa(old)
    _check(got, want, refs, "portable C past the budget")


def test_isa_bits_follow_cpuinfo_flags(monkeypatch: Any) -> None:
    assert int8_isa(frozenset({"avx512_vnni", "avx512bw", "avx512vl", "avx512f", "avx_vnni", "avx2"})) == 3
    assert int8_isa(frozenset({"avx_vnni", "avx2"})) == 2
    assert int8_isa(frozenset({"avx512f", "avx512bw", "avx512vl", "avx2"})) == 0  # AVX-512 without VNNI
    assert int8_isa(frozenset({"avx512f", "avx512bw", "avx512vbmi"})) == 4  # the byte permutes of the table lookup
    monkeypatch.setenv("SVOD_INT8_VNNI", "0")
    assert int8_isa(frozenset({"avx_vnni", "avx2"})) == 0


def _q(x: str, y: str, s: str, z: str) -> Any:
    return helper.make_node("QuantizeLinear", [x, s, z], [y])


def _dq(x: str, y: str, s: str, z: str, **attrs: Any) -> Any:
    return helper.make_node("DequantizeLinear", [x, s, z], [y], **attrs)


def _qdq_model(act: str) -> Tuple[Any, float]:
    """x [1, 9, 70] -> Q/DQ -> MatMul by a per-column int8 weight [70, 37] -> Q/DQ (h), then h x h^T (both Q/DQ
    activations, as attention's scores) -> Q/DQ -> y; ``act``: the activations' dtype."""
    kdt = np.dtype(act)
    w = RNG.normal(0, 0.2, [70, 37]).astype(np.float32)
    ws = (np.abs(w).max(axis=0) / 127).astype(np.float32)
    consts = {
        "sx": np.array(0.03, np.float32),
        "zx": np.array(128 if act == "uint8" else 3, kdt),
        "wq": np.clip(np.rint(w / ws), -127, 127).astype(np.int8),
        "ws": ws,
        "wz": np.zeros([37], np.int8),
        "sh": np.array(0.05, np.float32),
        "zh": np.array(120 if act == "uint8" else -5, kdt),
        "sy": np.array(0.5, np.float32),
        "zy": np.array(10 if act == "uint8" else 0, kdt),
    }
    nodes = [
        _q("x", "xq", "sx", "zx"),
        _dq("xq", "xd", "sx", "zx"),
        _dq("wq", "wd", "ws", "wz", axis=1),
        helper.make_node("MatMul", ["xd", "wd"], ["h"]),
        _q("h", "hq", "sh", "zh"),
        _dq("hq", "hd", "sh", "zh"),
        helper.make_node("Transpose", ["hq"], ["hqt"], perm=[0, 2, 1]),
        _dq("hqt", "hdt", "sh", "zh"),
        helper.make_node("MatMul", ["hd", "hdt"], ["s"]),
        _q("s", "sq", "sy", "zy"),
        _dq("sq", "y", "sy", "zy"),
    ]
    return typed_model(nodes, [("x", [1, 9, 70], TensorProto.FLOAT)], ["y"], 13, consts), 0.5


@pytest.mark.parametrize("act", ["uint8", "int8"])
def test_qdq_matmul_groups_run_as_int8_gemm(act: str, tmp_path: Any) -> None:
    from svod_min.onnx.frontend.quant_fold import fuse_qdq_groups

    model, quantum = _qdq_model(act)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert fuse_qdq_groups(copy) == 2
    ops = [n.op_type for n in copy.graph.node]
    assert ops.count("QLinearMatMul") == 2 and "MatMul" not in ops
    assert ops.count("DequantizeLinear") == 1  # the output's; the groups' own are gone
    svod = build_and_load(model, str(tmp_path), "qdq")
    for seed in range(3):
        x = np.random.default_rng(seed).normal(0, 1, [1, 9, 70]).astype(np.float32)
        want = run_ort(model, {"x": x})[0]
        got = svod.run({"x": x})["y"]
        assert np.max(np.abs(got.astype(np.float64) - want)) <= quantum * 1.0001


def test_groups_left_alone() -> None:
    """A MatMul whose result something else reads too, or whose weight is dequantized per row (not per column),
    stays a float MatMul between its DequantizeLinear and QuantizeLinear nodes."""
    from svod_min.onnx.frontend.quant_fold import fuse_qdq_groups

    model, _ = _qdq_model("uint8")
    g = model.graph
    g.node.append(helper.make_node("Relu", ["h"], ["h2"]))
    g.output.append(helper.make_tensor_value_info("h2", TensorProto.FLOAT, None))
    for n in g.node:
        if n.output[0] == "wd":
            n.CopyFrom(_dq("wq", "wd", "ws70", "wz70", axis=0))
    g.initializer.extend(
        [
            numpy_helper.from_array(np.full([70], 0.01, np.float32), "ws70"),
            numpy_helper.from_array(np.zeros([70], np.int8), "wz70"),
        ]
    )
    assert fuse_qdq_groups(model) == 1  # only h x h^T
    assert [n.op_type for n in model.graph.node].count("MatMul") == 1


class _Calibration:
    """Four seeded calibration batches for quantize_static."""

    def __init__(self) -> None:
        rng = np.random.default_rng(21)
        self.batches = iter([{"x": rng.uniform(-1, 1, [1, 3, 10, 9]).astype(np.float32)} for _ in range(4)])

    def get_next(self) -> Any:
        return next(self.batches, None)


def test_quantize_static_conv_groups_run_as_qlinearconv(tmp_path: Any) -> None:
    """quantize_static's QDQ Conv groups (per-channel int8 weights, uint8 activations, int32 biases whose scale is
    x_scale * w_scale) become QLinearConv on the int8 GEMM, within one quantum of onnxruntime."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    from svod_min.onnx.frontend.quant_fold import fuse_qdq_groups

    rng = np.random.default_rng(8)
    consts = {
        "w1": rng.normal(0, 0.3, [8, 3, 3, 3]).astype(np.float32),
        "b1": rng.normal(0, 0.1, [8]).astype(np.float32),
        "w2": rng.normal(0, 0.3, [5, 8, 1, 1]).astype(np.float32),
        "b2": rng.normal(0, 0.1, [5]).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], strides=[2, 2]),
    ]
    src, dst = str(tmp_path / "f.onnx"), str(tmp_path / "q.onnx")
    onnx.save(typed_model(nodes, [("x", [1, 3, 10, 9], TensorProto.FLOAT)], ["y"], 13, consts), src)
    reader = type("Reader", (_Calibration, CalibrationDataReader), {})()
    quantize_static(src, dst, reader, quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8)
    model = onnx.load(dst)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert fuse_qdq_groups(copy) == 2
    assert [n.op_type for n in copy.graph.node].count("QLinearConv") == 2
    last = [n for n in model.graph.node if n.output[0] == "y"][0]
    quantum = float(numpy_helper.to_array([t for t in model.graph.initializer if t.name == last.input[1]][0]))
    svod = build_and_load(model, str(tmp_path), "qdq")
    for seed in range(3):
        x = np.random.default_rng(seed).uniform(-1, 1, [1, 3, 10, 9]).astype(np.float32)
        want = run_ort(model, {"x": x})[0]
        assert np.max(np.abs(svod.run({"x": x})["y"].astype(np.float64) - want)) <= quantum * 1.0001


def test_3d_conv_group_left_alone() -> None:
    """QLinearConv takes 1-D and 2-D windows: a QDQ 3-D Conv stays a float Conv (which svod_min runs)."""
    from svod_min.onnx.frontend.quant_fold import fuse_qdq_groups

    consts = {
        "s": np.array(0.1, np.float32),
        "z": np.array(0, np.uint8),
        "w": np.ones([2, 1, 2, 2, 2], np.int8),
        "ws": np.array(0.1, np.float32),
        "wz": np.array(0, np.int8),
    }
    nodes = [
        _q("x", "xq", "s", "z"),
        _dq("xq", "xd", "s", "z"),
        _dq("w", "wd", "ws", "wz"),
        helper.make_node("Conv", ["xd", "wd"], ["c"]),
        _q("c", "y", "s", "z"),
    ]
    model = typed_model(nodes, [("x", [1, 1, 3, 3, 3], TensorProto.FLOAT)], ["y"], 13, consts)
    assert fuse_qdq_groups(model) == 0
    assert "Conv" in [n.op_type for n in model.graph.node]
