#!/usr/bin/env python3
"""Long fuzz run of the ELF loader: seeded structured mutations of real objects.

    python bench/fuzz_loader_long.py [--n 1000000] [--jobs 2] [--seed 0] [--no-load] [--json FILE]
    python bench/fuzz_loader_long.py --replay SEED:INDEX      # re-run and explain one input

Seeds are real relocatable objects compiled at start-up (four small kernels,
clang and gcc for this host, plus clang for the other supported architecture
when it can target it). Every input applies 1-4 structured mutations to one
seed — ELF header fields, section-table entries (offset, size, type, flags,
link, info, align, entsize), symbol entries (name, info, shndx, value, size),
relocation entries (offset, type, symbol, addend), swapped section headers,
truncation and byte flips — and feeds it to ``relocate()`` with a resolver
that returns fixed addresses (near, far, missing or raising). When that
succeeds, the result's invariants are checked (image length, every patch /
GOT slot / stub inside its segment, symbols inside the image) and, for
host-architecture objects, ``load_object()`` maps and unmaps it. Mutated code
is never called.

The only acceptable outcomes are success or a ``svod_min.error.LoaderError``.
Anything else (another exception type, a violated invariant, an input that
runs past its time limit) is counted as ``BUG ...``, its ``SEED:INDEX`` is
printed for ``--replay``, and the exit status is 1.

Input ``i`` of seed ``s`` is generated from ``random.Random(s * 2**32 + i)``
alone, so any input can be reproduced without re-running the others. No
hypothesis needed; the worker processes split the index range.

The module doubles as the mutation engine of tests/loader/test_fuzz_loader.py.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import os
import random
import re
import resource
import signal
import struct
import sys
import time
from typing import Callable, Counter, Dict, List, Optional, Sequence, Tuple

if __name__ == "__main__":  # run from a checkout: use its svod_min (imported by the tests: leave sys.path alone)
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from svod_min.compiler import clang  # noqa: E402
from svod_min.error import LoaderError, SymbolNotFoundError  # noqa: E402
from svod_min.jit_loader import layout as _layout  # noqa: E402
from svod_min.jit_loader import load_object, plan_layout, relocate  # noqa: E402
from svod_min.jit_loader.layout import PAGE, PROT_EXEC, PROT_WRITE  # noqa: E402

# --- seed objects ------------------------------------------------------------------------

# No #include: the same sources also cross-compile for the other architecture.
SOURCES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "add": (
        r"""
void k_add(float* restrict out, const float* restrict a, const float* restrict b, const int n, const int core_id) {
    int chunk = (n + 1) / 2, lo = core_id * chunk, hi = lo + chunk < n ? lo + chunk : n;
    for (int i = lo; i < hi; ++i) out[i] = a[i] + b[i];
}
""",
        (),
    ),
    "state": (  # libm calls, .bss, .data through the GOT, a .rodata table, a weak undefined
        r"""
float expf(float); float logf(float);
extern int optional_hook(int) __attribute__((weak));
static const float table[8] = {1, 2, 3, 5, 7, 11, 13, 17};
static int calls;
int scale = 3;
void k_state(float* restrict out, const float* restrict x, const int n) {
    calls += 1;
    for (int i = 0; i < n; ++i) out[i] = logf(1.0f + expf(x[i])) * scale + table[i & 7];
    if (optional_hook) out[0] += optional_hook(n);
}
int k_calls(void) { return calls; }
""",
        (),
    ),
    "dispatch": (  # function-pointer table (absolute 64-bit), switch table, memcpy, COMMON symbol
        r"""
void* memcpy(void*, const void*, unsigned long);
typedef float (*unop)(float);
static float twice(float x) { return 2 * x; }
static float halve(float x) { return x / 2; }
static unop const ops[2] = {twice, halve};
static const char* const names[3] = {"zero", "one", "two"};
int common_counter;
static int pick(int x) {
    switch (x & 7) {
    case 0: return 11; case 1: return 22; case 2: return 33; case 3: return 44;
    case 4: return 55; case 5: return 66; case 6: return 77; default: return 88;
    }
}
void k_dispatch(float* restrict out, const float* restrict in, const int n) {
    common_counter += 1;
    for (int i = 0; i < n; ++i) out[i] = ops[i & 1](in[i]) + pick(i) + names[i % 3][0];
    memcpy(out + n, in, 64);
}
""",
        ("-fcommon",),
    ),
    "matmul": (  # vectorisable loops, 16-byte constants, a static helper
        r"""
static const float bias[4] __attribute__((aligned(16))) = {0.5f, -0.5f, 0.25f, -0.25f};
static float dot(const float* a, const float* b, int n, int stride) {
    float s = 0; for (int k = 0; k < n; ++k) s += a[k] * b[k * stride]; return s;
}
void k_matmul(float* restrict c, const float* restrict a, const float* restrict b, const int n) {
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) c[i * n + j] = dot(a + i * n, b + j, n, n) + bias[(i + j) & 3];
}
""",
        (),
    ),
}

#: Other architectures clang builds seeds for (every one the loader relocates); loongarch64
#: needs a newer clang than Debian 12's default (clang-16), used when installed.
_CROSS_TARGETS = ("x86_64-linux-gnu", "aarch64-linux-gnu", "riscv64-linux-gnu", "powerpc64le-linux-gnu")
_LOONGARCH_CLANG = ("clang-16", "--target=loongarch64-linux-gnu")


def _cross_object(command: List[str], src: str, flags: Tuple[str, ...]) -> Optional[bytes]:
    import subprocess

    proc = subprocess.run(
        command + ["-c", "-O2", "-fPIC", *flags, "-x", "c", "-", "-o", "-"],
        input=src.encode(),
        capture_output=True,
        timeout=300,
    )
    return proc.stdout if proc.returncode == 0 else None


def compile_seeds(cross: bool = True) -> List[Tuple[str, bytes]]:
    """``(label, object bytes)`` for every source with every available compiler."""
    import shutil

    seeds: List[Tuple[str, bytes]] = []
    compilers = [cc for cc in ("clang", "gcc") if shutil.which(cc)]
    host = clang.host_arch()
    for name, (src, flags) in SOURCES.items():
        for cc in compilers:
            seeds.append(("%s-%s" % (name, cc), clang.compile_c(src, compiler=cc, extra_flags=list(flags))))
        if not cross:
            continue
        commands = [
            ["clang", "--target=" + t] for t in _CROSS_TARGETS if "clang" in compilers and not t.startswith(host)
        ]
        if shutil.which(_LOONGARCH_CLANG[0]) and host != "loongarch64":
            commands.append(list(_LOONGARCH_CLANG))
        for command in commands:
            obj = _cross_object(command, src, flags)
            if obj is not None:  # this clang cannot target that architecture: no seed
                arch = command[-1].split("=")[1].split("-")[0].replace("powerpc64le", "ppc64le")
                seeds.append(("%s-clang-%s" % (name, arch), obj))
    return seeds


# --- a lenient view of the (possibly already mutated) structures --------------------------

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
SHDR = struct.Struct("<IIQQQQIIQQ")
SYM = struct.Struct("<IBBHQQ")
RELA = struct.Struct("<QQq")

# Bit widths of the fields, by struct position.
EHDR_BITS = (0, 16, 16, 32, 64, 64, 64, 32, 16, 16, 16, 16, 16, 16)
SHDR_BITS = (32, 32, 64, 64, 64, 64, 32, 32, 64, 64)
SHDR_FIELDS = ("name", "type", "flags", "addr", "offset", "size", "link", "info", "align", "entsize")
SYM_BITS = (32, 8, 8, 16, 64, 64)
SYM_FIELDS = ("name", "info", "other", "shndx", "value", "size")
RELA_FIELDS = ("offset", "type", "sym", "addend")


def _sections(buf: bytearray) -> List[Tuple[int, tuple]]:
    """``(file offset of the header, fields)`` for every readable section header."""
    if len(buf) < EHDR.size:
        return []
    eh = EHDR.unpack_from(buf)
    shoff, shnum = eh[6], eh[12]
    out = []
    for i in range(min(shnum, 4096)):
        at = shoff + i * SHDR.size
        if at + SHDR.size > len(buf):
            break
        out.append((at, SHDR.unpack_from(buf, at)))
    return out


def _entries(buf: bytearray, sh_type: int, entsize: int) -> List[int]:
    """File offsets of every entry of every section of ``sh_type`` that lies inside the file."""
    out: List[int] = []
    for _at, sh in _sections(buf):
        if sh[1] != sh_type:
            continue
        off, size = sh[4], sh[5]
        if off + size > len(buf):
            continue
        out.extend(off + k * entsize for k in range(min(size // entsize, 1 << 16)))
    return out


# --- mutations ----------------------------------------------------------------------------

#: Values that sit on boundaries the parser and layout must handle.
INTERESTING = (
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    24,
    63,
    64,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0xFFF,
    0x1000,
    0x1001,
    0x7FFF,
    0x8000,
    0xFF00,
    0xFFF1,
    0xFFF2,
    0xFFFF,
    0x10000,
    1 << 20,
    1 << 24,
    (1 << 28) - 1,
    1 << 28,
    (1 << 31) - 1,
    1 << 31,
    (1 << 32) - 1,
    1 << 32,
    1 << 40,
    (1 << 63) - 1,
    1 << 63,
    (1 << 64) - 1,
)
#: Values relative to the input or to the original field.
RELATIVE = ("len", "len-1", "len+1", "len-64", "orig+1", "orig-1", "orig*2", "orig+page", "neg", "shnum", "shnum+1")

KINDS = ("header", "section", "symbol", "relocation", "swap", "truncate", "flip")

Value = Tuple[str, int]  # ("lit", value) | ("rel", index into RELATIVE)
Mutation = Tuple[str, int, int, Value]  # (kind, selector, field, value)


def _value(spec: Value, orig: int, bits: int, buf: bytearray) -> int:
    kind, v = spec
    if kind == "lit":
        return v & ((1 << bits) - 1)
    code = RELATIVE[v % len(RELATIVE)]
    n = len(buf)
    shnum = EHDR.unpack_from(buf)[12] if n >= EHDR.size else 0
    raw = {
        "len": n,
        "len-1": n - 1,
        "len+1": n + 1,
        "len-64": n - 64,
        "orig+1": orig + 1,
        "orig-1": orig - 1,
        "orig*2": orig * 2,
        "orig+page": orig + PAGE,
        "neg": -orig,
        "shnum": shnum,
        "shnum+1": shnum + 1,
    }[code]
    return raw & ((1 << bits) - 1)


def apply_mutation(buf: bytearray, mutation: Mutation) -> None:
    """Apply one mutation in place; a target that cannot be located makes it a byte flip."""
    kind, sel, fld, val = mutation
    if kind == "header" and len(buf) >= EHDR.size:
        fields = list(EHDR.unpack_from(buf))
        index = 1 + fld % 13
        if fld % 14 == 13:  # an e_ident byte: class, data, version, OS ABI, padding
            buf[4 + sel % 12] = _value(val, buf[4 + sel % 12], 8, buf)
            return
        fields[index] = _value(val, fields[index], EHDR_BITS[index], buf)
        EHDR.pack_into(buf, 0, *fields)
        return
    if kind == "section":
        secs = _sections(buf)
        if secs:
            at, sh = secs[sel % len(secs)]
            fields = list(sh)
            index = fld % len(SHDR_FIELDS)
            fields[index] = _value(val, fields[index], SHDR_BITS[index], buf)
            SHDR.pack_into(buf, at, *fields)
            return
    if kind == "symbol":
        syms = _entries(buf, 2, SYM.size)
        if syms:
            at = syms[sel % len(syms)]
            fields = list(SYM.unpack_from(buf, at))
            index = fld % len(SYM_FIELDS)
            if index == 1 and val[0] == "lit" and val[1] < 0x100 and fld & 16:
                # keep one nibble: change only the binding or only the type
                keep = fields[1] & (0x0F if fld & 32 else 0xF0)
                fields[1] = keep | (val[1] & (0xF0 if fld & 32 else 0x0F))
            else:
                fields[index] = _value(val, fields[index], SYM_BITS[index], buf)
            SYM.pack_into(buf, at, *fields)
            return
    if kind == "relocation":
        relas = _entries(buf, 4, RELA.size)
        if relas:
            at = relas[sel % len(relas)]
            offset, info, addend = RELA.unpack_from(buf, at)
            sym, rtype = info >> 32, info & 0xFFFFFFFF
            which = RELA_FIELDS[fld % 4]
            if which == "offset":
                offset = _value(val, offset, 64, buf)
            elif which == "type":
                # mostly a known type number of either architecture, sometimes anything
                rtype = _value(val, rtype, 32, buf) if fld & 8 else (val[1] % 48 if fld & 4 else 256 + val[1] % 60)
            elif which == "sym":
                sym = _value(val, sym, 32, buf) if fld & 8 else val[1] % 64
            else:
                addend = _value(val, addend & ((1 << 64) - 1), 64, buf)
                addend -= (1 << 64) if addend >> 63 else 0
            RELA.pack_into(buf, at, offset, (sym << 32) | rtype, addend)
            return
    if kind == "swap":
        secs = _sections(buf)
        if len(secs) > 1:
            (at_a, a), (at_b, b) = secs[sel % len(secs)], secs[(sel // 7 + fld + 1) % len(secs)]
            SHDR.pack_into(buf, at_a, *b)
            SHDR.pack_into(buf, at_b, *a)
            return
    if kind == "truncate":
        del buf[sel % (len(buf) + 1) :]
        return
    if buf:  # "flip", and the fallback for targets that were not found
        pos = sel % len(buf)
        buf[pos] ^= (val[1] & 0xFF) or 0x80


def apply_mutations(data: bytes, mutations: Sequence[Mutation]) -> bytes:
    buf = bytearray(data)
    for m in mutations:
        apply_mutation(buf, m)
    return bytes(buf)


def random_value(rng: random.Random) -> Value:
    r = rng.random()
    if r < 0.45:
        return ("lit", rng.choice(INTERESTING))
    if r < 0.75:
        return ("rel", rng.randrange(len(RELATIVE)))
    if r < 0.9:
        return ("lit", rng.randrange(0x200))
    return ("lit", rng.getrandbits(64))


_KIND_WEIGHTS = (
    ("header", 8),
    ("section", 30),
    ("symbol", 20),
    ("relocation", 22),
    ("swap", 4),
    ("truncate", 6),
    ("flip", 10),
)


def random_mutations(rng: random.Random) -> List[Mutation]:
    kinds = [k for k, _ in _KIND_WEIGHTS]
    weights = [w for _, w in _KIND_WEIGHTS]
    count = rng.choice((1, 1, 1, 2, 2, 3, 4))
    return [
        (rng.choices(kinds, weights)[0], rng.getrandbits(20), rng.getrandbits(8), random_value(rng))
        for _ in range(count)
    ]


# --- resolvers ------------------------------------------------------------------------------

BASE = 0x10000000  # where relocate() pretends to load


def _missing(name: str) -> int:
    raise SymbolNotFoundError("fuzz: %r is missing" % name)


RESOLVERS: Dict[str, Callable[[str], int]] = {
    "near": lambda name: BASE + 0x800000,  # within +-2 GiB: direct PC32 to externals fits
    "far": lambda name: 0x7F1234560000,  # only reachable through GOT slots and stubs
    "zero": lambda name: 0,  # "not found" (weak symbols become null)
    "raises": _missing,
}
RESOLVER_NAMES = tuple(RESOLVERS)


# --- one input ------------------------------------------------------------------------------


class InvariantViolation(AssertionError):
    """A successful relocation whose result breaks a promise of the loader."""


def check_relocated(data: bytes, result) -> None:
    """Everything relocate() returned lies where it should; raises InvariantViolation."""
    layout = plan_layout(data)
    size = layout.size

    def need(cond: bool, what: str) -> None:
        if not cond:
            raise InvariantViolation(what)

    need(len(result.image) == size == result.size, "image is %d bytes, layout says %d" % (len(result.image), size))
    need(size % PAGE == 0 and 0 < size <= getattr(_layout, "MAX_IMAGE_BYTES", 1 << 62), "image size %d" % size)
    segs = sorted(layout.segments, key=lambda s: s.offset)
    end = 0
    for seg in segs:
        need(
            seg.offset % PAGE == 0 and seg.offset >= end,
            "segment %s at %d overlaps or is unaligned" % (seg.name, seg.offset),
        )
        end = seg.offset + seg.size
        need(end <= size, "segment %s ends at %d past the image (%d)" % (seg.name, end, size))
        need(not (seg.prot & PROT_WRITE and seg.prot & PROT_EXEC), "segment %s is writable and executable" % seg.name)

    def inside(start: int, width: int, names: Sequence[str]) -> bool:
        return any(s.name in names and s.offset <= start and start + width <= s.offset + s.size for s in segs)

    for p in layout.patches:
        need(
            inside(p.offset, p.spec.width, ("text", "rodata", "data")),
            "patch %s at %s (image offset %d, %d bytes) is outside every segment"
            % (p.spec.name, p.where, p.offset, p.spec.width),
        )
    for off, _ref, _addend in layout.got:
        # read-only after relocation: in rodata, or on a small image's one read+execute page
        need(inside(off, 8, ("rodata", "text")), "GOT slot at %d is outside the read-only segments" % off)
    for off, _ref, _addend in layout.stubs:
        need(inside(off, layout.arch.stub_size, ("text",)), "stub at %d is outside the text segment" % off)
    for name, off in layout.symbols.items():
        need(0 <= off <= size, "symbol %r at image offset %d is outside the image" % (name, off))
    # padding between segments is never written
    gaps, cursor = [], 0
    for seg in segs:
        gaps.append((cursor, seg.offset))
        cursor = seg.offset + seg.size
    gaps.append((cursor, size))
    for lo, hi in gaps:
        need(not any(result.image[lo:hi]), "bytes [%d, %d) between segments were written" % (lo, hi))


def _maps_overlapping(base: int, size: int) -> List[str]:
    out = []
    with open("/proc/self/maps") as fh:
        for line in fh:
            lo, hi = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
            if lo < base + size and base < hi:
                out.append(line)
    return out


def run_one(data: bytes, resolver: str = "near", load: bool = True, check_maps: bool = False) -> str:
    """Relocate (and maybe map) one input; the outcome label, or raise on a bug."""
    return classify(data, resolver, load, check_maps)[0]


def classify(data: bytes, resolver: str = "near", load: bool = True, check_maps: bool = False) -> Tuple[str, str]:
    """``(outcome, loader error message or "")`` for one input; raises on a bug."""
    resolve = RESOLVERS[resolver]
    try:
        result = relocate(data, BASE, resolve)
    except LoaderError as exc:
        return type(exc).__name__, str(exc)
    check_relocated(data, result)
    layout = plan_layout(data)
    if not load or layout.arch.name != clang.host_arch():
        return "ok", ""
    try:
        lo = load_object(data, resolve=resolve)
    except LoaderError as exc:  # e.g. a PC32 field that fits at BASE but not at the real address
        return "ok, load: " + type(exc).__name__, str(exc)
    try:
        if lo.size != layout.size:
            raise InvariantViolation("mapped %d bytes, layout says %d" % (lo.size, layout.size))
        if check_maps:
            lines = _maps_overlapping(lo.base, lo.size)
            if not lines or any("w" in ln.split()[1] and "x" in ln.split()[1] for ln in lines):
                raise InvariantViolation("mapping of the image is missing or writable+executable: %s" % lines)
    finally:
        lo.close()
    if check_maps and _maps_overlapping(lo.base, lo.size):
        raise InvariantViolation("image at 0x%x is still mapped after close()" % lo.base)
    return "ok, mapped", ""


def forget_layouts() -> None:
    """Drop memoised layouts: mutated objects are all distinct, keeping them only costs memory."""
    _layout._layout_cache.clear()


def normalise(message: str) -> str:
    """An error message with numbers and names blanked, for counting reasons."""
    text = re.sub(r"0x[0-9a-f]+|\d+", "N", message.splitlines()[0] if message else "")
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", text)
    return text[:90]


# --- the long run -------------------------------------------------------------------------------


class Hang(Exception):
    """An input ran past its time limit."""


def _on_alarm(signum, frame):  # noqa: ARG001
    raise Hang()


_SEEDS: List[Tuple[str, bytes]] = []


def make_input(seed: int, index: int) -> Tuple[str, bytes, List[Mutation], str]:
    rng = random.Random(seed * (1 << 32) + index)
    label, obj = _SEEDS[rng.randrange(len(_SEEDS))]
    mutations = random_mutations(rng)
    resolver = rng.choice(RESOLVER_NAMES)
    return label, apply_mutations(obj, mutations), mutations, resolver


def _work(task: Tuple[int, int, int, bool, float]) -> dict:
    seed, start, stop, load, timeout = task
    outcomes: Counter[str] = collections.Counter()
    reasons: Counter[str] = collections.Counter()
    kinds_ok: Counter[str] = collections.Counter()
    bugs: List[str] = []
    signal.signal(signal.SIGALRM, _on_alarm)
    for index in range(start, stop):
        label, data, mutations, resolver = make_input(seed, index)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        message = ""
        try:
            outcome, message = classify(data, resolver, load)
        except Hang:
            outcome = "BUG Hang"
            bugs.append("%d:%d %s %s timed out after %.0f s" % (seed, index, label, mutations, timeout))
        except Exception as exc:  # noqa: BLE001 - every other exception is the finding
            outcome = "BUG %s" % type(exc).__name__
            if len(bugs) < 20:
                bugs.append("%d:%d %s %s -> %s: %s" % (seed, index, label, mutations, type(exc).__name__, exc))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        outcomes[outcome] += 1
        if outcome.startswith("ok"):
            kinds_ok.update({m[0] for m in mutations})
        if message:
            reasons[normalise(message)] += 1
        forget_layouts()
    return {
        "outcomes": dict(outcomes),
        "reasons": dict(reasons),
        "kinds_ok": dict(kinds_ok),
        "bugs": bugs,
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "count": stop - start,
    }


def _limit_memory(mib: int) -> None:
    if mib > 0:
        limit = mib << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _results(pool: concurrent.futures.Executor, tasks: list):
    pending = {pool.submit(_work, t): t for t in tasks}
    try:
        for fut in concurrent.futures.as_completed(pending):
            yield fut.result()
    except concurrent.futures.process.BrokenProcessPool:
        print("a worker process died (crash or killed): the inputs of its unit did not complete", file=sys.stderr)
        raise SystemExit(1)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="inputs to run (default 1,000,000)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: CPUs)")
    parser.add_argument("--seed", type=int, default=0, help="run seed (input i uses Random(seed * 2**32 + i))")
    parser.add_argument("--chunk", type=int, default=5000, help="inputs per work unit")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds one input may take before it counts as a hang"
    )
    parser.add_argument("--no-load", action="store_true", help="relocate only, never map")
    parser.add_argument(
        "--max-memory",
        type=int,
        default=4096,
        metavar="MIB",
        help="address-space limit per worker (default 4096 MiB): a runaway allocation "
        "becomes a MemoryError (counted as a bug) instead of a visit from the OOM killer",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    parser.add_argument("--replay", metavar="SEED:INDEX", help="run one input verbosely and exit")
    args = parser.parse_args(argv)

    started = time.time()
    _SEEDS[:] = compile_seeds()
    print("seeds: %s" % ", ".join("%s (%d B)" % (label, len(obj)) for label, obj in _SEEDS), flush=True)

    if args.replay:
        seed, index = (int(x) for x in args.replay.split(":"))
        label, data, mutations, resolver = make_input(seed, index)
        print("input %d:%d: seed object %s, resolver %s, mutations:" % (seed, index, label, resolver))
        for m in mutations:
            print("   ", m)
        outcome, message = classify(data, resolver, not args.no_load, check_maps=True)  # a bug raises here
        print("outcome: %s%s" % (outcome, ": " + message if message else ""))
        return 0

    ctx = multiprocessing.get_context("fork")  # workers inherit the compiled seeds
    tasks = [
        (args.seed, lo, min(lo + args.chunk, args.n), not args.no_load, args.timeout)
        for lo in range(0, args.n, args.chunk)
    ]
    total: Counter[str] = collections.Counter()
    reasons: Counter[str] = collections.Counter()
    kinds_ok: Counter[str] = collections.Counter()
    bugs: List[str] = []
    done = maxrss = 0
    # ProcessPoolExecutor, not Pool: a worker that dies (a crash in native code, the OOM
    # killer) raises BrokenProcessPool here instead of hanging the run forever.
    with concurrent.futures.ProcessPoolExecutor(
        max(1, args.jobs), mp_context=ctx, initializer=_limit_memory, initargs=(args.max_memory,)
    ) as pool:
        for part in _results(pool, tasks):
            total.update(part["outcomes"])
            reasons.update(part["reasons"])
            kinds_ok.update(part["kinds_ok"])
            bugs.extend(part["bugs"])
            maxrss = max(maxrss, part["maxrss_kib"])
            done += part["count"]
            if done % (args.chunk * 20) == 0 or done == args.n:
                so_far = sum(v for k, v in total.items() if k.startswith("BUG"))
                print(
                    "%9d / %d inputs, %.0f s, bugs so far: %d" % (done, args.n, time.time() - started, so_far),
                    flush=True,
                )
    elapsed = time.time() - started
    nbugs = sum(v for k, v in total.items() if k.startswith("BUG"))
    print(
        "\n%d inputs in %.0f s (%.0f inputs/s, %d jobs), worker peak RSS %.0f MiB"
        % (done, elapsed, done / elapsed, args.jobs, maxrss / 1024)
    )
    print("\noutcome                                   count")
    for outcome, count in sorted(total.items(), key=lambda kv: -kv[1]):
        print("  %-38s %9d  %5.1f%%" % (outcome, count, 100.0 * count / max(done, 1)))
    print("\nmost frequent loader-error reasons (numbers and names blanked)")
    for reason, count in reasons.most_common(15):
        print("  %8d  %s" % (count, reason))
    print("\ninputs that relocated despite a mutation of each kind: %s" % dict(sorted(kinds_ok.items())))
    for bug in bugs[:20]:
        print("BUG:", bug)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "inputs": done,
                    "seconds": elapsed,
                    "jobs": args.jobs,
                    "seed": args.seed,
                    "outcomes": dict(total),
                    "reasons": dict(reasons.most_common(30)),
                    "kinds_ok": dict(kinds_ok),
                    "bugs": bugs,
                    "seeds": [label for label, _ in _SEEDS],
                    "worker_maxrss_kib": maxrss,
                },
                fh,
                indent=1,
            )
    print(
        "\nresult: %s"
        % (
            "FAIL, %d inputs raised something other than LoaderError" % nbugs
            if nbugs
            else "PASS, every input relocated or raised a LoaderError"
        )
    )
    return 1 if nbugs else 0


if __name__ == "__main__":
    sys.exit(main())
