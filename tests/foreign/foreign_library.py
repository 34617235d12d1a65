"""A C driver that calls every kernel of a prebuilt library object, built from the kernels' signatures.

Each entry point gets small deterministic inputs derived from its signature
(``svod_min.kernels.lookup.generated().KERNELS``): its variables take values
from ``VALUES`` (by family, then by name: odd sizes, so that vector loops run
their remainders), every buffer is sized by its count expression, read buffers
are filled from a fixed pool of exactly representable values per dtype, written
buffers start as ``0xa5`` bytes. The driver calls the kernel once with one core
id and then as three core ids in turn, and prints every written buffer in hex:
the output of the object linked by a real linker and of svod_min's relocated
image must agree byte for byte. A kernel these rules cannot drive (an unknown
variable or dtype, a failed argument check, a buffer over the pool) gets a
reason instead and is reported skipped, never passed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from svod_min.kernels.lookup import generated
from svod_min.kernels.sig import compile_expr

#: Variable values by name; ``FAMILY_VALUES`` overrides them per family.
VALUES: Dict[str, Any] = {
    "n": 37,
    "outer": 3,
    "red": 5,
    "inner": 4,
    "so": 20,
    "sr": 4,
    "si": 1,
    "rows": 3,
    "cols": 37,
    "eps": 1e-5,
    "M": 7,
    "N": 19,
    "K": 13,
    "e0": 2,
    "e1": 3,
    "e2": 4,
    "e3": 5,
    "t0": 60,
    "t1": 1,
    "t2": 5,
    "t3": 15,
    "start": -5,
    "step": 3,
}
FAMILY_VALUES: Dict[str, Dict[str, Any]] = {
    "copy": {"rows": 5},
    "conv2d": {
        "N": 2,
        "C": 3,
        "H": 7,
        "W": 6,
        "OC": 4,
        "KH": 3,
        "KW": 2,
        "sh": 1,
        "sw": 2,
        "ph": 1,
        "pw": 0,
        "dh": 1,
        "dw": 1,
    },
}
CORES = 3  # the second call: this many core ids, one after the other
POOL = 512  # elements per dtype
MAX_BYTES = 8192  # per buffer
C_TYPES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int32": 4, "bool": 1}


def _pool_values(i: int) -> float:
    """k/32 for |k| <= 128: exact in float16 and bfloat16 alike, never zero-heavy."""
    return ((i * 7919) % 257 - 128) / 32.0


def pool_bytes(dtype: str) -> bytes:
    """POOL elements of ``dtype``: floats in [-4, 4], non-zero int32s in [-9, 9], bools."""
    out = bytearray()
    for i in range(POOL):
        v = _pool_values(i)
        if dtype == "float32":
            out += struct.pack("<f", v)
        elif dtype == "float64":
            out += struct.pack("<d", v)
        elif dtype == "float16":
            out += struct.pack("<e", v)
        elif dtype == "bfloat16":
            out += struct.pack("<f", v)[2:]  # exact: at most 8 significant bits
        elif dtype == "int32":
            k = (i * 7) % 18 - 9
            out += struct.pack("<i", k if k else 5)  # no zero divisors
        else:
            out += bytes([(i * 5) % 3 == 0])
    return bytes(out)


@dataclass(frozen=True)
class Call:
    """One kernel to drive: its buffers' (dtype, role, count) and its int32 arguments, or why it cannot be."""

    entry: str
    buffers: Tuple[Tuple[str, str, int], ...] = ()
    args: Tuple[int, ...] = ()  # the variables before core_id_count, core_id
    skip: Optional[str] = None


def _var_value(name: str, kind: str, family: str) -> Optional[int]:
    value = FAMILY_VALUES.get(family, {}).get(name, VALUES.get(name))
    if value is None:
        return None
    if kind == "f32":
        return int(struct.unpack("<i", struct.pack("<f", float(value)))[0])
    return int(value)


def plan_call(row: Mapping[str, Any]) -> Call:
    """The call the driver makes for one signature row of KERNELS."""
    entry, family = row["entry"], row["family"]
    names = [v[0] for v in row["vars"]]
    if names[-2:] != ["core_id_count", "core_id"]:
        return Call(entry, skip="the variables do not end with core_id_count, core_id")
    env: Dict[str, int] = {}
    for name, low, kind in row["vars"][:-2]:
        value = _var_value(name, kind, family)
        if value is None:
            return Call(entry, skip="no input rule for variable %s" % name)
        if kind == "int" and value < low:
            return Call(entry, skip="the rule for %s (%d) is below its bound %d" % (name, value, low))
        env[name] = value
    env.update(core_id_count=1, core_id=0)
    for check in row.get("checks", ()):
        if not compile_expr(check)(env):
            return Call(entry, skip="the inputs fail its check %s" % check)
    buffers = []
    for name, dtype, role, count in row["buffers"]:
        if dtype not in C_TYPES:
            return Call(entry, skip="no input pool for dtype %s (buffer %s)" % (dtype, name))
        n = int(compile_expr(count)(env))
        if n * C_TYPES[dtype] > MAX_BYTES or (role != "w" and n > POOL):
            return Call(entry, skip="buffer %s needs %d elements, over the driver's limit" % (name, n))
        buffers.append((dtype, role, n))
    return Call(entry, tuple(buffers), tuple(env[v[0]] for v in row["vars"][:-2]))


def library_calls(exclude: Sequence[str]) -> List[Call]:
    """One call per entry point of a variant's object (the first signature of a shared entry)."""
    seen: Dict[str, Call] = {}
    for row in generated().KERNELS:
        if row["entry"] not in seen and row["entry"] not in set(exclude):
            seen[row["entry"]] = plan_call(row)
    return sorted(seen.values(), key=lambda c: c.entry)


def _c_bytes(data: bytes) -> str:
    return ",".join(str(b) for b in data)


def driver_source(calls: Sequence[Call]) -> str:
    """C defining ``run_case()`` for harness.c: every drivable call, its written buffers printed in hex."""
    out = ["#include <stdio.h>", "#include <string.h>", "#include <stdint.h>", "void *svod_sym(const char *);"]
    for dtype in sorted(C_TYPES):
        out.append("static const unsigned char pool_%s[] = {%s};" % (dtype, _c_bytes(pool_bytes(dtype))))
    out.append("static unsigned char buf[8][%d] __attribute__((aligned(64)));" % MAX_BYTES)
    out.append(r"""static void dump(const char *entry, int pass, int b, size_t n) {
    printf("%s %d %d ", entry, pass, b);
    for (size_t i = 0; i < n; i++) printf("%02x", buf[b][i]);
    printf("\n");
}""")
    body = []
    for k, call in enumerate(c for c in calls if c.skip is None):
        nb = len(call.buffers)
        proto = ", ".join(["void *"] * nb + ["int32_t"] * (len(call.args) + 2))
        out.append("typedef void (*fn_%d)(%s);" % (k, proto))
        out.append("static void call_%d(int pass, int32_t cores) {" % k)
        out.append('    fn_%d f = (fn_%d)svod_sym("%s");' % (k, k, call.entry))
        for b, (dtype, role, n) in enumerate(call.buffers):
            size = n * C_TYPES[dtype]
            if role == "w":
                out.append("    memset(buf[%d], 0xa5, %d);" % (b, size))
            else:  # each read buffer from its own offset of the pool
                start = (b * 13 % (POOL - n + 1)) * C_TYPES[dtype] if n < POOL else 0
                out.append("    memcpy(buf[%d], pool_%s + %d, %d);" % (b, dtype, start, size))
        args = ", ".join(["buf[%d]" % b for b in range(nb)] + [str(a) for a in call.args] + ["cores", "c"])
        out.append("    for (int32_t c = 0; c < cores; c++) f(%s);" % args)
        for b, (dtype, role, n) in enumerate(call.buffers):
            if role != "r":
                out.append('    dump("%s", pass, %d, %d);' % (call.entry, b, n * C_TYPES[dtype]))
        out.append("}")
        body += ["    call_%d(0, 1);" % k, "    call_%d(1, %d);" % (k, CORES)]
    out.append("void run_case(void) {")
    out += body
    out.append("}")
    return "\n".join(out) + "\n"


def outputs_by_entry(text: str) -> Dict[str, List[str]]:
    """A driver's output lines grouped by entry point."""
    found: Dict[str, List[str]] = {}
    for line in text.splitlines():
        entry, _, rest = line.partition(" ")
        found.setdefault(entry, []).append(rest)
    return found
