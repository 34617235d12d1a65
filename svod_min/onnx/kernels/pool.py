"""C source of MaxPool / AveragePool as two passes: down the window's rows, then along its columns.

A window is a rectangle, so its max (or sum) is the max (or sum) over its columns of each column's max (or sum)
down the rows. The kernels first reduce the window's input rows element by element over whole rows (contiguous
loads, the compiler vectorises them) into a buffer that carries the left and right padding (-inf for a max, 0
for a sum) and any ceil_mode overhang, then reduce each output's columns of that buffer without bounds tests
(contiguous at column stride 1, an even/odd deinterleave at stride 2). Three shapes of the same idea:

- :func:`pool2d_rows`: one output row at a time, for wide rows; rows outside the input are left out of the row
  pass.
- :func:`pool2d_plane`: a whole small plane at a time, copied into a padded plane whose width is a multiple of
  the column stride and whose rows are grouped by their remainder modulo the row stride, so that each pass is
  one loop over the whole plane at any stride (short rows would make per-row loops mostly loop overhead); the
  padded columns' outputs are computed too and dropped.
- :func:`pool2d_same`: a stride-1 pool whose padding keeps the plane's size, straight from the input.

The average's divisor is ONNX's count of the window's taps, (rows counted) x (columns counted) as the window is
a rectangle; the kernels multiply by its reciprocal. A max propagates NaN as the ONNX reference and onnxruntime
do; testing each tap for NaN costs as much as the max itself, so each plane is scanned for NaN once and only a
plane that holds one takes the taps' NaN-propagating step.

The C is ``templates/pool.c.j2`` (the three shapes), ``templates/pool_taps.c.j2`` (the per-output kernel, for what
the others refuse) and ``templates/pool_nd.c.j2`` (:func:`pool_nd`: per output over 1 to 3 spatial axes, for 3-D
windows, other dtypes and MaxPool's Indices); this module decides the shape and computes its constants. Same
calling convention as :mod:`svod_min.onnx.kernels.ckernel`; a kernel returns None where its buffers would not fit
its stack limit (the caller then uses another kernel).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Dict, Optional, Sequence, Tuple

from ..ctext import C_TYPES
from ..geometry import ConvGeom
from .ckernel import CKernel, make_kernel, render, share

#: The widest padded row (elements, on the stack) the row kernel holds.
POOL_ROW_MAX = 8192
#: The largest padded plane (elements, on the stack, beside two buffers of at most its size) the plane kernel
#: takes, and the narrowest input rows (at 1 thread on x86_64-v4 the plane kernel ran 1.5-2.5x faster than the
#: row kernel on 13x13 to 28x28 planes, 1.2x slower on 56x56, 1.3-2x slower on 6x6 and 7x7).
POOL_PLANE_MAX = 1024
POOL_PLANE_MIN_W = 8
#: Planes of at most this many elements are scanned for NaN whole, larger ones a row at a time (the scanned rows
#: stay in cache for the pool). At 1 thread on x86_64-v4: a scan per row ran 3x slower on 7x7 planes, 1.4x faster
#: on 111x111.
SCAN_WHOLE_MAX = 4096
#: The largest plane (elements) the same-size kernel takes: its column buffer and the average's scale table
#: (at most this many elements each) are on the stack.
POOL_SAME_MAX = 4096
#: The pools' kinds.
KINDS = ("max", "avg")


def pool2d(g: ConvGeom, kind: str, count_include_pad: bool, dtype: str = "float32") -> Optional[CKernel]:
    """Max (``kind`` 'max') or average pooling: small planes whole, others a row at a time; None where neither
    kernel's buffers fit (the caller then generates the per-output kernel)."""
    if same_size(g):
        return pool2d_same(g, kind, count_include_pad, dtype=dtype)
    ph, pw = padded_plane(g)
    if ph * pw <= POOL_PLANE_MAX and g.w >= POOL_PLANE_MIN_W:
        return pool2d_plane(g, kind, count_include_pad, dtype=dtype)
    return pool2d_rows(g, kind, count_include_pad, dtype=dtype)


def padded_row(g: ConvGeom) -> int:
    """Elements of a padded row: left padding, the input row, and whatever the last window reaches past it."""
    return max(g.w + g.pl, (g.ow - 1) * g.sw + (g.kw - 1) * g.dw + 1)


def padded_plane(g: ConvGeom) -> Tuple[int, int]:
    """(rows, columns) of a plane padded to hold every tap of every window, its rows in row-stride blocks (see
    :func:`pool2d_plane`); columns a multiple of the column stride."""
    cols = -(-padded_row(g) // g.sw) * g.sw
    return g.sh * block_rows(g), cols


def block_rows(g: ConvGeom) -> int:
    """Rows of each of the plane kernel's row-stride blocks: the most any window's taps reach into one."""
    return g.oh + (g.kh - 1) * g.dh // g.sh


def same_size(g: ConvGeom) -> bool:
    """A stride-1, undilated pool whose padding keeps the plane's size (Inception's branch pools), small enough."""
    stride_one = (g.sh, g.sw, g.dh, g.dw) == (1, 1, 1, 1)
    keeps_size = (g.oh, g.ow) == (g.h, g.w) and g.pt + g.pb == g.kh - 1 and g.pl + g.pr == g.kw - 1
    return stride_one and keeps_size and min(g.pt, g.pl, g.pb, g.pr) >= 0 and g.h * g.w <= POOL_SAME_MAX


def _pool(template: str, g: ConvGeom, kind: str, count_include_pad: bool, dtype: str, **constants: Any) -> CKernel:
    """The pool kernel of ``template``: one work item per plane, ``constants`` beside the common ones."""
    planes = g.n * g.c
    chunks, per = share(planes, g.oh * g.ow * g.kh * g.kw)
    body = render(
        template,
        g=asdict(g),
        kind=kind,
        include_pad=count_include_pad,
        per=per,
        planes=planes,
        T=C_TYPES[dtype],
        **constants,
    )
    return make_kernel("pool", body, [g.n * g.c * g.oh * g.ow, g.n * g.c * g.h * g.w], chunks, rows_first=True)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError("pool kind %r is not one of %s" % (kind, KINDS))


def pool2d_rows(g: ConvGeom, kind: str, count_include_pad: bool, dtype: str = "float32") -> Optional[CKernel]:
    """Max (``kind`` 'max') or average pooling an output row at a time; None where the padded row is too wide."""
    row = padded_row(g)
    if row > POOL_ROW_MAX or min(g.pt, g.pl, g.pb, g.pr) < 0:
        return None
    _check_kind(kind)
    return _pool(
        "pool.c.j2", g, kind, count_include_pad, dtype, shape="rows", row=row, scan_whole=g.h * g.w <= SCAN_WHOLE_MAX
    )


def pool2d_plane(g: ConvGeom, kind: str, count_include_pad: bool, dtype: str = "float32") -> Optional[CKernel]:
    """Max or average pooling of small planes, a whole plane at a time; None where the padded plane is too large.

    The padded plane holds its rows in SH blocks, block b the rows b, b + SH, b + 2 SH, ...: tap kh of output row
    oh is then row oh + (kh DH) / SH of block (kh DH) % SH, so that the pass down the window is one loop over
    OH x PW elements at every tap, whatever the row stride."""
    ph, pw = padded_plane(g)
    if ph * pw > POOL_PLANE_MAX or min(g.pt, g.pl, g.pb, g.pr) < 0:
        return None
    _check_kind(kind)
    return _pool(
        "pool.c.j2", g, kind, count_include_pad, dtype, shape="plane", ph=ph, pw=pw, qw=pw // g.sw, br=block_rows(g)
    )


def pool2d_same(g: ConvGeom, kind: str, count_include_pad: bool, dtype: str = "float32") -> Optional[CKernel]:
    """Max or average pooling of a stride-1 window whose padding keeps the plane's size, a whole plane at a time
    straight from the input: its rows flattened, the pass down the window is one loop over the rows whose window
    is inside, and the pass along it one loop over the whole plane; the few columns whose window crosses the
    row's edge (there the flat loop reads the next or previous row) are then computed again from their own row.
    None where the pool is not of that shape."""
    if not same_size(g):
        return None
    _check_kind(kind)
    rows = g.h if kind == "avg" else 0  # the average's scale table covers the plane; a max has none (1 element)
    scale = dict(scale_rows=rows, scale_size=max(1, rows * g.w))
    return _pool("pool.c.j2", g, kind, count_include_pad, dtype, shape="same", **scale)


def pool2d_taps(g: ConvGeom, kind: str, count_include_pad: bool, dtype: str = "float32") -> CKernel:
    """Max or average pooling, every output testing each tap (padding never wins a max, NaN wins; ONNX's divisor):
    for the rows too wide for the other kernels' buffers, its stack use does not grow with the row."""
    return _pool("pool_taps.c.j2", g, "max" if kind == "max" else "avg", count_include_pad, dtype)


#: The C element type and the max's starting value of each dtype the per-tap N-D kernel takes.
ND_TYPES = {
    "float32": ("float", "-__builtin_inff()"),
    "float64": ("double", "-__builtin_inf()"),
    "int8": ("signed char", "-128"),
    "uint8": ("unsigned char", "0"),
}


def pool_nd(
    planes: int,
    window: Sequence[Dict[str, int]],
    kind: str,
    count_include_pad: bool,
    dtype: str = "float32",
    indices: bool = False,
    column_major: bool = False,
) -> CKernel:
    """Max or average pooling over 1 to 3 spatial axes, each output testing its taps (:func:`pool2d_taps` in N-D):
    3-D windows and dtypes other than float32. ``window``: per axis, outermost first, input size ``i``, output size
    ``o``, kernel ``k``, stride ``s``, dilation ``d``, leading pad ``b``, end pad ``e``. ``indices``: the max also
    writes each output's flat position in x (MaxPool's Indices, int64; ``column_major``: storage_order 1, 2-D)."""
    _check_kind(kind)
    T, lowest = ND_TYPES[dtype]
    n_in = int(math.prod(a["i"] for a in window))
    n_out = int(math.prod(a["o"] for a in window))
    chunks, per = share(planes, n_out * int(math.prod(a["k"] for a in window)))
    floating = dtype.startswith("float")
    # storage_order 1 (2-D only): the plane's position column-major, w * H + h
    index_expr = "i1 * %d + i0" % window[0]["i"] if column_major else "at"
    body = render(
        "pool_nd.c.j2",
        T=T,
        A=("double" if dtype == "float64" else "float") if kind == "avg" else T,
        start=("0" if kind == "avg" else lowest),
        kind=kind,
        nan=floating,
        include_pad=count_include_pad,
        indices=indices,
        index_expr=index_expr,
        per=per,
        planes=planes,
        n_in=n_in,
        n_out=n_out,
        dims=[{key: int(v) for key, v in a.items()} for a in window],
    )
    extents = [planes * n_out, planes * n_in] + ([planes * n_out] if indices else [])
    return make_kernel("pool", body, extents, chunks, rows_first=True)
