"""The two-pass pooling kernels (svod_min/onnx/kernels/pool.py) against onnxruntime, each case checked to take the
kernel it is listed under: the same-size kernel (stride 1, padding that keeps the plane's size, symmetric or
not, columns at the row's edges), the whole-plane kernel (row stride 1 and 2, padded width a multiple of the column
stride or not, dilation, ceil_mode, count_include_pad), the row kernel (planes too large for the plane kernel,
rows too narrow for it), the per-output kernel for rows too wide for either; and a max's NaN propagation in each
kernel and each NaN scan (a whole small plane, or row by row in a large one), against a float64 reference."""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from support.onnx_models import build_and_load, random_inputs, run_both, single_node  # noqa: E402

from svod_min.onnx.geometry import ConvGeom  # noqa: E402
from svod_min.onnx.kernels import pool as pool_kernels  # noqa: E402

Case = Tuple[str, Tuple[int, ...], Dict[str, Any]]
#: kernel -> cases (op, input shape, attributes)
CASES: Dict[str, Sequence[Case]] = {
    "same": [
        ("MaxPool", (1, 3, 13, 13), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception-v1's branch pools
        ("AveragePool", (1, 3, 14, 14), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # Inception-v2's
        ("AveragePool", (2, 2, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
        ("MaxPool", (1, 2, 9, 12), {"kernel_shape": [5, 3], "pads": [0, 2, 4, 0]}),  # all padding on one side
        ("AveragePool", (1, 2, 11, 10), {"kernel_shape": [4, 2], "pads": [2, 1, 1, 0]}),
        ("AveragePool", (1, 2, 64, 64), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),  # the largest plane it takes
        ("MaxPool", (1, 3, 30), {"kernel_shape": [3], "pads": [1, 1]}),  # 1-D
    ],
    "plane": [
        ("AveragePool", (1, 2, 14, 14), {"kernel_shape": [3, 3], "pads": [1, 2, 0, 1], "count_include_pad": 1}),
        ("MaxPool", (1, 2, 13, 13), {"kernel_shape": [3, 3]}),  # stride 1, no padding: the plane shrinks
        (
            "MaxPool",
            (1, 3, 14, 14),
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]},
        ),  # odd padded width
        ("MaxPool", (2, 2, 16, 16), {"kernel_shape": [2, 2], "strides": [2, 2]}),  # the column pass writes the output
        ("MaxPool", (1, 2, 17, 19), {"kernel_shape": [3, 3], "strides": [2, 3], "ceil_mode": 1}),
        (
            "AveragePool",
            (1, 2, 17, 19),
            {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1]},
        ),
        (
            "AveragePool",
            (1, 2, 15, 15),
            {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1], "count_include_pad": 1},
        ),
        ("MaxPool", (1, 2, 12, 12), {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 0, 1, 1]}),
        # row stride 3, dilation 2: the taps' rows in blocks 0, 2, 1 of the row-stride blocks
        (
            "MaxPool",
            (1, 2, 16, 16),
            {"kernel_shape": [3, 3], "strides": [3, 2], "dilations": [2, 1], "pads": [1, 1, 1, 1]},
        ),
        (
            "AveragePool",
            (1, 2, 20, 16),
            {"kernel_shape": [4, 3], "strides": [3, 3], "pads": [1, 0, 1, 1], "ceil_mode": 1},
        ),
        ("MaxPool", (1, 3, 40), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),  # 1-D
    ],
    "rows": [
        ("MaxPool", (1, 2, 45, 45), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
        ("MaxPool", (1, 2, 40, 47), {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ("AveragePool", (1, 2, 40, 40), {"kernel_shape": [3, 3], "pads": [1, 1, 0, 0]}),
        (
            "AveragePool",
            (1, 2, 37, 41),
            {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1, "pads": [1, 1, 1, 1], "count_include_pad": 1},
        ),
        ("MaxPool", (1, 2, 36, 36), {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [2, 0, 1, 1]}),
        (
            "MaxPool",
            (1, 4, 7, 7),
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        ),  # rows too narrow for the plane kernel
        ("AveragePool", (1, 4, 6, 6), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        ("MaxPool", (1, 2, 3000), {"kernel_shape": [4], "strides": [3], "pads": [2, 1]}),  # 1-D, longer than a plane
    ],
    "per-output": [
        ("MaxPool", (1, 1, 8300), {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),  # wider than POOL_ROW_MAX
        ("AveragePool", (1, 1, 8300), {"kernel_shape": [5], "strides": [4], "pads": [2, 1], "ceil_mode": 1}),
    ],
}


def geometry(shape: Sequence[int], attrs: Dict[str, Any]) -> ConvGeom:
    """The 2-D window geometry ONNX gives these attributes (explicit pads; a 1-D pool gets H = 1)."""
    spatial = list(shape[2:])
    rank = len(spatial)
    kernel, strides = list(attrs["kernel_shape"]), list(attrs.get("strides", [1] * rank))
    dil, pads = list(attrs.get("dilations", [1] * rank)), list(attrs.get("pads", [0] * 2 * rank))
    outs = []
    for i in range(rank):
        room = spatial[i] + pads[i] + pads[i + rank] - (kernel[i] - 1) * dil[i] - 1
        out = (-(-room // strides[i]) if attrs.get("ceil_mode", 0) else room // strides[i]) + 1
        if attrs.get("ceil_mode", 0) and (out - 1) * strides[i] >= spatial[i] + pads[i]:
            out -= 1  # the last window must start inside the input or its start padding
        outs.append(out)
    if rank == 1:
        spatial, outs, kernel, strides, dil = [1] + spatial, [1] + outs, [1] + kernel, [1] + strides, [1] + dil
        pads = [0, pads[0], 0, pads[1]]
    return ConvGeom(
        shape[0],
        shape[1],
        spatial[0],
        spatial[1],
        shape[1],
        outs[0],
        outs[1],
        kernel[0],
        kernel[1],
        strides[0],
        strides[1],
        pads[0],
        pads[1],
        pads[2],
        pads[3],
        dil[0],
        dil[1],
    )


def kernel_of(op: str, shape: Sequence[int], attrs: Dict[str, Any]) -> str:
    """Which kernel the lowering generates for this pool."""
    g = geometry(shape, attrs)
    kernel = pool_kernels.pool2d(g, "max" if op == "MaxPool" else "avg", bool(attrs.get("count_include_pad", 0)))
    if kernel is None:
        return "per-output"
    return "same" if "margins[" in kernel.source else "plane" if "pp[" in kernel.source else "rows"


ALL = [(path, case) for path, cases in CASES.items() for case in cases]


def _case_id(item: Tuple[str, Case]) -> str:
    path, (op, shape, attrs) = item
    return "%s-%s-%s-%s" % (
        path,
        op,
        "x".join(map(str, shape)),
        "-".join("%s%s" % (k[:2], v) for k, v in sorted(attrs.items())),
    )


@pytest.mark.parametrize("item", ALL, ids=_case_id)
def test_pool_kernel_matches_onnxruntime(item: Tuple[str, Case], tmp_path: Any) -> None:
    path, (op, shape, attrs) = item
    assert kernel_of(op, shape, attrs) == path
    wants, gots = run_both(single_node(op, [("x", shape)], **attrs), str(tmp_path))
    want, got = wants[0], gots["y"]
    assert got.shape == want.shape
    assert np.allclose(got, want, rtol=1e-6, atol=1e-6), float(np.max(np.abs(got - want)))


def reference_maxpool(x: Any, g: ConvGeom) -> Any:
    """float64 max over each window's taps inside the input; NaN where a tap is NaN."""
    out = np.full((g.n, g.c, g.oh, g.ow), -np.inf)
    for oh in range(g.oh):
        rows = [oh * g.sh - g.pt + k * g.dh for k in range(g.kh)]
        rows = [r for r in rows if 0 <= r < g.h]
        for ow in range(g.ow):
            cols = [ow * g.sw - g.pl + k * g.dw for k in range(g.kw)]
            cols = [c for c in cols if 0 <= c < g.w]
            window = x[:, :, rows][:, :, :, cols].astype(np.float64).reshape(g.n, g.c, -1)
            out[:, :, oh, ow] = np.where(np.isnan(window).any(axis=2), np.nan, window.max(axis=2, initial=-np.inf))
    return out


#: (kernel, input shape, attributes, NaN positions (h, w) in plane 1): each NaN is a middle tap of some window, so
#: a kernel that missed it would return that window's largest number instead.
NAN_CASES = [
    ("same", (1, 3, 13, 13), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [(6, 6), (12, 0)]),
    ("plane", (1, 3, 13, 13), {"kernel_shape": [3, 3], "pads": [1, 1, 0, 0]}, [(6, 6), (12, 0)]),
    ("plane", (1, 3, 14, 14), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}, [(3, 5)]),
    (
        "rows",
        (1, 3, 7, 7),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
        [(3, 3)],
    ),  # one scan, whole
    ("rows", (1, 3, 70, 70), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, [(2, 2), (51, 40)]),
    ("rows", (1, 3, 66, 66), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [(65, 31)]),  # the last row, scanned last
    ("same", (1, 3, 9, 12), {"kernel_shape": [5, 3], "pads": [0, 2, 4, 0]}, [(8, 11), (0, 5)]),
]


@pytest.mark.parametrize("case", NAN_CASES, ids=lambda c: "%s-%s-%s" % (c[0], "x".join(map(str, c[1])), c[3]))
def test_maxpool_propagates_nan_in_each_kernel(
    case: Tuple[str, Tuple[int, ...], Dict[str, Any], Any], tmp_path: Any
) -> None:
    path, shape, attrs, spots = case
    assert kernel_of("MaxPool", shape, attrs) == path
    model = single_node("MaxPool", [("x", shape)], **attrs)
    x = random_inputs(model)["x"]
    x[0, 0, 0, 0] = np.inf  # an infinity is a number: the fast path keeps it, no NaN appears
    for h, w in spots:
        x[0, 1, h, w] = np.nan
    got = build_and_load(model, str(tmp_path))(x=x)["y"]
    want = reference_maxpool(x, geometry(shape, attrs))
    assert np.isnan(want[0, 1]).any() and not np.isnan(want[0, 0]).any()
    np.testing.assert_array_equal(got, want.astype(np.float32))  # NaN where the reference has NaN, and only there
