"""The elementwise kernel: ``out = expr(x0, x1, ...)`` with numpy broadcasting, any element types."""

from __future__ import annotations

import math
from typing import Optional, Sequence

from ..geometry import collapse, broadcast_strides, contiguous_strides
from .ckernel import CKernel, chunks_for, make_kernel

def elementwise(out_shape: Sequence[int], in_shapes: Sequence[Sequence[int]], expr: str, *, inplace: bool = False,
                tag: str = "ew", in_types: Optional[Sequence[str]] = None, out_type: str = "float") -> CKernel:  # fmt: skip
    """``out = expr(x0, x1, ...)`` with numpy broadcasting; ``inplace``: x0 is ``out`` itself (one buffer fewer);
    ``out_type``: the C type stored (``unsigned char`` for a bool result)."""
    n_out = max(1, int(math.prod(out_shape)))
    arrays = [contiguous_strides(out_shape)] + [broadcast_strides(s, out_shape) for s in in_shapes]
    shape, strides = collapse(out_shape, arrays)
    last = shape[-1]
    block = min(last, 4096)
    nblocks = -(-last // block)
    outer = shape[:-1]
    rows = int(math.prod(outer)) * nblocks
    chunks = chunks_for(rows, block)
    per = -(-rows // chunks)
    types = list(in_types or ["float"] * len(in_shapes))
    first = 1 if inplace else 0
    params = ["%s *restrict out" % out_type] + ["const %s *restrict in%d" % (types[k], k) for k in range(first, len(in_shapes))]
    lines = ["void KNAME(%s, int core_id) {" % ", ".join(params),
             "  const long rows = %d, per = %d;" % (rows, per),
             "  long r0 = (long)core_id * per, r1 = r0 + per < rows ? r0 + per : rows;",
             "  for (long r = r0; r < r1; ++r) {",
             "    long q = r / %d, j0 = (r %% %d) * %d, j1 = j0 + %d < %d ? j0 + %d : %d;" % (nblocks, nblocks, block, block, last, block, last),
             "    long o = 0%s;" % "".join(", o%d = 0" % k for k in range(len(in_shapes)))]
    for axis in reversed(range(len(outer))):
        adds = "".join(" o%d += k * %d;" % (k, strides[k + 1][axis]) for k in range(len(in_shapes)) if strides[k + 1][axis])
        lines.append("    { long k = q %% %d; q /= %d; o += k * %d;%s }" % (outer[axis], outer[axis], strides[0][axis], adds))
    loads = []
    for k in range(len(in_shapes)):
        src = "out" if (inplace and k == 0) else "in%d" % k
        step = strides[k + 1][-1]
        index = "o%d + j * %d" % (k, step) if step not in (0, 1) else ("o%d + j" % k if step == 1 else "o%d" % k)
        loads.append("const float x%d = (float)%s[%s];" % (k, src, index))
    lines += ["    for (long j = j0; j < j1; ++j) {", "      %s" % " ".join(loads),
              "      out[o + j] = %s;" % expr, "    }", "  }", "}", ""]
    extents = [n_out] + [max(1, int(math.prod(s))) for s in in_shapes[first:]]
    return make_kernel(tag, "\n".join(lines), extents, chunks)
