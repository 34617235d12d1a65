"""The CUDA side of the catalogue: families, template contexts, signatures.

Each family renders to one ``.cu`` file (prelude inlined, so a device can
also compile it with nvrtc) and one PTX module. Launch dimensions are
expressions of the kernel's int32 variables, like the CPU signatures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import jinja2

from svod_min.kernels.elementwise import C_DTYPES, OPS, elementwise_parts, load_line, param_list
from svod_min.kernels.sig import BufferArg, CudaKernelSig, VarArg

from .catalogue import FUSED, RED_X, _reduce_ctx
from .render import BANNER

THREADS = 256
#: float32 gets every op; the other dtypes the ops that need no libdevice math (keeps the PTX small).
CHEAP_OPS = ("add", "sub", "mul", "div", "max", "min", "neg", "abs", "sqrt", "relu", "where")
NINF = {"float": "svod_u2f(0xff800000u)", "double": "svod_u2d(0xfff0000000000000ull)"}


@dataclass
class CudaFamily:
    name: str
    contexts: List[Dict[str, Any]] = field(default_factory=list)
    sigs: List[CudaKernelSig] = field(default_factory=list)
    extra: Dict[str, Any] = field(default_factory=dict)


def _p(**params: Any) -> Tuple[Tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def _elementwise() -> CudaFamily:
    fam = CudaFamily("elementwise")
    for name, op in OPS.items():
        if name == "cast":
            continue
        dtypes = ("float32",) + (("float64", "float16", "bfloat16") if name in CHEAP_OPS else ())
        args = {1: "a", 2: "a, b", 3: "c, a, b"}[op.arity]
        for dt in dtypes:
            _add_elementwise(fam, name, "%s(%s)" % (name, args), dt, op.doc)
    # The CPU library's fused kernels, so plans built from them (the default MLP) run on CUDA too.
    for name, (expr, doc) in sorted(FUSED.items()):
        cheap = "sigmoid" not in expr  # transcendentals: float32 only, as for the plain ops
        for dt in ("float32", "float64") if cheap else ("float32",):
            _add_elementwise(fam, name, expr, dt, doc)
    return fam


def _add_elementwise(fam: CudaFamily, name: str, expr: str, dt: str, doc: str) -> None:
    """One grid-stride kernel ``out[i] = expr(inputs[i]...)`` and its signature."""
    grid = ("max(1,min(ceildiv(n,%d),65535))" % THREADS, 1, 1)
    entry = "svod_cuda_%s_%s" % (name, C_DTYPES[dt].short)
    idt = {"c": "bool"} if name == "where" else {}
    parsed, compute, out, ins, value = elementwise_parts(expr, dtype=dt, input_dtypes=idt)
    params = ", ".join(param_list(out, ins, "__restrict__") + ["int n"])
    fam.contexts.append(dict(entry=entry, params=params, value=value, loads=[load_line(n, t, compute) for n, t in ins]))
    bufs = (BufferArg("out", out.name, "w", "n"),) + tuple(BufferArg(n, t.name, "r", "n") for n, t in ins)
    nbytes = out.itemsize + sum(t.itemsize for _, t in ins)
    fam.sigs.append(
        CudaKernelSig(
            name,
            _p(dtype=dt),
            entry,
            "elementwise",
            bufs,
            (VarArg("n", 0),),
            grid,
            (THREADS, 1, 1),
            flops="%d*n" % parsed.flops,
            bytes="%d*n" % nbytes,
            doc=doc,
        )
    )


def _reduce() -> CudaFamily:
    fam = CudaFamily("reduce", extra={"threads": THREADS})
    names = ("outer", "red", "inner", "so", "sr", "si")
    vars_ = tuple(VarArg(n, 1 if i < 3 else 0) for i, n in enumerate(names))
    for op in ("sum", "max", "mean"):
        for dt in ("float32", "float64"):
            d = C_DTYPES[dt]
            entry = "svod_cuda_reduce_%s_%s" % (op, d.short)
            ctx = _reduce_ctx(entry, op, d)
            if op == "max":
                ctx["init"] = NINF[d.math]
            fam.contexts.append(ctx)
            bufs = (BufferArg("out", dt, "w", "outer*inner"), BufferArg("x", dt, "r", RED_X))
            fam.sigs.append(
                CudaKernelSig(
                    "reduce_" + op,
                    _p(dtype=dt),
                    entry,
                    "reduce",
                    bufs,
                    vars_,
                    ("max(1,min(outer*inner,65535))", 1, 1),
                    (THREADS, 1, 1),
                    flops="outer*red*inner",
                    doc="%s over the middle axis of (outer, red, inner)" % op,
                )
            )
    return fam


def _softmax() -> CudaFamily:
    fam = CudaFamily("softmax", extra={"threads": THREADS})
    for dt in ("float32", "float16", "bfloat16"):
        d = C_DTYPES[dt]
        entry = "svod_cuda_softmax_%s" % d.short
        fam.contexts.append(
            dict(entry=entry, st=d.storage, m=d.math, s=d.sfx, load=d.load, store=d.store, ninf=NINF[d.math])
        )
        bufs = (BufferArg("out", dt, "w", "rows*cols"), BufferArg("x", dt, "r", "rows*cols"))
        fam.sigs.append(
            CudaKernelSig(
                "softmax",
                _p(dtype=dt),
                entry,
                "softmax",
                bufs,
                (VarArg("rows", 1), VarArg("cols", 1)),
                ("max(1,min(rows,65535))", 1, 1),
                (THREADS, 1, 1),
                flops="25*rows*cols",
                doc="row-wise stable softmax",
            )
        )
    return fam


def _transpose() -> CudaFamily:
    fam = CudaFamily("transpose")
    for size, u in ((2, "svod_u16"), (4, "svod_u32"), (8, "svod_u64")):
        entry = "svod_cuda_transpose_x%d" % size
        fam.contexts.append(dict(entry=entry, u=u, tile=32))
        for dt in sorted(C_DTYPES):
            if C_DTYPES[dt].itemsize != size:
                continue
            bufs = (BufferArg("out", dt, "w", "rows*cols"), BufferArg("x", dt, "r", "rows*cols"))
            fam.sigs.append(
                CudaKernelSig(
                    "transpose",
                    _p(dtype=dt),
                    entry,
                    "transpose",
                    bufs,
                    (VarArg("rows", 1), VarArg("cols", 1)),
                    ("ceildiv(cols,32)", "ceildiv(rows,32)", 1),
                    (32, 8, 1),
                    shared_bytes=32 * 33 * size,
                    doc="2-D transpose",
                )
            )
    return fam


def _matmul() -> CudaFamily:
    fam = CudaFamily("matmul")
    for dt, tiles in (("float32", (16, 32)), ("float64", (16,))):
        d = C_DTYPES[dt]
        for tile in tiles:
            entry = "svod_cuda_matmul_%s_t%d" % (d.short, tile)
            fam.contexts.append(dict(entry=entry, t=d.storage, tile=tile))
            bufs = (BufferArg("c", dt, "w", "M*N"), BufferArg("a", dt, "r", "M*K"), BufferArg("b", dt, "r", "K*N"))
            fam.sigs.append(
                CudaKernelSig(
                    "matmul",
                    _p(dtype=dt, tile=tile),
                    entry,
                    "matmul",
                    bufs,
                    (VarArg("M", 1), VarArg("N", 1), VarArg("K", 1)),
                    ("ceildiv(N,%d)" % tile, "ceildiv(M,%d)" % tile, 1),
                    (tile, tile, 1),
                    shared_bytes=2 * tile * tile * d.itemsize,
                    flops="2*M*N*K",
                    doc="tiled shared-memory matmul",
                )
            )
    return fam


def build_cuda_catalogue() -> Tuple[List[CudaFamily], List[CudaKernelSig]]:
    fams = [_elementwise(), _reduce(), _softmax(), _transpose(), _matmul()]
    sigs = [s for f in fams for s in f.sigs]
    blocks = entry_blocks(sigs)
    for fam in fams:
        for ctx in fam.contexts:  # __launch_bounds__(threads): the compiler sizes registers for that block
            x, y, z = blocks[ctx["entry"]]
            ctx["threads"] = x * y * z
    return fams, sigs


def entry_blocks(sigs: List[CudaKernelSig]) -> Dict[str, Tuple[int, int, int]]:
    """entry -> the one block its code is written for (every signature over an entry agrees)."""
    blocks: Dict[str, Tuple[int, int, int]] = {}
    for sig in sigs:
        block = tuple(sig.block) + (1,) * (3 - len(sig.block))
        if blocks.setdefault(sig.entry, block) != block:  # type: ignore[arg-type]
            raise ValueError("%s: signatures disagree about its block (%s, %s)" % (sig.entry, blocks[sig.entry], block))
    return blocks


_MAXNTID_RE = re.compile(r"^(\.visible \.entry (\w+)\([^)]*\))\n\.maxntid \d+, \d+, \d+$", re.M)


def require_blocks(ptx: str, blocks: Dict[str, Tuple[int, int, int]]) -> str:
    """``ptx`` with each library entry's ``.maxntid`` (from ``__launch_bounds__``) made ``.reqntid`` of its
    block: the driver then refuses a launch with any other block (CUDA C has no way to say it)."""
    seen = []

    def exact(match: "re.Match[str]") -> str:
        seen.append(match.group(2))
        return "%s\n.reqntid %d, %d, %d" % ((match.group(1),) + blocks[match.group(2)])

    out = _MAXNTID_RE.sub(exact, ptx)
    missing = sorted(set(re.findall(r"^\.visible \.entry (\w+)\(", ptx, re.M)) - set(seen))
    if missing:
        raise ValueError("no .maxntid (__launch_bounds__) after the entries %s" % missing)
    return out


def render_cuda(env: jinja2.Environment, fam: CudaFamily) -> str:
    head = "/* %s */\n" % (BANNER % ("templates/cuda/%s.cu.j2" % fam.name))
    prelude = env.get_template("cuda/prelude.cuh.j2").render()
    body = env.get_template("cuda/%s.cu.j2" % fam.name).render(kernels=fam.contexts, **fam.extra)
    return head + prelude + "\n" + body
