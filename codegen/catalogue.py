"""The kernel library's catalogue: every kernel, its parameters and its instances.

Each catalogue *name* (``add``, ``matmul``...) has parameters with a
default and a list of allowed values; each allowed combination is one
*instance*: a :class:`~svod_min.kernels.sig.KernelSig` (entry point, buffers,
variables, launch and cost expressions) plus the context its family's
template needs. Shapes are always run-time int32 variables; dtypes and
tuning parameters are compile-time, so they pick the instance.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from svod_min.kernels.conv_pack import PACK_KC, PACK_ROWS
from svod_min.kernels.elementwise import C_DTYPES, OPS, CDType, c_literal
from svod_min.kernels.sig import CORE_COUNT, CORE_ID, BufferArg, KernelSig, VarArg, elementwise_sig

FLOATS = ("float32", "float64", "float16", "bfloat16")
F32_64 = ("float32", "float64")
GS = (CORE_COUNT, 1, 1)
CORE_VARS = (VarArg(CORE_COUNT, 1), VarArg(CORE_ID, 0))
INT32_MIN = -(2**31)

#: Variant -> catalogue name -> dtype -> tuning parameters preferred there.
PREFERRED: Dict[str, Dict[str, Dict[str, Dict[str, int]]]] = {
    "x86_64-baseline": {"matmul": {"float32": {"mr": 4, "nr": 8}, "float64": {"mr": 4, "nr": 4}}},
    "x86_64-avx2": {"matmul": {"float32": {"mr": 6, "nr": 16}, "float64": {"mr": 6, "nr": 8}}},
    # 32 zmm registers: an 8-row tile of two 512-bit vectors per row (rows split evenly for M % 8 == 0).
    "x86_64-v4": {"matmul": {"float32": {"mr": 8, "nr": 32}, "float64": {"mr": 8, "nr": 16}}},
    "aarch64-baseline": {"matmul": {"float32": {"mr": 6, "nr": 16}, "float64": {"mr": 6, "nr": 8}}},
    # POWER8 VSX has 64 vector registers; rv64gc and la64 generic have no vectors (32 FP registers).
    "ppc64le-baseline": {"matmul": {"float32": {"mr": 6, "nr": 16}, "float64": {"mr": 6, "nr": 8}}},
    "riscv64-baseline": {"matmul": {"float32": {"mr": 4, "nr": 8}, "float64": {"mr": 4, "nr": 4}}},
    "loongarch64-baseline": {"matmul": {"float32": {"mr": 4, "nr": 8}, "float64": {"mr": 4, "nr": 4}}},
    # No variant (an architecture without objects, SVOD_KERNELS_VARIANT=none): the small tiles, which
    # exist for both dtypes (the catalogue's default 6x16 has no float64 instance).
    "": {"matmul": {"float32": {"mr": 4, "nr": 8}, "float64": {"mr": 4, "nr": 4}}},
}
for _prefs in PREFERRED.values():  # conv2d_gemm runs on matmul's register tile: the same one per variant
    _prefs["conv2d_gemm"] = _prefs["matmul"]
MATMUL_TILES = {"float32": ((4, 8), (6, 16), (8, 8), (8, 32)), "float64": ((4, 4), (6, 8), (4, 8), (8, 16))}


@dataclass
class KernelInfo:
    """One catalogue name: family, parameters (default, allowed values), docs."""

    name: str
    family: str
    params: Dict[str, Tuple[Any, Tuple[Any, ...]]]
    doc: str
    tolerance: str = "exact"
    constraints: str = ""  # combinations that are not allowed, in words

    def as_dict(self) -> Dict[str, Any]:
        return {
            "family": self.family,
            "params": {k: {"default": d, "allowed": list(a)} for k, (d, a) in sorted(self.params.items())},
            "doc": self.doc,
            "tolerance": self.tolerance,
        }


@dataclass
class Family:
    """One source file: its template, the template context per function, the signatures."""

    name: str
    template: Optional[str]  # None: rendered through svod_min.kernels.elementwise (elementwise)
    contexts: List[Dict[str, Any]] = field(default_factory=list)
    sigs: List[KernelSig] = field(default_factory=list)
    infos: List[KernelInfo] = field(default_factory=list)

    def add(self, sig: KernelSig, ctx: Optional[Dict[str, Any]]) -> None:
        self.sigs.append(sig)
        if ctx is not None and all(c["entry"] != ctx["entry"] for c in self.contexts):
            self.contexts.append(ctx)


def _p(**params: Any) -> Tuple[Tuple[str, Any], ...]:
    return tuple(sorted(params.items()))


def _dt(name: str) -> CDType:
    return C_DTYPES[name]


# --- elementwise ------------------------------------------------------------------

ULP = {
    "exp": "<= 2 ulp (measured 1.2), subnormal results included",
    "log": "<= 2 ulp (measured 1.1), subnormal inputs included",
    "tanh": "<= 4 ulp (measured 3.1)",
    "sigmoid": "<= 4 ulp (measured 2.3)",
    "gelu": "<= 4 ulp of max(|x|, |gelu(x)|) absolute (measured 1.6)",
    "sqrt": "correctly rounded",
    "rsqrt": "<= 1 ulp (two roundings, bit-identical to 1/np.sqrt)",
}
HALF_NOTE = "; float16/bfloat16: computed in float32, then rounded once (<= 1 ulp of the storage type)"
FUSED = {
    "mul_add": ("a*b+c", "a * b + c in one pass"),
    "relu_mul_add": ("relu(a*b+c)", "relu(a * b + c) in one pass"),
    "add_relu": ("relu(a+b)", "relu(a + b) in one pass"),
    "silu": ("a*sigmoid(a)", "a * sigmoid(a) (swish)"),
}


@dataclass(frozen=True)
class EwSpec:
    """An elementwise instance to render through svod_min.kernels.elementwise."""

    entry: str
    expr: str
    dtype: str
    out_dtype: str
    input_dtypes: Tuple[Tuple[str, str], ...] = ()
    inputs: Optional[Tuple[str, ...]] = None


def ew_sig(name: str, params: Dict[str, Any], spec: EwSpec, doc: str) -> KernelSig:
    return elementwise_sig(
        name,
        params,
        spec.entry,
        spec.expr,
        dtype=spec.dtype,
        out_dtype=spec.out_dtype,
        input_dtypes=dict(spec.input_dtypes),
        inputs=spec.inputs,
        doc=doc,
    )


def elementwise(ew: List[EwSpec]) -> Family:
    fam = Family("elementwise", None)
    for name, op in OPS.items():
        if name == "cast":
            continue
        dtypes = FLOATS + (("int32",) if op.int_c is not None else ())
        tol = ULP.get(name, "exact") + (HALF_NOTE if name in ULP else "")
        args = {1: "a", 2: "a, b", 3: "c, a, b"}[op.arity]
        fam.infos.append(KernelInfo(name, "elementwise", {"dtype": ("float32", dtypes)}, op.doc, tol))
        for dt in dtypes:
            spec = EwSpec(
                "svod_%s_%s" % (name, _dt(dt).short),
                "%s(%s)" % (name, args),
                dt,
                dt,
                (("c", "bool"),) if name == "where" else (),
            )
            ew.append(spec)
            fam.add(ew_sig(name, {"dtype": dt}, spec, op.doc), None)
    casts = FLOATS + ("int32",)
    fam.infos.append(
        KernelInfo(
            "cast",
            "elementwise",
            {"dtype": ("float32", casts), "out_dtype": ("float16", casts)},
            "dtype conversion: float->float rounds to nearest even, float->int32 truncates "
            "(out-of-range values are undefined), int32->float rounds",
            "exact (correctly rounded)",
            "dtype != out_dtype",
        )
    )
    for src, dst in itertools.permutations(casts, 2):
        spec = EwSpec("svod_cast_%s_%s" % (_dt(src).short, _dt(dst).short), "a", src, dst)
        ew.append(spec)
        fam.add(ew_sig("cast", {"dtype": src, "out_dtype": dst}, spec, "dtype conversion"), None)
    for name, (expr, doc) in sorted(FUSED.items()):
        fam.infos.append(
            KernelInfo(
                name,
                "elementwise",
                {"dtype": ("float32", F32_64)},
                "fused `%s`: %s" % (expr, doc),
                "as the ops it is made of",
            )
        )
        for dt in F32_64:
            spec = EwSpec("svod_%s_%s" % (name, _dt(dt).short), expr, dt, dt)
            ew.append(spec)
            fam.add(ew_sig(name, {"dtype": dt}, spec, doc), None)
    return fam


# --- reductions -------------------------------------------------------------------

RED_X = "1+(outer-1)*so+(red-1)*sr+(inner-1)*si"


def reduce_family() -> Family:
    fam = Family("reduce", "c/reduce.c.j2")
    kinds = (("sum", FLOATS + ("int32",)), ("max", FLOATS + ("int32",)), ("mean", FLOATS))
    for op, dtypes in kinds:
        name = "reduce_" + op
        fam.infos.append(
            KernelInfo(
                name,
                "reduce",
                {"dtype": ("float32", dtypes)},
                "%s over the middle axis of a strided (outer, red, inner) view; out is contiguous (outer, inner)" % op,
                {
                    "max": "exact (nan propagates)",
                    "sum": "16 lane partial sums: ~sqrt(red/16) eps relative; int32 wraps",
                    "mean": "sum / red, as sum",
                }[op],
            )
        )
        for dt in dtypes:
            d = _dt(dt)
            entry = "svod_reduce_%s_%s" % (op, d.short)
            bufs = (BufferArg("out", dt, "w", "outer*inner"), BufferArg("x", dt, "r", RED_X))
            names = ("outer", "red", "inner", "so", "sr", "si")
            vars_ = tuple(VarArg(n, 1 if i < 3 else 0) for i, n in enumerate(names)) + CORE_VARS
            sig = KernelSig(
                name,
                _p(dtype=dt),
                entry,
                "reduce",
                bufs,
                vars_,
                GS,
                flops="outer*red*inner",
                bytes="%d*(outer*red*inner+outer*inner)" % d.itemsize,
                work="outer*red*inner",
                grain=1 << 16,
                parallelism="ceildiv(outer*inner,16)",
                doc=fam.infos[-1].doc,
            )
            fam.add(sig, _reduce_ctx(entry, op, d))
    return fam


def _reduce_ctx(entry: str, op: str, d: CDType) -> Dict[str, Any]:
    if d.kind == "int":
        acc = "svod_u32" if op == "sum" else "svod_i32"
        load = "(svod_u32){}" if op == "sum" else "{}"
        init = "0u" if op == "sum" else "(-2147483647 - 1)"
        combine = "({0} + {1})" if op == "sum" else "svod_maxi({0}, {1})"
        return dict(
            entry=entry, st=d.storage, acc=acc, load=load, store="(svod_i32)({})", init=init, combine=combine, fin="{}"
        )
    combine = "({0} + {1})" if op != "max" else "svod_max%s({0}, {1})" % d.sfx
    init = c_literal(0, d.math) if op != "max" else "-__builtin_inf%s()" % d.sfx
    fin = "({} / (%s)red)" % d.math if op == "mean" else "{}"
    return dict(entry=entry, st=d.storage, acc=d.math, load=d.load, store=d.store, init=init, combine=combine, fin=fin)


# --- softmax / layernorm ------------------------------------------------------------


def rows_family() -> Family:
    fam = Family("softmax", "c/softmax.c.j2")
    fam.infos.append(
        KernelInfo(
            "softmax",
            "softmax",
            {"dtype": ("float32", FLOATS)},
            "numerically stable softmax over the last axis of a contiguous (rows, cols) tensor",
            "rtol 1e-5 float32, 1e-13 float64, 2e-3 float16, 1.6e-2 bfloat16",
        )
    )
    fam.infos.append(
        KernelInfo(
            "layernorm",
            "softmax",
            {"dtype": ("float32", FLOATS)},
            "(x - mean) / sqrt(var + eps) * weight + bias over the last axis (two-pass variance); "
            "eps is a run-time float32 variable (passed as its bits)",
            "1 storage rounding + eps ((cols/16+32) mean|x| rstd |w| + (cols/32+25) |xhat w| + 2 |b|)",
        )
    )
    rows = (VarArg("rows", 1), VarArg("cols", 1)) + CORE_VARS
    for dt in FLOATS:
        d = _dt(dt)
        base = dict(st=d.storage, m=d.math, s=d.sfx, load=d.load, store=d.store)
        entry = "svod_softmax_%s" % d.short
        bufs = (BufferArg("out", dt, "w", "rows*cols"), BufferArg("x", dt, "r", "rows*cols"))
        fam.add(
            KernelSig(
                "softmax",
                _p(dtype=dt),
                entry,
                "softmax",
                bufs,
                rows,
                GS,
                flops="25*rows*cols",
                bytes="%d*rows*cols" % (2 * d.itemsize),
                work="rows*cols",
                grain=1 << 14,
                parallelism="rows",
                doc=fam.infos[0].doc,
            ),
            dict(base, entry=entry, op="softmax"),
        )
        entry = "svod_layernorm_%s" % d.short
        bufs = (
            BufferArg("out", dt, "w", "rows*cols"),
            BufferArg("x", dt, "r", "rows*cols"),
            BufferArg("weight", dt, "r", "cols"),
            BufferArg("bias", dt, "r", "cols"),
        )
        ln_vars = (VarArg("rows", 1), VarArg("cols", 1), VarArg("eps", INT32_MIN, "f32")) + CORE_VARS
        fam.add(
            KernelSig(
                "layernorm",
                _p(dtype=dt),
                entry,
                "softmax",
                bufs,
                ln_vars,
                GS,
                flops="8*rows*cols",
                bytes="%d*(2*rows*cols+2*cols)" % d.itemsize,
                work="rows*cols",
                grain=1 << 14,
                parallelism="rows",
                doc=fam.infos[1].doc,
            ),
            dict(base, entry=entry, op="layernorm"),
        )
    return fam


# --- matmul ---------------------------------------------------------------------------


#: The most rows of A that take matmul's unpacked path (B streamed once, columns split over core ids).
MATMUL_THIN_ROWS = 4
#: The rows of B the unpacked path sums apart before adding them to C (a multiple of its 4-row step).
MATMUL_THIN_K_BLOCK = 256


def _matmul_parallelism(mr: int, itemsize: int) -> str:
    """Row strips of mr, or for M <= MATMUL_THIN_ROWS column blocks of 256 bytes (the unpacked path's split)."""
    return "ceildiv(N,%d) if M <= %d else ceildiv(M,%d)" % (256 // itemsize, MATMUL_THIN_ROWS, mr)


def matmul_family() -> Family:
    fam = Family("matmul", "c/matmul.c.j2")
    tiles = sorted({t for ts in MATMUL_TILES.values() for t in ts})
    fam.infos.append(
        KernelInfo(
            "matmul",
            "matmul",
            {
                "dtype": ("float32", F32_64),
                "mr": (6, tuple(sorted({m for m, _ in tiles}))),
                "nr": (16, tuple(sorted({n for _, n in tiles}))),
                "ku": (4, (4,)),
            },
            "C = A @ B, row-major contiguous (M, K) x (K, N); blocked, packed, mr x nr register tile, "
            "rows split over core ids. Default tile per prebuilt variant (see PREFERRED)",
            "within 2 K eps (|A| @ |B|) (FMA where the ISA has it)",
            "(mr, nr) in %s" % {k: list(v) for k, v in MATMUL_TILES.items()},
        )
    )
    vars_ = (VarArg("M", 1), VarArg("N", 1), VarArg("K", 1)) + CORE_VARS
    for dt in F32_64:
        d = _dt(dt)
        # Blocks of kc x nc of B (576 KiB, 2x the old 128 KiB) and mc x kc of A: measured on a 2-vCPU EPYC
        # (AVX2, 512 KiB L2), 1024^2 float32 went from ~0.63x to ~0.8x of OpenBLAS's 1-thread time; larger
        # blocks gained a little more but would need over 1 MiB of the caller's stack (see docs/kernels.md).
        kc = 384 if d.itemsize == 4 else 192
        for mr, nr in MATMUL_TILES[dt]:
            entry = "svod_matmul_%s_%dx%d" % (d.short, mr, nr)
            mc = mr * max(1, 48 // mr)
            bufs = (BufferArg("c", dt, "w", "M*N"), BufferArg("a", dt, "r", "M*K"), BufferArg("b", dt, "r", "K*N"))
            sig = KernelSig(
                "matmul",
                _p(dtype=dt, mr=mr, nr=nr, ku=4),
                entry,
                "matmul",
                bufs,
                vars_,
                GS,
                flops="2*M*N*K",
                bytes="%d*(M*K+K*N+M*N)" % d.itemsize,
                work="M*N*K",
                grain=1 << 18,
                parallelism=_matmul_parallelism(mr, d.itemsize),
                ids_per_thread=1,
                doc=fam.infos[0].doc,
            )
            ctx = dict(
                entry=entry,
                t=d.storage,
                size=d.itemsize,
                mr=mr,
                nr=nr,
                kc=kc,
                mc=mc,
                nc=384,
                ku=4,
                thin=MATMUL_THIN_ROWS,
                thin_nb=8192 // d.itemsize,
                thin_align=64 // d.itemsize,
                thin_kb=MATMUL_THIN_K_BLOCK,
            )
            fam.add(sig, ctx)
    return fam


# --- copies -----------------------------------------------------------------------------

COPY_DTYPES = FLOATS + ("int32", "bool")
UNSIGNED = {1: "svod_u8", 2: "svod_u16", 4: "svod_u32", 8: "svod_u64"}


def copy_family() -> Family:
    fam = Family("copy", "c/copy.c.j2")
    fam.infos.append(
        KernelInfo(
            "transpose",
            "copy",
            {"dtype": ("float32", COPY_DTYPES), "tile": (32, (32,))},
            "2-D transpose of a contiguous (rows, cols) tensor, tile x tile blocks",
        )
    )
    fam.infos.append(
        KernelInfo(
            "permute",
            "copy",
            {"dtype": ("float32", COPY_DTYPES)},
            "strided 4-D copy: out[i0,i1,i2,i3] (contiguous, shape e0..e3) = x[i0*t0+i1*t1+i2*t2+i3*t3]; "
            "permute, expand (stride 0), slices; pad rank < 4 with size-1 dims",
        )
    )
    for dt in COPY_DTYPES:
        d = _dt(dt)
        u = UNSIGNED[d.itemsize]
        entry = "svod_transpose_x%d" % d.itemsize
        bufs = (BufferArg("out", dt, "w", "rows*cols"), BufferArg("x", dt, "r", "rows*cols"))
        vars_ = (VarArg("rows", 1), VarArg("cols", 1)) + CORE_VARS
        fam.add(
            KernelSig(
                "transpose",
                _p(dtype=dt, tile=32),
                entry,
                "copy",
                bufs,
                vars_,
                GS,
                bytes="%d*rows*cols" % (2 * d.itemsize),
                work="rows*cols",
                grain=1 << 16,
                parallelism="ceildiv(rows,32)",
                doc=fam.infos[0].doc,
            ),
            dict(entry=entry, op="transpose", u=u, tile=32),
        )
        entry = "svod_permute_x%d" % d.itemsize
        count = "1+(e0-1)*t0+(e1-1)*t1+(e2-1)*t2+(e3-1)*t3"
        bufs = (BufferArg("out", dt, "w", "e0*e1*e2*e3"), BufferArg("x", dt, "r", count))
        vars_ = tuple(VarArg("e%d" % i, 1) for i in range(4)) + tuple(VarArg("t%d" % i, 0) for i in range(4))
        fam.add(
            KernelSig(
                "permute",
                _p(dtype=dt),
                entry,
                "copy",
                bufs,
                vars_ + CORE_VARS,
                GS,
                bytes="%d*e0*e1*e2*e3" % (2 * d.itemsize),
                work="e0*e1*e2*e3",
                grain=1 << 16,
                parallelism="e0*e1*e2",
                doc=fam.infos[1].doc,
            ),
            dict(entry=entry, op="permute", u=u, tile=0),
        )
    return fam


# --- conv2d -----------------------------------------------------------------------------

OH = "((H+2*ph-dh*(KH-1)-1)//sh+1)"
OW = "((W+2*pw-dw*(KW-1)-1)//sw+1)"


def conv_family() -> Family:
    fam = Family("conv2d", "c/conv2d.c.j2")
    fam.infos.append(
        KernelInfo(
            "conv2d",
            "conv2d",
            {"dtype": ("float32", F32_64), "bias": (False, (False, True))},
            "direct NCHW conv2d, weight (OC, C, KH, KW), stride (sh, sw), zero padding (ph, pw), dilation (dh, dw); "
            "out (N, OC, OH, OW) with OH = (H + 2ph - dh(KH-1) - 1) // sh + 1",
            "within 2 C KH KW eps (|x| * |w|)",
        )
    )
    names = ("N", "C", "H", "W", "OC", "KH", "KW", "sh", "sw", "ph", "pw", "dh", "dw")
    vars_ = tuple(VarArg(n, 0 if n in ("ph", "pw") else 1) for n in names) + CORE_VARS
    for dt in F32_64:
        d = _dt(dt)
        for bias in (False, True):
            entry = "svod_conv2d_%s%s" % (d.short, "_bias" if bias else "")
            bufs = [
                BufferArg("out", dt, "w", "N*OC*%s*%s" % (OH, OW)),
                BufferArg("x", dt, "r", "N*C*H*W"),
                BufferArg("w", dt, "r", "OC*C*KH*KW"),
            ]
            if bias:
                bufs.append(BufferArg("bias", dt, "r", "OC"))
            sig = KernelSig(
                "conv2d",
                _p(dtype=dt, bias=bias),
                entry,
                "conv2d",
                tuple(bufs),
                vars_,
                GS,
                flops="2*N*OC*%s*%s*C*KH*KW" % (OH, OW),
                bytes="%d*(N*C*H*W+OC*C*KH*KW+N*OC*%s*%s)" % (d.itemsize, OH, OW),
                work="N*OC*%s*%s*C*KH*KW" % (OH, OW),
                grain=1 << 16,
                parallelism="N*OC",
                checks=("H+2*ph-dh*(KH-1)-1 >= 0", "W+2*pw-dw*(KW-1)-1 >= 0"),
                doc=fam.infos[0].doc,
            )
            fam.add(sig, dict(entry=entry, t=d.storage, bias=bias))
    return fam


# --- convolution as GEMM, depthwise convolution, pooling ---------------------------------

#: The fused epilogue's activations, in the order of their codes in templates/c/conv_epilogue.c.j2,
#: with the float32 variables each one takes (clip's bounds, leaky_relu's slope, hardsigmoid's alpha x + beta).
ACTS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("none", ()),
    ("relu", ()),
    ("clip", ("clip_min", "clip_max")),
    ("leaky_relu", ("alpha",)),
    ("sigmoid", ()),
    ("hardsigmoid", ("alpha", "beta")),
    ("hardswish", ()),
    ("tanh", ()),
)
ACT_NAMES = tuple(a for a, _ in ACTS)
#: conv2d_gemm's register tiles: matmul's tile preferred by some variant (PREFERRED), per dtype.
CONV_TILES = {"float32": ((4, 8), (6, 16), (8, 32)), "float64": ((4, 4), (6, 8), (8, 16))}
#: The tiles whose last strip, when a few pixels past half their width (a 7x7 image: 32 + 17), is a half tile and
#: those pixels as columns (A's mr rows one vector, 32 bytes): AVX-512's float32 tile.
CONV_COLS = (("float32", 8, 32),)
#: Output pixels per work item of conv2d_gemm (the width of the packed im2col tile: a multiple of every nr).
CONV_NC = 256
#: Elements of conv2d_gemm's packed weights (svod_min.kernels.conv_pack.packed_size).
PACKED_W = "groups*ceildiv(OC//groups,%d)*%d*(C//groups)*KH*KW" % (PACK_ROWS, PACK_ROWS)
PAD_OH = "((H+pt+pb-dh*(KH-1)-1)//sh+1)"
PAD_OW = "((W+pl+pr-dw*(KW-1)-1)//sw+1)"
CONV_NAMES = ("N", "C", "H", "W", "OC", "KH", "KW", "sh", "sw", "pt", "pl", "pb", "pr", "dh", "dw", "groups")
DW_NAMES = ("N", "C", "H", "W", "KH", "KW", "sh", "sw", "pt", "pl", "pb", "pr", "dh", "dw")
EPILOGUE_DOC = (
    "; epilogue: + bias[oc] (bias=True), + residual (residual=True: a second input shaped as out), "
    "then act (none, relu, clip(clip_min, clip_max), leaky_relu(alpha), sigmoid, "
    "hardsigmoid(alpha, beta), hardswish, tanh; float32 variables)"
)


#: The activations float64 instances have: every instance carries its own copy of the shared code (a block
#: compiles alone), so the float64 ones are kept to what CNNs in double use.
F64_ACTS = ("none", "relu")


def _epilogues(dtype: str) -> List[Tuple[str, Tuple[str, ...], int, bool, bool]]:
    """(act, its float variables, its code, bias, residual) for every fused epilogue of ``dtype``."""
    return [
        (act, fvars, code, bias, res)
        for code, (act, fvars) in enumerate(ACTS)
        if dtype == "float32" or act in F64_ACTS
        for bias in (False, True)
        for res in (False, True)
    ]


#: The epilogues of the instances that take weights packed at build time (``packed=True``): float32 with a bias
#: (the ONNX front end gives every packed convolution one), every activation. The prebuilt objects hold
#: those of PREBUILT_SUBSET; a bundle carries objects for the others (planfile/library_objects.py).
PACKED_ACTS = ACT_NAMES


def _conv_instances(dtype: str) -> List[Tuple[str, Tuple[str, ...], int, bool, bool, bool]]:
    """(act, its float variables, code, bias, residual, packed) of every conv2d_gemm instance of ``dtype``."""
    plain = [e + (False,) for e in _epilogues(dtype)]
    packed = [e + (True,) for e in _epilogues(dtype) if dtype == "float32" and e[3] and e[0] in PACKED_ACTS]
    return plain + packed


def _epilogue_suffix(act: str, bias: bool, res: bool) -> str:
    return "_" + act + ("_bias" if bias else "") + ("_res" if res else "")


def _conv_vars(names: Sequence[str], fvars: Sequence[str]) -> Tuple[VarArg, ...]:
    ints = tuple(VarArg(n, 0 if n in ("pt", "pl", "pb", "pr") else 1) for n in names)
    return ints + tuple(VarArg(f, INT32_MIN, "f32") for f in fvars) + CORE_VARS


def conv_gemm_family() -> Family:
    fam = Family("conv_gemm", "c/conv_gemm.c.j2")
    fam.infos.append(
        KernelInfo(
            "conv2d_gemm",
            "conv_gemm",
            {
                "dtype": ("float32", F32_64),
                "act": ("none", ACT_NAMES),
                "bias": (False, (False, True)),
                "residual": (False, (False, True)),
                "mr": (6, (4, 6, 8)),
                "nr": (16, (4, 8, 16, 32)),
                "packed": (False, (False, True)),
            },
            "NCHW conv2d as a GEMM on matmul's register tile: weight (OC, C/groups, KH, KW) as A, im2col tiles "
            "of the input packed in cache as B (pointwise convs read the input rows); groups, stride (sh, sw), "
            "pads (pt, pl, pb, pr), dilation (dh, dw); out (N, OC, OH, OW), OH = (H + pt + pb - dh(KH-1) - 1) // sh + 1"
            + EPILOGUE_DOC
            + ". Tile per prebuilt variant as matmul (PREFERRED). packed=True: w is "
            "svod_min.kernels.conv_pack.pack_conv_weights(w, groups) (packed once at build time)",
            "within 2 K eps (|x| * |w|), K = C/groups KH KW; epilogue as its ops",
            "(mr, nr) in %s; float64: act in %s; packed: float32, bias, act in %s"
            % ({k: list(v) for k, v in CONV_TILES.items()}, list(F64_ACTS), list(PACKED_ACTS)),
        )
    )
    checks = ("H+pt+pb-dh*(KH-1)-1 >= 0", "W+pl+pr-dw*(KW-1)-1 >= 0", "C % groups == 0", "OC % groups == 0")
    out_count = "N*OC*%s*%s" % (PAD_OH, PAD_OW)
    for dt in F32_64:
        d = _dt(dt)
        kc = PACK_KC[d.itemsize]
        for mr, nr in CONV_TILES[dt]:
            if PACK_ROWS % mr:
                raise ValueError(
                    "conv2d_gemm tile %dx%d: mr must divide PACK_ROWS=%d (packed strips)" % (mr, nr, PACK_ROWS)
                )
            core = "svod_convgemm_%s_%dx%d" % (d.short, mr, nr)
            for act, fvars, code, bias, res, packed in _conv_instances(dt):
                entry = "svod_conv2d_gemm_%s_%dx%d%s%s" % (
                    d.short,
                    mr,
                    nr,
                    _epilogue_suffix(act, bias, res),
                    "_packed" if packed else "",
                )
                w_count = PACKED_W if packed else "OC*(C//groups)*KH*KW"
                bufs = [
                    BufferArg("out", dt, "w", out_count),
                    BufferArg("x", dt, "r", "N*C*H*W"),
                    BufferArg("w", dt, "r", w_count),
                ]
                if bias:
                    bufs.append(BufferArg("bias", dt, "r", "OC"))
                if res:
                    bufs.append(BufferArg("residual", dt, "r", out_count))
                work = "N*OC*%s*%s*(C//groups)*KH*KW" % (PAD_OH, PAD_OW)
                sig = KernelSig(
                    "conv2d_gemm",
                    _p(dtype=dt, act=act, bias=bias, residual=res, mr=mr, nr=nr, packed=packed),
                    entry,
                    "conv_gemm",
                    tuple(bufs),
                    _conv_vars(CONV_NAMES, fvars),
                    GS,
                    flops="2*" + work,
                    bytes="%d*(N*C*H*W+%s+%d*%s)" % (d.itemsize, w_count, 2 if res else 1, out_count),
                    work=work,
                    grain=1 << 20,
                    parallelism="N*groups*ceildiv(%s*%s,%d)*ceildiv(OC//groups,%d)" % (PAD_OH, PAD_OW, CONV_NC, mr),
                    ids_per_thread=1,
                    checks=checks,
                    doc="NCHW conv2d as a GEMM; out = act(conv + bias + residual)",
                )
                ctx = dict(
                    entry=entry,
                    core=core,
                    t=d.storage,
                    size=d.itemsize,
                    s=d.sfx,
                    mr=mr,
                    nr=nr,
                    kc=kc,
                    mc=mr * max(1, 48 // mr),
                    nc=CONV_NC,
                    ku=4,
                    act=code,
                    bias=bias,
                    residual=res,
                    fvars=fvars,
                    packed=packed,
                    ps=PACK_ROWS,
                    cols=(dt, mr, nr) in CONV_COLS,
                )
                fam.add(sig, ctx)
    return fam


def depthwise_family() -> Family:
    fam = Family("depthwise", "c/depthwise.c.j2")
    fam.infos.append(
        KernelInfo(
            "depthwise_conv2d",
            "depthwise",
            {
                "dtype": ("float32", F32_64),
                "act": ("none", ACT_NAMES),
                "bias": (False, (False, True)),
                "residual": (False, (False, True)),
            },
            "depthwise NCHW conv2d (groups = C = OC): weight (C, 1, KH, KW), stride, pads (pt, pl, pb, pr), dilation; "
            "output rows split over core ids, interior columns vectorised (3-wide filters unrolled)" + EPILOGUE_DOC,
            "within 2 KH KW eps (|x| * |w|); epilogue as its ops",
            "float64: act in %s" % list(F64_ACTS),
        )
    )
    checks = ("H+pt+pb-dh*(KH-1)-1 >= 0", "W+pl+pr-dw*(KW-1)-1 >= 0")
    out_count = "N*C*%s*%s" % (PAD_OH, PAD_OW)
    for dt in F32_64:
        d = _dt(dt)
        core = "svod_dwconv_%s" % d.short
        for act, fvars, code, bias, res in _epilogues(dt):
            entry = "svod_depthwise_conv2d_%s%s" % (d.short, _epilogue_suffix(act, bias, res))
            bufs = [
                BufferArg("out", dt, "w", out_count),
                BufferArg("x", dt, "r", "N*C*H*W"),
                BufferArg("w", dt, "r", "C*KH*KW"),
            ]
            if bias:
                bufs.append(BufferArg("bias", dt, "r", "C"))
            if res:
                bufs.append(BufferArg("residual", dt, "r", out_count))
            work = "N*C*%s*%s*KH*KW" % (PAD_OH, PAD_OW)
            sig = KernelSig(
                "depthwise_conv2d",
                _p(dtype=dt, act=act, bias=bias, residual=res),
                entry,
                "depthwise",
                tuple(bufs),
                _conv_vars(DW_NAMES, fvars),
                GS,
                flops="2*" + work,
                bytes="%d*(N*C*H*W+C*KH*KW+%d*%s)" % (d.itemsize, 2 if res else 1, out_count),
                work=work,
                grain=1 << 18,
                parallelism="N*C*%s" % PAD_OH,
                checks=checks,
                doc="depthwise NCHW conv2d; out = act(conv + bias + residual)",
            )
            fam.add(
                sig,
                dict(
                    entry=entry,
                    core=core,
                    t=d.storage,
                    size=d.itemsize,
                    s=d.sfx,
                    act=code,
                    bias=bias,
                    residual=res,
                    fvars=fvars,
                ),
            )
    return fam


def pool_family() -> Family:
    fam = Family("pool", "c/pool.c.j2")
    fam.infos.append(
        KernelInfo(
            "maxpool2d",
            "pool",
            {"dtype": ("float32", F32_64)},
            "NCHW max pooling: window (KH, KW), stride, pads (pt, pl) before, dilation; the caller gives OH, OW "
            "(floor or ceil mode); windows are clipped to the input; nan propagates; a window with no input "
            "element gives -inf",
            "exact",
        )
    )
    fam.infos.append(
        KernelInfo(
            "avgpool2d",
            "pool",
            {"dtype": ("float32", F32_64)},
            "NCHW average pooling: window (KH, KW), stride, pads (pt, pl, pb, pr); the caller gives OH, OW; "
            "count_include_pad 1 divides by the window clipped to the padded input, 0 by its input elements",
            "within (KH KW + 1) eps |mean|",
        )
    )
    fam.infos.append(
        KernelInfo(
            "global_avgpool",
            "pool",
            {"dtype": ("float32", F32_64)},
            "NCHW global average pooling: out (N, C) = mean over H x W (16 lane partial sums)",
            "16 lane partial sums: ~sqrt(H W / 16) eps relative",
        )
    )
    window = ("N", "C", "H", "W", "OH", "OW", "KH", "KW", "sh", "sw", "pt", "pl")
    for dt in F32_64:
        d = _dt(dt)
        base = dict(t=d.storage, s=d.sfx, size=d.itemsize)
        for op, extra in (("max", ("dh", "dw")), ("avg", ("pb", "pr", "count_include_pad"))):
            name = op + "pool2d"
            entry = "svod_%s_%s" % (name, d.short)
            vars_ = (
                tuple(VarArg(n, 0 if n in ("pt", "pl", "pb", "pr", "count_include_pad") else 1) for n in window + extra)
                + CORE_VARS
            )
            checks = ["(OH-1)*sh < H+pt", "(OW-1)*sw < W+pl"]
            if op == "avg":
                checks.append("count_include_pad <= 1")
            bufs = (BufferArg("out", dt, "w", "N*C*OH*OW"), BufferArg("x", dt, "r", "N*C*H*W"))
            fam.add(
                KernelSig(
                    name,
                    _p(dtype=dt),
                    entry,
                    "pool",
                    bufs,
                    vars_,
                    GS,
                    flops="N*C*OH*OW*KH*KW",
                    bytes="%d*(N*C*H*W+N*C*OH*OW)" % d.itemsize,
                    work="N*C*OH*OW*KH*KW",
                    grain=1 << 18,
                    parallelism="N*C*OH",
                    checks=tuple(checks),
                    doc=fam.infos[0 if op == "max" else 1].doc,
                ),
                dict(base, entry=entry, op=op),
            )
        entry = "svod_global_avgpool_%s" % d.short
        vars_ = tuple(VarArg(n, 1) for n in ("N", "C", "H", "W")) + CORE_VARS
        bufs = (BufferArg("out", dt, "w", "N*C"), BufferArg("x", dt, "r", "N*C*H*W"))
        fam.add(
            KernelSig(
                "global_avgpool",
                _p(dtype=dt),
                entry,
                "pool",
                bufs,
                vars_,
                GS,
                flops="N*C*H*W",
                bytes="%d*(N*C*H*W+N*C)" % d.itemsize,
                work="N*C*H*W",
                grain=1 << 18,
                parallelism="N*C",
                doc=fam.infos[2].doc,
            ),
            dict(base, entry=entry, op="gavg"),
        )
    return fam


# --- fill / arange ------------------------------------------------------------------------


def fill_family() -> Family:
    fam = Family("fill", "c/fill.c.j2")
    fam.infos.append(
        KernelInfo(
            "fill", "fill", {"dtype": ("float32", COPY_DTYPES)}, "out[i] = value[0] (the value is a 1-element buffer)"
        )
    )
    aranges = FLOATS + ("int32",)
    fam.infos.append(
        KernelInfo(
            "arange",
            "fill",
            {"dtype": ("float32", aranges)},
            "out[i] = start + i * step (int32 start/step; computed in double or 64-bit int)",
            "exact, then rounded once to the dtype; int32 wraps",
        )
    )
    for dt in COPY_DTYPES:
        d = _dt(dt)
        entry = "svod_fill_x%d" % d.itemsize
        bufs = (BufferArg("out", dt, "w", "n"), BufferArg("value", dt, "r", "1"))
        fam.add(
            KernelSig(
                "fill",
                _p(dtype=dt),
                entry,
                "fill",
                bufs,
                (VarArg("n", 0),) + CORE_VARS,
                GS,
                bytes="%d*n" % d.itemsize,
                work="n",
                grain=1 << 16,
                parallelism="ceildiv(n,64)",
                doc=fam.infos[0].doc,
            ),
            dict(entry=entry, op="fill", u=UNSIGNED[d.itemsize]),
        )
    for dt in aranges:
        d = _dt(dt)
        entry = "svod_arange_%s" % d.short
        if d.kind == "int":
            value = "(svod_i32)(svod_u32)((svod_i64)start + i * (svod_i64)step)"
        else:
            value = d.store.format("(%s)((double)start + (double)i * (double)step)" % d.math)
        vars_ = (VarArg("n", 0), VarArg("start", INT32_MIN), VarArg("step", INT32_MIN)) + CORE_VARS
        fam.add(
            KernelSig(
                "arange",
                _p(dtype=dt),
                entry,
                "fill",
                (BufferArg("out", dt, "w", "n"),),
                vars_,
                GS,
                bytes="%d*n" % d.itemsize,
                work="n",
                grain=1 << 16,
                parallelism="ceildiv(n,64)",
                doc=fam.infos[1].doc,
            ),
            dict(entry=entry, op="arange", st=d.storage, value=value),
        )
    return fam


# --- what goes into each prebuilt object --------------------------------------------------


#: What of the convolution and pooling kernels the prebuilt objects hold (the rest compiles on demand, from the same
#: source): float32, and the epilogues ONNX CNNs fuse most (none, relu, clip: relu6), with and without bias, and
#: residual adds with a bias (a convolution with a folded batch norm has one). Every epilogue entry is a call into one
#: shared core, but each costs ~300 bytes of code, symbol and relocation, and the objects ship in every wheel
#: (tests/kernels/test_kernels_prebuilt.py's budget).
PREBUILT_SUBSET: Dict[str, Dict[str, Tuple[Any, ...]]] = {
    "conv2d_gemm": {"dtype": ("float32",), "act": ("none", "relu", "clip")},
    "depthwise_conv2d": {"dtype": ("float32",), "act": ("none", "relu", "clip")},
    "maxpool2d": {"dtype": ("float32",)},
    "avgpool2d": {"dtype": ("float32",)},
    "global_avgpool": {"dtype": ("float32",)},
}


def _in_prebuilt_subset(name: str, params: Dict[str, Any]) -> bool:
    if params.get("residual") and not params.get("bias"):
        return False
    return all(params[k] in allowed for k, allowed in PREBUILT_SUBSET[name].items())


def excluded_entries(variant: str, families: Sequence[Family]) -> List[str]:
    """Entries left out of ``variant``'s object (compiled on demand there): matmul and conv2d_gemm tiles it
    does not prefer."""
    out = set()
    for fam in families:
        for sig in fam.sigs:
            p = sig.param_dict
            if sig.name in PREBUILT_SUBSET and not _in_prebuilt_subset(sig.name, p):
                out.add(sig.entry)
            if sig.name not in ("matmul", "conv2d_gemm"):
                continue
            want = PREFERRED.get(variant, {}).get(sig.name, {}).get(p["dtype"])
            if want is None or (p["mr"], p["nr"]) != (want["mr"], want["nr"]):
                out.add(sig.entry)
    return sorted(out)


# --- everything ------------------------------------------------------------------------------


def build_catalogue() -> Tuple[List[Family], List[EwSpec]]:
    """All C families (elementwise first) and the elementwise instances to render."""
    ew: List[EwSpec] = []
    families = [
        elementwise(ew),
        reduce_family(),
        rows_family(),
        matmul_family(),
        copy_family(),
        conv_family(),
        fill_family(),
        conv_gemm_family(),
        depthwise_family(),
        pool_family(),
    ]
    _check_unique(families)
    return families, ew


def _check_unique(families: Sequence[Family]) -> None:
    seen: Dict[Tuple[str, Tuple[Tuple[str, Any], ...]], str] = {}
    names = set()
    for fam in families:
        for info in fam.infos:
            if info.name in names:
                raise ValueError("catalogue name %r defined twice" % info.name)
            names.add(info.name)
        for sig in fam.sigs:
            key = (sig.name, sig.params)
            if key in seen:
                raise ValueError("duplicate instance %r" % (key,))
            seen[key] = sig.entry
